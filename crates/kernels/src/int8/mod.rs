//! Int8 linear layers: `y = act(s_x s_w (q(x) · Wq^T - z_x colsum(Wq)) + b [+ residual])`.
//!
//! * Weights: per output channel (row of the PyTorch `[out, in]` matrix), symmetric,
//!   s8 in -127..=127, `s_w = max|w| / 127`; quantised and packed once at load, in
//!   blocks of [`NB`] = 64 output channels (four 16-channel panels):
//!   `[k/4][64 channels][4 consecutive k]`, K zero-padded to a multiple of 4 and N
//!   to a multiple of 64.
//! * Activations: per row, asymmetric u8 with a zero point, quantised once per layer
//!   input ([`QuantInput`]; the fused Q/K/V product shares one). The code range
//!   depends on the kernel ([`Isa::act_max`]): **8 bits** (0..=255) where products
//!   accumulate in i32 without saturation (AVX512-VNNI and AVX-VNNI `vpdpbusd`,
//!   portable), **7 bits** (0..=127) for AVX2, whose `vpmaddubsw` sums pairs of
//!   products in i16: at most 2 * 127 * 127 = 32,258 < 32,767, so its saturation
//!   never triggers.
//! * Micro-kernels ([`Isa`], chosen at run time, `BERTFLOW_INT8_KERNEL` forces
//!   one), each over all of K for a tile of up to [`MR`] = 6 rows:
//!   AVX512-VNNI holds 6 rows x 64 channels in 24 zmm accumulators; AVX-VNNI
//!   (256-bit `vpdpbusd`, 16 ymm registers) and AVX2 hold 6 (AVX2: 3) rows x one
//!   16-channel panel and visit the block's 4 panels in turn; portable Rust.
//!   The AVX-VNNI tile is generic over the instruction's encoding, so its EVEX
//!   (AVX512-VNNI + VL) instantiation, [`QuantLinear::forward_quantized_avxvnni_evex`],
//!   tests and times the same code on AVX-512 CPUs without AVX-VNNI.
//! * Output stage (per tile, still in cache): dequantise, add the bias, optionally a
//!   residual, then the activation. It is the same arithmetic for every kernel, so
//!   each kernel gives bit for bit the result of [`reference_forward`] with its code
//!   range; the AVX512-VNNI kernel runs it in one pass of intrinsics over full
//!   64-channel blocks (`vnni512.rs`) and can gather the output rows' ranges for the
//!   next layer's quantisation ([`QuantLinear::forward_quantized_lanes`]).
use crate::act::Act;

mod input;
mod isa;
#[cfg(target_arch = "x86_64")]
mod vnni256;
#[cfg(target_arch = "x86_64")]
mod vnni512;
#[cfg(target_arch = "x86_64")]
mod x86;
use input::quantize_rows;
pub use input::{quantize_row, QuantInput, RowLanes};
pub use isa::Isa;

/// Output channels per panel (one zmm of i32, two ymm).
pub const NR: usize = 16;
/// Output channels per packed block (four panels; one micro-kernel tile wide).
pub const NB: usize = 64;
/// Rows per micro-kernel tile.
pub const MR: usize = 6;
/// Largest 7-bit activation code (AVX2).
pub const QMAX_7BIT: i32 = 127;
/// Largest 8-bit activation code (VNNI, portable).
pub const QMAX_8BIT: i32 = 255;

/// i32 accumulators of one tile: `MR` rows x `NB` channels.
type Tile = [[i32; NB]; MR];

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("int8 kernel: {0}")]
    Shape(String),
    #[error(
        "int8 kernel '{0}' requested (BERTFLOW_INT8_KERNEL) but this CPU lacks it; available: {1}"
    )]
    Unavailable(&'static str, String),
    #[error("BERTFLOW_INT8_KERNEL={0}: expected auto, scalar, avx2, avxvnni or avx512vnni")]
    BadName(String),
}

/// Symmetric per-row s8 quantisation of a row-major `[n, k]` matrix: codes and scales.
pub fn quantize_weights(w: &[f32], n: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    let mut q = vec![0i8; n * k];
    let mut scales = vec![0f32; n];
    for (r, row) in w.chunks_exact(k.max(1)).take(n).enumerate() {
        let amax = row.iter().fold(0f32, |m, &x| m.max(x.abs()));
        let s = if amax > 0.0 && amax.is_finite() {
            amax / 127.0
        } else {
            1.0
        };
        scales[r] = s;
        let inv = 1.0 / s;
        for (d, &x) in q[r * k..(r + 1) * k].iter_mut().zip(row) {
            *d = (x * inv).round().clamp(-127.0, 127.0) as i8;
        }
    }
    (q, scales)
}

/// A linear layer with s8 weights packed for the micro-kernels.
pub struct QuantLinear {
    k: usize,
    n: usize,
    /// K rounded up to a multiple of 4.
    kp: usize,
    /// `n_blocks * kp * NB` codes, block-major.
    packed: Vec<i8>,
    /// Per output channel (padded to the blocks): weight scale, code sum, bias.
    scale: Vec<f32>,
    colsum: Vec<i32>,
    bias: Vec<f32>,
}

impl QuantLinear {
    /// From the PyTorch layout: `w` row-major `[n, k]` (out, in), `bias` of length `n`.
    pub fn new(w: &[f32], bias: &[f32], n: usize, k: usize) -> Result<Self, KernelError> {
        if n == 0 || k == 0 || w.len() != n * k || bias.len() != n {
            return Err(KernelError::Shape(format!(
                "weights of length {} and bias of length {} do not make a [{n}, {k}] layer",
                w.len(),
                bias.len()
            )));
        }
        let (q, s) = quantize_weights(w, n, k);
        Ok(Self::from_quantized(&q, &s, bias, n, k))
    }

    /// From codes `q` (row-major `[n, k]`) and per-row scales.
    pub fn from_quantized(q: &[i8], scale: &[f32], bias: &[f32], n: usize, k: usize) -> Self {
        let kp = k.div_ceil(4) * 4;
        let np = n.div_ceil(NB) * NB;
        let mut packed = vec![0i8; np * kp];
        let mut colsum = vec![0i32; np];
        for c in 0..n {
            let (b, j) = (c / NB, c % NB);
            let base = b * kp * NB;
            for kk in 0..k {
                let v = q[c * k + kk];
                packed[base + (kk / 4) * NB * 4 + j * 4 + kk % 4] = v;
                colsum[c] += v as i32;
            }
        }
        let mut sc = scale[..n].to_vec();
        sc.resize(np, 0.0);
        let mut b = bias[..n].to_vec();
        b.resize(np, 0.0);
        Self {
            k,
            n,
            kp,
            packed,
            scale: sc,
            colsum,
            bias: b,
        }
    }

    pub fn in_dim(&self) -> usize {
        self.k
    }
    pub fn out_dim(&self) -> usize {
        self.n
    }

    /// `out[m, n] = act(dequant(q(x) Wq^T) + bias [+ residual])` for `x` row-major
    /// `[m, k]`, with the kernel `isa` (which must be [`Isa::available`]). Allocates
    /// the quantised input; see [`QuantLinear::forward_quantized`] to reuse one.
    pub fn forward(
        &self,
        isa: Isa,
        x: &[f32],
        m: usize,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        isa.check()?;
        let mut inp = QuantInput::new();
        inp.quantize(isa, x, m, self.k)?;
        self.forward_quantized(isa, &inp, residual, act, out)
    }

    /// As [`QuantLinear::forward`] from an input already quantised for `isa`.
    pub fn forward_quantized(
        &self,
        isa: Isa,
        inp: &QuantInput,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        self.check_io(isa.name(), isa.act_max(), inp, residual, out)?;
        isa.check()?;
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa.check()` passed: AVX2 was detected at run time.
            Isa::Avx2 => unsafe { x86::drive_avx2(self, inp, residual, act, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa.check()` passed: AVX2, FMA and AVX-VNNI were detected at
            // run time.
            Isa::AvxVnni => unsafe { vnni256::drive_avxvnni(self, inp, residual, act, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa.check()` passed: AVX512F/BW/VNNI were detected at run time.
            Isa::Avx512Vnni => unsafe { vnni512::drive_vnni(self, inp, residual, act, out, None) },
            _ => drive(self, inp, residual, act, out, micro_scalar),
        }
        Ok(())
    }

    /// As [`QuantLinear::forward_quantized`], and the 16-lane minimum and maximum of
    /// each output row into `lanes`, for quantising `out` as the next layer's input
    /// without scanning it ([`QuantInput::quantize_lanes`]): gathered by the
    /// AVX512-VNNI output stage as it writes (layers whose width is a multiple of
    /// 64), else by a scan of `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_quantized_lanes(
        &self,
        isa: Isa,
        inp: &QuantInput,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
        lanes: &mut RowLanes,
    ) -> Result<(), KernelError> {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512Vnni && self.n.is_multiple_of(NB) {
            self.check_io(isa.name(), isa.act_max(), inp, residual, out)?;
            isa.check()?;
            lanes.reset(inp.m, self.n);
            // SAFETY: `isa.check()` passed: AVX512F/BW/VNNI were detected at run
            // time; the shapes are checked, the width is a multiple of 64 and
            // `lanes` have a row per input row.
            unsafe { vnni512::drive_vnni(self, inp, residual, act, out, Some(lanes)) };
            return Ok(());
        }
        self.forward_quantized(isa, inp, residual, act, out)?;
        lanes.scan(out, inp.m, self.n);
        Ok(())
    }

    /// Whether the AVX-VNNI kernel's tile can run with EVEX `vpdpbusd` here
    /// (AVX2, FMA, AVX512F, AVX512VL, AVX512-VNNI): see
    /// [`QuantLinear::forward_quantized_avxvnni_evex`].
    #[doc(hidden)]
    pub fn avxvnni_evex_available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            has!("avx2") && has!("fma") && has!("avx512f") && has!("avx512vl") && has!("avx512vnni")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// As [`QuantLinear::forward_quantized`] with the [`Isa::AvxVnni`] kernel's
    /// code (6 rows x one 16-channel panel, 256-bit registers) but the EVEX
    /// encoding of `vpdpbusd` (AVX512-VNNI + AVX512VL), so that CPUs with AVX-512
    /// but no AVX-VNNI test and time the AVX-VNNI tile; `inp` quantised for
    /// [`Isa::AvxVnni`] (8-bit codes). For tests and `int8_speed`, not dispatch.
    #[doc(hidden)]
    pub fn forward_quantized_avxvnni_evex(
        &self,
        inp: &QuantInput,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        const NAME: &str = "avx512vnni-ymm";
        self.check_io(NAME, Isa::AvxVnni.act_max(), inp, residual, out)?;
        if !Self::avxvnni_evex_available() {
            let names: Vec<_> = Isa::available_all().iter().map(|i| i.name()).collect();
            return Err(KernelError::Unavailable(NAME, names.join(", ")));
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the features were detected just above; the shapes are checked.
        unsafe {
            vnni256::drive_avxvnni_evex(self, inp, residual, act, out)
        };
        Ok(())
    }

    /// An error unless `inp` (codes to `qmax`), `residual` and `out` fit this
    /// layer for the kernel `name`.
    fn check_io(
        &self,
        name: &str,
        qmax: i32,
        inp: &QuantInput,
        residual: Option<&[f32]>,
        out: &[f32],
    ) -> Result<(), KernelError> {
        let (m, n) = (inp.m, self.n);
        if inp.kp != self.kp
            || inp.qmax != qmax
            || out.len() != m * n
            || residual.is_some_and(|r| r.len() != m * n)
        {
            return Err(KernelError::Shape(format!(
                "input of {m} rows (padded width {}, codes to {}) and output of {} values \
                 for a [{n}, {}] layer and kernel {name}",
                inp.kp,
                inp.qmax,
                out.len(),
                self.k,
            )));
        }
        Ok(())
    }

    /// Dequantise one `mr x cols` tile (rows from `r0`, channels from `c0`) into
    /// `out`, add the bias and the residual, apply the activation.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn output_tile(
        &self,
        acc: &Tile,
        (r0, mr): (usize, usize),
        (c0, cols): (usize, usize),
        inp: &QuantInput,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) {
        let n = self.n;
        let sw = &self.scale[c0..c0 + cols];
        let cs = &self.colsum[c0..c0 + cols];
        let b = &self.bias[c0..c0 + cols];
        for (i, a) in acc.iter().enumerate().take(mr) {
            let r = r0 + i;
            let (sx, z) = (inp.scale[r], inp.zero[r]);
            let o = &mut out[r * n + c0..r * n + c0 + cols];
            for ((((d, &a), &cs), &sw), &b) in o.iter_mut().zip(a).zip(cs).zip(sw).zip(b) {
                *d = dequant(a, z, cs, sx, sw, b);
            }
            if let Some(res) = residual {
                for (d, &v) in o.iter_mut().zip(&res[r * n + c0..r * n + c0 + cols]) {
                    *d += v;
                }
            }
            // Inline (not `act.apply`, a call per 64 values that reloads its
            // constants): the tile row is still in L1.
            match act {
                Act::None => {}
                Act::Relu => o.iter_mut().for_each(|x| *x = x.max(0.0)),
                Act::GeluErf => o.iter_mut().for_each(|x| *x = crate::act::gelu_erf(*x)),
                Act::GeluPoly => o.iter_mut().for_each(|x| *x = crate::act::gelu_poly(*x)),
            }
        }
    }
}

/// Every tile of the product: the 64-channel blocks (outer: one block's weights stay
/// in cache) and in each the tiles of up to [`MR`] rows, as
/// `tile(block, codes of the tile's rows, (r0, mr), (c0, cols))`.
#[inline(always)]
fn for_each_tile(
    lin: &QuantLinear,
    inp: &QuantInput,
    mut tile: impl FnMut(&[i8], &[u8], (usize, usize), (usize, usize)),
) {
    let (m, n, kp) = (inp.m, lin.n, lin.kp);
    for (blk, w) in lin.packed.chunks_exact(kp * NB).enumerate() {
        let c0 = blk * NB;
        let cols = NB.min(n - c0);
        for r0 in (0..m).step_by(MR) {
            let mr = MR.min(m - r0);
            tile(w, &inp.codes[r0 * kp..(r0 + mr) * kp], (r0, mr), (c0, cols));
        }
    }
}

/// The product with the micro-kernel `micro(codes of mr rows, mr, block, tile)` and
/// the shared output stage; inlined into each kernel's target-feature function so
/// that the output stage is vectorised for that instruction set.
#[inline(always)]
fn drive(
    lin: &QuantLinear,
    inp: &QuantInput,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
    mut micro: impl FnMut(&[u8], usize, &[i8], &mut Tile),
) {
    let mut acc: Tile = [[0; NB]; MR];
    for_each_tile(lin, inp, |w, a, (r0, mr), (c0, cols)| {
        micro(a, mr, w, &mut acc);
        lin.output_tile(&acc, (r0, mr), (c0, cols), inp, residual, act, out);
    });
}

/// One output value: `s_x s_w (acc - z_x colsum) + b` (a multiply, then an add).
#[inline(always)]
pub fn dequant(acc: i32, z: i32, colsum: i32, sx: f32, sw: f32, b: f32) -> f32 {
    (acc - z * colsum) as f32 * (sx * sw) + b
}

/// The portable micro-kernel: `acc[r][j] = sum_k a[r][k] w[k][j]` for `mr` rows of
/// `kp` codes and one packed block.
fn micro_scalar(a: &[u8], mr: usize, w: &[i8], acc: &mut Tile) {
    let kp = a.len() / mr;
    for (r, acc_r) in acc.iter_mut().enumerate().take(mr) {
        let mut s = [0i32; NB];
        let ar = &a[r * kp..(r + 1) * kp];
        for (av, wk) in ar.chunks_exact(4).zip(w.chunks_exact(NB * 4)) {
            for (sj, wj) in s.iter_mut().zip(wk.chunks_exact(4)) {
                *sj += av
                    .iter()
                    .zip(wj)
                    .map(|(&x, &y)| x as i32 * y as i32)
                    .sum::<i32>();
            }
        }
        *acc_r = s;
    }
}

/// Reference: the result with activation codes in `0..=qmax`, from unpacked codes
/// with plain loops (for tests).
#[allow(clippy::too_many_arguments)]
pub fn reference_forward(
    qmax: i32,
    q: &[i8],
    wscale: &[f32],
    bias: &[f32],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    let mut xq = vec![0u8; k];
    for r in 0..m {
        let (sx, z) = quantize_row(&x[r * k..(r + 1) * k], &mut xq, qmax);
        for c in 0..n {
            let wr = &q[c * k..(c + 1) * k];
            let acc: i32 = xq.iter().zip(wr).map(|(&a, &b)| a as i32 * b as i32).sum();
            let colsum: i32 = wr.iter().map(|&v| v as i32).sum();
            let mut y = dequant(acc, z, colsum, sx, wscale[c], bias[c]);
            if let Some(res) = residual {
                y += res[r * n + c];
            }
            out[r * n + c] = y;
        }
        act.apply(&mut out[r * n..(r + 1) * n]);
    }
    out
}
