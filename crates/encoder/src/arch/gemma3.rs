//! `gemma3_text` (and `gemma3`, its text part under `text_config`) with
//! `use_bidirectional_attention`: EmbeddingGemma. Decoder layers
//! ([`crate::engine::decoder`]) with four RMSNorms each, all of Gemma's
//! `(1 + w)` form (`input_layernorm`, `post_attention_layernorm` on the
//! attention output, `pre_feedforward_layernorm`, `post_feedforward_layernorm`
//! on the feed-forward output), per-head query and key norms, grouped-query
//! attention scaled by `query_pre_attn_scalar^-0.5`, a `gelu_pytorch_tanh`
//! gated feed-forward, token embeddings scaled by `sqrt(hidden_size)`, and a
//! final norm.
//!
//! Layers are global or sliding-window by `layer_types` (else every
//! `sliding_window_pattern`-th layer, default 6, is global); global layers
//! rotate with `rope_parameters.full_attention.rope_theta` (legacy
//! `rope_theta`, default 1e6), sliding ones with
//! `rope_parameters.sliding_attention.rope_theta` (legacy
//! `rope_local_base_freq`, default 1e4). With bidirectional attention
//! transformers turns the config's `sliding_window` `S` into `S / 2 + 1` and
//! lets query `i` see the keys with `|i - j| < S / 2 + 1`, i.e. within `S / 2`:
//! the attention kernel's window `S`. Causal Gemma 3 (the chat models) is
//! refused: it is not an embedder.
//!
//! Hidden states as transformers numbers them: 0 is the scaled embedding, the
//! last is `last_hidden_state` (after the final norm). Names as
//! `Gemma3TextModel` (`embed_tokens`, `layers.N...`, `norm`), optionally
//! prefixed `model.` or `model.language_model.`.
use super::qwen3::{flag, rope_table, rope_theta, token_embeddings, LlamaSizes};
use super::Architecture;
use crate::config::ModelConfig;
use crate::engine::decoder::{DecoderAttn, DecoderBlock, DecoderNames, DecoderSpec};
use crate::engine::{Block, ModelParts};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use serde_json::Value;

/// The text config: `text_config` of a `gemma3` config, else the config itself.
fn text(raw: &Value) -> &Value {
    raw.get("text_config")
        .filter(|t| t.is_object())
        .unwrap_or(raw)
}

/// Gemma 3's defaults where a field is absent.
fn with_defaults(raw: &Value) -> Value {
    let mut t = text(raw).clone();
    if let Some(o) = t.as_object_mut() {
        for (k, v) in [
            ("head_dim", Value::from(256)),
            ("hidden_activation", Value::from("gelu_pytorch_tanh")),
            ("max_position_embeddings", Value::from(131_072)),
            ("pad_token_id", Value::from(0)),
        ] {
            if o.get(k).is_none_or(Value::is_null) {
                o.insert(k.into(), v);
            }
        }
        // `hidden_act` is Gemma 1's name; Gemma 3 reads `hidden_activation`.
        o.remove("hidden_act");
    }
    t
}

/// Per layer: global (full) attention, else sliding-window.
fn layer_kinds(t: &Value, layers: usize) -> Result<Vec<bool>, String> {
    match t.get("layer_types") {
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
                .collect()
        }
        None | Some(Value::Null) => {
            let every = t
                .get("sliding_window_pattern")
                .and_then(Value::as_u64)
                .unwrap_or(6) as usize;
            if every == 0 {
                return Err("sliding_window_pattern is 0".into());
            }
            Ok((0..layers).map(|i| (i + 1) % every == 0).collect())
        }
        Some(v) => Err(format!("layer_types is {v}, not a list")),
    }
}

/// Everything [`load`] needs beyond the sizes.
struct Layout {
    global: Vec<bool>,
    window: usize,
    global_theta: f64,
    local_theta: f64,
    scale: f64,
}

fn layout(t: &Value, c: &LlamaSizes) -> Result<Layout, String> {
    if !flag(t, "use_bidirectional_attention")? {
        return Err(
            "Gemma 3 without use_bidirectional_attention is a causal chat model, not an \
             embedder (EmbeddingGemma sets it)"
                .into(),
        );
    }
    if t.get("attn_logit_softcapping")
        .is_some_and(|v| !v.is_null())
    {
        return Err("attn_logit_softcapping is not supported".into());
    }
    let window = match t.get("sliding_window") {
        None | Some(Value::Null) => 4096,
        Some(v) => v
            .as_u64()
            .filter(|&w| w > 0)
            .ok_or_else(|| format!("sliding_window {v} is not a positive integer"))?
            as usize,
    };
    let dh = c.head_dim.unwrap_or(256);
    let scalar = match t.get("query_pre_attn_scalar") {
        None | Some(Value::Null) => 256.0,
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| format!("query_pre_attn_scalar {v} is not positive"))?,
    };
    if !dh.is_multiple_of(2) {
        return Err("head_dim must be even for rotary positions".into());
    }
    Ok(Layout {
        global: layer_kinds(t, c.num_hidden_layers)?,
        // transformers: |i - j| < S / 2 + 1, the kernel's |i - j| <= window / 2.
        window: window / 2 * 2,
        global_theta: rope_theta(t, "full_attention", "rope_theta", 1_000_000.0)?,
        local_theta: rope_theta(t, "sliding_attention", "rope_local_base_freq", 10_000.0)?,
        scale: 1.0 / scalar.sqrt(),
    })
}

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let t = with_defaults(&raw);
    let c = LlamaSizes::read(&t)?;
    c.glu()?;
    layout(&t, &c)?;
    let pad = c.pad_token_id.unwrap_or(0);
    Ok(c.into_config(Architecture::Gemma3, model_type, raw, pad))
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let bad = EncoderError::Unsupported;
    let t = with_defaults(&cfg.raw);
    let c = LlamaSizes::read(&t).map_err(bad)?;
    let lay = layout(&t, &c).map_err(bad)?;
    let dh = c.head_dim.unwrap_or(256);
    let (global_rope, local_rope) = (
        rope_table(lay.global_theta, dh, cfg)?,
        rope_table(lay.local_theta, dh, cfg)?,
    );
    let act = c.glu().map_err(bad)?;
    let n = cfg.num_hidden_layers;
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(n);
    for (i, &global) in lay.global.iter().enumerate() {
        let p = format!("layers.{i}");
        let mut names = DecoderNames::llama(i, true);
        names.post_attn_norm = Some(format!("{p}.post_attention_layernorm"));
        names.pre_mlp_norm = format!("{p}.pre_feedforward_layernorm");
        names.post_mlp_norm = Some(format!("{p}.post_feedforward_layernorm"));
        let spec = DecoderSpec {
            hidden: cfg.hidden_size,
            intermediate: cfg.intermediate_size,
            eps: c.rms_norm_eps,
            norm_plus_one: true,
            qkv_bias: c.attention_bias,
            o_bias: c.attention_bias,
            mlp_bias: false,
            scale: lay.scale,
            act,
            attn: DecoderAttn {
                heads: c.num_attention_heads,
                kv_heads: c.kv_heads(),
                head_dim: dh,
                causal: false,
                window: (!global).then_some(lay.window),
            },
            rope: if global {
                global_rope.clone()
            } else {
                local_rope.clone()
            },
            final_norm: (i + 1 == n).then_some("norm"),
        };
        blocks.push(Box::new(DecoderBlock::load(w, &names, &spec)?));
    }
    // torch: embedding * tensor(hidden_size ** 0.5) in f32.
    let scale = (cfg.hidden_size as f64).sqrt() as f32;
    Ok(ModelParts {
        embeddings: token_embeddings(w, cfg, Some(scale))?,
        blocks,
        bias: None,
        pooler: None,
    })
}
