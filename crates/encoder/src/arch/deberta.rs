//! `deberta-v2` (DeBERTa-v2 and -v3, mxbai-rerank): BERT's post-norm layers
//! with disentangled attention. Every layer's score of query `i` and key `j` is
//! `(q_i . k_j + c2p + p2c) / sqrt(head_dim * scale_factor)`, where, with `d`
//! the relative position `i - j` (log-bucketed: transformers'
//! `make_log_bucket_position` with `position_buckets` and
//! `max_relative_positions`) and `r = clamp(d + span, 0, 2 span - 1)`:
//!
//! - c2p (content to position) = `q_i . pos_key[r]`,
//! - p2c (position to content) = `k_j . pos_query[r]` (transformers indexes it
//!   by `span - bucket(j - i)`, the same `r`: the buckets are odd),
//!
//! `pos_key` and `pos_query` the relative embeddings (`encoder.rel_embeddings`,
//! through `encoder.LayerNorm` when `norm_rel_ebd` says "layer_norm") projected
//! by the layer's key and query projections (`share_att_key`) or by its own
//! `pos_key_proj` / `pos_query_proj`; `scale_factor` is 1 + the number of
//! `pos_att_type`s. The projections of the relative embeddings do not depend on
//! the input: they are computed once at load, in fp32 (the 1 / sqrt scale
//! folded into the query rows and into `pos_query`). The c2p + p2c bias
//! depends on the sentence, so attention runs one sentence at a time with its
//! `[heads, seq, seq]` bias (built in the intermediate buffer, free until the
//! feed-forward).
//!
//! Embeddings: words (+ absolute positions when `position_biased_input`, +
//! token types when `type_vocab_size` > 0), LayerNorm. Names as
//! DebertaV2Model's (`encoder.layer.N.attention.self.query_proj`, ...),
//! optionally prefixed `deberta.` or `model.`. Refused: `embedding_size` other
//! than `hidden_size`, `conv_kernel_size` (DeBERTa-v2-xlarge's convolution),
//! an `attention_head_size` other than `hidden_size / num_attention_heads`.
use super::gte::{act, field, flag, kernel_err, number, uint};
use super::Architecture;
use crate::config::{HiddenAct, ModelConfig};
use crate::engine::{Block, Embeddings, LayerNorm, Linear, ModelParts, Pass, Positions, Scratch};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{attention, layer_norm, Act, AttnOpts, AttnShape, Isa};
use serde_json::Value;

/// The relative attention settings of a DeBERTa-v2 config.
#[derive(Debug, Clone, PartialEq)]
struct Relative {
    /// `relative_attention`.
    on: bool,
    c2p: bool,
    p2c: bool,
    share_att_key: bool,
    /// `position_buckets` (<= 0: no log buckets).
    buckets: i64,
    /// `max_relative_positions` (< 1: `max_position_embeddings`).
    max_relative: i64,
    norm_rel_ebd: bool,
}

impl Relative {
    fn read(raw: &Value, max_positions: usize) -> Result<Self, String> {
        let types: Vec<String> = match field(raw, &["pos_att_type"]) {
            None => Vec::new(),
            Some(Value::String(s)) => s
                .to_lowercase()
                .split('|')
                .map(|x| x.trim().to_string())
                .collect(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_lowercase))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("pos_att_type {a:?} is not a list of strings"))?,
            Some(v) => return Err(format!("pos_att_type is {v}, not a list")),
        };
        if let Some(t) = types
            .iter()
            .find(|t| !matches!(t.as_str(), "c2p" | "p2c" | ""))
        {
            return Err(format!("pos_att_type '{t}' is not supported (c2p, p2c)"));
        }
        let int = |name: &str| -> Result<i64, String> {
            match field(raw, &[name]) {
                None => Ok(-1),
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| format!("{name} is {v}, not an integer")),
            }
        };
        let mut max_relative = int("max_relative_positions")?;
        if max_relative < 1 {
            max_relative = max_positions as i64;
        }
        let norm = match field(raw, &["norm_rel_ebd"]) {
            None => false,
            Some(Value::String(s)) => s
                .to_lowercase()
                .split('|')
                .any(|x| x.trim() == "layer_norm"),
            Some(v) => return Err(format!("norm_rel_ebd is {v}, not a string")),
        };
        Ok(Self {
            on: flag(raw, &["relative_attention"], false)?,
            c2p: types.iter().any(|t| t == "c2p"),
            p2c: types.iter().any(|t| t == "p2c"),
            share_att_key: flag(raw, &["share_att_key"], false)?,
            buckets: int("position_buckets")?,
            max_relative,
            norm_rel_ebd: norm,
        })
    }

    /// `scale_factor`: 1 + the number of position attention types.
    fn scale_factor(&self) -> usize {
        1 + self.c2p as usize + self.p2c as usize
    }

    /// `pos_ebd_size`: the relative embeddings hold `2 * span` rows.
    fn span(&self) -> usize {
        if self.buckets > 0 {
            self.buckets as usize
        } else {
            self.max_relative as usize
        }
    }
}

/// transformers' `make_log_bucket_position` (via `build_relative_position`)
/// of the relative position `rel` = query position - key position, in f32 as
/// torch computes it; `rel` itself without buckets.
pub fn relative_bucket(rel: i64, bucket_size: i64, max_position: i64) -> i64 {
    if bucket_size <= 0 || max_position <= 0 {
        return rel;
    }
    let mid = bucket_size / 2;
    let abs = if rel < mid && rel > -mid {
        mid - 1
    } else {
        rel.abs()
    };
    if abs <= mid {
        return rel;
    }
    let denom = (((max_position - 1) as f64 / mid as f64) as f32).ln();
    let log_pos = ((abs as f32 / mid as f32).ln() / denom * (mid - 1) as f32).ceil() + mid as f32;
    rel.signum() * log_pos as i64
}

pub(crate) fn parse_config(model_type: String, raw: Value) -> Result<ModelConfig, String> {
    let hidden = uint(&raw, &["hidden_size"], Some(1536))?;
    let heads = uint(&raw, &["num_attention_heads"], Some(24))?;
    if uint(&raw, &["embedding_size"], Some(hidden))? != hidden {
        return Err("embedding_size other than hidden_size (embed_proj) is not supported".into());
    }
    if uint(&raw, &["conv_kernel_size"], Some(0))? > 0 {
        return Err("conv_kernel_size (the convolution layer) is not supported".into());
    }
    if heads > 0 && uint(&raw, &["attention_head_size"], Some(hidden / heads))? != hidden / heads {
        return Err(
            "attention_head_size other than hidden_size / num_attention_heads is not supported"
                .into(),
        );
    }
    let hidden_act = act(&raw, &["hidden_act"], "gelu")?;
    if hidden_act == HiddenAct::Silu {
        return Err("hidden_act 'silu' is not supported for deberta-v2".into());
    }
    let max = uint(&raw, &["max_position_embeddings"], Some(512))?;
    Relative::read(&raw, max)?;
    Ok(ModelConfig {
        architecture: Architecture::DebertaV2,
        model_type,
        vocab_size: uint(&raw, &["vocab_size"], None)?,
        hidden_size: hidden,
        num_hidden_layers: uint(&raw, &["num_hidden_layers"], Some(24))?,
        num_attention_heads: heads,
        intermediate_size: uint(&raw, &["intermediate_size"], Some(6144))?,
        hidden_act,
        max_position_embeddings: max,
        type_vocab_size: uint(&raw, &["type_vocab_size"], Some(0))?,
        layer_norm_eps: number(&raw, &["layer_norm_eps"], 1e-7)?,
        pad_token_id: uint(&raw, &["pad_token_id"], Some(0))?,
        max_tokens: max,
        raw,
    })
}

/// `rows` (rows of `d_in`) times `weight^T` (`[d_out, d_in]`) + `bias`, in f64
/// sums rounded to f32.
fn project(rows: &[f32], d_in: usize, weight: &[f32], bias: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() / d_in * bias.len());
    for r in rows.chunks_exact(d_in) {
        for (wr, &b) in weight.chunks_exact(d_in).zip(bias) {
            let dot: f64 = wr.iter().zip(r).map(|(&a, &x)| a as f64 * x as f64).sum();
            out.push((dot + b as f64) as f32);
        }
    }
    out
}

pub(crate) fn load(w: &Weights, cfg: &ModelConfig) -> Result<ModelParts> {
    let rel =
        Relative::read(&cfg.raw, cfg.max_position_embeddings).map_err(EncoderError::Unsupported)?;
    let (h, inter, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
    let scale = (1.0 / ((cfg.head_dim() * rel.scale_factor()) as f64).sqrt()) as f32;
    let span = rel.span();
    // The relative embeddings (after their norm), and each distance's row.
    let rel_rows = if rel.on {
        let table = w.vec("encoder.rel_embeddings.weight", &[2 * span, h])?;
        let mut t = table.clone();
        if rel.norm_rel_ebd {
            let ln = LayerNorm::load(w, "encoder.LayerNorm", h, eps)?;
            layer_norm(&mut t, &ln.w, &ln.b, ln.eps).map_err(kernel_err)?;
        }
        t
    } else {
        Vec::new()
    };
    let max = cfg.max_tokens as i64;
    let index: Vec<u32> = (-(max - 1)..max)
        .map(|d| {
            let b = relative_bucket(d, rel.buckets, rel.max_relative);
            (b + span as i64).clamp(0, 2 * span as i64 - 1) as u32
        })
        .collect();
    let act = match cfg.hidden_act {
        HiddenAct::Gelu => Act::GeluErf,
        HiddenAct::Relu => Act::Relu,
        other => {
            return Err(EncoderError::Unsupported(format!(
                "deberta-v2 with {other:?}"
            )))
        }
    };
    let mut blocks: Vec<Box<dyn Block>> = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        let a = format!("{p}.attention.self");
        let wb = |name: &str| -> Result<(Vec<f32>, Vec<f32>)> {
            Ok((
                w.vec(&format!("{name}.weight"), &[h, h])?,
                w.vec(&format!("{name}.bias"), &[h])?,
            ))
        };
        let (qw, qb) = wb(&format!("{a}.query_proj"))?;
        let (kw, kb) = wb(&format!("{a}.key_proj"))?;
        let (vw, vb) = wb(&format!("{a}.value_proj"))?;
        let (pos_key, pos_query) = if rel.on {
            let pos_key = if !rel.c2p {
                None
            } else if rel.share_att_key {
                Some(project(&rel_rows, h, &kw, &kb))
            } else {
                let (pw, pb) = wb(&format!("{a}.pos_key_proj"))?;
                Some(project(&rel_rows, h, &pw, &pb))
            };
            let pos_query = if !rel.p2c {
                None
            } else if rel.share_att_key {
                Some(project(&rel_rows, h, &qw, &qb))
            } else {
                let (pw, pb) = wb(&format!("{a}.pos_query_proj"))?;
                Some(project(&rel_rows, h, &pw, &pb))
            }
            .map(|mut v| {
                v.iter_mut().for_each(|x| *x *= scale);
                v
            });
            (pos_key, pos_query)
        } else {
            (None, None)
        };
        let mut weight: Vec<f32> = qw.iter().map(|x| x * scale).collect();
        weight.extend(kw);
        weight.extend(vw);
        let mut bias: Vec<f32> = qb.iter().map(|x| x * scale).collect();
        bias.extend(kb);
        bias.extend(vb);
        blocks.push(Box::new(DebertaBlock {
            qkv: Linear::new(&weight, Some(bias), h, 3 * h)?,
            attn_out: Linear::load(w, &format!("{p}.attention.output.dense"), h, h)?,
            attn_ln: LayerNorm::load(w, &format!("{p}.attention.output.LayerNorm"), h, eps)?,
            intermediate: Linear::load(w, &format!("{p}.intermediate.dense"), h, inter)?,
            output: Linear::load(w, &format!("{p}.output.dense"), inter, h)?,
            out_ln: LayerNorm::load(w, &format!("{p}.output.LayerNorm"), h, eps)?,
            act,
            pos_key,
            pos_query,
            span,
            index: index.clone(),
            max_tokens: cfg.max_tokens,
        }));
    }
    let position_biased =
        flag(&cfg.raw, &["position_biased_input"], true).map_err(EncoderError::Unsupported)?;
    let token_type = if cfg.type_vocab_size > 0 {
        Some(w.vec(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab_size, h],
        )?)
    } else {
        None
    };
    let (position, positions) = if position_biased {
        (
            w.vec(
                "embeddings.position_embeddings.weight",
                &[cfg.max_position_embeddings, h],
            )?,
            Positions::FromZero,
        )
    } else {
        (Vec::new(), Positions::None)
    };
    let embeddings = Embeddings {
        word: w.vec("embeddings.word_embeddings.weight", &[cfg.vocab_size, h])?,
        position,
        positions,
        token_type,
        ln: Some(LayerNorm::load(w, "embeddings.LayerNorm", h, eps)?),
    };
    Ok(ModelParts {
        embeddings,
        blocks,
        bias: None,
        pooler: None,
    })
}

/// One DeBERTa-v2 layer (see the module doc).
struct DebertaBlock {
    /// `[q | k | v]`, q scaled by 1 / sqrt(head_dim * scale_factor).
    qkv: Linear,
    attn_out: Linear,
    attn_ln: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_ln: LayerNorm,
    act: Act,
    /// `[2 span, hidden]`: the relative embeddings through the key projection (c2p).
    pos_key: Option<Vec<f32>>,
    /// `[2 span, hidden]`: through the query projection, scaled (p2c).
    pos_query: Option<Vec<f32>>,
    span: usize,
    /// The row `r` of the distance `d` at `d + max_tokens - 1`.
    index: Vec<u32>,
    max_tokens: usize,
}

impl DebertaBlock {
    /// `bias` = the `[heads, seq, seq]` c2p + p2c scores of the sentence
    /// whose `[q | k | v]` rows are `qkv`; `table` is scratch.
    fn fill_bias(&self, qkv: &[f32], shape: AttnShape, table: &mut Vec<f32>, bias: &mut Vec<f32>) {
        let AttnShape {
            seq,
            heads,
            head_dim: dh,
            ..
        } = shape;
        let h = heads * dh;
        let rows = 2 * self.span;
        bias.clear();
        bias.resize(heads * seq * seq, 0.0);
        // table: [seq, 2 span] of c2p, then [seq, 2 span] of p2c, one head at a time.
        table.clear();
        table.resize(2 * seq * rows, 0.0);
        let off = self.max_tokens - 1;
        for head in 0..heads {
            for (part, (pos, src)) in [(&self.pos_key, 0), (&self.pos_query, h)]
                .into_iter()
                .enumerate()
            {
                let Some(pos) = pos else { continue };
                let t = &mut table[part * seq * rows..(part + 1) * seq * rows];
                for i in 0..seq {
                    let x = &qkv[i * 3 * h + src + head * dh..][..dh];
                    for (r, out) in t[i * rows..(i + 1) * rows].iter_mut().enumerate() {
                        let y = &pos[r * h + head * dh..][..dh];
                        *out = x.iter().zip(y).map(|(a, b)| a * b).sum();
                    }
                }
            }
            let b = &mut bias[head * seq * seq..(head + 1) * seq * seq];
            for i in 0..seq {
                for j in 0..seq {
                    let r = self.index[i + off - j] as usize;
                    let mut s = 0.0;
                    if self.pos_key.is_some() {
                        s += table[i * rows + r];
                    }
                    if self.pos_query.is_some() {
                        s += table[seq * rows + j * rows + r];
                    }
                    b[i * seq + j] = s;
                }
            }
        }
    }
}

impl Block for DebertaBlock {
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
        let (seq, h) = (shape.seq, shape.hidden());
        self.qkv.forward_act_host(x, Act::None, qkv, qin)?;
        ctx.resize(x.len(), 0.0);
        let one = AttnShape { batch: 1, ..shape };
        let relative = self.pos_key.is_some() || self.pos_query.is_some();
        for (r, len) in pass.lens.iter().enumerate() {
            let sent = &qkv[r * seq * 3 * h..(r + 1) * seq * 3 * h];
            let opts = if relative {
                self.fill_bias(sent, shape, h1, inter);
                AttnOpts {
                    bias: Some(inter.as_slice()),
                    ..AttnOpts::default()
                }
            } else {
                AttnOpts::default()
            };
            let c = &mut ctx[r * seq * h..(r + 1) * seq * h];
            attention(sent, std::slice::from_ref(len), one, opts, c, scores).map_err(kernel_err)?;
        }
        self.attn_out
            .forward_residual_ln_host(ctx, x, &self.attn_ln, h1, qin, None)?;
        self.intermediate
            .forward_act_host(h1, self.act, inter, qin)?;
        self.output
            .forward_residual_ln_host(inter, h1, &self.out_ln, out, qin, None)
    }

    fn quantize(&mut self, isa: Isa) -> Result<()> {
        for lin in [
            &mut self.qkv,
            &mut self.attn_out,
            &mut self.intermediate,
            &mut self.output,
        ] {
            lin.quantize(isa)?;
        }
        Ok(())
    }
}
