//! Server limits and options.

use serde::Serialize;

use crate::auth::ApiKeys;
use crate::error::ServerError;
use crate::index::SharedIndex;

/// Every limit of the server. `ServerConfig::default()` is a sensible CPU
/// set-up; [`crate::serve`] validates the values before binding anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Most inputs in one request (`input` array length, texts in a
    /// `/similarity` request counting both sides of each pair, `queries` in
    /// `/search`). More: 413.
    pub max_inputs_per_request: usize,
    /// Most characters (Unicode scalar values) in one input. More: 422.
    pub max_chars_per_input: usize,
    /// Most bytes in a request body. More: 413.
    pub max_body_bytes: usize,
    /// Most inputs waiting for a worker, over all requests. A request that
    /// does not fit is answered 429 at once. Must be at least
    /// `max_inputs_per_request` so that every admissible request can fit.
    pub max_queue_inputs: usize,
    /// Token budget of one `embed` call: the sum over the batch of
    /// `min(tokenize_len, max_len)`. A single input over the budget still
    /// runs, alone.
    pub max_batch_tokens: usize,
    /// Most inputs in one `embed` call.
    pub max_batch_size: usize,
    /// Worker threads calling the backend (each runs one batch at a time).
    pub workers: usize,
    /// Largest `top_k` accepted by `/search`. More: 422.
    pub max_top_k: usize,
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_inputs_per_request: 256,
            max_chars_per_input: 10_000,
            max_body_bytes: 4 * 1024 * 1024,
            max_queue_inputs: 1024,
            max_batch_tokens: 8192,
            max_batch_size: 64,
            workers: 1,
            max_top_k: 1000,
            corpus: None,
            search_index: None,
            api_keys: ApiKeys::none(),
            log_inputs: false,
        }
    }
}

/// The limits as reported by `GET /info`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct Limits {
    pub max_inputs_per_request: usize,
    pub max_chars_per_input: usize,
    pub max_body_bytes: usize,
    pub max_queue_inputs: usize,
    pub max_batch_tokens: usize,
    pub max_batch_size: usize,
    pub workers: usize,
    pub max_top_k: usize,
}

impl ServerConfig {
    /// Check that every limit is usable.
    pub fn validate(&self) -> Result<(), ServerError> {
        let positive = [
            ("max_inputs_per_request", self.max_inputs_per_request),
            ("max_chars_per_input", self.max_chars_per_input),
            ("max_body_bytes", self.max_body_bytes),
            ("max_queue_inputs", self.max_queue_inputs),
            ("max_batch_tokens", self.max_batch_tokens),
            ("max_batch_size", self.max_batch_size),
            ("workers", self.workers),
            ("max_top_k", self.max_top_k),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(ServerError::Config(format!("{name} must be at least 1")));
            }
        }
        if self.max_queue_inputs < self.max_inputs_per_request {
            return Err(ServerError::Config(format!(
                "max_queue_inputs ({}) must be at least max_inputs_per_request ({})",
                self.max_queue_inputs, self.max_inputs_per_request
            )));
        }
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

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_inputs_per_request: self.max_inputs_per_request,
            max_chars_per_input: self.max_chars_per_input,
            max_body_bytes: self.max_body_bytes,
            max_queue_inputs: self.max_queue_inputs,
            max_batch_tokens: self.max_batch_tokens,
            max_batch_size: self.max_batch_size,
            workers: self.workers,
            max_top_k: self.max_top_k,
        }
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
            max_batch_tokens: 0,
            ..ServerConfig::default()
        };
        assert!(
            matches!(zero.validate(), Err(ServerError::Config(m)) if m.contains("max_batch_tokens"))
        );
        let small_queue = ServerConfig {
            max_inputs_per_request: 10,
            max_queue_inputs: 9,
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
