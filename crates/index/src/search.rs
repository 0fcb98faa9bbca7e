//! Search of a quantized index: scan every code (all cores), keep the best
//! `rescore x k` candidates, rescore them exactly on the f32 vectors.

use bertflow_kernels::codes::CodeIsa;

use crate::format::normalise_into;
use crate::reader::{dot, top_k};
use crate::{Index, IndexError, Quantization};

/// Candidates rescored exactly per result asked, unless said otherwise:
/// chosen from the measurements in `benchmarks/index-10m.md` and
/// `benchmarks/index-rescore.md` (200k MiniLM-like vectors, 1,000 STS queries:
/// binary:itq recall@10 0.977 at 20, 0.989 at 50, 0.995 at 100, for about 4 ms
/// more per query from 20 to 50; int8 is 1.0 from 2). The codes' rank of a
/// true neighbour grows with the corpus, so 50 keeps binary codes near 0.95 at
/// 1M where 20 gave 0.94; 10M needs a larger `--rescore` (see the docs).
pub const DEFAULT_RESCORE: usize = 50;

/// Bit codes scored per call of the block kernel.
const BLOCK_ROWS: usize = 4096;

/// Rows scanned per thread at least (fewer rows are not worth a thread).
const MIN_ROWS_PER_THREAD: usize = 32_768;

/// How a quantized index is searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchParams {
    /// The best `rescore x top_k` codes are rescored exactly (at least 1).
    pub rescore: usize,
    /// Threads scanning the codes; 0: one per core.
    pub threads: usize,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            rescore: DEFAULT_RESCORE,
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
    /// code on `params.threads` threads, and the best `params.rescore x
    /// top_k` are rescored exactly on their f32 vectors (the only vectors
    /// read). The scores returned are exact cosines; a sentence is missed
    /// only when its code ranks below that many others.
    pub fn search_with(
        &self,
        query: &[f32],
        top_k: usize,
        params: &SearchParams,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let Some(quantizer) = self.quantizer() else {
            return self.search_exact(query, top_k);
        };
        let d = self.identity().dimension;
        if query.len() != d {
            return Err(IndexError::Invalid(format!(
                "query of dimension {} for an index of dimension {d}",
                query.len()
            )));
        }
        if params.rescore == 0 {
            return Err(IndexError::Invalid(
                "rescore must be at least 1 (candidates rescored per result)".into(),
            ));
        }
        let k = top_k.min(self.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut q = Vec::with_capacity(d);
        normalise_into(query, &mut q);
        let candidates =
            // At most every row: a huge rescore must not ask the top-k for room
            // it cannot have (it allocates its capacity up front).
            self.scan_codes(
                quantizer,
                &q,
                k.saturating_mul(params.rescore).min(self.len()),
                params,
            )?;
        let mut rescored = Vec::with_capacity(candidates.len());
        for (i, _) in candidates {
            let v = self.vector(i).ok_or_else(|| {
                IndexError::Corrupt(format!("sentence {i}: no vector for a code"))
            })?;
            rescored.push((i, dot(v, &q)));
        }
        Ok(self::top_k(rescored, k))
    }

    /// The `want` best rows by code score, best first.
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
        let scan = |from: usize, to: usize| {
            let mut best: Vec<(usize, f32)> = Vec::new();
            let mut distances = Vec::new();
            for s in self.segment_list() {
                let lo = from.clamp(s.first, s.first + s.count);
                let hi = to.clamp(s.first, s.first + s.count);
                let Some(codes) = self
                    .codes(s)
                    .get((lo - s.first) * width..(hi - s.first) * width)
                else {
                    continue;
                };
                if bits {
                    for (b, block) in codes.chunks(BLOCK_ROWS * width).enumerate() {
                        crate::quant::hamming_block(code, block, &mut distances);
                        let first = lo + b * BLOCK_ROWS;
                        let scored = distances
                            .iter()
                            .enumerate()
                            .map(|(j, &h)| (first + j, -(h as f32)));
                        best = top_k(best.drain(..).chain(scored), want);
                    }
                } else {
                    let scored = codes
                        .chunks_exact(width)
                        .enumerate()
                        .map(|(j, c)| (lo + j, score(isa, code, c) as f32));
                    best = top_k(best.drain(..).chain(scored), want);
                }
            }
            best
        };
        if threads == 1 {
            return Ok(scan(0, n));
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
                        .map_err(|_| IndexError::Invalid("a search thread panicked".into()))
                })
                .collect::<Result<_, _>>()
        })?;
        Ok(top_k(parts.into_iter().flatten(), want))
    }
}
