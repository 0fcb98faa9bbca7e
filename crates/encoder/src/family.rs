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
    /// `gte` (the "new" GTE): rotary positions, post-norm layers with a gated
    /// GELU feed-forward.
    Gte,
    /// `nomic_bert`: rotary positions, post-norm SwiGLU layers, no biases.
    NomicBert,
    /// `deberta-v2`: post-norm layers with disentangled (content and
    /// relative position) attention.
    DebertaV2,
    /// `jina_embeddings_v3`: XLM-RoBERTa's post-norm layers with rotary
    /// positions (the base weights, no task adapter).
    JinaV3,
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
        ("gte", Architecture::Gte),
        ("nomic_bert", Architecture::NomicBert),
        ("deberta-v2", Architecture::DebertaV2),
        ("jina_embeddings_v3", Architecture::JinaV3),
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
            Architecture::Gte => &["", "gte.", "new.", "model."],
            Architecture::NomicBert => &["", "nomic_bert.", "bert.", "model."],
            Architecture::DebertaV2 => &["", "deberta.", "model."],
            Architecture::JinaV3 => &["", "roberta.", "model."],
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

    /// Whether the model attends causally (a decoder: each token sees only
    /// those before it), so that only its last token has read the whole text:
    /// its default pooling is `last-token`.
    pub fn is_causal(self) -> bool {
        matches!(self, Architecture::Qwen3)
    }
}
