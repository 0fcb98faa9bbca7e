//! The architecture families ([`Architecture`]): which `model_type`s each
//! accepts and how its checkpoints name their tensors. Plain data that
//! `config.rs` and `weights.rs` read; the forward pass of each family lives in
//! [`crate::arch`] (which re-exports this type).
use crate::error::Result;

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
}
