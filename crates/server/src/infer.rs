//! The one way into the model, for every route (TEI's `core::Infer`):
//! a request's inputs are tokenized once, on the tokenization workers, so
//! that their cost is known before any model work; admitted by tokens right
//! after (or refused at once, 429); then queued, batched by length and run
//! as token batches on the workers ([`crate::queue`]). A handler dropped
//! before its answer (its client went away) takes its inputs out of the
//! queue.
//!
//! Room is held before tokenizing too: a request whose inputs cannot fit
//! among those queued and being tokenized is refused before any work, and
//! once the queue holds any tokens, one that would pass `max_queue_tokens`
//! even at its fewest possible tokens ([`min_text_tokens`] a text, its
//! length for token ids) is refused as well: under a flood of long texts the
//! refused requests are not tokenized first (their tokenizing took the
//! workers' cores).

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::backend::{EmbedBackend, Encoding};
use crate::error::ApiError;
use crate::metrics::{Load, Metrics};
use crate::queue::{Output, Queue, Task};
use crate::truncation::{Truncation, TruncationDirection};

/// One input of a request, before tokenizing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// A text.
    Text(String),
    /// A (text, text_pair) for a classifier.
    Pair(String, String),
    /// The model's own token ids, used as they are.
    Ids(Vec<u32>),
    /// A late-interaction query ([`EmbedBackend::encode_query`]).
    Query(String),
}

/// The fewest tokens `text` can have, before tokenizing: half its
/// whitespace-separated words, at least 1. Every tokenizer served here
/// gives each word at least one token (WordPiece, byte-level BPE and
/// SentencePiece split on whitespace first); halved so that it stays a
/// lower bound for a vocabulary with pieces that span two words.
pub(crate) fn min_text_tokens(text: &str) -> usize {
    text.split_whitespace().count().div_ceil(2).max(1)
}

/// The queue, its workers and the tokenization workers.
pub(crate) struct Infer {
    queue: Queue,
    backend: Arc<dyn EmbedBackend>,
    tokenizers: Arc<Semaphore>,
    tokenization_workers: usize,
    max_len: usize,
    vocab: Option<usize>,
    metrics: Arc<Metrics>,
}

impl Infer {
    pub(crate) fn new(
        queue: Queue,
        backend: Arc<dyn EmbedBackend>,
        tokenization_workers: usize,
        max_len: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let tokenization_workers = tokenization_workers.max(1);
        Self {
            queue,
            vocab: backend.vocab_size(),
            backend,
            tokenizers: Arc::new(Semaphore::new(tokenization_workers)),
            tokenization_workers,
            max_len,
            metrics,
        }
    }

    /// Tokenize `inputs` (named `field[i]` in errors), admit them and wait
    /// for `task`'s answers, in input order.
    pub(crate) async fn run(
        &self,
        task: Task,
        field: &str,
        inputs: Vec<Input>,
        truncation: Truncation,
    ) -> Result<Vec<Output>, ApiError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let min_tokens = inputs
            .iter()
            .map(|input| {
                match input {
                    Input::Ids(ids) => ids.len(),
                    Input::Text(t) | Input::Query(t) => min_text_tokens(t),
                    Input::Pair(a, b) => min_text_tokens(a) + min_text_tokens(b),
                }
                .min(self.max_len)
            })
            .sum();
        let reservation = self.queue.reserve(inputs.len(), min_tokens)?;
        let backend = Arc::clone(&self.backend);
        let (max_len, vocab) = (self.max_len, self.vocab);
        let field = field.to_owned();
        let encodings = self
            .blocking(move || {
                encode_all(backend.as_ref(), inputs, &field, truncation, max_len, vocab)
            })
            .await??;
        let truncated = encodings.iter().filter(|e| e.truncated).count();
        self.metrics.truncated.inc_by(truncated as u64);
        let ticket = self.queue.submit(reservation, task, encodings)?;
        ticket.wait().await
    }

    /// Run `f` on a tokenization worker: tokio's blocking pool, at most
    /// `tokenization_workers` at a time (other requests wait their turn).
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = Arc::clone(&self.tokenizers)
            .acquire_owned()
            .await
            .map_err(|_| ApiError::ShuttingDown)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await
        .map_err(|e| ApiError::Internal(format!("a tokenization worker failed: {e}")))
    }

    pub(crate) fn tokenization_workers(&self) -> usize {
        self.tokenization_workers
    }

    pub(crate) fn load(&self) -> Load {
        self.queue.load()
    }

    /// Admit nothing more (503); what is admitted still runs.
    pub(crate) fn stop_admitting(&self) {
        self.queue.stop_admitting();
    }

    /// Stop the workers once the queue is empty, and wait for them.
    pub(crate) fn shutdown(&self) {
        self.queue.shutdown();
    }
}

/// Every input as the model will see it; an input over `max_len` is cut or
/// refused as `truncation` says (413 unless `truncate`; 422 when it asks to
/// cut on the left), a token id outside the vocabulary is refused (422).
fn encode_all(
    backend: &dyn EmbedBackend,
    inputs: Vec<Input>,
    field: &str,
    truncation: Truncation,
    max_len: usize,
    vocab: Option<usize>,
) -> Result<Vec<Encoding>, ApiError> {
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let param = format!("{field}[{i}]");
            let encoded = match input {
                Input::Text(text) => backend.encode(&text, None),
                Input::Pair(a, b) => backend.encode(&a, Some(&b)),
                Input::Query(text) => backend.encode_query(&text),
                Input::Ids(ids) => return ids_encoding(ids, &param, truncation, max_len, vocab),
            };
            let encoding = encoded.map_err(|e| {
                ApiError::invalid(
                    Some(&param),
                    format!("{param} cannot be tokenized: {}", e.message),
                )
            })?;
            if encoding.ids.is_empty() {
                return Err(ApiError::invalid(
                    Some(&param),
                    format!("{param} has no tokens"),
                ));
            }
            check_cut(&encoding, &param, truncation, max_len)?;
            Ok(encoding)
        })
        .collect()
}

/// A client's token ids: each in the vocabulary, cut at `max_len` if allowed.
fn ids_encoding(
    ids: Vec<u32>,
    param: &str,
    truncation: Truncation,
    max_len: usize,
    vocab: Option<usize>,
) -> Result<Encoding, ApiError> {
    if let Some(size) = vocab {
        if let Some((k, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= size) {
            return Err(ApiError::invalid(
                Some(param),
                format!(
                    "{param}[{k}] = {id} is not a token id of this model (its vocabulary holds ids 0 to {})",
                    size.saturating_sub(1)
                ),
            ));
        }
    }
    if ids.is_empty() {
        return Err(ApiError::empty(param, format!("{param} is an empty array")));
    }
    let mut encoding = Encoding::of_ids(ids);
    if encoding.ids.len() > max_len {
        encoding.ids.truncate(max_len);
        encoding.truncated = true;
    }
    check_cut(&encoding, param, truncation, max_len)?;
    Ok(encoding)
}

fn check_cut(
    encoding: &Encoding,
    param: &str,
    truncation: Truncation,
    max_len: usize,
) -> Result<(), ApiError> {
    if !encoding.truncated {
        return Ok(());
    }
    if !truncation.truncate {
        return Err(ApiError::TooManyTokens {
            param: param.to_owned(),
            max_len,
        });
    }
    if truncation.direction == TruncationDirection::Left {
        return Err(ApiError::invalid(
            Some(param),
            format!(
                "{param} is longer than {max_len} tokens and bertflow cuts inputs on the right; \
                 truncation_direction \"Left\" is not supported"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::min_text_tokens;

    #[test]
    fn min_text_tokens_is_half_the_words_at_least_one() {
        assert_eq!(min_text_tokens(""), 1);
        assert_eq!(min_text_tokens("   "), 1);
        assert_eq!(min_text_tokens("one"), 1);
        assert_eq!(min_text_tokens("one two"), 1);
        assert_eq!(min_text_tokens("one two three"), 2);
        assert_eq!(min_text_tokens(" a\tb\nc  d "), 2);
    }
}
