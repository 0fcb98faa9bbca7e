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

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hnsw_rs::prelude::{AnnT, Distance, Hnsw, HnswIo};
use serde::{Deserialize, Serialize};

use crate::ann_space::{check_params, AnnMetric, Space};
use crate::{dot, Index, IndexError};

/// Version of the `.hnsw.json` schema written (2: with `dump`).
pub const ANN_FORMAT_VERSION: u32 = 2;

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

/// A graph over codes: candidates rescored exactly per result asked (the
/// graph's best `rescore x k` by code distance), unless said otherwise. The
/// graph search explores at least that many (`ef` is raised to it). At 1M x 384
/// (binary:itq codes, M 16, efConstruction 100, ef 256; `benchmarks/index-ann.md`)
/// recall@10 is 0.922 / 0.930 / 0.932 at 5 / 10 / 20 for about the same time:
/// past 10 the graph, not the rescoring, limits it.
pub const DEFAULT_ANN_RESCORE: usize = 10;

impl Default for AnnParams {
    fn default() -> Self {
        Self {
            m: 24,
            ef_construction: 200,
        }
    }
}

/// The files of a graph stored next to `index_path`.
#[derive(Debug, Clone)]
pub struct AnnFiles {
    /// `<index>.hnsw.json`.
    pub meta: PathBuf,
    /// The index file.
    index: PathBuf,
}

impl AnnFiles {
    /// The files of the graph of the index at `index_path`.
    pub fn of(index_path: &Path) -> Self {
        let mut name = index_path.file_name().unwrap_or_default().to_os_string();
        name.push(".hnsw.json");
        Self {
            meta: index_path.with_file_name(name),
            index: index_path.to_path_buf(),
        }
    }

    /// Whether a graph is stored (its metadata file exists).
    pub fn exist(&self) -> bool {
        self.meta.exists()
    }

    /// The directory holding the files.
    fn dir(&self) -> &Path {
        self.index
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The dump base name of generation `generation` (0: the version 1 names).
    fn base(&self, generation: u64) -> String {
        let name = self.index.file_name().unwrap_or_default().to_string_lossy();
        if generation == 0 {
            name.into_owned()
        } else {
            format!("{name}.g{generation}")
        }
    }

    /// The graph and data files of generation `generation`.
    fn dump(&self, generation: u64) -> (PathBuf, PathBuf) {
        let base = self.base(generation);
        let dir = self.dir();
        (
            dir.join(format!("{base}.hnsw.graph")),
            dir.join(format!("{base}.hnsw.data")),
        )
    }

    /// The graph and data files the stored metadata names (`None` without
    /// readable metadata).
    pub fn current(&self) -> Option<(PathBuf, PathBuf)> {
        let json = std::fs::read(&self.meta).ok()?;
        let meta: AnnMeta = serde_json::from_slice(&json).ok()?;
        Some(self.dump(meta.generation))
    }

    /// Remove the stored graph: the metadata first (so no graph looks
    /// complete), then the dump files of every generation.
    pub fn remove(&self) -> Result<(), IndexError> {
        if self.meta.exists() {
            std::fs::remove_file(&self.meta).map_err(io(&self.meta))?;
        }
        self.remove_dumps_except(None)
    }

    /// Remove the dump files of every generation but `keep` (leftovers of
    /// older graphs and of interrupted saves).
    fn remove_dumps_except(&self, keep: Option<u64>) -> Result<(), IndexError> {
        let name = self.base(0);
        let entries = match std::fs::read_dir(self.dir()) {
            Ok(entries) => entries,
            Err(_) => return Ok(()),
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = file
                .strip_suffix(".hnsw.graph")
                .or_else(|| file.strip_suffix(".hnsw.data"))
            else {
                continue;
            };
            let generation = if stem == name {
                Some(0)
            } else {
                stem.strip_prefix(&name)
                    .and_then(|s| s.strip_prefix(".g"))
                    .and_then(|g| g.parse::<u64>().ok())
            };
            if generation.is_some() && generation != keep {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(io(&path))?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnnMeta {
    format_version: u32,
    params: AnnParams,
    /// Points in the graph: rows `0..count` of the index.
    count: u64,
    /// Segments of the index the graph covers, and their [`Index::prefix_id`].
    segments: usize,
    prefix_id: String,
    graph_bytes: u64,
    graph_crc32: u32,
    data_bytes: u64,
    data_crc32: u32,
    /// Generation of the dump files (absent in version 1: generation 0).
    #[serde(default)]
    generation: u64,
    /// What the distance compares (absent before codes: cosine of the rows;
    /// not written for cosine, so that older builds still read those graphs).
    #[serde(default, skip_serializing_if = "is_cosine")]
    metric: AnnMetric,
}

fn is_cosine(metric: &AnnMetric) -> bool {
    *metric == AnnMetric::Cosine
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

/// An HNSW graph over an [`Index`].
pub struct Ann {
    pub(crate) hnsw: Hnsw<'static, u32, RowCosine>,
    pub(crate) index: Arc<Index>,
    pub(crate) params: AnnParams,
    pub(crate) metric: AnnMetric,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> IndexError + '_ {
    move |e| IndexError::Io(format!("{}: {e}", path.display()))
}

/// CRC-32 and length of a file, read in 1 MiB pieces.
fn file_crc(path: &Path) -> Result<(u64, u32), IndexError> {
    let mut file = File::open(path).map_err(io(path))?;
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        crc.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, crc.finalize()))
}

/// A panic inside hnsw_rs (it asserts on malformed files) as an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, IndexError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| IndexError::Corrupt(format!("the HNSW library failed while {what}")))
}

/// The metadata of the graph stored next to `index_path`, checked against
/// `index` (format version, and the segments it covers); `None` if none is stored.
fn read_meta(index: &Index, index_path: &Path) -> Result<Option<AnnMeta>, IndexError> {
    let files = AnnFiles::of(index_path);
    if !files.exist() {
        return Ok(None);
    }
    let json = std::fs::read(&files.meta).map_err(io(&files.meta))?;
    let meta: AnnMeta = serde_json::from_slice(&json).map_err(|e| {
        IndexError::Corrupt(format!("{}: bad HNSW metadata: {e}", files.meta.display()))
    })?;
    if !(1..=ANN_FORMAT_VERSION).contains(&meta.format_version) {
        return Err(IndexError::Invalid(format!(
            "{}: HNSW format version {} is not supported (this build reads 1 to {ANN_FORMAT_VERSION})",
            files.meta.display(),
            meta.format_version
        )));
    }
    if index.prefix_id(meta.segments).as_deref() != Some(meta.prefix_id.as_str()) {
        return Err(IndexError::Mismatch(format!(
            "the HNSW graph {} was built for another index; rebuild it with `bertflow index ann --index {}`",
            files.meta.display(),
            index_path.display()
        )));
    }
    Ok(Some(meta))
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
    /// ([`AnnMetric::of`]), else over its f32 rows. `progress` is called with
    /// the number of rows inserted so far. Uses every core (rayon).
    pub fn build(
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
            hnsw,
            index,
            params,
            metric,
        };
        ann.insert_rows(0, progress)?;
        Ok(ann)
    }

    /// Insert rows `from..` of the index.
    fn insert_rows(&mut self, from: usize, progress: &dyn Fn(usize)) -> Result<(), IndexError> {
        let n = self.index.len();
        u32::try_from(n).map_err(|_| {
            IndexError::Invalid(format!("{n} rows: the HNSW graph holds at most 2^32 - 1"))
        })?;
        self.hnsw.set_searching_mode(false);
        let rows: Vec<[u32; 1]> = (from..n).map(|i| [i as u32]).collect();
        for chunk in rows.chunks(16_384) {
            let batch: Vec<(&[u32], usize)> =
                chunk.iter().map(|r| (&r[..], r[0] as usize)).collect();
            guarded("inserting points", || {
                self.hnsw.parallel_insert_slice(&batch)
            })?;
            progress(chunk.last().map_or(n, |r| r[0] as usize + 1));
        }
        self.hnsw.set_searching_mode(true);
        Ok(())
    }

    /// Parameters of the graph.
    pub fn params(&self) -> AnnParams {
        self.params
    }

    /// What the graph's distance compares.
    pub fn metric(&self) -> AnnMetric {
        self.metric
    }

    /// Points in the graph.
    pub fn len(&self) -> usize {
        self.hnsw.get_nb_point()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write the graph next to `index_path`, replacing a previous one
    /// atomically: a new generation of dump files, fsynced, then the metadata
    /// (renamed into place), then the old generation is removed.
    pub fn save(&self, index_path: &Path) -> Result<(), IndexError> {
        let files = AnnFiles::of(index_path);
        let previous = read_meta(&self.index, index_path)
            .ok()
            .flatten()
            .map_or(0, |m| m.generation);
        let generation = previous + 1;
        // hnsw_rs never overwrites a dump: write into a fresh folder, then move.
        let mut tmp_name = index_path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".hnsw.partial");
        let tmp = index_path.with_file_name(tmp_name);
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        std::fs::create_dir(&tmp).map_err(io(&tmp))?;
        let dumped =
            guarded("writing the graph", || self.hnsw.file_dump(&tmp, "g"))?.map_err(|e| {
                IndexError::Io(format!("{}: cannot write the graph: {e}", tmp.display()))
            })?;
        let (graph, data) = files.dump(generation);
        for (ext, to) in [("graph", &graph), ("data", &data)] {
            let from = tmp.join(format!("{dumped}.hnsw.{ext}"));
            bertflow_durable::sync_file(&from)?;
            std::fs::rename(&from, to).map_err(io(to))?;
        }
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        bertflow_durable::sync_dir(files.dir())?;
        bertflow_durable::crash_point("ann:dumped");
        let (graph_bytes, graph_crc32) = file_crc(&graph)?;
        let (data_bytes, data_crc32) = file_crc(&data)?;
        let segments = self.index.segments();
        let meta = AnnMeta {
            format_version: ANN_FORMAT_VERSION,
            params: self.params,
            count: self.len() as u64,
            segments,
            prefix_id: self.index.prefix_id(segments).unwrap_or_default(),
            graph_bytes,
            graph_crc32,
            data_bytes,
            data_crc32,
            generation,
            metric: self.metric,
        };
        let json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| IndexError::Invalid(format!("cannot encode the HNSW metadata: {e}")))?;
        bertflow_durable::write(&files.meta, json)?;
        bertflow_durable::crash_point("ann:published");
        files.remove_dumps_except(Some(generation))
    }

    /// Load the graph stored next to `index_path` for `index` (the same file,
    /// opened). `Ok(None)` when there is none. The two files' sizes and CRC-32s
    /// are checked before hnsw_rs reads them (it panics on malformed input).
    /// A graph that covers fewer rows than the index (the index was extended by
    /// `index add` afterwards) is returned as it is; [`Ann::covers`] tells. A
    /// graph over codes the index does not have (another kind) is a
    /// [`IndexError::Mismatch`]; a cosine graph (of any version) reads the f32
    /// rows, which every index has.
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
        let (graph, data) = files.dump(meta.generation);
        for (path, bytes, crc) in [
            (&graph, meta.graph_bytes, meta.graph_crc32),
            (&data, meta.data_bytes, meta.data_crc32),
        ] {
            if file_crc(path)? != (bytes, crc) {
                return Err(IndexError::Corrupt(format!(
                    "{}: size or checksum mismatch",
                    path.display()
                )));
            }
        }
        let expected = crate::ann_check::Expected {
            rows: index.len(),
            points: usize::try_from(meta.count).unwrap_or(usize::MAX),
            m: meta.params.m,
            ef_construction: meta.params.ef_construction,
        };
        crate::ann_check::check_dump(&graph, &data, expected)
            .map_err(|reason| IndexError::Corrupt(format!("{}: {reason}", graph.display())))?;
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
        .map_err(|e| IndexError::Corrupt(format!("{}: {e}", graph.display())))?;
        if hnsw.get_nb_point() as u64 != meta.count {
            return Err(IndexError::Corrupt(format!(
                "{}: {} points, the metadata says {}",
                graph.display(),
                hnsw.get_nb_point(),
                meta.count
            )));
        }
        hnsw.set_searching_mode(true);
        Ok(Some(Self {
            hnsw,
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
    /// (ties: lower index first); a graph over codes rescores
    /// [`DEFAULT_ANN_RESCORE`] candidates per result ([`Ann::search_rescored`]).
    /// A query of the wrong dimension is an error.
    pub fn search(
        &self,
        query: &[f32],
        top_k: usize,
        ef: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        self.search_rescored(query, top_k, ef, DEFAULT_ANN_RESCORE)
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
        let q = self.index.unit_query(query, Some(rescore))?;
        let k = top_k.min(self.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        if self.metric.on_codes() {
            let want = k.saturating_mul(rescore).min(self.len());
            let space = &self.hnsw.get_distance().space;
            let point = space.query(&self.index, &q);
            let found = guarded("searching", || self.hnsw.search(&point, want, ef.max(want)))?;
            let ids = found.iter().map(|n| n.get_origin_id()).collect();
            return self.index.rescore_exact(ids, &q, k);
        }
        let bits: Vec<u32> = q.iter().map(|x| x.to_bits()).collect();
        let found = guarded("searching", || self.hnsw.search(&bits, k, ef.max(k)))?;
        let mut ranked: Vec<(usize, f32)> = found
            .iter()
            .filter_map(|n| {
                let i = n.get_origin_id();
                self.index.vector(i).map(|v| (i, dot(v, &q)))
            })
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.dedup_by_key(|r| r.0);
        ranked.truncate(k);
        Ok(ranked)
    }
}
