//! The CPU forward pass (fp32 and int8) without per-operation allocation.
//!
//! All activations live in a [`Workspace`] of buffers sized per batch and reused
//! across layers and batches (keep one per worker thread). Linear products run
//! bertflow-kernels' layers on one thread, bias, residual and activation in
//! their output stage: fp32 by [`bertflow_kernels::PackedLinear`] (weights packed
//! at load), int8 by [`QuantLinear`] on the layer input quantised once into the
//! workspace. Everything else is shared by both precisions: LayerNorm after the
//! residual, and attention read in place from the fused QKV product (with the
//! architecture's score bias), its context written straight into the token rows.
use super::{Embeddings, LayerNorm, Linear, Model, Positions, PostNormBlock, Product};
use crate::config::HiddenAct;
use crate::error::{EncoderError, Result};
use bertflow_kernels::int8::RowLanes;
use bertflow_kernels::{
    attention, layer_norm, Act, AttnOpts, AttnShape, Isa, PackedLinear, QuantInput, QuantLinear,
    ShapeError,
};

/// Scratch buffers of the blocks, reused by every layer and batch.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) qkv: Vec<f32>,
    pub(crate) ctx: Vec<f32>,
    pub(crate) h1: Vec<f32>,
    pub(crate) inter: Vec<f32>,
    pub(crate) scores: Vec<f32>,
    /// The input of the current int8 product, quantised.
    pub(crate) qin: QuantInput,
    /// The row ranges of the int8 intermediate product's output, gathered as it
    /// is written, for quantising it as the output product's input.
    pub(crate) lanes: RowLanes,
}

/// Buffers of one forward pass; the hidden states of the last pass stay readable
/// until the next one.
#[derive(Default)]
pub struct Workspace {
    /// Hidden states 0..=upto, each `rows * hidden` values (token rows).
    states: Vec<Vec<f32>>,
    n_states: usize,
    /// The architecture's attention bias for this batch's length.
    bias: Vec<f32>,
    scratch: Scratch,
}

impl Workspace {
    pub fn new() -> Self {
        Self::default()
    }

    /// The hidden states of the last forward pass (0 = embedding output), each
    /// `batch * seq` token rows of `hidden` values.
    pub fn states(&self) -> &[Vec<f32>] {
        &self.states[..self.n_states]
    }

    /// Make room for `n` states of `len` values each (no allocation once grown).
    fn prepare_states(&mut self, n: usize, len: usize) {
        if self.states.len() < n {
            self.states.resize_with(n, Vec::new);
        }
        for s in &mut self.states[..n] {
            s.resize(len, 0.0);
        }
        self.n_states = n;
    }
}

/// What every layer of one forward pass shares.
pub(crate) struct Pass<'a> {
    pub(crate) lens: &'a [usize],
    pub(crate) shape: AttnShape,
    /// The `[heads, seq, seq]` score bias, where the architecture has one.
    pub(crate) bias: Option<&'a [f32]>,
}

pub(crate) fn kernel_err(e: ShapeError) -> EncoderError {
    EncoderError::Unsupported(format!("forward pass: {e}"))
}

impl Linear {
    /// `out` = act(`x` W^T + b [+ residual]) in fp32 (one pass: bias, residual
    /// and activation in the packed product's output stage).
    fn fp32_host(
        fp: &PackedLinear,
        x: &[f32],
        residual: Option<&[f32]>,
        act: Act,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let (k, n) = (fp.in_dim(), fp.out_dim());
        if !x.len().is_multiple_of(k) {
            return Err(EncoderError::Unsupported(format!(
                "forward pass: {} values are not rows of {k}",
                x.len()
            )));
        }
        let m = x.len() / k;
        out.resize(m * n, 0.0);
        fp.forward(x, m, residual, act, out)
            .map_err(|e| EncoderError::Unsupported(format!("forward pass: {e}")))
    }

    /// `out` = act(`x` W^T + b [+ residual]) in this layer's precision (int8:
    /// `x` quantised into `qin`).
    fn product_host(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        act: Act,
        qin: &mut QuantInput,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        match &self.product {
            Product::Fp32(fp) => Self::fp32_host(fp, x, residual, act, out),
            Product::Int8(lin, isa) => {
                Self::int8_host(lin, *isa, x, residual, act, qin, out, Lanes::None)
            }
        }
    }

    /// `out` = act(`x` W^T + b [+ residual]) by the int8 layer `lin`, `x` quantised
    /// into `qin` (its row ranges from `lanes` if they hold them), the output's
    /// row ranges gathered into `lanes` if asked.
    #[allow(clippy::too_many_arguments)]
    fn int8_host(
        lin: &QuantLinear,
        isa: Isa,
        x: &[f32],
        residual: Option<&[f32]>,
        act: Act,
        qin: &mut QuantInput,
        out: &mut Vec<f32>,
        lanes: Lanes,
    ) -> Result<()> {
        let (k, n) = (lin.in_dim(), lin.out_dim());
        let m = x.len() / k;
        match &lanes {
            Lanes::Of(l) => qin.quantize_lanes(isa, x, m, k, l)?,
            _ => qin.quantize(isa, x, m, k)?,
        }
        out.resize(m * n, 0.0);
        // GELU by the polynomial: this output is quantised to 8 bits as the next
        // product's input, far coarser than the polynomial's 6e-5.
        let act = match act {
            Act::GeluErf => Act::GeluPoly,
            a => a,
        };
        match lanes {
            Lanes::Gather(l) => lin.forward_quantized_lanes(isa, qin, residual, act, out, l)?,
            _ => lin.forward_quantized(isa, qin, residual, act, out)?,
        }
        Ok(())
    }

    /// `out` = act(`x` W^T + b), on the host; an int8 layer also gathers the
    /// output's row ranges into `lanes` and says so (true), for the next int8
    /// product's quantisation of `out` ([`Lanes::Of`]).
    fn forward_act_gather_host(
        &self,
        x: &[f32],
        act: Act,
        out: &mut Vec<f32>,
        qin: &mut QuantInput,
        lanes: &mut RowLanes,
    ) -> Result<bool> {
        match &self.product {
            Product::Fp32(fp) => Self::fp32_host(fp, x, None, act, out).map(|()| false),
            Product::Int8(lin, isa) => {
                Self::int8_host(lin, *isa, x, None, act, qin, out, Lanes::Gather(lanes))
                    .map(|()| true)
            }
        }
    }

    /// `out` = act(`x` W^T + b), on the host.
    pub(crate) fn forward_act_host(
        &self,
        x: &[f32],
        act: Act,
        out: &mut Vec<f32>,
        qin: &mut QuantInput,
    ) -> Result<()> {
        self.product_host(x, None, act, qin, out)
    }

    /// `out` = `x` W^T + b + `residual`, on the host.
    pub(crate) fn forward_residual_host(
        &self,
        x: &[f32],
        residual: &[f32],
        out: &mut Vec<f32>,
        qin: &mut QuantInput,
    ) -> Result<()> {
        self.product_host(x, Some(residual), Act::None, qin, out)
    }

    /// `out` = LayerNorm(`x` W^T + b + `residual`), on the host (an int8 layer
    /// quantises `x` with the row ranges in `lanes`, when given).
    pub(crate) fn forward_residual_ln_host(
        &self,
        x: &[f32],
        residual: &[f32],
        ln: &LayerNorm,
        out: &mut Vec<f32>,
        qin: &mut QuantInput,
        lanes: Option<&RowLanes>,
    ) -> Result<()> {
        match (&self.product, lanes) {
            (Product::Int8(lin, isa), Some(l)) => {
                let lanes = Lanes::Of(l);
                Self::int8_host(lin, *isa, x, Some(residual), Act::None, qin, out, lanes)?
            }
            _ => self.forward_residual_host(x, residual, out, qin)?,
        }
        layer_norm(out, &ln.w, &ln.b, ln.eps).map_err(kernel_err)
    }
}

/// What an int8 product does with row ranges ([`RowLanes`]).
enum Lanes<'a> {
    None,
    /// Quantise the input with these (gathered when it was written).
    Of(&'a RowLanes),
    /// Gather the output's into these.
    Gather(&'a mut RowLanes),
}

/// `out` = tanh(`x` W^T + b) in fp32 (the pooler).
pub(super) fn linear_tanh(lin: &Linear, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
    if !x.len().is_multiple_of(lin.d_in) {
        return Err(EncoderError::Unsupported(format!(
            "pooler: {} values are not rows of {}",
            x.len(),
            lin.d_in
        )));
    }
    // The pooler stays fp32 (only the blocks are quantised): the empty
    // QuantInput is never filled.
    lin.product_host(x, None, Act::None, &mut QuantInput::new(), out)?;
    out.iter_mut().for_each(|v| *v = v.tanh());
    Ok(())
}

/// tanh-approximated GELU (transformers' "gelu_new").
fn gelu_tanh(v: &mut [f32]) {
    const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
    for x in v {
        *x = 0.5 * *x * (1.0 + f32::tanh(SQRT_TWO_OVER_PI * *x * (1.0 + 0.044715 * *x * *x)));
    }
}

impl super::Block for PostNormBlock {
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
            lanes,
        } = scratch;
        self.qkv.forward_act_host(x, Act::None, qkv, qin)?;
        ctx.resize(x.len(), 0.0);
        let opts = AttnOpts {
            bias: pass.bias,
            window: None,
            causal: false,
        };
        attention(qkv, pass.lens, pass.shape, opts, ctx, scores).map_err(kernel_err)?;
        self.attn_out
            .forward_residual_ln_host(ctx, x, &self.attn_ln, h1, qin, None)?;
        let inter_act = match self.act {
            HiddenAct::Gelu => Act::GeluErf,
            HiddenAct::Relu => Act::Relu,
            HiddenAct::GeluApprox | HiddenAct::Silu => Act::None,
        };
        // The intermediate output's row ranges are gathered as it is written (int8),
        // so that the output product quantises it without a scan; not when an
        // activation is applied after.
        let gathered = if matches!(self.act, HiddenAct::GeluApprox | HiddenAct::Silu) {
            self.intermediate
                .forward_act_host(h1, inter_act, inter, qin)?;
            if self.act == HiddenAct::Silu {
                inter.iter_mut().for_each(|x| *x /= 1.0 + (-*x).exp());
            } else {
                gelu_tanh(inter);
            }
            false
        } else {
            self.intermediate
                .forward_act_gather_host(h1, inter_act, inter, qin, lanes)?
        };
        let lanes = gathered.then_some(&*lanes);
        self.output
            .forward_residual_ln_host(inter, h1, &self.out_ln, out, qin, lanes)
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

impl Embeddings {
    /// Token rows of the embedding output into `out` (`ids`: rows of `t`;
    /// `types`: the token type of each id, all 0 when `None`).
    fn forward_host(
        &self,
        ids: &[u32],
        types: Option<&[u32]>,
        t: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let h = out.len() / ids.len().max(1);
        let n_pos = self.position.len() / h.max(1);
        for (s, (sent, rows)) in ids
            .chunks_exact(t)
            .zip(out.chunks_exact_mut(t * h))
            .enumerate()
        {
            let mut seen = 0;
            for (i, (&id, row)) in sent.iter().zip(rows.chunks_exact_mut(h)).enumerate() {
                let id = id as usize;
                row.copy_from_slice(&self.word[id * h..(id + 1) * h]);
                let p = match self.positions {
                    Positions::None => None,
                    Positions::FromZero => Some(i),
                    Positions::AfterPadding { padding_idx } if id == padding_idx => {
                        Some(padding_idx)
                    }
                    Positions::AfterPadding { padding_idx } => {
                        seen += 1;
                        Some(padding_idx + seen)
                    }
                };
                if let Some(p) = p {
                    if p >= n_pos {
                        return Err(EncoderError::Unsupported(format!(
                            "forward pass: position {p} outside the table of {n_pos}"
                        )));
                    }
                    // (word + position) + token type: BERT's vectors as before.
                    let pe = &self.position[p * h..(p + 1) * h];
                    row.iter_mut().zip(pe).for_each(|(o, &p)| *o += p);
                }
                if let Some(tt) = &self.token_type {
                    let ty = types.map_or(0, |ty| ty[s * t + i] as usize);
                    let tt = tt.get(ty * h..(ty + 1) * h).ok_or_else(|| {
                        EncoderError::Unsupported(format!(
                            "forward pass: token type {ty} outside the table"
                        ))
                    })?;
                    row.iter_mut().zip(tt).for_each(|(o, &c)| *o += c);
                }
            }
        }
        match &self.ln {
            Some(ln) => layer_norm(out, &ln.w, &ln.b, ln.eps).map_err(kernel_err),
            None => Ok(()),
        }
    }
}

/// The forward pass of [`Model::forward_into`] (the batch is already checked).
pub(super) fn forward(
    model: &Model,
    ids: &[u32],
    types: Option<&[u32]>,
    lens: &[usize],
    t: usize,
    upto: usize,
    ws: &mut Workspace,
) -> Result<()> {
    let cfg = &model.config;
    let h = cfg.hidden_size;
    ws.prepare_states(upto + 1, lens.len() * t * h);
    let Workspace {
        states,
        bias,
        scratch,
        ..
    } = ws;
    model
        .embeddings
        .forward_host(ids, types, t, &mut states[0])?;
    if let Some(b) = &model.bias {
        b.fill(t, bias);
    }
    let pass = Pass {
        lens,
        shape: AttnShape {
            batch: lens.len(),
            seq: t,
            heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        },
        bias: model.bias.as_ref().map(|_| bias.as_slice()),
    };
    for (l, block) in model.blocks.iter().take(upto).enumerate() {
        let (done, rest) = states.split_at_mut(l + 1);
        block.forward_host(&done[l], &mut rest[0], &pass, scratch)?;
    }
    Ok(())
}
