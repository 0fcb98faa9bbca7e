//! `bertflow index build|add|ann|info|verify` and `serve --index` end to end with the
//! real model: the index answers /search exactly as `serve --corpus` does, appends
//! keep the old sentences, an index of another pooling is refused at start-up, a
//! damaged file is caught by `index verify` and `serve --index-verify`, a torn end
//! opens in the last complete state, the HNSW
//! graph is stored and used, and the playground page is served.
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_bertflow");

fn model_dir() -> PathBuf {
    std::env::var("BERTFLOW_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        })
}

const CORPUS: [&str; 12] = [
    "A man is playing a guitar.",
    "A woman is slicing onions.",
    "Two dogs run across a field.",
    "The stock market fell sharply today.",
    "A child is riding a bicycle.",
    "Someone is cooking pasta in the kitchen.",
    "A cat sleeps on the sofa.",
    "The orchestra performs a symphony.",
    "Heavy rain floods the streets.",
    "A boy kicks a football.",
    "The chef chops vegetables.",
    "A pianist plays a concert.",
];

fn bertflow(args: &[&str]) -> Output {
    Command::new(BIN)
        .env("BERTFLOW_TUNE", "0")
        .args(args)
        .env("BERTFLOW_MODEL", model_dir())
        .env_remove("BERTFLOW_API_KEY")
        .output()
        .expect("run bertflow")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "bertflow failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    /// Start `serve` with `extra`; `Err(stderr)` if it exits before listening.
    fn start(extra: &[&str]) -> Result<Server, String> {
        let mut child = Command::new(BIN)
            .env("BERTFLOW_TUNE", "0")
            .arg("serve")
            .args(["--model", model_dir().to_str().unwrap()])
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .env_remove("BERTFLOW_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start bertflow serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut log = String::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(Ok(addr.trim().to_string()));
                }
                log.push_str(&line);
                log.push('\n');
            }
            let _ = tx.send(Err(log));
        });
        match rx.recv_timeout(Duration::from_secs(90)) {
            Ok(Ok(base)) => Ok(Server { child, base }),
            Ok(Err(log)) => {
                let _ = child.wait();
                Err(log)
            }
            Err(_) => panic!("serve neither listened nor exited"),
        }
    }

    fn get(&self, path: &str) -> (u16, String) {
        let r = reqwest::blocking_get(&format!("{}{path}", self.base));
        r
    }

    fn post(&self, path: &str, body: &Value) -> Value {
        let (status, text) = reqwest::blocking_post(&format!("{}{path}", self.base), body);
        assert_eq!(status, 200, "{path}: {text}");
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Tiny blocking wrappers over the async reqwest client (the dev-dependency has no
/// blocking feature).
mod reqwest {
    use serde_json::Value;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    pub fn blocking_get(url: &str) -> (u16, String) {
        runtime().block_on(async {
            let r = ::reqwest::get(url).await.expect("HTTP");
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    }

    pub fn blocking_post(url: &str, body: &Value) -> (u16, String) {
        runtime().block_on(async {
            let r = ::reqwest::Client::new()
                .post(url)
                .json(body)
                .send()
                .await
                .expect("HTTP");
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    }
}

fn write_corpus(dir: &Path, name: &str, lines: &[&str]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.to_str().unwrap().to_owned()
}

fn hits(v: &Value) -> Vec<(u64, String, f64)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["index"].as_u64().unwrap(),
                h["text"].as_str().unwrap().to_owned(),
                h["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn index_build_serve_add_verify_and_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_corpus(dir.path(), "a.txt", &CORPUS[..8]);
    let more = write_corpus(dir.path(), "b.txt", &CORPUS[8..]);
    let all = write_corpus(dir.path(), "all.txt", &CORPUS);
    let idx = dir.path().join("c.idx");
    let idx_s = idx.to_str().unwrap();

    let out = ok(&bertflow(&[
        "index", "build", "--corpus", &first, "--output", idx_s, "--chunk", "5",
    ]));
    assert!(out.contains("wrote 8 sentences"), "{out}");
    let out = ok(&bertflow(&[
        "index", "add", "--corpus", &more, "--index", idx_s,
    ]));
    assert!(
        out.contains("added 4 sentences") && out.contains("(12 in all)"),
        "{out}"
    );
    let info = ok(&bertflow(&["index", "info", "--index", idx_s]));
    assert!(
        info.contains("12 sentences in 3 segment(s), dimension 384")
            && info.contains("pooling last-avg")
            && info.contains("calibrator none")
            && info.contains("HNSW graph no"),
        "{info}"
    );
    ok(&bertflow(&["index", "verify", "--index", idx_s]));

    // /search over the index equals /search over the same corpus embedded at start-up.
    let query = json!({"query": "someone plays an instrument", "top_k": 12});
    let from_corpus = {
        let s = Server::start(&["--corpus", &all]).unwrap();
        hits(&s.post("/search", &query))
    };
    let s = Server::start(&["--index", idx_s]).unwrap();
    let from_index = hits(&s.post("/search", &query));
    assert_eq!(from_index.len(), 12);
    for (a, b) in from_index.iter().zip(&from_corpus) {
        assert_eq!((a.0, &a.1), (b.0, &b.1));
        assert!((a.2 - b.2).abs() < 1e-5, "{a:?} vs {b:?}");
    }
    let info: Value = serde_json::from_str(&s.get("/info").1).unwrap();
    assert_eq!(info["corpus_size"], 12);
    assert_eq!(info["search_method"], "exact");
    // The playground page and its entry in the OpenAPI description.
    let (status, page) = s.get("/");
    assert_eq!(status, 200);
    assert!(page.contains("<title>bertflow playground</title>"));
    assert!(!page.contains("http://") && !page.contains("https://"));
    assert!(s.get("/openapi.json").1.contains("\"/\""));
    drop(s);

    // Another pooling: refused at start-up, naming the difference.
    let err = Server::start(&["--index", idx_s, "--pooling", "cls"])
        .err()
        .unwrap();
    assert!(
        err.contains("the index") && err.contains("built with pooling last-avg, not cls"),
        "{err}"
    );
    // Appending with another pooling is refused too.
    let err = fails(&bertflow(&[
        "index",
        "add",
        "--corpus",
        &more,
        "--index",
        idx_s,
        "--pooling",
        "cls",
    ]));
    assert!(
        err.contains("built with pooling last-avg, not cls"),
        "{err}"
    );

    // A flipped bit in a vector: `index verify` and `serve --index-verify` refuse the file;
    // the cheap open at start-up does not read the vectors.
    let mut bytes = std::fs::read(&idx).unwrap();
    bytes[64 + 4 * 384 + 17] ^= 0x20;
    std::fs::write(&idx, &bytes).unwrap();
    let err = fails(&bertflow(&["index", "verify", "--index", idx_s]));
    assert!(err.contains("checksum mismatch"), "{err}");
    let err = Server::start(&["--index", idx_s, "--index-verify"])
        .err()
        .unwrap();
    assert!(err.contains("checksum mismatch"), "{err}");
    drop(Server::start(&["--index", idx_s]).unwrap());
    // A torn end (what an interrupted `index add` leaves): the index opens in its
    // last complete state, the 8 sentences of the build, and says so.
    std::fs::write(&idx, &bytes[..bytes.len() - 3]).unwrap();
    let s = Server::start(&["--index", idx_s]).unwrap();
    let info: Value = serde_json::from_str(&s.get("/info").1).unwrap();
    assert_eq!(info["corpus_size"], 8);
    drop(s);
    let out = bertflow(&["index", "info", "--index", idx_s]);
    assert!(ok(&out).contains(": 8 sentences"));
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(note.contains("interrupted `index add`"), "{note}");
    // A file with no complete state at all is refused at once.
    std::fs::write(&idx, &bytes[..1000]).unwrap();
    let err = Server::start(&["--index", idx_s]).err().unwrap();
    assert!(err.contains("corrupt index"), "{err}");
}

#[test]
fn ann_graph_is_built_stored_and_served() {
    let dir = tempfile::tempdir().unwrap();
    let all = write_corpus(dir.path(), "all.txt", &CORPUS);
    let idx = dir.path().join("c.idx");
    let idx_s = idx.to_str().unwrap();
    let out = ok(&bertflow(&[
        "index",
        "build",
        "--corpus",
        &all,
        "--output",
        idx_s,
        "--ann",
        "--hnsw-m",
        "8",
        "--ef-construction",
        "32",
    ]));
    assert!(
        out.contains("built the HNSW graph") && out.contains("12 in all"),
        "{out}"
    );
    assert!(dir.path().join("c.idx.g1.hnsw.graph").is_file());
    assert!(
        ok(&bertflow(&["index", "verify", "--index", idx_s])).contains("HNSW graph of 12 points")
    );

    let s = Server::start(&["--index", idx_s, "--ann", "--ef-search", "32"]).unwrap();
    // The graph loads in the background (exact search meanwhile).
    let mut method = Value::Null;
    for _ in 0..200 {
        let info: Value = serde_json::from_str(&s.get("/info").1).unwrap();
        method = info["search_method"].clone();
        if method != "exact (HNSW graph loading)" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(method, "hnsw(m=8, ef_construction=32, ef_search=32)");
    let query = json!({"query": "a musician performs", "top_k": 12});
    let approx = hits(&s.post("/search", &query));
    drop(s);
    let s = Server::start(&["--index", idx_s]).unwrap();
    let exact = hits(&s.post("/search", &query));
    drop(s);
    // 12 points and ef 32: the graph finds all of them, with the exact scores.
    assert_eq!(approx.len(), 12);
    for (a, b) in approx.iter().zip(&exact) {
        assert_eq!(a.0, b.0);
        assert!((a.2 - b.2).abs() < 1e-6);
    }

    // --ann on an index without a graph is refused with the command that builds one.
    let plain = dir.path().join("plain.idx");
    ok(&bertflow(&[
        "index",
        "build",
        "--corpus",
        &all,
        "--output",
        plain.to_str().unwrap(),
    ]));
    let err = Server::start(&["--index", plain.to_str().unwrap(), "--ann"])
        .err()
        .unwrap();
    assert!(
        err.contains("has no HNSW graph") && err.contains("bertflow index ann"),
        "{err}"
    );
}
