//! [`super::head_attention`]'s 16-query block with AVX-512 intrinsics: the same
//! arithmetic as the portable path (the same multiply-adds in the same order,
//! so the same bits), with the transposes done in registers, the keys' and
//! values' elements broadcast straight from the token rows, and no bounds checks
//! in the inner loops.
use super::{softmax_lanes, Head, Mask, QL};
use std::arch::x86_64::*;

/// Keys per score pass: 8 independent multiply-add chains.
const KB: usize = 8;

/// A 16 x 16 transpose in registers: lane `c` of `r[i]` becomes lane `i` of
/// the result's vector `c` (two rounds of in-lane unpacks, two of 128-bit lane
/// shuffles).
///
/// # Safety
/// The CPU must support AVX512F (inlined into such functions only).
#[inline(always)]
unsafe fn tr16(r: &[__m512; 16]) -> [__m512; 16] {
    let zero = _mm512_setzero_ps();
    let mut t = [zero; 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [zero; 16];
    for g in (0..16).step_by(4) {
        for m in 0..4 {
            let a = _mm512_castps_pd(t[g + m / 2]);
            let b = _mm512_castps_pd(t[g + m / 2 + 2]);
            u[g + m] = _mm512_castpd_ps(if m % 2 == 0 {
                _mm512_unpacklo_pd(a, b)
            } else {
                _mm512_unpackhi_pd(a, b)
            });
        }
    }
    let mut out = [zero; 16];
    for m in 0..4 {
        let a = _mm512_shuffle_f32x4::<0x88>(u[m], u[4 + m]);
        let b = _mm512_shuffle_f32x4::<0xdd>(u[m], u[4 + m]);
        let c = _mm512_shuffle_f32x4::<0x88>(u[8 + m], u[12 + m]);
        let d = _mm512_shuffle_f32x4::<0xdd>(u[8 + m], u[12 + m]);
        out[m] = _mm512_shuffle_f32x4::<0x88>(a, c);
        out[4 + m] = _mm512_shuffle_f32x4::<0x88>(b, d);
        out[8 + m] = _mm512_shuffle_f32x4::<0xdd>(a, c);
        out[12 + m] = _mm512_shuffle_f32x4::<0xdd>(b, d);
    }
    out
}

/// The low `w` lanes (`w <= 16`).
#[inline(always)]
fn lanes(w: usize) -> __mmask16 {
    ((1u32 << w) - 1) as __mmask16
}

/// Queries `i0..i0 + 16` (those below `seq`) of one head: transposed into `qt`
/// (`dh` rows of 16 lanes; lanes past the sentence repeat its last query), scored
/// against every real key into `e` (`len` rows of 16), softmax down the lanes,
/// context rows written to `out`.
///
/// # Safety
/// The CPU must support AVX512F and FMA.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,fma")]
pub(super) unsafe fn block(
    sent: &[f32],
    hd: Head,
    i0: usize,
    (mask, bias): (Mask, Option<&[f32]>),
    qt: &mut [f32],
    e: &mut [f32],
    (out, out_stride): (&mut [f32], usize),
) {
    let Head {
        stride,
        dh,
        seq,
        len,
        ..
    } = hd;
    let rows = (seq - i0).min(QL);
    assert!(
        i0 < seq
            && hd.fits(sent.len())
            && qt.len() >= dh * QL
            && e.len() >= len * QL
            && out.len() >= (i0 + rows - 1) * out_stride + dh
    );
    let base = sent.as_ptr();
    let zero = _mm512_setzero_ps();

    // Q^T: 16 dims (or the w left) of the 16 query rows per register transpose.
    for d0 in (0..dh).step_by(16) {
        let m = lanes((dh - d0).min(16));
        let mut r = [zero; 16];
        for (l, r) in r.iter_mut().enumerate() {
            let i = i0 + l.min(rows - 1);
            // SAFETY: row i < seq of Q, values d0.. below dh (mask): in bounds.
            *r = unsafe { _mm512_maskz_loadu_ps(m, base.add(hd.q + i * stride + d0)) };
        }
        let t = unsafe { tr16(&r) };
        let dst = qt.as_mut_ptr();
        // SAFETY: rows d0 + k < dh of qt (dh * 16 values). A fixed count for
        // whole blocks (a variable one becomes a memcpy call).
        if dh - d0 >= 16 {
            for (k, t) in t.iter().enumerate() {
                unsafe { _mm512_storeu_ps(dst.add((d0 + k) * QL), *t) };
            }
        } else {
            for (k, t) in t.iter().enumerate().take(dh - d0) {
                unsafe { _mm512_storeu_ps(dst.add((d0 + k) * QL), *t) };
            }
        }
    }

    // Scores: e[j] = sum_d k_j[d] * qt[d], KB keys at a time.
    for j0 in (0..len).step_by(KB) {
        let kb = (len - j0).min(KB);
        let mut kp = [base; KB];
        for (b, p) in kp.iter_mut().enumerate() {
            // SAFETY: key row j0 + min(b, kb - 1) < len is in bounds.
            *p = unsafe { base.add(hd.k + (j0 + b.min(kb - 1)) * stride) };
        }
        let mut acc = [zero; KB];
        for d in 0..dh {
            // SAFETY: d < dh: row d of qt, element d of each key row.
            unsafe {
                let qd = _mm512_loadu_ps(qt.as_ptr().add(d * QL));
                for (a, p) in acc.iter_mut().zip(&kp) {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(*p.add(d)), qd, *a);
                }
            }
        }
        for (b, a) in acc.iter().enumerate().take(kb) {
            // SAFETY: row j0 + b < len of e.
            unsafe { _mm512_storeu_ps(e.as_mut_ptr().add((j0 + b) * QL), *a) };
        }
    }

    let e = &mut e[..len * QL];
    let inv = softmax_lanes(e, hd, i0, bias, mask);
    // SAFETY: 16 values.
    let inv = unsafe { _mm512_loadu_ps(inv.as_ptr()) };

    // Context: 16 columns (or the w left) per pass, one accumulator per column
    // with the 16 queries in its lanes, then transposed into the query rows.
    for c0 in (0..dh).step_by(16) {
        let w = (dh - c0).min(16);
        let mut acc = [zero; 16];
        // SAFETY (both loops): row j < len of e; value row j, columns c0 + k < dh.
        if w == 16 {
            // A fixed count, so the accumulators stay in registers.
            for j in 0..len {
                unsafe {
                    let ej = _mm512_loadu_ps(e.as_ptr().add(j * QL));
                    let vj = base.add(hd.v + j * stride + c0);
                    for (k, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_ps(_mm512_set1_ps(*vj.add(k)), ej, *a);
                    }
                }
            }
        } else {
            for j in 0..len {
                unsafe {
                    let ej = _mm512_loadu_ps(e.as_ptr().add(j * QL));
                    let vj = base.add(hd.v + j * stride + c0);
                    for (k, a) in acc.iter_mut().enumerate().take(w) {
                        *a = _mm512_fmadd_ps(_mm512_set1_ps(*vj.add(k)), ej, *a);
                    }
                }
            }
        }
        for a in acc.iter_mut() {
            *a = _mm512_mul_ps(*a, inv);
        }
        let t = unsafe { tr16(&acc) };
        for (l, t) in t.iter().enumerate().take(rows) {
            // SAFETY: query row i0 + l < i0 + rows, columns c0..c0 + w <= dh.
            unsafe {
                _mm512_mask_storeu_ps(
                    out.as_mut_ptr().add((i0 + l) * out_stride + c0),
                    lanes(w),
                    *t,
                )
            };
        }
    }
}
