//! Sequence-classification heads (cross-encoders, rerankers): a checkpoint whose
//! `config.json` `architectures` names a `*ForSequenceClassification` class
//! carries, beside its base model, a head that turns the last hidden state into
//! one logit per label (`id2label`). The heads, as transformers computes them
//! (dropout is the identity at inference):
//!
//! - BERT: the pooler (`pooler.dense` + tanh on `[CLS]`), then `classifier`.
//! - RoBERTa, XLM-R, CamemBERT, MPNet: `classifier.dense` + tanh on `<s>`, then
//!   `classifier.out_proj`.
//! - DistilBERT: `pre_classifier` + ReLU on `[CLS]`, then `classifier`.
//! - ModernBERT: `[CLS]` or the masked mean of the last hidden state
//!   (`classifier_pooling`), `head.dense` (bias if `classifier_bias`), the
//!   `classifier_activation`, `head.norm` (bias if `norm_bias`), then
//!   `classifier`.
//! - DeBERTa-v2 (mxbai-rerank): `pooler.dense` (the ContextPooler) and the
//!   `pooler_hidden_act` (GELU) on `[CLS]`, then `classifier`.
//!
//! [`CrossEncoder`] loads such a checkpoint and scores texts and text pairs.
//!
//! Retrieval heads: [`RetrievalEncoder`] gives a dense, a sparse ([`SparseVector`]:
//! SPLADE on a `*ForMaskedLM` head, [`mlm`], or BGE-M3's token weights, [`bgem3`])
//! and per-token (multi-vector) outputs from one forward pass.
use crate::arch::Architecture;
use crate::config::ModelConfig;
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{gelu_erf, layer_norm};
use serde_json::Value;

pub mod bgem3;
mod cross;
pub mod mlm;
mod retrieval;
mod sparse;
pub use cross::{CrossEncoder, PairTokens, Truncation};
pub use mlm::{mlm_class, SpladeConfig, MLM_HEADS};
pub use retrieval::{Outputs, RetrievalEncoder, RetrievalOptions, Retrieved};
pub use sparse::SparseVector;

/// The `*ForSequenceClassification` classes whose heads bertflow runs.
pub const SUPPORTED_HEADS: &[&str] = &[
    "BertForSequenceClassification",
    "RobertaForSequenceClassification",
    "XLMRobertaForSequenceClassification",
    "CamembertForSequenceClassification",
    "DistilBertForSequenceClassification",
    "MPNetForSequenceClassification",
    "ModernBertForSequenceClassification",
    "DebertaV2ForSequenceClassification",
];

/// The first `*ForSequenceClassification` class of `config.json`'s
/// `architectures` (`raw`: the parsed file), if any.
pub fn classification_class(raw: &Value) -> Option<&str> {
    raw.get("architectures")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|a| a.ends_with("ForSequenceClassification"))
}

/// Whether the `config.json` text `text` describes a sequence-classification
/// checkpoint (a cross-encoder); an error for text that is not a JSON object.
pub fn is_classifier_config(text: &str) -> Result<bool, String> {
    let raw: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !raw.is_object() {
        return Err("config.json is not a JSON object".into());
    }
    Ok(classification_class(&raw).is_some())
}

/// The labels of `config.json`'s `id2label` in id order (`num_labels`, else
/// transformers' default of 2, `LABEL_i`, where it has none).
fn labels(raw: &Value) -> Result<Vec<String>, String> {
    let Some(map) = raw.get("id2label").filter(|v| !v.is_null()) else {
        let n = match raw.get("num_labels") {
            None | Some(Value::Null) => 2,
            Some(v) => v
                .as_u64()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("num_labels is {v}, not a positive integer"))?
                as usize,
        };
        return Ok((0..n).map(|i| format!("LABEL_{i}")).collect());
    };
    let map = map
        .as_object()
        .ok_or_else(|| "id2label is not an object".to_string())?;
    let mut labels = vec![None; map.len()];
    for (k, v) in map {
        let i: usize = k
            .parse()
            .ok()
            .filter(|&i| i < map.len())
            .ok_or_else(|| format!("id2label key {k:?} is not an id in 0..{}", map.len()))?;
        let name = v
            .as_str()
            .ok_or_else(|| format!("id2label[{k}] is {v}, not a string"))?;
        labels[i] = Some(name.to_string());
    }
    if labels.is_empty() {
        return Err("id2label is empty".into());
    }
    // Keys are distinct integers below the count, so every slot is filled.
    Ok(labels.into_iter().flatten().collect())
}

/// An activation of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadAct {
    Tanh,
    Relu,
    Gelu,
    GeluApprox,
    Silu,
    Identity,
}

impl HeadAct {
    /// transformers' `ACT2FN` name.
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "tanh" => Self::Tanh,
            "relu" => Self::Relu,
            "gelu" => Self::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Self::GeluApprox,
            "silu" | "swish" => Self::Silu,
            "linear" | "identity" => Self::Identity,
            other => {
                return Err(format!(
                "classifier_activation '{other}' is not supported (tanh, relu, gelu, gelu_new, \
                 gelu_pytorch_tanh, silu, linear)"
            ))
            }
        })
    }

    fn apply(self, v: &mut [f32]) {
        const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
        for x in v {
            *x = match self {
                Self::Tanh => x.tanh(),
                Self::Relu => x.max(0.0),
                Self::Gelu => gelu_erf(*x),
                Self::GeluApprox => {
                    0.5 * *x * (1.0 + (SQRT_TWO_OVER_PI * *x * (1.0 + 0.044715 * *x * *x)).tanh())
                }
                Self::Silu => *x / (1.0 + (-*x).exp()),
                Self::Identity => *x,
            }
        }
    }
}

/// y = x W^T + b, on a handful of rows (the head runs once per text).
struct Dense {
    /// `[d_out, d_in]`, PyTorch's layout.
    w: Vec<f32>,
    b: Vec<f32>,
    d_in: usize,
    d_out: usize,
}

impl Dense {
    /// `name.weight` and (if `bias`) `name.bias`, named as written in the checkpoint.
    fn load(w: &Weights, name: &str, d_in: usize, d_out: usize, bias: bool) -> Result<Self> {
        let weight = w.vec_top(&format!("{name}.weight"), &[d_out, d_in])?;
        let b = if bias {
            w.vec_top(&format!("{name}.bias"), &[d_out])?
        } else {
            vec![0.0; d_out]
        };
        Ok(Self {
            w: weight,
            b,
            d_in,
            d_out,
        })
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(x.len() / self.d_in * self.d_out);
        for row in x.chunks_exact(self.d_in) {
            for (wr, &b) in self.w.chunks_exact(self.d_in).zip(&self.b) {
                let dot: f32 = wr.iter().zip(row).map(|(a, b)| a * b).sum();
                out.push(dot + b);
            }
        }
        out
    }
}

/// How the head reads the last hidden state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// The first token (`[CLS]`, `<s>`).
    First,
    /// The first token through the model's pooler (BERT).
    Pooler,
    /// The mean over the real tokens (ModernBERT's `classifier_pooling: mean`).
    Mean,
}

/// A sequence-classification head: input rows, an optional dense layer with
/// its activation and norm, and the classifier to one logit per label.
pub(crate) struct Head {
    input: Input,
    dense: Option<(Dense, HeadAct)>,
    norm: Option<(Vec<f32>, Vec<f32>, f32)>,
    out: Dense,
    labels: Vec<String>,
    class: String,
}

impl Head {
    /// The head of the checkpoint (`cfg`'s family, its `config.json` naming a
    /// class of [`SUPPORTED_HEADS`]) from `w`.
    pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<Self> {
        let bad = |msg: String| EncoderError::Unsupported(msg);
        let class = classification_class(&cfg.raw)
            .ok_or_else(|| {
                bad("config.json names no *ForSequenceClassification architecture".into())
            })?
            .to_string();
        if !SUPPORTED_HEADS.contains(&class.as_str()) {
            return Err(bad(format!(
                "classification head {class} is not supported; supported: {}",
                SUPPORTED_HEADS.join(", ")
            )));
        }
        let labels = labels(&cfg.raw).map_err(bad)?;
        let (h, n) = (cfg.hidden_size, labels.len());
        let flag = |name: &str| cfg.raw.get(name).and_then(Value::as_bool).unwrap_or(false);
        let head = match cfg.architecture {
            Architecture::Bert => Self {
                input: Input::Pooler,
                dense: None,
                norm: None,
                out: Dense::load(w, "classifier", h, n, true)?,
                labels,
                class,
            },
            Architecture::Roberta | Architecture::MpNet => Self {
                input: Input::First,
                dense: Some((
                    Dense::load(w, "classifier.dense", h, h, true)?,
                    HeadAct::Tanh,
                )),
                norm: None,
                out: Dense::load(w, "classifier.out_proj", h, n, true)?,
                labels,
                class,
            },
            Architecture::DistilBert => Self {
                input: Input::First,
                dense: Some((Dense::load(w, "pre_classifier", h, h, true)?, HeadAct::Relu)),
                norm: None,
                out: Dense::load(w, "classifier", h, n, true)?,
                labels,
                class,
            },
            Architecture::ModernBert => {
                let input = match cfg.raw.get("classifier_pooling").and_then(Value::as_str) {
                    None | Some("cls") => Input::First,
                    Some("mean") => Input::Mean,
                    Some(other) => {
                        return Err(bad(format!(
                            "classifier_pooling '{other}' is not supported (cls, mean)"
                        )))
                    }
                };
                let act = HeadAct::parse(
                    cfg.raw
                        .get("classifier_activation")
                        .and_then(Value::as_str)
                        .unwrap_or("gelu"),
                )
                .map_err(bad)?;
                let norm_w = w.vec_top("head.norm.weight", &[h])?;
                let norm_b = if flag("norm_bias") {
                    w.vec_top("head.norm.bias", &[h])?
                } else {
                    vec![0.0; h]
                };
                Self {
                    input,
                    dense: Some((
                        Dense::load(w, "head.dense", h, h, flag("classifier_bias"))?,
                        act,
                    )),
                    norm: Some((norm_w, norm_b, cfg.layer_norm_eps as f32)),
                    out: Dense::load(w, "classifier", h, n, true)?,
                    labels,
                    class,
                }
            }
            Architecture::DebertaV2 => {
                let act = HeadAct::parse(
                    cfg.raw
                        .get("pooler_hidden_act")
                        .and_then(Value::as_str)
                        .unwrap_or("gelu"),
                )
                .map_err(bad)?;
                Self {
                    input: Input::First,
                    dense: Some((Dense::load(w, "pooler.dense", h, h, true)?, act)),
                    norm: None,
                    out: Dense::load(w, "classifier", h, n, true)?,
                    labels,
                    class,
                }
            }
            other => {
                return Err(bad(format!(
                    "{class} does not match model_type '{}' ({other:?})",
                    cfg.model_type
                )))
            }
        };
        Ok(head)
    }

    pub(crate) fn labels(&self) -> &[String] {
        &self.labels
    }

    /// The `*ForSequenceClassification` class the head is.
    pub(crate) fn class(&self) -> &str {
        &self.class
    }

    pub(crate) fn needs_pooler(&self) -> bool {
        self.input == Input::Pooler
    }

    /// The logits (`lens.len()` rows of one value per label) of a batch whose
    /// last hidden state is `last` (`lens.len()` rows of `t` tokens of `h`);
    /// `pool` is the model's pooler (tanh(W x + b)) for [`Input::Pooler`].
    pub(crate) fn logits(
        &self,
        last: &[f32],
        lens: &[usize],
        t: usize,
        h: usize,
        pool: impl Fn(&[f32]) -> Result<Option<Vec<f32>>>,
    ) -> Result<Vec<f32>> {
        let first = || -> Vec<f32> {
            last.chunks_exact(t * h)
                .flat_map(|sent| &sent[..h])
                .copied()
                .collect()
        };
        let mut x = match self.input {
            Input::First => first(),
            Input::Pooler => pool(&first())?.ok_or(EncoderError::NoPooler)?,
            Input::Mean => crate::pooling::masked_mean(&[last], lens, t, h, None),
        };
        if let Some((dense, act)) = &self.dense {
            x = dense.apply(&x);
            act.apply(&mut x);
        }
        if let Some((w, b, eps)) = &self.norm {
            layer_norm(&mut x, w, b, *eps)
                .map_err(|e| EncoderError::Unsupported(format!("classification head: {e}")))?;
        }
        Ok(self.out.apply(&x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_follow_ids_and_default_to_two() {
        let raw = json!({"id2label": {"1": "yes", "0": "no"}});
        assert_eq!(labels(&raw).unwrap(), ["no", "yes"]);
        assert_eq!(labels(&json!({})).unwrap(), ["LABEL_0", "LABEL_1"]);
        assert_eq!(labels(&json!({"num_labels": 1})).unwrap(), ["LABEL_0"]);
        assert!(labels(&json!({"id2label": {"0": "a", "2": "b"}})).is_err());
        assert!(labels(&json!({"id2label": {"0": 3}})).is_err());
        assert!(labels(&json!({"id2label": {}})).is_err());
        assert!(labels(&json!({"id2label": []})).is_err());
    }

    #[test]
    fn classifier_configs_are_told_by_architectures() {
        let yes = r#"{"architectures": ["XLMRobertaForSequenceClassification"]}"#;
        assert!(is_classifier_config(yes).unwrap());
        assert!(!is_classifier_config(r#"{"architectures": ["BertModel"]}"#).unwrap());
        assert!(!is_classifier_config(r#"{"model_type": "bert"}"#).unwrap());
        assert!(is_classifier_config("[1]").is_err());
        assert!(is_classifier_config("{").is_err());
    }

    #[test]
    fn activations_match_their_definitions() {
        let mut v = [-1.0f32, 0.0, 2.0];
        HeadAct::parse("silu").unwrap().apply(&mut v);
        assert!((v[0] - (-1.0 / (1.0 + 1f32.exp()))).abs() < 1e-7);
        assert_eq!(v[1], 0.0);
        assert!(HeadAct::parse("softmax").is_err());
    }
}
