//! The files of a graph stored next to an index ([`AnnFiles`]) and its
//! metadata (`.hnsw.json`): which generation is current, the parameters, the
//! sizes and CRC-32s of its files, the segments it covers, its metric.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ann::ANN_FORMAT_VERSION;
pub(crate) use crate::locate::io;
use crate::{AnnMetric, AnnParams, Index, IndexError};

/// The files of a graph stored next to `index_path`.
#[derive(Debug, Clone)]
pub struct AnnFiles {
    /// `<index>.hnsw.json`.
    pub meta: PathBuf,
    /// The index file.
    index: PathBuf,
}

/// The suffixes of a generation's files.
const SUFFIXES: [&str; 3] = [".hnsw.graph", ".hnsw.data", ".links"];

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
    pub(crate) fn dir(&self) -> &Path {
        self.index
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The dump base name of generation `generation` (0: the version 1 names).
    pub(crate) fn base(&self, generation: u64) -> String {
        let name = self.index.file_name().unwrap_or_default().to_string_lossy();
        if generation == 0 {
            name.into_owned()
        } else {
            format!("{name}.g{generation}")
        }
    }

    /// The hnsw_rs graph and data files of generation `generation`.
    pub(crate) fn dump(&self, generation: u64) -> (PathBuf, PathBuf) {
        let base = self.base(generation);
        let dir = self.dir();
        (
            dir.join(format!("{base}.hnsw.graph")),
            dir.join(format!("{base}.hnsw.data")),
        )
    }

    /// The links file of generation `generation` (a compact graph).
    pub(crate) fn links_of(&self, generation: u64) -> PathBuf {
        self.dir().join(format!("{}.links", self.base(generation)))
    }

    fn read(&self) -> Option<AnnMeta> {
        let json = bertflow_durable::read_regular(&self.meta, MAX_META_BYTES).ok()?;
        serde_json::from_slice(&json).ok()
    }

    /// The hnsw_rs graph and data files the stored metadata names (`None`
    /// without readable metadata, or for a compact graph: see [`Self::links`]).
    pub fn current(&self) -> Option<(PathBuf, PathBuf)> {
        let meta = self.read()?;
        meta.links_bytes
            .is_none()
            .then(|| self.dump(meta.generation))
    }

    /// The links file the stored metadata names (`None` without readable
    /// metadata, or for an hnsw_rs graph: see [`Self::current`]).
    pub fn links(&self) -> Option<PathBuf> {
        let meta = self.read()?;
        meta.links_bytes.map(|_| self.links_of(meta.generation))
    }

    /// Remove the stored graph: the metadata first (so no graph looks
    /// complete), then the files of every generation.
    pub fn remove(&self) -> Result<(), IndexError> {
        if self.meta.exists() {
            std::fs::remove_file(&self.meta).map_err(io(&self.meta))?;
        }
        self.remove_dumps_except(None)
    }

    /// Remove the files of every generation but `keep` (leftovers of older
    /// graphs and of interrupted saves).
    pub(crate) fn remove_dumps_except(&self, keep: Option<u64>) -> Result<(), IndexError> {
        let name = self.base(0);
        let entries = match std::fs::read_dir(self.dir()) {
            Ok(entries) => entries,
            Err(_) => return Ok(()),
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = SUFFIXES.iter().find_map(|s| file.strip_suffix(s)) else {
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

/// The `.hnsw.json` of a graph. Version 1 and 2: an hnsw_rs dump (`graph_*`
/// and `data_*`); version 3: a compact graph's links file (`links_*`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnnMeta {
    pub format_version: u32,
    pub params: AnnParams,
    /// Points in the graph: rows `0..count` of the index.
    pub count: u64,
    /// Segments of the index the graph covers, and their [`Index::prefix_id`].
    pub segments: usize,
    pub prefix_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_crc32: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_crc32: Option<u32>,
    /// Generation of the files (absent in version 1: generation 0).
    #[serde(default)]
    pub generation: u64,
    /// What the distance compares (absent before codes: cosine of the rows;
    /// not written for cosine, so that older builds still read those graphs).
    #[serde(default, skip_serializing_if = "is_cosine")]
    pub metric: AnnMetric,
    /// Size and CRC-32 of the links file (version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links_crc32: Option<u32>,
}

fn is_cosine(metric: &AnnMetric) -> bool {
    *metric == AnnMetric::Cosine
}

/// What a version's metadata stores: an hnsw_rs dump, or a links file.
pub(crate) enum Stored {
    Dump { graph: (u64, u32), data: (u64, u32) },
    Links((u64, u32)),
}

impl AnnMeta {
    /// Its files' sizes and CRC-32s, as its version has them.
    pub(crate) fn stored(&self, path: &Path) -> Result<Stored, IndexError> {
        let bad = |what: &str| {
            IndexError::Corrupt(format!(
                "{}: HNSW metadata of version {} {what}",
                path.display(),
                self.format_version
            ))
        };
        let dump = [
            self.graph_bytes.is_some(),
            self.graph_crc32.is_some(),
            self.data_bytes.is_some(),
            self.data_crc32.is_some(),
        ];
        let links = [self.links_bytes.is_some(), self.links_crc32.is_some()];
        if self.format_version >= 3 {
            if dump.iter().any(|&d| d) || !links.iter().all(|&l| l) || !self.metric.on_codes() {
                return Err(bad("is not of a links file over codes"));
            }
            let l = (self.links_bytes, self.links_crc32);
            Ok(Stored::Links((l.0.unwrap_or(0), l.1.unwrap_or(0))))
        } else {
            if !dump.iter().all(|&d| d) || links.iter().any(|&l| l) {
                return Err(bad("does not describe an hnsw_rs dump"));
            }
            Ok(Stored::Dump {
                graph: (self.graph_bytes.unwrap_or(0), self.graph_crc32.unwrap_or(0)),
                data: (self.data_bytes.unwrap_or(0), self.data_crc32.unwrap_or(0)),
            })
        }
    }
}

/// The most bytes a `.hnsw.json` may have (a few hundred in practice).
const MAX_META_BYTES: u64 = 1 << 20;

/// CRC-32 and length of a file, read in 1 MiB pieces: a regular file of at
/// most `limit` bytes (the size the metadata records), or an error.
pub(crate) fn file_crc(path: &Path, limit: u64) -> Result<(u64, u32), IndexError> {
    let (mut file, _) = bertflow_durable::open_regular(path, limit)?;
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

/// The metadata of the graph stored next to `index_path`, checked against
/// `index` (format version, and the segments it covers); `None` if none is stored.
pub(crate) fn read_meta(index: &Index, index_path: &Path) -> Result<Option<AnnMeta>, IndexError> {
    let files = AnnFiles::of(index_path);
    if !files.exist() {
        return Ok(None);
    }
    let json = bertflow_durable::read_regular(&files.meta, MAX_META_BYTES)?;
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
