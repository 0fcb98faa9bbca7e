//! Sparse and multi-vector outputs: what `bertflow encode --pooling splade`,
//! `--outputs dense,sparse,multi`, `--multi-vector`, `bertflow rerank
//! --late-interaction` and Python's `encode_sparse` / `encode_multi` run.
//!
//! - [`Retriever`]: a model with its retrieval heads
//!   ([`bertflow_encoder::RetrievalEncoder`]: SPLADE on a `*ForMaskedLM`
//!   checkpoint, BGE-M3's `sparse_linear.pt` / `colbert_linear.pt`, per-token
//!   vectors of any encoder), loaded from the model options of
//!   [`EmbedderConfig`];
//! - [`SparseVector`] (indices sorted, `u32`; values `f32`) and its file formats
//!   ([`crate::runtime::sparse_io`]);
//! - [`maxsim`]: late-interaction scoring (ColBERT's MaxSim);
//! - the rule that calibrators take dense vectors only ([`refuse_sparse_pooling`],
//!   [`refuse_non_dense_file`]).
use crate::error::{Context, CoreError, Result};
use crate::runtime::embedder::EmbedderConfig;
use crate::runtime::progress::SharedProgress;
use bertflow_encoder::head::{Outputs, RetrievalOptions, Retrieved};
use bertflow_encoder::{EncodeOptions, Pooling, RetrievalEncoder};
use ndarray::{Array2, ArrayView2};
use std::path::Path;

pub use bertflow_encoder::head::{Outputs as RetrievalOutputs, RetrievalOptions as Options};
pub use bertflow_encoder::SparseVector;

/// A loaded model with its retrieval heads and how to run it.
pub struct Retriever {
    pub encoder: RetrievalEncoder,
    pub opts: EncodeOptions,
    pub prompt: Option<crate::Prompt>,
    /// The model's named prompts (`config_sentence_transformers.json`).
    pub prompts: bertflow_encoder::st::StPrompts,
}

impl Retriever {
    /// Loads `cfg.model` (with `cfg`'s max length, precision, batch size,
    /// threads, kernels cache and prompt); the kernels' notes go to `progress`.
    pub fn open(cfg: &EmbedderConfig, progress: SharedProgress) -> Result<Self> {
        crate::runtime::rerank::refuse_reranker(&cfg.model)?;
        let run = &cfg.runtime;
        let opts = run.options()?;
        let load = || -> bertflow_encoder::Result<RetrievalEncoder> {
            let tune = run.tune(!cfg.no_cache)?;
            RetrievalEncoder::load_with_kernels(&cfg.model, run.max_len, run.precision, &tune)
                .map_err(crate::defaults::explain_missing_model)
        };
        let encoder = load().with_context(|| format!("cannot load model '{}'", cfg.model))?;
        for note in &encoder.encoder().kernels().notes {
            progress.note(note);
        }
        let prompts = bertflow_encoder::st::StPrompts::of_model(encoder.encoder().files())
            .with_context(|| format!("cannot load model '{}'", cfg.model))?;
        let prompt =
            crate::runtime::prompt::resolve(&prompts, &cfg.prompt, encoder.encoder().model_id())?;
        Ok(Self {
            encoder,
            opts,
            prompt,
            prompts,
        })
    }

    /// `texts` with the prompt of `prompt_name` before each (`None`: the
    /// retriever's own prompt), by the prompt rule of
    /// [`crate::runtime::prompt::resolve`]: what the server calls once per
    /// request. An unknown name is an error naming the known ones.
    pub fn prompt_texts(
        &self,
        texts: Vec<String>,
        prompt_name: Option<&str>,
    ) -> Result<Vec<String>> {
        let prompt = match prompt_name {
            None => self.prompt.clone(),
            Some(name) => {
                let asked = crate::PromptConfig {
                    prompt_name: Some(name.to_string()),
                    prompt: None,
                };
                let model = self.encoder.encoder().model_id();
                crate::runtime::prompt::resolve(&self.prompts, &asked, model)?
            }
        };
        Ok(match prompt {
            Some(p) => crate::runtime::prompt::apply(Some(&p), &texts),
            None => texts,
        })
    }

    /// The outputs `opts` asks for of each text (the prompt before each).
    pub fn encode<S: AsRef<str>>(&self, texts: &[S], opts: &RetrievalOptions) -> Result<Retrieved> {
        let texts = crate::runtime::prompt::apply(self.prompt.as_ref(), texts);
        Ok(self.encoder.encode(&texts, opts, &self.opts)?)
    }

    /// The sparse vectors of `texts` (`max_active_dims`: keep the largest).
    pub fn encode_sparse<S: AsRef<str>>(
        &self,
        texts: &[S],
        max_active_dims: Option<usize>,
    ) -> Result<Vec<SparseVector>> {
        let opts = RetrievalOptions {
            outputs: Outputs {
                sparse: true,
                ..Outputs::default()
            },
            max_active_dims,
            ..RetrievalOptions::default()
        };
        Ok(self.encode(texts, &opts)?.sparse.unwrap_or_default())
    }

    /// The per-token vectors of `texts` (`skip_first`, `query_length`: see
    /// [`RetrievalOptions`]).
    pub fn encode_multi<S: AsRef<str>>(
        &self,
        texts: &[S],
        skip_first: Option<bool>,
        query_length: Option<usize>,
    ) -> Result<Vec<Array2<f32>>> {
        let opts = RetrievalOptions {
            outputs: Outputs {
                multi: true,
                ..Outputs::default()
            },
            skip_first,
            query_length,
            ..RetrievalOptions::default()
        };
        Ok(self.encode(texts, &opts)?.multi.unwrap_or_default())
    }

    /// The `k` largest entries of `v` as (token, weight), largest first (as
    /// sentence-transformers' `SparseEncoder.decode`).
    pub fn decode(&self, v: &SparseVector, k: usize) -> Vec<(String, f32)> {
        decode_with(v, k, |id| self.encoder.token(id))
    }

    /// Late-interaction scores of `texts` against `query`: the query's token
    /// vectors padded to `query_length` when given (ColBERT's query
    /// augmentation), [`maxsim`] against each text's.
    pub fn late_interaction(
        &self,
        query: &str,
        texts: &[String],
        query_length: Option<usize>,
        skip_first: Option<bool>,
    ) -> Result<Vec<f32>> {
        let q = self.encode_multi(&[query], skip_first, query_length)?;
        let docs = self.encode_multi(texts, skip_first, None)?;
        docs.iter().map(|d| maxsim(q[0].view(), d.view())).collect()
    }
}

/// The `k` largest entries of `v`, named by `token`, largest first.
pub fn decode_with(
    v: &SparseVector,
    k: usize,
    token: impl Fn(u32) -> String,
) -> Vec<(String, f32)> {
    v.top(k).into_iter().map(|(i, x)| (token(i), x)).collect()
}

/// ColBERT's MaxSim: for each query vector the largest dot product with a
/// document vector, summed; an error when the widths differ or a side is empty.
pub fn maxsim(query: ArrayView2<f32>, doc: ArrayView2<f32>) -> Result<f32> {
    if query.ncols() != doc.ncols() {
        return Err(CoreError::Input(format!(
            "MaxSim: query vectors of {} dimensions against document vectors of {}",
            query.ncols(),
            doc.ncols()
        )));
    }
    if query.nrows() == 0 || doc.nrows() == 0 {
        return Err(CoreError::Input(
            "MaxSim: a query or document without token vectors".into(),
        ));
    }
    let sims = query.dot(&doc.t());
    Ok(sims
        .outer_iter()
        .map(|row| row.iter().copied().fold(f32::NEG_INFINITY, f32::max))
        .sum())
}

/// A calibrator applies to dense vectors only: an error for a sparse pooling.
pub fn refuse_sparse_pooling(pooling: &Pooling) -> Result<()> {
    if pooling.is_sparse() {
        return Err(CoreError::setting(
            "pooling",
            format!(
                "'{pooling}' makes sparse vectors (one weight per vocabulary entry); a calibrator \
                 applies to dense vectors only: fit it on a dense pooling (last-avg, cls, ...), \
                 and use sparse vectors as they are"
            ),
        ));
    }
    Ok(())
}

/// A calibrator applies to dense vectors only: an error for a sparse file
/// (a CSR `.npz`, as `encode` writes sparse vectors) or a multi-vector file
/// (a `.safetensors` with an `offsets` tensor: per-token vectors).
pub fn refuse_non_dense_file(path: &Path) -> Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let what = if ext == "npz" {
        Some("sparse vectors (a CSR .npz)")
    } else if ext == "safetensors" && crate::runtime::sparse_io::is_multi_vector_file(path) {
        Some("per-token (multi-vector) vectors (a .safetensors with offsets)")
    } else {
        None
    };
    match what {
        Some(what) => Err(CoreError::Input(format!(
            "{}: holds {what}; a calibrator applies to dense sentence vectors only (one row per \
             sentence): fit it on a dense pooling's vectors",
            path.display()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn maxsim_sums_each_query_vectors_best_match() {
        let q = array![[1.0f32, 0.0], [0.0, 1.0]];
        let d = array![[0.5f32, 0.5], [1.0, 0.0], [0.0, 0.25]];
        assert_eq!(maxsim(q.view(), d.view()).unwrap(), 1.0 + 0.5);
        let wide = array![[1.0f32, 0.0, 0.0]];
        assert!(maxsim(q.view(), wide.view()).is_err());
        let empty = Array2::<f32>::zeros((0, 2));
        assert!(maxsim(q.view(), empty.view()).is_err());
    }

    #[test]
    fn calibrators_refuse_sparse_poolings_and_files() {
        assert!(refuse_sparse_pooling(&Pooling::LastAvg).is_ok());
        let e = refuse_sparse_pooling(&Pooling::Splade)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dense vectors only"), "{e}");
        let e = refuse_non_dense_file(Path::new("x.npz"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sparse vectors"), "{e}");
        assert!(refuse_non_dense_file(Path::new("x.npy")).is_ok());
    }

    #[test]
    fn decode_names_the_largest_first() {
        let v = SparseVector {
            indices: vec![1, 5, 9],
            values: vec![0.5, 2.0, 1.0],
        };
        let d = decode_with(&v, 2, |i| format!("t{i}"));
        assert_eq!(d, [("t5".to_string(), 2.0), ("t9".to_string(), 1.0)]);
    }
}
