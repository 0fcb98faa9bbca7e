//! The on-disk layout.
//!
//! ```text
//! offset 0        "BFINDEX1"                      8 bytes of magic
//! then            segment 0, segment 1, ...       each at a 64-byte aligned offset
//! then            footer                          JSON (see [`Footer`])
//! last 20 bytes   footer length (u64 LE), CRC-32 of the footer (u32 LE), "BFINDEX1"
//! ```
//!
//! A segment holds `count` sentences:
//!
//! ```text
//! count x dimension f32 LE     the unit-normalised vectors, row by row
//! (count + 1) x u64 LE         text offsets, relative to the start of the text bytes
//! text bytes                   the sentences, UTF-8, concatenated
//! ```
//!
//! and the footer records its offset, count, text-byte length and CRC-32 (over
//! the whole segment).
//!
//! Format version 3 adds quantized segments: when the footer records a
//! [`Quantization`](crate::Quantization), each segment starts with the codes
//!
//! ```text
//! count x code width bytes     one code per vector (see `quant`), zero-padded to a multiple of 64
//! ```
//!
//! before its vectors. Search scans the codes and reads the vectors only to
//! rescore the best candidates. An index without a quantizer is still written
//! as version 2 (readable by earlier builds).
//!
//! Format version 4 adds sparse vectors: when the footer records a
//! [`SparseInfo`](crate::SparseInfo), each segment is followed by the
//! postings of its sparse vectors (see [`crate::sparse_format`]), which its
//! [`SegmentMeta::sparse`] locates; codes are optional there.
//!
//! `index add` never changes a byte of the state it starts from: it writes the
//! new segments after the old trailer, then a new footer listing every
//! segment, fsyncs, and only then writes the new trailer (and fsyncs again).
//! Until that last write the old trailer is the last complete one and readers
//! find the old state (see `locate`); afterwards the old footer and trailer
//! are dead bytes between segments. Format version 2 allows such gaps
//! (version 1, written before appends worked this way, requires zero padding
//! only); both are read.

use serde::{Deserialize, Serialize};

use crate::IndexError;

/// First and last 8 bytes of every index file.
pub const MAGIC: &[u8; 8] = b"BFINDEX1";
/// Version of the layout written for an index without a quantizer: 2 (gaps
/// between segments allowed).
pub const FORMAT_VERSION: u32 = 2;
/// Version written for a quantized index: 3 (codes before each segment's
/// vectors).
pub const QUANTIZED_FORMAT_VERSION: u32 = 3;
/// Versions read (4: sparse postings beside the segments, see
/// [`crate::sparse_format`]).
pub const FORMAT_VERSIONS: [u32; 4] = [1, 2, 3, 4];
/// Bytes after the footer: length, CRC-32, magic.
pub const TRAILER_LEN: usize = 8 + 4 + 8;
/// Alignment of each segment (and so of its vectors).
pub const ALIGN: u64 = 64;

/// What produced the vectors: an index is only searched with queries embedded
/// the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The model, `name@fingerprint` (the fingerprint is a hash of the model's
    /// files; equal fingerprints give equal vectors).
    pub model: String,
    /// The pooling, e.g. `last-avg`.
    pub pooling: String,
    /// The calibrator (description and a hash of its file), or `None` for raw
    /// pooled vectors.
    pub calibrator: Option<String>,
    /// Length of every vector.
    pub dimension: usize,
    /// The encoder's arithmetic (`fp32`, `int8`). Vectors of another precision
    /// are close (cosine about 0.996) but not equal, so a difference is a
    /// [note](Identity::notes), not a refusal.
    #[serde(default = "default_precision")]
    pub precision: String,
}

fn default_precision() -> String {
    "fp32".into()
}

impl Identity {
    /// Error unless `self` (the index's) and `wanted` (the server's) describe
    /// the same vectors. Models are compared by fingerprint when both carry one
    /// (the directory name may differ).
    pub fn check_matches(&self, wanted: &Identity) -> Result<(), IndexError> {
        let fingerprint = |m: &str| m.rsplit_once('@').map(|(_, f)| f.to_owned());
        let same_model = match (fingerprint(&self.model), fingerprint(&wanted.model)) {
            (Some(a), Some(b)) => a == b,
            _ => self.model == wanted.model,
        };
        let mut differences = Vec::new();
        if !same_model {
            differences.push(format!(
                "model: index {} vs now {}",
                self.model, wanted.model
            ));
        }
        if self.pooling != wanted.pooling {
            differences.push(format!(
                "pooling: index {} vs now {}",
                self.pooling, wanted.pooling
            ));
        }
        if self.calibrator != wanted.calibrator {
            let show = |c: &Option<String>| c.clone().unwrap_or_else(|| "none".into());
            differences.push(format!(
                "calibrator: index {} vs now {}",
                show(&self.calibrator),
                show(&wanted.calibrator)
            ));
        }
        if self.dimension != wanted.dimension {
            differences.push(format!(
                "dimension: index {} vs now {}",
                self.dimension, wanted.dimension
            ));
        }
        if differences.is_empty() {
            Ok(())
        } else {
            Err(IndexError::Mismatch(differences.join("; ")))
        }
    }

    /// Differences that do not make the index unusable (today: the precision),
    /// as sentences to show the operator.
    pub fn notes(&self, wanted: &Identity) -> Vec<String> {
        let mut notes = Vec::new();
        if self.precision != wanted.precision {
            notes.push(format!(
                "the index holds {} vectors and queries are embedded in {}: scores differ slightly from the index's own",
                self.precision, wanted.precision
            ));
        }
        notes
    }
}

/// Where one segment lies and how to check it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    /// Byte offset of the segment in the file (a multiple of [`ALIGN`]).
    pub offset: u64,
    /// Sentences in the segment.
    pub count: u64,
    /// Length of the concatenated texts in bytes.
    pub text_bytes: u64,
    /// CRC-32 of the whole segment.
    pub crc32: u32,
    /// Format version 4: the segment's sparse postings, after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<crate::SparseSegment>,
}

impl SegmentMeta {
    /// Length of the segment in bytes, or `None` on overflow; `code_width` is
    /// the bytes per code (0 for an index without a quantizer).
    pub fn len(&self, dimension: usize, code_width: usize) -> Option<u64> {
        let codes = codes_len(self.count, code_width)?;
        let vectors = self.count.checked_mul(dimension as u64)?.checked_mul(4)?;
        let offsets = self.count.checked_add(1)?.checked_mul(8)?;
        codes
            .checked_add(vectors)?
            .checked_add(offsets)?
            .checked_add(self.text_bytes)
    }
}

/// Bytes of the codes of `count` vectors at the start of a segment (padded to
/// [`ALIGN`]), or `None` on overflow.
pub fn codes_len(count: u64, code_width: usize) -> Option<u64> {
    let raw = count.checked_mul(code_width as u64)?;
    raw.checked_add(ALIGN - 1).map(|_| align_up(raw))
}

/// The footer, JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Footer {
    /// [`FORMAT_VERSION`].
    pub format_version: u32,
    /// What produced the vectors.
    pub identity: Identity,
    /// Sentences over all segments.
    pub count: u64,
    /// The segments, in order; sentence numbers run on from one to the next.
    pub segments: Vec<SegmentMeta>,
    /// Format version 3: the quantizer that coded every segment's vectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantizer: Option<crate::Quantization>,
    /// Format version 4: every segment also stores sparse vectors (postings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparse: Option<crate::SparseInfo>,
}

impl Footer {
    /// Bytes per code (0 without a quantizer).
    pub fn code_width(&self) -> usize {
        self.quantizer.as_ref().map_or(0, |q| q.width())
    }

    /// The format version its layout needs.
    pub fn version_needed(&self) -> u32 {
        if self.sparse.is_some() {
            crate::sparse_format::SPARSE_FORMAT_VERSION
        } else if self.quantizer.is_some() {
            QUANTIZED_FORMAT_VERSION
        } else {
            FORMAT_VERSION
        }
    }
}

/// Round `offset` up to the next multiple of [`ALIGN`].
pub fn align_up(offset: u64) -> u64 {
    offset.div_ceil(ALIGN) * ALIGN
}

/// Unit-normalise `v` (in f64), writing f32; the zero vector stays zero.
pub fn normalise_into(v: &[f32], out: &mut Vec<f32>) {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        out.extend(std::iter::repeat_n(0.0, v.len()));
    } else {
        out.extend(v.iter().map(|&x| (f64::from(x) / norm) as f32));
    }
}
