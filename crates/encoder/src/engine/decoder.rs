//! The Llama-style layer shared by the decoder-like families (Qwen2, Qwen3,
//! Gemma 3, EuroBERT): RMSNorm before attention and feed-forward (Gemma 3 also
//! after each), query/key/value projections with grouped-query attention
//! (fewer key/value heads than query heads, each shared by a group of query
//! heads), optional per-head RMSNorm of queries and keys (Qwen3, Gemma 3),
//! rotary positions, attention causal or bidirectional, global or within a
//! sliding window, and a gated feed-forward `down(act(gate(x)) * up(x))`.
//!
//! Hidden states as transformers numbers them (`output_hidden_states=True`):
//! 0 is the (scaled, for Gemma) token embedding, `i` the output of layer `i`,
//! and the last one the last layer's output *after the final norm*: in
//! transformers 5 the last entry of `hidden_states` is `last_hidden_state`
//! (`tie_last_hidden_states`), so the last layer's block applies the final norm.
//!
//! The pass runs in the workspace's scratch buffers (no allocation once they
//! have grown): the fused projection, the key/value heads repeated into
//! attention's `[q | k | v]` rows (only with grouped-query attention), the
//! shared attention kernel, and the gated activation.
use super::{Block, Linear, Pass, Scratch};
use crate::error::{EncoderError, Result};
use crate::weights::Weights;
use bertflow_kernels::{
    attention, glu, rms_norm, rope_qk, AttnOpts, AttnShape, Glu, Isa, RopeTable, ShapeError,
};
use std::sync::Arc;

fn kernel_err(e: ShapeError) -> EncoderError {
    EncoderError::Unsupported(format!("forward pass: {e}"))
}

/// RMSNorm over rows of `w.len()` values (`x / rms(x) * w`).
pub(crate) struct RmsNorm {
    pub(crate) w: Vec<f32>,
    pub(crate) eps: f32,
}

impl RmsNorm {
    /// `name.weight` of `n` values; with `plus_one`, Gemma's `(1 + w)` form.
    pub(crate) fn load(
        w: &Weights,
        name: &str,
        n: usize,
        eps: f64,
        plus_one: bool,
    ) -> Result<Self> {
        let mut v = w.vec(&format!("{name}.weight"), &[n])?;
        if plus_one {
            v.iter_mut().for_each(|x| *x += 1.0);
        }
        Ok(Self {
            w: v,
            eps: eps as f32,
        })
    }

    /// The same norm with its output multiplied by `s` (a score scale folded
    /// into a query norm).
    pub(crate) fn scaled(mut self, s: f32) -> Self {
        self.w.iter_mut().for_each(|x| *x *= s);
        self
    }

    pub(crate) fn apply(&self, x: &mut [f32]) -> Result<()> {
        rms_norm(x, &self.w, self.eps).map_err(kernel_err)
    }
}

/// Attention sizes and kind of one decoder layer.
#[derive(Clone, Debug)]
pub(crate) struct DecoderAttn {
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    /// Query `i` sees the keys `j <= i` only.
    pub(crate) causal: bool,
    /// Symmetric window as [`AttnOpts::window`] (keys within `window / 2`).
    pub(crate) window: Option<usize>,
}

/// The names of one layer's tensors (without `.weight`/`.bias`), the norms
/// that the family has.
pub(crate) struct DecoderNames {
    pub(crate) q: String,
    pub(crate) k: String,
    pub(crate) v: String,
    pub(crate) o: String,
    pub(crate) q_norm: Option<String>,
    pub(crate) k_norm: Option<String>,
    pub(crate) input_norm: String,
    /// Gemma 3's norm of the attention output before the residual.
    pub(crate) post_attn_norm: Option<String>,
    pub(crate) pre_mlp_norm: String,
    /// Gemma 3's norm of the feed-forward output before the residual.
    pub(crate) post_mlp_norm: Option<String>,
    pub(crate) gate: String,
    pub(crate) up: String,
    pub(crate) down: String,
}

impl DecoderNames {
    /// Llama's names for layer `i` under `layers.` (Qwen2, Qwen3, EuroBERT;
    /// Gemma 3 adds its post norms and calls the pre-MLP norm differently).
    pub(crate) fn llama(i: usize, qk_norm: bool) -> Self {
        let p = format!("layers.{i}");
        Self {
            q: format!("{p}.self_attn.q_proj"),
            k: format!("{p}.self_attn.k_proj"),
            v: format!("{p}.self_attn.v_proj"),
            o: format!("{p}.self_attn.o_proj"),
            q_norm: qk_norm.then(|| format!("{p}.self_attn.q_norm")),
            k_norm: qk_norm.then(|| format!("{p}.self_attn.k_norm")),
            input_norm: format!("{p}.input_layernorm"),
            post_attn_norm: None,
            pre_mlp_norm: format!("{p}.post_attention_layernorm"),
            post_mlp_norm: None,
            gate: format!("{p}.mlp.gate_proj"),
            up: format!("{p}.mlp.up_proj"),
            down: format!("{p}.mlp.down_proj"),
        }
    }
}

/// What a family's config says about a layer's parameters.
pub(crate) struct DecoderSpec<'a> {
    pub(crate) hidden: usize,
    pub(crate) intermediate: usize,
    pub(crate) eps: f64,
    /// Gemma's `(1 + w)` norms.
    pub(crate) norm_plus_one: bool,
    /// Biases of q, k, v; of o; of the feed-forward projections.
    pub(crate) qkv_bias: bool,
    pub(crate) o_bias: bool,
    pub(crate) mlp_bias: bool,
    /// The score scale (`head_dim^-0.5`, Gemma's `query_pre_attn_scalar^-0.5`).
    pub(crate) scale: f64,
    pub(crate) act: Glu,
    pub(crate) attn: DecoderAttn,
    pub(crate) rope: Arc<RopeTable>,
    /// `norm` (the final norm) for the last layer.
    pub(crate) final_norm: Option<&'a str>,
}

/// One decoder layer (see the module doc).
pub(crate) struct DecoderBlock {
    input_norm: RmsNorm,
    /// `[hidden] -> [(heads + 2 kv_heads) * head_dim]`: q, k, v (the score scale
    /// in q's rows unless there is a query norm, which then carries it).
    qkv: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    o: Linear,
    post_attn_norm: Option<RmsNorm>,
    pre_mlp_norm: RmsNorm,
    /// `[hidden] -> [2 * intermediate]`: gate, then up.
    gate_up: Linear,
    down: Linear,
    post_mlp_norm: Option<RmsNorm>,
    act: Glu,
    attn: DecoderAttn,
    rope: Arc<RopeTable>,
    final_norm: Option<RmsNorm>,
}

impl DecoderBlock {
    pub(crate) fn load(w: &Weights, n: &DecoderNames, s: &DecoderSpec) -> Result<Self> {
        let a = &s.attn;
        let (h, dh) = (s.hidden, a.head_dim);
        let (qd, kd) = (a.heads * dh, a.kv_heads * dh);
        let norm = |name: &str, len: usize| RmsNorm::load(w, name, len, s.eps, s.norm_plus_one);
        let opt_norm =
            |name: &Option<String>, len: usize| name.as_deref().map(|n| norm(n, len)).transpose();
        let q_norm = opt_norm(&n.q_norm, dh)?.map(|q| q.scaled(s.scale as f32));
        let q_scale = if q_norm.is_some() {
            1.0
        } else {
            s.scale as f32
        };
        let mut weight = Vec::with_capacity((qd + 2 * kd) * h);
        let mut bias = Vec::with_capacity(qd + 2 * kd);
        for (name, rows, scale) in [(&n.q, qd, q_scale), (&n.k, kd, 1.0), (&n.v, kd, 1.0)] {
            weight.extend(
                w.vec(&format!("{name}.weight"), &[rows, h])?
                    .iter()
                    .map(|x| x * scale),
            );
            if s.qkv_bias {
                bias.extend(
                    w.vec(&format!("{name}.bias"), &[rows])?
                        .iter()
                        .map(|x| x * scale),
                );
            }
        }
        let qkv = Linear::new(&weight, s.qkv_bias.then_some(bias), h, qd + 2 * kd)?;
        let linear = |name: &str, d_in: usize, d_out: usize, has_bias: bool| -> Result<Linear> {
            let wt = w.vec(&format!("{name}.weight"), &[d_out, d_in])?;
            let b = if has_bias {
                Some(w.vec(&format!("{name}.bias"), &[d_out])?)
            } else {
                None
            };
            Linear::new(&wt, b, d_in, d_out)
        };
        let i = s.intermediate;
        let mut gu = w.vec(&format!("{}.weight", n.gate), &[i, h])?;
        gu.extend(w.vec(&format!("{}.weight", n.up), &[i, h])?);
        let gu_bias = if s.mlp_bias {
            let mut b = w.vec(&format!("{}.bias", n.gate), &[i])?;
            b.extend(w.vec(&format!("{}.bias", n.up), &[i])?);
            Some(b)
        } else {
            None
        };
        Ok(Self {
            input_norm: norm(&n.input_norm, h)?,
            qkv,
            q_norm,
            k_norm: opt_norm(&n.k_norm, dh)?,
            o: linear(&n.o, qd, h, s.o_bias)?,
            post_attn_norm: opt_norm(&n.post_attn_norm, h)?,
            pre_mlp_norm: norm(&n.pre_mlp_norm, h)?,
            gate_up: Linear::new(&gu, gu_bias, h, 2 * i)?,
            down: linear(&n.down, i, h, s.mlp_bias)?,
            post_mlp_norm: opt_norm(&n.post_mlp_norm, h)?,
            act: s.act,
            attn: a.clone(),
            rope: s.rope.clone(),
            final_norm: s.final_norm.map(|f| norm(f, h)).transpose()?,
        })
    }

    /// The query and key norms, per head, on rows of `width` values holding
    /// `heads` query blocks then `kv_heads` key blocks of `head_dim`.
    fn qk_norms(&self, rows: &mut [f32], width: usize) -> Result<()> {
        let a = &self.attn;
        let (qd, kd) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
        for row in rows.chunks_exact_mut(width) {
            if let Some(n) = &self.q_norm {
                n.apply(&mut row[..qd])?;
            }
            if let Some(n) = &self.k_norm {
                n.apply(&mut row[qd..qd + kd])?;
            }
        }
        Ok(())
    }
}

/// `src` rows of `[q | k | v]` with `kv_heads` key and value heads into `dst`
/// rows of `[q | k | v]` with `heads` of each: query head `h` reads key and
/// value head `h / (heads / kv_heads)` (transformers' `repeat_kv`).
fn repeat_kv(src: &[f32], a: &DecoderAttn, dst: &mut Vec<f32>) {
    let dh = a.head_dim;
    let (qd, kd) = (a.heads * dh, a.kv_heads * dh);
    let (sw, dw) = (qd + 2 * kd, 3 * qd);
    let group = a.heads / a.kv_heads;
    dst.resize(src.len() / sw * dw, 0.0);
    for (s, d) in src.chunks_exact(sw).zip(dst.chunks_exact_mut(dw)) {
        d[..qd].copy_from_slice(&s[..qd]);
        for head in 0..a.heads {
            let kv = head / group;
            let (k, v) = (qd + kv * dh, qd + kd + kv * dh);
            d[qd + head * dh..qd + (head + 1) * dh].copy_from_slice(&s[k..k + dh]);
            d[2 * qd + head * dh..2 * qd + (head + 1) * dh].copy_from_slice(&s[v..v + dh]);
        }
    }
}

/// `out += x` element-wise.
fn add(out: &mut [f32], x: &[f32]) {
    out.iter_mut().zip(x).for_each(|(o, &x)| *o += x);
}

impl Block for DecoderBlock {
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
        let a = &self.attn;
        let (batch, seq) = (pass.shape.batch, pass.shape.seq);
        let width = (a.heads + 2 * a.kv_heads) * a.head_dim;
        // h1 = input_norm(x); the projection (into inter first with GQA).
        h1.resize(x.len(), 0.0);
        h1.copy_from_slice(x);
        self.input_norm.apply(h1)?;
        if a.kv_heads == a.heads {
            self.qkv
                .forward_act_host(h1, bertflow_kernels::Act::None, qkv, qin)?;
            self.qk_norms(qkv, width)?;
        } else {
            self.qkv
                .forward_act_host(h1, bertflow_kernels::Act::None, inter, qin)?;
            self.qk_norms(inter, width)?;
            repeat_kv(inter, a, qkv);
        }
        rope_qk(qkv, batch, seq, a.heads, &self.rope).map_err(kernel_err)?;
        let shape = AttnShape {
            batch,
            seq,
            heads: a.heads,
            head_dim: a.head_dim,
        };
        ctx.resize(batch * seq * a.heads * a.head_dim, 0.0);
        let opts = AttnOpts {
            bias: None,
            window: a.window,
            causal: a.causal,
        };
        attention(qkv, pass.lens, shape, opts, ctx, scores).map_err(kernel_err)?;
        // h1 = x + [post_attn_norm](o ctx)
        match &self.post_attn_norm {
            Some(n) => {
                self.o
                    .forward_act_host(ctx, bertflow_kernels::Act::None, h1, qin)?;
                n.apply(h1)?;
                add(h1, x);
            }
            None => self.o.forward_residual_host(ctx, x, h1, qin)?,
        }
        // ctx = pre_mlp_norm(h1); inter = [gate | up] ctx; qkv = act(gate) * up
        ctx.resize(h1.len(), 0.0);
        ctx.copy_from_slice(h1);
        self.pre_mlp_norm.apply(ctx)?;
        self.gate_up
            .forward_act_host(ctx, bertflow_kernels::Act::None, inter, qin)?;
        let n = self.down.d_in;
        qkv.resize(inter.len() / 2, 0.0);
        glu(inter, n, self.act, qkv).map_err(kernel_err)?;
        // out = h1 + [post_mlp_norm](down qkv), then the final norm on the last layer
        match &self.post_mlp_norm {
            Some(norm) => {
                self.down
                    .forward_act_host(qkv, bertflow_kernels::Act::None, out, qin)?;
                norm.apply(out)?;
                add(out, h1);
            }
            None => self.down.forward_residual_host(qkv, h1, out, qin)?,
        }
        if let Some(norm) = &self.final_norm {
            norm.apply(out)?;
        }
        Ok(())
    }

    fn quantize(&mut self, isa: Isa) -> Result<()> {
        for lin in [
            &mut self.qkv,
            &mut self.o,
            &mut self.gate_up,
            &mut self.down,
        ] {
            lin.quantize(isa)?;
        }
        Ok(())
    }
}
