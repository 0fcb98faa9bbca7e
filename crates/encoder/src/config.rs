//! `config.json` of a checkpoint in Hugging Face layout, read by the module of
//! its architecture (`crate::arch`) into one [`ModelConfig`].
use crate::family::Architecture;
use serde::Deserialize;

/// Activation of the feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum HiddenAct {
    /// Exact GELU with erf (transformers' "gelu").
    #[serde(rename = "gelu")]
    Gelu,
    /// Tanh approximation ("gelu_new", "gelu_pytorch_tanh", "gelu_fast").
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", alias = "gelu_fast")]
    #[serde(rename = "gelu_approximate")]
    GeluApprox,
    #[serde(rename = "relu")]
    Relu,
    /// SiLU, x * sigmoid(x) ("silu", "swish"; NomicBERT's gated feed-forward).
    #[serde(rename = "silu", alias = "swish")]
    Silu,
}

/// What the engine needs of a checkpoint's `config.json`, whatever the
/// architecture's own field names.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// The architecture `model_type` names (a missing `model_type` is BERT).
    pub architecture: Architecture,
    /// `model_type` as written (`bert` when missing).
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    /// The feed-forward activation (for the decoder-style families `qwen3`,
    /// `gemma3` and `eurobert`, that of the gate: `Silu` or `GeluApprox`).
    pub hidden_act: HiddenAct,
    pub max_position_embeddings: usize,
    /// Rows of the token-type table (0: the architecture has none).
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    /// The id batches are padded with.
    pub pad_token_id: usize,
    /// The most tokens a sentence may have, special tokens included:
    /// `max_position_embeddings`, less `padding_idx + 1` where position ids start
    /// after the padding index (RoBERTa family, MPNet).
    pub max_tokens: usize,
    /// The whole `config.json`, for fields only one architecture reads.
    pub raw: serde_json::Value,
}

impl ModelConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Check the fields every architecture needs (called by
    /// [`ModelConfig::parse`], which lives in [`crate::arch`] as it dispatches
    /// on the architecture).
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.hidden_size == 0 || self.vocab_size == 0 || self.intermediate_size == 0 {
            return Err("hidden_size, vocab_size and intermediate_size must be positive".into());
        }
        if self.num_hidden_layers == 0 {
            return Err("num_hidden_layers must be at least 1".into());
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(format!(
                "the layer-norm epsilon ({}) must be a finite number above 0",
                self.layer_norm_eps
            ));
        }
        // An architecture with token types (BERT) names their count; 0 would
        // leave the token-type table empty.
        // (DeBERTa-v2 says 0 for none.)
        if self.raw.get("type_vocab_size").is_some()
            && self.type_vocab_size == 0
            && self.architecture != Architecture::DebertaV2
        {
            return Err("type_vocab_size must be at least 1".into());
        }
        if self.max_tokens < 2 {
            return Err(format!(
                "max_position_embeddings {} leaves fewer than 2 positions for tokens",
                self.max_position_embeddings
            ));
        }
        if self.pad_token_id >= self.vocab_size {
            return Err(format!(
                "pad_token_id {} is outside the vocabulary of {}",
                self.pad_token_id, self.vocab_size
            ));
        }
        Ok(())
    }
}
