//! Cosine similarity and the exact (brute-force) search index.

use ndarray::Array2;
use serde::Serialize;

use bertflow_core::indexing::{FusionParams, SearchMode};
use bertflow_core::SparseVector;

use crate::backend::EmbedBackend;
use crate::error::ServerError;
use crate::queue::{embed_checked, plan_batches};

/// Cosine similarity computed in f64; 0 when either vector is zero.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    bertflow_core::numeric::cosine(a.iter().copied(), b.iter().copied())
}

/// `v / |v|` in f64; the zero vector stays zero (so its scores are 0).
fn unit(v: &[f32]) -> Vec<f64> {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 {
        return vec![0.0; v.len()];
    }
    v.iter().map(|&x| f64::from(x) / norm).collect()
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Hit {
    /// Position of the sentence in the corpus.
    pub index: usize,
    /// The corpus sentence.
    pub text: String,
    /// Cosine similarity to the query.
    pub score: f64,
}

/// A searchable corpus behind `POST /search`: either the corpus given in
/// [`crate::ServerConfig::corpus`] (embedded at start-up) or an index the
/// caller opened (e.g. a memory-mapped `bertflow index` file), passed as
/// [`crate::ServerConfig::search_index`]. Called on tokio's blocking pool.
pub trait SearchIndex: Send + Sync + 'static {
    /// Sentences in the index.
    fn len(&self) -> usize;
    /// Whether the index is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Length of the vectors it holds (must equal the backend's dimension).
    fn dimension(&self) -> usize;
    /// The `top_k` sentences most similar to `query` (a raw, not normalised,
    /// backend vector) by cosine, best first.
    fn search(&self, query: &[f32], top_k: usize) -> Result<Vec<Hit>, String>;
    /// Called before every search: an error means the index cannot be read
    /// now (e.g. its file changed under the server and no complete state is
    /// back yet); `/search` answers 503 `index_unavailable` with it.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
    /// How it searches, for `GET /info` (e.g. `exact`, `hnsw(ef=64)`).
    fn method(&self) -> String {
        "exact".into()
    }
    /// Whether a search may take `rescore`, the candidates rescored exactly
    /// per result (a quantized index scanning its codes): `Err` says why not
    /// (no codes, or a bad depth); `/search` answers 422 with it.
    fn check_rescore(&self, rescore: usize) -> Result<(), String> {
        let _ = rescore;
        Err(format!(
            "rescore applies to a quantized index (one that stores codes); this server searches {}",
            self.method()
        ))
    }
    /// Whether a search may take `shortlist`, the candidates the scan of bit
    /// codes keeps per candidate rescored (re-ranked by the float query
    /// first): as [`SearchIndex::check_rescore`].
    fn check_shortlist(&self, shortlist: usize) -> Result<(), String> {
        let _ = shortlist;
        Err(format!(
            "shortlist applies to a quantized index (one that stores codes); this server searches {}",
            self.method()
        ))
    }
    /// [`SearchIndex::search`] with the depth of the scan of codes a request
    /// gives (checked by [`SearchIndex::check_rescore`] and
    /// [`SearchIndex::check_shortlist`] first).
    fn search_rescored(
        &self,
        query: &[f32],
        top_k: usize,
        depth: ScanDepth,
    ) -> Result<Vec<Hit>, String> {
        let _ = depth;
        self.search(query, top_k)
    }
    /// Whether it stores sparse vectors, so that `/search` may take `mode`
    /// `sparse` or `hybrid`. The default: no.
    fn has_sparse(&self) -> bool {
        false
    }
    /// The `top_k` best sentences for a query in `query.mode` (core's
    /// `search_index`): the score is the cosine, the sparse dot product or
    /// the fused score. The default: dense only (see
    /// [`SearchIndex::has_sparse`]).
    fn search_mode(
        &self,
        query: &ModeQuery,
        top_k: usize,
        depth: ScanDepth,
    ) -> Result<Vec<Hit>, String> {
        match (&query.dense, query.mode) {
            (Some(dense), SearchMode::Dense) => self.search_rescored(dense, top_k, depth),
            _ => Err(format!(
                "mode {} needs an index with sparse vectors (bertflow index build \
                 --with-sparse); this server searches {}",
                query.mode,
                self.method()
            )),
        }
    }
}

/// A query of `/search` in a mode: its dense vector (unless the mode is
/// sparse) and sparse vector (unless dense), and hybrid's fusion.
#[derive(Debug, Clone, Default)]
pub struct ModeQuery {
    pub mode: SearchMode,
    pub dense: Option<Vec<f32>>,
    pub sparse: Option<SparseVector>,
    pub fusion: FusionParams,
}

/// How deep a search of a quantized index scans, as a request asks: `None`
/// keeps the server's setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanDepth {
    /// Candidates rescored exactly per result.
    pub rescore: Option<usize>,
    /// Bit codes: candidates kept by the scan per candidate rescored.
    pub shortlist: Option<usize>,
}

/// A [`SearchIndex`] shared with the server; compares by identity.
#[derive(Clone)]
pub struct SharedIndex(pub std::sync::Arc<dyn SearchIndex>);

impl std::fmt::Debug for SharedIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedIndex({} sentences, dimension {}, {})",
            self.0.len(),
            self.0.dimension(),
            self.0.method()
        )
    }
}

impl PartialEq for SharedIndex {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedIndex {}

/// The corpus sentences with their unit-normalised embeddings, one per row
/// (normalised in f64, stored in f32: scores are exact to about 1e-6).
pub(crate) struct CorpusIndex {
    texts: Vec<String>,
    vectors: Array2<f32>,
}

impl CorpusIndex {
    /// Embed `texts` through `backend` (tokenized once, cut at `max_len`) in
    /// batches under the token budget. Blocking: call it from a blocking thread.
    pub(crate) fn build(
        backend: &dyn EmbedBackend,
        texts: Vec<String>,
        dimension: usize,
        max_batch_tokens: usize,
        max_batch_size: usize,
    ) -> Result<Self, ServerError> {
        // Embedded with the default prompt, as every route embeds.
        let prompted = backend
            .prompted(texts.clone(), None)
            .map_err(ServerError::Corpus)?;
        let encodings = prompted
            .iter()
            .enumerate()
            .map(|(i, t)| {
                backend.encode(t, None).map_err(|e| {
                    ServerError::Corpus(format!("corpus sentence {i} cannot be tokenized: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let costs: Vec<usize> = encodings.iter().map(|e| e.len()).collect();
        let mut vectors = Array2::<f32>::zeros((texts.len(), dimension));
        for range in plan_batches(&costs, max_batch_tokens, max_batch_size) {
            let embedded = embed_checked(backend, &encodings[range.clone()], dimension)
                .map_err(ServerError::Corpus)?;
            for (row, e) in range.zip(embedded) {
                for (slot, x) in vectors.row_mut(row).iter_mut().zip(unit(&e.vector)) {
                    *slot = x as f32;
                }
            }
        }
        Ok(Self { texts, vectors })
    }

    /// The `top_k` corpus sentences most similar to `query`, by cosine, best
    /// first (ties: lower index first). Exact.
    pub(crate) fn search_exact(&self, query: &[f32], top_k: usize) -> Vec<Hit> {
        let q: ndarray::Array1<f32> = unit(query).into_iter().map(|x| x as f32).collect();
        let scores = self.vectors.dot(&q);
        bertflow_core::index::top_k(scores.iter().copied().enumerate(), top_k)
            .into_iter()
            .map(|(index, score)| Hit {
                index,
                text: self.texts[index].clone(),
                score: f64::from(score),
            })
            .collect()
    }
}

impl SearchIndex for CorpusIndex {
    fn len(&self) -> usize {
        self.texts.len()
    }

    fn dimension(&self) -> usize {
        self.vectors.ncols()
    }

    fn search(&self, query: &[f32], top_k: usize) -> Result<Vec<Hit>, String> {
        Ok(self.search_exact(query, top_k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_basics() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-12);
        assert!((cosine(&[1.0, 1.0], &[-1.0, -1.0]) + 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
    }

    #[test]
    fn search_ranks_exactly() {
        let index = CorpusIndex {
            texts: vec!["a".into(), "b".into(), "c".into(), "zero".into()],
            vectors: ndarray::array![
                [1.0, 0.0],
                [0.0, 1.0],
                [
                    std::f32::consts::FRAC_1_SQRT_2,
                    std::f32::consts::FRAC_1_SQRT_2
                ],
                [0.0, 0.0]
            ],
        };
        let hits = index.search_exact(&[1.0, 0.1], 3);
        let order: Vec<usize> = hits.iter().map(|h| h.index).collect();
        assert_eq!(order, vec![0, 2, 1]);
        assert!((hits[0].score - cosine(&[1.0, 0.1], &[1.0, 0.0])).abs() < 1e-6);
        assert_eq!(index.search_exact(&[1.0, 0.0], 10).len(), 4);
        assert_eq!(index.search_exact(&[1.0, 0.0], 10)[3].score, 0.0);
    }
}
