//! `gte` (the "new" GTE architecture: gte-multilingual-base, gte-base-en-v1.5)
//! and the rotary post-norm layer it shares with `nomic_bert` and
//! `jina_embeddings_v3`.
//!
//! The layer ([`RotaryBlock`]): BERT's post-norm layout (attention, add &
//! LayerNorm, feed-forward, add & LayerNorm) without a position table: the
//! queries and keys of every layer are rotated by rotary embeddings
//! (transformers' `rotate_half` form, positions from 0 in every sentence, one
//! theta), and the feed-forward is gated (`down(act(gate(x)) * up(x))`, GTE
//! and NomicBERT) or plain (`fc2(act(fc1(x)))`, Jina v3).
//!
//! GTE: word embeddings, token type 0 (when `type_vocab_size` > 0), LayerNorm;
//! q, k, v and o projections with biases, `gate_proj` and `up_proj` without,
//! `down_proj` with; `hidden_act` "gelu". Names as transformers 5's `GteModel`
//! (`layers.N.self_attn.q_proj`, `layers.N.mlp.gate_proj`,
//! `layers.N.post_attention_layernorm`, ...) or as the original remote-code
//! checkpoints (`encoder.layer.N.attention.qkv_proj` fused, `mlp.up_gate_proj`
//! up then gate, `attn_ln`, `mlp_ln`), optionally prefixed `gte.`, `new.` or
//! `model.`. Rotary theta from `rope_parameters` (transformers 5), else
//! `rope_theta`; only the default rotary embedding (no `rope_scaling`).
use super::Architecture;
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::{Block, Embeddings, LayerNorm, Linear, ModelParts, Pass, Positions, Scratch};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{attention, gated_act, rope_qk, Act, AttnOpts, Isa, RopeTable, ShapeError};
use serde_json::Value;
use std::sync::Arc;

pub(crate) fn kernel_err(e: ShapeError) -> EncoderError {
    EncoderError::Unsupported(format!("forward pass: {e}"))
}

/// The first of `names` that `raw` has (and is not null).
pub(crate) fn field<'a>(raw: &'a Value, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| raw.get(*n).filter(|v| !v.is_null()))
}

/// A non-negative integer field under one of `names`, else `default`
/// (`None`: required).
pub(crate) fn uint(raw: &Value, names: &[&str], default: Option<usize>) -> Result<usize, String> {
    match field(raw, names) {
        None => default.ok_or_else(|| format!("config.json has no {}", names.join(" or "))),
        Some(v) => v
            .as_u64()
            .map(|x| x as usize)
            .ok_or_else(|| format!("{} is {v}, not a non-negative integer", names[0])),
    }
}

/// A positive finite number under one of `names`, else `default`.
pub(crate) fn number(raw: &Value, names: &[&str], default: f64) -> Result<f64, String> {
    match field(raw, names) {
        None => Ok(default),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(format!("{} is {v}, not a positive number", names[0])),
        },
    }
}

/// A boolean field under one of `names`, else `default`.
pub(crate) fn flag(raw: &Value, names: &[&str], default: bool) -> Result<bool, String> {
    match field(raw, names) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(format!("{} is {v}, not a boolean", names[0])),
    }
}

/// The rotary theta: `rope_parameters.rope_theta` (transformers 5; its
/// `rope_type` must be "default"), else the first of `legacy`, else `default`;
/// `rope_scaling` is refused.
pub(crate) fn rope_theta(raw: &Value, legacy: &[&str], default: f64) -> Result<f64, String> {
    if let Some(s) = field(raw, &["rope_scaling"]) {
        return Err(format!(
            "rope_scaling {s} is not supported (only the default rotary embedding)"
        ));
    }
    if let Some(p) = field(raw, &["rope_parameters"]) {
        if let Some(t) = p.get("rope_type").filter(|t| !t.is_null()) {
            if t.as_str() != Some("default") {
                return Err(format!(
                    "rope_parameters.rope_type {t} is not supported (only \"default\")"
                ));
            }
        }
        if p.get("rope_theta").is_some_and(|t| !t.is_null()) {
            return number(p, &["rope_theta"], default);
        }
    }
    number(raw, legacy, default)
}

/// The common config of a rotary BERT-like: positions from 0 in every
/// sentence, `max_tokens` = `max_position_embeddings`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rotary_config(
    architecture: Architecture,
    model_type: String,
    raw: Value,
    sizes: [usize; 5],
    hidden_act: HiddenAct,
    max_positions: usize,
    type_vocab_size: usize,
    layer_norm_eps: f64,
    pad_token_id: usize,
) -> ModelConfig {
    let [vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size] =
        sizes;
    ModelConfig {
        architecture,
        model_type,
        vocab_size,
        hidden_size,
        num_hidden_layers,
        num_attention_heads,
        intermediate_size,
        hidden_act,
        max_position_embeddings: max_positions,
        type_vocab_size,
        layer_norm_eps,
        pad_token_id,
        max_tokens: max_positions,
        raw,
    }
}

/// `hidden_act` as [`HiddenAct`] (an error naming `allowed` otherwise).
pub(crate) fn act(raw: &Value, names: &[&str], default: &str) -> Result<HiddenAct, String> {
    let name = match field(raw, names) {
        None => default.to_string(),
        Some(v) => v
            .as_str()
            .ok_or_else(|| format!("{} is {v}, not a string", names[0]))?
            .to_string(),
    };
    serde_json::from_value(Value::String(name.clone()))
        .map_err(|_| format!("{} '{name}' is not supported", names[0]))
}

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let sizes = [
        uint(&raw, &["vocab_size"], None)?,
        uint(&raw, &["hidden_size"], Some(768))?,
        uint(&raw, &["num_hidden_layers"], Some(12))?,
        uint(&raw, &["num_attention_heads"], Some(12))?,
        uint(&raw, &["intermediate_size"], Some(3072))?,
    ];
    rope_theta(&raw, &["rope_theta"], 160_000.0)?;
    let act = act(&raw, &["hidden_act"], "gelu")?;
    let max = uint(&raw, &["max_position_embeddings"], Some(8192))?;
    let types = uint(&raw, &["type_vocab_size"], Some(1))?;
    let eps = number(&raw, &["layer_norm_eps"], 1e-12)?;
    let pad = uint(&raw, &["pad_token_id"], Some(1))?;
    Ok(rotary_config(
        Architecture::Gte,
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

/// The feed-forward of a [`RotaryBlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mlp {
    /// `up` gives `[act half | linear half]`; `act(first) * second`.
    Gated(GateAct),
    /// `up` gives the intermediate; `act` in its output stage.
    Plain(Act),
}

/// The activation of a gated feed-forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GateAct {
    Gelu,
    Silu,
}

impl GateAct {
    pub(crate) fn of(act: HiddenAct) -> Result<Self> {
        match act {
            HiddenAct::Gelu => Ok(Self::Gelu),
            HiddenAct::Silu => Ok(Self::Silu),
            other => Err(EncoderError::Unsupported(format!(
                "a gated feed-forward with {other:?}"
            ))),
        }
    }
}

/// `out` (rows of `n`) = silu(first half) * second half of the rows of `x`
/// (rows of `2n`), as torch's `silu(x) * y` in f32.
fn gated_silu(x: &[f32], n: usize, out: &mut [f32]) {
    for (row, o) in x.chunks_exact(2 * n).zip(out.chunks_exact_mut(n)) {
        let (a, g) = row.split_at(n);
        for ((y, &a), &g) in o.iter_mut().zip(a).zip(g) {
            *y = a / (1.0 + (-a).exp()) * g;
        }
    }
}

/// One rotary post-norm layer (see the module doc).
pub(crate) struct RotaryBlock {
    /// `[hidden] -> [q | k | v]`, the 1/sqrt(head_dim) scale in the q rows.
    pub(crate) qkv: Linear,
    pub(crate) attn_out: Linear,
    pub(crate) attn_ln: LayerNorm,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
    pub(crate) out_ln: LayerNorm,
    pub(crate) mlp: Mlp,
    pub(crate) rope: Arc<RopeTable>,
}

impl Block for RotaryBlock {
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
        self.qkv.forward_act_host(x, Act::None, qkv, qin)?;
        rope_qk(qkv, shape.batch, shape.seq, shape.heads, &self.rope).map_err(kernel_err)?;
        ctx.resize(x.len(), 0.0);
        attention(qkv, pass.lens, shape, AttnOpts::default(), ctx, scores).map_err(kernel_err)?;
        self.attn_out
            .forward_residual_ln_host(ctx, x, &self.attn_ln, h1, qin, None)?;
        match self.mlp {
            Mlp::Plain(act) => {
                self.up.forward_act_host(h1, act, inter, qin)?;
                self.down
                    .forward_residual_ln_host(inter, h1, &self.out_ln, out, qin, None)
            }
            Mlp::Gated(act) => {
                self.up.forward_act_host(h1, Act::None, inter, qin)?;
                let n = self.down.d_in;
                qkv.resize(inter.len() / 2, 0.0);
                match act {
                    GateAct::Gelu => gated_act(inter, n, Act::GeluErf, qkv).map_err(kernel_err)?,
                    GateAct::Silu => gated_silu(inter, n, qkv),
                }
                self.down
                    .forward_residual_ln_host(qkv, h1, &self.out_ln, out, qin, None)
            }
        }
    }

    fn quantize(&mut self, isa: Isa) -> Result<()> {
        for lin in [
            &mut self.qkv,
            &mut self.attn_out,
            &mut self.up,
            &mut self.down,
        ] {
            lin.quantize(isa)?;
        }
        Ok(())
    }
}

/// `name.weight` `[d_out, d_in]` and, if `bias`, `name.bias`.
pub(crate) fn weight_bias(
    w: &Weights,
    name: &str,
    d_in: usize,
    d_out: usize,
    bias: bool,
) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
    let weight = w.vec(&format!("{name}.weight"), &[d_out, d_in])?;
    let b = if bias {
        Some(w.vec(&format!("{name}.bias"), &[d_out])?)
    } else {
        None
    };
    Ok((weight, b))
}

/// A linear layer from row blocks stacked in order (`[d_out_i, d_in]` each,
/// biases zero where absent), the first `scale_rows` rows (and biases) times
/// `scale`.
pub(crate) fn stacked(
    parts: Vec<(Vec<f32>, Option<Vec<f32>>)>,
    d_in: usize,
    scale_rows: usize,
    scale: f32,
) -> Result<Linear> {
    let mut weight = Vec::new();
    let mut bias = Vec::new();
    let any_bias = parts.iter().any(|(_, b)| b.is_some());
    for (wp, bp) in parts {
        let rows = wp.len() / d_in;
        weight.extend(wp);
        bias.extend(bp.unwrap_or_else(|| vec![0.0; rows]));
    }
    weight[..scale_rows * d_in]
        .iter_mut()
        .for_each(|x| *x *= scale);
    bias[..scale_rows].iter_mut().for_each(|x| *x *= scale);
    let d_out = weight.len() / d_in;
    Linear::new(&weight, any_bias.then_some(bias), d_in, d_out)
}

/// The fused, query-scaled QKV of layer prefix `attn`: `q_proj`, `k_proj`,
/// `v_proj` under it (transformers 5), else the fused `fused` tensor.
pub(crate) fn qkv(
    w: &Weights,
    attn: &str,
    fused: &str,
    cfg: &ModelConfig,
    bias: bool,
) -> Result<Linear> {
    let h = cfg.hidden_size;
    let scale = (1.0 / (cfg.head_dim() as f64).sqrt()) as f32;
    let parts = if w.contains(&format!("{attn}.q_proj.weight"))
        || !w.contains(&format!("{fused}.weight"))
    {
        ["q_proj", "k_proj", "v_proj"]
            .iter()
            .map(|p| weight_bias(w, &format!("{attn}.{p}"), h, h, bias))
            .collect::<Result<Vec<_>>>()?
    } else {
        vec![weight_bias(w, fused, h, 3 * h, bias)?]
    };
    stacked(parts, h, h, scale)
}

/// The rotary table of `cfg` for `theta`.
pub(crate) fn rope_table(cfg: &ModelConfig, theta: f64) -> Result<Arc<RopeTable>> {
    let t = RopeTable::new(theta, cfg.head_dim(), cfg.max_tokens).map_err(kernel_err)?;
    Ok(Arc::new(t))
}

/// Word (+ token type 0) embeddings and LayerNorm `ln`, no position table.
pub(crate) fn rotary_embeddings(w: &Weights, cfg: &ModelConfig, ln: &str) -> Result<Embeddings> {
    let h = cfg.hidden_size;
    let token_type = if cfg.type_vocab_size > 0 {
        Some(w.vec(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, h],
        )?)
    } else {
        None
    };
    Ok(Embeddings {
        word: w.vec("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?,
        position: Vec::new(),
        positions: Positions::None,
        token_type,
        ln: Some(LayerNorm::load(w, ln, h, cfg.layer_norm_eps)?),
    })
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let theta =
        rope_theta(&cfg.raw, &["rope_theta"], 160_000.0).map_err(EncoderError::Unsupported)?;
    let rope = rope_table(cfg, theta)?;
    let (h, inter, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
    let gate = Mlp::Gated(GateAct::of(cfg.hidden_act)?);
    let native = w.contains("layers.0.self_attn.o_proj.weight");
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let block = if native {
            let p = format!("layers.{i}");
            let mlp = format!("{p}.mlp");
            RotaryBlock {
                qkv: qkv(w, &format!("{p}.self_attn"), "", cfg, true)?,
                attn_out: Linear::load(w, &format!("{p}.self_attn.o_proj"), h, h)?,
                attn_ln: LayerNorm::load(w, &format!("{p}.post_attention_layernorm"), h, eps)?,
                up: stacked(
                    vec![
                        weight_bias(w, &format!("{mlp}.gate_proj"), h, inter, false)?,
                        weight_bias(w, &format!("{mlp}.up_proj"), h, inter, false)?,
                    ],
                    h,
                    0,
                    1.0,
                )?,
                down: Linear::load(w, &format!("{mlp}.down_proj"), inter, h)?,
                out_ln: LayerNorm::load(w, &format!("{p}.post_mlp_layernorm"), h, eps)?,
                mlp: gate,
                rope: rope.clone(),
            }
        } else {
            // The remote-code names: `up_gate_proj` is [up; gate].
            let p = format!("encoder.layer.{i}");
            let (ug, _) = weight_bias(w, &format!("{p}.mlp.up_gate_proj"), h, 2 * inter, false)?;
            let (up, gate_rows) = ug.split_at(inter * h);
            RotaryBlock {
                qkv: qkv(w, "", &format!("{p}.attention.qkv_proj"), cfg, true)?,
                attn_out: Linear::load(w, &format!("{p}.attention.o_proj"), h, h)?,
                attn_ln: LayerNorm::load(w, &format!("{p}.attn_ln"), h, eps)?,
                up: stacked(
                    vec![(gate_rows.to_vec(), None), (up.to_vec(), None)],
                    h,
                    0,
                    1.0,
                )?,
                down: Linear::load(w, &format!("{p}.mlp.down_proj"), inter, h)?,
                out_ln: LayerNorm::load(w, &format!("{p}.mlp_ln"), h, eps)?,
                mlp: gate,
                rope: rope.clone(),
            }
        };
        blocks.push(Box::new(block));
    }
    Ok(ModelParts {
        embeddings: rotary_embeddings(w, cfg, "embeddings.LayerNorm")?,
        blocks,
        bias: None,
        pooler: super::pooler(w, h)?,
    })
}
