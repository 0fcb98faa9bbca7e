//! Finding the last complete state of an index file.
//!
//! The trailer at the end of the file says where the footer is. `index add`
//! leaves every byte of the previous state in place and writes after it (new
//! segments, a new footer, then, once those are on disk, a new trailer), so a
//! crash during an append leaves the old trailer intact somewhere before the
//! end of the file, followed by the bytes of the unfinished append. Reading
//! then falls back to the last trailer whose footer checks out: the state
//! before the append. [`IndexWriter::append`](crate::IndexWriter::append) and
//! `bertflow index verify --repair` cut those bytes off.

use std::path::Path;

use crate::format::{Footer, FORMAT_VERSIONS, MAGIC, TRAILER_LEN};
use crate::IndexError;

/// Where the current state of an index file ends, and its footer.
#[derive(Debug, Clone)]
pub(crate) struct Located {
    /// Offset of the footer's JSON.
    pub footer_at: u64,
    /// The footer.
    pub footer: Footer,
    /// CRC-32 of the footer.
    pub footer_crc: u32,
    /// Offset just after the trailer: the end of the state.
    pub end: u64,
    /// Bytes after `end` (an interrupted append), 0 for a clean file.
    pub discarded: u64,
}

pub(crate) fn corrupt(path: &Path, what: impl std::fmt::Display) -> IndexError {
    IndexError::Corrupt(format!("{}: {what}", path.display()))
}

/// An I/O error on `path`, as an [`IndexError::Io`] naming the file (for
/// `map_err`): the one copy the writer, the repair and the graph files use.
pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> IndexError + '_ {
    move |e| IndexError::Io(format!("{}: {e}", path.display()))
}

/// The footer of the state ending at `end` (just after a trailer), if the
/// trailer and footer there are complete and consistent.
fn footer_ending_at(bytes: &[u8], end: usize, path: &Path) -> Result<Located, IndexError> {
    if end < MAGIC.len() + TRAILER_LEN || end > bytes.len() {
        return Err(corrupt(
            path,
            format!("{end} bytes is too short for an index"),
        ));
    }
    let trailer = &bytes[end - TRAILER_LEN..end];
    if &trailer[12..] != MAGIC {
        return Err(corrupt(
            path,
            "no trailer: the file is truncated, or an append was interrupted",
        ));
    }
    let footer_len = u64::from_le_bytes(trailer[..8].try_into().unwrap_or_default());
    let footer_crc = u32::from_le_bytes(trailer[8..12].try_into().unwrap_or_default());
    let body = (end - TRAILER_LEN) as u64;
    if footer_len > body - MAGIC.len() as u64 {
        return Err(corrupt(path, "footer length out of range"));
    }
    let footer_at = body - footer_len;
    let json = &bytes[footer_at as usize..body as usize];
    if crc32fast::hash(json) != footer_crc {
        return Err(corrupt(path, "footer checksum mismatch"));
    }
    let footer: Footer =
        serde_json::from_slice(json).map_err(|e| corrupt(path, format!("bad footer: {e}")))?;
    if !FORMAT_VERSIONS.contains(&footer.format_version) {
        return Err(IndexError::Invalid(format!(
            "{}: index format version {} is not supported (this build reads {FORMAT_VERSIONS:?})",
            path.display(),
            footer.format_version
        )));
    }
    Ok(Located {
        footer_at,
        footer,
        footer_crc,
        end: end as u64,
        discarded: (bytes.len() - end) as u64,
    })
}

/// The state at the end of `bytes` (the whole file) or, if the end is not a
/// complete trailer, the last earlier one whose footer is complete and that
/// `check` accepts (the layout of its segments). The error is the one for the
/// end of the file when no earlier state is found.
pub(crate) fn locate(
    bytes: &[u8],
    path: &Path,
    check: impl Fn(&Located) -> Result<(), IndexError>,
) -> Result<Located, IndexError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        if bytes.len() < MAGIC.len() + TRAILER_LEN {
            return Err(corrupt(
                path,
                format!("{} bytes is too short for an index", bytes.len()),
            ));
        }
        return Err(corrupt(path, "not a bertflow index (bad magic)"));
    }
    let at_end = footer_ending_at(bytes, bytes.len(), path).and_then(|l| check(&l).map(|()| l));
    let first_error = match at_end {
        Ok(located) => return Ok(located),
        // A footer we cannot read is not damage to recover from.
        Err(e @ IndexError::Invalid(_)) => return Err(e),
        Err(e) => e,
    };
    // Search backwards for an earlier trailer (its magic ends a state).
    let mut end = bytes.len() - 1;
    while end > MAGIC.len() + TRAILER_LEN {
        let Some(at) = bytes[MAGIC.len()..end]
            .windows(MAGIC.len())
            .rposition(|w| w == MAGIC)
        else {
            break;
        };
        let candidate = MAGIC.len() + at + MAGIC.len();
        if let Ok(located) = footer_ending_at(bytes, candidate, path) {
            if check(&located).is_ok() {
                return Ok(located);
            }
        }
        end = candidate - 1;
    }
    Err(match first_error {
        IndexError::Corrupt(m) => IndexError::Corrupt(format!(
            "{m}; no complete earlier state was found (`bertflow index verify --repair` can rebuild the footer of a file damaged by an interrupted `index add` of bertflow 0.1 and earlier)"
        )),
        e => e,
    })
}
