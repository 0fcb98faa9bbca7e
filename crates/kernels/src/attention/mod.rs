//! Multi-head self-attention read in place from the fused QKV product.
//!
//! `qkv` holds, for each of the `batch * seq` tokens, one row `[q | k | v]` of
//! `3 * hidden` values, each part head-major (`heads` blocks of `head_dim`), with
//! the 1/sqrt(head_dim) scale already folded into `q`. For every sentence and head
//! the kernel runs fused in registers and L1 (no `gemm` calls, no Q/V copies, no
//! mask tensor): the sentence's real keys of that head transposed once into
//! scratch, then, for groups of up to four queries, their score rows (one FMA
//! per 16 keys and head dimension, each key chunk loaded once for the group), a
//! softmax over the real keys (positions `< len`; padded keys get probability 0,
//! as an additive mask of -inf would), and the probability-weighted sum of the
//! values, accumulated in registers and written straight into the query rows of
//! `ctx` (`batch * seq` rows of `hidden`).
//!
//! [`AttnOpts`] adds what some architectures need on top: an additive score bias
//! shared by every sentence of the batch (MPNet's relative position bias, one
//! `seq x seq` block per head) and a symmetric sliding window (ModernBERT's local
//! layers: query `i` sees only the keys `j` with `|i - j| <= window / 2`).
use crate::act::exp_neg;
use crate::norm::{lane_sum, shape_err, simd_fn, ShapeError};

/// Sizes of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
}

impl AttnShape {
    pub fn hidden(&self) -> usize {
        self.heads * self.head_dim
    }
}

/// Optional parts of an attention call ([`AttnOpts::default`]: plain attention).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnOpts<'a> {
    /// Added to the scaled scores before the softmax: `[heads, seq, seq]`
    /// row-major (head, query, key), the same for every sentence of the batch.
    pub bias: Option<&'a [f32]>,
    /// Symmetric sliding window: query `i` attends to the real keys `j` with
    /// `|i - j| <= window / 2` only (transformers' ModernBERT local attention).
    /// A query with no real key in its window (a padded row far past the end)
    /// gets a zero context.
    pub window: Option<usize>,
}

/// Self-attention of a padded batch (see the module doc). `lens[r]` is the real
/// length of sentence `r`, in `1..=seq`. `scores` is scratch (grown to
/// `seq * seq`).
pub fn attention(
    qkv: &[f32],
    lens: &[usize],
    shape: AttnShape,
    opts: AttnOpts,
    ctx: &mut [f32],
    scores: &mut Vec<f32>,
) -> Result<(), ShapeError> {
    const OP: &str = "attention";
    let AttnShape { batch, seq, .. } = shape;
    let h = shape.hidden();
    if h == 0 || seq == 0 {
        return Err(shape_err(OP, format!("empty shape {shape:?}")));
    }
    let rows = batch * seq;
    if qkv.len() != rows * 3 * h || ctx.len() != rows * h {
        return Err(shape_err(
            OP,
            format!(
                "{shape:?} needs qkv of {} and ctx of {} values, got {} and {}",
                rows * 3 * h,
                rows * h,
                qkv.len(),
                ctx.len()
            ),
        ));
    }
    if lens.len() != batch {
        return Err(shape_err(
            OP,
            format!("{} lengths for {batch} sentences", lens.len()),
        ));
    }
    if let Some(&l) = lens.iter().find(|&&l| l == 0 || l > seq) {
        return Err(shape_err(OP, format!("length {l} outside 1..={seq}")));
    }
    if let Some(b) = opts.bias {
        if b.len() != shape.heads * seq * seq {
            return Err(shape_err(
                OP,
                format!(
                    "{shape:?} needs a bias of {} values, got {}",
                    shape.heads * seq * seq,
                    b.len()
                ),
            ));
        }
    }
    let (dh, stride) = (shape.head_dim, 3 * h);
    let lp = len_pad(seq);
    let need = (dh * lp + QR * lp).max(seq * lp);
    if scores.len() < need {
        scores.resize(need, 0.0);
    }
    for (r, &len) in lens.iter().enumerate() {
        let sent = &qkv[r * seq * stride..(r + 1) * seq * stride];
        let out = &mut ctx[r * seq * h..(r + 1) * seq * h];
        for head in 0..shape.heads {
            let bias = opts
                .bias
                .map(|b| &b[head * seq * seq..(head + 1) * seq * seq]);
            let run = if seq > LONG {
                long::head_attention_gemm
            } else {
                head_attention
            };
            run(
                sent,
                Head {
                    stride,
                    q: head * dh,
                    k: h + head * dh,
                    v: 2 * h + head * dh,
                    dh,
                    seq,
                    len,
                },
                bias,
                opts.window,
                &mut out[head * dh..],
                h,
                scores,
            );
        }
    }
    Ok(())
}

/// Sentences longer than this (padded length) go through gemm ([`long`]).
const LONG: usize = 64;

/// Keys per score chunk (one 512-bit register of f32).
const KC: usize = 16;
/// Queries per pass: each key row loaded once for up to `QR` independent FMA chains.
const QR: usize = 4;

/// `len` rounded up to whole key chunks.
fn len_pad(len: usize) -> usize {
    len.div_ceil(KC) * KC
}

/// Where one head's Q, K and V sit in the token rows of one sentence (offsets of
/// element 0 of row 0; row `i` starts `i * stride` later), and its sizes.
#[derive(Clone, Copy)]
struct Head {
    stride: usize,
    q: usize,
    k: usize,
    v: usize,
    dh: usize,
    seq: usize,
    len: usize,
}

simd_fn! {
    /// One head of one sentence, fused: K of the real keys transposed into
    /// `scratch` (`dh` rows of [`len_pad`]`(len)` keys, zero past `len`), then for
    /// each group of up to [`QR`] queries their score rows (`dh` FMAs per 16 keys,
    /// the key chunk loaded once per group), the softmax of each row (bias, window)
    /// and the probability-weighted sum of the values, written to `out` (query `i`
    /// at `out[i * out_stride..][..dh]`). Every query row of the sentence is
    /// computed, padded ones included (they see the real keys only).
    fn head_attention(
        sent: &[f32],
        hd: Head,
        bias: Option<&[f32]>,
        window: Option<usize>,
        out: &mut [f32],
        out_stride: usize,
        scratch: &mut [f32],
    ) {
        let Head { dh, seq, len, .. } = hd;
        let lp = len_pad(len);
        let (kt, s) = scratch.split_at_mut(dh * lp);
        transpose_keys(sent, hd, kt);
        let s = &mut s[..QR * lp];
        let mut i0 = 0;
        while i0 < seq {
            match (seq - i0).min(QR) {
                1 => group::<1>(sent, hd, i0, kt, s, bias, window, out, out_stride),
                2 => group::<2>(sent, hd, i0, kt, s, bias, window, out, out_stride),
                3 => group::<3>(sent, hd, i0, kt, s, bias, window, out, out_stride),
                _ => group::<QR>(sent, hd, i0, kt, s, bias, window, out, out_stride),
            }
            i0 += QR;
        }
    }
}

/// Queries `i0..i0 + R` of [`head_attention`]: scores into `s` (`R` rows of
/// `len_pad(len)`), softmax, context into `out`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn group<const R: usize>(
    sent: &[f32],
    hd: Head,
    i0: usize,
    kt: &[f32],
    s: &mut [f32],
    bias: Option<&[f32]>,
    window: Option<usize>,
    out: &mut [f32],
    out_stride: usize,
) {
    let Head {
        stride,
        dh,
        seq,
        len,
        ..
    } = hd;
    let lp = len_pad(len);
    let q: [&[f32]; R] = std::array::from_fn(|r| &sent[hd.q + (i0 + r) * stride..][..dh]);
    let kt = &kt[..dh * lp];
    for c in (0..lp).step_by(KC) {
        let mut acc = [[0f32; KC]; R];
        for d in 0..dh {
            let kc: &[f32; KC] = kt[d * lp + c..d * lp + c + KC].try_into().expect("KC keys");
            for (a, q) in acc.iter_mut().zip(&q) {
                let x = q[d];
                for (a, &k) in a.iter_mut().zip(kc) {
                    *a = x.mul_add(k, *a);
                }
            }
        }
        for (a, row) in acc.iter().zip(s.chunks_exact_mut(lp)) {
            row[c..c + KC].copy_from_slice(a);
        }
    }
    for (r, row) in s.chunks_exact_mut(lp).take(R).enumerate() {
        let i = i0 + r;
        softmax_row(
            row,
            len,
            i,
            bias.map(|b| &b[i * seq..i * seq + len]),
            window,
        );
    }
    let p: [&[f32]; R] = std::array::from_fn(|r| &s[r * lp..r * lp + len]);
    let mut c = 0;
    while c < dh {
        c += match dh - c {
            w if w >= 64 => context::<R, 64>(sent, hd, &p, c, i0, out, out_stride),
            w if w >= 32 => context::<R, 32>(sent, hd, &p, c, i0, out, out_stride),
            w if w >= 16 => context::<R, 16>(sent, hd, &p, c, i0, out, out_stride),
            _ => context::<R, 1>(sent, hd, &p, c, i0, out, out_stride),
        };
    }
}

/// The real keys of head `hd` transposed into `kt` (`dh` rows of `len_pad(len)`
/// keys, zero past `len`): 16 x 16 blocks in registers where the CPU has
/// AVX-512, the rest (and other CPUs) with plain moves. Not inlined into the
/// vectorised caller on purpose: the compiler would turn the strided moves into
/// gathers and scatters, slower than the moves on every x86 CPU.
#[inline(never)]
fn transpose_keys(sent: &[f32], hd: Head, kt: &mut [f32]) {
    let Head {
        stride, dh, len, ..
    } = hd;
    let lp = len_pad(len);
    let kt = &mut kt[..dh * lp];
    let key = |j: usize| &sent[hd.k + j * stride..][..dh];
    let mut d0 = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        const ZERO: [f32; 16] = [0.0; 16];
        while d0 + 16 <= dh {
            for j0 in (0..lp).step_by(16) {
                let rows: [&[f32]; 16] = std::array::from_fn(|l| {
                    let j = j0 + l;
                    if j < len {
                        &key(j)[d0..d0 + 16]
                    } else {
                        &ZERO[..]
                    }
                });
                // SAFETY: AVX512F was detected just above, the only requirement.
                unsafe { transpose16_avx512(&rows, &mut kt[d0 * lp + j0..], lp) };
            }
            d0 += 16;
        }
    }
    for d in d0..dh {
        let row = &mut kt[d * lp..(d + 1) * lp];
        for (j, x) in row.iter_mut().enumerate() {
            *x = if j < len { key(j)[d] } else { 0.0 };
        }
    }
}

/// `out[c * stride + r] = rows[r][c]` for a 16 x 16 block (rows of at least 16
/// values; `out` at least `15 * stride + 16` long): two rounds of in-lane
/// unpacks, then two of 128-bit lane shuffles.
///
/// # Safety
/// The CPU must support AVX512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16_avx512(rows: &[&[f32]; 16], out: &mut [f32], stride: usize) {
    use std::arch::x86_64::*;
    assert!(rows.iter().all(|r| r.len() >= 16) && out.len() >= 15 * stride + 16);
    // SAFETY: each row holds at least 16 values (asserted): one unaligned load.
    let r: [__m512; 16] = std::array::from_fn(|i| unsafe { _mm512_loadu_ps(rows[i].as_ptr()) });
    // t[2i], t[2i+1]: rows 2i and 2i+1 interleaved (columns 4L, 4L+1 and 4L+2,
    // 4L+3 of each 128-bit lane L).
    let t: [__m512; 16] = std::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_ps(a, b)
        } else {
            _mm512_unpackhi_ps(a, b)
        }
    });
    // u[4g + m], lane L: column 4L + m of rows 4g..4g + 4.
    let u: [__m512; 16] = std::array::from_fn(|i| {
        let (g, m) = (i / 4 * 4, i % 4);
        let (a, b) = (
            _mm512_castps_pd(t[g + m / 2]),
            _mm512_castps_pd(t[g + m / 2 + 2]),
        );
        _mm512_castpd_ps(if m % 2 == 0 {
            _mm512_unpacklo_pd(a, b)
        } else {
            _mm512_unpackhi_pd(a, b)
        })
    });
    for m in 0..4 {
        let a = _mm512_shuffle_f32x4::<0x88>(u[m], u[4 + m]);
        let b = _mm512_shuffle_f32x4::<0xdd>(u[m], u[4 + m]);
        let c = _mm512_shuffle_f32x4::<0x88>(u[8 + m], u[12 + m]);
        let d = _mm512_shuffle_f32x4::<0xdd>(u[8 + m], u[12 + m]);
        let cols = [
            (m, _mm512_shuffle_f32x4::<0x88>(a, c)),
            (4 + m, _mm512_shuffle_f32x4::<0x88>(b, d)),
            (8 + m, _mm512_shuffle_f32x4::<0xdd>(a, c)),
            (12 + m, _mm512_shuffle_f32x4::<0xdd>(b, d)),
        ];
        for (col, v) in cols {
            // SAFETY: col * stride + 16 <= 15 * stride + 16 <= out.len() (asserted).
            unsafe { _mm512_storeu_ps(out[col * stride..].as_mut_ptr(), v) };
        }
    }
}

/// Context columns `c..c + W` of queries `i0..i0 + R`: `sum_j p[r][j] v_j` over
/// the real keys, `R x W` accumulators, each value row chunk loaded once.
/// Returns `W`.
#[inline(always)]
fn context<const R: usize, const W: usize>(
    sent: &[f32],
    hd: Head,
    p: &[&[f32]; R],
    c: usize,
    i0: usize,
    out: &mut [f32],
    out_stride: usize,
) -> usize {
    let mut acc = [[0f32; W]; R];
    for j in 0..hd.len {
        let at = hd.v + j * hd.stride + c;
        let vj: &[f32; W] = sent[at..at + W].try_into().expect("W values");
        for (a, pr) in acc.iter_mut().zip(p) {
            let x = pr[j];
            for (a, &v) in a.iter_mut().zip(vj) {
                *a = x.mul_add(v, *a);
            }
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let at = (i0 + r) * out_stride + c;
        out[at..at + W].copy_from_slice(a);
    }
    W
}

/// Softmax of one score row (query `i`) in place: `row` holds `len_pad(len)`
/// scores, of which the first `len` are the real keys; `bias` (`len` values) is
/// added first. With a window only the keys `j` with `|i - j| <= window / 2` keep
/// a probability; every other entry of the row gets 0 (all 0 when no key is
/// left). Whole 16-lane chunks with the hidden keys masked, so it vectorises.
#[inline(always)]
fn softmax_row(row: &mut [f32], len: usize, i: usize, bias: Option<&[f32]>, window: Option<usize>) {
    let (lo, hi) = match window {
        None => (0, len),
        Some(w) => (i.saturating_sub(w / 2), (i + w / 2 + 1).min(len)),
    };
    if lo >= hi {
        row.fill(0.0);
        return;
    }
    if let Some(b) = bias {
        for (x, &b) in row.iter_mut().zip(b) {
            *x += b;
        }
    }
    let seen = |j: usize| j >= lo && j < hi;
    let mut m = [f32::NEG_INFINITY; KC];
    for (c, chunk) in row.chunks_exact(KC).enumerate() {
        for (l, (m, &x)) in m.iter_mut().zip(chunk).enumerate() {
            let x = if seen(c * KC + l) {
                x
            } else {
                f32::NEG_INFINITY
            };
            *m = m.max(x);
        }
    }
    let max = m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut sum = [0f32; KC];
    for (c, chunk) in row.chunks_exact_mut(KC).enumerate() {
        for (l, (s, x)) in sum.iter_mut().zip(chunk).enumerate() {
            let e = exp_neg(max - *x);
            *x = if seen(c * KC + l) { e } else { 0.0 };
            *s += *x;
        }
    }
    let inv = 1.0 / lane_sum(&sum);
    for chunk in row.chunks_exact_mut(KC) {
        for x in chunk {
            *x *= inv;
        }
    }
}

mod long;
#[cfg(test)]
mod tests;
