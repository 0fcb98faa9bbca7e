//! `config.json` of a BERT checkpoint in Hugging Face layout.
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

/// The fields of a BERT `config.json` that the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
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
    pub pad_token_id: usize,
    #[serde(default = "default_pos_type")]
    pub position_embedding_type: String,
    #[serde(default)]
    pub model_type: Option<String>,
}

impl BertConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type '{}' is not supported (only 'absolute')",
                self.position_embedding_type
            ));
        }
        if let Some(t) = &self.model_type {
            // RoBERTa-style models offset their position ids and DistilBERT names its
            // weights differently: running them through this forward pass would give
            // silently wrong vectors, so refuse them.
            if t != "bert" {
                return Err(format!(
                    "model_type '{t}' is not supported: bertflow runs BERT checkpoints (model_type 'bert')"
                ));
            }
        }
        Ok(())
    }
}
