//! `distilbert`: learned positions from 0, no token types, post-norm layers
//! under its own names (`transformer.layer.N.attention.q_lin`, `sa_layer_norm`,
//! `ffn.lin1`, ...), optionally prefixed `distilbert.`. Its config names the
//! sizes `dim`, `n_layers`, `n_heads`, `hidden_dim` and the activation
//! `activation`; every LayerNorm has eps 1e-12 (fixed in transformers).
use super::{post_norm_block, Architecture, PostNormNames};
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::{Embeddings, LayerNorm, ModelParts, Positions};
use crate::error::Result;
use crate::weights::Weights;
use serde::Deserialize;

fn default_act() -> HiddenAct {
    HiddenAct::Gelu
}

#[derive(Deserialize)]
struct DistilBertConfig {
    vocab_size: usize,
    dim: usize,
    n_layers: usize,
    n_heads: usize,
    hidden_dim: usize,
    #[serde(default = "default_act")]
    activation: HiddenAct,
    max_position_embeddings: usize,
    #[serde(default)]
    pad_token_id: Option<usize>,
}

pub(crate) fn parse_config(
    model_type: String,
    raw: serde_json::Value,
) -> Result<ModelConfig, String> {
    let c = DistilBertConfig::deserialize(&raw).map_err(|e| e.to_string())?;
    Ok(ModelConfig {
        architecture: Architecture::DistilBert,
        model_type,
        vocab_size: c.vocab_size,
        hidden_size: c.dim,
        num_hidden_layers: c.n_layers,
        num_attention_heads: c.n_heads,
        intermediate_size: c.hidden_dim,
        hidden_act: c.activation,
        max_position_embeddings: c.max_position_embeddings,
        type_vocab_size: 0,
        layer_norm_eps: 1e-12,
        pad_token_id: c.pad_token_id.unwrap_or(0),
        max_tokens: c.max_position_embeddings,
        raw,
    })
}

fn names(i: usize) -> PostNormNames {
    let p = format!("transformer.layer.{i}");
    PostNormNames {
        q: format!("{p}.attention.q_lin"),
        k: format!("{p}.attention.k_lin"),
        v: format!("{p}.attention.v_lin"),
        attn_out: format!("{p}.attention.out_lin"),
        attn_ln: format!("{p}.sa_layer_norm"),
        inter: format!("{p}.ffn.lin1"),
        out: format!("{p}.ffn.lin2"),
        out_ln: format!("{p}.output_layer_norm"),
    }
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let h = cfg.hidden_size;
    let embeddings = Embeddings {
        word: w.vec("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?,
        position: w.vec(
            "embeddings.position_embeddings.weight",
            &[cfg.max_position_embeddings, h],
        )?,
        positions: Positions::FromZero,
        token_type: None,
        ln: Some(LayerNorm::load(
            w,
            "embeddings.LayerNorm",
            h,
            cfg.layer_norm_eps,
        )?),
    };
    Ok(ModelParts {
        embeddings,
        blocks: (0..cfg.num_hidden_layers)
            .map(|i| post_norm_block(w, &names(i), cfg))
            .collect::<Result<_>>()?,
        bias: None,
        pooler: None,
    })
}
