//! One head of one long sentence through two `gemm` products: past a few dozen
//! tokens gemm's packed, cache-blocked kernels beat the register kernel of
//! [`super::head_attention`] (measured with the `attention_speed` example: at 128
//! tokens 373 against 534 ns per token and head, at 14 tokens 93 against 79).
use super::{len_pad, softmax_row, Head, Mask};
use crate::norm::simd_fn;
use gemm_common::Parallelism;
use gemm_f32::gemm::f32::get_gemm_fn;

simd_fn! {
    /// [`softmax_row`] over the `seq` score rows of `s` (`lp` wide, `len` real keys).
    fn softmax_all(
        s: &mut [f32],
        dims: (usize, usize, usize),
        bias: Option<&[f32]>,
        mask: Mask,
    ) {
        let (lp, len, seq) = dims;
        for (i, row) in s.chunks_exact_mut(lp).enumerate() {
            row[len..].fill(0.0);
            softmax_row(row, len, i, bias.map(|b| &b[i * seq..i * seq + len]), mask);
        }
    }
}

/// [`super::head_attention`]'s result for long sentences: scores `Q K^T` over the
/// real keys by one gemm call into `scratch` (`seq` rows of `len_pad(len)`), the
/// same row softmax, then `P V` by a second call written straight into `out`.
pub(super) fn head_attention_gemm(
    sent: &[f32],
    hd: Head,
    bias: Option<&[f32]>,
    mask: Mask,
    out: &mut [f32],
    out_stride: usize,
    scratch: &mut [f32],
) {
    let Head {
        stride,
        dh,
        seq,
        len,
        ..
    } = hd;
    let lp = len_pad(len);
    let s = &mut scratch[..seq * lp];
    let (q, k, v) = (&sent[hd.q..], &sent[hd.k..], &sent[hd.v..]);
    assert!(hd.fits(sent.len()) && out.len() >= (seq - 1) * out_stride + dh);
    // SAFETY (both calls): every index gemm forms is in bounds (asserted above:
    // element d < dh of query row i < seq, of key and value rows j < len, at
    // offset i * stride + d or j * stride + d; scores as seq rows of len values
    // at row stride lp inside `s`, seq * lp long; context value d of query i at
    // out[i * out_stride + d]); `s` and `out` are unique borrows distinct from
    // `sent`, so no destination aliases an input.
    unsafe {
        // s[i][j] = q_i . k_j for the real keys j < len
        get_gemm_fn()(
            seq,
            len,
            dh,
            s.as_mut_ptr(),
            1,
            lp as isize,
            false,
            q.as_ptr(),
            1,
            stride as isize,
            k.as_ptr(),
            stride as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    softmax_all(s, (lp, len, seq), bias, mask);
    // SAFETY: see above.
    unsafe {
        // out[i] = sum_j p[i][j] v_j over the real keys
        get_gemm_fn()(
            seq,
            dh,
            len,
            out.as_mut_ptr(),
            1,
            out_stride as isize,
            false,
            s.as_ptr(),
            1,
            lp as isize,
            v.as_ptr(),
            1,
            stride as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}
