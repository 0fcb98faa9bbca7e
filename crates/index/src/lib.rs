//! # bertflow-index
//!
//! A persistent sentence-vector index: one checksummed file holding the
//! unit-normalised vectors (f32), the sentences, and the identity of what
//! produced them (model fingerprint, pooling, calibrator, dimension), so that
//! a server can refuse an index whose vectors it would not reproduce.
//!
//! [`IndexWriter`] writes a new file or appends segments to an existing one
//! without rewriting what is there; [`Index::open`] memory-maps a file,
//! checks its layout and (optionally) every checksum, and answers exact cosine
//! top-k queries straight from the map. The layout is described in
//! [`format`]. [`Ann`] adds approximate search: an HNSW graph stored next to
//! the index (see [`ann`]). A quantized index (format version 3, see
//! [`Quantization`]) also stores a compact code of every vector: search scans
//! the codes and rescores the best candidates exactly on the vectors.

pub mod ann;
mod ann_check;
mod ann_compact;
mod ann_files;
mod ann_insert;
mod ann_links;
mod ann_space;
mod fetch;
pub mod format;
mod locate;
mod quant;
pub(crate) mod reader;
mod repair;
mod search;
mod writer;

pub use ann::{
    Ann, AnnFiles, AnnParams, StoredAnn, DEFAULT_ANN_RESCORE, DEFAULT_ANN_RESCORE_INT8,
    DEFAULT_EF_SEARCH,
};
pub use ann_compact::CompactAnn;
pub use ann_space::AnnMetric;
pub use format::Identity;
pub use quant::{CodeKind, Quantization};
pub use reader::{dot, top_k, Index};
pub use repair::{repair, Repaired};
pub use search::{SearchParams, DEFAULT_RESCORE, DEFAULT_SHORTLIST};
pub use writer::IndexWriter;

use sha2::{Digest, Sha256};

/// Why an index could not be written, opened or searched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Reading or writing the file failed.
    #[error("index I/O error: {0}")]
    Io(String),
    /// The file is damaged: bad magic, bad checksum, inconsistent layout.
    #[error("corrupt index: {0}")]
    Corrupt(String),
    /// The index was made with another model, pooling, calibrator or dimension.
    #[error("the index was built with other settings than the ones in use ({0}); rebuild it with `bertflow index build` or serve with the settings it was built with")]
    Mismatch(String),
    /// The file changed under a reader (cut, rewritten or replaced).
    #[error("index file changed: {0}")]
    Changed(String),
    /// A bad argument (wrong dimension, unsupported version, ...).
    #[error("{0}")]
    Invalid(String),
}

/// `sha256:` and the first 16 hex digits of the SHA-256 of the file at `path`:
/// identifies a calibrator file in an [`Identity`].
pub fn file_digest(path: &std::path::Path) -> Result<String, IndexError> {
    let bytes =
        std::fs::read(path).map_err(|e| IndexError::Io(format!("{}: {e}", path.display())))?;
    let digest = Sha256::digest(&bytes);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}
