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
    /// Tokens the model saw, special tokens included. The server answers
    /// the length of the [`Encoding`] it passed (a backend may leave 0).
    pub tokens: usize,
    /// Whether the input was cut at the model's maximum length. The server
    /// answers the [`Encoding`]'s flag (a backend may leave false).
    pub truncated: bool,
}

/// One input as token ids, exactly as the model will see it: made once by
/// [`EmbedBackend::encode`] on the server's tokenization workers (or given
/// by the client as ids), cut at `max_len`, then passed in token batches to
/// [`EmbedBackend::embed`], [`EmbedBackend::embed_all`] or
/// [`EmbedBackend::predict`]. Its length is its cost in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Encoding {
    /// Token ids, special tokens included, 1 to `max_len` of them.
    pub ids: Vec<u32>,
    /// Token types, one per id (1 for the second text of a BERT pair);
    /// empty means all 0.
    pub type_ids: Vec<u32>,
    /// Whether the input was cut at `max_len`.
    pub truncated: bool,
}

impl Encoding {
    /// Token ids used as they are (types 0, not cut).
    pub fn of_ids(ids: Vec<u32>) -> Self {
        Self {
            ids,
            type_ids: Vec::new(),
            truncated: false,
        }
    }

    /// Tokens: the input's cost in the queue and in a batch.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether it holds no token (never true of what the server passes).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
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

/// One input's sparse vector, as returned by [`EmbedBackend::embed_sparse`]:
/// vocabulary ids ascending, each with its (positive) weight.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SparseEmbedded {
    /// Token ids, ascending, no repeats.
    pub indices: Vec<u32>,
    /// One weight per id.
    pub values: Vec<f32>,
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

/// A synchronous model: a sentence encoder or a classifier head
/// (cross-encoder).
///
/// Every input enters the server's one queue as token ids: texts are
/// tokenized once by [`EmbedBackend::encode`] on the tokenization workers
/// (tokio's blocking pool, a bounded number at a time), their cost known
/// before any model work; the model itself only ever sees token batches,
/// on dedicated worker threads ([`EmbedBackend::embed`],
/// [`EmbedBackend::embed_all`], [`EmbedBackend::predict`]). No method runs
/// on the async executor, so an implementation may freely block. The trait
/// is object safe and is used as `Arc<dyn EmbedBackend>`.
pub trait EmbedBackend: Send + Sync + 'static {
    /// Model description. Called once at start-up; must not change afterwards.
    fn info(&self) -> BackendInfo;

    /// `text` (and, for a classifier, its `pair`) as the token ids the
    /// model will see: special tokens included, cut on the right at
    /// `max_len` (saying so in [`Encoding::truncated`]). Should be cheap
    /// (tokenization only). An error is answered 422 (the input cannot be
    /// tokenized). An embedding model is never given a pair.
    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError>;

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

    /// How many token ids the model knows: a client's token id at or above
    /// it is answered 422 before it is queued. `None` (the default): not
    /// checked here (the backend must then refuse such ids itself).
    fn vocab_size(&self) -> Option<usize> {
        None
    }

    /// Embed a token batch in one call. Must return exactly one
    /// [`Embedded`] per input, in input order, each `dimension` long; the
    /// server answers 500 otherwise. A panic is caught and answered 500 too.
    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError>;

    /// The last layer's vector of every token of each input, for TEI's
    /// `POST /embed_all`: one `tokens x hidden` matrix per input, in order.
    /// `None` (the default): not supported (424 on that route).
    fn embed_all(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        let _ = batch;
        None
    }

    /// The sparse vector of each input of a token batch (SPLADE, BGE-M3's
    /// token weights), for TEI's `POST /embed_sparse`. `None` (the default):
    /// the model has no sparse head (424 on that route, as TEI answers a
    /// model without `--pooling splade`).
    fn embed_sparse(
        &self,
        batch: &[Encoding],
    ) -> Option<Result<Vec<SparseEmbedded>, BackendError>> {
        let _ = batch;
        None
    }

    /// The per-token (multi-vector, ColBERT) vectors of each input of a
    /// token batch: one `tokens x dim` matrix per input, each row unit
    /// length, for `POST /embed_multi` and late-interaction `/rerank`.
    /// `None` (the default): not supported (424).
    fn embed_multi(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        let _ = batch;
        None
    }

    /// A late-interaction query as token ids: [`EmbedBackend::encode`]'s,
    /// padded with the mask token to the model's query length where it has
    /// one (ColBERT's query augmentation). The default: `encode(text, None)`.
    fn encode_query(&self, text: &str) -> Result<Encoding, BackendError> {
        self.encode(text, None)
    }

    /// Whether `/rerank` scores by late interaction (MaxSim over
    /// [`EmbedBackend::embed_multi`]'s vectors) rather than a classifier.
    fn late_interaction(&self) -> bool {
        false
    }

    /// Raw classifier logits of each input of a token batch (a text or a
    /// pair, as [`EmbedBackend::encode`] made it), one row per input, each
    /// as long as `labels`. `None` (the default): this backend is not a
    /// classifier.
    fn predict(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        let _ = batch;
        None
    }

    /// The tokens of `text` as the model sees them (after truncation), for
    /// `POST /tokenize`. `None` (the default): this backend cannot show its
    /// tokens, and `/tokenize` answers 501 `not_supported`. Runs on the
    /// tokenization workers.
    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        let _ = text;
        None
    }

    /// `text`'s tokens with their special flag and offsets, for TEI's
    /// `POST /tokenize`; without the special tokens unless
    /// `add_special_tokens`. `None` (the default): not supported. Runs on
    /// the tokenization workers.
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
}
