//! The architectures, chosen by `config.json`'s `model_type`. Each module
//! supplies its config parsing, its weight names (with or without the base-model
//! prefix), its embeddings and position scheme, its attention bias and its
//! blocks; the engine ([`crate::engine`]) runs them all with the same kernels and
//! numbers the hidden states the same way (0 = embedding output, 1..=N = layers).
//!
//! Adding an architecture: a module here with `parse_config` and `load`, a row in
//! [`Architecture::SUPPORTED`], and its golden test.
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::{Block, LayerNorm, Linear, ModelParts, PostNormBlock};
use crate::error::Result;
use crate::weights::Weights;
use serde::Deserialize;

pub mod bert;
pub mod distilbert;
pub mod eurobert;
pub mod gemma3;
pub mod modernbert;
pub mod mpnet;
pub mod qwen3;
pub mod roberta;

/// A family of checkpoints sharing one forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// `bert`: learned absolute positions from 0, token types.
    Bert,
    /// `roberta`, `xlm-roberta`, `camembert`: positions from `padding_idx + 1`.
    Roberta,
    /// `distilbert`: its own names, no token types.
    DistilBert,
    /// `mpnet`: positions from `padding_idx + 1`, relative position bias.
    MpNet,
    /// `modernbert`: rotary positions, pre-norm GeGLU layers, local and global
    /// attention, final norm.
    ModernBert,
    /// `qwen3`, `qwen2`: causal decoder layers (RMSNorm, rotary positions,
    /// grouped-query attention, SwiGLU), final norm; `last-token` pooling.
    Qwen3,
    /// `gemma3_text`, `gemma3` with bidirectional attention (EmbeddingGemma):
    /// sliding-window and global layers, four (1 + w) RMSNorms per layer,
    /// scaled embeddings.
    Gemma3,
    /// `eurobert`: Llama-style layers with bidirectional attention.
    EuroBert,
}

impl Architecture {
    /// Every accepted `model_type` and its architecture.
    pub const SUPPORTED: &'static [(&'static str, Architecture)] = &[
        ("bert", Architecture::Bert),
        ("roberta", Architecture::Roberta),
        ("xlm-roberta", Architecture::Roberta),
        ("camembert", Architecture::Roberta),
        ("distilbert", Architecture::DistilBert),
        ("mpnet", Architecture::MpNet),
        ("modernbert", Architecture::ModernBert),
        ("qwen3", Architecture::Qwen3),
        ("qwen2", Architecture::Qwen3),
        ("gemma3_text", Architecture::Gemma3),
        ("gemma3", Architecture::Gemma3),
        ("eurobert", Architecture::EuroBert),
    ];

    /// The architecture of `model_type`; an error listing the supported ones.
    pub fn from_model_type(model_type: &str) -> Result<Self, String> {
        Self::SUPPORTED
            .iter()
            .find(|(name, _)| *name == model_type)
            .map(|&(_, a)| a)
            .ok_or_else(|| {
                format!(
                    "model_type '{model_type}' is not supported; supported: {}",
                    Self::supported_names().join(", ")
                )
            })
    }

    /// The accepted `model_type`s, in [`Architecture::SUPPORTED`] order.
    pub fn supported_names() -> Vec<&'static str> {
        Self::SUPPORTED.iter().map(|(n, _)| *n).collect()
    }

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
        }
    }

    /// Base-model prefixes the checkpoint's names may carry (tried in order).
    pub(crate) fn prefixes(self) -> &'static [&'static str] {
        match self {
            Architecture::Bert => &["", "bert.", "model."],
            Architecture::Roberta => &["", "roberta.", "model."],
            Architecture::DistilBert => &["", "distilbert.", "model."],
            Architecture::MpNet => &["", "mpnet.", "model."],
            Architecture::ModernBert => &["", "model."],
            Architecture::Qwen3 | Architecture::EuroBert => &["", "model."],
            Architecture::Gemma3 => &[
                "",
                "model.",
                "model.language_model.",
                "language_model.model.",
            ],
        }
    }

    /// The tensor whose presence tells the prefix.
    pub(crate) fn anchor(self) -> &'static str {
        match self {
            Architecture::ModernBert => "embeddings.tok_embeddings.weight",
            Architecture::Qwen3 | Architecture::Gemma3 | Architecture::EuroBert => {
                "embed_tokens.weight"
            }
            _ => "embeddings.word_embeddings.weight",
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
        }
    }

    /// Whether the model attends causally (a decoder: each token sees only
    /// those before it), so that only its last token has read the whole text:
    /// its default pooling is `last-token`.
    pub fn is_causal(self) -> bool {
        matches!(self, Architecture::Qwen3)
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
