//! Helpers shared by the end-to-end tests of `bertflow serve` (tests/serve.rs
//! and tests/serve_load.rs): the test sentences and the reference vectors
//! `bertflow encode` gives for them (raw and calibrated), the global lock that
//! runs those tests one at a time, a `bertflow serve` child process started on
//! 127.0.0.1 with an OS-chosen port, and the HTTP and embedding-check helpers.
//! The model is models/all-MiniLM-L6-v2, or $BERTFLOW_TEST_MODEL.

use bertflow_calib::{CalibSpec, CalibratorMeta, FitOptions};
use ndarray::Array2;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::read_npy;

pub const BIN: &str = env!("CARGO_BIN_EXE_bertflow");
/// Largest absolute difference allowed between a served vector and `bertflow encode`'s.
/// The encoder batches only sentences of equal token length (no padding), so a
/// sentence's vector does not depend on what the server packed it with.
pub const TOL: f32 = 1e-6;

/// Varied sentences: short, medium, long, punctuation, digits, non-ASCII.
/// None is longer than 512 tokens.
pub const SENTENCES: &[&str] = &[
    "A man is playing a guitar.",
    "A woman is slicing onions.",
    "A cat sleeps on the sofa.",
    "Two dogs are running through a field of tall grass.",
    "The stock market fell sharply on Tuesday after the central bank raised interest rates.",
    "Hi!",
    "What time does the train to Edinburgh leave?",
    "A child is riding a red bicycle down the street.",
    "Scientists have discovered a new species of frog in the Amazon rainforest.",
    "The quick brown fox jumps over the lazy dog.",
    "She poured the coffee, opened the window, and watched the rain fall on the empty square below.",
    "Ceci n'est pas une pipe.",
    "Der Hund läuft schnell über die Straße.",
    "東京は日本の首都です。",
    "Price: $19.99 (was $24.99) – save 20% today only!!!",
    "ok",
    "A man is playing the flute.",
    "Someone is cutting vegetables in the kitchen.",
    "The committee will review all applications submitted before 31 March 2024 and notify candidates by email.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "I can't believe it's not butter.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The orchestra played Beethoven's Ninth Symphony to a packed concert hall, and the audience rose to its feet \
     long before the final chord had faded, applauding for nearly ten minutes while the conductor bowed again and again.",
    "A plane is taking off.",
    "Three men are playing chess in the park.",
    "The recipe calls for two cups of flour, one teaspoon of baking soda, a pinch of salt, three eggs, \
     half a cup of melted butter and a generous handful of dark chocolate chips.",
    "Why is the sky blue?",
    "The new smartphone features a larger battery, a faster processor and an improved camera.",
    "After years of negotiations, the two countries finally signed a trade agreement that removes tariffs on \
     agricultural products, simplifies customs procedures at the border, creates a joint committee to settle \
     disputes, and commits both governments to reviewing the arrangement every five years, although critics \
     on both sides argue that the deal does too little to protect small farmers and local manufacturers from \
     competition, and several opposition parties have already promised to renegotiate it if they win the next election.",
    "A woman is dancing in the rain.",
    "The meeting has been postponed until further notice.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "He said, \"Don't forget your umbrella,\" but she forgot it anyway.",
    "Une femme lit un livre dans le jardin.",
    "The museum's collection includes paintings, sculptures, manuscripts, coins, textiles, ceramics and \
     photographs spanning more than four thousand years of human history, from the earliest cuneiform tablets \
     of Mesopotamia to contemporary installations by living artists, and it attracts several million visitors \
     every year from all over the world.",
    "A baby is laughing.",
    "Use `cargo test --release` to run the tests; it takes about a minute.",
    "The river flooded the village after three days of heavy rain.",
    "Emoji 🎉 and symbols ≤ ≥ ∑ are tokenised too.",
    "Nobody expected the small independent film, shot in eleven days on a shoestring budget with a cast of \
     unknown actors, to win the top prize at the festival, but the jury praised its honesty, its humour and the \
     remarkable performance of its fourteen-year-old lead.",
];

// ---------------------------------------------------------------------------
// Fixtures

pub fn model_dir() -> PathBuf {
    let p = std::env::var("BERTFLOW_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        });
    assert!(
        p.join("config.json").is_file(),
        "test model missing at {}: run scripts/fetch_model.sh (or set BERTFLOW_TEST_MODEL)",
        p.display()
    );
    p
}

/// One test at a time (see the module doc). A failed test poisons the lock;
/// the others still run.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("HTTP client")
}

/// POST `body` to `server` (on a runtime of its own); the status and the JSON
/// answer (null when the body is not JSON).
pub fn post_json(server: &Server, path: &str, body: Value) -> (u16, Value) {
    runtime().block_on(async {
        let r = client()
            .post(server.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    })
}

/// Reference vectors from `bertflow encode`, raw and calibrated, computed once.
pub struct Reference {
    dir: tempfile::TempDir,
    pub raw: Array2<f32>,
    pub calibrated: Array2<f32>,
    /// Output dimension of the calibrator.
    pub calibrated_dim: usize,
}

impl Reference {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

pub fn reference() -> &'static Reference {
    static REF: OnceLock<Reference> = OnceLock::new();
    REF.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let sentences = dir.path().join("sentences.txt");
        std::fs::write(&sentences, SENTENCES.join("\n") + "\n").unwrap();
        let raw_npy = dir.path().join("raw.npy");
        encode(&sentences, &raw_npy, &[]);
        let raw = read_npy(&raw_npy);
        assert_eq!(raw.nrows(), SENTENCES.len());

        // Whitening keeping 32 directions, fitted on the sentences themselves, saved
        // as if for another model (so serve needs --allow-mismatch).
        let spec: CalibSpec = "whiten:k=32".parse().unwrap();
        let fitted = bertflow_calib::fit(&spec, raw.view(), &mut FitOptions::new()).unwrap();
        let mut meta = CalibratorMeta::new(
            "some-other-model@0000",
            "last-avg",
            raw.ncols(),
            raw.nrows(),
        );
        // It carries uSIF token weights (counted on the sentences): `encode
        // --calibrator` applies them, and the served vectors must equal its output.
        let enc = bertflow_encoder::Encoder::load(model_dir().to_str().unwrap(), None).unwrap();
        let texts: Vec<String> = SENTENCES.iter().map(|s| s.to_string()).collect();
        let weights = bertflow_core::weighting::Weighting::new("usif".parse().unwrap())
            .weights(&enc, &texts)
            .unwrap()
            .expect("usif has weights");
        meta.weighting = Some(
            bertflow_core::weighting::Weighting {
                freq_file: Some("test".into()),
                ..Default::default()
            }
            .record(&weights),
        );
        let calib = dir.path().join("whiten.safetensors");
        fitted.save(&calib, &meta).unwrap();

        let cal_npy = dir.path().join("calibrated.npy");
        let calib_arg = calib.to_str().unwrap().to_string();
        encode(
            &sentences,
            &cal_npy,
            &["--calibrator", &calib_arg, "--allow-mismatch"],
        );
        let calibrated = read_npy(&cal_npy);
        assert_eq!(calibrated.nrows(), SENTENCES.len());
        let calibrated_dim = calibrated.ncols();
        assert!(
            calibrated_dim < raw.ncols(),
            "whiten:k=32 should reduce the dimension"
        );
        Reference {
            dir,
            raw,
            calibrated,
            calibrated_dim,
        }
    })
}

/// `bertflow encode --no-cache` of `input` into `output` (.npy).
fn encode(input: &Path, output: &Path, extra: &[&str]) {
    let out = Command::new(BIN)
        .env("BERTFLOW_TUNE", "0")
        .arg("encode")
        .arg("--model")
        .arg(model_dir())
        .args(["--no-cache", "-q", "-i"])
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(extra)
        .output()
        .expect("run bertflow encode");
    assert!(
        out.status.success(),
        "bertflow encode failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------
// The server process

/// A running `bertflow serve`; killed when dropped (also when a test fails).
pub struct Server {
    child: Child,
    pub base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Start `bertflow serve --port 0` with `extra` options and wait until it
    /// answers /health.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_child(spawn_serve(extra))
    }

    /// Start `bertflow serve` with exactly `args` (no --model, --host or
    /// --port added): the command lines of other servers' documentation.
    pub fn start_raw(args: &[&str]) -> Server {
        let child = Command::new(BIN)
            .env("BERTFLOW_TUNE", "0")
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start bertflow serve");
        Server::start_child(child)
    }

    fn start_child(mut child: Child) -> Server {
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&log);
        // Keep draining stderr for the whole life of the process, so it never blocks.
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
        let mut server = Server {
            child,
            base: String::new(),
            log,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(base) => server.base = base,
            Err(_) => panic!("the server printed no address; stderr:\n{}", server.log()),
        }
        assert!(
            server.base.starts_with("http://127.0.0.1:"),
            "{}",
            server.base
        );
        server.wait_healthy();
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// /health answers 200 (after any corpus indexing).
    fn wait_healthy(&self) {
        let url = self.url("/health");
        let healthy = runtime().block_on(async {
            let client = client();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(r) = client.get(&url).send().await {
                    if r.status() == StatusCode::OK {
                        return true;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        });
        assert!(
            healthy,
            "the server never became healthy; stderr:\n{}",
            self.log()
        );
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Wait for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit within {limit:?}; stderr:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then expect a clean exit (status 0) within 30 s.
    pub fn stop(mut self) {
        self.sigterm();
        let status = self.wait_exit(Duration::from_secs(30));
        assert!(
            status.success(),
            "the server exited with {status}; stderr:\n{}",
            self.log()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `bertflow serve --port 0` with `extra` options, stderr piped, not yet waited on.
fn spawn_serve(extra: &[&str]) -> Child {
    Command::new(BIN)
        .env("BERTFLOW_TUNE", "0")
        .arg("serve")
        .arg("--model")
        .arg(model_dir())
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bertflow serve")
}

/// Start `bertflow serve` with `extra` options that must make it fail; return its stderr.
pub fn startup_failure(extra: &[&str]) -> String {
    let mut child = spawn_serve(extra);
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bertflow serve {extra:?} kept running; it should have refused to start");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = reader.join().unwrap_or_default();
    assert!(
        !status.success(),
        "bertflow serve {extra:?} exited with {status}; stderr:\n{text}"
    );
    text
}

// ---------------------------------------------------------------------------
// HTTP helpers

pub struct Reply {
    pub status: StatusCode,
    pub retry_after: Option<String>,
    pub body: Value,
}

pub async fn reply_of(result: reqwest::Result<reqwest::Response>) -> Reply {
    let response = result.expect("the request failed at the HTTP level");
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("").to_string());
    let bytes = response.bytes().await.expect("read the response body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Reply {
        status,
        retry_after,
        body,
    }
}

pub async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Reply {
    reply_of(client.post(url).json(body).send().await).await
}

pub async fn post_bytes(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Reply {
    reply_of(
        client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await,
    )
    .await
}

pub async fn get(client: &reqwest::Client, url: &str) -> Reply {
    reply_of(client.get(url).send().await).await
}

/// An error reply in OpenAI's shape with this status and code.
pub fn assert_error(reply: &Reply, status: u16, code: &str) {
    assert_eq!(
        reply.status.as_u16(),
        status,
        "expected {status} {code}, got {}",
        reply.body
    );
    let error = &reply.body["error"];
    assert_eq!(error["code"], code, "{}", reply.body);
    assert!(
        error["type"].as_str().is_some_and(|t| !t.is_empty()),
        "{}",
        reply.body
    );
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        reply.body
    );
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect()
}

/// Largest absolute difference; infinite when the lengths differ or a value is not finite.
pub fn max_diff(got: &[f32], want: ndarray::ArrayView1<f32>) -> f32 {
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    got.iter()
        .zip(want)
        .map(|(a, b)| {
            if a.is_finite() {
                (a - b).abs()
            } else {
                f32::INFINITY
            }
        })
        .fold(0.0, f32::max)
}

/// Check an embeddings reply for the sentences `idx` against `want` (one row per
/// sentence of [`SENTENCES`]); returns the largest difference or a description
/// of what is wrong.
pub fn check_embeddings(reply: &Reply, idx: &[usize], want: &Array2<f32>) -> Result<f32, String> {
    if reply.status != StatusCode::OK {
        return Err(format!("status {}: {}", reply.status, reply.body));
    }
    let data = reply.body["data"]
        .as_array()
        .ok_or_else(|| format!("no data: {}", reply.body))?;
    if data.len() != idx.len() {
        return Err(format!("{} vectors for {} inputs", data.len(), idx.len()));
    }
    if reply.body["truncated"] != json!([])
        || reply.body["usage"]["prompt_tokens"].as_u64().unwrap_or(0) < 3 * idx.len() as u64
    {
        return Err(format!("bad usage or truncated: {}", reply.body));
    }
    let mut worst = 0f32;
    for (j, (item, &i)) in data.iter().zip(idx).enumerate() {
        if item["index"] != j {
            return Err(format!("data[{j}] has index {}", item["index"]));
        }
        let d = max_diff(&floats(&item["embedding"]), want.row(i));
        if d > TOL {
            return Err(format!("sentence {i} differs from bertflow encode by {d}"));
        }
        worst = worst.max(d);
    }
    Ok(worst)
}
