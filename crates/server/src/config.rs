//! Server limits and options.

use serde::Serialize;

use crate::auth::ApiKeys;
use crate::error::ServerError;
use crate::index::SharedIndex;

/// Longest accepted timeout: one day, in milliseconds.
const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Most connections `max_connections` may allow (a semaphore's permit count).
const MAX_CONNECTIONS: usize = 1 << 20;

/// Every limit of the server, written once: `ServerConfig::limits`, `GET /info`
/// (under `limits`) and, with the `clap` feature, the command line's "Server
/// limits" options (`bertflow serve --max-batch-size ...`). `Limits::default()`
/// is a sensible CPU set-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Limits {
    /// Most inputs in one request (the `input` array, both texts of every /similarity
    /// pair, /search `queries`). More: 413 too_many_inputs.
    #[cfg_attr(feature = "clap", arg(long, visible_alias = "max-client-batch-size", default_value_t = Limits::default().max_inputs_per_request, value_name = "N", help_heading = "Server limits"))]
    pub max_inputs_per_request: usize,
    /// Most characters in one input text. More: 422 input_too_long. (Inputs longer than
    /// --max-len tokens are not refused but truncated, and reported in `truncated`.)
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_chars_per_input, value_name = "N", help_heading = "Server limits"))]
    pub max_chars_per_input: usize,
    /// Most bytes in a request body. More: 413 body_too_large.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_body_bytes, value_name = "BYTES", help_heading = "Server limits"))]
    pub max_body_bytes: usize,
    /// Most inputs waiting for a worker, over all requests. A request whose inputs do not
    /// fit is answered 429 overloaded at once (with Retry-After: 1). Must be at least
    /// --max-inputs-per-request.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_queue_inputs, value_name = "N", help_heading = "Server limits"))]
    pub max_queue_inputs: usize,
    /// Most tokens (after truncation at --max-len) waiting for a worker, over all
    /// requests. A request whose tokens do not fit is answered 429 overloaded at once
    /// (a request larger than this is taken when the queue is empty, and runs alone).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_queue_tokens, value_name = "TOKENS", help_heading = "Server limits"))]
    pub max_queue_tokens: usize,
    /// Token budget of one batch: the sum over its inputs of their token counts (capped at
    /// --max-len). A single longer input still runs, alone.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_batch_tokens, value_name = "TOKENS", help_heading = "Server limits"))]
    pub max_batch_tokens: usize,
    /// Most inputs in one batch.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_batch_size, value_name = "N", help_heading = "Server limits"))]
    pub max_batch_size: usize,
    /// Worker threads calling the backend, each running one batch at a time
    /// (the command line's `--workers`, default the cores available, is its own option, listed
    /// first).
    #[cfg_attr(feature = "clap", arg(skip = 1usize))]
    pub workers: usize,
    /// Tokenization workers: requests tokenized at once (each input is tokenized once, before
    /// it is admitted to the queue; other requests wait their turn). 0: as many as --workers.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().tokenization_workers, value_name = "N", help_heading = "Server limits"))]
    pub tokenization_workers: usize,
    /// Largest `top_k` accepted by /search. More: 422 invalid_field.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_top_k, value_name = "N", help_heading = "Server limits"))]
    pub max_top_k: usize,
    /// Most open client connections. Further clients wait in the listen backlog until one
    /// closes (slow or idle ones are closed by the timeouts below). Keep it below the
    /// open-file limit (`ulimit -n`).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().max_connections, value_name = "N", help_heading = "Server limits"))]
    pub max_connections: usize,
    /// Milliseconds a client has to send a complete request head (request line and
    /// headers), counted from the connection's start or from its first byte after the
    /// previous answer. Later: the connection is closed.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().header_timeout_ms, value_name = "MS", help_heading = "Server limits"))]
    pub header_timeout_ms: u64,
    /// Milliseconds a client has to send a complete request body once its head is in.
    /// Later: 408 request_timeout and the connection is closed.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().body_timeout_ms, value_name = "MS", help_heading = "Server limits"))]
    pub body_timeout_ms: u64,
    /// Milliseconds a kept-alive connection may stay idle between requests before it is
    /// closed.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().idle_timeout_ms, value_name = "MS", help_heading = "Server limits"))]
    pub idle_timeout_ms: u64,
    /// Milliseconds shutdown waits for requests in progress (half-sent ones included)
    /// before it drops their connections.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Limits::default().shutdown_timeout_ms, value_name = "MS", help_heading = "Server limits"))]
    pub shutdown_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_inputs_per_request: 256,
            max_chars_per_input: 10_000,
            max_body_bytes: 4 * 1024 * 1024,
            max_queue_inputs: 1024,
            max_queue_tokens: 32_768,
            max_batch_tokens: 8192,
            max_batch_size: 64,
            workers: 1,
            tokenization_workers: 0,
            max_top_k: 1000,
            max_connections: 512,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            shutdown_timeout_ms: 30_000,
        }
    }
}

impl Limits {
    /// Tokenization workers: `tokenization_workers`, or `workers` for 0.
    pub fn tokenizers(&self) -> usize {
        if self.tokenization_workers == 0 {
            self.workers.max(1)
        } else {
            self.tokenization_workers
        }
    }

    /// Check that every limit is usable.
    pub fn validate(&self) -> Result<(), ServerError> {
        let positive = [
            ("max_inputs_per_request", self.max_inputs_per_request),
            ("max_chars_per_input", self.max_chars_per_input),
            ("max_body_bytes", self.max_body_bytes),
            ("max_queue_inputs", self.max_queue_inputs),
            ("max_queue_tokens", self.max_queue_tokens),
            ("max_batch_tokens", self.max_batch_tokens),
            ("max_batch_size", self.max_batch_size),
            ("workers", self.workers),
            ("max_top_k", self.max_top_k),
            ("max_connections", self.max_connections),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(ServerError::Config(format!("{name} must be at least 1")));
            }
        }
        let timeouts = [
            ("header_timeout_ms", self.header_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("shutdown_timeout_ms", self.shutdown_timeout_ms),
        ];
        for (name, value) in timeouts {
            if value == 0 || value > MAX_TIMEOUT_MS {
                return Err(ServerError::Config(format!(
                    "{name} must be in 1..={MAX_TIMEOUT_MS} (one day)"
                )));
            }
        }
        if self.max_connections > MAX_CONNECTIONS {
            return Err(ServerError::Config(format!(
                "max_connections must be at most {MAX_CONNECTIONS}"
            )));
        }
        if self.max_queue_inputs < self.max_inputs_per_request {
            return Err(ServerError::Config(format!(
                "max_queue_inputs ({}) must be at least max_inputs_per_request ({})",
                self.max_queue_inputs, self.max_inputs_per_request
            )));
        }
        Ok(())
    }
}

/// How to run the server: its [`Limits`], what `/search` searches, who may
/// call it and what it logs. [`crate::serve`] validates it before binding
/// anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerConfig {
    /// Every limit (see [`Limits`]).
    pub limits: Limits,
    /// Sentences to index for `/search`, embedded at start-up through the
    /// backend. `None`: `/search` answers 404 `no_corpus`. An empty list is a
    /// configuration error.
    pub corpus: Option<Vec<String>>,
    /// A ready index for `/search` (e.g. a memory-mapped `bertflow index`
    /// file); its dimension must be the backend's. Exclusive with `corpus`.
    pub search_index: Option<SharedIndex>,
    /// Keys accepted in `Authorization: Bearer KEY` on every route but
    /// `/health`; empty (the default): no authentication.
    pub api_keys: ApiKeys,
    /// Write the input texts into the request log lines (off by default:
    /// texts may be private).
    pub log_inputs: bool,
    /// TEI's `--auto-truncate`: on text-embeddings-inference's routes, cut
    /// inputs longer than the model's `max_len` when a request does not say
    /// `truncate` (off by default, as in TEI: such an input is answered
    /// 413). bertflow's own routes always cut.
    pub auto_truncate: bool,
    /// The name the model is served under (TEI's `--served-model-name`):
    /// `GET /info`'s `served_model_name`, the `model` of `/v1/embeddings`
    /// and `/v1/models`. `None`: the backend's model id.
    pub served_model_name: Option<String>,
}

impl ServerConfig {
    /// Check that every limit is usable and that the search options agree.
    pub fn validate(&self) -> Result<(), ServerError> {
        self.limits.validate()?;
        if self.corpus.is_some() && self.search_index.is_some() {
            return Err(ServerError::Config(
                "give either a corpus to embed or a ready search index, not both".into(),
            ));
        }
        if matches!(&self.corpus, Some(c) if c.is_empty()) {
            return Err(ServerError::Config(
                "the search corpus is empty (use None for no corpus)".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert!(ServerConfig::default().validate().is_ok());
    }

    #[test]
    fn rejects_zero_limits_and_small_queue_and_empty_corpus() {
        let zero = ServerConfig {
            limits: Limits {
                max_batch_tokens: 0,
                ..Limits::default()
            },
            ..ServerConfig::default()
        };
        assert!(
            matches!(zero.validate(), Err(ServerError::Config(m)) if m.contains("max_batch_tokens"))
        );
        let small_queue = ServerConfig {
            limits: Limits {
                max_inputs_per_request: 10,
                max_queue_inputs: 9,
                ..Limits::default()
            },
            ..ServerConfig::default()
        };
        assert!(small_queue.validate().is_err());
        let empty = ServerConfig {
            corpus: Some(vec![]),
            ..ServerConfig::default()
        };
        assert!(empty.validate().is_err());
    }
}
