//! `modernbert`: token embeddings and a LayerNorm (no positions, no token
//! types), pre-norm layers (layer 0's attention norm is the identity) whose
//! queries and keys are rotated by rotary embeddings, attention global or
//! sliding-window local by layer, a GeGLU feed-forward (`Wi` gives
//! `2 * intermediate_size` values, `act(input) * gate`, then `Wo`), and a final
//! LayerNorm. Linear layers and norms have biases only where the config says so
//! (`attention_bias`, `mlp_bias`, `norm_bias`, all false in the released
//! models). Names as ModernBertModel's (`embeddings.tok_embeddings`,
//! `layers.N.attn.Wqkv`, `layers.N.mlp.Wi`, `final_norm`, ...), optionally
//! prefixed `model.` (ModernBertForMaskedLM and the other heads).
//!
//! Layer kinds and rotary bases: `layer_types` and `rope_parameters` (configs
//! saved by transformers 5), else the original fields: layer `i` is global
//! when `i % global_attn_every_n_layers == 0` (default 3), global layers rotate
//! with `global_rope_theta` (160000), local ones with `local_rope_theta`
//! (10000) and see the keys within `local_attention / 2` positions (window
//! 128). Every sentence's positions start at 0, as transformers' default
//! `position_ids`.
//!
//! Hidden states: 0 is the embedding output (after its norm), `i` in
//! `1..N` the output of layer `i`, and `N` the output of the last layer
//! *after the final norm*. That is exactly transformers'
//! `output_hidden_states=True`, which replaces its last entry with
//! `last_hidden_state` (the final norm included), so `last-avg` is the mean of
//! `last_hidden_state`, what sentence-transformers pools, and `cls` its first
//! token; only the last layer's pre-norm output has no number.
use super::Architecture;
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::{Block, Embeddings, LayerNorm, Linear, ModelParts, Pass, Positions, Scratch};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{
    attention, gated_act, layer_norm, rope_qk, Act, AttnOpts, Isa, RopeTable, ShapeError,
};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

fn default_act() -> HiddenAct {
    HiddenAct::Gelu
}
fn default_max_pos() -> usize {
    8192
}
fn default_eps() -> f64 {
    1e-5
}

/// The sizes of a ModernBERT `config.json` (transformers' defaults where absent).
#[derive(Deserialize)]
struct Sizes {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "default_act")]
    hidden_activation: HiddenAct,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    norm_eps: f64,
    #[serde(default)]
    pad_token_id: Option<usize>,
}

/// ModernBertConfig's `pad_token_id` default.
const PAD_TOKEN_ID: usize = 50283;

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let c = Sizes::deserialize(&raw).map_err(|e| e.to_string())?;
    if matches!(c.hidden_activation, HiddenAct::GeluApprox | HiddenAct::Silu) {
        return Err("hidden_activation: ModernBERT's GeGLU runs 'gelu' or 'relu'".into());
    }
    Layout::read(&raw, c.num_hidden_layers)?;
    Ok(ModelConfig {
        architecture: Architecture::ModernBert,
        model_type,
        vocab_size: c.vocab_size,
        hidden_size: c.hidden_size,
        num_hidden_layers: c.num_hidden_layers,
        num_attention_heads: c.num_attention_heads,
        intermediate_size: c.intermediate_size,
        hidden_act: c.hidden_activation,
        max_position_embeddings: c.max_position_embeddings,
        type_vocab_size: 0,
        layer_norm_eps: c.norm_eps,
        pad_token_id: c.pad_token_id.unwrap_or(PAD_TOKEN_ID),
        max_tokens: c.max_position_embeddings,
        raw,
    })
}

/// Which layers are global, their rotary bases, the local window and the biases.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    /// One per layer: global (full) attention, else sliding-window local.
    pub global: Vec<bool>,
    pub global_theta: f64,
    pub local_theta: f64,
    /// `local_attention`: local layers see keys within `window / 2`.
    pub window: usize,
    pub norm_bias: bool,
    pub attention_bias: bool,
    pub mlp_bias: bool,
}

impl Layout {
    pub(crate) fn read(raw: &Value, layers: usize) -> Result<Self, String> {
        let flag = |name: &str| match raw.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(format!("{name} is {v}, not a boolean")),
        };
        let uint = |name: &str, default: u64| match raw.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("{name} is {v}, not a non-negative integer")),
        };
        let global = match raw.get("layer_types") {
            Some(Value::Array(kinds)) => {
                if kinds.len() != layers {
                    return Err(format!(
                        "layer_types names {} layers, num_hidden_layers is {layers}",
                        kinds.len()
                    ));
                }
                kinds
                    .iter()
                    .map(|k| match k.as_str() {
                        Some("full_attention") => Ok(true),
                        Some("sliding_attention") => Ok(false),
                        _ => Err(format!("layer_types: unknown layer type {k}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            None | Some(Value::Null) => {
                let every = uint("global_attn_every_n_layers", 3)? as usize;
                if every == 0 {
                    return Err("global_attn_every_n_layers is 0".into());
                }
                (0..layers).map(|i| i % every == 0).collect()
            }
            Some(v) => return Err(format!("layer_types is {v}, not a list")),
        };
        if raw.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err("rope_scaling is not supported (only the default rotary embedding)".into());
        }
        let theta = |kind: &str, legacy: &str, default: f64| -> Result<f64, String> {
            let params = raw.get("rope_parameters").and_then(|p| p.get(kind));
            if let Some(t) = params.and_then(|p| p.get("rope_type")) {
                if t.as_str() != Some("default") {
                    return Err(format!(
                        "rope_parameters.{kind}.rope_type {t} is not supported (only \"default\")"
                    ));
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
                    _ => Err(format!(
                        "the {kind} rotary theta {v} is not a positive number"
                    )),
                },
            }
        };
        Ok(Self {
            global,
            global_theta: theta("full_attention", "global_rope_theta", 160_000.0)?,
            local_theta: theta("sliding_attention", "local_rope_theta", 10_000.0)?,
            window: uint("local_attention", 128)? as usize,
            norm_bias: flag("norm_bias")?,
            attention_bias: flag("attention_bias")?,
            mlp_bias: flag("mlp_bias")?,
        })
    }
}

fn kernel_err(e: ShapeError) -> EncoderError {
    EncoderError::Unsupported(format!("forward pass: {e}"))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let lay = Layout::read(&cfg.raw, cfg.num_hidden_layers).map_err(EncoderError::Unsupported)?;
    let (h, inter, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
    let norm = |name: &str| -> Result<LayerNorm> {
        Ok(LayerNorm {
            w: w.vec(&format!("{name}.weight"), &[h])?,
            b: if lay.norm_bias {
                w.vec(&format!("{name}.bias"), &[h])?
            } else {
                vec![0.0; h]
            },
            eps: eps as f32,
        })
    };
    let linear = |name: &str, d_in: usize, d_out: usize, bias: bool, scale_rows: usize| {
        let s = (1.0 / (cfg.head_dim() as f64).sqrt()) as f32;
        let mut weight = w.vec(&format!("{name}.weight"), &[d_out, d_in])?;
        weight[..scale_rows * d_in].iter_mut().for_each(|x| *x *= s);
        let b = if bias {
            let mut b = w.vec(&format!("{name}.bias"), &[d_out])?;
            b[..scale_rows].iter_mut().for_each(|x| *x *= s);
            Some(b)
        } else {
            None
        };
        Linear::new(&weight, b, d_in, d_out)
    };
    let rope = |theta: f64| -> Result<Arc<RopeTable>> {
        let t = RopeTable::new(theta, cfg.head_dim(), cfg.max_tokens).map_err(kernel_err)?;
        Ok(Arc::new(t))
    };
    let (global_rope, local_rope) = (rope(lay.global_theta)?, rope(lay.local_theta)?);
    let act = match cfg.hidden_act {
        HiddenAct::Gelu => Act::GeluErf,
        HiddenAct::Relu => Act::Relu,
        HiddenAct::GeluApprox | HiddenAct::Silu => {
            return Err(EncoderError::Unsupported(
                "ModernBERT with a tanh GELU or SiLU".into(),
            ))
        }
    };
    let n = cfg.num_hidden_layers;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(n);
    for (i, &global) in lay.global.iter().enumerate() {
        let p = format!("layers.{i}");
        blocks.push(Box::new(ModernBertBlock {
            attn_norm: if i == 0 {
                None
            } else {
                Some(norm(&format!("{p}.attn_norm"))?)
            },
            // The 1/sqrt(head_dim) score scale folded into the query rows (RoPE
            // is linear, so scaling before the rotation is the same).
            qkv: linear(&format!("{p}.attn.Wqkv"), h, 3 * h, lay.attention_bias, h)?,
            attn_out: linear(&format!("{p}.attn.Wo"), h, h, lay.attention_bias, 0)?,
            mlp_norm: norm(&format!("{p}.mlp_norm"))?,
            wi: linear(&format!("{p}.mlp.Wi"), h, 2 * inter, lay.mlp_bias, 0)?,
            wo: linear(&format!("{p}.mlp.Wo"), inter, h, lay.mlp_bias, 0)?,
            act,
            rope: if global {
                global_rope.clone()
            } else {
                local_rope.clone()
            },
            window: (!global).then_some(lay.window),
            final_norm: if i + 1 == n {
                Some(norm("final_norm")?)
            } else {
                None
            },
        }));
    }
    let embeddings = Embeddings {
        word: w.vec("embeddings.tok_embeddings.weight", &[cfg.vocab_size, h])?,
        position: Vec::new(),
        positions: Positions::None,
        token_type: None,
        ln: Some(norm("embeddings.norm")?),
    };
    Ok(ModelParts {
        embeddings,
        blocks,
        bias: None,
        pooler: None,
    })
}

/// One pre-norm ModernBERT layer:
/// `x += Wo · attn(rope(Wqkv · attn_norm(x)))`, then
/// `x += Wo · geglu(Wi · mlp_norm(x))`, then the final norm on the last layer.
struct ModernBertBlock {
    /// `None` on layer 0 (transformers' `nn.Identity`).
    attn_norm: Option<LayerNorm>,
    qkv: Linear,
    attn_out: Linear,
    mlp_norm: LayerNorm,
    /// `[hidden] -> [2 * intermediate]`: the input half, then the gate half.
    wi: Linear,
    wo: Linear,
    act: Act,
    /// The cosines and sines of this layer's theta (shared by its kind).
    rope: Arc<RopeTable>,
    /// `local_attention` on local layers.
    window: Option<usize>,
    final_norm: Option<LayerNorm>,
}

fn norm_in_place(x: &mut [f32], ln: &LayerNorm) -> Result<()> {
    layer_norm(x, &ln.w, &ln.b, ln.eps).map_err(kernel_err)
}

impl Block for ModernBertBlock {
    fn forward_host(
        &self,
        x: &[f32],
        out: &mut Vec<f32>,
        pass: &Pass,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let Scratch {
            qkv,
            ctx,
            h1,
            inter,
            scores,
            qin,
            ..
        } = scratch;
        let shape = pass.shape;
        // Attention on attn_norm(x) (x itself on layer 0).
        let attn_in: &[f32] = match &self.attn_norm {
            Some(ln) => {
                h1.resize(x.len(), 0.0);
                h1.copy_from_slice(x);
                norm_in_place(h1, ln)?;
                h1
            }
            None => x,
        };
        self.qkv.forward_act_host(attn_in, Act::None, qkv, qin)?;
        rope_qk(qkv, shape.batch, shape.seq, shape.heads, &self.rope).map_err(kernel_err)?;
        ctx.resize(x.len(), 0.0);
        let opts = AttnOpts {
            bias: None,
            window: self.window,
            causal: false,
        };
        attention(qkv, pass.lens, shape, opts, ctx, scores).map_err(kernel_err)?;
        // h1 = x + Wo ctx
        self.attn_out.forward_residual_host(ctx, x, h1, qin)?;
        // ctx = mlp_norm(h1); inter = Wi ctx; qkv = act(input) * gate
        ctx.copy_from_slice(h1);
        norm_in_place(ctx, &self.mlp_norm)?;
        self.wi.forward_act_host(ctx, Act::None, inter, qin)?;
        let n = self.wo.d_in;
        qkv.resize(inter.len() / 2, 0.0);
        gated_act(inter, n, self.act, qkv).map_err(kernel_err)?;
        // out = h1 + Wo qkv, then the final norm on the last layer
        self.wo.forward_residual_host(qkv, h1, out, qin)?;
        if let Some(ln) = &self.final_norm {
            norm_in_place(out, ln)?;
        }
        Ok(())
    }

    fn quantize(&mut self, isa: Isa) -> Result<()> {
        for lin in [
            &mut self.qkv,
            &mut self.attn_out,
            &mut self.wi,
            &mut self.wo,
        ] {
            lin.quantize(isa)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
