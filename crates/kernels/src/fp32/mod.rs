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
//! * Each output channel's weights are stored times a power of two `s` that
//!   brings their root mean square near 1 (`s >= 1`); the output stage multiplies
//!   by `1 / s`. Scaling by a power of two is exact in floating point, so the
//!   classical kernels give the bits they would on the unscaled weights; the
//!   scale is there for [`Path::Avx512Pair`], whose sums `x + s w` need the two
//!   terms of like size.
//! * Output stage (per tile, in registers, then the rows still in L1): unscale
//!   and add the bias, then the residual (in that order, as `x W^T + b` then
//!   `+ residual`), store, apply the activation.
//!
//! The kernel runs on one thread (the encoder runs one batch per worker thread)
//! and is chosen at run time: `BERTFLOW_FP32_KERNEL`, else the encoder's choice
//! by measurement ([`Path::choose`], see [`crate::tune`]), else [`Path::best`].
use crate::act::Act;

#[cfg(target_arch = "x86_64")]
mod pair;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Output channels per packed block (one micro-kernel tile wide).
pub const NB: usize = 64;
/// Rows per micro-kernel tile.
pub const MR: usize = 6;
/// Alignment of the packed weights, in floats (64 bytes: one cache line).
const ALIGN: usize = 16;
/// Rows whose [`Tile::rt`] terms the driver computes at a time.
const CHUNK: usize = 240;

#[derive(Debug, thiserror::Error)]
pub enum Fp32Error {
    #[error("fp32 kernel: {0}")]
    Shape(String),
    #[error("fp32 kernel '{0}' requested but this CPU lacks it; available: {1}")]
    Unavailable(&'static str, String),
    #[error("BERTFLOW_FP32_KERNEL={0}: expected auto, scalar, avx2, avx512 or avx512pair")]
    BadName(String),
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
    /// AVX512F + FMA, Winograd's inner product by pairs (1968): `x . w` as
    /// `sum (x[2i] + w[2i+1]) (x[2i+1] + w[2i]) - sum x[2i] x[2i+1] - sum w[2i] w[2i+1]`,
    /// one multiply-add and two additions per pair of products, where the classical
    /// kernel spends two multiply-adds. The last two sums are per row and per
    /// output channel (channel ones computed at load), so each output still
    /// depends on its own row only. It pays where additions run beside the FMA
    /// units (AMD Zen 4 and 5: per cycle one 512-bit FMA and one 512-bit add),
    /// 5 x 64 tiles; see `pair.rs`.
    Avx512Pair,
}

impl Path {
    pub const ALL: [Path; 4] = [Path::Scalar, Path::Avx2, Path::Avx512, Path::Avx512Pair];

    pub fn name(self) -> &'static str {
        match self {
            Path::Scalar => "scalar",
            Path::Avx2 => "avx2",
            Path::Avx512 => "avx512",
            Path::Avx512Pair => "avx512pair",
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
            Path::Avx512 | Path::Avx512Pair => {
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

    /// The rule, used where the kernels were not measured (see [`crate::tune`]):
    /// [`Path::Avx512Pair`] on AMD Zen 4 and later (family 0x19 with AVX-512,
    /// 0x1A), else AVX-512, AVX2, portable.
    pub fn best() -> Path {
        if Path::Avx512Pair.available() && adds_beside_fmas() {
            return Path::Avx512Pair;
        }
        [Path::Avx512, Path::Avx2]
            .into_iter()
            .find(|p| p.available())
            .unwrap_or(Path::Scalar)
    }

    /// The kernel of this name (`scalar`, `avx2`, `avx512`, `avx512pair`).
    pub fn from_name(name: &str) -> Option<Path> {
        Path::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The arithmetic of the kernel, which decides the bits of its results:
    /// `fma` (AVX2 and AVX-512 give the same bits), `plain` (portable: multiply
    /// then add) or `pair` ([`Path::Avx512Pair`]). Cache keys of computed vectors
    /// include it.
    pub fn numerics(self) -> &'static str {
        match self {
            Path::Scalar => "plain",
            Path::Avx2 | Path::Avx512 => "fma",
            Path::Avx512Pair => "pair",
        }
    }

    /// `BERTFLOW_FP32_KERNEL` (auto, scalar, avx2, avx512, avx512pair), else the
    /// best; an error when the named kernel is unknown or not supported here.
    pub fn from_env() -> Result<Path, Fp32Error> {
        Ok(Path::env_override()?.unwrap_or_else(Path::best))
    }

    /// The kernel `BERTFLOW_FP32_KERNEL` names (`None` when unset, empty or
    /// `auto`); an error when it is unknown or not supported here.
    pub fn env_override() -> Result<Option<Path>, Fp32Error> {
        match std::env::var("BERTFLOW_FP32_KERNEL") {
            Ok(s) if !s.is_empty() && s != "auto" => {
                let path = Path::from_name(&s).ok_or(Fp32Error::BadName(s))?;
                path.check()?;
                Ok(Some(path))
            }
            _ => Ok(None),
        }
    }

    /// The kernel new layers run: `BERTFLOW_FP32_KERNEL` (read once per
    /// process), else the one given to [`Path::choose`] (the encoder's choice by
    /// measurement), else [`Path::best`].
    pub fn selected() -> Result<Path, Fp32Error> {
        static ENV: std::sync::OnceLock<Result<Option<Path>, String>> = std::sync::OnceLock::new();
        match ENV.get_or_init(|| Path::env_override().map_err(|e| e.to_string())) {
            Ok(Some(p)) => Ok(*p),
            Ok(None) => Ok(Path::chosen().unwrap_or_else(Path::best)),
            Err(_) => Path::from_env(),
        }
    }

    /// Make `self` the kernel of layers built from now on in this process
    /// (unless `BERTFLOW_FP32_KERNEL` names one); an error if this CPU lacks it.
    pub fn choose(self) -> Result<(), Fp32Error> {
        self.check()?;
        let i = Path::ALL.iter().position(|&p| p == self).unwrap_or(0);
        CHOSEN.store(i as u8 + 1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The kernel given to [`Path::choose`], if any.
    pub fn chosen() -> Option<Path> {
        match CHOSEN.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            i => Path::ALL.get(i as usize - 1).copied(),
        }
    }

    /// An error unless this CPU can run the kernel.
    pub fn check(self) -> Result<(), Fp32Error> {
        if self.available() {
            return Ok(());
        }
        let names: Vec<_> = Path::available_all().iter().map(|p| p.name()).collect();
        Err(Fp32Error::Unavailable(self.name(), names.join(", ")))
    }
}

/// [`Path::choose`]'s kernel: 0 for none, else its index in [`Path::ALL`] plus 1.
static CHOSEN: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether this CPU executes floating-point additions on pipes of their own
/// beside two FMA pipes (AMD Zen 4 and later), so that [`Path::Avx512Pair`]'s
/// additions are nearly free; Intel's cores add on their FMA ports.
fn adds_beside_fmas() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        #[allow(unused_unsafe)]
        // SAFETY: CPUID leaves 0 and 1 exist on every x86-64 CPU.
        let (v, f) = unsafe { (__cpuid(0), __cpuid(1)) };
        let amd = (v.ebx, v.edx, v.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let base = (f.eax >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((f.eax >> 20) & 0xff)
        } else {
            base
        };
        amd && family >= 0x19
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The power of two `s >= 1` (at most 2^40) that brings the root mean square of
/// `w` nearest 1; 1 for an all-zero channel.
fn channel_scale(w: &[f32]) -> f32 {
    let ms = w.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / w.len() as f64;
    if !(ms > 0.0 && ms.is_finite()) {
        return 1.0;
    }
    let e = (-0.5 * ms.log2()).round().clamp(0.0, 40.0);
    (e as i32 as f32).exp2()
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
    /// Per output channel (padded with ones): `1 / s`, the weights' scale undone.
    inv_scale: Vec<f32>,
    /// Per output channel (padded with zeros): `sum_i w'[2i] w'[2i+1]` of the
    /// scaled weights `w'`, for [`Path::Avx512Pair`].
    col_term: Vec<f32>,
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
    /// The block's `NB` biases, inverse scales and channel terms.
    bias: &'a [f32],
    inv_scale: &'a [f32],
    col_term: &'a [f32],
    /// The rows' terms `sum_i x[2i] x[2i+1]` (`mr` values; [`Path::Avx512Pair`] only).
    rt: &'a [f32],
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
    /// `n`; the kernel is [`Path::selected`] (`BERTFLOW_FP32_KERNEL`, an error if
    /// this CPU lacks it, else the chosen or the best kernel).
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
        let (mut inv_scale, mut col_term) = (vec![1f32; np], vec![0f32; np]);
        for (c, row) in w.chunks_exact(k).enumerate() {
            let (b, j) = (c / NB, c % NB);
            let s = channel_scale(row);
            inv_scale[c] = 1.0 / s;
            let blk = &mut packed[b * k * NB..(b + 1) * k * NB];
            for (dst, &v) in blk[j..].iter_mut().step_by(NB).zip(row) {
                *dst = v * s;
            }
            // Of the scaled weights: times s^2, exact for a power of two.
            col_term[c] = pair_sum(row) * (s * s);
        }
        let mut b = bias.to_vec();
        b.resize(np, 0.0);
        Ok(Self {
            k,
            n,
            buf,
            off,
            bias: b,
            inv_scale,
            col_term,
            path: Path::selected()?,
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
            let inv = self.inv_scale[c];
            for (d, &v) in row.iter_mut().zip(blk[c % NB..].iter().step_by(NB)) {
                *d = v * inv;
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
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `path.check()` passed: AVX512F and FMA were detected at run time.
            Path::Avx512Pair => unsafe { pair::drive_pair(self, x, m, residual, act, out) },
            _ => drive(self, x, m, residual, act, out, MR, false, micro_scalar),
        }
        Ok(())
    }
}

/// The loop over chunks of [`CHUNK`] rows (with their row terms when `pairs`),
/// then 64-channel blocks (one block's weights stay in cache) and tiles of up to
/// `tile` rows, with the micro-kernel and the activation on the tile's rows while
/// they are in L1; inlined into each kernel's target-feature function so that the
/// activation is vectorised for that instruction set. `x`, `residual` and `out`
/// have the layer's shape (checked by the caller); `tile` divides [`CHUNK`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn drive(
    lin: &PackedLinear,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
    tile: usize,
    pairs: bool,
    mut micro: impl FnMut(&mut Tile),
) {
    let (n, k) = (lin.n, lin.k);
    let mut rt = [0f32; CHUNK];
    for q0 in (0..m).step_by(CHUNK) {
        let qm = CHUNK.min(m - q0);
        if pairs {
            for (t, row) in rt.iter_mut().zip(x[q0 * k..(q0 + qm) * k].chunks_exact(k)) {
                *t = pair_sum(row);
            }
        }
        for (blk, ((w, bias), (inv_scale, col_term))) in lin
            .packed()
            .chunks_exact(k * NB)
            .zip(lin.bias.chunks_exact(NB))
            .zip(
                lin.inv_scale
                    .chunks_exact(NB)
                    .zip(lin.col_term.chunks_exact(NB)),
            )
            .enumerate()
        {
            let c0 = blk * NB;
            let cols = NB.min(n - c0);
            for r0 in (q0..q0 + qm).step_by(tile) {
                let mr = tile.min(q0 + qm - r0);
                let rows = r0 * n..(r0 + mr) * n;
                let o = &mut out[rows.clone()];
                micro(&mut Tile {
                    a: &x[r0 * k..(r0 + mr) * k],
                    mr,
                    k,
                    w,
                    bias,
                    inv_scale,
                    col_term,
                    rt: &rt[r0 - q0..r0 - q0 + mr],
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
}

/// `sum_i x[2i] x[2i+1]` (in f64, rounded once): [`Path::Avx512Pair`]'s term of
/// a row or of a channel's weights.
fn pair_sum(x: &[f32]) -> f32 {
    x.chunks_exact(2)
        .map(|p| p[0] as f64 * p[1] as f64)
        .sum::<f64>() as f32
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
        for ((sj, &b), &inv) in s.iter_mut().zip(t.bias).zip(t.inv_scale) {
            *sj = *sj * inv + b;
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
