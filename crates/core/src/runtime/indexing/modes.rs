//! The three search modes of an index (`index search --mode
//! dense|sparse|hybrid`, and `/search`'s mode): every default and range is
//! here. Sparse vectors get into the index through `sparse`.
//!
//! - `dense`: cosine of the dense vectors (exact, or through the codes of a
//!   quantized index), as before;
//! - `sparse`: the exact dot product of the query's sparse vector with every
//!   stored one, over the postings of the query's tokens;
//! - `hybrid`: both lists, each cut at a candidate depth (default
//!   [`default_depth`]), fused by reciprocal rank ([`Fusion::Rrf`]: `sum
//!   1/(k + rank)`, `k` = [`DEFAULT_RRF_K`], as Elasticsearch, Vespa and
//!   Weaviate define it) or by a weighted sum ([`Fusion::Weighted`]: `alpha x
//!   cosine + (1 - alpha) x sparse / max sparse`, the sparse score divided by
//!   the best sparse score of the query, both computed exactly for every
//!   candidate of either list).
use crate::error::{CoreError, Result};
use crate::runtime::retrieval::SparseVector;
use bertflow_index::{Index, SearchParams, SparseRef};

/// How `index search` and `/search` rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchMode {
    /// Cosine of the dense vectors.
    #[default]
    Dense,
    /// Dot product of the sparse vectors.
    Sparse,
    /// Both, fused.
    Hybrid,
}

impl std::str::FromStr for SearchMode {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "dense" => Ok(Self::Dense),
            "sparse" => Ok(Self::Sparse),
            "hybrid" => Ok(Self::Hybrid),
            other => Err(CoreError::setting(
                "mode",
                format!("unknown search mode '{other}' (dense, sparse, hybrid)"),
            )),
        }
    }
}

impl std::fmt::Display for SearchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Dense => "dense",
            Self::Sparse => "sparse",
            Self::Hybrid => "hybrid",
        })
    }
}

impl SearchMode {
    /// Whether the mode needs the query's dense vector.
    pub fn needs_dense(self) -> bool {
        self != Self::Sparse
    }
    /// Whether the mode needs the query's sparse vector.
    pub fn needs_sparse(self) -> bool {
        self != Self::Dense
    }
}

/// How hybrid search fuses the two lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fusion {
    /// Reciprocal-rank fusion: `sum over the lists of 1 / (k + rank)`.
    #[default]
    Rrf,
    /// `alpha x cosine + (1 - alpha) x sparse / (the query's best sparse score)`.
    Weighted,
}

impl std::str::FromStr for Fusion {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "rrf" => Ok(Self::Rrf),
            "weighted" => Ok(Self::Weighted),
            other => Err(CoreError::setting(
                "fusion",
                format!("unknown fusion '{other}' (rrf, weighted)"),
            )),
        }
    }
}

/// RRF's rank constant by default (Elasticsearch's `rank_constant`, Vespa's
/// and Weaviate's `k`): 60.
pub const DEFAULT_RRF_K: f64 = 60.0;
/// Weighted fusion's weight of the dense cosine by default.
pub const DEFAULT_ALPHA: f32 = 0.5;

/// Candidates taken from each list before fusion, by default: `max(10 x
/// top_k, 100)`.
pub fn default_depth(top_k: usize) -> usize {
    top_k.saturating_mul(10).max(100)
}

/// Hybrid search's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionParams {
    pub fusion: Fusion,
    /// RRF's rank constant: finite, `>= 1`.
    pub rrf_k: f64,
    /// Weighted fusion's weight of the cosine: in `[0, 1]`.
    pub alpha: f32,
    /// Candidates per list (`None`: [`default_depth`]); at least 1.
    pub depth: Option<usize>,
}

impl Default for FusionParams {
    fn default() -> Self {
        Self {
            fusion: Fusion::Rrf,
            rrf_k: DEFAULT_RRF_K,
            alpha: DEFAULT_ALPHA,
            depth: None,
        }
    }
}

impl FusionParams {
    /// Error naming the setting out of its range.
    pub fn check(&self) -> Result<()> {
        if !(self.rrf_k.is_finite() && self.rrf_k >= 1.0) {
            return Err(CoreError::setting(
                "rrf-k",
                format!(
                    "{} is not a rank constant (a number >= 1; default 60)",
                    self.rrf_k
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(CoreError::setting(
                "alpha",
                format!(
                    "{} is not a weight in [0, 1] (the dense cosine's; default 0.5)",
                    self.alpha
                ),
            ));
        }
        if self.depth == Some(0) {
            return Err(CoreError::setting(
                "depth",
                "candidates per list must be at least 1".to_owned(),
            ));
        }
        Ok(())
    }

    /// Candidates per list for `top_k` results (never fewer than `top_k`).
    pub fn depth_for(&self, top_k: usize) -> usize {
        self.depth
            .unwrap_or_else(|| default_depth(top_k))
            .max(top_k)
    }
}

fn as_ref(v: &SparseVector) -> SparseRef<'_> {
    (&v.indices, &v.values)
}

/// The best `top_k` rows of `index` for a query in `mode`, best first (ties:
/// lower row), as `(row, score)`: the score is the cosine (dense), the dot
/// product (sparse), or the fused score (hybrid). `dense` is the query's
/// dense vector (needed unless sparse), `sparse` its sparse vector (needed
/// unless dense); `dense_params` says how a quantized index is scanned.
pub fn search_index(
    index: &Index,
    dense: Option<&[f32]>,
    sparse: Option<&SparseVector>,
    mode: SearchMode,
    top_k: usize,
    fusion: &FusionParams,
    dense_params: &SearchParams,
) -> Result<Vec<(usize, f32)>> {
    search_index_with(index, dense, sparse, mode, top_k, fusion, &|q, k| {
        Ok(index.search_with(q, k, dense_params)?)
    })
}

/// A dense search: the best `k` rows for a query vector, as `(row, cosine)`.
pub type DenseSearch<'a> = dyn Fn(&[f32], usize) -> Result<Vec<(usize, f32)>> + 'a;

/// [`search_index`] with the dense list made by `dense_search(query, k)`
/// (an HNSW graph, an exact scan, ...).
#[allow(clippy::too_many_arguments)]
pub fn search_index_with(
    index: &Index,
    dense: Option<&[f32]>,
    sparse: Option<&SparseVector>,
    mode: SearchMode,
    top_k: usize,
    fusion: &FusionParams,
    dense_search: &DenseSearch,
) -> Result<Vec<(usize, f32)>> {
    fusion.check()?;
    let need =
        |what: &str| CoreError::Input(format!("a {mode} search needs the query's {what} vector"));
    if mode.needs_sparse() && index.sparse_info().is_none() {
        // The index's own error says how to add them.
        index.search_sparse((&[], &[]), 0)?;
    }
    let dense_q = if mode.needs_dense() {
        Some(dense.ok_or_else(|| need("dense"))?)
    } else {
        None
    };
    let sparse_q = if mode.needs_sparse() {
        Some(sparse.ok_or_else(|| need("sparse"))?)
    } else {
        None
    };
    match (dense_q, sparse_q) {
        (Some(q), None) => dense_search(q, top_k),
        (None, Some(s)) => Ok(index.search_sparse(as_ref(s), top_k)?),
        (Some(q), Some(s)) => {
            let depth = fusion.depth_for(top_k);
            let dense_hits = dense_search(q, depth)?;
            let sparse_hits = index.search_sparse(as_ref(s), depth)?;
            match fusion.fusion {
                Fusion::Rrf => Ok(fuse_rrf(&dense_hits, &sparse_hits, fusion.rrf_k, top_k)),
                Fusion::Weighted => {
                    fuse_weighted(index, q, s, &dense_hits, &sparse_hits, fusion.alpha, top_k)
                }
            }
        }
        (None, None) => Err(need("dense or sparse")),
    }
}

/// Reciprocal-rank fusion of ranked lists (best first): each row scores
/// `sum 1 / (k + rank)` over the lists it is in (rank from 1); the best
/// `top_k`, ties to the lower row.
pub fn fuse_rrf(
    dense: &[(usize, f32)],
    sparse: &[(usize, f32)],
    k: f64,
    top_k: usize,
) -> Vec<(usize, f32)> {
    let mut scores: std::collections::BTreeMap<usize, f64> = Default::default();
    for list in [dense, sparse] {
        for (rank, &(row, _)) in list.iter().enumerate() {
            *scores.entry(row).or_default() += 1.0 / (k + (rank + 1) as f64);
        }
    }
    let mut fused: Vec<(usize, f64)> = scores.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.truncate(top_k);
    fused.into_iter().map(|(r, s)| (r, s as f32)).collect()
}

/// Weighted fusion of the candidates of both lists: `alpha x cosine + (1 -
/// alpha) x sparse / best`, each candidate's cosine and sparse score exact
/// (computed for those missing from a list), `best` the query's best sparse
/// score (the sparse list's first; the sparse term is 0 when it is not
/// positive). A row whose stored vector is damaged is left out.
pub fn fuse_weighted(
    index: &Index,
    dense: &[f32],
    sparse: &SparseVector,
    dense_hits: &[(usize, f32)],
    sparse_hits: &[(usize, f32)],
    alpha: f32,
    top_k: usize,
) -> Result<Vec<(usize, f32)>> {
    let mut unit = Vec::with_capacity(dense.len());
    bertflow_index::format::normalise_into(dense, &mut unit);
    let best = sparse_hits.first().map_or(0.0, |h| h.1);
    let mut rows: Vec<usize> = dense_hits.iter().chain(sparse_hits).map(|h| h.0).collect();
    rows.sort_unstable();
    rows.dedup();
    let mut fused = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(cos) = index
            .vector(row)
            .and_then(|v| bertflow_index::stored_score(v, &unit))
        else {
            continue;
        };
        let s = match sparse_hits.iter().find(|h| h.0 == row) {
            Some(h) => h.1,
            None => index.sparse_score(row, as_ref(sparse))?,
        };
        let s = if best > 0.0 { s / best } else { 0.0 };
        fused.push((row, alpha * cos + (1.0 - alpha) * s));
    }
    Ok(bertflow_index::top_k(fused, top_k))
}
