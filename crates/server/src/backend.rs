//! The model-facing side of the server: a synchronous, object-safe trait that
//! the CLI implements with the real BERT encoder and calibrator.

use serde::Serialize;

/// Which kind of model the backend serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// A sentence-embedding model: `/v1/embeddings`, `/embed`, `/similarity`, ...
    Embedding,
    /// A sequence-classification head (cross-encoder): `/rerank`, `/predict`.
    Reranker,
}

/// Static description of the model behind a backend, reported by `GET /info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendInfo {
    /// Model identifier, e.g. `bert-base-uncased`. Echoed as `model` when a
    /// request does not name one.
    pub model_id: String,
    /// Pooling strategy, e.g. `mean`, `cls`, `first-last-avg`.
    pub pooling: String,
    /// Calibrator description (e.g. `flow(...)`, `whitening(k=256)`), or
    /// `None` for raw pooled BERT vectors.
    pub calibrator: Option<String>,
    /// Length of every embedding vector. Must be at least 1.
    pub dimension: usize,
    /// Maximum sequence length in tokens, special tokens included; longer
    /// inputs are truncated by the backend. Must be at least 1.
    pub max_len: usize,
    /// Which kind of model this is.
    pub kind: ModelKind,
    /// Classifier labels in logit order (`id2label`), empty for an embedding model.
    pub labels: Vec<String>,
}

/// One embedded input, as returned by [`EmbedBackend::embed`].
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    /// The (calibrated) sentence vector; `BackendInfo::dimension` long.
    pub vector: Vec<f32>,
    /// Tokens the model actually saw, special tokens included, i.e. after
    /// truncation at `max_len`.
    pub tokens: usize,
    /// Whether the input was cut at the model's maximum length.
    pub truncated: bool,
}

/// One input as the model's tokenizer sees it, returned by
/// [`EmbedBackend::tokenize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    /// Token ids, special tokens included, after truncation at `max_len`.
    pub ids: Vec<u32>,
    /// The token strings of `ids`, one per id (e.g. `[CLS]`, `play`, `##ing`).
    pub tokens: Vec<String>,
    /// Whether the input was cut at the model's maximum length.
    pub truncated: bool,
}

/// One token of an input with its place in the text, for TEI's `POST /tokenize`
/// (returned by [`EmbedBackend::token_spans`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpan {
    /// Token id.
    pub id: u32,
    /// The token string (e.g. `play`, `##ing`, `[CLS]`).
    pub text: String,
    /// Whether it is a special token (`[CLS]`, `[SEP]`, ...).
    pub special: bool,
    /// Byte offsets `start..stop` of the token in the input text, when known.
    pub start: Option<usize>,
    /// End of the byte range (exclusive), when known.
    pub stop: Option<usize>,
}

/// Failure of the backend; reported to clients as HTTP 500.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// Human-readable cause.
    pub message: String,
}

impl BackendError {
    /// A backend error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A synchronous sentence-embedding model.
///
/// The server never calls these methods on its async executor: `embed` runs
/// on dedicated worker threads, `tokenize_len` on tokio's blocking pool, so
/// an implementation may freely run blocking math. The trait is object safe
/// and is used as `Arc<dyn EmbedBackend>`.
pub trait EmbedBackend: Send + Sync + 'static {
    /// Model description. Called once at start-up; must not change afterwards.
    fn info(&self) -> BackendInfo;

    /// Number of tokens of `text`, special tokens included, *before*
    /// truncation. Should be cheap (tokenisation only): the server uses it to
    /// pack batches under a token budget (clamped to `max_len`).
    fn tokenize_len(&self, text: &str) -> usize;

    /// `texts` with the prompt `prompt_name` (a name of the model's prompts;
    /// `None`: the server's default prompt, if any) before each, by
    /// bertflow-core's prompt rule: what every route embeds or tokenises,
    /// called once per request before anything else sees the texts. `Err`:
    /// why the request cannot be answered (a 422), e.g. an unknown name,
    /// naming the known ones. The default: the model defines no prompts
    /// (texts as they are; any name refused).
    fn prompted(
        &self,
        texts: Vec<String>,
        prompt_name: Option<&str>,
    ) -> Result<Vec<String>, String> {
        match prompt_name {
            None => Ok(texts),
            Some(name) => Err(format!(
                "prompt_name {name:?}: this model defines no prompts; prepend the prompt's text \
                 to the input instead"
            )),
        }
    }

    /// Embed a batch of texts in one forward pass. Must return exactly one
    /// [`Embedded`] per input, in input order, each `dimension` long; the
    /// server answers 500 otherwise. A panic is caught and answered 500 too.
    fn embed(&self, texts: &[String]) -> Result<Vec<Embedded>, BackendError>;

    /// The tokens of `text` as the model sees them (after truncation), for
    /// `POST /tokenize`. `None` (the default): this backend cannot show its
    /// tokens, and `/tokenize` answers 501 `not_supported`. Runs on tokio's
    /// blocking pool.
    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        let _ = text;
        None
    }

    /// Embed inputs given as the model's own token ids, used as they are (no
    /// special tokens added; the server has checked that each has 1 to
    /// `max_len` ids). One [`Embedded`] per input, in order. `None` (the
    /// default): this backend takes text only. Runs on tokio's blocking pool.
    fn embed_ids(&self, ids: &[Vec<u32>]) -> Option<Result<Vec<Embedded>, BackendError>> {
        let _ = ids;
        None
    }

    /// The last layer's vector of every token the model sees (special tokens
    /// included, after truncation at `max_len`), for TEI's `POST /embed_all`:
    /// one `tokens x hidden` matrix per input. `None` (the default): not
    /// supported. Runs on tokio's blocking pool.
    fn embed_all(&self, texts: &[String]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        let _ = texts;
        None
    }

    /// `text`'s tokens with their special flag and offsets, for TEI's
    /// `POST /tokenize`; without the special tokens unless
    /// `add_special_tokens`. `None` (the default): not supported. Runs on
    /// tokio's blocking pool.
    fn token_spans(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Option<Result<Vec<TokenSpan>, BackendError>> {
        let _ = (text, add_special_tokens);
        None
    }

    /// The text of token `ids` (word pieces joined), without the special
    /// tokens when `skip_special_tokens`, for TEI's `POST /decode`. An id
    /// outside the vocabulary is an error. `None` (the default): not
    /// supported.
    fn decode(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
    ) -> Option<Result<String, BackendError>> {
        let _ = (ids, skip_special_tokens);
        None
    }

    /// The quantizer stage the served calibrator file ends in, if any
    /// (`bertflow fit --quantize`): `/v1/embeddings` with `encoding_format`
    /// `int8`, `uint8`, `binary` or `ubinary` answers its codes of the
    /// vectors [`EmbedBackend::embed`] returns. `None` (the default): no
    /// stage, and those formats are refused.
    fn quantizer(&self) -> Option<&bertflow_core::quantize::Quantizer> {
        None
    }

    /// Raw classifier logits for each (text, text_pair) input, one Vec per input (len = labels),
    /// truncated at max_len when `truncate`, else an input over max_len is an error.
    /// None: this backend is not a reranker.
    fn predict(
        &self,
        inputs: &[(String, Option<String>)],
        truncate: bool,
    ) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        let _ = (inputs, truncate);
        None
    }
}
