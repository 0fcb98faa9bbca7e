//! `jina_embeddings_v3` (jinaai/jina-embeddings-v3-hf, transformers 5's
//! native model): XLM-RoBERTa's post-norm layers with rotary positions in
//! place of the position table ([`super::gte::RotaryBlock`] with a plain
//! feed-forward, `fc2(gelu(fc1(x)))`), biases everywhere, word and token-type
//! embeddings, LayerNorm, and the pooler (`pooler.dense` + tanh). Names as
//! `JinaEmbeddingsV3Model`'s (`layers.N.self_attn.q_proj`, `layers.N.mlp.fc1`,
//! `layers.N.post_attention_layernorm`, ...), optionally prefixed `roberta.`
//! or `model.`; rotary theta from `rope_parameters` (default 20000).
//!
//! The task LoRA adapters (`retrieval.query`, `retrieval.passage`, ...) are
//! not part of transformers' native model: it runs the base weights, as the
//! original remote code does when no task is given, and so does bertflow. The
//! original checkpoint (jinaai/jina-embeddings-v3: `model_type` "xlm-roberta"
//! with `position_embedding_type` "rotary" and the adapters as weight
//! parametrizations) is refused by the RoBERTa family's config check.
use super::gte::{
    act, number, qkv, rope_table, rope_theta, rotary_config, rotary_embeddings, uint, Mlp,
    RotaryBlock,
};
use super::Architecture;
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::{Block, LayerNorm, Linear, ModelParts};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::Act;
use serde_json::Value;

/// JinaEmbeddingsV3Config's default rotary theta.
const THETA: f64 = 20_000.0;

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let sizes = [
        uint(&raw, &["vocab_size"], None)?,
        uint(&raw, &["hidden_size"], Some(1024))?,
        uint(&raw, &["num_hidden_layers"], Some(24))?,
        uint(&raw, &["num_attention_heads"], Some(16))?,
        uint(&raw, &["intermediate_size"], Some(4096))?,
    ];
    rope_theta(&raw, &["rope_theta", "rotary_emb_base"], THETA)?;
    let act = act(&raw, &["hidden_act"], "gelu")?;
    if act == HiddenAct::GeluApprox || act == HiddenAct::Silu {
        return Err(format!(
            "hidden_act {act:?} is not supported for jina_embeddings_v3 (gelu, relu)"
        ));
    }
    let max = uint(&raw, &["max_position_embeddings"], Some(8194))?;
    let types = uint(&raw, &["type_vocab_size"], Some(1))?;
    let eps = number(&raw, &["layer_norm_eps"], 1e-5)?;
    let pad = uint(&raw, &["pad_token_id"], Some(1))?;
    Ok(rotary_config(
        Architecture::JinaV3,
        model_type,
        raw,
        sizes,
        act,
        max,
        types,
        eps,
        pad,
    ))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let theta = rope_theta(&cfg.raw, &["rope_theta", "rotary_emb_base"], THETA)
        .map_err(EncoderError::Unsupported)?;
    let rope = rope_table(cfg, theta)?;
    let (h, inter, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
    let act = match cfg.hidden_act {
        HiddenAct::Relu => Act::Relu,
        _ => Act::GeluErf,
    };
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("layers.{i}");
        blocks.push(Box::new(RotaryBlock {
            qkv: qkv(w, &format!("{p}.self_attn"), "", cfg, true)?,
            attn_out: Linear::load(w, &format!("{p}.self_attn.o_proj"), h, h)?,
            attn_ln: LayerNorm::load(w, &format!("{p}.post_attention_layernorm"), h, eps)?,
            up: Linear::load(w, &format!("{p}.mlp.fc1"), h, inter)?,
            down: Linear::load(w, &format!("{p}.mlp.fc2"), inter, h)?,
            out_ln: LayerNorm::load(w, &format!("{p}.post_mlp_layernorm"), h, eps)?,
            mlp: Mlp::Plain(act),
            rope: rope.clone(),
        }));
    }
    Ok(ModelParts {
        embeddings: rotary_embeddings(w, cfg, "embeddings.LayerNorm")?,
        blocks,
        bias: None,
        pooler: super::pooler(w, h)?,
    })
}
