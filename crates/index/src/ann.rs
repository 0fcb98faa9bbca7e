//! Approximate search: an HNSW graph ([`hnsw_rs`]) over an index's vectors,
//! stored next to the index so that a server loads it instead of rebuilding it.
//!
//! Three files sit beside `corpus.idx`:
//!
//! ```text
//! corpus.idx.gN.hnsw.graph   the graph (hnsw_rs dump format), generation N
//! corpus.idx.gN.hnsw.data    the point data: one u32 per point, its row in the index
//! corpus.idx.hnsw.json       which generation is current, its parameters, the sizes
//!                            and CRC-32s of its two files, and which segments of the
//!                            index the graph covers
//! ```
//!
//! Saving writes a new generation beside the current one, fsyncs it, then
//! replaces the metadata atomically (the commit point), then removes the old
//! generation: a crash at any instant leaves the old graph or the new one
//! loadable. (Version 1 metadata, without a generation, names the files
//! `corpus.idx.hnsw.graph` and `.data`; they are still read.)
//!
//! The graph does not copy the vectors: a stored point is its row number, and
//! the distance reads the row from the index (a query is passed as a slice of
//! another length, which the distance tells apart). Over an index without codes
//! the distance is `1 - cosine` of the memory-mapped f32 rows; over a quantized
//! index it reads the codes held in memory ([`AnnMetric`], see
//! [`crate::ann_space`]): the graph's best `rescore x k` candidates are then
//! rescored exactly on their f32 vectors, read by positioned reads as the scan
//! does. Either way the scores returned are exact cosines, as in exact search.
//!
//! `index add` only appends segments, so a graph that covers the first segments
//! stays valid: [`Ann::extend`] inserts the new rows and dumps it again.

use std::path::Path;
use std::sync::Arc;

use hnsw_rs::prelude::{AnnT, Distance, Hnsw, HnswIo};
use serde::{Deserialize, Serialize};

pub use crate::ann_files::AnnFiles;
use crate::ann_files::{file_crc, io, read_meta, AnnMeta, Stored};
use crate::ann_space::{check_params, AnnMetric, Space};
use crate::{CompactAnn, Index, IndexError};

/// Newest version of the `.hnsw.json` schema (2: with `dump`; 3: a compact
/// graph's links file). hnsw_rs graphs (cosine) are still written as version 2,
/// which older builds read.
pub const ANN_FORMAT_VERSION: u32 = 3;

/// HNSW parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnParams {
    /// Neighbours kept per point and layer (`M`; at most 255).
    pub m: usize,
    /// Candidates explored while inserting (`efConstruction`).
    pub ef_construction: usize,
}

/// Default candidates explored per approximate query (`ef`): with the default
/// [`AnnParams`] it gives recall@10 0.974 at p50 1.4 ms on 1M x 384 clustered synthetic
/// vectors, and >= 0.999 on 20k real ones (BENCHMARKS.md, "Search index"); 64 gave 0.936
/// at 1M.
pub const DEFAULT_EF_SEARCH: usize = 128;

/// A graph over bit codes: candidates rescored exactly per result asked (the
/// graph's best `rescore x k` by code distance), unless said otherwise. The
/// graph search explores at least that many (`ef` is raised to it). At 1M x 384
/// (binary:itq codes, M 16, efConstruction 100, ef 256; `benchmarks/index-ann.md`)
/// recall@10 is 0.922 / 0.930 / 0.932 at 5 / 10 / 20 for about the same time:
/// past 10 the graph, not the rescoring, limits it.
pub const DEFAULT_ANN_RESCORE: usize = 10;

/// The same over int8 codes, which rank the true top 10 within the best 20: at
/// 1M x 384 (M 16, efConstruction 100, ef 128) recall@10 is 0.9555 at 2, 5 and
/// 10, p50 0.56 ms at 2 against 0.95 ms at 10 (the rescored rows are read from
/// the file; `benchmarks/index-ann.md`, section 5).
pub const DEFAULT_ANN_RESCORE_INT8: usize = 2;

impl Default for AnnParams {
    fn default() -> Self {
        Self {
            m: 24,
            ef_construction: 200,
        }
    }
}

/// The graph's distance between rows of the index (a one-element slice: the
/// row) and queries, by its [`AnnMetric`] (see [`crate::ann_space`]). Named
/// for the first metric: hnsw_rs records the type's name in its dumps and
/// refuses to load one under another name.
#[derive(Clone)]
pub struct RowCosine {
    index: Arc<Index>,
    pub(crate) space: Space,
}

impl Distance<u32> for RowCosine {
    fn eval(&self, a: &[u32], b: &[u32]) -> f32 {
        self.space.eval(&self.index, a, b)
    }
}

/// An HNSW graph over an [`Index`]: hnsw_rs's over the f32 rows (cosine), a
/// [`CompactAnn`] over the codes of a quantized index.
pub struct Ann {
    graph: Graph,
    pub(crate) index: Arc<Index>,
    pub(crate) params: AnnParams,
    pub(crate) metric: AnnMetric,
}

enum Graph {
    Hnsw(Hnsw<'static, u32, RowCosine>),
    Compact(CompactAnn),
}

/// A panic inside hnsw_rs (it asserts on malformed files) as an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, IndexError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| IndexError::Corrupt(format!("the HNSW library failed while {what}")))
}

/// Threads a compact graph is built with: every core.
fn build_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What a stored graph holds, read from its metadata without loading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredAnn {
    /// Points in the graph (rows `0..points` of the index).
    pub points: usize,
    /// Its parameters.
    pub params: AnnParams,
    /// What its distance compares.
    pub metric: AnnMetric,
}

impl Ann {
    /// The graph stored next to `index_path`, checked against `index` from its
    /// metadata only (cheap; [`Ann::load`] checks the files' CRC-32s and reads
    /// them, which takes seconds for a million points). `None` if none is stored.
    pub fn stored(index: &Index, index_path: &Path) -> Result<Option<StoredAnn>, IndexError> {
        Ok(read_meta(index, index_path)?.map(|m| StoredAnn {
            points: m.count as usize,
            params: m.params,
            metric: m.metric,
        }))
    }

    /// Build a graph over every row of `index`: over its codes if it has any
    /// ([`AnnMetric::of`]: a [`CompactAnn`]), else over its f32 rows (hnsw_rs).
    /// `progress` is called with the number of rows inserted so far. Uses
    /// every core.
    pub fn build(
        index: Arc<Index>,
        params: AnnParams,
        progress: &dyn Fn(usize),
    ) -> Result<Self, IndexError> {
        if AnnMetric::of(&index).on_codes() {
            let compact = CompactAnn::build(index, params, build_threads(), progress)?;
            return Ok(Self::from_compact(compact));
        }
        Self::build_hnsw_rs(index, params, progress)
    }

    /// A compact graph as an [`Ann`].
    pub fn from_compact(c: CompactAnn) -> Self {
        Self {
            index: Arc::clone(&c.index),
            params: c.params,
            metric: c.metric,
            graph: Graph::Compact(c),
        }
    }

    /// An hnsw_rs graph over `index`, over its codes if it has any: what
    /// [`Ann::build`] made before compact graphs (version 2 metadata), kept
    /// for the tests and benchmarks that compare the two.
    #[doc(hidden)]
    pub fn build_hnsw_rs(
        index: Arc<Index>,
        params: AnnParams,
        progress: &dyn Fn(usize),
    ) -> Result<Self, IndexError> {
        check_params(&index, params)?;
        let metric = AnnMetric::of(&index);
        let space = Space::new(metric, &index)?;
        let hnsw = Hnsw::new(
            params.m,
            index.len().max(1),
            16,
            params.ef_construction,
            RowCosine {
                index: Arc::clone(&index),
                space,
            },
        );
        let mut ann = Self {
            graph: Graph::Hnsw(hnsw),
            index,
            params,
            metric,
        };
        ann.insert_rows(0, progress)?;
        Ok(ann)
    }

    /// Insert rows `from..` of the index.
    fn insert_rows(&mut self, from: usize, progress: &dyn Fn(usize)) -> Result<(), IndexError> {
        let hnsw = match &mut self.graph {
            Graph::Compact(c) => return c.insert_rows(build_threads(), progress),
            Graph::Hnsw(h) => h,
        };
        let n = self.index.len();
        u32::try_from(n).map_err(|_| {
            IndexError::Invalid(format!("{n} rows: the HNSW graph holds at most 2^32 - 1"))
        })?;
        hnsw.set_searching_mode(false);
        let rows: Vec<[u32; 1]> = (from..n).map(|i| [i as u32]).collect();
        for chunk in rows.chunks(16_384) {
            let batch: Vec<(&[u32], usize)> =
                chunk.iter().map(|r| (&r[..], r[0] as usize)).collect();
            guarded("inserting points", || hnsw.parallel_insert_slice(&batch))?;
            progress(chunk.last().map_or(n, |r| r[0] as usize + 1));
        }
        hnsw.set_searching_mode(true);
        Ok(())
    }

    /// The compact graph of these links (an hnsw_rs graph's copied into one).
    pub(crate) fn into_compact(self) -> Result<CompactAnn, IndexError> {
        match self.graph {
            Graph::Compact(c) => Ok(c),
            Graph::Hnsw(h) => CompactAnn::from_hnsw(&h, self.index, self.params, self.metric),
        }
    }

    /// Parameters of the graph.
    pub fn params(&self) -> AnnParams {
        self.params
    }

    /// What the graph's distance compares.
    pub fn metric(&self) -> AnnMetric {
        self.metric
    }

    /// Candidates rescored per result asked unless said otherwise
    /// ([`AnnMetric::default_rescore`]).
    pub fn default_rescore(&self) -> usize {
        self.metric.default_rescore()
    }

    /// Points in the graph.
    pub fn len(&self) -> usize {
        match &self.graph {
            Graph::Hnsw(h) => h.get_nb_point(),
            Graph::Compact(c) => c.len(),
        }
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is a compact graph (every graph over codes but those stored
    /// by hnsw_rs and not yet converted: [`Ann::build_hnsw_rs`]).
    pub fn is_compact(&self) -> bool {
        matches!(self.graph, Graph::Compact(_))
    }

    /// Write the graph next to `index_path`, replacing a previous one
    /// atomically: a new generation of files, fsynced, then the metadata
    /// (renamed into place), then the old generation is removed.
    pub fn save(&self, index_path: &Path) -> Result<(), IndexError> {
        let files = AnnFiles::of(index_path);
        let previous = read_meta(&self.index, index_path)
            .ok()
            .flatten()
            .map_or(0, |m| m.generation);
        let generation = previous + 1;
        let segments = self.index.segments();
        let mut meta = AnnMeta {
            format_version: 2,
            params: self.params,
            count: self.len() as u64,
            segments,
            prefix_id: self.index.prefix_id(segments).unwrap_or_default(),
            graph_bytes: None,
            graph_crc32: None,
            data_bytes: None,
            data_crc32: None,
            generation,
            metric: self.metric,
            links_bytes: None,
            links_crc32: None,
        };
        match &self.graph {
            Graph::Compact(c) => {
                let (bytes, crc) = crate::ann_links::write(&files.links_of(generation), c)?;
                bertflow_durable::crash_point("ann:dumped");
                meta.format_version = ANN_FORMAT_VERSION;
                (meta.links_bytes, meta.links_crc32) = (Some(bytes), Some(crc));
            }
            Graph::Hnsw(hnsw) => {
                let [graph, data] = dump_hnsw(hnsw, &files, index_path, generation)?;
                (meta.graph_bytes, meta.graph_crc32) = Some(graph).unzip();
                (meta.data_bytes, meta.data_crc32) = Some(data).unzip();
            }
        }
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| IndexError::Invalid(format!("cannot encode the HNSW metadata: {e}")))?;
        bertflow_durable::write(&files.meta, json)?;
        bertflow_durable::crash_point("ann:published");
        files.remove_dumps_except(Some(generation))
    }

    /// Load the graph stored next to `index_path` for `index` (the same file,
    /// opened). `Ok(None)` when there is none. The files' sizes and CRC-32s
    /// are checked before they are read, and their structure as they are (a
    /// damaged file is an error, never a panic). A graph that covers fewer
    /// rows than the index (the index was extended by `index add` afterwards)
    /// is returned as it is; [`Ann::covers`] tells. A graph over codes the
    /// index does not have (another kind) is a [`IndexError::Mismatch`]; a
    /// cosine graph (of any version) reads the f32 rows, which every index
    /// has. A graph over codes stored by hnsw_rs (version 2) is loaded and its
    /// links copied into a compact graph (saved as such next time).
    pub fn load(index: Arc<Index>, index_path: &Path) -> Result<Option<Self>, IndexError> {
        let files = AnnFiles::of(index_path);
        let Some(meta) = read_meta(&index, index_path)? else {
            return Ok(None);
        };
        let space = Space::new(meta.metric, &index).map_err(|e| match e {
            IndexError::Mismatch(m) => IndexError::Mismatch(format!(
                "{}: {m}; rebuild it with `bertflow index ann --rebuild --index {}`",
                files.meta.display(),
                index_path.display()
            )),
            e => e,
        })?;
        let points = usize::try_from(meta.count).unwrap_or(usize::MAX);
        if points > index.len() {
            return Err(IndexError::Corrupt(format!(
                "{}: {points} points, the index has {} rows",
                files.meta.display(),
                index.len()
            )));
        }
        let checked = |path: &Path, sum: (u64, u32)| {
            if file_crc(path, sum.0)? != sum {
                return Err(IndexError::Corrupt(format!(
                    "{}: size or checksum mismatch",
                    path.display()
                )));
            }
            Ok(())
        };
        let (graph, data) = match meta.stored(&files.meta)? {
            Stored::Links(sum) => {
                let path = files.links_of(meta.generation);
                checked(&path, sum)?;
                let links = crate::ann_links::read(&path, points, meta.params.m)?;
                let mut c = CompactAnn {
                    index,
                    space,
                    metric: meta.metric,
                    params: meta.params,
                    levels: links.levels,
                    upper_at: Vec::new(),
                    layer0: links.layer0,
                    upper: links.upper,
                    entry: links.entry,
                    top: links.top,
                };
                c.place_upper(points)?;
                return Ok(Some(Self::from_compact(c)));
            }
            Stored::Dump { graph, data } => (graph, data),
        };
        let (graph_path, data_path) = files.dump(meta.generation);
        checked(&graph_path, graph)?;
        checked(&data_path, data)?;
        let expected = crate::ann_check::Expected {
            rows: index.len(),
            points,
            m: meta.params.m,
            ef_construction: meta.params.ef_construction,
        };
        crate::ann_check::check_dump(&graph_path, &data_path, expected)
            .map_err(|reason| IndexError::Corrupt(format!("{}: {reason}", graph_path.display())))?;
        let dir = files.dir();
        let basename = files.base(meta.generation);
        // The loaded graph borrows from its loader for its whole life: one small
        // loader is leaked per graph loaded (once per server start).
        let loader: &'static HnswIo = Box::leak(Box::new(HnswIo::new(dir, &basename)));
        let dist = RowCosine {
            index: Arc::clone(&index),
            space,
        };
        let mut hnsw = guarded("reading the graph", || {
            loader.load_hnsw_with_dist::<u32, RowCosine>(dist)
        })?
        .map_err(|e| IndexError::Corrupt(format!("{}: {e}", graph_path.display())))?;
        if hnsw.get_nb_point() as u64 != meta.count {
            return Err(IndexError::Corrupt(format!(
                "{}: {} points, the metadata says {}",
                graph_path.display(),
                hnsw.get_nb_point(),
                meta.count
            )));
        }
        hnsw.set_searching_mode(true);
        if meta.metric.on_codes() {
            let c = CompactAnn::from_hnsw(&hnsw, index, meta.params, meta.metric)?;
            return Ok(Some(Self::from_compact(c)));
        }
        Ok(Some(Self {
            graph: Graph::Hnsw(hnsw),
            index,
            params: meta.params,
            metric: meta.metric,
        }))
    }

    /// Whether the graph holds every row of its index.
    pub fn covers(&self) -> bool {
        self.len() == self.index.len()
    }

    /// Insert the rows the index gained since the graph was built (by
    /// `index add`). Returns how many were inserted.
    pub fn extend(&mut self, progress: &dyn Fn(usize)) -> Result<usize, IndexError> {
        let from = self.len();
        if from >= self.index.len() {
            return Ok(0);
        }
        self.insert_rows(from, progress)?;
        Ok(self.index.len() - from)
    }

    /// The `top_k` rows most similar to `query` found by the graph, exploring
    /// `ef` candidates (at least `top_k`), best first with exact cosine scores
    /// (ties: lower index first); a graph over codes rescores its
    /// [`Ann::default_rescore`] candidates per result ([`Ann::search_rescored`]).
    /// A query of the wrong dimension is an error.
    pub fn search(
        &self,
        query: &[f32],
        top_k: usize,
        ef: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        self.search_rescored(query, top_k, ef, self.default_rescore())
    }

    /// [`Ann::search`], a graph over codes rescoring exactly the best
    /// `rescore x top_k` candidates by code distance (at least 1; `ef` is
    /// raised to that many), their f32 vectors read by positioned reads. A
    /// cosine graph ignores `rescore` (its distance is exact).
    pub fn search_rescored(
        &self,
        query: &[f32],
        top_k: usize,
        ef: usize,
        rescore: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let hnsw = match &self.graph {
            Graph::Compact(c) => return c.search_rescored(query, top_k, ef, rescore),
            Graph::Hnsw(h) => h,
        };
        let q = self.index.unit_query(query, Some(rescore))?;
        let k = top_k.min(self.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        if self.metric.on_codes() {
            let want = k.saturating_mul(rescore).min(self.len());
            let space = &hnsw.get_distance().space;
            let point = space.query(&self.index, &q);
            let found = guarded("searching", || hnsw.search(&point, want, ef.max(want)))?;
            let ids = found.iter().map(|n| n.get_origin_id()).collect();
            return self.index.rescore_exact(ids, &q, k);
        }
        let bits: Vec<u32> = q.iter().map(|x| x.to_bits()).collect();
        let found = guarded("searching", || hnsw.search(&bits, k, ef.max(k)))?;
        let mut ranked: Vec<(usize, f32)> = found
            .iter()
            .filter_map(|n| {
                let i = n.get_origin_id();
                self.index
                    .vector(i)
                    .and_then(|v| Some((i, crate::reader::stored_score(v, &q)?)))
            })
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.dedup_by_key(|r| r.0);
        ranked.truncate(k);
        Ok(ranked)
    }
}

/// Dump `hnsw` as generation `generation` of `files` (hnsw_rs never
/// overwrites a dump: written into a fresh folder, then moved), fsynced; the
/// sizes and CRC-32s of its graph and data files.
fn dump_hnsw(
    hnsw: &Hnsw<'static, u32, RowCosine>,
    files: &AnnFiles,
    index_path: &Path,
    generation: u64,
) -> Result<[(u64, u32); 2], IndexError> {
    let mut tmp_name = index_path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".hnsw.partial");
    let tmp = index_path.with_file_name(tmp_name);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir(&tmp).map_err(io(&tmp))?;
    let dumped = guarded("writing the graph", || hnsw.file_dump(&tmp, "g"))?
        .map_err(|e| IndexError::Io(format!("{}: cannot write the graph: {e}", tmp.display())))?;
    let (graph, data) = files.dump(generation);
    for (ext, to) in [("graph", &graph), ("data", &data)] {
        let from = tmp.join(format!("{dumped}.hnsw.{ext}"));
        bertflow_durable::sync_file(&from)?;
        std::fs::rename(&from, to).map_err(io(to))?;
    }
    std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    bertflow_durable::sync_dir(files.dir())?;
    bertflow_durable::crash_point("ann:dumped");
    Ok([file_crc(&graph, u64::MAX)?, file_crc(&data, u64::MAX)?])
}
