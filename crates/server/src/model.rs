//! The real model behind the server (feature `model`): the BERT encoder with
//! one pooling and an optional calibrator as an [`EmbedBackend`], and a
//! memory-mapped `bertflow index` file (with its HNSW graph, if any) as a
//! [`crate::index::SearchIndex`] ([`MappedIndex`], in `mapped.rs`). The HTTP
//! layer itself does not depend on this module.

use std::sync::OnceLock;

use bertflow_core::encoder::{EncodeOptions, PoolSource};
use bertflow_core::index::Identity;
use bertflow_core::Pipeline;

use crate::backend::{
    BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind, TokenSpan, Tokenized,
};
pub use crate::mapped::{IndexOptions, MappedIndex};

/// A [`Pipeline`] (model, pooling, token weights, calibrator) as the server's backend.
pub struct ModelBackend {
    pipeline: Pipeline,
    opts: EncodeOptions,
    info: BackendInfo,
    identity: Identity,
    /// The pooling as the encoder runs it on token batches; built on first use.
    ids_source: OnceLock<Result<PoolSource, String>>,
}

impl ModelBackend {
    /// `batch_size` sentences per forward pass; each call runs on one core
    /// (parallelism comes from the server's batch workers). The pipeline has
    /// checked its calibrator against the model and pooling.
    pub fn new(pipeline: Pipeline, batch_size: usize) -> Result<Self, BackendError> {
        let identity = pipeline
            .identity()
            .map_err(|e| BackendError::new(e.chain()))?;
        let info = pipeline.info();
        let info = BackendInfo {
            model_id: info.model_id,
            pooling: info.pooling,
            calibrator: info.calibrator,
            dimension: info.dimension,
            max_len: info.max_len,
            kind: ModelKind::Embedding,
            labels: Vec::new(),
        };
        let opts = EncodeOptions {
            batch_size: batch_size.max(1),
            threads: 1,
        };
        Ok(Self {
            pipeline,
            opts,
            info,
            identity,
            ids_source: OnceLock::new(),
        })
    }

    /// The identity of the vectors it makes, as a `bertflow index` records it.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }
}

impl EmbedBackend for ModelBackend {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        if pair.is_some() {
            return Err(BackendError::new(
                "an embedding model takes one text per input, not a pair",
            ));
        }
        // Exactly what the pipeline feeds the model: [CLS] ... [SEP], cut at
        // max_len (for `st`, lowercased and cut where its directory says).
        let (ids, truncated) = self
            .pipeline
            .tokenize(text)
            .map_err(|e| BackendError::new(format!("tokenisation failed: {}", e.chain())))?;
        Ok(Encoding {
            ids,
            type_ids: Vec::new(),
            truncated,
        })
    }

    fn prompted(
        &self,
        texts: Vec<String>,
        prompt_name: Option<&str>,
    ) -> Result<Vec<String>, String> {
        self.pipeline
            .prompt_texts(texts, prompt_name)
            .map_err(|e| e.chain())
    }

    fn vocab_size(&self) -> Option<usize> {
        Some(self.pipeline.encoder().tokenizer().vocab_size())
    }

    fn quantizer(&self) -> Option<&bertflow_core::quantize::Quantizer> {
        self.pipeline
            .calibrator()
            .and_then(bertflow_core::quantize::stage_of)
    }

    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        // Exactly what `embed` feeds the model: [CLS] ... [SEP], cut at max_len
        // (for `st`, lowercased and cut where its directory says).
        let tokenizer = self.pipeline.encoder().tokenizer();
        let tokenized = self
            .pipeline
            .tokenize(text)
            .map_err(|e| BackendError::new(format!("tokenisation failed: {}", e.chain())))
            .and_then(|(ids, truncated)| {
                let tokens = ids
                    .iter()
                    .map(|&id| {
                        tokenizer.id_to_token(id).ok_or_else(|| {
                            BackendError::new(format!("token id {id} is not in the vocabulary"))
                        })
                    })
                    .collect::<Result<Vec<String>, BackendError>>()?;
                Ok(Tokenized {
                    ids,
                    tokens,
                    truncated,
                })
            });
        Some(tokenized)
    }

    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        let source = self
            .ids_source
            .get_or_init(|| self.pipeline.ids_source().map_err(|e| e.chain()))
            .as_ref()
            .map_err(|e| BackendError::new(e.clone()))?;
        let ids: Vec<Vec<u32>> = batch.iter().map(|e| e.ids.clone()).collect();
        let out = self
            .pipeline
            .embed_ids(source, &ids, &self.opts)
            .map_err(|e| BackendError::new(format!("encoding failed: {}", e.chain())))?;
        self.calibrated(out, batch.len())
    }

    fn embed_all(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        Some(
            batch
                .iter()
                .map(|e| {
                    self.pipeline
                        .encoder()
                        .token_states(&e.ids)
                        .map_err(|e| BackendError::new(format!("encoding failed: {e}")))
                })
                .collect(),
        )
    }

    fn token_spans(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Option<Result<Vec<TokenSpan>, BackendError>> {
        let tokenizer = self.pipeline.encoder().tokenizer();
        let spans = self
            .pipeline
            .tokenize(text)
            .map_err(|e| BackendError::new(format!("tokenisation failed: {}", e.chain())))
            .and_then(|(ids, _)| {
                ids.into_iter()
                    .map(|id| {
                        let text = tokenizer.id_to_token(id).ok_or_else(|| {
                            BackendError::new(format!("token id {id} is not in the vocabulary"))
                        })?;
                        Ok(TokenSpan {
                            id,
                            text,
                            special: tokenizer.is_special_id(id),
                            start: None,
                            stop: None,
                        })
                    })
                    .filter(|s| add_special_tokens || s.as_ref().map_or(true, |s| !s.special))
                    .collect()
            });
        Some(spans)
    }

    fn decode(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
    ) -> Option<Result<String, BackendError>> {
        let tokenizer = self.pipeline.encoder().tokenizer();
        let mut pieces = Vec::with_capacity(ids.len());
        for &id in ids {
            if skip_special_tokens && tokenizer.is_special_id(id) {
                continue;
            }
            match tokenizer.id_to_token(id) {
                Some(token) => pieces.push(token),
                None => {
                    return Some(Err(BackendError::new(format!(
                        "token id {id} is not in the vocabulary"
                    ))))
                }
            }
        }
        Some(Ok(join_pieces(&pieces)))
    }
}

/// Word pieces back to text: WordPiece's `##` continues a word; where pieces
/// mark word starts instead (`Ġ` byte-level BPE, `▁` SentencePiece), an
/// unmarked piece continues one.
fn join_pieces(pieces: &[String]) -> String {
    let marks_starts = pieces
        .iter()
        .any(|p| p.starts_with('\u{120}') || p.starts_with('\u{2581}'));
    let mut out = String::new();
    for piece in pieces {
        let (text, starts_word) = if let Some(rest) = piece.strip_prefix("##") {
            (rest, false)
        } else if let Some(rest) = piece
            .strip_prefix('\u{120}')
            .or_else(|| piece.strip_prefix('\u{2581}'))
        {
            (rest, true)
        } else {
            (piece.as_str(), !marks_starts)
        };
        if starts_word && !out.is_empty() {
            out.push(' ');
        }
        out.push_str(text);
    }
    out
}

impl ModelBackend {
    /// Calibrated rows of `out` as [`Embedded`], checked to be `count`.
    fn calibrated(
        &self,
        out: bertflow_core::pipeline::Batch,
        count: usize,
    ) -> Result<Vec<Embedded>, BackendError> {
        let texts_len = count;
        let vectors = self
            .pipeline
            .calibrate(out.vectors)
            .map_err(|e| BackendError::new(format!("calibrator failed: {}", e.chain())))?;
        if vectors.nrows() != texts_len
            || out.tokens.len() != texts_len
            || out.truncated.len() != texts_len
        {
            return Err(BackendError::new(format!(
                "the encoder returned {} rows for {} inputs",
                vectors.nrows(),
                texts_len
            )));
        }
        Ok(vectors
            .outer_iter()
            .zip(out.tokens.iter().zip(&out.truncated))
            .map(|(row, (&tokens, &truncated))| Embedded {
                vector: row.to_vec(),
                tokens,
                truncated,
            })
            .collect())
    }
}
