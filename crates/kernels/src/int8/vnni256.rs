//! The AVX-VNNI micro-kernel: `vpdpbusd` on 256-bit registers, for CPUs with
//! AVX-VNNI but no AVX-512 (Alder Lake and later client cores, Zen 5 client).
//!
//! Those CPUs have 16 ymm registers, so the tile is [`MR`] = 6 rows x one
//! 16-channel panel: 12 accumulators, the panel's 2 weight registers (16 channels x
//! 4 k = 64 bytes, contiguous in the packed block) and 1 broadcast of a row's 4
//! activation codes; the block's 4 panels are visited one after the other (the
//! AVX2 kernel's loop shape). Activation codes are 8-bit: `vpdpbusd` sums u8 x s8
//! products in i32 without saturation.
//!
//! The tile is written once, generic over the dot-product instruction ([`Dot`]):
//! [`Vex`] is AVX-VNNI's `{vex} vpdpbusd`, [`Evex`] the same operation in its
//! AVX512-VNNI + AVX512VL encoding. The EVEX instantiation runs the very same tile
//! code on CPUs that have AVX-512 but not AVX-VNNI (Zen 4, Xeons), where it is
//! tested bit for bit and timed (`int8_speed`, `avx512vnni-ymm`).
use super::{drive, Act, QuantInput, QuantLinear, Tile, MR, NB, NR};
use std::arch::x86_64::*;

/// Bytes of one K step (4 consecutive k) of a packed block: 64 channels x 4.
const KSTEP: usize = NB * 4;

/// One u8 x s8 dot-product-accumulate on 8 i32 lanes: lane i of the result is
/// `c[i] + sum_{t<4} a[4i + t] (u8) * b[4i + t] (s8)`, exact in i32.
pub(super) trait Dot {
    /// # Safety
    /// The CPU must support the instruction; called only inside a function that
    /// enables its target features (so that it inlines to one instruction).
    unsafe fn dpbusd(c: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX-VNNI (VEX-encoded `vpdpbusd`).
pub(super) struct Vex;
/// AVX512-VNNI + AVX512VL (EVEX-encoded `vpdpbusd` on ymm).
pub(super) struct Evex;

impl Dot for Vex {
    #[inline(always)]
    unsafe fn dpbusd(c: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the caller's contract: AVX-VNNI is enabled where this inlines.
        unsafe { _mm256_dpbusd_avx_epi32(c, a, b) }
    }
}

impl Dot for Evex {
    #[inline(always)]
    unsafe fn dpbusd(c: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the caller's contract: AVX512-VNNI and AVX512VL are enabled
        // where this inlines.
        unsafe { _mm256_dpbusd_epi32(c, a, b) }
    }
}

/// The int8 product with the AVX-VNNI micro-kernel.
///
/// # Safety
/// The CPU must support AVX2, FMA and AVX-VNNI; `inp` and `out` fit `lin`
/// (checked by the caller).
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(super) unsafe fn drive_avxvnni(
    lin: &QuantLinear,
    inp: &QuantInput,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
) {
    drive(lin, inp, residual, act, out, |a, mr, w, acc| {
        // SAFETY: AVX2 and AVX-VNNI are enabled in this function (the closure
        // inherits them); `a` and `w` are drive's slices, as `block` asks.
        unsafe { block::<Vex>(a, mr, w, acc) }
    })
}

/// The AVX-VNNI kernel's tile with EVEX `vpdpbusd` (the same code as
/// [`drive_avxvnni`] but for the encoding of the instruction).
///
/// # Safety
/// The CPU must support AVX2, FMA, AVX512F, AVX512VL and AVX512-VNNI; `inp` and
/// `out` fit `lin` (checked by the caller).
#[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
pub(super) unsafe fn drive_avxvnni_evex(
    lin: &QuantLinear,
    inp: &QuantInput,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
) {
    drive(lin, inp, residual, act, out, |a, mr, w, acc| {
        // SAFETY: AVX2, AVX512-VNNI and AVX512VL are enabled in this function (the
        // closure inherits them); `a` and `w` are drive's slices, as `block` asks.
        unsafe { block::<Evex>(a, mr, w, acc) }
    })
}

/// One block: the tile of `mr` rows over each of the 4 panels in turn.
///
/// # Safety
/// As [`micro`]: AVX2 and `D`'s instruction enabled in the caller; `a` holds `mr`
/// (1..=MR) rows of `kp` codes, `kp` a positive multiple of 4, and `w` one packed
/// block of `kp * NB` codes.
#[inline(always)]
unsafe fn block<D: Dot>(a: &[u8], mr: usize, w: &[i8], acc: &mut Tile) {
    let kp = a.len() / mr;
    for j in 0..NB / NR {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match mr {
                1 => micro::<D, 1>(a, kp, w, acc, j),
                2 => micro::<D, 2>(a, kp, w, acc, j),
                3 => micro::<D, 3>(a, kp, w, acc, j),
                4 => micro::<D, 4>(a, kp, w, acc, j),
                5 => micro::<D, 5>(a, kp, w, acc, j),
                _ => micro::<D, 6>(a, kp, w, acc, j),
            }
        }
    }
}

/// `R` rows x panel `j` (16 channels) in `2 R` ymm accumulators: per 4 k, load the
/// panel's 16 channels x 4 weights (2 ymm), broadcast each row's 4 activation codes
/// and `vpdpbusd` into the row's 2 accumulators; store into
/// `acc[r][16 j..16 j + 16]`.
///
/// # Safety
/// The CPU must support AVX2 and `D`'s instruction, and the caller must enable
/// them (this function is always inlined into it); `a.len() >= R * kp`, `kp` a
/// positive multiple of 4, `w.len() >= kp * NB`, `R <= MR`, `j < 4` (asserted).
#[inline(always)]
unsafe fn micro<D: Dot, const R: usize>(a: &[u8], kp: usize, w: &[i8], acc: &mut Tile, j: usize) {
    assert!(
        R <= MR
            && kp.is_multiple_of(4)
            && kp > 0
            && a.len() >= R * kp
            && w.len() >= kp * NB
            && j < NB / NR
    );
    // SAFETY: the instructions are enabled in the caller (contract). Reads: weights
    // at j * 64 + k4 * KSTEP + 0..64 <= (kp / 4 - 1) * KSTEP + KSTEP = kp * NB <=
    // w.len(); codes at r * kp + k4 * 4 + 0..4 <= R * kp <= a.len() (asserted);
    // loadu and read_unaligned need no alignment. Stores: acc[r][16 j..16 j + 16]
    // is 16 i32, two 8-lane stores.
    unsafe {
        let mut c = [[_mm256_setzero_si256(); 2]; R];
        let (ap, wp) = (a.as_ptr(), w.as_ptr().add(j * NR * 4));
        for k4 in 0..kp / 4 {
            let p = wp.add(k4 * KSTEP);
            let w0 = _mm256_loadu_si256(p as *const __m256i);
            let w1 = _mm256_loadu_si256(p.add(32) as *const __m256i);
            for (r, cr) in c.iter_mut().enumerate() {
                let v = (ap.add(r * kp + k4 * 4) as *const i32).read_unaligned();
                let av = _mm256_set1_epi32(v);
                cr[0] = D::dpbusd(cr[0], av, w0);
                cr[1] = D::dpbusd(cr[1], av, w1);
            }
        }
        for (cr, dst) in c.iter().zip(acc.iter_mut()) {
            let p = dst[j * NR..(j + 1) * NR].as_mut_ptr() as *mut __m256i;
            _mm256_storeu_si256(p, cr[0]);
            _mm256_storeu_si256(p.add(1), cr[1]);
        }
    }
}
