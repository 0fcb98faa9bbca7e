//! Rerankers (cross-encoders): sequence-classification checkpoints
//! (`*ForSequenceClassification` in `config.json`'s `architectures`) that
//! score a query and a text read together. What `bertflow rerank`, the
//! server's `/rerank` and `/predict` and Python's `bertflow.Reranker` run.
//!
//! Scores follow text-embeddings-inference's `/rerank`: the sigmoid of the
//! model's one logit (its raw logit with `raw_scores`); a model of more than
//! one label only predicts (raw logits per label).
use crate::error::{Context, CoreError, Result};
use crate::runtime::progress::SharedProgress;
use crate::runtime::run_config::RuntimeConfig;
use bertflow_encoder::{CrossEncoder, EncodeOptions, EncoderError, ModelFiles};

/// What becomes of an input longer than the reranker's `max_len` tokens.
pub use bertflow_encoder::head::Truncation;

/// How to load and run a reranker. With core's `clap` feature it is the
/// command line's model options (the CLI flattens it); it reads and writes as
/// JSON (serde).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RerankerConfig {
    /// Reranker (cross-encoder): a directory in Hugging Face layout whose
    /// config.json names a *ForSequenceClassification architecture (BERT,
    /// RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, MPNet, ModernBERT), or a hub
    /// id (e.g. cross-encoder/ms-marco-MiniLM-L6-v2, BAAI/bge-reranker-base)
    /// found in the local Hugging Face cache.
    #[cfg_attr(feature = "clap", arg(long, short = 'm'))]
    pub model: String,
    /// Maximum length, batch size, threads, cache directory and precision.
    #[cfg_attr(feature = "clap", command(flatten))]
    #[serde(flatten)]
    pub runtime: RuntimeConfig,
}

impl RerankerConfig {
    /// The defaults with `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            ..Self::default()
        }
    }

    /// Loads the reranker: an error naming `model` when it is none or an
    /// embedding model (no classification head); the kernels' notes go to
    /// `progress`.
    pub fn open(&self, progress: SharedProgress) -> Result<Reranker> {
        if self.model.trim().is_empty() {
            return Err(CoreError::setting("model", "no reranker given"));
        }
        if !is_reranker(&self.model)
            .with_context(|| format!("cannot load model '{}'", self.model))?
        {
            return Err(CoreError::NotReranker {
                field: "model",
                model: self.model.clone(),
            });
        }
        let run = &self.runtime;
        let opts = run.options()?;
        let load = || -> bertflow_encoder::Result<CrossEncoder> {
            let tune = run.tune(true)?;
            CrossEncoder::load_with_kernels(&self.model, run.max_len, run.precision, &tune)
                .map_err(crate::defaults::explain_missing_model)
        };
        let cross = load().with_context(|| format!("cannot load model '{}'", self.model))?;
        for note in &cross.encoder().kernels().notes {
            progress.note(note);
        }
        Ok(Reranker { cross, opts })
    }
}

/// Whether `model` (a directory or a hub id in the local cache) is a
/// reranker: its `config.json` names a `*ForSequenceClassification`
/// architecture. Reads config.json only.
pub fn is_reranker(model: &str) -> Result<bool> {
    let files = ModelFiles::resolve(model).map_err(crate::defaults::explain_missing_model)?;
    let text =
        std::fs::read_to_string(&files.config).map_err(CoreError::io("read", &files.config))?;
    bertflow_encoder::head::is_classifier_config(&text).map_err(|msg| {
        CoreError::Encoder(EncoderError::BadFile {
            path: files.config.clone(),
            msg,
        })
    })
}

/// An error naming `model` when it is a reranker (for the embedding
/// pipelines); nothing when it is not, or cannot be read (loading it reports that).
pub(crate) fn refuse_reranker(model: &str) -> Result<()> {
    match is_reranker(model) {
        Ok(true) => Err(CoreError::IsReranker {
            field: "model",
            model: model.to_string(),
        }),
        _ => Ok(()),
    }
}

/// One text of a reranking, as text-embeddings-inference's `/rerank` answers:
/// its index in the input and its score.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rank {
    pub index: usize,
    pub score: f32,
}

/// The texts by score, highest first (ties keep input order; a NaN score last).
pub fn ranked(scores: &[f32]) -> Vec<Rank> {
    let mut r: Vec<Rank> = scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Rank { index, score })
        .collect();
    r.sort_by(|a, b| match (a.score.is_nan(), b.score.is_nan()) {
        (false, false) => b.score.total_cmp(&a.score),
        (x, y) => x.cmp(&y),
    });
    r
}

/// One label's score of an input, as text-embeddings-inference's `/predict`
/// answers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Prediction {
    pub score: f32,
    pub label: String,
}

/// `/predict`'s scores of one input's `logits`: the logits with `raw_scores`,
/// else the sigmoid of a single logit or the softmax of several.
pub fn scores(logits: &[f32], raw_scores: bool) -> Vec<f32> {
    if raw_scores {
        return logits.to_vec();
    }
    if let [x] = logits {
        return vec![1.0 / (1.0 + (-x).exp())];
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = logits.iter().map(|x| (x - max).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.iter().map(|e| e / sum).collect()
}

/// [`Truncation::Right`] when `truncate` (transformers' `truncation=True`),
/// else [`Truncation::Error`].
pub fn truncation(truncate: bool) -> Truncation {
    if truncate {
        Truncation::Right
    } else {
        Truncation::Error
    }
}

/// A loaded reranker and how to run it.
pub struct Reranker {
    cross: CrossEncoder,
    opts: EncodeOptions,
}

impl Reranker {
    /// The raw classifier logits of each input (a text, or a pair read as one
    /// sequence), one per label. Inputs longer than `max_len` tokens are cut
    /// when `truncate`, else an error.
    pub fn predict(
        &self,
        inputs: &[(String, Option<String>)],
        truncate: bool,
    ) -> Result<Vec<Vec<f32>>> {
        self.predict_with(inputs, truncation(truncate))
    }

    /// [`Reranker::predict`] with the truncation's side (TEI's
    /// `truncation_direction`).
    pub fn predict_with(
        &self,
        inputs: &[(String, Option<String>)],
        truncation: Truncation,
    ) -> Result<Vec<Vec<f32>>> {
        Ok(self.cross.predict(inputs, truncation, &self.opts)?)
    }

    /// The score of each text against `query` (text-embeddings-inference's
    /// `/rerank`): the sigmoid of the one logit, or the logit itself with
    /// `raw_scores`; an error naming `model` for a model of several labels.
    pub fn rerank(
        &self,
        query: &str,
        texts: &[String],
        raw_scores: bool,
        truncate: bool,
    ) -> Result<Vec<f32>> {
        self.rerank_with(query, texts, raw_scores, truncation(truncate))
    }

    /// [`Reranker::rerank`] with the truncation's side (TEI's
    /// `truncation_direction`).
    pub fn rerank_with(
        &self,
        query: &str,
        texts: &[String],
        raw_scores: bool,
        truncation: Truncation,
    ) -> Result<Vec<f32>> {
        let labels = self.labels();
        if labels.len() != 1 {
            return Err(CoreError::setting(
                "model",
                format!(
                    "{} is a classifier of {} labels ({}), not a reranker of one score: \
                     use predict for its logits",
                    self.model_id(),
                    labels.len(),
                    labels.join(", ")
                ),
            ));
        }
        let inputs: Vec<(String, Option<String>)> = texts
            .iter()
            .map(|t| (query.to_string(), Some(t.clone())))
            .collect();
        let logits = self.predict_with(&inputs, truncation)?;
        Ok(logits
            .into_iter()
            .map(|l| {
                let x = l[0];
                if raw_scores {
                    x
                } else {
                    1.0 / (1.0 + (-x).exp())
                }
            })
            .collect())
    }

    /// Each input's labels with their [`scores`], highest first
    /// (text-embeddings-inference's `/predict`).
    pub fn classify(
        &self,
        inputs: &[(String, Option<String>)],
        raw_scores: bool,
        truncation: Truncation,
    ) -> Result<Vec<Vec<Prediction>>> {
        let labels = self.labels();
        Ok(self
            .predict_with(inputs, truncation)?
            .iter()
            .map(|logits| {
                let s = scores(logits, raw_scores);
                ranked(&s)
                    .into_iter()
                    .map(|r| Prediction {
                        score: r.score,
                        label: labels[r.index].clone(),
                    })
                    .collect()
            })
            .collect())
    }

    /// The labels, one per logit (`id2label`).
    pub fn labels(&self) -> &[String] {
        self.cross.labels()
    }

    /// The most tokens of an input (query and text together), special tokens included.
    pub fn max_len(&self) -> usize {
        self.cross.max_len()
    }

    /// The model as given.
    pub fn model_id(&self) -> &str {
        self.cross.encoder().model_id()
    }

    /// The checkpoint's `*ForSequenceClassification` class.
    pub fn class(&self) -> &str {
        self.cross.class()
    }

    /// The cross-encoder (encoder, kernels, tokenizer) under the reranker.
    pub fn cross_encoder(&self) -> &CrossEncoder {
        &self.cross
    }

    /// How batches run.
    pub fn options(&self) -> &EncodeOptions {
        &self.opts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_sigmoid_softmax_or_raw() {
        assert_eq!(scores(&[0.0], false), [0.5]);
        assert_eq!(scores(&[2.0, -1.0], true), [2.0, -1.0]);
        let s = scores(&[1000.0, 1000.0, f32::NEG_INFINITY], false);
        assert_eq!(s, [0.5, 0.5, 0.0]);
        let s = scores(&[1.0, 2.0], false);
        assert!((s[1] - 1.0 / (1.0 + (-1f32).exp())).abs() < 1e-6);
    }

    #[test]
    fn ranks_are_by_score_then_input_order() {
        let r = ranked(&[0.2, f32::NAN, 0.9, 0.2]);
        let idx: Vec<usize> = r.iter().map(|r| r.index).collect();
        assert_eq!(idx, [2, 0, 3, 1]);
        assert!(ranked(&[]).is_empty());
    }
}
