//! x86-64 quantisation and the AVX2 micro-kernel with its target-feature driver; the
//! AVX-VNNI (256-bit) kernel is in `vnni256.rs`, the AVX512-VNNI one in `vnni512.rs`.
//!
//! Each driver is [`super::drive`] compiled with the kernel's features, so the
//! output stage and the micro-kernel calls inline and vectorise for that CPU.
use super::{drive, quantize_rows, Act, QuantInput, QuantLinear, RowLanes, Tile, MR, NB, NR};
use std::arch::x86_64::*;

/// Bytes of one K step (4 consecutive k) of a packed block: 64 channels x 4.
const KSTEP: usize = NB * 4;

/// [`super::quantize_rows`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_rows_avx2(
    inp: &mut QuantInput,
    x: &[f32],
    k: usize,
    lanes: Option<&RowLanes>,
) {
    quantize_rows(inp, x, k, lanes)
}

/// [`super::quantize_rows`] compiled for AVX-512 (the same codes: plain float
/// compares, adds and bit masks).
///
/// # Safety
/// The CPU must support AVX512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn quantize_rows_avx512(
    inp: &mut QuantInput,
    x: &[f32],
    k: usize,
    lanes: Option<&RowLanes>,
) {
    quantize_rows(inp, x, k, lanes)
}

/// The int8 product with the AVX2 micro-kernel.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `inp` and `out` fit `lin` (checked by the
/// caller).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn drive_avx2(
    lin: &QuantLinear,
    inp: &QuantInput,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
) {
    drive(lin, inp, residual, act, out, |a, mr, w, acc| {
        let kp = a.len() / mr;
        // Rows in groups of at most 3: 6 ymm accumulators per 16-channel panel.
        for j in 0..NB / NR {
            let mut r0 = 0;
            while r0 < mr {
                let g = (mr - r0).min(3);
                let rows = &a[r0 * kp..(r0 + g) * kp];
                let wj = &w[j * NR * 4..];
                // SAFETY: AVX2 is enabled in this function; `rows` holds g rows of
                // kp codes and `wj` the rest of the block from panel j on, which
                // is what the kernel's contract asks.
                unsafe {
                    match g {
                        1 => micro_avx2::<1>(rows, kp, wj, acc, r0, j),
                        2 => micro_avx2::<2>(rows, kp, wj, acc, r0, j),
                        _ => micro_avx2::<3>(rows, kp, wj, acc, r0, j),
                    }
                }
                r0 += g;
            }
        }
    })
}

/// AVX2 micro-kernel for `R` rows x one 16-channel panel `j`: per 4 k, broadcast 4
/// activation codes of each row, multiply with 16 channels x 4 weights
/// (`vpmaddubsw`, exact for 7-bit codes), widen pairs to i32 (`vpmaddwd` with
/// ones) and accumulate; store into `acc[r0 + r][16 j..16 j + 16]`.
///
/// # Safety
/// The CPU must support AVX2; `a.len() >= R * kp`, `kp` a multiple of 4,
/// `w.len() >= (kp / 4 - 1) * KSTEP + 64` (panel j's slice of a block), `r0 + R <= MR`,
/// `j < 4`.
#[target_feature(enable = "avx2")]
unsafe fn micro_avx2<const R: usize>(
    a: &[u8],
    kp: usize,
    w: &[i8],
    acc: &mut Tile,
    r0: usize,
    j: usize,
) {
    assert!(
        a.len() >= R * kp
            && kp.is_multiple_of(4)
            && kp > 0
            && w.len() >= (kp / 4 - 1) * KSTEP + 64
            && r0 + R <= MR
            && j < NB / NR
    );
    let ones = _mm256_set1_epi16(1);
    let mut c = [[_mm256_setzero_si256(); 2]; R];
    let (ap, wp) = (a.as_ptr(), w.as_ptr());
    for k4 in 0..kp / 4 {
        // SAFETY: k4 * KSTEP + 64 <= w.len() (asserted); loadu needs no alignment.
        let (w0, w1) = unsafe {
            (
                _mm256_loadu_si256(wp.add(k4 * KSTEP) as *const __m256i),
                _mm256_loadu_si256(wp.add(k4 * KSTEP + 32) as *const __m256i),
            )
        };
        for (r, cr) in c.iter_mut().enumerate() {
            // SAFETY: r * kp + k4 * 4 + 4 <= R * kp <= a.len(); unaligned read.
            let v = unsafe { (ap.add(r * kp + k4 * 4) as *const i32).read_unaligned() };
            let av = _mm256_set1_epi32(v);
            cr[0] = _mm256_add_epi32(cr[0], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w0), ones));
            cr[1] = _mm256_add_epi32(cr[1], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w1), ones));
        }
    }
    for (r, cr) in c.iter().enumerate() {
        let dst = &mut acc[r0 + r][j * NR..(j + 1) * NR];
        // SAFETY: `dst` is 16 i32: two unaligned 8-lane stores fit exactly.
        unsafe {
            let p = dst.as_mut_ptr() as *mut __m256i;
            _mm256_storeu_si256(p, cr[0]);
            _mm256_storeu_si256(p.add(1), cr[1]);
        }
    }
}
