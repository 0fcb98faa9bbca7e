//! `bertflow serve` end to end: the real binary with the real model
//! (models/all-MiniLM-L6-v2, or $BERTFLOW_TEST_MODEL) on 127.0.0.1 with an
//! OS-chosen port, driven over HTTP. Vectors are checked against
//! `bertflow encode` on the same sentences.
//!
//! The tests take a global lock so that they run one at a time: they share two
//! cores, and the overload and shutdown tests reason about a busy server.
use base64::Engine as _;
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

const BIN: &str = env!("CARGO_BIN_EXE_bertflow");
/// Largest absolute difference allowed between a served vector and `bertflow encode`'s.
/// The encoder batches only sentences of equal token length (no padding), so a
/// sentence's vector does not depend on what the server packed it with.
const TOL: f32 = 1e-6;

/// Varied sentences: short, medium, long, punctuation, digits, non-ASCII.
/// None is longer than 512 tokens.
const SENTENCES: &[&str] = &[
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

fn model_dir() -> PathBuf {
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
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("HTTP client")
}

/// Reference vectors from `bertflow encode`, raw and calibrated, computed once.
struct Reference {
    dir: tempfile::TempDir,
    raw: Array2<f32>,
    calibrated: Array2<f32>,
    /// Output dimension of the calibrator.
    calibrated_dim: usize,
}

impl Reference {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn reference() -> &'static Reference {
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
        meta.weighting = Some(bertflow_core::weighting::to_meta(&weights, "test".into()));
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

/// A tiny reader for the .npy files `bertflow encode` writes (2-D, '<f4', C order).
fn read_npy(path: &Path) -> Array2<f32> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(
        &b[..6],
        b"\x93NUMPY",
        "{} is not a .npy file",
        path.display()
    );
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + header_len]).unwrap();
    assert!(
        header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"),
        "{header}"
    );
    let shape = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(dims.len(), 2, "{header}");
    let data: Vec<f32> = b[10 + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Array2::from_shape_vec((dims[0], dims[1]), data).unwrap()
}

// ---------------------------------------------------------------------------
// The server process

/// A running `bertflow serve`; killed when dropped (also when a test fails).
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Start `bertflow serve --port 0` with `extra` options and wait until it
    /// answers /health.
    fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--model")
            .arg(model_dir())
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start bertflow serve");
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

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn log(&self) -> String {
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

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Wait for the process to exit, at most `limit`.
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
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
    fn stop(mut self) {
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

/// Start `bertflow serve` with `extra` options that must make it fail; return its stderr.
fn startup_failure(extra: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--model")
        .arg(model_dir())
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bertflow serve");
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

struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

async fn reply_of(result: reqwest::Result<reqwest::Response>) -> Reply {
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

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Reply {
    reply_of(client.post(url).json(body).send().await).await
}

async fn post_bytes(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Reply {
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

async fn get(client: &reqwest::Client, url: &str) -> Reply {
    reply_of(client.get(url).send().await).await
}

/// An error reply in OpenAI's shape with this status and code.
fn assert_error(reply: &Reply, status: u16, code: &str) {
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

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect()
}

/// Largest absolute difference; infinite when the lengths differ or a value is not finite.
fn max_diff(got: &[f32], want: ndarray::ArrayView1<f32>) -> f32 {
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

fn cosine(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// Deterministic pseudo-random numbers (splitmix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % n as u64) as usize
    }
}

/// Check an embeddings reply for the sentences `idx` against `want` (one row per
/// sentence of [`SENTENCES`]); returns the largest difference or a description
/// of what is wrong.
fn check_embeddings(reply: &Reply, idx: &[usize], want: &Array2<f32>) -> Result<f32, String> {
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

/// `clients` concurrent clients, each sending `per_client` requests of 1-3
/// sentences (a bare string or an array) to /v1/embeddings; every vector is
/// checked against `want`. Returns (vectors checked, largest difference).
async fn hammer(base: &str, want: &Array2<f32>, clients: usize, per_client: usize) -> (usize, f32) {
    let url = format!("{base}/v1/embeddings");
    let want = Arc::new(want.clone());
    let client = client();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (url, want, client) = (url.clone(), Arc::clone(&want), client.clone());
            tokio::spawn(async move {
                let mut rng = Rng(c as u64);
                let (mut vectors, mut worst) = (0usize, 0f32);
                for r in 0..per_client {
                    let k = 1 + rng.below(3);
                    let idx: Vec<usize> = (0..k).map(|_| rng.below(SENTENCES.len())).collect();
                    let input = if k == 1 && r % 2 == 0 {
                        json!(SENTENCES[idx[0]])
                    } else {
                        json!(idx.iter().map(|&i| SENTENCES[i]).collect::<Vec<_>>())
                    };
                    let reply = post(&client, &url, &json!({ "input": input })).await;
                    match check_embeddings(&reply, &idx, &want) {
                        Ok(d) => worst = worst.max(d),
                        Err(e) => return Err(format!("client {c} request {r} {idx:?}: {e}")),
                    }
                    vectors += k;
                }
                Ok((vectors, worst))
            })
        })
        .collect();
    let (mut vectors, mut worst) = (0, 0f32);
    let mut failures = Vec::new();
    for task in tasks {
        match task.await.expect("client task panicked") {
            Ok((v, w)) => {
                vectors += v;
                worst = worst.max(w);
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {clients} clients failed, e.g. {}",
        failures.len(),
        failures[0]
    );
    (vectors, worst)
}

/// Vectors each client of [`hammer`] should get back (same random draws).
fn expected_vectors(clients: usize, per_client: usize) -> usize {
    (0..clients)
        .map(|c| {
            let mut rng = Rng(c as u64);
            (0..per_client)
                .map(|_| {
                    let k = 1 + rng.below(3);
                    (0..k).for_each(|_| {
                        rng.below(SENTENCES.len());
                    });
                    k
                })
                .sum::<usize>()
        })
        .sum()
}

// ---------------------------------------------------------------------------
// Tests

#[test]
fn help_explains_every_option() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run bertflow serve --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--model",
        "--pooling",
        "--calibrator",
        "--allow-mismatch",
        "--corpus",
        "--host",
        "--port",
        "--workers",
        "--max-inputs-per-request",
        "--max-chars-per-input",
        "--max-body-bytes",
        "--max-queue-inputs",
        "--max-batch-tokens",
        "--max-batch-size",
        "--max-top-k",
        "SIGTERM",
    ] {
        assert!(
            help.contains(flag),
            "serve --help does not mention {flag}:\n{help}"
        );
    }
}

#[test]
fn bad_startup_options_fail_with_a_message() {
    let _serial = serial();
    let reference = reference();
    let small_queue = startup_failure(&["--max-queue-inputs", "8"]);
    assert!(small_queue.contains("max_queue_inputs"), "{small_queue}");
    let missing = startup_failure(&["--corpus", "/nonexistent/corpus.txt"]);
    assert!(missing.contains("corpus"), "{missing}");
    let calib = reference.path("whiten.safetensors");
    let calib = calib.to_str().unwrap();
    let mismatch = startup_failure(&["--calibrator", calib]);
    assert!(mismatch.contains("allow"), "{mismatch}");
    let pooling = startup_failure(&["--pooling", "nonsense"]);
    assert!(pooling.contains("--pooling"), "{pooling}");
}

#[test]
fn every_endpoint_and_error_class_over_http() {
    let _serial = serial();
    let reference = reference();
    let want = &reference.raw;
    // The corpus: JSONL with a blank line (skipped).
    let corpus_idx = [0usize, 1, 2, 3, 16, 17];
    let mut corpus = String::new();
    for (k, &i) in corpus_idx.iter().enumerate() {
        corpus.push_str(&json!({ "text": SENTENCES[i], "id": k }).to_string());
        corpus.push('\n');
        if k == 2 {
            corpus.push('\n');
        }
    }
    let corpus_path = reference.path("corpus.jsonl");
    std::fs::write(&corpus_path, corpus).unwrap();
    let server = Server::start(&["--corpus", corpus_path.to_str().unwrap()]);

    runtime().block_on(async {
        let c = client();
        let embeddings = server.url("/v1/embeddings");

        // GET /health
        let health = get(&c, &server.url("/health")).await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.body, json!({ "status": "ok" }));

        // GET /info: the model, pooling and every limit as passed on the command line.
        let info = get(&c, &server.url("/info")).await;
        assert_eq!(info.status, StatusCode::OK, "{}", info.body);
        let i = &info.body;
        assert!(
            i["model"].as_str().unwrap().contains("all-MiniLM-L6-v2"),
            "{i}"
        );
        assert_eq!(i["pooling"], "last-avg");
        assert_eq!(i["calibrator"], Value::Null);
        assert_eq!(i["dimension"], want.ncols());
        assert_eq!(i["max_len"], 512);
        assert_eq!(i["normalized"], false);
        assert_eq!(i["corpus_size"], corpus_idx.len());
        assert_eq!(
            i["limits"],
            json!({
                "max_inputs_per_request": 256, "max_chars_per_input": 10000,
                "max_body_bytes": 4194304, "max_queue_inputs": 1024, "max_batch_tokens": 8192,
                "max_batch_size": 64, "workers": 2, "max_top_k": 1000
            })
        );

        // POST /v1/embeddings, string input.
        let one = post(&c, &embeddings, &json!({ "input": SENTENCES[4] })).await;
        check_embeddings(&one, &[4], want).unwrap();
        assert_eq!(one.body["object"], "list");
        assert_eq!(one.body["data"][0]["object"], "embedding");
        assert_eq!(one.body["model"], i["model"]);
        assert_eq!(
            one.body["usage"]["prompt_tokens"],
            one.body["usage"]["total_tokens"]
        );

        // Array input, in order, with the model name echoed.
        let idx = [5, 22, 9];
        let input: Vec<&str> = idx.iter().map(|&k| SENTENCES[k]).collect();
        let many = post(
            &c,
            &embeddings,
            &json!({ "input": input, "model": "my-model" }),
        )
        .await;
        check_embeddings(&many, &idx, want).unwrap();
        assert_eq!(many.body["model"], "my-model");

        // base64 of the first 10 components.
        let b64 = post(
            &c,
            &embeddings,
            &json!({ "input": [SENTENCES[7]], "encoding_format": "base64", "dimensions": 10 }),
        )
        .await;
        assert_eq!(b64.status, StatusCode::OK, "{}", b64.body);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(
                b64.body["data"][0]["embedding"]
                    .as_str()
                    .expect("a base64 string"),
            )
            .expect("valid base64");
        let v: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert!(
            max_diff(&v, want.row(7).slice(ndarray::s![..10])) <= TOL,
            "{v:?}"
        );

        // An input over max_len is truncated to 512 tokens and reported.
        let long = "word ".repeat(700);
        let cut = post(&c, &embeddings, &json!({ "input": long })).await;
        assert_eq!(cut.status, StatusCode::OK, "{}", cut.body);
        assert_eq!(cut.body["truncated"], json!([0]));
        assert_eq!(cut.body["usage"]["prompt_tokens"], 512);
        assert_eq!(
            floats(&cut.body["data"][0]["embedding"]).len(),
            want.ncols()
        );

        // POST /similarity, both shapes.
        let sim = post(
            &c,
            &server.url("/similarity"),
            &json!({ "source": SENTENCES[0], "targets": [SENTENCES[16], SENTENCES[2]] }),
        )
        .await;
        assert_eq!(sim.status, StatusCode::OK, "{}", sim.body);
        let scores: Vec<f64> = sim.body["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .collect();
        assert_eq!(scores.len(), 2);
        assert!(
            (scores[0] - cosine(want.row(0), want.row(16))).abs() < 1e-5,
            "{scores:?}"
        );
        assert!(
            (scores[1] - cosine(want.row(0), want.row(2))).abs() < 1e-5,
            "{scores:?}"
        );
        assert!(
            scores[0] > scores[1],
            "guitar/flute should beat guitar/cat: {scores:?}"
        );
        let pairs = post(
            &c,
            &server.url("/similarity"),
            &json!({ "pairs": [[SENTENCES[1], SENTENCES[17]], [SENTENCES[3], SENTENCES[3]]] }),
        )
        .await;
        assert_eq!(pairs.status, StatusCode::OK, "{}", pairs.body);
        let p0 = pairs.body["scores"][0].as_f64().unwrap();
        assert!(
            (p0 - cosine(want.row(1), want.row(17))).abs() < 1e-5,
            "{}",
            pairs.body
        );
        assert!(
            (pairs.body["scores"][1].as_f64().unwrap() - 1.0).abs() < 1e-5,
            "{}",
            pairs.body
        );

        // POST /search: a corpus sentence finds itself first; scores are exact cosines.
        let search = post(
            &c,
            &server.url("/search"),
            &json!({ "query": SENTENCES[16], "top_k": 3 }),
        )
        .await;
        assert_eq!(search.status, StatusCode::OK, "{}", search.body);
        let hits = search.body["results"].as_array().unwrap();
        assert_eq!(hits.len(), 3, "{}", search.body);
        assert_eq!(hits[0]["index"], 4);
        assert_eq!(hits[0]["text"], SENTENCES[16]);
        let mut previous = f64::INFINITY;
        for hit in hits {
            let k = hit["index"].as_u64().unwrap() as usize;
            let score = hit["score"].as_f64().unwrap();
            assert_eq!(hit["text"], SENTENCES[corpus_idx[k]]);
            assert!(
                (score - cosine(want.row(16), want.row(corpus_idx[k]))).abs() < 1e-5,
                "{hit}"
            );
            assert!(score <= previous, "not best first: {}", search.body);
            previous = score;
        }
        let batch = post(
            &c,
            &server.url("/search"),
            &json!({ "queries": ["someone plays an instrument", "a pet is resting"] }),
        )
        .await;
        assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
        let lists = batch.body["results"].as_array().unwrap();
        assert_eq!(lists.len(), 2);
        assert_eq!(
            lists[0].as_array().unwrap().len(),
            corpus_idx.len(),
            "top_k 10 is capped at the corpus size"
        );
        assert_eq!(lists[1][0]["text"], SENTENCES[2], "{}", batch.body);

        // Every error class.
        assert_error(
            &post_bytes(&c, &embeddings, b"{\"input\": ".to_vec()).await,
            400,
            "invalid_json",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": [] })).await,
            400,
            "empty_input",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": "" })).await,
            400,
            "empty_input",
        );
        assert_error(&get(&c, &server.url("/nope")).await, 404, "not_found");
        assert_error(&get(&c, &embeddings).await, 405, "method_not_allowed");
        let too_many = vec!["x"; 257];
        assert_error(
            &post(&c, &embeddings, &json!({ "input": too_many })).await,
            413,
            "too_many_inputs",
        );
        let huge = json!({ "input": "a".repeat(4 * 1024 * 1024) })
            .to_string()
            .into_bytes();
        assert_error(
            &post_bytes(&c, &embeddings, huge).await,
            413,
            "body_too_large",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": "x", "dimensions": 0 })).await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "inputs": "x" })).await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": [1, 2] })).await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": "a".repeat(10_001) })).await,
            422,
            "input_too_long",
        );
        assert_error(
            &post(
                &c,
                &server.url("/search"),
                &json!({ "query": "x", "top_k": 0 }),
            )
            .await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &server.url("/similarity"), &json!({ "source": "x" })).await,
            422,
            "invalid_field",
        );

        // Still healthy after all that.
        assert_eq!(get(&c, &server.url("/health")).await.status, StatusCode::OK);
    });
    server.stop();
}

#[test]
fn concurrent_clients_get_the_vectors_of_bertflow_encode_raw_and_calibrated() {
    let _serial = serial();
    let reference = reference();
    let (clients, per_client) = (64, 20);
    let expected = expected_vectors(clients, per_client);

    // Raw vectors; this server has no corpus.
    let server = Server::start(&[]);
    runtime().block_on(async {
        let c = client();
        let search = post(&c, &server.url("/search"), &json!({ "query": "anything" })).await;
        assert_error(&search, 404, "no_corpus");

        let (vectors, worst) = hammer(&server.base, &reference.raw, clients, per_client).await;
        assert_eq!(vectors, expected, "vectors lost");
        eprintln!("raw: {vectors} vectors, largest difference from bertflow encode {worst:e}");

        let load = get(&c, &server.url("/info")).await.body["load"].clone();
        assert_eq!(load["queued_inputs"], 0, "{load}");
        let batches = load["batches"].as_u64().unwrap();
        assert!(
            batches > 0 && batches < (clients * per_client) as u64,
            "{batches} batches for {} requests: concurrent requests were not packed together",
            clients * per_client
        );
    });
    server.stop();

    // Calibrated vectors (whitening fitted for "another model": --allow-mismatch).
    let calib = reference.path("whiten.safetensors");
    let server = Server::start(&["--calibrator", calib.to_str().unwrap(), "--allow-mismatch"]);
    assert!(
        server.log().contains("warning"),
        "no mismatch warning:\n{}",
        server.log()
    );
    runtime().block_on(async {
        let c = client();
        let info = get(&c, &server.url("/info")).await.body;
        assert!(info["calibrator"].as_str().is_some_and(|d| d.contains("whiten")), "{info}");
        assert_eq!(info["dimension"], reference.calibrated_dim, "{info}");

        // Fewer requests per client: the batching was exercised above; this checks
        // that the calibrator is applied to every vector of every batch.
        let per_client = 6;
        let (vectors, worst) = hammer(&server.base, &reference.calibrated, clients, per_client).await;
        assert_eq!(vectors, expected_vectors(clients, per_client), "vectors lost");
        eprintln!("calibrated: {vectors} vectors, largest difference from bertflow encode --calibrator {worst:e}");
    });
    server.stop();
}

/// Long sentences, so that a worker is busy for a while with each input.
const LONG: &[usize] = &[10, 18, 22, 25, 28, 34, 39];

#[test]
fn tiny_queue_answers_429_promptly_and_loses_nothing() {
    let _serial = serial();
    let want = &reference().raw;
    let server = Server::start(&[
        "--workers",
        "1",
        "--max-batch-size",
        "1",
        "--max-queue-inputs",
        "4",
        "--max-inputs-per-request",
        "4",
    ]);
    runtime().block_on(async {
        let c = client();
        let url = server.url("/v1/embeddings");
        let burst = 40;
        let tasks: Vec<_> = (0..burst)
            .map(|r| {
                let (c, url) = (c.clone(), url.clone());
                let idx = vec![LONG[r % LONG.len()], LONG[(r + 3) % LONG.len()]];
                tokio::spawn(async move {
                    let start = Instant::now();
                    let input: Vec<&str> = idx.iter().map(|&i| SENTENCES[i]).collect();
                    let reply = post(&c, &url, &json!({ "input": input })).await;
                    (idx, reply, start.elapsed())
                })
            })
            .collect();
        let (mut ok, mut overloaded) = (0, 0);
        for task in tasks {
            let (idx, reply, elapsed) = task.await.expect("client task panicked");
            match reply.status.as_u16() {
                200 => {
                    check_embeddings(&reply, &idx, want).unwrap();
                    ok += 1;
                }
                429 => {
                    assert_error(&reply, 429, "overloaded");
                    assert_eq!(reply.body["error"]["type"], "rate_limit_error");
                    assert_eq!(reply.retry_after.as_deref(), Some("1"));
                    assert!(elapsed < Duration::from_secs(5), "a 429 took {elapsed:?}");
                    overloaded += 1;
                }
                other => panic!("status {other}: {}", reply.body),
            }
        }
        assert_eq!(ok + overloaded, burst);
        assert!(
            ok >= 1 && overloaded >= 1,
            "{ok} answered 200 and {overloaded} 429 out of {burst}"
        );
        eprintln!("burst of {burst}: {ok} x 200, {overloaded} x 429");

        // Nothing left behind, and the server still serves.
        let load = get(&c, &server.url("/info")).await.body["load"].clone();
        assert_eq!(load["queued_inputs"], 0, "{load}");
        let after = post(&c, &url, &json!({ "input": [SENTENCES[0]] })).await;
        check_embeddings(&after, &[0], want).unwrap();
    });
    server.stop();
}

#[test]
fn sigterm_answers_every_request_in_flight_then_exits_zero() {
    let _serial = serial();
    let want = &reference().raw;
    // One input per batch on one worker: the requests queue up behind each other.
    let mut server = Server::start(&["--workers", "1", "--max-batch-size", "1"]);
    let rt = runtime();
    let c = client();
    let requests = 12;
    let per_request = 3;
    let url = server.url("/v1/embeddings");
    let tasks: Vec<_> = (0..requests)
        .map(|r| {
            let (c, url) = (c.clone(), url.clone());
            let idx: Vec<usize> = (0..per_request)
                .map(|k| LONG[(r + 2 * k) % LONG.len()])
                .collect();
            rt.spawn(async move {
                let input: Vec<&str> = idx.iter().map(|&i| SENTENCES[i]).collect();
                let reply = post(&c, &url, &json!({ "input": input })).await;
                (idx, reply)
            })
        })
        .collect();

    // Wait until the server has received every input (queued, running or done),
    // with work still queued.
    let total = (requests * per_request) as u64;
    let info_url = server.url("/info");
    let queued = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let load = get(&c, &info_url).await.body["load"].clone();
            let count = |k: &str| load[k].as_u64().unwrap_or(0);
            if count("queued_inputs") + count("busy_workers") + count("batches") == total {
                return count("queued_inputs");
            }
            assert!(
                Instant::now() < deadline,
                "the server never received every request: {load}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(
        queued > 0,
        "every request finished before SIGTERM: nothing was in flight"
    );

    server.sigterm();
    rt.block_on(async {
        for task in tasks {
            let (idx, reply) = task.await.expect("client task panicked");
            check_embeddings(&reply, &idx, want).unwrap();
        }
    });
    let status = server.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status}; stderr:\n{}",
        server.log()
    );
    // The stderr reader may lag the exit a little.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log().contains("server stopped") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.log().contains("server stopped"), "{}", server.log());
    eprintln!("SIGTERM with {queued} of {total} inputs still queued: all answered 200, exit 0");
}
