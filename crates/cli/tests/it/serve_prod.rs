//! `bertflow serve` in production mode, end to end with the real model: API key from
//! the environment, JSON request logs on stderr (without the input texts), /metrics,
//! and /tokenize.
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_bertflow");

fn model_dir() -> PathBuf {
    std::env::var("BERTFLOW_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        })
}

/// One serve test at a time, with those of the other modules (common/serve.rs).
fn serial() -> MutexGuard<'static, ()> {
    crate::common::serve::serial()
}

struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(BIN)
            .env("BERTFLOW_TUNE", "0")
            .arg("serve")
            .arg("--model")
            .arg(model_dir())
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start bertflow serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&log);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_string());
                }
                let mut log = sink.lock().unwrap_or_else(|e| e.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no address; stderr:\n{}", log.lock().unwrap()));
        Server { child, base, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn call(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let mut request = match body {
        Some(b) => client.post(url).json(b),
        None => client.get(url),
    };
    if let Some(k) = key {
        request = request.bearer_auth(k);
    }
    let response = request.send().await.expect("HTTP");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

const SECRET_TEXT: &str = "The confidential merger of Zanzibar Widgets closes on Friday.";
const KEY: &str = "test-key-3f9a1c";

#[test]
fn key_from_env_json_logs_without_inputs_metrics_and_tokenize() {
    let _guard = serial();
    let server = Server::start(&["--log-format", "json"], &[("BERTFLOW_API_KEY", KEY)]);
    let client = reqwest::Client::new();
    runtime().block_on(async {
        let (status, _) = call(&client, &server.url("/health"), None, None).await;
        assert_eq!(status, 200);
        let body = json!({"input": [SECRET_TEXT, "A man is playing a guitar."]});
        let (status, text) = call(&client, &server.url("/v1/embeddings"), None, Some(&body)).await;
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("invalid_api_key"), "{text}");
        let (status, text) = call(
            &client,
            &server.url("/v1/embeddings"),
            Some("nope-nope"),
            Some(&body),
        )
        .await;
        assert_eq!(status, 401, "{text}");
        assert!(!text.contains("nope-nope"), "{text}");
        let (status, text) = call(
            &client,
            &server.url("/v1/embeddings"),
            Some(KEY),
            Some(&body),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let reply: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(reply["data"].as_array().unwrap().len(), 2);

        // The tokens the model sees (all-MiniLM-L6-v2 is uncased WordPiece).
        let (status, text) = call(
            &client,
            &server.url("/tokenize"),
            Some(KEY),
            Some(&json!({"input": "A man is playing a guitar."})),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let reply: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            reply["data"][0]["tokens"],
            json!(["[CLS]", "a", "man", "is", "playing", "a", "guitar", ".", "[SEP]"])
        );
        assert_eq!(reply["data"][0]["ids"][0], 101);
        assert_eq!(reply["data"][0]["truncated"], false);

        let (status, metrics) = call(&client, &server.url("/metrics"), Some(KEY), None).await;
        assert_eq!(status, 200);
        for line in [
            "bertflow_requests_total{route=\"/v1/embeddings\",status=\"200\"} 1",
            "bertflow_requests_total{route=\"/v1/embeddings\",status=\"401\"} 2",
            "bertflow_requests_total{route=\"/tokenize\",status=\"200\"} 1",
            "bertflow_requests_total{route=\"/health\",status=\"200\"} 1",
            "bertflow_inputs_total{route=\"/v1/embeddings\"} 2",
        ] {
            assert!(
                metrics.lines().any(|l| l == line),
                "{line} missing:\n{metrics}"
            );
        }
    });
    // The log lines are written after the answers; give the last one a moment.
    std::thread::sleep(Duration::from_millis(300));
    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "bertflow_server::access")
        .collect();
    let ok = lines
        .iter()
        .find(|v| v["route"] == "/v1/embeddings" && v["status"] == 200)
        .unwrap_or_else(|| panic!("no access line for the embeddings request:\n{log}"));
    assert_eq!(ok["inputs"], 2);
    assert!(ok["request_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(ok["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    assert_eq!(
        lines
            .iter()
            .filter(|v| v["route"] == "/v1/embeddings" && v["status"] == 401)
            .count(),
        2
    );
    assert!(!log.contains("Zanzibar"), "input text in the log:\n{log}");
    assert!(
        !log.contains(KEY) && !log.contains("nope-nope"),
        "a key in the log:\n{log}"
    );
    drop(server);

    // With --log-inputs the texts are logged.
    let server = Server::start(&["--log-inputs"], &[]);
    runtime().block_on(async {
        let (status, _) = call(
            &client,
            &server.url("/v1/embeddings"),
            None,
            Some(&json!({"input": SECRET_TEXT})),
        )
        .await;
        assert_eq!(status, 200);
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.log().contains("Zanzibar"), "{}", server.log());
}
