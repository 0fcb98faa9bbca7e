//! Sparse vectors beside the dense rows (format version 4): an inverted list
//! per token id, one block per segment.
//!
//! A footer with [`SparseInfo`] says that every segment holds, beside its
//! dense rows, a sparse vector per row (token ids below
//! [`SparseInfo::dimension`], weights finite and `> 0`; a row may have none).
//! Each segment's are stored right after it, at the next [`ALIGN`]ed offset,
//! as the postings of the tokens that occur in it:
//!
//! ```text
//! (tokens + 1) x u64 LE   where each token's postings start (entries), 0 .. postings
//! tokens x u32 LE         the token ids, strictly ascending
//! postings x u32 LE       row numbers within the segment, strictly ascending per token
//! postings x f32 LE       the weights, finite and > 0
//! ```
//!
//! and the segment's [`SparseSegment`] in the footer records the block's
//! offset, its two counts and its CRC-32. The block is written by the same
//! `add` as its segment, before the footer that lists it, so a crash leaves
//! the previous state exactly as for the dense rows (see [`crate::format`]).
//! Readers check the layout at open (sizes, offsets, the first and last
//! posting offset) and every other value when they use it: a damaged block
//! gives an error, never a panic or a wrong row.

use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::format::{align_up, ALIGN};
use crate::locate::corrupt;
use crate::IndexError;

/// Format version of an index that stores sparse vectors (with or without a
/// quantizer).
pub const SPARSE_FORMAT_VERSION: u32 = 4;

/// What made an index's sparse vectors, and their space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparseInfo {
    /// What made them (e.g. `splade` or `bge-m3 sparse_linear`, with
    /// `max_active_dims`), or the file they came from.
    pub source: String,
    /// Every token id is below this (the vocabulary size).
    pub dimension: u64,
}

/// Where a segment's postings lie and how to check them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SparseSegment {
    /// Byte offset of the block (a multiple of [`ALIGN`]).
    pub offset: u64,
    /// Distinct token ids in the segment.
    pub tokens: u64,
    /// Entries over all its rows.
    pub postings: u64,
    /// CRC-32 of the block.
    pub crc32: u32,
}

impl SparseSegment {
    /// Length of the block in bytes, `None` on overflow.
    pub fn byte_len(&self) -> Option<u64> {
        let offsets = self.tokens.checked_add(1)?.checked_mul(8)?;
        let ids = self.tokens.checked_mul(4)?;
        let entries = self.postings.checked_mul(8)?;
        offsets.checked_add(ids)?.checked_add(entries)
    }
}

/// One row's sparse vector: token ids (strictly ascending) and weights.
pub type SparseRef<'a> = (&'a [u32], &'a [f32]);

/// A checked block: byte ranges into the map.
#[derive(Debug, Clone)]
pub(crate) struct SparseBlock {
    pub(crate) offsets: Range<usize>,
    pub(crate) ids: Range<usize>,
    pub(crate) rows: Range<usize>,
    pub(crate) weights: Range<usize>,
    pub(crate) tokens: usize,
    pub(crate) postings: usize,
}

/// Check the block `meta` of segment `k` (of `count` rows), which must lie
/// at or after `next_free` and end by `footer_at`, with only zero bytes
/// between; returns it and where it ends.
pub(crate) fn check_block(
    map: &[u8],
    meta: &SparseSegment,
    k: usize,
    next_free: u64,
    footer_at: u64,
    path: &Path,
) -> Result<(SparseBlock, u64), IndexError> {
    let bad = |what: &str| corrupt(path, format!("segment {k}: sparse postings {what}"));
    let len = meta.byte_len().ok_or_else(|| bad("size overflows"))?;
    if !meta.offset.is_multiple_of(ALIGN) || meta.offset < next_free || meta.offset > footer_at {
        return Err(bad("misplaced"));
    }
    if map[next_free as usize..meta.offset as usize]
        .iter()
        .any(|&b| b != 0)
    {
        return Err(bad("after non-zero padding"));
    }
    let end = meta
        .offset
        .checked_add(len)
        .filter(|&e| e <= footer_at)
        .ok_or_else(|| bad("run past the footer"))?;
    let tokens = usize::try_from(meta.tokens).map_err(|_| bad("too large"))?;
    let postings = usize::try_from(meta.postings).map_err(|_| bad("too large"))?;
    let start = meta.offset as usize;
    let offsets = start..start + (tokens + 1) * 8;
    let ids = offsets.end..offsets.end + tokens * 4;
    let rows = ids.end..ids.end + postings * 4;
    let weights = rows.end..rows.end + postings * 4;
    let block = SparseBlock {
        offsets,
        ids,
        rows,
        weights,
        tokens,
        postings,
    };
    if block.offset(map, 0) != Some(0) || block.offset(map, tokens) != Some(meta.postings) {
        return Err(bad("offsets do not cover the postings"));
    }
    Ok((block, end))
}

impl SparseBlock {
    /// Posting offset `t` (of `tokens + 1`).
    fn offset(&self, map: &[u8], t: usize) -> Option<u64> {
        let p = self.offsets.start + t * 8;
        let b = map.get(p..p + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn u32_at(map: &[u8], range: &Range<usize>, i: usize) -> u32 {
        let p = range.start + i * 4;
        map.get(p..p + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(u32::MAX, u32::from_le_bytes)
    }

    /// Token id `t` (of `tokens`).
    pub(crate) fn id(&self, map: &[u8], t: usize) -> u32 {
        Self::u32_at(map, &self.ids, t)
    }

    /// The postings of token `id`: where its entries start and end, checked
    /// against the block (`None`: the token does not occur). The ids are
    /// searched by bisection; unsorted ids (damage) may miss a token, never
    /// read out of the block.
    pub(crate) fn postings_of(
        &self,
        map: &[u8],
        id: u32,
    ) -> Result<Option<Range<usize>>, IndexError> {
        let (mut lo, mut hi) = (0, self.tokens);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.id(map, mid).cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return self.entries(map, mid).map(Some),
            }
        }
        Ok(None)
    }

    /// The entries of the `t`-th token, checked: in order and within the block.
    pub(crate) fn entries(&self, map: &[u8], t: usize) -> Result<Range<usize>, IndexError> {
        let (a, b) = (self.offset(map, t), self.offset(map, t + 1));
        match (a, b) {
            (Some(a), Some(b)) if a <= b && b <= self.postings as u64 => Ok(a as usize..b as usize),
            _ => Err(IndexError::Corrupt(format!(
                "sparse postings: the offsets of token number {t} are out of order"
            ))),
        }
    }

    /// Row (within the segment) and weight of entry `e`.
    pub(crate) fn entry(&self, map: &[u8], e: usize) -> (u32, f32) {
        (
            Self::u32_at(map, &self.rows, e),
            f32::from_bits(Self::u32_at(map, &self.weights, e)),
        )
    }
}

/// Error unless `row` (number `i` of a batch) is a sparse vector the index
/// stores: as many weights as ids, ids strictly ascending and below
/// `dimension`, weights finite and not negative (zeros are dropped).
pub(crate) fn check_row(i: usize, row: SparseRef, dimension: u64) -> Result<(), IndexError> {
    let (ids, weights) = row;
    let bad =
        |what: String| IndexError::Invalid(format!("sparse vector {i} of this batch: {what}"));
    if ids.len() != weights.len() {
        return Err(bad(format!(
            "{} token ids for {} weights",
            ids.len(),
            weights.len()
        )));
    }
    if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
        return Err(bad(format!(
            "token ids not strictly ascending ({} then {})",
            w[0], w[1]
        )));
    }
    if let Some(&id) = ids.iter().find(|&&id| u64::from(id) >= dimension) {
        return Err(bad(format!(
            "token id {id} is outside the index's sparse dimension {dimension}"
        )));
    }
    if let Some(w) = weights.iter().find(|w| !w.is_finite() || **w < 0.0) {
        return Err(bad(format!(
            "weight {w}: the index stores finite weights >= 0 (as SPLADE and BGE-M3 make them)"
        )));
    }
    Ok(())
}

/// The block of `rows` (one per row of a segment, checked by [`check_row`]),
/// zero weights left out, and its counts.
pub(crate) fn encode_block(rows: &[SparseRef]) -> (Vec<u8>, u64, u64) {
    let mut entries: Vec<(u32, u32, f32)> = rows
        .iter()
        .enumerate()
        .flat_map(|(r, (ids, ws))| {
            ids.iter()
                .zip(ws.iter())
                .filter(|(_, &w)| w > 0.0)
                .map(move |(&id, &w)| (id, r as u32, w))
        })
        .collect();
    // Stable: rows stay ascending within a token.
    entries.sort_by_key(|e| e.0);
    let mut ids: Vec<u32> = Vec::new();
    let mut offsets: Vec<u64> = vec![0];
    for (k, e) in entries.iter().enumerate() {
        if ids.last() != Some(&e.0) {
            if !ids.is_empty() {
                offsets.push(k as u64);
            }
            ids.push(e.0);
        }
    }
    if !ids.is_empty() {
        offsets.push(entries.len() as u64);
    }
    let mut out = Vec::with_capacity(offsets.len() * 8 + ids.len() * 4 + entries.len() * 8);
    out.extend(offsets.iter().flat_map(|o| o.to_le_bytes()));
    out.extend(ids.iter().flat_map(|i| i.to_le_bytes()));
    out.extend(entries.iter().flat_map(|e| e.1.to_le_bytes()));
    out.extend(entries.iter().flat_map(|e| e.2.to_le_bytes()));
    (out, ids.len() as u64, entries.len() as u64)
}

/// Zero bytes that bring `position` to the next [`ALIGN`]ed offset.
pub(crate) fn padding(position: u64) -> usize {
    (align_up(position) - position) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_lists_each_token_with_its_rows_in_order() {
        let rows: Vec<(Vec<u32>, Vec<f32>)> = vec![
            (vec![3, 7], vec![1.0, 2.0]),
            (vec![], vec![]),
            (vec![0, 3], vec![0.5, 0.0]),
            (vec![3], vec![4.0]),
        ];
        let refs: Vec<SparseRef> = rows.iter().map(|(i, w)| (&i[..], &w[..])).collect();
        let (bytes, tokens, postings) = encode_block(&refs);
        assert_eq!((tokens, postings), (3, 4));
        let meta = SparseSegment {
            offset: 64,
            tokens,
            postings,
            crc32: 0,
        };
        assert_eq!(meta.byte_len(), Some(bytes.len() as u64));
        let mut map = vec![0u8; 64];
        map.extend(&bytes);
        let (block, end) =
            check_block(&map, &meta, 0, 8, map.len() as u64, Path::new("x")).unwrap();
        assert_eq!(end, map.len() as u64);
        let three = block.postings_of(&map, 3).unwrap().unwrap();
        let got: Vec<(u32, f32)> = three.map(|e| block.entry(&map, e)).collect();
        assert_eq!(got, [(0, 1.0), (3, 4.0)]);
        assert!(block.postings_of(&map, 5).unwrap().is_none());
        assert!(check_row(0, (&[2, 1], &[1.0, 1.0]), 10).is_err());
        assert!(check_row(0, (&[1, 12], &[1.0, 1.0]), 10).is_err());
        assert!(check_row(0, (&[1], &[-1.0]), 10).is_err());
        assert!(check_row(0, (&[1], &[f32::NAN]), 10).is_err());
        assert!(check_row(0, (&[1, 2], &[1.0]), 10).is_err());
    }
}
