//! The architectures, chosen by `config.json`'s `model_type`. Each module
//! supplies its config parsing, its weight names (with or without the base-model
//! prefix), its embeddings and position scheme, its attention bias and its
//! blocks; the engine ([`crate::engine`]) runs them all with the same kernels and
//! numbers the hidden states the same way (0 = embedding output, 1..=N = layers).
//!
//! Adding an architecture: a module here with `parse_config` and `load`, a row in
//! [`Architecture::SUPPORTED`], and its golden test.
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::Model;
use crate::engine::{Block, LayerNorm, Linear, ModelParts, PostNormBlock};
use crate::error::Result;
pub use crate::family::Architecture;
use crate::precision::Precision;
use crate::weights::Weights;
use serde::Deserialize;

pub mod bert;
pub mod deberta;
pub mod distilbert;
pub mod eurobert;
pub mod gemma3;
pub mod gte;
pub mod jina;
pub mod modernbert;
pub mod mpnet;
pub mod nomic;
pub mod qwen3;
pub mod roberta;

impl Architecture {
    pub(crate) fn parse_config(
        self,
        model_type: String,
        raw: serde_json::Value,
    ) -> Result<ModelConfig, String> {
        match self {
            Architecture::Bert => bert::parse_config(model_type, raw),
            Architecture::Roberta => roberta::parse_config(model_type, raw),
            Architecture::DistilBert => distilbert::parse_config(model_type, raw),
            Architecture::MpNet => mpnet::parse_config(model_type, raw),
            Architecture::ModernBert => modernbert::parse_config(model_type, raw),
            Architecture::Qwen3 => qwen3::parse_config(model_type, raw),
            Architecture::Gemma3 => gemma3::parse_config(model_type, raw),
            Architecture::EuroBert => eurobert::parse_config(model_type, raw),
            Architecture::Gte => gte::parse_config(model_type, raw),
            Architecture::NomicBert => nomic::parse_config(model_type, raw),
            Architecture::DebertaV2 => deberta::parse_config(model_type, raw),
            Architecture::JinaV3 => jina::parse_config(model_type, raw),
        }
    }

    pub(crate) fn load(self, w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
        match self {
            Architecture::Bert => bert::load(w, cfg),
            Architecture::Roberta => roberta::load(w, cfg),
            Architecture::DistilBert => distilbert::load(w, cfg),
            Architecture::MpNet => mpnet::load(w, cfg),
            Architecture::ModernBert => modernbert::load(w, cfg),
            Architecture::Qwen3 => qwen3::load(w, cfg),
            Architecture::Gemma3 => gemma3::load(w, cfg),
            Architecture::EuroBert => eurobert::load(w, cfg),
            Architecture::Gte => gte::load(w, cfg),
            Architecture::NomicBert => nomic::load(w, cfg),
            Architecture::DebertaV2 => deberta::load(w, cfg),
            Architecture::JinaV3 => jina::load(w, cfg),
        }
    }
}

impl ModelConfig {
    /// Read `config.json` text: the architecture is chosen by `model_type`; an
    /// unknown one is an error that lists the supported ones.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let model_type = match raw.get("model_type") {
            None | Some(serde_json::Value::Null) => "bert".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => return Err(format!("model_type {v} is not a string")),
        };
        let arch = Architecture::from_model_type(&model_type)?;
        let cfg = arch.parse_config(model_type, raw)?;
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Model {
    /// Build the architecture `config` names from `w`; with [`Precision::Int8`]
    /// the blocks' linear products run in int8. The kernels are the process's
    /// (`Path::selected`, `Isa::selected`: `BERTFLOW_FP32_KERNEL` /
    /// `BERTFLOW_INT8_KERNEL`, else the choice of [`crate::tuning`], else the rule).
    pub fn load(w: &Weights, config: ModelConfig, precision: Precision) -> Result<Self> {
        let parts = config.architecture.load(w, &config)?;
        Model::from_parts(config, parts, precision)
    }
}

fn default_act() -> HiddenAct {
    HiddenAct::Gelu
}
fn default_eps() -> f64 {
    1e-12
}
fn default_type_vocab() -> usize {
    2
}
fn default_pos_type() -> String {
    "absolute".into()
}

/// The fields of a BERT-style `config.json` (BERT, the RoBERTa family, MPNet).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BertStyleConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: HiddenAct,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    #[serde(default = "default_pos_type")]
    pub position_embedding_type: String,
}

impl BertStyleConfig {
    pub(crate) fn read(raw: &serde_json::Value) -> Result<Self, String> {
        let c = Self::deserialize(raw).map_err(|e| e.to_string())?;
        if c.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type '{}' is not supported (only 'absolute')",
                c.position_embedding_type
            ));
        }
        Ok(c)
    }

    /// The common config; `max_tokens` is the position table's size less `offset`.
    pub(crate) fn into_config(
        self,
        architecture: Architecture,
        model_type: String,
        raw: serde_json::Value,
        pad_token_id: usize,
        offset: usize,
    ) -> ModelConfig {
        ModelConfig {
            architecture,
            model_type,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act,
            max_position_embeddings: self.max_position_embeddings,
            type_vocab_size: self.type_vocab_size,
            layer_norm_eps: self.layer_norm_eps,
            pad_token_id,
            max_tokens: self.max_position_embeddings.saturating_sub(offset),
            raw,
        }
    }
}

/// The names of one post-norm layer's parameters (without `.weight`/`.bias`).
pub(crate) struct PostNormNames {
    pub q: String,
    pub k: String,
    pub v: String,
    pub attn_out: String,
    pub attn_ln: String,
    pub inter: String,
    pub out: String,
    pub out_ln: String,
}

impl PostNormNames {
    /// BERT's (and RoBERTa's) names for layer `i`.
    pub(crate) fn bert(i: usize) -> Self {
        let p = format!("encoder.layer.{i}");
        Self {
            q: format!("{p}.attention.self.query"),
            k: format!("{p}.attention.self.key"),
            v: format!("{p}.attention.self.value"),
            attn_out: format!("{p}.attention.output.dense"),
            attn_ln: format!("{p}.attention.output.LayerNorm"),
            inter: format!("{p}.intermediate.dense"),
            out: format!("{p}.output.dense"),
            out_ln: format!("{p}.output.LayerNorm"),
        }
    }
}

/// A post-norm block (BERT's layout) from the tensors named by `n`.
pub(crate) fn post_norm_block(
    w: &Weights,
    n: &PostNormNames,
    cfg: &ModelConfig,
) -> Result<Box<dyn Block>> {
    let (h, i, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
    Ok(Box::new(PostNormBlock {
        qkv: Linear::fused_qkv(w, [&n.q, &n.k, &n.v], h, cfg.head_dim())?,
        attn_out: Linear::load(w, &n.attn_out, h, h)?,
        attn_ln: LayerNorm::load(w, &n.attn_ln, h, eps)?,
        intermediate: Linear::load(w, &n.inter, h, i)?,
        output: Linear::load(w, &n.out, i, h)?,
        out_ln: LayerNorm::load(w, &n.out_ln, h, eps)?,
        act: cfg.hidden_act,
    }))
}

/// The pooler (`pooler.dense`), when the checkpoint has it.
pub(crate) fn pooler(w: &Weights, h: usize) -> Result<Option<Linear>> {
    if w.contains("pooler.dense.weight") {
        Ok(Some(Linear::load(w, "pooler.dense", h, h)?))
    } else {
        Ok(None)
    }
}
