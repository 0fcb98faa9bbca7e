//! Multi-head self-attention read in place from the fused QKV product.
//!
//! `qkv` holds, for each of the `batch * seq` tokens, one row `[q | k | v]` of
//! `3 * hidden` values, each part head-major (`heads` blocks of `head_dim`), with
//! the 1/sqrt(head_dim) scale already folded into `q`. For every sentence and head
//! the kernel runs fused in registers and L1 (no `gemm` calls, no mask tensor),
//! 16 queries at a time side by side in the lanes of a vector: the block's
//! queries transposed once, their scores against each real key (the key's values
//! broadcast: keys are neither copied nor padded), a softmax down each lane
//! (max and sum over the keys lane by lane, no horizontal reductions; padded keys
//! are never read, as an additive mask of -inf would give), and the
//! exponential-weighted sum of the values, scaled by each query's 1 / sum and
//! written straight into the query rows of `ctx` (`batch * seq` rows of
//! `hidden`). With AVX-512 the block is written with intrinsics (`avx512.rs`),
//! elsewhere in portable code (`context.rs`); both do the same multiply-adds in
//! the same order, so every CPU gets the same bits.
//!
//! Sentences longer than [`LONG`] tokens take the tiled path ([`long`]): queries
//! in tiles, keys in blocks, an online softmax across the blocks, so at most one
//! tile of scores (256 KB) is held per call whatever the length, and the memory
//! of a forward pass grows linearly with its input.
//!
//! [`AttnOpts`] adds what some architectures need on top: an additive score bias
//! shared by every sentence of the batch (MPNet's relative position bias, one
//! `seq x seq` block per head, made by the caller), a symmetric sliding window
//! (ModernBERT's local layers: query `i` sees only the keys `j` with
//! `|i - j| <= window / 2`) and a causal mask (decoders: query `i` sees the keys
//! `j <= i`). The masks combine: a key is seen when every one of them lets it.
use crate::act::exp_neg;
use crate::norm::{shape_err, simd_fn, ShapeError};

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
    /// Causal (decoder) attention: query `i` attends to the keys `j <= i` only.
    /// Real tokens come first in each sentence (right padding), as everywhere in
    /// this API; padded queries past the end see every real key.
    pub causal: bool,
}

/// Which keys each query of one sentence sees: `keys(i)` is the range `lo..hi`
/// of the real keys query `i` attends to (empty when it sees none).
#[derive(Clone, Copy, Debug)]
struct Mask {
    seq: usize,
    len: usize,
    /// `window / 2`, or `usize::MAX` without a window.
    half: usize,
    causal: bool,
}

impl Mask {
    fn new(seq: usize, len: usize, opts: &AttnOpts) -> Self {
        Mask {
            seq,
            len,
            half: opts.window.map_or(usize::MAX, |w| w / 2),
            causal: opts.causal,
        }
    }

    #[inline(always)]
    fn keys(&self, i: usize) -> (usize, usize) {
        let lo = i.saturating_sub(self.half);
        let mut hi = self.len.min(i.saturating_add(self.half).saturating_add(1));
        if self.causal {
            hi = hi.min(i + 1);
        }
        (lo, hi)
    }
}

/// Self-attention of a padded batch (see the module doc). `lens[r]` is the real
/// length of sentence `r`, in `1..=seq`. `scores` is scratch, grown to at most
/// one tile of scores (128 x 512 values) whatever `seq`.
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
    let need = scratch_len(seq, dh);
    if scores.len() < need {
        scores.resize(need, 0.0);
    }
    for (r, &len) in lens.iter().enumerate() {
        let sent = &qkv[r * seq * stride..(r + 1) * seq * stride];
        let out = &mut ctx[r * seq * h..(r + 1) * seq * h];
        let mask = Mask::new(seq, len, &opts);
        for head in 0..shape.heads {
            let bias = opts
                .bias
                .map(|b| &b[head * seq * seq..(head + 1) * seq * seq]);
            let run = if seq > LONG {
                long::head_attention_tiled
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
                mask,
                bias,
                &mut out[head * dh..],
                h,
                scores,
            );
        }
    }
    Ok(())
}

/// Sentences longer than this (padded length) go through gemm in tiles
/// ([`long`]).
const LONG: usize = 64;

/// Keys per score chunk of the long path ([`long`]): its score rows are padded to
/// whole chunks of 16.
const KC: usize = 16;
/// Queries side by side in the lanes of one score vector (one 512-bit register
/// of f32).
const QL: usize = 16;

/// `len` rounded up to whole key chunks.
fn len_pad(len: usize) -> usize {
    len.div_ceil(KC) * KC
}

/// Scratch values [`attention`] needs for one head of `seq` tokens of `dh` values:
/// [`head_attention`]'s transposed queries and score columns, or one tile of
/// [`long`]'s score rows.
fn scratch_len(seq: usize, dh: usize) -> usize {
    if seq > LONG {
        long::tile_len(seq)
    } else {
        (dh + seq) * QL
    }
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

impl Head {
    /// Whether a sentence of `n` values holds this head's `seq` query rows and
    /// `len` key and value rows (each `dh` values from its offset).
    fn fits(&self, n: usize) -> bool {
        let end = |first: usize, rows: usize| first + (rows - 1) * self.stride + self.dh;
        self.len >= 1
            && self.len <= self.seq
            && end(self.q, self.seq) <= n
            && end(self.k, self.len) <= n
            && end(self.v, self.len) <= n
    }
}

simd_fn! {
    /// One head of one sentence, fused, 16 queries at a time side by side in the
    /// lanes of a vector: the block's queries transposed into `scratch` (`dh`
    /// rows of 16), their scores against each real key (`dh` FMAs per key, the
    /// key's value broadcast, so keys need no transposing and no padding), a
    /// softmax down each lane (no horizontal reductions: max and sum over keys are
    /// lane-wise), and the context `sum_j e_ij v_j` of each query row, scaled by
    /// the row's 1 / sum and written to `out` (query `i` at
    /// `out[i * out_stride..][..dh]`). Every query row of the sentence is
    /// computed, padded ones included (they see the real keys only).
    ///
    /// With AVX-512 ([`wide_registers`]) each block runs as [`avx512::block`]:
    /// 8 keys per score pass and 16 context columns per pass, in registers.
    fn head_attention(
        sent: &[f32],
        hd: Head,
        mask: Mask,
        bias: Option<&[f32]>,
        out: &mut [f32],
        out_stride: usize,
        scratch: &mut [f32],
    ) {
        let Head { dh, seq, len, stride, .. } = hd;
        let (qt, e) = scratch.split_at_mut(dh * QL);
        let e = &mut e[..len * QL];
        let wide = wide_registers();
        for i0 in (0..seq).step_by(QL) {
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: `wide` means AVX512F (and with it FMA) was detected.
                unsafe { avx512::block(sent, hd, i0, (mask, bias), qt, e, (&mut *out, out_stride)) };
                continue;
            }
            let rows = (seq - i0).min(QL);
            transpose_rows(sent, (hd.q + i0 * stride, stride), rows, dh, qt);
            scores(sent, hd, qt, e);
            let inv = softmax_lanes(e, hd, i0, bias, mask);
            let blk = Block { i0, rows, inv: &inv };
            context(sent, hd, e, &blk, (&mut *out, out_stride));
        }
    }
}

/// Whether the CPU has 32 vector registers (AVX-512), for [`head_attention`]'s
/// block sizes.
#[inline(always)]
fn wide_registers() -> bool {
    #[cfg(test)]
    if tests::PORTABLE.with(|p| p.get()) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Scores of the block's 16 queries (`qt`: `dh` rows of 16 lanes) against every
/// real key, `KB` keys per pass (`KB` independent FMA chains): `e[j][l] =
/// q_l . k_j`, summed over `d` in order.
#[inline(always)]
fn scores(sent: &[f32], hd: Head, qt: &[f32], e: &mut [f32]) {
    const KB: usize = 4;
    let Head {
        stride, dh, len, ..
    } = hd;
    let qt = &qt[..dh * QL];
    for j0 in (0..len).step_by(KB) {
        let kb = (len - j0).min(KB);
        // Past the last key the pass repeats it (computed, not stored).
        let k: [&[f32]; KB] =
            std::array::from_fn(|b| &sent[hd.k + (j0 + b.min(kb - 1)) * stride..][..dh]);
        let mut acc = [[0f32; QL]; KB];
        for (d, qd) in qt.chunks_exact(QL).enumerate() {
            for (a, k) in acc.iter_mut().zip(&k) {
                let x = k[d];
                for (a, &q) in a.iter_mut().zip(qd) {
                    *a = x.mul_add(q, *a);
                }
            }
        }
        for (a, row) in acc.iter().zip(e[j0 * QL..].chunks_exact_mut(QL)).take(kb) {
            row.copy_from_slice(a);
        }
    }
}

/// The softmax of each lane (query `i0 + l`) down the score rows `e` (one row of
/// 16 lanes per real key), in place without the division: `e[j][l]` becomes
/// `exp(s_jl - max_l)`, or 0 where key `j` is hidden from query `i0 + l` (the
/// window, the causal mask; `bias`, `[seq, seq]` (query, key), added first).
/// Returns each lane's 1 / sum (0 for a query that sees no key).
#[inline(always)]
fn softmax_lanes(
    e: &mut [f32],
    hd: Head,
    i0: usize,
    bias: Option<&[f32]>,
    mask: Mask,
) -> [f32; QL] {
    let seq = hd.seq;
    if let Some(b) = bias {
        for (j, row) in e.chunks_exact_mut(QL).enumerate() {
            for (l, x) in row.iter_mut().enumerate() {
                *x += b[(i0 + l).min(seq - 1) * seq + j];
            }
        }
    }
    // Lane positions as i32 (64-bit compares do not fill a 16-lane register):
    // key j is seen by query i when -ahead <= i - j <= half.
    let half = mask.half.min(i32::MAX as usize) as i32;
    let ahead = if mask.causal { 0 } else { half };
    let qi: [i32; QL] = std::array::from_fn(|l| (i0 + l) as i32);
    let seen = |i: i32, j: usize| {
        let d = i - j as i32;
        d <= half && d >= -ahead
    };
    let mut m = [f32::NEG_INFINITY; QL];
    for (j, row) in e.chunks_exact(QL).enumerate() {
        for ((m, &x), &i) in m.iter_mut().zip(row).zip(&qi) {
            let x = if seen(i, j) { x } else { f32::NEG_INFINITY };
            *m = if x > *m { x } else { *m };
        }
    }
    let mut sum = [0f32; QL];
    for (j, row) in e.chunks_exact_mut(QL).enumerate() {
        for (((s, x), &m), &i) in sum.iter_mut().zip(row).zip(&m).zip(&qi) {
            let v = exp_neg(m - *x);
            *x = if seen(i, j) { v } else { 0.0 };
            *s += *x;
        }
    }
    std::array::from_fn(|l| if sum[l] > 0.0 { 1.0 / sum[l] } else { 0.0 })
}

/// `n` rows of `dh` values (row `l` at `sent[first + l * stride..]`) transposed
/// into `dst` (`dh` rows of 16 lanes; lanes past `n` repeat row `n - 1`). Not
/// inlined into the vectorised caller on purpose: the compiler would turn the
/// strided moves into gathers and scatters, slower than the moves.
#[inline(never)]
fn transpose_rows(
    sent: &[f32],
    (first, stride): (usize, usize),
    n: usize,
    dh: usize,
    dst: &mut [f32],
) {
    let rows: [&[f32]; QL] = std::array::from_fn(|l| &sent[first + l.min(n - 1) * stride..][..dh]);
    for (d, out) in dst[..dh * QL].chunks_exact_mut(QL).enumerate() {
        for (x, row) in out.iter_mut().zip(&rows) {
            *x = row[d];
        }
    }
}

/// `f` folded over 16 lanes as a fixed tree (lanes `l` and `l + 8`, then `+ 4`,
/// `+ 2`, `+ 1`): one order on every CPU.
#[inline(always)]
fn tree(v: [f32; KC], f: impl Fn(f32, f32) -> f32) -> f32 {
    let v8: [f32; 8] = std::array::from_fn(|l| f(v[l], v[l + 8]));
    let v4: [f32; 4] = std::array::from_fn(|l| f(v8[l], v8[l + 4]));
    f(f(v4[0], v4[2]), f(v4[1], v4[3]))
}

#[cfg(target_arch = "x86_64")]
mod avx512;
mod context;
mod long;
use context::{context, Block};
#[cfg(test)]
mod tests;
