//! Multi-head self-attention read in place from the fused QKV product.
//!
//! `qkv` holds, for each of the `batch * seq` tokens, one row `[q | k | v]` of
//! `3 * hidden` values, each part head-major (`heads` blocks of `head_dim`), with
//! the 1/sqrt(head_dim) scale already folded into `q`. For every sentence and head
//! the kernel computes the scores `Q K^T` with one `gemm` call on strided views of
//! `qkv`, a softmax over the sentence's real keys (positions `< len`; padded keys
//! get probability 0, as an additive mask of -inf would), and the probability-
//! weighted sum of the values with a second `gemm` call that writes straight into
//! the query rows of `ctx` (`batch * seq` rows of `hidden`): no transposes, no
//! copies of Q, K or V, no mask tensor.
//!
//! [`AttnOpts`] adds what some architectures need on top: an additive score bias
//! shared by every sentence of the batch (MPNet's relative position bias, one
//! `seq x seq` block per head) and a symmetric sliding window (ModernBERT's local
//! layers: query `i` sees only the keys `j` with `|i - j| <= window / 2`).
use crate::act::exp_neg;
use crate::norm::{lane_sum, shape_err, simd_fn, ShapeError};
use gemm::Parallelism;

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
    if scores.len() < seq * seq {
        scores.resize(seq * seq, 0.0);
    }
    let scores = &mut scores[..seq * seq];
    let (dh, stride) = (shape.head_dim, 3 * h);
    for (r, &len) in lens.iter().enumerate() {
        let sent = &qkv[r * seq * stride..(r + 1) * seq * stride];
        let out = &mut ctx[r * seq * h..(r + 1) * seq * h];
        for head in 0..shape.heads {
            let (q, k, v) = (
                &sent[head * dh..],
                &sent[h + head * dh..],
                &sent[2 * h + head * dh..],
            );
            // SAFETY (both gemm calls): every index gemm forms is in bounds and no
            // destination aliases an input. `sent` holds seq rows of `stride` =
            // 3h values; q, k and v start at head*dh, h + head*dh and
            // 2h + head*dh, and the calls read element d < dh of row i < seq, at
            // offset i * stride + d, so the largest absolute index is at most
            // 2h + (heads - 1) * dh + (seq - 1) * stride + dh - 1
            // = seq * stride - 1. The scores are read and written as seq rows of
            // at most len <= seq values at row stride seq, inside `scores`
            // (seq * seq values). Context value d of query i goes to
            // out[head * dh + i * h + d] <= seq * h - 1, inside `out`. `scores`
            // and `out` are unique borrows, distinct from `qkv`.
            unsafe {
                // scores[i][j] = q_i . k_j for the real keys j < len
                gemm::gemm(
                    seq,
                    len,
                    dh,
                    scores.as_mut_ptr(),
                    1,
                    seq as isize,
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
            let bias = opts
                .bias
                .map(|b| &b[head * seq * seq..(head + 1) * seq * seq]);
            softmax_rows(scores, seq, len, bias, opts.window);
            let out_h = &mut out[head * dh..];
            // SAFETY: see the comment on the first call.
            unsafe {
                // out[i] = sum_j p[i][j] v_j over the real keys
                gemm::gemm(
                    seq,
                    dh,
                    len,
                    out_h.as_mut_ptr(),
                    1,
                    h as isize,
                    false,
                    scores.as_ptr(),
                    1,
                    seq as isize,
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
    }
    Ok(())
}

simd_fn! {
    /// Softmax of the first `len` values of each of the `seq` rows of `s` (row
    /// stride `seq`), in place, after adding the same rows of `bias`; with a
    /// window, row `i` keeps only the keys `j` with `|i - j| <= window / 2` (the
    /// others of the first `len` get probability 0).
    fn softmax_rows(
        s: &mut [f32],
        seq: usize,
        len: usize,
        bias: Option<&[f32]>,
        window: Option<usize>,
    ) {
        for (i, row) in s.chunks_exact_mut(seq).enumerate() {
            let row = &mut row[..len];
            if let Some(b) = bias {
                for (x, &b) in row.iter_mut().zip(&b[i * seq..i * seq + len]) {
                    *x += b;
                }
            }
            let (lo, hi) = match window {
                None => (0, len),
                Some(w) => (i.saturating_sub(w / 2), (i + w / 2 + 1).min(len)),
            };
            if lo >= hi {
                row.fill(0.0);
                continue;
            }
            row[..lo].fill(0.0);
            let (p, after) = row[lo..].split_at_mut(hi - lo);
            after.fill(0.0);
            let max = p.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            for x in p.iter_mut() {
                *x = exp_neg(max - *x);
            }
            let sum = lane_sum(p);
            for x in p.iter_mut() {
                *x /= sum;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// Textbook attention in f64 on explicitly gathered Q, K, V per head, with an
    /// additive mask of -1e30 on padded keys and on keys outside the window, the
    /// bias added to the scores; a row with every key masked gives 0.
    fn reference(qkv: &[f32], lens: &[usize], s: AttnShape, opts: AttnOpts) -> Vec<f32> {
        let h = s.hidden();
        let at = |r: usize, i: usize, part: usize, head: usize, d: usize| {
            qkv[(r * s.seq + i) * 3 * h + part * h + head * s.head_dim + d] as f64
        };
        let mut ctx = vec![0f32; s.batch * s.seq * h];
        for (r, &len) in lens.iter().enumerate() {
            for head in 0..s.heads {
                for i in 0..s.seq {
                    let scores: Vec<f64> = (0..s.seq)
                        .map(|j| {
                            let dot: f64 = (0..s.head_dim)
                                .map(|d| at(r, i, 0, head, d) * at(r, j, 1, head, d))
                                .sum();
                            let bias = opts
                                .bias
                                .map_or(0.0, |b| b[(head * s.seq + i) * s.seq + j] as f64);
                            let seen =
                                j < len && opts.window.is_none_or(|w| i.abs_diff(j) <= w / 2);
                            dot + bias + if seen { 0.0 } else { -1e30 }
                        })
                        .collect();
                    if scores.iter().all(|&x| x < -1e29) {
                        continue;
                    }
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for d in 0..s.head_dim {
                        let v: f64 = (0..s.seq).map(|j| e[j] / sum * at(r, j, 2, head, d)).sum();
                        ctx[(r * s.seq + i) * h + head * s.head_dim + d] = v as f32;
                    }
                }
            }
        }
        ctx
    }

    #[test]
    fn strided_attention_matches_reference_on_odd_shapes() {
        for (batch, seq, heads, head_dim, lens) in [
            (3, 7, 2, 5, vec![7, 3, 1]),
            (2, 9, 3, 11, vec![9, 9]),
            (1, 1, 1, 1, vec![1]),
            (2, 13, 12, 32, vec![13, 6]),
        ] {
            let s = AttnShape {
                batch,
                seq,
                heads,
                head_dim,
            };
            let qkv: Vec<f32> = values(batch * seq * 3 * s.hidden(), seq as u64)
                .iter()
                .map(|v| v * 3.0)
                .collect();
            let bias = values(heads * seq * seq, 7 + seq as u64)
                .iter()
                .map(|v| v * 4.0)
                .collect::<Vec<_>>();
            for opts in [
                AttnOpts::default(),
                AttnOpts {
                    bias: Some(&bias),
                    window: None,
                },
                AttnOpts {
                    bias: None,
                    window: Some(4),
                },
                AttnOpts {
                    bias: Some(&bias),
                    window: Some(3),
                },
                AttnOpts {
                    bias: None,
                    window: Some(0),
                },
            ] {
                let want = reference(&qkv, &lens, s, opts);
                let mut ctx = vec![f32::NAN; want.len()];
                let mut scores = Vec::new();
                attention(&qkv, &lens, s, opts, &mut ctx, &mut scores).unwrap();
                let diff = ctx
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                // f32 scores of up to ~100 carry ~1e-5 rounding into the exponent.
                assert!(diff < 2e-5, "{s:?} {opts:?}: max abs diff {diff}");
            }
        }
    }

    #[test]
    fn window_masks_far_keys_and_bias_shifts_scores() {
        // One head, head_dim 1, q = 0: every score is 0 before the bias, so the
        // probabilities are the softmax of the bias over the visible keys and the
        // context is their mean of v (v_j = j).
        let s = AttnShape {
            batch: 1,
            seq: 5,
            heads: 1,
            head_dim: 1,
        };
        let mut qkv = vec![0f32; 15];
        for j in 0..5 {
            qkv[j * 3 + 2] = j as f32;
        }
        let mut ctx = vec![0f32; 5];
        let mut p = Vec::new();
        let close = |a: &[f32], b: &[f32]| {
            assert!(
                a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6),
                "{a:?} vs {b:?}"
            )
        };
        let w = AttnOpts {
            bias: None,
            window: Some(2),
        };
        attention(&qkv, &[5], s, w, &mut ctx, &mut p).unwrap();
        // keys within 1: {0,1} -> 0.5, {0,1,2} -> 1, {1,2,3} -> 2, {2,3,4} -> 3, {3,4} -> 3.5
        close(&ctx, &[0.5, 1.0, 2.0, 3.0, 3.5]);
        // Padding: len 2 and window 2, row 4 sees no real key: zero context.
        attention(&qkv, &[2], s, w, &mut ctx, &mut p).unwrap();
        close(&ctx, &[0.5, 0.5, 1.0, 0.0, 0.0]);
        // A bias of -inf on every key but j = 3 selects v_3.
        let mut bias = vec![f32::NEG_INFINITY; 25];
        for i in 0..5 {
            bias[i * 5 + 3] = 0.0;
        }
        let b = AttnOpts {
            bias: Some(&bias),
            window: None,
        };
        attention(&qkv, &[5], s, b, &mut ctx, &mut p).unwrap();
        close(&ctx, &[3.0; 5]);
        assert!(attention(
            &qkv,
            &[5],
            s,
            AttnOpts {
                bias: Some(&bias[1..]),
                window: None
            },
            &mut ctx,
            &mut p
        )
        .is_err());
    }

    #[test]
    fn padded_keys_do_not_matter() {
        let s = AttnShape {
            batch: 1,
            seq: 6,
            heads: 2,
            head_dim: 4,
        };
        let qkv = values(6 * 3 * 8, 3);
        let mut changed = qkv.clone();
        // keys and values of positions 4 and 5 (padding for len 4)
        for i in 4..6 {
            for x in &mut changed[i * 24 + 8..i * 24 + 24] {
                *x += 100.0;
            }
        }
        let (mut a, mut b) = (vec![0f32; 48], vec![0f32; 48]);
        let mut p = Vec::new();
        attention(&qkv, &[4], s, AttnOpts::default(), &mut a, &mut p).unwrap();
        attention(&changed, &[4], s, AttnOpts::default(), &mut b, &mut p).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let s = AttnShape {
            batch: 2,
            seq: 3,
            heads: 1,
            head_dim: 2,
        };
        let (qkv, mut ctx, mut p) = (vec![0f32; 36], vec![0f32; 12], Vec::new());
        let o = AttnOpts::default();
        assert!(attention(&qkv, &[3, 3], s, o, &mut ctx, &mut p).is_ok());
        assert!(attention(&qkv, &[3, 0], s, o, &mut ctx, &mut p).is_err());
        assert!(attention(&qkv, &[3, 4], s, o, &mut ctx, &mut p).is_err());
        assert!(attention(&qkv, &[3], s, o, &mut ctx, &mut p).is_err());
        assert!(attention(&qkv[1..], &[3, 3], s, o, &mut ctx, &mut p).is_err());
        assert!(attention(&qkv, &[3, 3], s, o, &mut ctx[1..], &mut p).is_err());
    }
}
