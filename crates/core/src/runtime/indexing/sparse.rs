//! Sparse vectors in the index and the three search modes (`index build
//! --with-sparse | --sparse FILE`, `index search --mode dense|sparse|hybrid`,
//! and `/search`'s mode): every default and range is here.
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
use crate::runtime::pipeline::Pipeline;
use crate::runtime::retrieval::{Retriever, SparseVector};
use bertflow_index::{Index, IndexWriter, SearchParams, SparseInfo, SparseRef};
use std::path::Path;

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
    dense_search: &dyn Fn(&[f32], usize) -> Result<Vec<(usize, f32)>>,
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

/// Where the sparse vectors of an index come from.
pub enum SparseInput<'a> {
    /// The model's sparse head (SPLADE of a `*ForMaskedLM` checkpoint,
    /// BGE-M3's `sparse_linear.pt`), keeping the `max_active_dims` largest.
    Model {
        retriever: &'a Retriever,
        max_active_dims: Option<usize>,
    },
    /// Made elsewhere (`bertflow encode`'s `.jsonl` or CSR `.npz`): one per
    /// sentence, in order.
    Given {
        vectors: Vec<SparseVector>,
        dimension: usize,
        source: String,
    },
}

/// What an index records of sparse vectors made by `retriever`'s head.
pub fn model_sparse_info(retriever: &Retriever) -> Result<SparseInfo> {
    let kind = retriever.encoder.sparse_kind().ok_or_else(|| {
        CoreError::setting(
            "with-sparse",
            format!(
                "{} has no sparse head: sparse vectors need a *ForMaskedLM checkpoint (SPLADE) \
                 or BGE-M3's sparse_linear.pt (or give them made elsewhere: --sparse FILE)",
                retriever.encoder.encoder().model_id()
            ),
        )
    })?;
    let enc = retriever.encoder.encoder();
    Ok(SparseInfo {
        source: format!(
            "{kind} {}",
            crate::runtime::calibration::model_identity(enc)
        ),
        dimension: retriever.encoder.sparse_dim() as u64,
    })
}

impl SparseInput<'_> {
    /// What the index records.
    pub fn info(&self) -> Result<SparseInfo> {
        match self {
            SparseInput::Model { retriever, .. } => model_sparse_info(retriever),
            SparseInput::Given {
                dimension, source, ..
            } => Ok(SparseInfo {
                source: source.clone(),
                dimension: *dimension as u64,
            }),
        }
    }

    /// The sparse vectors of sentences `from..from + texts.len()`.
    pub fn rows(&self, from: usize, texts: &[String]) -> Result<Vec<SparseVector>> {
        match self {
            SparseInput::Model {
                retriever,
                max_active_dims,
            } => retriever.encode_sparse(texts, *max_active_dims),
            SparseInput::Given { vectors, .. } => vectors
                .get(from..from + texts.len())
                .map(<[SparseVector]>::to_vec)
                .ok_or_else(|| {
                    CoreError::Input(format!(
                        "{} sparse vectors for more sentences: one per sentence",
                        vectors.len()
                    ))
                }),
        }
    }

    /// Error unless a given list holds one vector per sentence of `n`.
    pub fn check_count(&self, n: usize) -> Result<()> {
        match self {
            SparseInput::Given {
                vectors, source, ..
            } if vectors.len() != n => Err(CoreError::Input(format!(
                "{source} holds {} sparse vectors for {n} sentences: one per sentence",
                vectors.len()
            ))),
            _ => Ok(()),
        }
    }
}

/// Write `flat` (dense rows of `texts`) and their sparse vectors.
pub fn add_with_sparse(
    writer: &mut IndexWriter,
    flat: &[f32],
    texts: &[String],
    sparse: &[SparseVector],
) -> Result<()> {
    let refs: Vec<SparseRef> = sparse.iter().map(as_ref).collect();
    Ok(writer.add_sparse(flat, texts, &refs)?)
}

/// The sparse vectors of a `.jsonl` (`"indices"` and `"values"` a line, as
/// `bertflow encode` writes them) or a CSR `.npz`, and the vocabulary size (the
/// `.npz`'s shape; for `.jsonl`, `dimension` or, without it, the largest id + 1).
pub fn read_sparse_file(
    path: &Path,
    dimension: Option<usize>,
) -> Result<(Vec<SparseVector>, usize)> {
    let bytes = crate::runtime::regular::read_regular_file(path, 16 << 30, "sparse vectors file")?;
    let bad = |why: String| CoreError::Input(format!("{}: {why}", path.display()));
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let (vectors, dim) = match ext {
        "npz" => crate::runtime::sparse_io::read_csr_npz(&bytes).map_err(|e| bad(e.to_string()))?,
        "jsonl" | "ndjson" => {
            let mut out = Vec::new();
            let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8".into()))?;
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                #[derive(serde::Deserialize)]
                struct Row {
                    indices: Vec<u32>,
                    values: Vec<f32>,
                }
                let row: Row = serde_json::from_str(line).map_err(|e| {
                    bad(format!(
                        "line {}: {e} (each line needs \"indices\" and \"values\")",
                        n + 1
                    ))
                })?;
                let v = SparseVector {
                    indices: row.indices,
                    values: row.values,
                };
                v.validate(None)
                    .map_err(|e| bad(format!("line {}: {e}", n + 1)))?;
                out.push(v);
            }
            let seen = out
                .iter()
                .filter_map(|v| v.indices.last())
                .max()
                .map_or(1, |&m| m as usize + 1);
            (out, dimension.unwrap_or(seen))
        }
        _ => {
            return Err(bad(
                "sparse vectors are read from .jsonl or a CSR .npz".into()
            ))
        }
    };
    if let Some(d) = dimension {
        if let Some(v) = vectors.iter().find(|v| v.validate(Some(d)).is_err()) {
            return Err(bad(format!(
                "a token id {} is outside the model's vocabulary of {d}",
                v.indices.last().copied().unwrap_or(0)
            )));
        }
    }
    Ok((vectors, dim))
}

/// Embed `texts` into `writer` (an index with sparse vectors), `chunk`
/// sentences a segment: the dense vectors through `pipeline` (pooling,
/// weights, calibrator), the sparse ones from `sparse`; `from` is the
/// number of the first (for given vectors). Returns the sentences written.
pub fn embed_into_sparse_index(
    pipeline: &Pipeline,
    texts: &[String],
    from: usize,
    chunk: usize,
    writer: &mut IndexWriter,
    sparse: &SparseInput,
) -> Result<usize> {
    let embedder = pipeline.embedder();
    let bar = embedder.progress.bar(
        texts.len() as u64,
        "embedding the corpus (dense and sparse)",
        "sentences",
    );
    let mut done = 0;
    for part in texts.chunks(chunk.max(1)) {
        let prompted = pipeline.prompt_texts(part.to_vec(), None)?;
        let raw = pipeline.embed_batch(&prompted, &embedder.opts)?.vectors;
        let vectors = pipeline.calibrate(raw)?.as_standard_layout().to_owned();
        let flat = vectors
            .as_slice()
            .ok_or_else(|| CoreError::Input("the embeddings are not contiguous".into()))?;
        let rows = sparse.rows(from + done, part)?;
        add_with_sparse(writer, flat, part, &rows)?;
        done += part.len();
        bar.set_position(done as u64);
    }
    bar.finish();
    Ok(done)
}

/// `index build --with-sparse` / `--sparse FILE` over a corpus: a new index
/// at `path` with a sparse vector beside each dense one, quantized as
/// `quantize` says (fitted on the first chunk). Returns the sentences written.
pub fn build_sparse_index(
    pipeline: &Pipeline,
    texts: &[String],
    chunk: usize,
    path: &Path,
    quantize: super::QuantizeWith,
    sparse: &SparseInput,
) -> Result<u64> {
    sparse.check_count(texts.len())?;
    let identity = pipeline.identity()?;
    let first = texts.len().min(chunk.max(1));
    let head = pipeline
        .calibrate(
            pipeline
                .embed_batch(
                    &pipeline.prompt_texts(texts[..first].to_vec(), None)?,
                    &pipeline.embedder().opts,
                )?
                .vectors,
        )?
        .as_standard_layout()
        .to_owned();
    let q = quantize.quantization(head.view(), "the first chunk")?;
    let mut writer = IndexWriter::create_sparse(path, identity, q, sparse.info()?)?;
    let flat = head
        .as_slice()
        .ok_or_else(|| CoreError::Input("the embeddings are not contiguous".into()))?;
    add_with_sparse(
        &mut writer,
        flat,
        &texts[..first],
        &sparse.rows(0, &texts[..first])?,
    )?;
    embed_into_sparse_index(pipeline, &texts[first..], first, chunk, &mut writer, sparse)?;
    Ok(writer.finish()?)
}
