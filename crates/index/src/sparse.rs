//! Sparse search: the exact dot product of a sparse query with every stored
//! sparse vector, over the postings of the query's tokens (see
//! [`crate::sparse_format`]).

use crate::reader::top_k;
use crate::sparse_format::{SparseBlock, SparseInfo, SparseRef};
use crate::{Index, IndexError};

/// The error for a sparse search of an index without sparse vectors.
fn no_sparse() -> IndexError {
    IndexError::Invalid(
        "this index stores no sparse vectors (it was built without them, or before bertflow \
         stored them), so it is searched by dense vectors only: build it again with sparse \
         vectors (`bertflow index build --with-sparse`, the model's SPLADE or BGE-M3 sparse \
         output, or `--sparse FILE`, vectors `bertflow encode` wrote) to search it in sparse or \
         hybrid mode"
            .into(),
    )
}

impl Index {
    /// What made the index's sparse vectors (`None`: it stores none).
    pub fn sparse_info(&self) -> Option<&SparseInfo> {
        self.footer().sparse.as_ref()
    }

    /// Entries (token, row) of every stored sparse vector together.
    pub fn sparse_postings(&self) -> u64 {
        self.footer()
            .segments
            .iter()
            .filter_map(|s| s.sparse.as_ref().map(|b| b.postings))
            .sum()
    }

    /// Check a query: ids strictly ascending (as [`crate::SparseRef`]s are),
    /// as many weights, every weight finite.
    fn check_query(&self, query: SparseRef) -> Result<&SparseInfo, IndexError> {
        let info = self.sparse_info().ok_or_else(no_sparse)?;
        let (ids, weights) = query;
        if ids.len() != weights.len() {
            return Err(IndexError::Invalid(format!(
                "a sparse query of {} token ids and {} weights",
                ids.len(),
                weights.len()
            )));
        }
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(IndexError::Invalid(
                "a sparse query's token ids must be strictly ascending".into(),
            ));
        }
        if let Some(w) = weights.iter().find(|w| !w.is_finite()) {
            return Err(IndexError::Invalid(format!(
                "a sparse query's weight {w} is not finite"
            )));
        }
        Ok(info)
    }

    /// Every row that shares a token with `query`, with its dot product
    /// with the query, in row order: the postings of each query token
    /// (ascending) are accumulated, so a row's score is summed in the order
    /// of [`sparse_dot`] (equal to it bit for bit). A damaged block (offsets
    /// out of order, a row out of its segment or out of order, a weight not
    /// finite or not positive) is an error.
    pub fn sparse_scores(&self, query: SparseRef) -> Result<Vec<(usize, f32)>, IndexError> {
        self.check_query(query)?;
        let map = self.map_bytes();
        let mut out = Vec::new();
        let mut acc: Vec<f32> = Vec::new();
        let mut hit: Vec<bool> = Vec::new();
        for (k, s) in self.segment_list().iter().enumerate() {
            let block = s.sparse.as_ref().ok_or_else(no_sparse)?;
            acc.clear();
            acc.resize(s.count, 0.0);
            hit.clear();
            hit.resize(s.count, false);
            for (&id, &qw) in query.0.iter().zip(query.1) {
                let Some(entries) = block.postings_of(map, id)? else {
                    continue;
                };
                let mut previous: Option<u32> = None;
                for e in entries {
                    let (row, w) = block.entry(map, e);
                    let ok = (row as usize) < s.count
                        && previous.is_none_or(|p| p < row)
                        && w.is_finite()
                        && w > 0.0;
                    if !ok {
                        return Err(damaged(k, id));
                    }
                    previous = Some(row);
                    acc[row as usize] += qw * w;
                    hit[row as usize] = true;
                }
            }
            out.extend(
                hit.iter()
                    .zip(&acc)
                    .enumerate()
                    .filter(|(_, (&h, _))| h)
                    .map(|(j, (_, &a))| (s.first + j, a)),
            );
        }
        Ok(out)
    }

    /// The `top_k` rows by sparse dot product with `query`, best first (ties:
    /// lower row first), as `(row, score)`; exact. Only rows that share a
    /// token with the query are returned (others score 0).
    pub fn search_sparse(
        &self,
        query: SparseRef,
        top_k: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        Ok(top_k_of(self.sparse_scores(query)?, top_k))
    }

    /// The sparse dot product of row `i` with `query` (0 when they share no
    /// token): each query token's postings bisected for the row.
    pub fn sparse_score(&self, i: usize, query: SparseRef) -> Result<f32, IndexError> {
        self.check_query(query)?;
        let s = self.segment_of(i).ok_or_else(|| {
            IndexError::Invalid(format!("no sentence {i} in an index of {}", self.len()))
        })?;
        let block = s.sparse.as_ref().ok_or_else(no_sparse)?;
        let map = self.map_bytes();
        let row = (i - s.first) as u32;
        let mut score = 0f32;
        for (&id, &qw) in query.0.iter().zip(query.1) {
            let Some(entries) = block.postings_of(map, id)? else {
                continue;
            };
            let (mut lo, mut hi) = (entries.start, entries.end);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let (r, w) = block.entry(map, mid);
                match r.cmp(&row) {
                    std::cmp::Ordering::Less => lo = mid + 1,
                    std::cmp::Ordering::Greater => hi = mid,
                    std::cmp::Ordering::Equal => {
                        if !(w.is_finite() && w > 0.0) {
                            return Err(damaged(self.segment_number(i), id));
                        }
                        score += qw * w;
                        break;
                    }
                }
            }
        }
        Ok(score)
    }

    fn segment_number(&self, i: usize) -> usize {
        self.segment_list()
            .partition_point(|s| s.first + s.count <= i)
    }

    /// Every sparse block checked whole: its CRC-32 and every value (ids
    /// strictly ascending and below the dimension, offsets in order, rows
    /// ascending within the segment, weights finite and positive).
    pub(crate) fn verify_sparse(&self) -> Result<(), IndexError> {
        let Some(info) = self.sparse_info() else {
            return Ok(());
        };
        let map = self.map_bytes();
        for (k, (s, meta)) in self
            .segment_list()
            .iter()
            .zip(&self.footer().segments)
            .enumerate()
        {
            let (Some(block), Some(m)) = (&s.sparse, &meta.sparse) else {
                return Err(no_sparse());
            };
            let bytes = &map[block.offsets.start..block.weights.end];
            if crc32fast::hash(bytes) != m.crc32 {
                return Err(IndexError::Corrupt(format!(
                    "segment {k}: the checksum of its sparse postings does not match (the file is corrupt)"
                )));
            }
            check_whole(block, map, s.count, info.dimension).map_err(|why| {
                IndexError::Corrupt(format!("segment {k}: sparse postings: {why}"))
            })?;
        }
        Ok(())
    }
}

fn check_whole(b: &SparseBlock, map: &[u8], count: usize, dimension: u64) -> Result<(), String> {
    let mut previous_id: Option<u32> = None;
    for t in 0..b.tokens {
        let id = b.id(map, t);
        if previous_id.is_some_and(|p| p >= id) || u64::from(id) >= dimension {
            return Err(format!("token id {id} out of order or out of range"));
        }
        previous_id = Some(id);
        let entries = b.entries(map, t).map_err(|e| e.to_string())?;
        let mut previous: Option<u32> = None;
        for e in entries {
            let (row, w) = b.entry(map, e);
            if row as usize >= count || previous.is_some_and(|p| p >= row) {
                return Err(format!(
                    "token {id}: row {row} out of order or out of range"
                ));
            }
            if !(w.is_finite() && w > 0.0) {
                return Err(format!("token {id}: weight {w} is not finite and positive"));
            }
            previous = Some(row);
        }
    }
    Ok(())
}

fn damaged(segment: usize, id: u32) -> IndexError {
    IndexError::Corrupt(format!(
        "segment {segment}: the sparse postings of token {id} are damaged (a row out of range or \
         out of order, or a weight not finite and positive); `bertflow index verify` checks them"
    ))
}

/// The `k` best `(row, score)` pairs, best first, ties to the lower row.
pub fn top_k_of(scored: Vec<(usize, f32)>, k: usize) -> Vec<(usize, f32)> {
    let k = k.min(scored.len());
    top_k(scored, k)
}

/// The dot product of two sparse vectors (ids strictly ascending), summed in
/// ascending id order: what [`Index::sparse_scores`] computes, for a
/// brute-force scan.
pub fn sparse_dot(a: SparseRef, b: SparseRef) -> f32 {
    let (mut i, mut j, mut s) = (0, 0, 0f32);
    while i < a.0.len() && j < b.0.len() {
        match a.0[i].cmp(&b.0[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                s += a.1[i] * b.1[j];
                i += 1;
                j += 1;
            }
        }
    }
    s
}
