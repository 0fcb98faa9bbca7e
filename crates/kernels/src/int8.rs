//! Int8 linear layers: `y = act(s_x s_w (q(x) · Wq^T - z_x colsum(Wq)) + b [+ residual])`.
//!
//! * Weights: per output channel (row of the PyTorch `[out, in]` matrix), symmetric,
//!   s8 in -127..=127, `s_w = max|w| / 127`; quantised once at load and packed in
//!   panels of [`NR`] = 16 output channels: `[k/4][16 channels][4 consecutive k]`,
//!   K zero-padded to a multiple of 4 and N to a multiple of 16.
//! * Activations: per row, asymmetric, **7-bit** u8 in 0..=127 with a zero point,
//!   quantised at run time. Seven bits keep AVX2's `vpmaddubsw` exact: a pair of
//!   products is at most 2 * 127 * 127 = 32,258 < 32,767, so its i16 saturation never
//!   triggers. The VNNI and portable kernels use the same 7-bit input, so every path
//!   computes the same integers and, with one shared output stage, the same bits.
//! * Output stage (per 16-column tile, still in cache): dequantise, add the bias,
//!   optionally a residual, then the activation.
use crate::act::Act;
use std::sync::OnceLock;

/// Output channels per packed panel (one zmm of i32, two ymm).
pub const NR: usize = 16;
/// Rows per micro-kernel call.
const MR: usize = 4;
/// Panels per column block: weights of one block stay in L2 while the rows stream.
const PANELS_PER_BLOCK: usize = 16;
/// Largest activation code: 7 bits (see the module doc).
pub const QMAX_ACT: i32 = 127;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("int8 kernel: {0}")]
    Shape(String),
    #[error(
        "int8 kernel '{0}' requested (BERTFLOW_INT8_KERNEL) but this CPU lacks it; available: {1}"
    )]
    Unavailable(&'static str, String),
    #[error("BERTFLOW_INT8_KERNEL={0}: expected auto, scalar, avx2 or avx512vnni")]
    BadName(String),
}

/// Instruction set of the integer micro-kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust (any CPU).
    Scalar,
    /// `vpmaddubsw` + `vpmaddwd` on 256-bit registers.
    Avx2,
    /// `vpdpbusd` on 512-bit registers.
    Avx512Vnni,
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every kernel this CPU can run.
    pub fn available_all() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.available()).collect()
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Isa {
        [Isa::Avx512Vnni, Isa::Avx2]
            .into_iter()
            .find(|i| i.available())
            .unwrap_or(Isa::Scalar)
    }

    /// `BERTFLOW_INT8_KERNEL` (auto, scalar, avx2, avx512vnni), else the best;
    /// an error when the named kernel is unknown or not supported by this CPU.
    pub fn from_env() -> Result<Isa, KernelError> {
        match std::env::var("BERTFLOW_INT8_KERNEL") {
            Ok(s) if !s.is_empty() && s != "auto" => {
                let isa = Isa::ALL
                    .into_iter()
                    .find(|i| i.name() == s)
                    .ok_or(KernelError::BadName(s))?;
                if !isa.available() {
                    let names: Vec<_> = Isa::available_all().iter().map(|i| i.name()).collect();
                    return Err(KernelError::Unavailable(isa.name(), names.join(", ")));
                }
                Ok(isa)
            }
            _ => Ok(Isa::best()),
        }
    }

    /// [`Isa::from_env`], read once per process.
    pub fn selected() -> Result<Isa, KernelError> {
        static SEL: OnceLock<Result<Isa, String>> = OnceLock::new();
        match SEL.get_or_init(|| Isa::from_env().map_err(|e| e.to_string())) {
            Ok(i) => Ok(*i),
            Err(_) => Isa::from_env(),
        }
    }
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

/// Asymmetric 7-bit quantisation of one activation row into `out` (len >= x.len(),
/// the rest set to 0): returns (scale, zero point) with x ~ scale * (q - zero).
pub fn quantize_row(x: &[f32], out: &mut [u8]) -> (f32, i32) {
    let (lo, hi) = x
        .iter()
        .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let range = hi - lo;
    let s = if range > 0.0 && range.is_finite() {
        range / QMAX_ACT as f32
    } else {
        1.0
    };
    let inv = 1.0 / s;
    let z = (-lo * inv).round().clamp(0.0, QMAX_ACT as f32);
    for (d, &v) in out.iter_mut().zip(x) {
        *d = (v * inv + z).round().clamp(0.0, QMAX_ACT as f32) as u8;
    }
    out[x.len()..].fill(0);
    (s, z as i32)
}

/// A linear layer with s8 weights packed for the micro-kernels.
pub struct QuantLinear {
    k: usize,
    n: usize,
    /// K rounded up to a multiple of 4.
    kp: usize,
    /// `n_panels * kp * NR` codes, panel-major.
    panels: Vec<i8>,
    /// Per output channel (padded to the panels): weight scale, code sum, bias.
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
        let np = n.div_ceil(NR) * NR;
        let mut panels = vec![0i8; np * kp];
        let mut colsum = vec![0i32; np];
        for c in 0..n {
            let (p, j) = (c / NR, c % NR);
            let base = p * kp * NR;
            for kk in 0..k {
                let v = q[c * k + kk];
                panels[base + (kk / 4) * NR * 4 + j * 4 + kk % 4] = v;
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
            panels,
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
    /// `[m, k]`, with the kernel `isa` (which must be [`Isa::available`]).
    pub fn forward(
        &self,
        isa: Isa,
        x: &[f32],
        m: usize,
        residual: Option<&[f32]>,
        act: Act,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        let (k, n) = (self.k, self.n);
        if x.len() != m * k || out.len() != m * n || residual.is_some_and(|r| r.len() != m * n) {
            return Err(KernelError::Shape(format!(
                "x has {} values, out {}, for m = {m}, k = {k}, n = {n}",
                x.len(),
                out.len()
            )));
        }
        if !isa.available() {
            let names: Vec<_> = Isa::available_all().iter().map(|i| i.name()).collect();
            return Err(KernelError::Unavailable(isa.name(), names.join(", ")));
        }
        let kp = self.kp;
        let mut xq = vec![0u8; m * kp];
        let mut xs = vec![0f32; m];
        let mut xz = vec![0i32; m];
        for r in 0..m {
            (xs[r], xz[r]) = quantize_row(&x[r * k..(r + 1) * k], &mut xq[r * kp..(r + 1) * kp]);
        }
        let n_panels = self.colsum.len() / NR;
        let mut acc = [[0i32; NR]; MR];
        for pb in (0..n_panels).step_by(PANELS_PER_BLOCK) {
            let pe = (pb + PANELS_PER_BLOCK).min(n_panels);
            for r0 in (0..m).step_by(MR) {
                let mr = MR.min(m - r0);
                let a = &xq[r0 * kp..(r0 + mr) * kp];
                for p in pb..pe {
                    let w = &self.panels[p * kp * NR..(p + 1) * kp * NR];
                    micro(isa, a, mr, kp, w, &mut acc);
                    self.output_stage(&acc, r0, mr, p, &xs, &xz, residual, out);
                }
                let (c0, c1) = (pb * NR, (pe * NR).min(n));
                for r in r0..r0 + mr {
                    act.apply(&mut out[r * n + c0..r * n + c1]);
                }
            }
        }
        Ok(())
    }

    /// Dequantise one `mr x 16` tile of accumulators into `out` (+ bias, residual).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn output_stage(
        &self,
        acc: &[[i32; NR]; MR],
        r0: usize,
        mr: usize,
        p: usize,
        xs: &[f32],
        xz: &[i32],
        residual: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let n = self.n;
        let c0 = p * NR;
        let cols = NR.min(n - c0);
        for (i, row) in acc.iter().enumerate().take(mr) {
            let r = r0 + i;
            let o = &mut out[r * n + c0..r * n + c0 + cols];
            for (j, d) in o.iter_mut().enumerate() {
                let c = c0 + j;
                *d = dequant(
                    row[j],
                    xz[r],
                    self.colsum[c],
                    xs[r],
                    self.scale[c],
                    self.bias[c],
                );
            }
            if let Some(res) = residual {
                for (d, &v) in o.iter_mut().zip(&res[r * n + c0..r * n + c0 + cols]) {
                    *d += v;
                }
            }
        }
    }
}

/// One output value: `s_x s_w (acc - z_x colsum) + b`.
#[inline(always)]
pub fn dequant(acc: i32, z: i32, colsum: i32, sx: f32, sw: f32, b: f32) -> f32 {
    (acc - z * colsum) as f32 * (sx * sw) + b
}

/// `acc[r][j] = sum_k a[r][k] w[k][j]` over one panel; `a` holds `mr` rows of `kp`
/// codes (kp a multiple of 4), `w` one panel (`kp * NR` codes).
fn micro(isa: Isa, a: &[u8], mr: usize, kp: usize, w: &[i8], acc: &mut [[i32; NR]; MR]) {
    debug_assert!(a.len() == mr * kp && w.len() == kp * NR && kp.is_multiple_of(4) && mr <= MR);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `forward` checked `isa.available()` (AVX2 detected at run time),
            // and the slice lengths asserted above are what the kernel reads.
            unsafe { x86::micro_avx2(a, mr, kp, w, acc) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            // SAFETY: as above, with AVX512F/BW/VNNI detected at run time.
            unsafe { x86::micro_vnni(a, mr, kp, w, acc) }
        }
        _ => micro_scalar(a, mr, kp, w, acc),
    }
}

/// The portable micro-kernel.
fn micro_scalar(a: &[u8], mr: usize, kp: usize, w: &[i8], acc: &mut [[i32; NR]; MR]) {
    for (r, acc_r) in acc.iter_mut().enumerate().take(mr) {
        let mut s = [0i32; NR];
        let ar = &a[r * kp..(r + 1) * kp];
        for (k4, wk) in w.chunks_exact(NR * 4).enumerate() {
            let av = &ar[k4 * 4..k4 * 4 + 4];
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// AVX2 micro-kernel: per 4 k, broadcast 4 activation codes of each row, multiply
    /// with 2 x 8 columns x 4 weights (`vpmaddubsw`, exact for 7-bit activations),
    /// widen pairs to i32 (`vpmaddwd` with ones) and accumulate.
    ///
    /// # Safety
    /// The CPU must support AVX2; `a.len() >= mr * kp`, `w.len() >= kp * NR`,
    /// `kp.is_multiple_of(4)`, `mr <= MR`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn micro_avx2(
        a: &[u8],
        mr: usize,
        kp: usize,
        w: &[i8],
        acc: &mut [[i32; NR]; MR],
    ) {
        assert!(a.len() >= mr * kp && w.len() >= kp * NR && kp.is_multiple_of(4) && mr <= MR);
        let ones = _mm256_set1_epi16(1);
        let mut c = [[_mm256_setzero_si256(); 2]; MR];
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        for k4 in 0..kp / 4 {
            // SAFETY: k4 * 64 + 64 <= kp * NR = w.len() (asserted above); loadu has no
            // alignment requirement.
            let (w0, w1) = unsafe {
                (
                    _mm256_loadu_si256(wp.add(k4 * 64) as *const __m256i),
                    _mm256_loadu_si256(wp.add(k4 * 64 + 32) as *const __m256i),
                )
            };
            for (r, cr) in c.iter_mut().enumerate().take(mr) {
                // SAFETY: r * kp + k4 * 4 + 4 <= mr * kp <= a.len(); unaligned read.
                let v = unsafe { (ap.add(r * kp + k4 * 4) as *const i32).read_unaligned() };
                let av = _mm256_set1_epi32(v);
                cr[0] =
                    _mm256_add_epi32(cr[0], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w0), ones));
                cr[1] =
                    _mm256_add_epi32(cr[1], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w1), ones));
            }
        }
        for (r, cr) in c.iter().enumerate().take(mr) {
            // SAFETY: acc[r] is [i32; 16]: two unaligned 8-lane stores fit exactly.
            unsafe {
                let p = acc[r].as_mut_ptr() as *mut __m256i;
                _mm256_storeu_si256(p, cr[0]);
                _mm256_storeu_si256(p.add(1), cr[1]);
            }
        }
    }

    /// AVX512-VNNI micro-kernel: `vpdpbusd` of 4 broadcast activation codes with 16
    /// columns x 4 weights per row.
    ///
    /// # Safety
    /// The CPU must support AVX512F, AVX512BW and AVX512-VNNI; same slice contract
    /// as [`micro_avx2`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn micro_vnni(
        a: &[u8],
        mr: usize,
        kp: usize,
        w: &[i8],
        acc: &mut [[i32; NR]; MR],
    ) {
        assert!(a.len() >= mr * kp && w.len() >= kp * NR && kp.is_multiple_of(4) && mr <= MR);
        let mut c = [_mm512_setzero_si512(); MR];
        let wp = w.as_ptr();
        let ap = a.as_ptr();
        for k4 in 0..kp / 4 {
            // SAFETY: k4 * 64 + 64 <= w.len(); unaligned load.
            let wv = unsafe { _mm512_loadu_si512(wp.add(k4 * 64) as *const _) };
            for (r, cr) in c.iter_mut().enumerate().take(mr) {
                // SAFETY: r * kp + k4 * 4 + 4 <= a.len(); unaligned read.
                let v = unsafe { (ap.add(r * kp + k4 * 4) as *const i32).read_unaligned() };
                *cr = _mm512_dpbusd_epi32(*cr, _mm512_set1_epi32(v), wv);
            }
        }
        for (r, cr) in c.iter().enumerate().take(mr) {
            // SAFETY: acc[r] is [i32; 16], one unaligned 16-lane store.
            unsafe { _mm512_storeu_si512(acc[r].as_mut_ptr() as *mut _, *cr) };
        }
    }
}

/// Reference: the same result from unpacked codes with plain loops (for tests).
#[allow(clippy::too_many_arguments)]
pub fn reference_forward(
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
        let (sx, z) = quantize_row(&x[r * k..(r + 1) * k], &mut xq);
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
