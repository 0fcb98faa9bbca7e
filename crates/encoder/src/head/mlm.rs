//! Masked-language-model heads (`*ForMaskedLM`) and the SPLADE pooling on
//! their logits.
//!
//! The heads, as transformers computes them:
//!
//! - BERT (`cls.predictions`): `transform.dense`, the `hidden_act`,
//!   `transform.LayerNorm` (`layer_norm_eps`), then the decoder.
//! - DistilBERT: `vocab_transform`, the `activation`, `vocab_layer_norm`
//!   (eps 1e-12), then `vocab_projector`.
//! - RoBERTa, XLM-R, CamemBERT (`lm_head`): `dense`, exact GELU, `layer_norm`
//!   (`layer_norm_eps`), then `decoder`.
//!
//! The decoder's weight is its own tensor (`*.decoder.weight`,
//! `vocab_projector.weight`) when the checkpoint has one, else the word
//! embeddings (tied, as `save_pretrained` writes tied checkpoints: without the
//! copy); its bias is `*.decoder.bias` when present, else the head's tied
//! `bias` (`cls.predictions.bias`, `lm_head.bias`).
//!
//! SPLADE (sentence-transformers' `SpladePooling`): `log(1 + relu(logits))`
//! per real token (padding never counts), `max` (or `sum`) over the tokens;
//! with `activation_function: log1p_relu` (OpenSearch's models) `log1p` once
//! more. The whole head runs in fp32 at either precision (the transformer
//! blocks are int8 with `--precision int8`): the vocabulary-size product is the
//! one whose rounding every output weight sees, and it stays exact.
use super::HeadAct;
use crate::arch::Architecture;
use crate::config::ModelConfig;
use crate::engine::Model;
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{layer_norm, Act, PackedLinear};
use serde_json::Value;

/// The `*ForMaskedLM` classes whose heads bertflow runs.
pub const MLM_HEADS: &[&str] = &[
    "BertForMaskedLM",
    "DistilBertForMaskedLM",
    "RobertaForMaskedLM",
    "XLMRobertaForMaskedLM",
    "CamembertForMaskedLM",
];

/// The first `*ForMaskedLM` class of `config.json`'s `architectures`.
pub fn mlm_class(raw: &Value) -> Option<&str> {
    raw.get("architectures")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|a| a.ends_with("ForMaskedLM"))
}

/// How SPLADE pools the token weights (sentence-transformers' `SpladePooling`
/// `pooling_strategy` and `activation_function`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpladeConfig {
    /// `max` (SPLADE v2 and later) or, when false, `sum` (SPLADE v1).
    pub max: bool,
    /// `log1p_relu`: `log(1 + log(1 + relu(x)))`.
    pub double_log: bool,
}

impl Default for SpladeConfig {
    fn default() -> Self {
        Self {
            max: true,
            double_log: false,
        }
    }
}

impl SpladeConfig {
    /// From a `SpladePooling` module's `config.json` (missing keys: the defaults).
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let max = match v.get("pooling_strategy").and_then(Value::as_str) {
            None | Some("max") => true,
            Some("sum") => false,
            Some(other) => return Err(format!("pooling_strategy '{other}' (max, sum)")),
        };
        let double_log = match v.get("activation_function").and_then(Value::as_str) {
            None | Some("relu") => false,
            Some("log1p_relu") => true,
            Some(other) => return Err(format!("activation_function '{other}' (relu, log1p_relu)")),
        };
        Ok(Self { max, double_log })
    }
}

/// A masked-LM head: transform (dense, activation, LayerNorm), then the
/// vocabulary-size decoder.
pub(crate) struct MlmHead {
    dense: PackedLinear,
    act: HeadAct,
    ln_w: Vec<f32>,
    ln_b: Vec<f32>,
    eps: f32,
    decoder: PackedLinear,
    class: String,
}

impl MlmHead {
    /// The head of `cfg`'s checkpoint (its `architectures` naming a class of
    /// [`MLM_HEADS`]); `model` gives the word embeddings a tied decoder reads.
    pub(crate) fn load(w: &Weights, model: &Model) -> Result<Self> {
        let cfg: &ModelConfig = &model.config;
        let bad = |msg: String| EncoderError::Unsupported(msg);
        let class = mlm_class(&cfg.raw)
            .ok_or_else(|| bad("config.json names no *ForMaskedLM architecture".into()))?
            .to_string();
        if !MLM_HEADS.contains(&class.as_str()) {
            return Err(bad(format!(
                "masked-LM head {class} is not supported; supported: {}",
                MLM_HEADS.join(", ")
            )));
        }
        let act_of = |key: &str| {
            HeadAct::parse(cfg.raw.get(key).and_then(Value::as_str).unwrap_or("gelu")).map_err(bad)
        };
        let eps = cfg.layer_norm_eps as f32;
        // (transform, activation, norm, eps, decoder, tied bias)
        let (dense, act, norm, eps, decoder, bias) = match cfg.architecture {
            Architecture::Bert => (
                "cls.predictions.transform.dense",
                act_of("hidden_act")?,
                "cls.predictions.transform.LayerNorm",
                eps,
                "cls.predictions.decoder",
                "cls.predictions.bias",
            ),
            Architecture::DistilBert => (
                "vocab_transform",
                act_of("activation")?,
                "vocab_layer_norm",
                1e-12,
                "vocab_projector",
                "vocab_projector.bias",
            ),
            Architecture::Roberta => (
                "lm_head.dense",
                HeadAct::Gelu,
                "lm_head.layer_norm",
                eps,
                "lm_head.decoder",
                "lm_head.bias",
            ),
            other => {
                return Err(bad(format!(
                    "{class} does not match model_type '{}' ({other:?})",
                    cfg.model_type
                )))
            }
        };
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let linear = |weight: &[f32], b: &[f32], n: usize| {
            PackedLinear::new(weight, b, n, h).map_err(|e| EncoderError::Weights(e.to_string()))
        };
        let dense = linear(
            &w.vec_top(&format!("{dense}.weight"), &[h, h])?,
            &w.vec_top(&format!("{dense}.bias"), &[h])?,
            h,
        )?;
        let dec_w = format!("{decoder}.weight");
        let dec_weight = if w.contains_top(&dec_w) {
            w.vec_top(&dec_w, &[v, h])?
        } else {
            model.word_embeddings().to_vec()
        };
        let dec_b = format!("{decoder}.bias");
        let dec_bias = w.vec_top(if w.contains_top(&dec_b) { &dec_b } else { bias }, &[v])?;
        Ok(Self {
            dense,
            act,
            ln_w: w.vec_top(&format!("{norm}.weight"), &[h])?,
            ln_b: w.vec_top(&format!("{norm}.bias"), &[h])?,
            eps,
            decoder: linear(&dec_weight, &dec_bias, v)?,
            class,
        })
    }

    /// The `*ForMaskedLM` class the head is.
    pub(crate) fn class(&self) -> &str {
        &self.class
    }

    pub(crate) fn vocab_size(&self) -> usize {
        self.decoder.out_dim()
    }

    /// The logits (`rows` x vocabulary) of hidden states `x` (`rows` x hidden).
    pub(crate) fn logits(&self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        let h = self.dense.in_dim();
        let rows = x.len() / h;
        let err = |e: String| EncoderError::Unsupported(format!("masked-LM head: {e}"));
        let mut t = vec![0f32; rows * h];
        self.dense
            .forward(x, rows, None, Act::None, &mut t)
            .map_err(|e| err(e.to_string()))?;
        self.act.apply(&mut t);
        layer_norm(&mut t, &self.ln_w, &self.ln_b, self.eps).map_err(|e| err(e.to_string()))?;
        out.clear();
        out.resize(rows * self.vocab_size(), 0.0);
        self.decoder
            .forward(&t, rows, None, Act::None, out)
            .map_err(|e| err(e.to_string()))
    }

    /// The SPLADE vector (dense over the vocabulary) of one text whose last
    /// hidden state is `x` (its real tokens only).
    pub(crate) fn splade(
        &self,
        x: &[f32],
        cfg: SpladeConfig,
        logits: &mut Vec<f32>,
    ) -> Result<Vec<f32>> {
        self.logits(x, logits)?;
        Ok(splade_pool(logits, self.vocab_size(), cfg))
    }
}

/// `log(1 + relu(x))` (twice with `double_log`) of `rows` of `v` logits,
/// pooled over the rows by max or sum.
pub fn splade_pool(logits: &[f32], v: usize, cfg: SpladeConfig) -> Vec<f32> {
    let mut pooled = vec![0f32; v];
    for row in logits.chunks_exact(v) {
        for (p, &x) in pooled.iter_mut().zip(row) {
            let mut y = x.max(0.0).ln_1p();
            if cfg.double_log {
                y = y.ln_1p();
            }
            if cfg.max {
                *p = p.max(y);
            } else {
                *p += y;
            }
        }
    }
    pooled
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splade_pools_log_relu_by_max_or_sum() {
        let logits = [1.0, -2.0, 0.5, 3.0, -1.0, 0.0];
        let max = splade_pool(&logits, 3, SpladeConfig::default());
        assert_eq!(max, [3f32.ln_1p(), 0.0, 0.5f32.ln_1p()]);
        let sum = splade_pool(
            &logits,
            3,
            SpladeConfig {
                max: false,
                double_log: false,
            },
        );
        assert_eq!(sum, [1f32.ln_1p() + 3f32.ln_1p(), 0.0, 0.5f32.ln_1p()]);
        let twice = splade_pool(
            &logits,
            3,
            SpladeConfig {
                max: true,
                double_log: true,
            },
        );
        assert_eq!(twice[0], 3f32.ln_1p().ln_1p());
    }

    #[test]
    fn splade_config_reads_the_pooling_module() {
        let c = SpladeConfig::from_json(&json!({"pooling_strategy": "sum"})).unwrap();
        assert!(!c.max && !c.double_log);
        assert_eq!(
            SpladeConfig::from_json(&json!({})).unwrap(),
            SpladeConfig::default()
        );
        assert!(SpladeConfig::from_json(&json!({"pooling_strategy": "mean"})).is_err());
        assert!(SpladeConfig::from_json(&json!({"activation_function": "gelu"})).is_err());
        assert_eq!(
            mlm_class(&json!({"architectures": ["BertForMaskedLM"]})),
            Some("BertForMaskedLM")
        );
    }
}
