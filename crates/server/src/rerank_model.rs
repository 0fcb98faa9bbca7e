//! The real cross-encoder behind the server (feature `model`): core's
//! [`Reranker`] as an [`EmbedBackend`] whose `predict` answers TEI's
//! `/rerank` and `/predict`. Asked to embed, it answers that it is a
//! reranker (the embedding routes turn that into TEI's error).

use bertflow_core::rerank::Reranker;

use crate::backend::{BackendError, BackendInfo, EmbedBackend, Embedded, ModelKind};

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

    fn tokenize_len(&self, text: &str) -> usize {
        let tok = self.reranker.cross_encoder().encoder().tokenizer();
        tok.encode_prefix(text, self.info.max_len, false)
            .map_or(self.info.max_len, |ids| ids.len().min(self.info.max_len))
    }

    fn embed(&self, _texts: &[String]) -> Result<Vec<Embedded>, BackendError> {
        Err(BackendError::new(format!(
            "model {} is a reranker (cross-encoder): use /rerank or /predict",
            self.info.model_id
        )))
    }

    fn predict(
        &self,
        inputs: &[(String, Option<String>)],
        truncate: bool,
    ) -> Option<Result<Vec<Vec<f32>>, BackendError>> {
        Some(
            self.reranker
                .predict(inputs, truncate)
                .map_err(|e| BackendError::new(e.chain())),
        )
    }
}
