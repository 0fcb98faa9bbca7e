//! One head of one long sentence in bounded memory, flash-attention style: the
//! queries in tiles of [`QT`] rows, the keys in blocks of [`KT`], so no more than
//! one `QT x KT` tile of scores is ever held (256 KB per thread, whatever the
//! length: at 8,192 tokens a whole `seq x seq` block would be 268 MB). For each
//! tile, key block by key block: the scores `Q K^T` by one `gemm` call, an online
//! softmax down each row (the running maximum and sum of exponentials; when a
//! block raises a row's maximum, the row's partial context is scaled by
//! `exp(old - new)` first), and `P V` accumulated by a second `gemm` call
//! straight into the rows of `out`; at the end each row is divided by its sum.
//! Key blocks that no query of the tile can see (outside every window, or past
//! the diagonal with the causal mask) are skipped, so a sliding-window layer
//! costs time linear in the length too.
//!
//! Past a few dozen tokens gemm's packed, cache-blocked kernels beat the
//! register kernel of [`super::head_attention`] (measured with the
//! `attention_speed` example: at 128 tokens 373 against 534 ns per token and
//! head, at 14 tokens 93 against 79). A sentence of up to [`KT`] keys is one key
//! block, so it runs the plain softmax with no rescaling.
use super::{len_pad, tree, Head, Mask, KC};
use crate::act::exp_neg;
use crate::norm::simd_fn;
use gemm::Parallelism;

/// Query rows per tile.
pub(super) const QT: usize = 128;
/// Keys per block (a multiple of [`KC`]).
pub(super) const KT: usize = 512;

/// Scratch values one head of `seq` tokens needs here: one tile of scores.
pub(super) fn tile_len(seq: usize) -> usize {
    seq.min(QT) * len_pad(seq.min(KT))
}

/// The running state of one query row across key blocks.
#[derive(Clone, Copy)]
struct Run {
    /// The largest score seen so far (-inf before any).
    max: f32,
    /// The sum of `exp(score - max)` over the keys seen so far.
    sum: f32,
}

simd_fn! {
    /// The online softmax of one tile's score rows (`s`: `rows` rows of `kp`,
    /// `kb` real keys from key `j0`): each row's scores get the bias (`bias`, the
    /// head's `[seq, seq]` block) and become `exp(score - max)`, 0 for the keys
    /// the row cannot see, with `run` updated; `scale[r]` is the factor the row's
    /// earlier partial context must be multiplied by (1 when its maximum did not
    /// move).
    fn softmax_tile(
        s: &mut [f32],
        dims: (usize, usize, usize, usize),
        mask: Mask,
        bias: Option<&[f32]>,
        run: &mut [Run],
        scale: &mut [f32],
    ) {
        let (i0, j0, kb, kp) = dims;
        for (r, row) in s.chunks_exact_mut(kp).enumerate().take(run.len()) {
            let i = i0 + r;
            let (lo, hi) = mask.keys(i);
            let (a, b) = (lo.max(j0).min(j0 + kb) - j0, hi.max(j0).min(j0 + kb) - j0);
            scale[r] = 1.0;
            if a >= b {
                row.fill(0.0);
                continue;
            }
            if let Some(bias) = bias {
                let bias = &bias[i * mask.seq + j0..][..kb];
                for (x, &y) in row[a..b].iter_mut().zip(&bias[a..b]) {
                    *x += y;
                }
            }
            let (a, b) = (a as u32, b as u32);
            let lane: [u32; KC] = std::array::from_fn(|l| l as u32);
            let mut m = [f32::NEG_INFINITY; KC];
            for (c, chunk) in row.chunks_exact(KC).enumerate() {
                let base = (c * KC) as u32;
                for ((m, &x), &l) in m.iter_mut().zip(chunk).zip(&lane) {
                    let j = base + l;
                    let x = if j >= a && j < b { x } else { f32::NEG_INFINITY };
                    *m = if x > *m { x } else { *m };
                }
            }
            let bmax = tree(m, |x, y| if y > x { y } else { x });
            let old = run[r];
            let max = if bmax > old.max { bmax } else { old.max };
            if max == f32::NEG_INFINITY {
                // Every visible key has a bias of -inf: as if none were seen.
                row.fill(0.0);
                continue;
            }
            let mut sum = [0f32; KC];
            for (c, chunk) in row.chunks_exact_mut(KC).enumerate() {
                let base = (c * KC) as u32;
                for ((s, x), &l) in sum.iter_mut().zip(chunk).zip(&lane) {
                    let j = base + l;
                    let e = exp_neg(max - *x);
                    *x = if j >= a && j < b { e } else { 0.0 };
                    *s += *x;
                }
            }
            let f = if old.max == max {
                1.0
            } else if old.max == f32::NEG_INFINITY {
                0.0
            } else {
                exp_neg(max - old.max)
            };
            scale[r] = f;
            run[r] = Run {
                max,
                sum: old.sum * f + tree(sum, |x, y| x + y),
            };
        }
    }
}

/// [`super::head_attention`]'s result for long sentences (see the module doc),
/// in `scratch` of at least [`tile_len`]`(seq)` values.
pub(super) fn head_attention_tiled(
    sent: &[f32],
    hd: Head,
    mask: Mask,
    bias: Option<&[f32]>,
    out: &mut [f32],
    out_stride: usize,
    scratch: &mut [f32],
) {
    let Head {
        stride, dh, seq, ..
    } = hd;
    assert!(
        hd.fits(sent.len())
            && out.len() >= (seq - 1) * out_stride + dh
            && scratch.len() >= tile_len(seq)
            && mask.seq == seq
    );
    let mut run = [Run { max: 0.0, sum: 0.0 }; QT];
    let mut scale = [0f32; QT];
    for i0 in (0..seq).step_by(QT) {
        let rows = (seq - i0).min(QT);
        // The keys some query of the tile sees (the bounds grow with i).
        let (lo, _) = mask.keys(i0);
        let (_, hi) = mask.keys(i0 + rows - 1);
        let run = &mut run[..rows];
        run.fill(Run {
            max: f32::NEG_INFINITY,
            sum: 0.0,
        });
        let mut first = true;
        for j0 in (lo..hi).step_by(KT) {
            let kb = (hi - j0).min(KT);
            let kp = len_pad(kb);
            let s = &mut scratch[..rows * kp];
            // SAFETY (both calls): every index gemm forms is in bounds (asserted
            // above: element d < dh of query row i0 + r < seq, of key and value
            // rows j0 + c < hi <= len, at offset row * stride + d; scores as
            // `rows` rows of kb values at row stride kp inside `s`; context value
            // d of query i0 + r at out[(i0 + r) * out_stride + d]); `s` and `out`
            // are unique borrows distinct from `sent`, so no destination aliases
            // an input.
            unsafe {
                // s[r][c] = q_{i0+r} . k_{j0+c}
                gemm::gemm(
                    rows,
                    kb,
                    dh,
                    s.as_mut_ptr(),
                    1,
                    kp as isize,
                    false,
                    sent[hd.q + i0 * stride..].as_ptr(),
                    1,
                    stride as isize,
                    sent[hd.k + j0 * stride..].as_ptr(),
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
            let dims = (i0, j0, kb, kp);
            softmax_tile(s, dims, mask, bias, run, &mut scale[..rows]);
            if !first {
                for (r, &f) in scale[..rows].iter().enumerate() {
                    if f != 1.0 {
                        let at = (i0 + r) * out_stride;
                        out[at..at + dh].iter_mut().for_each(|x| *x *= f);
                    }
                }
            }
            // SAFETY: see above.
            unsafe {
                // out[i0 + r] (+)= sum_c p[r][c] v_{j0+c}
                gemm::gemm(
                    rows,
                    dh,
                    kb,
                    out[i0 * out_stride..].as_mut_ptr(),
                    1,
                    out_stride as isize,
                    !first,
                    s.as_ptr(),
                    1,
                    kp as isize,
                    sent[hd.v + j0 * stride..].as_ptr(),
                    1,
                    stride as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
            first = false;
        }
        for (r, run) in run.iter().enumerate() {
            let at = (i0 + r) * out_stride;
            let row = &mut out[at..at + dh];
            if first || run.sum == 0.0 {
                // No key seen by this row (or by the whole tile).
                row.fill(0.0);
            } else {
                let inv = 1.0 / run.sum;
                row.iter_mut().for_each(|x| *x *= inv);
            }
        }
    }
}
