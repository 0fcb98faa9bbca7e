//! A model with retrieval heads behind the server (feature `model`): core's
//! [`Retriever`] (SPLADE on a `*ForMaskedLM` checkpoint; BGE-M3's
//! `sparse_linear.pt` and `colbert_linear.pt`; per-token vectors of any
//! encoder) as an [`EmbedBackend`], serving the outputs it was started with:
//!
//! - dense: `/embed`, `/v1/embeddings`, ... answer the first token's vector,
//!   L2-normalised (BGE-M3's dense output);
//! - sparse: `/embed_sparse`;
//! - multi: `/embed_multi`, and `/rerank` by late interaction (MaxSim).
//!
//! An output it was not started with is refused (424 on TEI's routes).

use bertflow_core::encoder::head::{Outputs, RetrievalOptions};
use bertflow_core::retrieval::Retriever;

use crate::backend::{
    BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind, SparseEmbedded,
};

/// What the retrieval backend serves and how.
#[derive(Debug, Clone, Default)]
pub struct RetrievalServing {
    /// The outputs served (at least one).
    pub outputs: Outputs,
    /// Keep only this many sparse entries (largest first).
    pub max_active_dims: Option<usize>,
    /// Drop the first token's vector (`None`: the model's default).
    pub skip_first: Option<bool>,
    /// Late-interaction queries: cut to, then padded with the mask token to,
    /// this many tokens (`None`: as tokenized).
    pub query_length: Option<usize>,
}

/// A [`Retriever`] as the server's backend.
pub struct RetrievalBackend {
    retriever: Retriever,
    serving: RetrievalServing,
    info: BackendInfo,
}

impl RetrievalBackend {
    /// Serve `serving.outputs` of `retriever` (each worker runs one thread).
    pub fn new(mut retriever: Retriever, serving: RetrievalServing) -> Result<Self, BackendError> {
        let o = serving.outputs;
        if o == Outputs::default() {
            return Err(BackendError::new(
                "no output to serve: give --outputs dense,sparse,multi (or --pooling splade)",
            ));
        }
        if o.sparse && !retriever.encoder.has_sparse() {
            return Err(BackendError::new(format!(
                "{} has no sparse head: sparse vectors need a *ForMaskedLM checkpoint (SPLADE) \
                 or BGE-M3's sparse_linear.pt beside the weights",
                retriever.encoder.encoder().model_id()
            )));
        }
        retriever.opts.threads = 1;
        let encoder = retriever.encoder.encoder();
        let served: Vec<&str> = [(o.dense, "dense"), (o.sparse, "sparse"), (o.multi, "multi")]
            .iter()
            .filter_map(|&(on, name)| on.then_some(name))
            .collect();
        let info = BackendInfo {
            model_id: encoder.model_id().to_string(),
            pooling: match retriever.encoder.sparse_kind() {
                Some(kind) if o.sparse => format!("{kind} ({})", served.join(", ")),
                _ => served.join(", "),
            },
            calibrator: None,
            dimension: encoder.dim(),
            max_len: encoder.max_len(),
            kind: ModelKind::Embedding,
            labels: Vec::new(),
        };
        Ok(Self {
            retriever,
            serving,
            info,
        })
    }

    /// The outputs of a token batch.
    fn run(
        &self,
        batch: &[Encoding],
        outputs: Outputs,
    ) -> Result<bertflow_core::encoder::head::Retrieved, BackendError> {
        let toks: Vec<Vec<u32>> = batch.iter().map(|e| e.ids.clone()).collect();
        let opts = RetrievalOptions {
            outputs,
            max_active_dims: self.serving.max_active_dims,
            skip_first: self.serving.skip_first,
            query_length: None,
        };
        self.retriever
            .encoder
            .encode_ids(&toks, &opts, &self.retriever.opts)
            .map_err(|e| BackendError::new(e.to_string()))
    }

    fn refuse(&self, what: &str, flag: &str) -> BackendError {
        BackendError::new(format!(
            "this server does not serve {what} of {} (started with outputs {}): restart it \
             with --outputs including {flag}",
            self.info.model_id, self.info.pooling
        ))
    }
}

impl EmbedBackend for RetrievalBackend {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        if pair.is_some() {
            return Err(BackendError::new(
                "an embedding model takes one text per input, not a pair",
            ));
        }
        let (ids, truncated) = self
            .retriever
            .encoder
            .encoder()
            .tokenize(text)
            .map_err(|e| BackendError::new(format!("tokenisation failed: {e}")))?;
        Ok(Encoding {
            ids,
            type_ids: Vec::new(),
            truncated,
        })
    }

    fn encode_query(&self, text: &str) -> Result<Encoding, BackendError> {
        match self.serving.query_length {
            None => self.encode(text, None),
            Some(q) => Ok(Encoding::of_ids(
                self.retriever
                    .encoder
                    .tokenize(text, Some(q))
                    .map_err(|e| BackendError::new(format!("tokenisation failed: {e}")))?,
            )),
        }
    }

    fn prompted(
        &self,
        texts: Vec<String>,
        prompt_name: Option<&str>,
    ) -> Result<Vec<String>, String> {
        self.retriever
            .prompt_texts(texts, prompt_name)
            .map_err(|e| e.chain())
    }

    fn vocab_size(&self) -> Option<usize> {
        Some(self.retriever.encoder.encoder().config().vocab_size)
    }

    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        if !self.serving.outputs.dense {
            return Err(self.refuse("dense vectors", "dense"));
        }
        let dense = Outputs {
            dense: true,
            ..Outputs::default()
        };
        let rows = self
            .run(batch, dense)?
            .dense
            .ok_or_else(|| BackendError::new("the encoder gave no dense output"))?;
        Ok(rows
            .outer_iter()
            .map(|row| Embedded {
                vector: row.to_vec(),
                tokens: 0,
                truncated: false,
            })
            .collect())
    }

    fn embed_sparse(
        &self,
        batch: &[Encoding],
    ) -> Option<Result<Vec<SparseEmbedded>, BackendError>> {
        if !self.serving.outputs.sparse {
            return None;
        }
        let sparse = Outputs {
            sparse: true,
            ..Outputs::default()
        };
        Some(self.run(batch, sparse).map(|r| {
            r.sparse
                .unwrap_or_default()
                .into_iter()
                .map(|v| SparseEmbedded {
                    indices: v.indices,
                    values: v.values,
                })
                .collect()
        }))
    }

    fn embed_multi(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        if !self.serving.outputs.multi {
            return None;
        }
        let multi = Outputs {
            multi: true,
            ..Outputs::default()
        };
        Some(self.run(batch, multi).map(|r| {
            r.multi
                .unwrap_or_default()
                .into_iter()
                .map(|m| m.outer_iter().map(|row| row.to_vec()).collect())
                .collect()
        }))
    }

    fn late_interaction(&self) -> bool {
        self.serving.outputs.multi
    }
}

/// A dense backend with a model's sparse head beside it: everything is the
/// dense backend's but [`EmbedBackend::embed_sparse`], which the sparse
/// head answers (`/embed_sparse`, and `/search`'s `sparse` and `hybrid`
/// modes over an index that stores the head's sparse vectors). Both read
/// the same model directory, so one tokenization serves both.
pub struct WithSparseHead {
    dense: std::sync::Arc<dyn EmbedBackend>,
    sparse: RetrievalBackend,
}

impl WithSparseHead {
    /// `dense` with `retriever`'s sparse head (an error if it has none).
    pub fn new(
        dense: std::sync::Arc<dyn EmbedBackend>,
        retriever: Retriever,
        max_active_dims: Option<usize>,
    ) -> Result<Self, BackendError> {
        let serving = RetrievalServing {
            outputs: Outputs {
                sparse: true,
                ..Outputs::default()
            },
            max_active_dims,
            ..RetrievalServing::default()
        };
        Ok(Self {
            dense,
            sparse: RetrievalBackend::new(retriever, serving)?,
        })
    }
}

impl EmbedBackend for WithSparseHead {
    fn info(&self) -> BackendInfo {
        self.dense.info()
    }
    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        self.dense.encode(text, pair)
    }
    fn prompted(
        &self,
        texts: Vec<String>,
        prompt_name: Option<&str>,
    ) -> Result<Vec<String>, String> {
        self.dense.prompted(texts, prompt_name)
    }
    fn vocab_size(&self) -> Option<usize> {
        self.dense.vocab_size()
    }
    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        self.dense.embed(batch)
    }
    fn embed_all(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        self.dense.embed_all(batch)
    }
    fn embed_sparse(
        &self,
        batch: &[Encoding],
    ) -> Option<Result<Vec<SparseEmbedded>, BackendError>> {
        self.sparse.embed_sparse(batch)
    }
    fn tokenize(&self, text: &str) -> Option<Result<crate::backend::Tokenized, BackendError>> {
        self.dense.tokenize(text)
    }
    fn token_spans(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Option<Result<Vec<crate::backend::TokenSpan>, BackendError>> {
        self.dense.token_spans(text, add_special_tokens)
    }
    fn decode(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
    ) -> Option<Result<String, BackendError>> {
        self.dense.decode(ids, skip_special_tokens)
    }
    fn quantizer(&self) -> Option<&bertflow_core::quantize::Quantizer> {
        self.dense.quantizer()
    }
}
