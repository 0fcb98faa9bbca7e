//! Activation quantisation: per row, asymmetric u8 with a zero point, from the
//! row's minimum and maximum. The minimum and maximum are gathered in 16 lanes
//! ([`RowLanes`]), either by a scan of the row or, for the input of the next
//! layer, by the AVX512-VNNI output stage as it writes the row (then the scan is
//! skipped); either way the codes are the same bit for bit.
#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{Isa, KernelError, QMAX_8BIT};

/// Lanes of the running minimum and maximum.
pub(super) const LANES: usize = 16;

/// `t` clamped to `0..=q` (NaN to 0) and rounded to the nearest integer, ties to
/// even (adding 1.5 * 2^23 leaves the integer in the low mantissa bits): plain
/// float adds, compares and bit masks, so the loops vectorise.
#[inline(always)]
fn round_code(t: f32, q: f32) -> u8 {
    let t = if t > 0.0 { t } else { 0.0 };
    let t = if t < q { t } else { q };
    ((t + 12_582_912.0).to_bits() & 0xff) as u8
}

/// The minimum and maximum of `x`'s whole 16-value chunks in 16 lanes (lane `j`
/// over `x[16 c + j]`), each lane starting at 0 and replaced only by a strictly
/// smaller (larger) value, so NaN and -0 never enter and the order of the chunks
/// does not matter.
#[inline(always)]
pub(super) fn row_lanes(x: &[f32]) -> ([f32; LANES], [f32; LANES]) {
    let (mut lo_l, mut hi_l) = ([0f32; LANES], [0f32; LANES]);
    for c in x.chunks_exact(LANES) {
        for ((lo, hi), &v) in lo_l.iter_mut().zip(&mut hi_l).zip(c) {
            *lo = if v < *lo { v } else { *lo };
            *hi = if v > *hi { v } else { *hi };
        }
    }
    (lo_l, hi_l)
}

/// Asymmetric quantisation of one activation row to codes in `0..=qmax` (127 or
/// 255) into `out` (len >= x.len(), the rest set to 0): returns (scale, zero point)
/// with x ~ scale * (q - zero).
#[inline(always)]
pub fn quantize_row(x: &[f32], out: &mut [u8], qmax: i32) -> (f32, i32) {
    let (lo_l, hi_l) = row_lanes(x);
    quantize_row_from(x, out, qmax, &lo_l, &hi_l)
}

/// [`quantize_row`] with the lanes of `x` already gathered ([`row_lanes`]).
#[inline(always)]
fn quantize_row_from(
    x: &[f32],
    out: &mut [u8],
    qmax: i32,
    lo_l: &[f32; LANES],
    hi_l: &[f32; LANES],
) -> (f32, i32) {
    let tail = &x[x.len() / LANES * LANES..];
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in lo_l.iter().chain(tail) {
        lo = if v < lo { v } else { lo };
    }
    for &v in hi_l.iter().chain(tail) {
        hi = if v > hi { v } else { hi };
    }
    let q = qmax.clamp(1, QMAX_8BIT) as f32;
    let range = hi - lo;
    let s = if range > 0.0 && range.is_finite() {
        range / q
    } else {
        1.0
    };
    let inv = 1.0 / s;
    let z = (-lo * inv).round().clamp(0.0, q);
    for (d, &v) in out.iter_mut().zip(x) {
        *d = round_code(v * inv + z, q);
    }
    out[x.len()..].fill(0);
    (s, z as i32)
}

/// The 16-lane minimum and maximum of each row of a layer's output (as
/// [`row_lanes`]), kept for quantising that output as the next layer's input
/// without scanning it again ([`QuantInput::quantize_lanes`]). Filled by
/// [`super::QuantLinear::forward_quantized_lanes`].
#[derive(Default, Debug)]
pub struct RowLanes {
    pub(super) lo: Vec<[f32; LANES]>,
    pub(super) hi: Vec<[f32; LANES]>,
    /// Rows, and values per row, of the output they describe.
    pub(super) m: usize,
    pub(super) k: usize,
}

impl RowLanes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every lane of `m` rows of `k` values at 0, the lanes' start.
    pub(super) fn reset(&mut self, m: usize, k: usize) {
        self.lo.clear();
        self.lo.resize(m, [0.0; LANES]);
        self.hi.clear();
        self.hi.resize(m, [0.0; LANES]);
        (self.m, self.k) = (m, k);
    }

    /// The lanes of `x` (`m` rows of `k`), by a scan.
    pub(super) fn scan(&mut self, x: &[f32], m: usize, k: usize) {
        self.reset(m, k);
        for ((row, lo), hi) in x.chunks_exact(k).zip(&mut self.lo).zip(&mut self.hi) {
            (*lo, *hi) = row_lanes(row);
        }
    }
}

/// A layer input quantised for one kernel: codes (rows padded to a multiple of 4
/// with zeros), per-row scales and zero points. Keep one per worker and reuse it:
/// quantising into it allocates only when it has to grow.
#[derive(Default, Debug, PartialEq)]
pub struct QuantInput {
    pub(super) codes: Vec<u8>,
    pub(super) scale: Vec<f32>,
    pub(super) zero: Vec<i32>,
    pub(super) m: usize,
    pub(super) kp: usize,
    pub(super) qmax: i32,
}

impl QuantInput {
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Quantise `x` (row-major `[m, k]`) for the kernel `isa`.
    pub fn quantize(&mut self, isa: Isa, x: &[f32], m: usize, k: usize) -> Result<(), KernelError> {
        self.quantize_with(isa, x, m, k, None)
    }

    /// As [`QuantInput::quantize`], with the minimum and maximum of each row taken
    /// from `lanes` (gathered when `x` was written) instead of a scan of `x`; the
    /// same codes. An error if `lanes` describe another shape.
    pub fn quantize_lanes(
        &mut self,
        isa: Isa,
        x: &[f32],
        m: usize,
        k: usize,
        lanes: &RowLanes,
    ) -> Result<(), KernelError> {
        if (lanes.m, lanes.k) != (m, k) || lanes.lo.len() != m || lanes.hi.len() != m {
            return Err(KernelError::Shape(format!(
                "row ranges of {} rows of {} for an input of {m} rows of {k}",
                lanes.m, lanes.k
            )));
        }
        self.quantize_with(isa, x, m, k, Some(lanes))
    }

    fn quantize_with(
        &mut self,
        isa: Isa,
        x: &[f32],
        m: usize,
        k: usize,
        lanes: Option<&RowLanes>,
    ) -> Result<(), KernelError> {
        if k == 0 || x.len() != m * k {
            return Err(KernelError::Shape(format!(
                "{} input values are not {m} rows of {k}",
                x.len()
            )));
        }
        let kp = k.div_ceil(4) * 4;
        let qmax = isa.act_max();
        self.codes.resize(m * kp, 0);
        self.scale.resize(m, 0.0);
        self.zero.resize(m, 0);
        (self.m, self.kp, self.qmax) = (m, kp, qmax);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX512F was detected just above, the only requirement.
            unsafe { x86::quantize_rows_avx512(self, x, k, lanes) };
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected just above, the only requirement.
            unsafe { x86::quantize_rows_avx2(self, x, k, lanes) };
            return Ok(());
        }
        quantize_rows(self, x, k, lanes);
        Ok(())
    }
}

/// Every row of `x` into `inp` (sized by [`QuantInput::quantize`]), the rows'
/// lanes from `lanes` (the caller checked their shape) or a scan.
#[inline(always)]
pub(super) fn quantize_rows(inp: &mut QuantInput, x: &[f32], k: usize, lanes: Option<&RowLanes>) {
    let (kp, qmax) = (inp.kp, inp.qmax);
    let rows = x
        .chunks_exact(k)
        .zip(inp.codes.chunks_exact_mut(kp))
        .zip(inp.scale.iter_mut().zip(&mut inp.zero));
    match lanes {
        Some(l) => {
            for (((row, codes), (s, z)), (lo, hi)) in rows.zip(l.lo.iter().zip(&l.hi)) {
                (*s, *z) = quantize_row_from(row, codes, qmax, lo, hi);
            }
        }
        None => {
            for ((row, codes), (s, z)) in rows {
                (*s, *z) = quantize_row(row, codes, qmax);
            }
        }
    }
}
