//! The real cross-encoder behind the server (feature `model`): core's
//! [`Reranker`] as an [`EmbedBackend`] whose `predict` answers TEI's
//! `/rerank` and `/predict`. Asked to embed, it answers that it is a
//! reranker (the embedding routes turn that into TEI's error).

use bertflow_core::encoder::head::{PairTokens, Truncation};
use bertflow_core::encoder::EncoderError;
use bertflow_core::rerank::Reranker;

use crate::backend::{BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind};

/// A [`Reranker`] as the server's backend.
pub struct RerankBackend {
    reranker: Reranker,
    info: BackendInfo,
}

impl RerankBackend {
    /// The loaded cross-encoder.
    pub fn new(reranker: Reranker) -> Self {
        let info = BackendInfo {
            model_id: reranker.model_id().to_string(),
            pooling: "classifier".to_string(),
            calibrator: None,
            dimension: reranker.labels().len().max(1),
            max_len: reranker.max_len(),
            kind: ModelKind::Reranker,
            labels: reranker.labels().to_vec(),
        };
        Self { reranker, info }
    }
}

impl EmbedBackend for RerankBackend {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        let cross = self.reranker.cross_encoder();
        // As the checkpoint's tokenizer pairs them; cut (`longest_first`,
        // on the right) only when it does not fit.
        let (tokens, truncated) = match cross.tokenize(text, pair, Truncation::Error) {
            Ok(tokens) => (tokens, false),
            Err(EncoderError::TooLong { .. }) => (
                cross
                    .tokenize(text, pair, Truncation::Right)
                    .map_err(|e| BackendError::new(e.to_string()))?,
                true,
            ),
            Err(e) => return Err(BackendError::new(e.to_string())),
        };
        Ok(Encoding {
            ids: tokens.ids,
            type_ids: tokens.types,
            truncated,
        })
    }

    fn vocab_size(&self) -> Option<usize> {
        Some(
            self.reranker
                .cross_encoder()
                .encoder()
                .tokenizer()
                .vocab_size(),
        )
    }

    fn embed(&self, _batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        Err(BackendError::new(format!(
            "model {} is a reranker (cross-encoder): use /rerank or /predict",
            self.info.model_id
        )))
    }

    fn predict(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        let toks: Vec<PairTokens> = batch
            .iter()
            .map(|e| PairTokens {
                ids: e.ids.clone(),
                types: if e.type_ids.len() == e.ids.len() {
                    e.type_ids.clone()
                } else {
                    vec![0; e.ids.len()]
                },
            })
            .collect();
        Some(
            self.reranker
                .cross_encoder()
                .predict_tokens(&toks, self.reranker.options())
                .map_err(|e| BackendError::new(e.to_string())),
        )
    }
}
