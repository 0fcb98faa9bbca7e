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
//! the codes and rescores the best candidates exactly on the vectors. An
//! index may also store a sparse vector beside each dense row (format
//! version 4, see [`sparse_format`]): [`Index::search_sparse`] scores them
//! exactly over the postings of the query's tokens.

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
mod sparse;
pub mod sparse_format;
mod writer;

pub use ann::{
    Ann, AnnFiles, AnnParams, StoredAnn, DEFAULT_ANN_RESCORE, DEFAULT_ANN_RESCORE_INT8,
    DEFAULT_EF_SEARCH,
};
pub use ann_compact::CompactAnn;
pub use ann_space::AnnMetric;
pub use format::Identity;
pub use quant::{CodeKind, Quantization};
pub use reader::{dot, row_norm2, stored_row_ok, stored_score, top_k, Index};
pub use repair::{repair, Repaired};
pub use search::{SearchParams, DEFAULT_RESCORE, DEFAULT_SHORTLIST};
pub use sparse::sparse_dot;
pub use sparse_format::{SparseInfo, SparseRef, SparseSegment};
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

impl From<bertflow_durable::ReadError> for IndexError {
    fn from(e: bertflow_durable::ReadError) -> Self {
        match e {
            bertflow_durable::ReadError::Io { .. } => IndexError::Io(e.to_string()),
            _ => IndexError::Invalid(e.to_string()),
        }
    }
}

/// The most bytes a calibrator file may have ([`file_digest`]; as
/// `bertflow_calib` reads them).
pub const MAX_CALIBRATOR_BYTES: u64 = 4 << 30;

/// `sha256:` and the first 16 hex digits of the SHA-256 of the file at `path`:
/// identifies a calibrator file in an [`Identity`]. Only a regular file of at
/// most [`MAX_CALIBRATOR_BYTES`] is read (streamed).
pub fn file_digest(path: &std::path::Path) -> Result<String, IndexError> {
    let (mut file, _) = bertflow_durable::open_regular(path, MAX_CALIBRATOR_BYTES)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf)
            .map_err(|e| IndexError::Io(format!("{}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest = hasher.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}
