//! Fakes for text-embeddings-inference's routes: [`TeiFake`], an embedding
//! model that also shows its tokens with offsets, decodes, embeds token ids
//! and returns per-token vectors; [`FakeReranker`], a classifier head whose
//! logits follow a formula the tests recompute.

use std::sync::{Arc, Mutex};

use bertflow_server::{
    BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind, TokenSpan, Tokenized,
};

#[allow(unused_imports)]
pub use super::ids_key;
use super::{vector_of, Fake, DIM};

/// Token id of a word in the fakes: 1000 + its length in bytes.
pub fn word_id(word: &str) -> u32 {
    1000 + word.len() as u32
}

/// [`Fake`]'s embeddings and tokens, plus TEI's extras:
/// - `token_spans`: `[CLS]` (101), the whitespace words with their byte
///   offsets, `[SEP]` (102), cut at `max_len`;
/// - `decode`: 101 -> `[CLS]`, 102 -> `[SEP]`, 1000 + n -> `n` x `w`, joined
///   by spaces; any other id is an error;
/// - token ids of the client's own: [`vector_of`] the ids joined by commas;
/// - `embed_all`: [`vector_of`] each token string, one row per token;
/// - a vocabulary of [`TEI_VOCAB`] ids (a client's id past it is refused).
pub struct TeiFake(pub Arc<Fake>);

impl TeiFake {
    pub fn new(max_len: usize) -> Arc<Self> {
        Arc::new(TeiFake(Fake::new(max_len)))
    }
}

/// The vocabulary size [`TeiFake`] reports.
pub const TEI_VOCAB: usize = 30_522;

impl EmbedBackend for TeiFake {
    fn info(&self) -> BackendInfo {
        self.0.info()
    }
    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        self.0.encode(text, pair)
    }
    fn vocab_size(&self) -> Option<usize> {
        Some(TEI_VOCAB)
    }
    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        self.0.embed(batch)
    }
    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        self.0.tokenize(text)
    }
    fn token_spans(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Option<Result<Vec<TokenSpan>, BackendError>> {
        if text.contains("FAIL") {
            return Some(Err(BackendError::new("fake tokenizer failure")));
        }
        let mut spans = Vec::new();
        let special = |id: u32, text: &str| TokenSpan {
            id,
            text: text.to_owned(),
            special: true,
            start: None,
            stop: None,
        };
        if add_special_tokens {
            spans.push(special(101, "[CLS]"));
        }
        let room = self.0.max_len.saturating_sub(2);
        let base = text.as_ptr() as usize;
        for word in text.split_whitespace().take(room) {
            let start = word.as_ptr() as usize - base;
            spans.push(TokenSpan {
                id: word_id(word),
                text: word.to_owned(),
                special: false,
                start: Some(start),
                stop: Some(start + word.len()),
            });
        }
        if add_special_tokens {
            spans.push(special(102, "[SEP]"));
        }
        Some(Ok(spans))
    }
    fn decode(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
    ) -> Option<Result<String, BackendError>> {
        let mut words = Vec::new();
        for &id in ids {
            match id {
                101 | 102 if skip_special_tokens => {}
                101 => words.push("[CLS]".to_owned()),
                102 => words.push("[SEP]".to_owned()),
                1001..=1100 => words.push("w".repeat((id - 1000) as usize)),
                other => {
                    return Some(Err(BackendError::new(format!(
                        "token id {other} is not in the vocabulary"
                    ))))
                }
            }
        }
        Some(Ok(words.join(" ")))
    }
    fn embed_all(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        Some(Ok(batch
            .iter()
            .map(|e| {
                e.ids
                    .iter()
                    .map(|&id| vector_of(&self.0.vocab.word(id).unwrap_or_else(|| id.to_string())))
                    .collect()
            })
            .collect()))
    }
}

/// The fake classifier's logit of label `j` for `(a, b)`:
/// `0.5 * words(a) - 0.25 * words(b) + j - 1`.
pub fn fake_logit(a: &str, b: Option<&str>, j: usize) -> f32 {
    let words = |s: &str| s.split_whitespace().count() as f32;
    0.5 * words(a) - 0.25 * b.map_or(0.0, words) + j as f32 - 1.0
}

/// A cross-encoder / classifier with `labels`: logits from [`fake_logit`];
/// a text containing "FAIL" fails. Records, per call, whether it was given a
/// cut input. Tokens: [`Fake`]'s (`[CLS] a [SEP] b [SEP]`, cut at `max_len`).
pub struct FakeReranker {
    pub fake: Arc<Fake>,
    pub labels: Vec<String>,
    pub truncate_seen: Mutex<Vec<bool>>,
}

impl FakeReranker {
    pub fn new(max_len: usize, labels: &[&str]) -> Arc<Self> {
        Arc::new(FakeReranker {
            fake: Fake::new(max_len),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            truncate_seen: Mutex::new(Vec::new()),
        })
    }
}

impl EmbedBackend for FakeReranker {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            model_id: "fake-reranker".into(),
            pooling: "cls".into(),
            calibrator: None,
            dimension: DIM,
            max_len: self.fake.max_len,
            kind: ModelKind::Reranker,
            labels: self.labels.clone(),
        }
    }
    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        self.fake.encode(text, pair)
    }
    fn embed(&self, _batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        Err(BackendError::new("a reranker does not embed"))
    }
    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        self.fake.tokenize(text)
    }
    fn predict(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        self.fake.gate.wait_open();
        self.truncate_seen
            .lock()
            .unwrap()
            .push(batch.iter().any(|e| e.truncated));
        let inputs: Vec<(String, Option<String>)> = batch
            .iter()
            .map(|e| self.fake.vocab.texts(&e.ids).unwrap_or_default())
            .collect();
        if inputs
            .iter()
            .any(|(a, b)| a.contains("FAIL") || b.as_deref().is_some_and(|b| b.contains("FAIL")))
        {
            return Some(Err(BackendError::new("fake classifier failure")));
        }
        Some(Ok(inputs
            .iter()
            .map(|(a, b)| {
                (0..self.labels.len())
                    .map(|j| fake_logit(a, b.as_deref(), j))
                    .collect()
            })
            .collect()))
    }
}

/// Assert TEI's error shape: exactly `error` (a non-empty string) and
/// `error_type`, with this status and type.
pub fn assert_tei_error(status: u16, body: &serde_json::Value, want_status: u16, want_type: &str) {
    assert_eq!(status, want_status, "body: {body}");
    let object = body
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {body}"));
    assert_eq!(object.len(), 2, "TEI's error has two fields: {body}");
    assert!(
        body["error"].as_str().is_some_and(|m| !m.is_empty()),
        "no error message: {body}"
    );
    assert_eq!(body["error_type"], want_type, "body: {body}");
}

/// L2-normalised copy (f32, as the server computes it).
pub fn unit(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter().map(|x| x / norm).collect()
}

/// The floats of a JSON array.
pub fn f32s(value: &serde_json::Value) -> Vec<f32> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Element-wise |a - b| <= tol.
pub fn assert_close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= tol, "{a:?} vs {b:?}");
    }
}
