//! A memory-mapped `bertflow index` file as the server's [`SearchIndex`]
//! (feature `model`): exact search, the scan of a quantized index's codes with
//! exact rescoring, or its HNSW graph, loaded in the background; reopened after
//! an `index add`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use bertflow_core::index::{Ann, CodeKind, Identity, Index, SearchParams};

use bertflow_core::indexing::search_index_with;

use crate::index::{Hit, ModeQuery, ScanDepth, SearchIndex};

/// How [`MappedIndex::open`] treats the index file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexOptions {
    /// Check every segment's CRC-32 at start-up (reads the whole file; without
    /// it only the footer, layout and text offsets are checked).
    pub verify: bool,
    /// Search with the HNSW graph stored next to the index (error if absent or
    /// stale). It loads in the background; searches are exact until it is ready.
    pub ann: bool,
    /// Candidates explored per approximate query (at least `top_k`).
    pub ef_search: usize,
    /// A quantized index: candidates rescored exactly per result asked
    /// (the best `rescore x top_k` codes), unless a request says otherwise.
    pub rescore: usize,
    /// The same for the HNSW graph over a quantized index's codes (the
    /// graph's best `ann_rescore x top_k`), unless a request says otherwise;
    /// `None`: the graph's default for its codes (`Ann::default_rescore`).
    pub ann_rescore: Option<usize>,
    /// A quantized index of bit codes: candidates the scan keeps per
    /// candidate rescored (re-ranked by the query against the codes' signs),
    /// unless a request says otherwise.
    pub shortlist: usize,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            verify: false,
            ann: false,
            ef_search: bertflow_core::index::DEFAULT_EF_SEARCH,
            rescore: bertflow_core::index::DEFAULT_RESCORE,
            ann_rescore: None,
            shortlist: bertflow_core::index::DEFAULT_SHORTLIST,
        }
    }
}

/// The HNSW graph, loaded on a background thread: reading a graph of a
/// million points takes seconds, and the server answers (exactly) meanwhile.
type Graph = Arc<OnceLock<Result<Ann, String>>>;

/// A memory-mapped `bertflow index` file as the server's search index.
///
/// Before each search the file is checked ([`Index::unchanged`]): when it
/// was cut, rewritten or replaced under the server, it is reopened (a log
/// line says so; the HNSW graph is no longer used, searches are exact); while
/// it cannot be reopened (no complete state, or other settings), `/search`
/// answers 503 `index_unavailable` and logs why, and the next search tries
/// again. Reading the old map of a cut file would kill the server (SIGBUS).
pub struct MappedIndex {
    index: RwLock<Arc<Index>>,
    path: PathBuf,
    wanted: Identity,
    /// Set once the file was reopened: the graph is of the old file.
    reloaded: AtomicBool,
    ann: Option<Graph>,
    ef_search: usize,
    rescore: usize,
    ann_rescore: Option<usize>,
    shortlist: usize,
    /// Non-fatal differences (e.g. precision), for the operator.
    pub notes: Vec<String>,
}

impl MappedIndex {
    /// Open the index at `path` and refuse it unless it was built with
    /// `wanted` (the identity of the server's backend). With `options.ann`,
    /// load its HNSW graph, which must cover every row.
    pub fn open(path: &Path, wanted: &Identity, options: IndexOptions) -> Result<Self, String> {
        let index = Index::open(path, options.verify)
            .map_err(|e| format!("cannot open the index {}: {e}", path.display()))?;
        index
            .identity()
            .check_matches(wanted)
            .map_err(|e| format!("refusing the index {}: {e}", path.display()))?;
        if index.quantizer().is_some() {
            for rescore in [Some(options.rescore), options.ann_rescore]
                .into_iter()
                .flatten()
            {
                check_params(&index, rescore, SearchParams::default().shortlist)
                    .map_err(|e| format!("--rescore: {e}"))?;
            }
            check_params(&index, SearchParams::default().rescore, options.shortlist)
                .map_err(|e| format!("--shortlist: {e}"))?;
        }
        let mut notes = index.identity().notes(wanted);
        notes.extend(index.recovered());
        let index = Arc::new(index);
        let ann = if options.ann {
            // The metadata is checked now (a missing, foreign or stale graph stops the
            // start-up); the graph itself is checked and read in the background.
            let stored = Ann::stored(&index, path)
                .map_err(|e| format!("cannot use the HNSW graph of {}: {e}", path.display()))?
                .ok_or_else(|| {
                    format!(
                        "--ann: {} has no HNSW graph; build it with `bertflow index ann --index {}`",
                        path.display(),
                        path.display()
                    )
                })?;
            if stored.points != index.len() {
                return Err(format!(
                    "the HNSW graph of {} covers {} of its {} sentences (the index was extended \
                     by `index add` since); extend it with `bertflow index ann --index {}`",
                    path.display(),
                    stored.points,
                    index.len(),
                    path.display()
                ));
            }
            let graph: Graph = Arc::new(OnceLock::new());
            let (slot, index, path) = (Arc::clone(&graph), Arc::clone(&index), path.to_owned());
            std::thread::Builder::new()
                .name("bertflow-hnsw-load".into())
                .spawn(move || {
                    let started = std::time::Instant::now();
                    let loaded = match Ann::load(index, &path) {
                        Ok(Some(ann)) => Ok(ann),
                        Ok(None) => Err("the graph files disappeared".to_owned()),
                        Err(e) => Err(e.to_string()),
                    };
                    match &loaded {
                        Ok(ann) => tracing::info!(
                            points = ann.len(),
                            seconds = started.elapsed().as_secs_f64(),
                            "HNSW graph loaded: /search is approximate from now on"
                        ),
                        Err(e) => tracing::error!(
                            error = %e,
                            "cannot load the HNSW graph: /search stays exact"
                        ),
                    }
                    let _ = slot.set(loaded);
                })
                .map_err(|e| format!("cannot start the HNSW loader: {e}"))?;
            Some(graph)
        } else {
            None
        };
        Ok(Self {
            index: RwLock::new(index),
            path: path.to_owned(),
            wanted: wanted.clone(),
            reloaded: AtomicBool::new(false),
            ann,
            ef_search: options.ef_search.max(1),
            rescore: options.rescore,
            ann_rescore: options.ann_rescore,
            shortlist: options.shortlist,
            notes,
        })
    }

    /// The opened index (the latest, after a reload).
    pub fn index(&self) -> Arc<Index> {
        Arc::clone(&self.index.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reopen the file after a change; error while no complete state of the
    /// right settings is there.
    fn reload(&self, change: &str) -> Result<(), String> {
        let mut slot = self.index.write().unwrap_or_else(|e| e.into_inner());
        if slot.unchanged(&self.path).is_ok() {
            return Ok(()); // another search reloaded it meanwhile
        }
        let reopened = Index::open(&self.path, false)
            .map_err(|e| e.to_string())
            .and_then(|index| {
                index
                    .identity()
                    .check_matches(&self.wanted)
                    .map(|()| index)
                    .map_err(|e| e.to_string())
            });
        match reopened {
            Ok(index) => {
                tracing::warn!(
                    path = %self.path.display(),
                    sentences = index.len(),
                    change,
                    "the index file changed under the server and was reopened; /search is exact from now on"
                );
                *slot = Arc::new(index);
                self.reloaded.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    path = %self.path.display(),
                    change,
                    error = %e,
                    "the index file changed under the server and cannot be reopened: /search answers 503 until a complete index is back"
                );
                Err(format!("{change}; reopening it failed: {e}"))
            }
        }
    }

    /// The dense ranking of `query`, as `(row, cosine)`: by the HNSW graph
    /// once loaded (and the file not reopened since), else the scan.
    fn ranked(
        &self,
        index: &Index,
        query: &[f32],
        top_k: usize,
        depth: ScanDepth,
    ) -> Result<Vec<(usize, f32)>, String> {
        let rescore = depth.rescore.unwrap_or(self.rescore);
        let shortlist = depth.shortlist.unwrap_or(self.shortlist);
        let graph = self
            .ann
            .as_ref()
            .filter(|_| !self.reloaded.load(Ordering::Acquire));
        // More candidates than the index holds change nothing; capping them keeps a
        // request's huge `rescore` from allocating room for them (0 stays the index's error).
        let k = top_k.min(index.len()).max(1);
        let params = SearchParams {
            rescore: rescore.min(index.len().div_ceil(k).max(1)),
            shortlist: shortlist.min(index.len().max(1)),
            ..SearchParams::default()
        };
        match graph.and_then(|g| g.get()) {
            Some(Ok(ann)) => {
                let ann_rescore = depth
                    .rescore
                    .or(self.ann_rescore)
                    .unwrap_or_else(|| ann.default_rescore());
                let ann_rescore = ann_rescore.min(index.len().div_ceil(k).max(1));
                ann.search_rescored(query, top_k, self.ef_search, ann_rescore)
            }
            _ => index.search_with(query, top_k, &params),
        }
        .map_err(|e| e.to_string())
    }

    /// Share it with the server.
    pub fn shared(self) -> crate::SharedIndex {
        crate::SharedIndex(Arc::new(self))
    }
}

impl SearchIndex for MappedIndex {
    fn len(&self) -> usize {
        self.index().len()
    }

    fn dimension(&self) -> usize {
        self.index().identity().dimension
    }

    fn check(&self) -> Result<(), String> {
        match self.index().unchanged(&self.path) {
            Ok(()) => Ok(()),
            Err(change) => self.reload(&change.to_string()),
        }
    }

    fn search(&self, query: &[f32], top_k: usize) -> Result<Vec<Hit>, String> {
        self.search_rescored(query, top_k, ScanDepth::default())
    }

    fn check_rescore(&self, rescore: usize) -> Result<(), String> {
        // Also the graph's over the codes (--ann).
        self.has_codes("rescore")?;
        check_params(&self.index(), rescore, self.shortlist)
    }

    fn check_shortlist(&self, shortlist: usize) -> Result<(), String> {
        self.scans_codes("shortlist")?;
        check_params(&self.index(), self.rescore, shortlist)
    }

    fn search_rescored(
        &self,
        query: &[f32],
        top_k: usize,
        depth: ScanDepth,
    ) -> Result<Vec<Hit>, String> {
        let index = self.index();
        let ranked = self.ranked(&index, query, top_k, depth)?;
        hits(&index, ranked)
    }

    fn has_sparse(&self) -> bool {
        self.index().sparse_info().is_some()
    }

    fn search_mode(
        &self,
        query: &ModeQuery,
        top_k: usize,
        depth: ScanDepth,
    ) -> Result<Vec<Hit>, String> {
        let index = self.index();
        let ranked = search_index_with(
            &index,
            query.dense.as_deref(),
            query.sparse.as_ref(),
            query.mode,
            top_k,
            &query.fusion,
            &|q, k| {
                self.ranked(&index, q, k, depth)
                    .map_err(bertflow_core::CoreError::Input)
            },
        )
        .map_err(|e| e.to_string())?;
        hits(&index, ranked)
    }

    fn method(&self) -> String {
        let index = self.index();
        let scan = match index.quantizer() {
            Some(q) if q.kind != CodeKind::Int8 && self.shortlist > 1 => format!(
                "{} codes ({}, {} bytes per vector) scanned, the best {} x top_k by Hamming \
                 distance re-ranked by the query against their signs, the best {} x top_k \
                 rescored exactly",
                q.kind.name(),
                q.spec,
                q.width(),
                self.shortlist.saturating_mul(self.rescore),
                self.rescore
            ),
            Some(q) => format!(
                "{} codes ({}, {} bytes per vector) scanned, the best {} x top_k rescored exactly",
                q.kind.name(),
                q.spec,
                q.width(),
                self.rescore
            ),
            None => "exact".into(),
        };
        if self.reloaded.load(Ordering::Acquire) {
            return format!("{scan} (the index file was reopened after a change)");
        }
        match self.ann.as_ref().map(|g| g.get()) {
            Some(Some(Ok(ann))) => {
                let graph = format!(
                    "hnsw(m={}, ef_construction={}, ef_search={})",
                    ann.params().m,
                    ann.params().ef_construction,
                    self.ef_search
                );
                match index.quantizer().filter(|_| ann.metric().on_codes()) {
                    Some(q) => format!(
                        "{graph} over the {} codes ({}, {} bytes per vector, {} distance), \
                         the best {} x top_k rescored exactly",
                        q.kind.name(),
                        q.spec,
                        q.width(),
                        ann.metric().name(),
                        self.ann_rescore.unwrap_or_else(|| ann.default_rescore())
                    ),
                    None => graph,
                }
            }
            Some(Some(Err(e))) => format!("{scan} (the HNSW graph failed to load: {e})"),
            Some(None) => format!("{scan} (HNSW graph loading)"),
            None => scan,
        }
    }
}

impl MappedIndex {
    /// Error unless searches scan the codes (which `what` applies to).
    fn scans_codes(&self, what: &str) -> Result<(), String> {
        self.has_codes(what)?;
        if self.ann.is_some() && !self.reloaded.load(Ordering::Acquire) {
            return Err(format!(
                "{what} applies to the scan of the codes; this server searches the HNSW graph \
                 (--ann)"
            ));
        }
        Ok(())
    }

    fn has_codes(&self, what: &str) -> Result<(), String> {
        if self.index().quantizer().is_none() {
            return Err(format!(
                "{what} applies to a quantized index (one that stores codes); {} has none \
                 (`bertflow index build --quantize`)",
                self.path.display()
            ));
        }
        Ok(())
    }
}

/// Whether `index` (quantized) takes `rescore` and `shortlist`: the index's
/// own check, asked with a search for no results (which reads nothing).
/// Rows and scores as hits, with their sentences.
fn hits(index: &Index, ranked: Vec<(usize, f32)>) -> Result<Vec<Hit>, String> {
    ranked
        .into_iter()
        .map(|(i, score)| {
            Ok(Hit {
                index: i,
                text: index.text(i).map_err(|e| e.to_string())?.to_owned(),
                score: f64::from(score),
            })
        })
        .collect()
}

fn check_params(index: &Index, rescore: usize, shortlist: usize) -> Result<(), String> {
    let probe = vec![0.0f32; index.identity().dimension];
    let params = SearchParams {
        rescore,
        shortlist,
        ..SearchParams::default()
    };
    index
        .search_with(&probe, 0, &params)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
