//! Forward and inverse passes of the flow on a mini-batch, written by hand
//! over flat parameter vectors, and the buffers they (and the backward pass
//! in `super::backward`, re-exported here) work in. Generic over the float
//! type: `f32` for training and transforms, `f64` for the gradient and
//! Jacobian checks.
//!
//! Layout: the batch lives in a row-major `rows x dim` buffer; level `l`
//! works on the leading `levels[l].c` columns of each row, and the columns
//! it splits off stay where they are (see `Arch::out_perm`).

use super::arch::{ActnormIdx, Arch, LuIdx, NnIdx, StepArch};
use super::kernels::matmul;
use crate::real::Real;
use crate::spec::Coupling;
use crate::stats::ZERO_VARIANCE_RTOL;

pub(crate) use super::backward::backward;

/// Glow's logscale_factor: log-scales are stored divided by 3.
pub(crate) const LOGSCALE_FACTOR: f64 = 3.0;
/// Glow's epsilon in the actnorm initialisation.
const ACTNORM_EPS: f64 = 1e-6;
/// Bound on the initial log-scale of an actnorm channel, `|3 * logs| <= 12`.
pub(crate) const MAX_INIT_LOG_SCALE: f64 = 12.0;
/// log(2 pi)
const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Per-step buffers, sized for `cap` rows.
#[derive(Debug, Clone, Default)]
pub(super) struct StepCache<T> {
    /// actnorm output (rows x c)
    pub(super) act_out: Vec<T>,
    /// coupling input = reversed actnorm output (rows x c)
    pub(super) cin: Vec<T>,
    pub(super) u1: Vec<T>,
    pub(super) r1: Vec<T>,
    pub(super) u2: Vec<T>,
    pub(super) r2: Vec<T>,
    /// coupling network output (rows x nout)
    pub(super) o: Vec<T>,
    /// affine coupling: z2 + shift, and the scale (rows x c2)
    pub(super) aff_t: Vec<T>,
    pub(super) aff_s: Vec<T>,
    /// exp(3 * logs) of the step actnorm and the network's three scalings
    pub(super) e: Vec<T>,
    pub(super) e1: Vec<T>,
    pub(super) e2: Vec<T>,
    pub(super) e3: Vec<T>,
    /// transposed weights (for the backward pass)
    pub(super) w1t: Vec<T>,
    pub(super) w2t: Vec<T>,
    pub(super) w3t: Vec<T>,
    /// LU 1x1 convolution buffers (None for the reversal)
    pub(super) lu: Option<LuCache<T>>,
}

/// Buffers of an LU 1x1 convolution: the assembled factors and the
/// intermediate activations `a = x P` and `b = a L` (rows x c).
#[derive(Debug, Clone, Default)]
pub(super) struct LuCache<T> {
    pub(super) perm: Vec<usize>,
    lfull: Vec<T>,
    pub(super) ufull: Vec<T>,
    pub(super) lt: Vec<T>,
    pub(super) ut: Vec<T>,
    pub(super) a: Vec<T>,
    pub(super) b: Vec<T>,
}

/// Buffers for a mini-batch of at most `cap` rows. Allocated once.
#[derive(Debug, Clone)]
pub(crate) struct Workspace<T> {
    cap: usize,
    dim: usize,
    /// rows x dim: input, then latent (internal column order)
    pub x: Vec<T>,
    /// rows x dim: gradient of the loss w.r.t. the current activations
    pub(super) g: Vec<T>,
    /// per-row log-determinant and log prior density (nats)
    pub logdet: Vec<f64>,
    pub logp: Vec<f64>,
    pub(super) steps: Vec<StepCache<T>>,
    pub(super) d_o: Vec<T>,
    pub(super) dq: Vec<T>,
    pub(super) dr: Vec<T>,
    pub(super) dh: Vec<T>,
    /// LU backward scratch: c x c, and two rows x c
    pub(super) cc: Vec<T>,
    pub(super) lu_db: Vec<T>,
    pub(super) lu_da: Vec<T>,
}

impl<T: Real> Workspace<T> {
    pub fn new(arch: &Arch, cap: usize) -> Self {
        let w = arch.width;
        let mut max_out = 0;
        let mut max_lu = 0;
        let steps = arch
            .steps()
            .map(|s| {
                max_out = max_out.max(s.nn.nout);
                let aff = if arch.coupling == Coupling::Affine {
                    cap * s.c2
                } else {
                    0
                };
                StepCache {
                    act_out: vec![T::ZERO; cap * s.c],
                    cin: vec![T::ZERO; cap * s.c],
                    u1: vec![T::ZERO; cap * w],
                    r1: vec![T::ZERO; cap * w],
                    u2: vec![T::ZERO; cap * w],
                    r2: vec![T::ZERO; cap * w],
                    o: vec![T::ZERO; cap * s.nn.nout],
                    aff_t: vec![T::ZERO; aff],
                    aff_s: vec![T::ZERO; aff],
                    e: vec![T::ZERO; s.c],
                    e1: vec![T::ZERO; w],
                    e2: vec![T::ZERO; w],
                    e3: vec![T::ZERO; s.nn.nout],
                    w1t: vec![T::ZERO; s.nn.nin * w],
                    w2t: vec![T::ZERO; w * w],
                    w3t: vec![T::ZERO; w * s.nn.nout],
                    lu: s.lu.map(|_| {
                        max_lu = max_lu.max(s.c);
                        LuCache {
                            perm: vec![0; s.c],
                            lfull: vec![T::ZERO; s.c * s.c],
                            ufull: vec![T::ZERO; s.c * s.c],
                            lt: vec![T::ZERO; s.c * s.c],
                            ut: vec![T::ZERO; s.c * s.c],
                            a: vec![T::ZERO; cap * s.c],
                            b: vec![T::ZERO; cap * s.c],
                        }
                    }),
                }
            })
            .collect();
        Workspace {
            cap,
            dim: arch.dim,
            x: vec![T::ZERO; cap * arch.dim],
            g: vec![T::ZERO; cap * arch.dim],
            logdet: vec![0.0; cap],
            logp: vec![0.0; cap],
            steps,
            d_o: vec![T::ZERO; cap * max_out],
            dq: vec![T::ZERO; cap * max_out],
            dr: vec![T::ZERO; cap * w],
            dh: vec![T::ZERO; cap * w],
            cc: vec![T::ZERO; max_lu * max_lu],
            lu_db: vec![T::ZERO; cap * max_lu],
            lu_da: vec![T::ZERO; cap * max_lu],
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Mean negative log-likelihood in bits per dimension of the last
    /// forward pass over `rows` rows.
    pub fn nll_bits_per_dim(&self, rows: usize) -> f64 {
        let denom = self.dim as f64 * std::f64::consts::LN_2;
        let total: f64 = (0..rows)
            .map(|i| -(self.logp[i] + self.logdet[i]) / denom)
            .sum();
        total / rows as f64
    }
}

/// Parameters as read by the forward pass; `Init` also initialises every
/// actnorm from the batch it sees (Glow's data-dependent initialisation)
/// and records the parameter indices of degenerate flow-actnorm channels.
pub(crate) enum Params<'a, T> {
    Fixed(&'a [T]),
    Init {
        params: &'a mut [T],
        frozen: &'a mut Vec<usize>,
    },
}

impl<T> Params<'_, T> {
    fn get(&self) -> &[T] {
        match self {
            Params::Fixed(p) => p,
            Params::Init { params, .. } => params,
        }
    }
}

fn exp3<T: Real>(logs: &[T], e: &mut [T]) {
    let f = T::from_f64(LOGSCALE_FACTOR);
    for (o, &l) in e.iter_mut().zip(logs) {
        *o = (f * l).exp();
    }
}

/// Data-dependent actnorm initialisation on `rows` rows of `n` columns.
/// Returns the indices (within 0..n) of degenerate channels.
///
/// Glow: b = -mean, 3 * logs = log(1 / (std + 1e-6)). Robust version: a
/// channel whose variance is at most `ZERO_VARIANCE_RTOL` times the largest
/// of this actnorm (or exactly zero) gets logs = 0 (scale 1) instead of a
/// scale of 1e6, and every initial log-scale is clamped to
/// `[-MAX_INIT_LOG_SCALE, MAX_INIT_LOG_SCALE]`.
fn init_actnorm<T: Real>(
    data: &[T],
    stride: usize,
    rows: usize,
    n: usize,
    b: &mut [T],
    logs: &mut [T],
    degenerate: &mut Vec<usize>,
) {
    let mut mean = vec![0.0f64; n];
    let mut var = vec![0.0f64; n];
    for i in 0..rows {
        for (m, &v) in mean.iter_mut().zip(&data[i * stride..i * stride + n]) {
            *m += v.to_f64();
        }
    }
    for m in &mut mean {
        *m /= rows.max(1) as f64;
    }
    for i in 0..rows {
        for ((s, &v), &m) in var
            .iter_mut()
            .zip(&data[i * stride..i * stride + n])
            .zip(&mean)
        {
            let c = v.to_f64() - m;
            *s += c * c;
        }
    }
    for s in &mut var {
        *s /= rows.max(1) as f64;
    }
    let max_var = var.iter().copied().fold(0.0, f64::max);
    for j in 0..n {
        b[j] = T::from_f64(-mean[j]);
        if var[j] > ZERO_VARIANCE_RTOL * max_var && var[j] > 0.0 {
            let ls = -(var[j].sqrt() + ACTNORM_EPS).ln();
            let ls = ls.clamp(-MAX_INIT_LOG_SCALE, MAX_INIT_LOG_SCALE);
            logs[j] = T::from_f64(ls / LOGSCALE_FACTOR);
        } else {
            logs[j] = T::ZERO;
            degenerate.push(j);
        }
    }
}

/// Runs an actnorm (initialising it first in `Init` mode) on columns `..n`
/// of `rows` rows of `data`, in place. Returns sum(3 * logs) (its
/// per-row log-determinant).
fn actnorm_forward<T: Real>(
    params: &mut Params<'_, T>,
    an: ActnormIdx,
    data: &mut [T],
    stride: usize,
    rows: usize,
    e: &mut [T],
    flow_level: bool,
) -> f64 {
    let n = an.n;
    if let Params::Init { params, frozen } = params {
        let (lo, hi) = params.split_at_mut(an.logs);
        let mut degenerate = Vec::new();
        init_actnorm(
            data,
            stride,
            rows,
            n,
            &mut lo[an.b..an.b + n],
            &mut hi[..n],
            &mut degenerate,
        );
        if flow_level {
            for j in degenerate {
                frozen.push(an.b + j);
                frozen.push(an.logs + j);
            }
        }
    }
    let p = params.get();
    let b = &p[an.b..an.b + n];
    exp3(&p[an.logs..an.logs + n], e);
    for i in 0..rows {
        let row = &mut data[i * stride..i * stride + n];
        for ((v, &bb), &ee) in row.iter_mut().zip(b).zip(e.iter()) {
            *v = (*v + bb) * ee;
        }
    }
    p[an.logs..an.logs + n]
        .iter()
        .map(|&l| LOGSCALE_FACTOR * l.to_f64())
        .sum()
}

/// The coupling network on `rows` rows of z1 (columns `..nin` of `z1`,
/// row stride `z1_stride`); output in `c.o` (rows x nout).
fn nn_forward<T: Real>(
    params: &mut Params<'_, T>,
    nn: NnIdx,
    z1: &[T],
    z1_stride: usize,
    rows: usize,
    c: &mut StepCache<T>,
) {
    let w = nn.width;
    {
        let p = params.get();
        matmul(
            z1,
            z1_stride,
            rows,
            nn.nin,
            &p[nn.w1..nn.w1 + nn.nin * w],
            w,
            &mut c.u1,
            w,
            false,
        );
    }
    actnorm_forward(params, nn.an1, &mut c.u1, w, rows, &mut c.e1, false);
    for (r, &u) in c.r1[..rows * w].iter_mut().zip(&c.u1[..rows * w]) {
        *r = if u > T::ZERO { u } else { T::ZERO };
    }
    {
        let p = params.get();
        matmul(
            &c.r1,
            w,
            rows,
            w,
            &p[nn.w2..nn.w2 + w * w],
            w,
            &mut c.u2,
            w,
            false,
        );
    }
    actnorm_forward(params, nn.an2, &mut c.u2, w, rows, &mut c.e2, false);
    for (r, &u) in c.r2[..rows * w].iter_mut().zip(&c.u2[..rows * w]) {
        *r = if u > T::ZERO { u } else { T::ZERO };
    }
    let p = params.get();
    let nout = nn.nout;
    matmul(
        &c.r2,
        w,
        rows,
        w,
        &p[nn.w3..nn.w3 + w * nout],
        nout,
        &mut c.o,
        nout,
        false,
    );
    exp3(&p[nn.logs3..nn.logs3 + nout], &mut c.e3);
    let b3 = &p[nn.b3..nn.b3 + nout];
    for i in 0..rows {
        let row = &mut c.o[i * nout..(i + 1) * nout];
        for ((v, &bb), &ee) in row.iter_mut().zip(b3).zip(&c.e3) {
            *v = (*v + bb) * ee;
        }
    }
}

#[inline]
fn sigmoid<T: Real>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// log(sigmoid(x)) = -softplus(-x), computed stably, in f64.
#[inline]
fn ln_sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

#[allow(clippy::too_many_arguments)]
fn step_forward<T: Real>(
    coupling: Coupling,
    params: &mut Params<'_, T>,
    s: &StepArch,
    x: &mut [T],
    dim: usize,
    rows: usize,
    c: &mut StepCache<T>,
    logdet: &mut [f64],
) {
    let ch = s.c;
    // actnorm
    let ld = actnorm_forward(params, s.an, x, dim, rows, &mut c.e, true);
    for l in logdet[..rows].iter_mut() {
        *l += ld;
    }
    for i in 0..rows {
        c.act_out[i * ch..(i + 1) * ch].copy_from_slice(&x[i * dim..i * dim + ch]);
    }
    // permutation
    match (s.lu, c.lu.as_mut()) {
        (Some(lu), Some(lc)) => {
            let ld = build_lu(params.get(), lu, ch, lc);
            for l in logdet[..rows].iter_mut() {
                *l += ld;
            }
            for i in 0..rows {
                let row = &x[i * dim..i * dim + ch];
                for (a, &pj) in lc.a[i * ch..(i + 1) * ch].iter_mut().zip(&lc.perm) {
                    *a = row[pj];
                }
            }
            matmul(&lc.a, ch, rows, ch, &lc.lfull, ch, &mut lc.b, ch, false);
            matmul(&lc.b, ch, rows, ch, &lc.ufull, ch, x, dim, false);
        }
        _ => {
            for i in 0..rows {
                x[i * dim..i * dim + ch].reverse();
            }
        }
    }
    // coupling input
    for i in 0..rows {
        c.cin[i * ch..(i + 1) * ch].copy_from_slice(&x[i * dim..i * dim + ch]);
    }
    // coupling
    let cin = std::mem::take(&mut c.cin);
    nn_forward(params, s.nn, &cin, ch, rows, c);
    c.cin = cin;
    let (c1, c2) = (s.c1, s.c2);
    match coupling {
        Coupling::Additive => {
            for i in 0..rows {
                let z2 = &mut x[i * dim + c1..i * dim + ch];
                for (v, &o) in z2.iter_mut().zip(&c.o[i * c2..(i + 1) * c2]) {
                    *v += o;
                }
            }
        }
        Coupling::Affine => {
            let two = T::from_f64(2.0);
            for i in 0..rows {
                let z2 = &mut x[i * dim + c1..i * dim + ch];
                let o = &c.o[i * 2 * c2..(i + 1) * 2 * c2];
                let mut ld = 0.0;
                for j in 0..c2 {
                    let raw = o[2 * j + 1] + two;
                    let sc = sigmoid(raw);
                    let t = z2[j] + o[2 * j];
                    c.aff_t[i * c2 + j] = t;
                    c.aff_s[i * c2 + j] = sc;
                    z2[j] = t * sc;
                    ld += ln_sigmoid(raw.to_f64());
                }
                logdet[i] += ld;
            }
        }
    }
}

/// Forward pass on the first `rows` rows of `ws.x` (in place): afterwards
/// `ws.x` holds the latent (internal column order), `ws.logdet` and
/// `ws.logp` the per-row log-determinant and standard-normal log-density.
pub(crate) fn forward<T: Real>(
    arch: &Arch,
    mut params: Params<'_, T>,
    ws: &mut Workspace<T>,
    rows: usize,
) {
    debug_assert!(rows <= ws.cap);
    let dim = arch.dim;
    ws.logdet[..rows].fill(0.0);
    for (s, c) in arch.steps().zip(ws.steps.iter_mut()) {
        step_forward(
            arch.coupling,
            &mut params,
            s,
            &mut ws.x,
            dim,
            rows,
            c,
            &mut ws.logdet,
        );
    }
    // Every latent column (split-off parts and top) has a standard normal prior.
    for i in 0..rows {
        let row = &ws.x[i * dim..(i + 1) * dim];
        let ss: f64 = row.iter().map(|&v| v.to_f64() * v.to_f64()).sum();
        ws.logp[i] = -0.5 * ss - 0.5 * LN_2PI * dim as f64;
    }
}

/// Inverse pass on the first `rows` rows of `ws.x` (latent in internal
/// column order) back to the input, in place.
pub(crate) fn inverse<T: Real>(arch: &Arch, params: &[T], ws: &mut Workspace<T>, rows: usize) {
    let dim = arch.dim;
    let mut fixed = Params::Fixed(params);
    let two = T::from_f64(2.0);
    for (s, c) in arch.steps().rev().zip(ws.steps.iter_mut().rev()) {
        let (ch, c1, c2) = (s.c, s.c1, s.c2);
        // coupling inverse: z1 is unchanged, so the network output is recomputed.
        for i in 0..rows {
            c.cin[i * ch..i * ch + c1].copy_from_slice(&ws.x[i * dim..i * dim + c1]);
        }
        let cin = std::mem::take(&mut c.cin);
        nn_forward(&mut fixed, s.nn, &cin, ch, rows, c);
        c.cin = cin;
        for i in 0..rows {
            let z2 = &mut ws.x[i * dim + c1..i * dim + ch];
            match arch.coupling {
                Coupling::Additive => {
                    for (v, &o) in z2.iter_mut().zip(&c.o[i * c2..(i + 1) * c2]) {
                        *v -= o;
                    }
                }
                Coupling::Affine => {
                    let o = &c.o[i * 2 * c2..(i + 1) * 2 * c2];
                    for j in 0..c2 {
                        let sc = sigmoid(o[2 * j + 1] + two);
                        z2[j] = z2[j] / sc - o[2 * j];
                    }
                }
            }
        }
        // permutation inverse
        match (s.lu, c.lu.as_mut()) {
            (Some(lu), Some(lc)) => {
                build_lu(params, lu, ch, lc);
                for i in 0..rows {
                    let row = &mut ws.x[i * dim..i * dim + ch];
                    let bv = &mut lc.b[i * ch..(i + 1) * ch];
                    // y = b U: forward substitution
                    for j in 0..ch {
                        let mut acc = row[j];
                        for (k, &u) in lc.ut[j * ch..j * ch + j].iter().enumerate() {
                            acc -= bv[k] * u;
                        }
                        bv[j] = acc / lc.ufull[j * ch + j];
                    }
                    // b = a L (unit lower): back substitution
                    let av = &mut lc.a[i * ch..(i + 1) * ch];
                    for j in (0..ch).rev() {
                        let mut acc = bv[j];
                        for (&a, &l) in av[j + 1..].iter().zip(&lc.lt[j * ch + j + 1..(j + 1) * ch])
                        {
                            acc -= a * l;
                        }
                        av[j] = acc;
                    }
                    // a = x P
                    for (&pj, &a) in lc.perm.iter().zip(av.iter()) {
                        row[pj] = a;
                    }
                }
            }
            _ => {
                for i in 0..rows {
                    ws.x[i * dim..i * dim + ch].reverse();
                }
            }
        }
        // actnorm inverse
        let b = &params[s.an.b..s.an.b + ch];
        exp3(&params[s.an.logs..s.an.logs + ch], &mut c.e);
        for i in 0..rows {
            let row = &mut ws.x[i * dim..i * dim + ch];
            for ((v, &bb), &ee) in row.iter_mut().zip(b).zip(&c.e) {
                *v = *v / ee - bb;
            }
        }
    }
}

/// Assembles `L` (unit lower), `U` (upper with diagonal sign_s exp(log_s)),
/// their transposes and the permutation from the parameters. Returns the
/// log-determinant, sum(log_s).
fn build_lu<T: Real>(p: &[T], lu: LuIdx, c: usize, lc: &mut LuCache<T>) -> f64 {
    for (j, q) in lc.perm.iter_mut().enumerate() {
        // Validated as a permutation of 0..c when fitted or loaded.
        *q = (p[lu.perm + j].to_f64() as usize).min(c - 1);
    }
    lc.lfull.fill(T::ZERO);
    lc.ufull.fill(T::ZERO);
    let mut logdet = 0.0;
    for i in 0..c {
        for j in 0..c {
            let idx = i * c + j;
            if i > j {
                lc.lfull[idx] = p[lu.lower + idx];
            } else if i < j {
                lc.ufull[idx] = p[lu.upper + idx];
            } else {
                lc.lfull[idx] = T::ONE;
                lc.ufull[idx] = p[lu.sign_s + j] * p[lu.log_s + j].exp();
                logdet += p[lu.log_s + j].to_f64();
            }
        }
    }
    for i in 0..c {
        for j in 0..c {
            lc.lt[j * c + i] = lc.lfull[i * c + j];
            lc.ut[j * c + i] = lc.ufull[i * c + j];
        }
    }
    logdet
}
