//! The context step of [`super::head_attention`]: for a block of 16 queries
//! side by side in the lanes of a vector and their exponentials `e` (one row of
//! 16 lanes per real key), `ctx_l = (sum_j e[j][l] v_j) / sum_l` for each real
//! query row `l`, portable (the AVX-512 build of the whole block is in
//! `avx512.rs`). Columns of the context are accumulated lane-wise (`C` columns
//! at a time: each value broadcast, each row of `e` loaded once), scaled by each
//! lane's 1 / sum, then written into the query rows of `out`. The sum over
//! keys runs in key order in every build, so every build gives the same bits.
use super::{Head, QL};

/// The query rows of one block: the first query, how many are real, and each
/// lane's 1 / (sum of its exponentials).
pub(super) struct Block<'a> {
    pub i0: usize,
    pub rows: usize,
    pub inv: &'a [f32; QL],
}

/// The block's context rows into `out` (`.0`, row stride `.1`), 4 columns at a
/// time, single columns at the end of the row.
#[inline(always)]
pub(super) fn context(sent: &[f32], hd: Head, e: &[f32], blk: &Block, out: (&mut [f32], usize)) {
    let (out, out_stride) = out;
    let mut c = 0;
    while c < hd.dh {
        c += if hd.dh - c >= 4 {
            tile::<4>(sent, hd, e, blk, c, (out, out_stride))
        } else {
            tile::<1>(sent, hd, e, blk, c, (out, out_stride))
        };
    }
}

/// Columns `c..c + C` of the block's rows, portable: `C` accumulators of 16
/// lanes.
#[inline(always)]
fn tile<const C: usize>(
    sent: &[f32],
    hd: Head,
    e: &[f32],
    blk: &Block,
    c: usize,
    (out, out_stride): (&mut [f32], usize),
) -> usize {
    let mut acc = [[0f32; QL]; C];
    for (j, ej) in e.chunks_exact(QL).enumerate().take(hd.len) {
        let at = hd.v + j * hd.stride + c;
        let vj = &sent[at..at + C];
        for (a, &x) in acc.iter_mut().zip(vj) {
            for (a, &p) in a.iter_mut().zip(ej) {
                *a = x.mul_add(p, *a);
            }
        }
    }
    for (l, &inv) in blk.inv.iter().enumerate().take(blk.rows) {
        let at = (blk.i0 + l) * out_stride + c;
        for (o, a) in out[at..at + C].iter_mut().zip(&acc) {
            *o = a[l] * inv;
        }
    }
    C
}
