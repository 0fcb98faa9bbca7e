//! The CPU forward pass (fp32 and int8) without per-operation allocation.
//!
//! All activations live in a [`Workspace`] of buffers sized per batch and reused
//! across layers and batches (keep one per worker thread). fp32 matrix products
//! call `gemm` directly on the host slices of the weights (the same call, strides
//! and parallelism that candle's matmul makes, so the products are the same bits);
//! int8 products run bertflow-kernels' [`QuantLinear`] on the layer input quantised
//! once into the workspace, with bias, residual and activation in its output stage.
//! Everything else is shared by both precisions: bias epilogues, bias + residual +
//! LayerNorm in one pass, and attention read in place from the fused QKV product,
//! its context written straight into the token rows.
use super::LayerNorm;
use super::{BertModel, Layer, Linear};
use crate::config::HiddenAct;
use crate::error::{EncoderError, Result};
use bertflow_kernels::{
    attention, bias_act, bias_residual_layer_norm, layer_norm, Act, AttnOpts, AttnShape,
    QuantInput, QuantLinear, ShapeError,
};
use candle_core::{CpuStorage, Storage, Tensor};
use gemm::Parallelism;

/// Buffers of one forward pass; the hidden states of the last pass stay readable
/// until the next one.
#[derive(Default)]
pub struct Workspace {
    /// Hidden states 0..=upto, each `rows * hidden` values (token rows).
    states: Vec<Vec<f32>>,
    n_states: usize,
    qkv: Vec<f32>,
    ctx: Vec<f32>,
    h1: Vec<f32>,
    inter: Vec<f32>,
    scores: Vec<f32>,
    /// The input of the current int8 product, quantised.
    qin: QuantInput,
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

    /// Copy candle's hidden states (the candle forward pass) in.
    pub(super) fn set_states(&mut self, states: &[Tensor]) -> Result<()> {
        self.prepare_states(states.len(), 0);
        for (dst, s) in self.states.iter_mut().zip(states) {
            dst.clear();
            dst.extend(s.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(())
    }
}

fn kernel_err(e: ShapeError) -> EncoderError {
    EncoderError::Unsupported(format!("forward pass: {e}"))
}

/// Run `f` on the host values of the contiguous f32 CPU tensor `t`.
fn with_host<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(v)), Some((start, end))) =
        (&*storage, layout.contiguous_offsets())
    else {
        return Err(EncoderError::Unsupported(
            "forward pass: expected contiguous f32 weights on the CPU".into(),
        ));
    };
    f(&v[start..end])
}

/// gemm's threading: candle's (`RAYON_NUM_THREADS`, else the cores).
fn parallelism() -> Parallelism {
    match candle_core::utils::get_num_threads() {
        0 | 1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

/// `out` [m, n] = `x` [m, k] · `w_t` [k, n], all row-major.
fn matmul(
    x: &[f32],
    k: usize,
    w_t: &[f32],
    n: usize,
    out: &mut [f32],
    par: Parallelism,
) -> Result<()> {
    let m = x.len() / k.max(1);
    if k == 0 || x.len() != m * k || w_t.len() != k * n || out.len() != m * n {
        return Err(EncoderError::Unsupported(format!(
            "forward pass: matmul of {} values by [{k}, {n}] into {}",
            x.len(),
            out.len()
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // SAFETY: `x` holds m rows of k values (row stride k, column stride 1), `w_t`
    // k rows of n, `out` m rows of n (all lengths checked above), so every index
    // gemm forms is in bounds; `out` is a unique borrow, so it aliases neither
    // input. read_dst is false: `out` is only written (dst = 0 * dst + 1 * x w_t,
    // the arguments candle's matmul passes).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w_t.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

impl Linear {
    /// `out` = `x` W^T (bias not added), on the host.
    fn matmul_host(&self, x: &[f32], out: &mut Vec<f32>, par: Parallelism) -> Result<()> {
        let (k, n) = self.w_t.dims2()?;
        out.resize(x.len() / k.max(1) * n, 0.0);
        with_host(&self.w_t, |w| matmul(x, k, w, n, out, par))
    }

    /// `out` = act(`x` W^T + b [+ residual]) by the int8 layer `lin`, `x` quantised
    /// into `qin`.
    fn int8_host(
        lin: &QuantLinear,
        isa: bertflow_kernels::Isa,
        x: &[f32],
        residual: Option<&[f32]>,
        act: Act,
        qin: &mut QuantInput,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let (k, n) = (lin.in_dim(), lin.out_dim());
        let m = x.len() / k;
        qin.quantize(isa, x, m, k)?;
        out.resize(m * n, 0.0);
        Ok(lin.forward_quantized(isa, qin, residual, act, out)?)
    }

    /// `out` = act(`x` W^T + b), on the host.
    fn forward_act_host(
        &self,
        x: &[f32],
        act: Act,
        out: &mut Vec<f32>,
        par: Parallelism,
        qin: &mut QuantInput,
    ) -> Result<()> {
        if let Some((lin, isa)) = &self.q {
            return Self::int8_host(lin, *isa, x, None, act, qin, out);
        }
        self.matmul_host(x, out, par)?;
        bias_act(out, &self.b_host, act).map_err(kernel_err)
    }

    /// `out` = LayerNorm(`x` W^T + b + `residual`), on the host.
    fn forward_residual_ln_host(
        &self,
        x: &[f32],
        residual: &[f32],
        ln: &LayerNorm,
        out: &mut Vec<f32>,
        par: Parallelism,
        qin: &mut QuantInput,
    ) -> Result<()> {
        if let Some((lin, isa)) = &self.q {
            Self::int8_host(lin, *isa, x, Some(residual), Act::None, qin, out)?;
            return layer_norm(out, &ln.w_host, &ln.b_host, ln.eps).map_err(kernel_err);
        }
        self.matmul_host(x, out, par)?;
        bias_residual_layer_norm(out, &self.b_host, residual, &ln.w_host, &ln.b_host, ln.eps)
            .map_err(kernel_err)
    }
}

/// tanh-approximated GELU, candle's formula.
fn gelu_tanh(v: &mut [f32]) {
    const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
    for x in v {
        *x = 0.5 * *x * (1.0 + f32::tanh(SQRT_TWO_OVER_PI * *x * (1.0 + 0.044715 * *x * *x)));
    }
}

/// What every layer of one forward pass shares.
#[derive(Clone, Copy)]
struct Pass<'a> {
    lens: &'a [usize],
    shape: AttnShape,
    act: HiddenAct,
    par: Parallelism,
}

impl Layer {
    /// `out` = this layer applied to `x` (token rows of a padded batch).
    fn forward_host(
        &self,
        x: &[f32],
        out: &mut Vec<f32>,
        pass: Pass,
        ws: &mut Workspace,
    ) -> Result<()> {
        let Pass {
            lens,
            shape,
            act,
            par,
        } = pass;
        let Workspace {
            qkv,
            ctx,
            h1,
            inter,
            scores,
            qin,
            ..
        } = ws;
        self.qkv.forward_act_host(x, Act::None, qkv, par, qin)?;
        ctx.resize(x.len(), 0.0);
        attention(qkv, lens, shape, AttnOpts::default(), ctx, scores).map_err(kernel_err)?;
        self.attn_out
            .forward_residual_ln_host(ctx, x, &self.attn_ln, h1, par, qin)?;
        let inter_act = match act {
            HiddenAct::Gelu => Act::GeluErf,
            HiddenAct::Relu => Act::Relu,
            HiddenAct::GeluApprox => Act::None,
        };
        self.intermediate
            .forward_act_host(h1, inter_act, inter, par, qin)?;
        if matches!(act, HiddenAct::GeluApprox) {
            gelu_tanh(inter);
        }
        self.output
            .forward_residual_ln_host(inter, h1, &self.out_ln, out, par, qin)
    }
}

/// The forward pass of [`BertModel::forward_into`] on the CPU (fp32 or int8
/// layers); the batch is already checked ([`BertModel::check_batch`]).
pub(super) fn forward(
    model: &BertModel,
    ids: &[u32],
    lens: &[usize],
    t: usize,
    upto: usize,
    ws: &mut Workspace,
) -> Result<()> {
    let cfg = &model.config;
    let h = cfg.hidden_size;
    let rows = lens.len() * t;
    ws.prepare_states(upto + 1, rows * h);
    // Embeddings: word + position + token type 0, then LayerNorm, in place.
    let emb = &mut ws.states[0];
    with_host(&model.word, |word| {
        with_host(&model.position, |pos| {
            with_host(&model.token_type, |tt| {
                for (r, row) in emb.chunks_exact_mut(h).enumerate() {
                    let (id, i) = (ids[r] as usize, r % t);
                    let w = &word[id * h..(id + 1) * h];
                    let p = &pos[i * h..(i + 1) * h];
                    for (((o, &w), &p), &c) in row.iter_mut().zip(w).zip(p).zip(tt) {
                        *o = (w + p) + c;
                    }
                }
                Ok(())
            })
        })
    })?;
    let ln = &model.emb_ln;
    layer_norm(emb, &ln.w_host, &ln.b_host, ln.eps).map_err(kernel_err)?;
    let shape = AttnShape {
        batch: lens.len(),
        seq: t,
        heads: cfg.num_attention_heads,
        head_dim: cfg.head_dim(),
    };
    let pass = Pass {
        lens,
        shape,
        act: cfg.hidden_act,
        par: parallelism(),
    };
    for (l, layer) in model.layers.iter().take(upto).enumerate() {
        // The layer reads state l and writes state l + 1; take the output out of
        // the workspace meanwhile so that the scratch buffers can be borrowed too.
        let mut out = std::mem::take(&mut ws.states[l + 1]);
        let x = std::mem::take(&mut ws.states[l]);
        let res = layer.forward_host(&x, &mut out, pass, ws);
        ws.states[l] = x;
        ws.states[l + 1] = out;
        res?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
