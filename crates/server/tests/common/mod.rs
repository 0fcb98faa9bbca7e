//! Test support: a deterministic fake backend and a server started on
//! 127.0.0.1 with an OS-chosen port.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bertflow_server::{
    serve, BackendError, BackendInfo, EmbedBackend, Embedded, ModelKind, ServerConfig, ServerError,
    Tokenized,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const DIM: usize = 8;

/// Hash-seeded pseudo-random vector of `text` (FNV-1a, then splitmix64).
/// The text "ZERO" maps to the zero vector.
pub fn vector_of(text: &str) -> Vec<f32> {
    if text == "ZERO" {
        return vec![0.0; DIM];
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (0..DIM)
        .map(|_| {
            h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = h;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// A gate that `embed` waits on while it is closed.
#[derive(Default)]
pub struct Gate {
    closed: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    pub fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.changed.notify_all();
    }
    fn wait_open(&self) {
        let mut closed = self.closed.lock().unwrap();
        while *closed {
            closed = self.changed.wait(closed).unwrap();
        }
    }
}

/// Deterministic fake model: vector = [`vector_of`] the text, tokens =
/// whitespace words + 2 (clamped to `max_len`). A text containing "FAIL"
/// makes the whole batch fail, one containing "PANIC" makes it panic.
pub struct Fake {
    pub max_len: usize,
    pub sleep: Duration,
    pub gate: Gate,
    /// Every batch passed to `embed`, in call order.
    pub batches: Mutex<Vec<Vec<String>>>,
    pub started: AtomicUsize,
}

impl Fake {
    pub fn new(max_len: usize) -> Arc<Self> {
        Arc::new(Self::with(max_len, Duration::ZERO))
    }

    pub fn with(max_len: usize, sleep: Duration) -> Self {
        Fake {
            max_len,
            sleep,
            gate: Gate::default(),
            batches: Mutex::new(Vec::new()),
            started: AtomicUsize::new(0),
        }
    }

    pub fn batches(&self) -> Vec<Vec<String>> {
        self.batches.lock().unwrap().clone()
    }
}

impl EmbedBackend for Fake {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            model_id: "fake-bert".into(),
            pooling: "mean".into(),
            calibrator: Some("flow(test)".into()),
            dimension: DIM,
            max_len: self.max_len,
            kind: ModelKind::Embedding,
            labels: Vec::new(),
        }
    }

    fn tokenize_len(&self, text: &str) -> usize {
        text.split_whitespace().count() + 2
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Embedded>, BackendError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.batches.lock().unwrap().push(texts.to_vec());
        self.gate.wait_open();
        if !self.sleep.is_zero() {
            std::thread::sleep(self.sleep);
        }
        if texts.iter().any(|t| t.contains("FAIL")) {
            return Err(BackendError::new("fake failure"));
        }
        if texts.iter().any(|t| t.contains("PANIC")) {
            panic!("fake panic");
        }
        Ok(texts
            .iter()
            .map(|t| {
                let len = self.tokenize_len(t);
                Embedded {
                    vector: vector_of(t),
                    tokens: len.min(self.max_len),
                    truncated: len > self.max_len,
                }
            })
            .collect())
    }

    /// `[CLS]`, the whitespace words, `[SEP]` (ids 101, word length + 1000
    /// per word, 102), cut to `max_len` keeping `[SEP]`. "FAIL" fails.
    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        if text.contains("FAIL") {
            return Some(Err(BackendError::new("fake tokenizer failure")));
        }
        let mut tokens: Vec<String> = std::iter::once("[CLS]".to_owned())
            .chain(text.split_whitespace().map(str::to_owned))
            .collect();
        let truncated = tokens.len() + 1 > self.max_len;
        tokens.truncate(self.max_len.saturating_sub(1));
        tokens.push("[SEP]".to_owned());
        let ids = tokens
            .iter()
            .map(|t| match t.as_str() {
                "[CLS]" => 101,
                "[SEP]" => 102,
                word => 1000 + word.len() as u32,
            })
            .collect();
        Some(Ok(Tokenized {
            ids,
            tokens,
            truncated,
        }))
    }
}

/// A backend without `tokenize` (the trait's default).
pub struct NoTokens;

impl EmbedBackend for NoTokens {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            model_id: "no-tokens".into(),
            pooling: "mean".into(),
            calibrator: None,
            dimension: DIM,
            max_len: 16,
            kind: ModelKind::Embedding,
            labels: Vec::new(),
        }
    }

    fn tokenize_len(&self, text: &str) -> usize {
        text.split_whitespace().count() + 2
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Embedded>, BackendError> {
        Ok(texts
            .iter()
            .map(|t| Embedded {
                vector: vector_of(t),
                tokens: 3,
                truncated: false,
            })
            .collect())
    }
}

pub struct TestServer {
    pub base: String,
    pub addr: std::net::SocketAddr,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    pub handle: JoinHandle<Result<(), ServerError>>,
}

impl TestServer {
    pub async fn start(backend: Arc<dyn EmbedBackend>, config: ServerConfig) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(serve(backend, config, listener, async {
            let _ = rx.await;
        }));
        TestServer {
            base: format!("http://{addr}"),
            addr,
            client: reqwest::Client::new(),
            shutdown: Some(tx),
            handle,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST raw bytes; returns status and parsed JSON body (Null if not JSON).
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string()).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Poll `GET /info` until `load` satisfies `pred` (panics after 10 s).
    pub async fn wait_load(&self, pred: impl Fn(&Value) -> bool) {
        for _ in 0..1000 {
            let (_, info) = self.get("/info").await;
            if pred(&info["load"]) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("load never reached the expected state");
    }

    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub async fn stop(mut self) {
        self.trigger_shutdown();
        let result = tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("server did not shut down")
            .expect("server task panicked");
        result.expect("serve returned an error");
    }
}

/// Assert an OpenAI-shaped error with this status and code.
pub fn assert_error(status: u16, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status, want_status, "body: {body}");
    let error = &body["error"];
    assert!(error.is_object(), "not in the error shape: {body}");
    assert_eq!(error["code"], want_code, "body: {body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "no message: {body}"
    );
    assert!(error["type"].is_string(), "no type: {body}");
    assert!(error.get("param").is_some(), "no param: {body}");
}

/// The embedding floats of a float-format response item.
pub fn floats(item: &Value) -> Vec<f32> {
    item["embedding"]
        .as_array()
        .expect("embedding is an array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

pub mod tei;
