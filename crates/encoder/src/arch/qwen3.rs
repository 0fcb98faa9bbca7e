//! `qwen3` and `qwen2`: decoder layers ([`crate::engine::decoder`]) with
//! RMSNorm before attention and feed-forward, rotary positions, grouped-query
//! attention (`num_key_value_heads`), a SwiGLU feed-forward and a causal mask;
//! Qwen3 adds an RMSNorm of each query and key head (`q_norm`, `k_norm`) and has
//! an explicit `head_dim` (default 128); Qwen2 has biases on q, k and v. Names
//! as `Qwen3Model` (`embed_tokens`, `layers.N.self_attn.q_proj`, `norm`),
//! optionally prefixed `model.` (`Qwen3ForCausalLM`, whose `lm_head` is unused).
//!
//! Every sentence's positions start at 0 (bertflow pads on the right; with a
//! causal mask the padding never reaches a real token). Hidden states: 0 is the
//! token embedding, `i` the output of layer `i`, and `N` the last layer's
//! output after the final norm, as transformers' `output_hidden_states=True`
//! (its last entry is `last_hidden_state`). The default pooling of these causal
//! models is `last-token` (what Qwen3-Embedding pools).
//!
//! Refused: sliding-window layers (`use_sliding_window`, unused by the
//! embedding checkpoints) and rotary scaling other than the default.
use super::Architecture;
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::decoder::{DecoderAttn, DecoderBlock, DecoderNames, DecoderSpec};
use crate::engine::{Block, Embeddings, ModelParts, Positions};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{Glu, RopeTable};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

fn default_act() -> String {
    "silu".into()
}
fn default_max_pos() -> usize {
    32768
}
fn default_eps() -> f64 {
    1e-6
}

/// The fields of a Llama-style `config.json` (Qwen2, Qwen3, EuroBERT).
#[derive(Deserialize)]
pub(crate) struct LlamaSizes {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub intermediate_size: usize,
    #[serde(default = "default_act", alias = "hidden_activation")]
    pub hidden_act: String,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
}

impl LlamaSizes {
    pub(crate) fn read(raw: &Value) -> Result<Self, String> {
        let c = Self::deserialize(raw).map_err(|e| e.to_string())?;
        let kv = c.kv_heads();
        if kv == 0 || c.num_attention_heads == 0 || !c.num_attention_heads.is_multiple_of(kv) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {kv}",
                c.num_attention_heads
            ));
        }
        if c.head_dim == Some(0) {
            return Err("head_dim is 0".into());
        }
        if !(c.rms_norm_eps.is_finite() && c.rms_norm_eps > 0.0) {
            return Err(format!("rms_norm_eps {} is not positive", c.rms_norm_eps));
        }
        Ok(c)
    }

    pub(crate) fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// The gated activation `hidden_act` names.
    pub(crate) fn glu(&self) -> Result<Glu, String> {
        match self.hidden_act.as_str() {
            "silu" | "swish" => Ok(Glu::Silu),
            "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => Ok(Glu::GeluTanh),
            a => Err(format!(
                "hidden_act '{a}' is not supported here (silu or gelu_pytorch_tanh)"
            )),
        }
    }

    /// The common config (positions from 0; the padding id `pad`).
    pub(crate) fn into_config(
        self,
        architecture: Architecture,
        model_type: String,
        raw: Value,
        pad: usize,
    ) -> ModelConfig {
        ModelConfig {
            architecture,
            model_type,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            // The gate's activation (the blocks run it through `glu`).
            hidden_act: match self.glu() {
                Ok(Glu::GeluTanh) => HiddenAct::GeluApprox,
                _ => HiddenAct::Silu,
            },
            max_position_embeddings: self.max_position_embeddings,
            type_vocab_size: 0,
            layer_norm_eps: self.rms_norm_eps,
            pad_token_id: pad.min(self.vocab_size.saturating_sub(1)),
            max_tokens: self.max_position_embeddings,
            raw,
        }
    }
}

/// The rotary base of layers of `kind` (`full_attention`, `sliding_attention`):
/// `rope_parameters[kind].rope_theta` (transformers 5, per layer kind),
/// `rope_parameters.rope_theta`, the legacy field `legacy`, else `default`;
/// an error for a rotary scaling other than the default.
pub(crate) fn rope_theta(
    raw: &Value,
    kind: &str,
    legacy: &str,
    default: f64,
) -> Result<f64, String> {
    if raw.get("rope_scaling").is_some_and(|v| !v.is_null()) {
        return Err("rope_scaling is not supported (only the default rotary embedding)".into());
    }
    let params = raw.get("rope_parameters").filter(|p| !p.is_null());
    let params = params.map(|p| p.get(kind).unwrap_or(p));
    if let Some(t) = params.and_then(|p| p.get("rope_type")) {
        if t.as_str() != Some("default") {
            return Err(format!("rope_type {t} is not supported (only \"default\")"));
        }
    }
    let v = params
        .and_then(|p| p.get("rope_theta"))
        .or_else(|| raw.get(legacy))
        .filter(|v| !v.is_null());
    match v {
        None => Ok(default),
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t > 0.0 => Ok(t),
            _ => Err(format!("the rotary theta {v} is not a positive number")),
        },
    }
}

/// Whether a flag of the config is set (absent or null: false).
pub(crate) fn flag(raw: &Value, name: &str) -> Result<bool, String> {
    match raw.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(format!("{name} is {v}, not a boolean")),
    }
}

fn is_qwen3(model_type: &str) -> bool {
    model_type == "qwen3"
}

/// Qwen's head width: `head_dim` (Qwen3's default 128), else hidden / heads.
fn head_dim(c: &LlamaSizes, model_type: &str) -> usize {
    match c.head_dim {
        Some(d) => d,
        None if is_qwen3(model_type) => 128,
        None => c.hidden_size / c.num_attention_heads.max(1),
    }
}

fn check_layers(raw: &Value) -> Result<(), String> {
    if flag(raw, "use_sliding_window")? {
        return Err("use_sliding_window: sliding-window Qwen layers are not supported".into());
    }
    if let Some(kinds) = raw.get("layer_types").and_then(Value::as_array) {
        if let Some(k) = kinds.iter().find(|k| k.as_str() != Some("full_attention")) {
            return Err(format!("layer_types: layer type {k} is not supported"));
        }
    }
    Ok(())
}

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let c = LlamaSizes::read(&raw)?;
    c.glu()?;
    check_layers(&raw)?;
    rope_theta(&raw, "full_attention", "rope_theta", 10_000.0)?;
    if !head_dim(&c, &model_type).is_multiple_of(2) {
        return Err("head_dim must be even for rotary positions".into());
    }
    // Qwen's configs name no pad token (its tokenizer pads with <|endoftext|>):
    // any id does, the padding is masked.
    let pad = c.pad_token_id.unwrap_or(0);
    Ok(c.into_config(Architecture::Qwen3, model_type, raw, pad))
}

/// Token embeddings (scaled by `scale`), no positions, no norm.
pub(crate) fn token_embeddings(
    w: &Weights,
    cfg: &ModelConfig,
    scale: Option<f32>,
) -> Result<Embeddings> {
    let mut word = w.vec("embed_tokens.weight", &[cfg.vocab_size, cfg.hidden_size])?;
    if let Some(s) = scale {
        word.iter_mut().for_each(|x| *x *= s);
    }
    Ok(Embeddings {
        word,
        position: Vec::new(),
        positions: Positions::None,
        token_type: None,
        ln: None,
    })
}

pub(crate) fn rope_table(theta: f64, head_dim: usize, cfg: &ModelConfig) -> Result<Arc<RopeTable>> {
    RopeTable::new(theta, head_dim, cfg.max_tokens)
        .map(Arc::new)
        .map_err(|e| EncoderError::Unsupported(e.to_string()))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let bad = EncoderError::Unsupported;
    let c = LlamaSizes::read(&cfg.raw).map_err(bad)?;
    let qwen3 = is_qwen3(&cfg.model_type);
    let dh = head_dim(&c, &cfg.model_type);
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
            // Qwen2: q, k, v with biases, o without; Qwen3: `attention_bias` on all four.
            qkv_bias: !qwen3 || c.attention_bias,
            o_bias: qwen3 && c.attention_bias,
            mlp_bias: false,
            scale: 1.0 / (dh as f64).sqrt(),
            act,
            attn: DecoderAttn {
                heads: c.num_attention_heads,
                kv_heads: c.kv_heads(),
                head_dim: dh,
                causal: true,
                window: None,
            },
            rope: rope.clone(),
            final_norm: (i + 1 == n).then_some("norm"),
        };
        blocks.push(Box::new(DecoderBlock::load(
            w,
            &DecoderNames::llama(i, qwen3),
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
