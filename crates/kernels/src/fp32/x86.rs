//! x86-64 fp32 micro-kernels (AVX-512, AVX2) and their target-feature drivers.
//!
//! Each driver is [`super::drive`] compiled with the kernel's features, so the
//! activation after each tile inlines and vectorises for that CPU.
use super::{drive, Act, PackedLinear, Tile, MR, NB};
use std::arch::x86_64::*;

/// The fp32 product with the AVX-512 micro-kernel.
///
/// # Safety
/// The CPU must support AVX512F and FMA; `x`, `residual` and `out` fit `lin`
/// (checked by the caller).
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn drive_avx512(
    lin: &PackedLinear,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
) {
    drive(lin, x, m, residual, act, out, MR, false, |t| {
        // SAFETY: the features are enabled in this function; drive's tiles hold
        // what the kernel's contract asks (checked again by its assert).
        unsafe {
            match t.mr {
                1 => micro_avx512::<1>(t),
                2 => micro_avx512::<2>(t),
                3 => micro_avx512::<3>(t),
                4 => micro_avx512::<4>(t),
                5 => micro_avx512::<5>(t),
                _ => micro_avx512::<6>(t),
            }
        }
    })
}

/// Lanes `0..c` of 16 (c <= 16) as a mask.
#[inline(always)]
pub(super) fn mask16(c: usize) -> __mmask16 {
    ((1u32 << c.min(16)) - 1) as __mmask16
}

/// Checks every micro-kernel relies on: `a` holds `R` rows of `k`, `w` a block,
/// `out` (and `res`) `R` rows of `n` with the block's `cols` channels from `c0`,
/// `rt` `R` row terms.
#[inline(always)]
pub(super) fn check_tile<const R: usize>(t: &Tile) {
    assert!(
        R <= MR
            && t.mr == R
            && t.k > 0
            && t.a.len() == R * t.k
            && t.w.len() >= t.k * NB
            && t.bias.len() >= NB
            && t.inv_scale.len() >= NB
            && t.col_term.len() >= NB
            && t.rt.len() == R
            && t.cols <= NB
            && t.c0 + t.cols <= t.n
            && t.out.len() == R * t.n
            && t.res.is_none_or(|r| r.len() == R * t.n)
    );
}

/// AVX-512 micro-kernel, `R` rows x 64 channels in `4 R` zmm accumulators: per k,
/// load the block's 4 x 16 weights once, broadcast each row's input and FMA into
/// the 4 accumulators of the row; then unscale, add the bias and the residual
/// and store (masked to the block's `cols` channels).
///
/// # Safety
/// The CPU must support AVX512F and FMA.
#[target_feature(enable = "avx512f,fma")]
unsafe fn micro_avx512<const R: usize>(t: &mut Tile) {
    check_tile::<R>(t);
    let (k, n, c0, cols) = (t.k, t.n, t.c0, t.cols);
    let mut c = [[_mm512_setzero_ps(); 4]; R];
    let (ap, wp) = (t.a.as_ptr(), t.w.as_ptr());
    for kk in 0..k {
        // SAFETY: kk * NB + 64 <= k * NB <= w.len() (checked); unaligned loads
        // (the block is 64-byte aligned in practice).
        let w = unsafe {
            let p = wp.add(kk * NB);
            [
                _mm512_loadu_ps(p),
                _mm512_loadu_ps(p.add(16)),
                _mm512_loadu_ps(p.add(32)),
                _mm512_loadu_ps(p.add(48)),
            ]
        };
        for (r, cr) in c.iter_mut().enumerate() {
            // SAFETY: r * k + kk < R * k = a.len() (checked).
            let av = _mm512_set1_ps(unsafe { *ap.add(r * k + kk) });
            for (acc, &wq) in cr.iter_mut().zip(&w) {
                *acc = _mm512_fmadd_ps(av, wq, *acc);
            }
        }
    }
    let (bp, sp) = (t.bias.as_ptr(), t.inv_scale.as_ptr());
    let op = t.out.as_mut_ptr();
    for (r, cr) in c.iter_mut().enumerate() {
        for (q, acc) in cr.iter_mut().enumerate() {
            let lo = q * 16;
            if lo >= cols {
                break;
            }
            let mask = mask16(cols - lo);
            let at = r * n + c0 + lo;
            // SAFETY: lo + 16 <= NB <= bias.len(), inv_scale.len(); `at` is within
            // row r of `out` and `res` (lo < cols, c0 + cols <= n) and the mask
            // keeps the lanes read and written to the row's channels.
            unsafe {
                // acc * inv_scale is exact (a power of two): one rounding, as before.
                let (b, s) = (_mm512_loadu_ps(bp.add(lo)), _mm512_loadu_ps(sp.add(lo)));
                let mut v = _mm512_fmadd_ps(*acc, s, b);
                if let Some(res) = t.res {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, res.as_ptr().add(at)));
                }
                _mm512_mask_storeu_ps(op.add(at), mask, v);
            }
        }
    }
}

/// The fp32 product with the AVX2 micro-kernel.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `x`, `residual` and `out` fit `lin`
/// (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn drive_avx2(
    lin: &PackedLinear,
    x: &[f32],
    m: usize,
    residual: Option<&[f32]>,
    act: Act,
    out: &mut [f32],
) {
    drive(lin, x, m, residual, act, out, MR, false, |t| {
        for j in 0..NB / 16 {
            if j * 16 >= t.cols {
                break;
            }
            // SAFETY: the features are enabled in this function; drive's tiles
            // hold what the kernel's contract asks (checked again by its assert).
            unsafe {
                match t.mr {
                    1 => micro_avx2::<1>(t, j),
                    2 => micro_avx2::<2>(t, j),
                    3 => micro_avx2::<3>(t, j),
                    4 => micro_avx2::<4>(t, j),
                    5 => micro_avx2::<5>(t, j),
                    _ => micro_avx2::<6>(t, j),
                }
            }
        }
    })
}

/// Lanes `0..c` of 8 (c <= 8) as a `maskload` / `maskstore` mask.
#[inline]
#[target_feature(enable = "avx2")]
fn mask8(c: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(c.min(8) as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// AVX2 micro-kernel, `R` rows x the 16 channels of panel `j` (channels
/// `16 j..16 j + 16` of the block) in `2 R` ymm accumulators; then bias, residual
/// and a masked store, as [`micro_avx512`].
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn micro_avx2<const R: usize>(t: &mut Tile, j: usize) {
    check_tile::<R>(t);
    assert!(j * 16 < t.cols);
    let (k, n, c0, cols) = (t.k, t.n, t.c0, t.cols);
    let mut c = [[_mm256_setzero_ps(); 2]; R];
    let (ap, wp) = (t.a.as_ptr(), t.w.as_ptr());
    for kk in 0..k {
        // SAFETY: kk * NB + 16 j + 16 <= k * NB <= w.len() (checked, j < 4).
        let w = unsafe {
            let p = wp.add(kk * NB + j * 16);
            [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]
        };
        for (r, cr) in c.iter_mut().enumerate() {
            // SAFETY: r * k + kk < R * k = a.len() (checked).
            let av = _mm256_set1_ps(unsafe { *ap.add(r * k + kk) });
            for (acc, &wq) in cr.iter_mut().zip(&w) {
                *acc = _mm256_fmadd_ps(av, wq, *acc);
            }
        }
    }
    let (bp, sp) = (t.bias.as_ptr(), t.inv_scale.as_ptr());
    let op = t.out.as_mut_ptr();
    for (r, cr) in c.iter_mut().enumerate() {
        for (h, acc) in cr.iter_mut().enumerate() {
            let lo = j * 16 + h * 8;
            if lo >= cols {
                break;
            }
            let mask = mask8(cols - lo);
            let at = r * n + c0 + lo;
            // SAFETY: lo + 8 <= NB <= bias.len(), inv_scale.len(); `at` is within
            // row r of `out` and `res` (lo < cols, c0 + cols <= n) and the mask
            // keeps the lanes read and written to the row's channels.
            unsafe {
                let (b, s) = (_mm256_loadu_ps(bp.add(lo)), _mm256_loadu_ps(sp.add(lo)));
                let mut v = _mm256_fmadd_ps(*acc, s, b);
                if let Some(res) = t.res {
                    v = _mm256_add_ps(v, _mm256_maskload_ps(res.as_ptr().add(at), mask));
                }
                _mm256_maskstore_ps(op.add(at), mask, v);
            }
        }
    }
}
