//! `nomic_bert` (nomic-embed-text v1 and v1.5): the rotary post-norm layer of
//! [`super::gte`] with a SwiGLU feed-forward (`down(silu(gate(x)) * up(x))`)
//! and no biases in the layers; word and token-type embeddings, LayerNorm.
//!
//! Names as transformers 5's `NomicBertModel` (`layers.N.self_attn.q_proj`,
//! `layers.N.mlp.gate_proj`, `layers.N.post_attention_layernorm`, ...) or as
//! the original remote-code checkpoints (`encoder.layers.N.attn.Wqkv` fused,
//! `attn.out_proj`, `mlp.fc11` up, `mlp.fc12` gate, `mlp.fc2`, `norm1`,
//! `norm2`, `emb_ln`), optionally prefixed `nomic_bert.`, `bert.` or `model.`.
//! The config: transformers' names or the original ones (`n_embd`, `n_layer`,
//! `n_head`, `n_inner`, `n_positions`, `layer_norm_epsilon`,
//! `activation_function` "swiglu", `rotary_emb_base`); the original options
//! this forward pass does not implement are refused (`prenorm`, a partial or
//! interleaved rotary embedding, biases, `rotary_scaling_factor`).
use super::gte::{
    act, flag, number, qkv, rope_table, rope_theta, rotary_config, rotary_embeddings, stacked,
    uint, weight_bias, GateAct, Mlp, RotaryBlock,
};
use super::Architecture;
use crate::config::ModelConfig;
use crate::engine::{Block, LayerNorm, Linear, ModelParts};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use serde_json::Value;

/// NomicBertConfig's default rotary theta (`rotary_emb_base` of the original).
const THETA: f64 = 1000.0;

fn check_original(raw: &Value) -> Result<(), String> {
    for (name, want) in [
        ("prenorm", false),
        ("rotary_emb_interleaved", false),
        ("qkv_proj_bias", false),
        ("mlp_fc1_bias", false),
        ("mlp_fc2_bias", false),
    ] {
        if flag(raw, &[name], want)? != want {
            return Err(format!("{name} {} is not supported", !want));
        }
    }
    let fraction = number(raw, &["rotary_emb_fraction"], 1.0)?;
    if fraction != 1.0 {
        return Err(format!(
            "rotary_emb_fraction {fraction} is not supported (only 1.0)"
        ));
    }
    if let Some(f) = raw.get("rotary_scaling_factor").filter(|v| !v.is_null()) {
        return Err(format!("rotary_scaling_factor {f} is not supported"));
    }
    Ok(())
}

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    check_original(&raw)?;
    let hidden = uint(&raw, &["hidden_size", "n_embd"], Some(768))?;
    let sizes = [
        uint(&raw, &["vocab_size"], None)?,
        hidden,
        uint(&raw, &["num_hidden_layers", "n_layer"], Some(12))?,
        uint(&raw, &["num_attention_heads", "n_head"], Some(12))?,
        uint(&raw, &["intermediate_size", "n_inner"], Some(3072))?,
    ];
    rope_theta(&raw, &["rope_theta", "rotary_emb_base"], THETA)?;
    // The original's "swiglu" is silu(fc12 x) * fc11 x.
    let act = match raw.get("activation_function").and_then(Value::as_str) {
        Some("swiglu") => crate::config::HiddenAct::Silu,
        Some(other) => return Err(format!("activation_function '{other}' is not supported")),
        None => act(&raw, &["hidden_act"], "silu")?,
    };
    GateAct::of(act).map_err(|e| e.to_string())?;
    let max = uint(
        &raw,
        &["max_position_embeddings", "n_positions"],
        Some(2048),
    )?;
    let types = uint(&raw, &["type_vocab_size"], Some(2))?;
    let eps = number(&raw, &["layer_norm_eps", "layer_norm_epsilon"], 1e-12)?;
    let pad = uint(&raw, &["pad_token_id"], Some(0))?;
    Ok(rotary_config(
        Architecture::NomicBert,
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
    let gate = Mlp::Gated(GateAct::of(cfg.hidden_act)?);
    let native = w.contains("layers.0.self_attn.o_proj.weight");
    let no_bias = |name: &str, d_in: usize, d_out: usize| -> Result<Linear> {
        let (weight, _) = weight_bias(w, name, d_in, d_out, false)?;
        Linear::new(&weight, None, d_in, d_out)
    };
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let (p, names) = if native {
            (
                format!("layers.{i}"),
                [
                    "self_attn.o_proj",
                    "post_attention_layernorm",
                    "mlp.gate_proj",
                    "mlp.up_proj",
                    "mlp.down_proj",
                    "post_mlp_layernorm",
                ],
            )
        } else {
            (
                format!("encoder.layers.{i}"),
                [
                    "attn.out_proj",
                    "norm1",
                    "mlp.fc12",
                    "mlp.fc11",
                    "mlp.fc2",
                    "norm2",
                ],
            )
        };
        let n = |k: usize| format!("{p}.{}", names[k]);
        blocks.push(Box::new(RotaryBlock {
            qkv: qkv(
                w,
                &format!("{p}.self_attn"),
                &format!("{p}.attn.Wqkv"),
                cfg,
                false,
            )?,
            attn_out: no_bias(&n(0), h, h)?,
            attn_ln: LayerNorm::load(w, &n(1), h, eps)?,
            up: stacked(
                vec![
                    weight_bias(w, &n(2), h, inter, false)?,
                    weight_bias(w, &n(3), h, inter, false)?,
                ],
                h,
                0,
                1.0,
            )?,
            down: no_bias(&n(4), inter, h)?,
            out_ln: LayerNorm::load(w, &n(5), h, eps)?,
            mlp: gate,
            rope: rope.clone(),
        }));
    }
    let ln = if w.contains("emb_ln.weight") {
        "emb_ln"
    } else {
        "embeddings.LayerNorm"
    };
    Ok(ModelParts {
        embeddings: rotary_embeddings(w, cfg, ln)?,
        blocks,
        bias: None,
        pooler: super::pooler(w, h)?,
    })
}
