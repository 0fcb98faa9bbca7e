//! Test support: a deterministic fake backend and a server started on
//! 127.0.0.1 with an OS-chosen port.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bertflow_server::{
    serve, BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind, ServerConfig,
    ServerError, Tokenized,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const DIM: usize = 8;

/// Hash-seeded pseudo-random vector of `text`'s words joined by single
/// spaces (FNV-1a, then splitmix64). The text "ZERO" maps to the zero vector.
pub fn vector_of(text: &str) -> Vec<f32> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.as_str();
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

/// The ids of the special tokens of the fakes' token batches.
pub const CLS: u32 = 101;
pub const SEP: u32 = 102;
/// The first id the fakes give a word (in order of first sight).
pub const FIRST_WORD: u32 = 5000;

/// The fakes' vocabulary: each whitespace word gets an id on first sight, so
/// that a token batch can be read back as the texts it came from.
#[derive(Default)]
pub struct Vocab(Mutex<(HashMap<String, u32>, Vec<String>)>);

impl Vocab {
    fn id(&self, word: &str) -> u32 {
        let mut guard = self.0.lock().unwrap();
        let (ids, words) = &mut *guard;
        if let Some(&id) = ids.get(word) {
            return id;
        }
        let id = FIRST_WORD + words.len() as u32;
        ids.insert(word.to_owned(), id);
        words.push(word.to_owned());
        id
    }

    /// The word of `id`, `[CLS]`/`[SEP]`, or `None` for an id it never gave.
    pub fn word(&self, id: u32) -> Option<String> {
        match id {
            CLS => Some("[CLS]".into()),
            SEP => Some("[SEP]".into()),
            _ => {
                let guard = self.0.lock().unwrap();
                id.checked_sub(FIRST_WORD)
                    .and_then(|k| guard.1.get(k as usize).cloned())
            }
        }
    }

    /// `[CLS] text [SEP]` (and `pair [SEP]`), cut at `max_len` keeping the last `[SEP]`.
    pub fn encode(&self, text: &str, pair: Option<&str>, max_len: usize) -> Encoding {
        let mut ids = vec![CLS];
        ids.extend(text.split_whitespace().map(|w| self.id(w)));
        ids.push(SEP);
        if let Some(pair) = pair {
            ids.extend(pair.split_whitespace().map(|w| self.id(w)));
            ids.push(SEP);
        }
        let truncated = ids.len() > max_len;
        if truncated {
            ids.truncate(max_len.saturating_sub(1));
            ids.push(SEP);
        }
        Encoding {
            ids,
            type_ids: Vec::new(),
            truncated,
        }
    }

    /// The texts an encoding came from (words joined by spaces; a pair's
    /// second text after the first `[SEP]`), or `None` when it holds ids the
    /// vocabulary never gave (a client's own token ids).
    pub fn texts(&self, ids: &[u32]) -> Option<(String, Option<String>)> {
        let mut parts: Vec<Vec<String>> = vec![Vec::new()];
        for (k, &id) in ids.iter().enumerate() {
            match id {
                CLS if k == 0 => {}
                SEP => parts.push(Vec::new()),
                _ if id >= FIRST_WORD => parts.last_mut()?.push(self.word(id)?),
                _ => return None,
            }
        }
        if ids.first() != Some(&CLS) {
            return None;
        }
        let mut parts = parts.into_iter().map(|p| p.join(" "));
        let text = parts.next().unwrap_or_default();
        let pair = parts.next().filter(|p| !p.is_empty());
        Some((text, pair))
    }

    /// What the fakes embed for an encoding: its text, or for a client's own
    /// ids [`ids_key`] of them.
    pub fn key(&self, ids: &[u32]) -> String {
        match self.texts(ids) {
            Some((text, _)) => text,
            None => ids_key(ids),
        }
    }
}

/// The key a client's own token ids are embedded as.
pub fn ids_key(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Deterministic fake model: vector = [`vector_of`] the text (read back
/// from its token batch: the words it kept after the cut at `max_len`),
/// tokens = whitespace words + 2 (clamped to `max_len`). A text containing
/// "FAIL" makes the whole batch fail, one containing "PANIC" makes it panic.
/// A client's own token ids are embedded as [`vector_of`] [`ids_key`].
pub struct Fake {
    pub max_len: usize,
    pub sleep: Duration,
    pub gate: Gate,
    /// Every batch passed to `embed`, in call order (as texts).
    pub batches: Mutex<Vec<Vec<String>>>,
    pub started: AtomicUsize,
    pub vocab: Vocab,
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
            vocab: Vocab::default(),
        }
    }

    pub fn batches(&self) -> Vec<Vec<String>> {
        self.batches.lock().unwrap().clone()
    }

    /// Whitespace words + 2, before the cut.
    pub fn tokenize_len(&self, text: &str) -> usize {
        text.split_whitespace().count() + 2
    }

    /// What the server answers for `texts` (vectors, tokens, truncation),
    /// computed directly.
    pub fn embed_texts(&self, texts: &[String]) -> Vec<Embedded> {
        texts
            .iter()
            .map(|t| {
                let encoding = self.vocab.encode(t, None, self.max_len);
                Embedded {
                    vector: vector_of(&self.vocab.key(&encoding.ids)),
                    tokens: encoding.ids.len(),
                    truncated: encoding.truncated,
                }
            })
            .collect()
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

    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        Ok(self.vocab.encode(text, pair, self.max_len))
    }

    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        let texts: Vec<String> = batch.iter().map(|e| self.vocab.key(&e.ids)).collect();
        self.started.fetch_add(1, Ordering::SeqCst);
        self.batches.lock().unwrap().push(texts.clone());
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
            .zip(batch)
            .map(|(t, e)| Embedded {
                vector: vector_of(t),
                tokens: e.ids.len(),
                truncated: e.truncated,
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

    fn encode(&self, text: &str, _pair: Option<&str>) -> Result<Encoding, BackendError> {
        Ok(Encoding::of_ids(vec![CLS; 3.min(text.len().max(1))]))
    }

    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        Ok(batch
            .iter()
            .map(|e| Embedded {
                vector: vector_of(&ids_key(&e.ids)),
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
