//! `eurobert`: a Llama-style encoder ([`crate::engine::decoder`]) with
//! bidirectional attention: RMSNorm before attention and feed-forward,
//! rotary positions (`rope_theta`, default 10000), grouped-query attention
//! where `num_key_value_heads` says so, a SwiGLU feed-forward, biases where
//! `attention_bias` / `mlp_bias` say, and a final norm. Names as
//! `EuroBertModel` (`embed_tokens`, `layers.N.self_attn.q_proj`, `norm`),
//! optionally prefixed `model.` (`EuroBertForMaskedLM`).
//!
//! Hidden states: 0 is the token embedding, `i` the output of layer `i`, and
//! `N` the last layer's output after the final norm (transformers'
//! `last_hidden_state`, which `output_hidden_states=True` returns as its last
//! entry). Positions start at 0 for every sentence.
use super::qwen3::{rope_table, rope_theta, token_embeddings, LlamaSizes};
use super::Architecture;
use crate::config::ModelConfig;
use crate::engine::decoder::{DecoderAttn, DecoderBlock, DecoderNames, DecoderSpec};
use crate::engine::{Block, ModelParts};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use serde_json::Value;

/// EuroBertConfig's `pad_token_id` default.
const PAD_TOKEN_ID: usize = 128001;

fn head_dim(c: &LlamaSizes) -> usize {
    c.head_dim
        .unwrap_or(c.hidden_size / c.num_attention_heads.max(1))
}

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let c = LlamaSizes::read(&raw)?;
    c.glu()?;
    rope_theta(&raw, "full_attention", "rope_theta", 10_000.0)?;
    if !head_dim(&c).is_multiple_of(2) {
        return Err("head_dim must be even for rotary positions".into());
    }
    let pad = c.pad_token_id.unwrap_or(PAD_TOKEN_ID);
    Ok(c.into_config(Architecture::EuroBert, model_type, raw, pad))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let bad = EncoderError::Unsupported;
    let c = LlamaSizes::read(&cfg.raw).map_err(bad)?;
    let dh = head_dim(&c);
    let theta = rope_theta(&cfg.raw, "full_attention", "rope_theta", 10_000.0).map_err(bad)?;
    let rope = rope_table(theta, dh, cfg)?;
    let act = c.glu().map_err(bad)?;
    let n = cfg.num_hidden_layers;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(n);
    for i in 0..n {
        let spec = DecoderSpec {
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
            eps: c.rms_norm_eps,
            norm_plus_one: false,
            qkv_bias: c.attention_bias,
            o_bias: c.attention_bias,
            mlp_bias: c.mlp_bias,
            scale: 1.0 / (dh as f64).sqrt(),
            act,
            attn: DecoderAttn {
                heads: c.num_attention_heads,
                kv_heads: c.kv_heads(),
                head_dim: dh,
                causal: false,
                window: None,
            },
            rope: rope.clone(),
            final_norm: (i + 1 == n).then_some("norm"),
        };
        blocks.push(Box::new(DecoderBlock::load(
            w,
            &DecoderNames::llama(i, false),
            &spec,
        )?));
    }
    Ok(ModelParts {
        embeddings: token_embeddings(w, cfg, None)?,
        blocks,
        bias: None,
        pooler: None,
    })
}
