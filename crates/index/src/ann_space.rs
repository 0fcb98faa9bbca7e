//! What the HNSW graph's distance compares ([`AnnMetric`]): the f32 rows of
//! the index (cosine), or, on a quantized index, the codes held in memory, so
//! that walking the graph reads no vector from the file.
//!
//! A stored point is its row number (a one-element slice); a query is passed
//! to hnsw_rs as a slice of another length, which the distance tells apart:
//!
//! - [`AnnMetric::Cosine`]: `1 - cosine` of the rows' f32 vectors; a query is
//!   the bit patterns of its `dimension` unit-normalised floats.
//! - [`AnnMetric::Hamming`] (bit codes): two rows are apart by the Hamming
//!   distance of their codes; a query by its float projection against a code's
//!   signs (the asymmetric score of the scan's shortlist re-ranking,
//!   [`crate::quant::SignTable`]): `best - score`, where `best` is the score of
//!   the query's own code (no code scores more, so distances are >= 0). A query
//!   is `best` and the table's `width x 256` entries, as bit patterns.
//! - [`AnnMetric::Int8`]: two rows are apart by `1 - s^2 (a . b)` on their
//!   codes (the scan's integer dot product, `s` the scale: about `1 - cosine`);
//!   a query by `1 - s (q . c)`, the float query against the code (the code
//!   dequantised); a query is the `dimension` floats of `s q`, as bit patterns.
//!
//! Distances are clamped at 0 (hnsw_rs asserts that they are not negative).

use bertflow_kernels::codes::{dot_i8_with, hamming_with, CodeIsa};
use serde::{Deserialize, Serialize};

use crate::quant::table_score;
use crate::{dot, AnnParams, CodeKind, Index, IndexError};

/// The distance an HNSW graph was built with, recorded in its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnnMetric {
    /// Cosine of the f32 rows (every graph before the metric was recorded).
    #[default]
    Cosine,
    /// Hamming distance of bit codes (`binary`, `ubinary`).
    Hamming,
    /// Dot product of int8 codes.
    Int8,
}

impl AnnMetric {
    /// The metric a new graph over `index` uses: its codes if it has any.
    pub fn of(index: &Index) -> Self {
        match index.quantizer().map(|q| q.kind) {
            None => AnnMetric::Cosine,
            Some(CodeKind::Int8) => AnnMetric::Int8,
            Some(CodeKind::Binary | CodeKind::Ubinary) => AnnMetric::Hamming,
        }
    }

    /// Its name, as in the metadata.
    pub fn name(self) -> &'static str {
        match self {
            AnnMetric::Cosine => "cosine",
            AnnMetric::Hamming => "hamming",
            AnnMetric::Int8 => "int8",
        }
    }

    /// Candidates a graph of this metric rescores exactly per result asked,
    /// unless said otherwise: [`crate::DEFAULT_ANN_RESCORE_INT8`] over int8
    /// codes, [`crate::DEFAULT_ANN_RESCORE`] otherwise (a cosine graph ignores it).
    pub fn default_rescore(self) -> usize {
        match self {
            AnnMetric::Int8 => crate::DEFAULT_ANN_RESCORE_INT8,
            AnnMetric::Cosine | AnnMetric::Hamming => crate::DEFAULT_ANN_RESCORE,
        }
    }

    /// Whether its graph reads codes (and rescores its candidates).
    pub fn on_codes(self) -> bool {
        self != AnnMetric::Cosine
    }
}

/// Whether a graph of `params` can be built over `index`.
pub(crate) fn check_params(index: &Index, params: AnnParams) -> Result<(), IndexError> {
    if params.m < 2 || params.m > 255 || params.ef_construction < params.m {
        return Err(IndexError::Invalid(format!(
            "HNSW parameters m={} ef_construction={}: need 2 <= m <= 255 and ef_construction >= m",
            params.m, params.ef_construction
        )));
    }
    if index.identity().dimension < 2 {
        return Err(IndexError::Invalid(
            "approximate search needs vectors of dimension 2 or more".into(),
        ));
    }
    Ok(())
}

/// A metric bound to the index it reads: what the distance needs per call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Space {
    Cosine,
    Hamming {
        width: usize,
        isa: CodeIsa,
    },
    Int8 {
        width: usize,
        scale: f32,
        isa: CodeIsa,
        /// Whether the CPU has AVX2 and FMA (the float-by-code product).
        fma: bool,
    },
}

impl Space {
    /// `metric` over `index`: an error if the index has no codes of that kind
    /// (a cosine graph reads the f32 rows, which every index has). Every
    /// segment's codes are read into memory now (the distance cannot fail).
    pub(crate) fn new(metric: AnnMetric, index: &Index) -> Result<Self, IndexError> {
        if metric == AnnMetric::Cosine {
            return Ok(Space::Cosine);
        }
        let have = AnnMetric::of(index);
        let q = index
            .quantizer()
            .filter(|_| have == metric)
            .ok_or_else(|| {
                IndexError::Mismatch(format!(
                    "an HNSW graph over {} distances on an index whose graph would use {}",
                    metric.name(),
                    have.name()
                ))
            })?;
        for k in 0..index.segments() {
            index.segment_codes(k)?;
        }
        let (width, isa) = (q.width(), CodeIsa::best());
        Ok(match metric {
            AnnMetric::Int8 => Space::Int8 {
                width,
                scale: q.scale.unwrap_or(1.0) as f32,
                isa,
                fma: has_fma(),
            },
            _ => Space::Hamming { width, isa },
        })
    }

    /// The query as hnsw_rs is given it (see the module's documentation);
    /// `unit` is unit-normalised.
    pub(crate) fn query(&self, index: &Index, unit: &[f32]) -> Vec<u32> {
        let floats: Vec<f32> = match (self, index.quantizer()) {
            (Space::Hamming { .. }, Some(q)) => match q.sign_table(unit) {
                Some(table) => std::iter::once(table.best())
                    .chain(table.entries().iter().copied())
                    .collect(),
                None => Vec::new(),
            },
            (Space::Int8 { scale, .. }, _) => unit.iter().map(|x| x * scale).collect(),
            _ => unit.to_vec(),
        };
        floats.into_iter().map(f32::to_bits).collect()
    }

    /// Ask the processor for the code of `row` ahead of its distance (a hint:
    /// it changes no result; nothing for cosine).
    #[inline]
    pub(crate) fn prefetch(&self, index: &Index, row: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Space::Hamming { width, .. } | Space::Int8 { width, .. } = *self {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            if let Ok(code) = index.code_of(row as usize, width) {
                let lines = code
                    .chunks(64)
                    .map(<[u8]>::as_ptr)
                    .chain(code.last().map(|b| b as *const u8));
                for p in lines {
                    // SAFETY: a prefetch is a hint: it reads nothing into the
                    // program and cannot fault, whatever the address.
                    unsafe { _mm_prefetch(p.cast::<i8>(), _MM_HINT_T0) };
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (index, row);
    }

    /// Whether rows `a` and `b` have the same code (cosine: the same vector).
    pub(crate) fn same(&self, index: &Index, a: u32, b: u32) -> bool {
        let (a, b) = (a as usize, b as usize);
        match *self {
            Space::Cosine => index.vector(a) == index.vector(b),
            Space::Hamming { width, .. } | Space::Int8 { width, .. } => {
                index.code_of(a, width).ok() == index.code_of(b, width).ok()
            }
        }
    }

    /// The distance between `a` and `b`, each a row (one element) or a query.
    pub(crate) fn eval(&self, index: &Index, a: &[u32], b: &[u32]) -> f32 {
        /// A distance no neighbour has (a row whose code cannot be read,
        /// which [`Space::new`] rules out).
        const FAR: f32 = 1e30;
        match *self {
            Space::Cosine => {
                // A row that cannot be read is empty: cosine 0 (as before).
                fn resolve<'a>(index: &'a Index, p: &'a [u32]) -> &'a [f32] {
                    if p.len() == 1 {
                        index.vector(p[0] as usize).unwrap_or(&[])
                    } else {
                        bytemuck::cast_slice(p)
                    }
                }
                (1.0 - dot(resolve(index, a), resolve(index, b))).max(0.0)
            }
            Space::Hamming { width, isa } => {
                let code = |p: &[u32]| index.code_of(p[0] as usize, width).ok();
                match (a.len(), b.len()) {
                    (1, 1) => match (code(a), code(b)) {
                        (Some(x), Some(y)) => hamming_with(isa, x, y) as f32,
                        _ => FAR,
                    },
                    (1, _) => code(a).map_or(FAR, |c| table_distance(b, c)),
                    (_, 1) => code(b).map_or(FAR, |c| table_distance(a, c)),
                    _ => FAR,
                }
            }
            Space::Int8 {
                width,
                scale,
                isa,
                fma,
            } => {
                let code = |p: &[u32]| {
                    index
                        .code_of(p[0] as usize, width)
                        .ok()
                        .map(bytemuck::cast_slice::<u8, i8>)
                };
                let against_query = |q: &[u32], c: &[i8]| {
                    (1.0 - dot_f32_i8_with(fma, bytemuck::cast_slice(q), c)).max(0.0)
                };
                match (a.len(), b.len()) {
                    (1, 1) => match (code(a), code(b)) {
                        (Some(x), Some(y)) => {
                            let s = dot_i8_with(isa, x, y) as f32 * scale * scale;
                            (1.0 - s).max(0.0)
                        }
                        _ => FAR,
                    },
                    (1, _) => code(a).map_or(FAR, |c| against_query(b, c)),
                    (_, 1) => code(b).map_or(FAR, |c| against_query(a, c)),
                    _ => FAR,
                }
            }
        }
    }
}

/// `best - score` of `code` by a query of [`AnnMetric::Hamming`]: its first
/// element `best`, then the sign table's entries.
fn table_distance(query: &[u32], code: &[u8]) -> f32 {
    let Some((&best, table)) = query.split_first() else {
        return 0.0;
    };
    let table: &[f32] = bytemuck::cast_slice(table);
    (f32::from_bits(best) - table_score(table, code)).max(0.0)
}

/// Whether [`dot_f32_i8_avx2`] runs here.
fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `q . c` by [`dot_f32_i8_avx2`] where `fma` says the CPU runs it, else
/// [`dot_f32_i8`] (the sums are added in another order: they may differ in
/// the last bits).
fn dot_f32_i8_with(fma: bool, q: &[f32], c: &[i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if fma {
        // SAFETY: `fma` is true only where the CPU has AVX2 and FMA.
        return unsafe { dot_f32_i8_avx2(q, c) };
    }
    let _ = fma;
    dot_f32_i8(q, c)
}

/// `q . c` (over the shorter length) with AVX2 and FMA: 32 codes per step,
/// widened to i32 then f32, in four running sums of eight lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_f32_i8_avx2(q: &[f32], c: &[i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = q.len().min(c.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, a) in acc.iter_mut().enumerate() {
            let at = i + 8 * j;
            // SAFETY: at + 8 <= n: both reads lie within the slices.
            let (codes, x) = unsafe {
                (
                    _mm_loadl_epi64(c.as_ptr().add(at).cast()),
                    _mm256_loadu_ps(q.as_ptr().add(at)),
                )
            };
            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes));
            *a = _mm256_fmadd_ps(x, f, *a);
        }
        i += 32;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0f32; 8];
    // SAFETY: eight floats written to an array of eight.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    let tail: f32 = q[i..n]
        .iter()
        .zip(&c[i..n])
        .map(|(&x, &y)| x * f32::from(y))
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// `q . c`, floats against int8 codes, in eight running sums (vectorised).
fn dot_f32_i8(q: &[f32], c: &[i8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut qs = q.chunks_exact(8);
    let mut cs = c.chunks_exact(8);
    for (x, y) in (&mut qs).zip(&mut cs) {
        for l in 0..8 {
            acc[l] += x[l] * f32::from(y[l]);
        }
    }
    let tail: f32 = qs
        .remainder()
        .iter()
        .zip(cs.remainder())
        .map(|(&x, &y)| x * f32::from(y))
        .sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_float_by_code_products_agree() {
        let mut rng = 0x1234_5678_u64;
        let mut next = move || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) as u32
        };
        for n in [0usize, 1, 7, 8, 31, 32, 33, 64, 100, 384, 385] {
            let q: Vec<f32> = (0..n)
                .map(|_| next() as f32 / u32::MAX as f32 - 0.25)
                .collect();
            let c: Vec<i8> = (0..n).map(|_| next() as i8).collect();
            let exact: f64 = q
                .iter()
                .zip(&c)
                .map(|(&x, &y)| f64::from(x) * f64::from(y))
                .sum();
            for fma in [false, has_fma()] {
                let got = f64::from(dot_f32_i8_with(fma, &q, &c));
                assert!(
                    (got - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                    "n {n} fma {fma}: {got} {exact}"
                );
            }
        }
    }
}
