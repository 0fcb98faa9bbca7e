//! Search of a quantized index: scan every code (all cores), keep the best
//! `shortlist x rescore x k` candidates, re-rank bit codes by the float query
//! against their signs down to `rescore x k`, rescore those exactly on their
//! f32 vectors.

use bertflow_kernels::codes::{hamming_block_with, CodeIsa};

use crate::reader::{stored_score, top_k};
use crate::{Index, IndexError, Quantization};

/// Candidates rescored exactly per result asked, unless said otherwise:
/// chosen from the measurements in `benchmarks/index-10m.md` and
/// `benchmarks/index-rescore.md` (200k MiniLM-like vectors, 1,000 STS queries:
/// binary:itq recall@10 0.977 at 20, 0.989 at 50, 0.995 at 100, for about 4 ms
/// more per query from 20 to 50; int8 is 1.0 from 2). The codes' rank of a
/// true neighbour grows with the corpus; with the re-ranking of
/// [`DEFAULT_SHORTLIST`], 50 gives binary:itq recall@10 0.995 at 1M and 0.973
/// at 10M (0.966 and 0.897 without it; `benchmarks/index-scan.md`), 20 gives
/// 0.988 and 0.950.
pub const DEFAULT_RESCORE: usize = 50;

/// Bit codes: candidates kept by the Hamming scan per candidate rescored
/// exactly, unless said otherwise. The scan keeps the best `shortlist x
/// rescore x k` codes by Hamming distance; they are re-ranked by the float
/// query against their signs (no file read: the codes are in memory) and the
/// best `rescore x k` of those are rescored exactly. 1: no re-ranking (the
/// Hamming order alone). Int8 codes ignore it. Chosen from
/// `benchmarks/index-scan.md` (1M MiniLM-like vectors, binary:itq, 1,000 STS
/// queries, recall@10 at rescore 10 for shortlist 1 / 4 / 8 / 16 / 32 / 64:
/// 0.912 / 0.958 / 0.973 / 0.978 / 0.981 / 0.982; at rescore 50, 0.966 with
/// shortlist 1): past 16 the gain is small and the re-ranking's cost grows.
pub const DEFAULT_SHORTLIST: usize = 16;

/// Bit codes scored per call of the block kernel.
const BLOCK_ROWS: usize = 4096;

/// Rows scanned per thread at least (fewer rows are not worth a thread).
const MIN_ROWS_PER_THREAD: usize = 32_768;

/// How a quantized index is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchParams {
    /// The best `rescore x top_k` candidates are rescored exactly (at least 1).
    pub rescore: usize,
    /// Bit codes: the scan keeps `shortlist` times as many candidates, which
    /// the float query re-ranks (at least 1; 1: none). See
    /// [`DEFAULT_SHORTLIST`].
    pub shortlist: usize,
    /// Threads scanning the codes; 0: one per core.
    pub threads: usize,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            rescore: DEFAULT_RESCORE,
            shortlist: DEFAULT_SHORTLIST,
            threads: 0,
        }
    }
}

impl Index {
    /// The quantizer of a quantized index (format version 3).
    pub fn quantizer(&self) -> Option<&Quantization> {
        self.footer().quantizer.as_ref()
    }

    /// The `top_k` sentences most similar to `query`, best first, as
    /// `(index, cosine)`. Without a quantizer, exact ([`Index::search_exact`]);
    /// with one, the codes of every sentence are scored against the query's
    /// code on `params.threads` threads (each segment's codes are read into
    /// memory on first use and kept). Bit codes: the best `params.shortlist x
    /// params.rescore x top_k` by Hamming distance (ties: lower index) are
    /// re-ranked by the float query against their signs; the best
    /// `params.rescore x top_k` (by code score for int8) are rescored exactly
    /// on their f32 vectors, read from the file by positioned reads (the only
    /// vectors read). The scores returned are exact cosines; a sentence is
    /// missed only when its code ranks below that many others.
    pub fn search_with(
        &self,
        query: &[f32],
        top_k: usize,
        params: &SearchParams,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let Some(quantizer) = self.quantizer() else {
            return self.search_exact(query, top_k);
        };
        let q = self.unit_query(query, Some(params.rescore))?;
        if params.shortlist == 0 {
            return Err(IndexError::Invalid(
                "shortlist must be at least 1 (candidates re-ranked per candidate rescored)".into(),
            ));
        }
        let k = top_k.min(self.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        // At most every row: a huge rescore must not ask the top-k for room
        // it cannot have (it allocates its capacity up front).
        let rescored = k.saturating_mul(params.rescore).min(self.len());
        let table = quantizer.sign_table(&q);
        let scanned = match table {
            Some(_) => rescored.saturating_mul(params.shortlist).min(self.len()),
            None => rescored,
        };
        let mut candidates = self.scan_codes(quantizer, &q, scanned, params)?;
        if let Some(table) = table.filter(|_| scanned > rescored) {
            let width = quantizer.width();
            // In row order: the codes are read in memory order.
            candidates.sort_unstable_by_key(|c| c.0);
            let reranked = candidates
                .iter()
                .map(|&(i, _)| Ok((i, table.score(self.code_of(i, width)?))))
                .collect::<Result<Vec<_>, IndexError>>()?;
            candidates = self::top_k(reranked, rescored);
        }
        let ids: Vec<usize> = candidates.iter().map(|c| c.0).collect();
        self.rescore_exact(ids, &q, k)
    }

    /// The `k` best of the candidates `ids` by their exact cosine with
    /// `unit_query` (unit-normalised), best first (ties: lower index): their
    /// f32 vectors read by positioned reads, in file order (the only vectors
    /// a quantized search reads). Repeated ids count once.
    pub(crate) fn rescore_exact(
        &self,
        mut ids: Vec<usize>,
        unit_query: &[f32],
        k: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let d = self.identity().dimension;
        ids.sort_unstable();
        ids.dedup();
        let mut rows = Vec::new();
        self.read_vectors(&ids, &mut rows)?;
        let exact = ids
            .iter()
            .zip(rows.chunks_exact(d))
            .filter_map(|(&i, v)| Some((i, stored_score(v, unit_query)?)));
        Ok(self::top_k(exact, k))
    }

    /// The `want` best rows by code score, best first (ties: lower index).
    fn scan_codes(
        &self,
        quantizer: &Quantization,
        unit_query: &[f32],
        want: usize,
        params: &SearchParams,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let code = quantizer.code(unit_query);
        let code = code.as_slice();
        let width = quantizer.width();
        let isa = CodeIsa::best();
        let score = quantizer.scorer();
        let n = self.len();
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let threads = match params.threads {
            0 => cores,
            t => t,
        }
        .min(n.div_ceil(MIN_ROWS_PER_THREAD))
        .max(1);
        let bits = quantizer.kind != crate::CodeKind::Int8;
        // Rows [from, to) of the whole index, segment by segment; bit codes a
        // block at a time.
        let scan = |from: usize, to: usize| -> Result<Vec<(usize, f32)>, IndexError> {
            let mut nearest = Nearest::new(want, 8 * width);
            let mut best: Vec<(usize, f32)> = Vec::new();
            let mut distances = Vec::new();
            for (k, s) in self.segment_list().iter().enumerate() {
                let lo = from.clamp(s.first, s.first + s.count);
                let hi = to.clamp(s.first, s.first + s.count);
                if lo == hi {
                    continue;
                }
                let codes = self
                    .segment_codes(k)?
                    .get((lo - s.first) * width..(hi - s.first) * width)
                    .ok_or_else(|| IndexError::Corrupt(format!("segment {k}: codes cut short")))?;
                if bits {
                    for (b, block) in codes.chunks(BLOCK_ROWS * width).enumerate() {
                        hamming_block_with(isa, code, block, &mut distances);
                        nearest.offer(lo + b * BLOCK_ROWS, &distances);
                    }
                } else {
                    let scored = codes
                        .chunks_exact(width)
                        .enumerate()
                        .map(|(j, c)| (lo + j, score(isa, code, c) as f32));
                    best = top_k(best.drain(..).chain(scored), want);
                }
            }
            Ok(if bits { nearest.finish() } else { best })
        };
        if threads == 1 {
            return scan(0, n);
        }
        let per = n.div_ceil(threads);
        let parts: Vec<Vec<(usize, f32)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let scan = &scan;
                    scope.spawn(move || scan(t * per, ((t + 1) * per).min(n)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .map_err(|_| IndexError::Invalid("a search thread panicked".into()))?
                })
                .collect::<Result<_, _>>()
        })?;
        Ok(top_k(parts.into_iter().flatten(), want))
    }
}

/// The `want` smallest Hamming distances offered, in the order of [`top_k`]
/// on their negatives (smaller distance first, ties to the lower row),
/// without a heap: rows are offered in increasing order, distances are small
/// integers, so a histogram of the distances kept gives the threshold below
/// which a later row can still rank (a later row at the threshold loses the
/// tie to the `want` kept before it). The kept list is cut back to `want`
/// when it reaches twice that; each row costs one comparison.
pub(crate) struct Nearest {
    want: usize,
    /// Rows kept, in the order offered, with their distances.
    kept: Vec<(usize, u32)>,
    /// How many of `kept` have each distance.
    counts: Vec<usize>,
    /// Rows at this distance or more can no longer rank.
    limit: u32,
}

impl Nearest {
    /// The `want` best of distances up to `max`.
    pub(crate) fn new(want: usize, max: usize) -> Self {
        Nearest {
            want,
            kept: Vec::new(),
            counts: vec![0; max + 1],
            limit: u32::MAX,
        }
    }

    /// Rows `first, first + 1, ...` at `distances` (each at most `max`);
    /// rows must be offered in increasing order.
    pub(crate) fn offer(&mut self, first: usize, distances: &[u32]) {
        if self.want == 0 {
            return;
        }
        for (c, chunk) in distances.chunks(16).enumerate() {
            // Most chunks hold no row under the limit once it has settled: a
            // test the compiler vectorises with baseline SSE2 (signed
            // compares; distances are far below 2^31) skips them.
            let limit = self.limit.min(i32::MAX as u32) as i32;
            let any = chunk
                .iter()
                .fold(0i32, |any, &h| any | i32::from((h as i32) < limit));
            if any == 0 {
                continue;
            }
            for (j, &h) in chunk.iter().enumerate() {
                if h < self.limit {
                    self.kept.push((first + c * 16 + j, h));
                    self.counts[h as usize] += 1;
                    if self.kept.len() >= 2 * self.want {
                        self.cut();
                    }
                }
            }
        }
    }

    /// Keep the `want` best (of at least `want` kept): those under the
    /// threshold distance `t` and the first ones at `t`.
    fn cut(&mut self) {
        let (mut t, mut below) = (0usize, 0usize);
        while below + self.counts[t] < self.want {
            below += self.counts[t];
            t += 1;
        }
        let mut at_t = self.want - below;
        let t32 = t as u32;
        self.kept.retain(|&(_, h)| {
            h < t32
                || h == t32 && at_t > 0 && {
                    at_t -= 1;
                    true
                }
        });
        self.counts[t] = self.want - below;
        self.counts[t + 1..].iter_mut().for_each(|c| *c = 0);
        self.limit = t32;
    }

    /// The best `want`, best first, as `(row, -distance)`.
    pub(crate) fn finish(mut self) -> Vec<(usize, f32)> {
        self.kept.sort_unstable_by_key(|&(i, h)| (h, i));
        self.kept.truncate(self.want);
        self.kept
            .into_iter()
            .map(|(i, h)| (i, -(h as f32)))
            .collect()
    }
}

impl Index {
    /// The checks every search makes of its arguments (a query of the index's
    /// dimension and, where candidates are rescored, a depth of at least 1),
    /// then the query as a unit vector.
    pub(crate) fn unit_query(
        &self,
        query: &[f32],
        rescore: Option<usize>,
    ) -> Result<Vec<f32>, IndexError> {
        let d = self.identity().dimension;
        if query.len() != d {
            return Err(IndexError::Invalid(format!(
                "query of dimension {} for an index of dimension {d}",
                query.len()
            )));
        }
        if rescore == Some(0) {
            return Err(IndexError::Invalid(
                "rescore must be at least 1 (candidates rescored per result)".into(),
            ));
        }
        let mut q = Vec::with_capacity(d);
        crate::format::normalise_into(query, &mut q);
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::Nearest;
    use crate::reader::top_k;

    /// The selection as it was: a top-k over everything.
    fn reference(distances: &[u32], want: usize) -> Vec<(usize, f32)> {
        top_k(
            distances.iter().enumerate().map(|(i, &h)| (i, -(h as f32))),
            want,
        )
    }

    #[test]
    fn the_histogram_selection_equals_the_top_k() {
        let mut h = 11u64;
        let mut next = move || {
            h = h
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            h >> 33
        };
        // Spread distances, heavy ties (a few values), all equal; blocks of
        // assorted sizes; want from 1 to beyond the rows.
        for (max, rows) in [(384u32, 20_000usize), (3, 5000), (0, 3000), (768, 777)] {
            let distances: Vec<u32> = (0..rows)
                .map(|_| {
                    let r = next() as u32;
                    // Mostly near the middle, as real codes are.
                    if max > 8 {
                        max / 2 - 20 + r % 41 - (r >> 16) % 3 * 10
                    } else {
                        r % (max + 1)
                    }
                })
                .collect();
            for want in [1usize, 2, 10, 500, 4999, rows, rows + 3] {
                for block in [1usize, 7, 4096, rows] {
                    let mut nearest = Nearest::new(want, max as usize);
                    for (b, chunk) in distances.chunks(block).enumerate() {
                        nearest.offer(b * block, chunk);
                    }
                    assert_eq!(
                        nearest.finish(),
                        reference(&distances, want),
                        "max {max} rows {rows} want {want} block {block}"
                    );
                }
            }
        }
        // Nothing wanted, nothing offered.
        let mut none = Nearest::new(0, 8);
        none.offer(0, &[1, 2, 3]);
        assert!(none.finish().is_empty());
        assert!(Nearest::new(5, 8).finish().is_empty());
    }
}
