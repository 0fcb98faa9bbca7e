//! fp32 linear layers with the weights packed once at load:
//! `y = act(x W^T + b [+ residual])`, the layout of the [`crate::int8`] layers.
//!
//! * Weights: in blocks of [`NB`] = 64 output channels, `[k][64 channels]` per
//!   block (N zero-padded to a multiple of 64), the buffer aligned to 64 bytes, so
//!   a micro-kernel reads one block front to back with whole-cache-line loads and
//!   nothing is repacked per product (as a general `gemm` call does).
//! * Micro-kernel: a tile of up to [`MR`] = 6 rows x 64 channels held in registers
//!   (24 zmm accumulators for AVX-512: per k, 4 weight loads and 6 broadcasts for
//!   24 FMAs; AVX2 does the tile as four 6 x 16 panels in 12 ymm), over all of K.
//! * Output stage (per tile, in registers, then the rows still in L1): add the
//!   bias, then the residual (in that order, as `x W^T + b` then `+ residual`),
//!   store, apply the activation.
//!
//! The kernel runs on one thread (the encoder runs one batch per worker thread)
//! and is chosen at run time ([`Path::best`]).
use crate::act::Act;

#[cfg(target_arch = "x86_64")]
mod x86;

/// Output channels per packed block (one micro-kernel tile wide).
pub const NB: usize = 64;
/// Rows per micro-kernel tile.
pub const MR: usize = 6;
/// Alignment of the packed weights, in floats (64 bytes: one cache line).
const ALIGN: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum Fp32Error {
    #[error("fp32 kernel: {0}")]
    Shape(String),
    #[error("fp32 kernel '{0}' requested but this CPU lacks it; available: {1}")]
    Unavailable(&'static str, String),
}

/// Instruction set of the fp32 micro-kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Portable Rust (any CPU).
    Scalar,
    /// AVX2 + FMA: 6 x 16 panels in 12 ymm accumulators.
    Avx2,
    /// AVX512F + FMA: 6 x 64 tiles in 24 zmm accumulators.
    Avx512,
}

impl Path {
    pub const ALL: [Path; 3] = [Path::Scalar, Path::Avx2, Path::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Path::Scalar => "scalar",
            Path::Avx2 => "avx2",
            Path::Avx512 => "avx512",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        match self {
            Path::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every kernel this CPU can run.
    pub fn available_all() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.available()).collect()
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Path {
        [Path::Avx512, Path::Avx2]
            .into_iter()
            .find(|p| p.available())
            .unwrap_or(Path::Scalar)
    }

    fn check(self) -> Result<(), Fp32Error> {
        if self.available() {
            return Ok(());
        }
        let names: Vec<_> = Path::available_all().iter().map(|p| p.name()).collect();
        Err(Fp32Error::Unavailable(self.name(), names.join(", ")))
    }
}

/// A linear layer with fp32 weights packed for the micro-kernels.
pub struct PackedLinear {
    k: usize,
    n: usize,
    /// `n_blocks * k * NB` weights from `off`, block-major (`off` aligns them).
    buf: Vec<f32>,
    off: usize,
    /// Per output channel, padded to the blocks with zeros.
    bias: Vec<f32>,
    path: Path,
}

/// One micro-kernel call: `mr` rows of `x` by one packed block, into `out`.
pub(crate) struct Tile<'a> {
    /// `mr` rows of `k` inputs.
    a: &'a [f32],
    mr: usize,
    k: usize,
    /// The block: `k * NB` weights.
    w: &'a [f32],
    /// The block's `NB` biases.
    bias: &'a [f32],
    /// The tile's `mr` rows of the residual / output (`n` values each, from column 0).
    res: Option<&'a [f32]>,
    out: &'a mut [f32],
    n: usize,
    /// First channel of the block and how many of its channels exist (<= NB).
    c0: usize,
    cols: usize,
}

impl PackedLinear {
    /// From the PyTorch layout: `w` row-major `[n, k]` (out, in), `bias` of length
    /// `n`; the kernel is the best this CPU has.
    pub fn new(w: &[f32], bias: &[f32], n: usize, k: usize) -> Result<Self, Fp32Error> {
        if n == 0 || k == 0 || n.checked_mul(k) != Some(w.len()) || bias.len() != n {
            return Err(Fp32Error::Shape(format!(
                "weights of length {} and bias of length {} do not make a [{n}, {k}] layer",
                w.len(),
                bias.len()
            )));
        }
        let np = n.div_ceil(NB) * NB;
        let mut buf = vec![0f32; np * k + ALIGN];
        let off = buf.as_ptr().align_offset(ALIGN * 4).min(ALIGN);
        let packed = &mut buf[off..off + np * k];
        for (c, row) in w.chunks_exact(k).enumerate() {
            let (b, j) = (c / NB, c % NB);
            let blk = &mut packed[b * k * NB..(b + 1) * k * NB];
            for (dst, &v) in blk[j..].iter_mut().step_by(NB).zip(row) {
                *dst = v;
            }
        }
        let mut b = bias.to_vec();
        b.resize(np, 0.0);
        Ok(Self {
            k,
            n,
            buf,
            off,
            bias: b,
            path: Path::best(),
        })
    }

    pub fn in_dim(&self) -> usize {
        self.k
    }
    pub fn out_dim(&self) -> usize {
        self.n
    }
    /// The kernel [`PackedLinear::forward`] runs.
    pub fn path(&self) -> Path {
        self.path
    }
    /// The bias (`n` values).
    pub fn bias(&self) -> &[f32] {
        &self.bias[..self.n]
    }

    /// The weights back in the PyTorch layout, row-major `[n, k]`.
    pub fn weights(&self) -> Vec<f32> {
        let (n, k) = (self.n, self.k);
        let mut w = vec![0f32; n * k];
        for (c, row) in w.chunks_exact_mut(k).enumerate() {
            let blk = &self.packed()[(c / NB) * k * NB..];
            for (d, &v) in row.iter_mut().zip(blk[c % NB..].iter().step_by(NB)) {
                *d = v;
            }
        }
        w
    }

    fn packed(&self) -> &[f32] {
        let np = self.n.div_ceil(NB) * NB;
        &self.buf[self.off..self.off + np * self.k]
    }

    /// `out[m, n] = act(x W^T + b [+ residual])` for `x` row-major `[m, k]`
    /// (`residual` and `out` `[m, n]`), with the best kernel of this CPU.
    pub fn forward(
        &self,
        x: &[f32],
        m: usize,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) -> Result<(), Fp32Error> {
        self.forward_with(self.path, x, m, residual, act, out)
    }

    /// [`PackedLinear::forward`] with the kernel `path` (an error unless this CPU
    /// can run it).
    pub fn forward_with(
        &self,
        path: Path,
        x: &[f32],
        m: usize,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) -> Result<(), Fp32Error> {
        let (n, k) = (self.n, self.k);
        let mn = m.checked_mul(n);
        if m.checked_mul(k) != Some(x.len())
            || mn != Some(out.len())
            || residual.is_some_and(|r| Some(r.len()) != mn)
        {
            return Err(Fp32Error::Shape(format!(
                "{} inputs, {} outputs and {} residual values for {m} rows of a [{n}, {k}] layer",
                x.len(),
                out.len(),
                residual.map_or(0, |r| r.len())
            )));
        }
        path.check()?;
        match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `path.check()` passed: AVX2 and FMA were detected at run time.
            Path::Avx2 => unsafe { x86::drive_avx2(self, x, m, residual, act, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `path.check()` passed: AVX512F and FMA were detected at run time.
            Path::Avx512 => unsafe { x86::drive_avx512(self, x, m, residual, act, out) },
            _ => drive(self, x, m, residual, act, out, micro_scalar),
        }
        Ok(())
    }
}

/// The loop over 64-channel blocks (outer: one block's weights stay in cache) and
/// tiles of up to [`MR`] rows, with the micro-kernel and the activation on the
/// tile's rows while they are in L1; inlined into each kernel's target-feature
/// function so that the activation is vectorised for that instruction set.
/// `x`, `residual` and `out` have the layer's shape (checked by the caller).
#[inline(always)]
fn drive(
    lin: &PackedLinear,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
    mut micro: impl FnMut(&mut Tile),
) {
    let (n, k) = (lin.n, lin.k);
    for (blk, (w, bias)) in lin
        .packed()
        .chunks_exact(k * NB)
        .zip(lin.bias.chunks_exact(NB))
        .enumerate()
    {
        let c0 = blk * NB;
        let cols = NB.min(n - c0);
        for r0 in (0..m).step_by(MR) {
            let mr = MR.min(m - r0);
            let rows = r0 * n..(r0 + mr) * n;
            let o = &mut out[rows.clone()];
            micro(&mut Tile {
                a: &x[r0 * k..(r0 + mr) * k],
                mr,
                k,
                w,
                bias,
                res: residual.map(|r| &r[rows.clone()]),
                out: o,
                n,
                c0,
                cols,
            });
            // Inline (not `act.apply`, a call per 64 values that reloads its
            // constants): the tile's rows are still in L1.
            for row in o.chunks_exact_mut(n) {
                let v = &mut row[c0..c0 + cols];
                match act {
                    Act::None => {}
                    Act::Relu => v.iter_mut().for_each(|x| *x = x.max(0.0)),
                    Act::GeluErf => v.iter_mut().for_each(|x| *x = crate::act::gelu_erf(*x)),
                    Act::GeluPoly => v.iter_mut().for_each(|x| *x = crate::act::gelu_poly(*x)),
                }
            }
        }
    }
}

/// The portable micro-kernel: plain loops (the inner one over 64 channels
/// vectorises for the baseline instruction set).
fn micro_scalar(t: &mut Tile) {
    let (k, n) = (t.k, t.n);
    for r in 0..t.mr {
        let mut s = [0f32; NB];
        for (&a, wk) in t.a[r * k..(r + 1) * k].iter().zip(t.w.chunks_exact(NB)) {
            for (sj, &wj) in s.iter_mut().zip(wk) {
                *sj += a * wj;
            }
        }
        for (sj, &b) in s.iter_mut().zip(t.bias) {
            *sj += b;
        }
        let o = &mut t.out[r * n + t.c0..r * n + t.c0 + t.cols];
        if let Some(res) = t.res {
            let res = &res[r * n + t.c0..r * n + t.c0 + t.cols];
            for ((d, &v), &q) in o.iter_mut().zip(&s).zip(res) {
                *d = v + q;
            }
        } else {
            o.copy_from_slice(&s[..t.cols]);
        }
    }
}
