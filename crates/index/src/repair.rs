//! `bertflow index verify --repair`: bring a damaged index file back to its
//! last complete state.
//!
//! Three kinds of damage are repaired:
//!
//! * the bytes of an interrupted `index add` after the last complete state
//!   (this version's appends leave the state before them intact): they are
//!   cut off. An append is interrupted when the file does not end in a
//!   trailer (the trailer is the last thing an append writes);
//! * a damaged trailer of a committed state (the file ends in 20 trailer bytes
//!   that do not check out): when the footer before it is intact, lists the
//!   earlier state's segments and then new ones, and every new segment's
//!   CRC-32 matches, the trailer is written again and nothing is lost. A
//!   committed state whose footer is damaged too is refused, not cut (its
//!   segments cannot be proved complete, nor dropped silently);
//! * an index left without any footer by an interrupted `index add` of
//!   bertflow 0.1, which cut the old footer off before writing: the complete
//!   segments are found again from their shape (rows of unit or zero vectors
//!   of the index's dimension, then text offsets from 0 upwards that cover
//!   UTF-8 texts) and a footer is written for them with the identity the
//!   caller gives (the settings the index was built with). The partial
//!   segment at the end is dropped.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use memmap2::Mmap;

use crate::format::{align_up, Footer, Identity, SegmentMeta, FORMAT_VERSION, MAGIC, TRAILER_LEN};
use crate::locate::{corrupt, io, Located};
use crate::{Index, IndexError};

/// What [`repair`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repaired {
    /// Nothing to repair.
    Clean { sentences: u64 },
    /// The bytes of an interrupted append were cut off.
    Truncated { sentences: u64, bytes: u64 },
    /// The trailer of the last state was damaged and was written again.
    Trailer {
        /// Sentences in the index after the repair.
        sentences: u64,
        /// Of those, sentences of the state whose trailer was rebuilt.
        recovered: u64,
    },
    /// The footer was rebuilt for the complete segments found.
    Rebuilt {
        sentences: u64,
        segments: usize,
        bytes: u64,
    },
}

/// Repair the index at `path` (see the module docs). `identity` is needed
/// only when no footer survives; without it that case is an error that says
/// what to pass.
pub fn repair(path: &Path, identity: Option<&Identity>) -> Result<Repaired, IndexError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io(path))?;
    crate::writer::lock_briefly(&file).map_err(|_| {
        IndexError::Io(format!(
            "{}: another process is writing this index",
            path.display()
        ))
    })?;
    let len = file.metadata().map_err(io(path))?.len();
    let opened = Index::open_file(&file, path, true);
    match opened {
        Ok(index) => {
            let (sentences, end) = (index.len() as u64, index.end());
            let base = index.footer().clone();
            drop(index);
            if end == len {
                return Ok(Repaired::Clean { sentences });
            }
            match tail(&file, path, &base, end)? {
                Tail::Interrupted => {}
                Tail::Committed { footer, json_crc } => {
                    let mut trailer = Vec::with_capacity(TRAILER_LEN);
                    let json_len = len - TRAILER_LEN as u64 - footer.at;
                    trailer.extend(json_len.to_le_bytes());
                    trailer.extend(json_crc.to_le_bytes());
                    trailer.extend(MAGIC);
                    std::os::unix::fs::FileExt::write_all_at(
                        &file,
                        &trailer,
                        len - TRAILER_LEN as u64,
                    )
                    .map_err(io(path))?;
                    file.sync_all().map_err(io(path))?;
                    let index = Index::open_file(&file, path, true)?;
                    if index.end() != len {
                        return Err(corrupt(path, "the rebuilt trailer does not check out"));
                    }
                    return Ok(Repaired::Trailer {
                        sentences: index.len() as u64,
                        recovered: footer.footer.count - sentences,
                    });
                }
            }
            file.set_len(end).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
            Ok(Repaired::Truncated {
                sentences,
                bytes: len - end,
            })
        }
        Err(IndexError::Corrupt(reason)) => {
            let Some(identity) = identity else {
                return Err(IndexError::Corrupt(format!(
                    "{reason}; to rebuild the footer, repair with the settings the index was built with (model, pooling, calibrator)"
                )));
            };
            // SAFETY: read-only map, dropped before the file is changed.
            let map = unsafe { Mmap::map(&file) }.map_err(io(path))?;
            if map.len() < MAGIC.len() || &map[..MAGIC.len()] != MAGIC {
                return Err(corrupt(path, "not a bertflow index (bad magic)"));
            }
            // Footers are only rebuilt for files of bertflow 0.1 (no codes
            // before the vectors): a quantized index never loses every footer
            // to an interrupted append, so its damage is not this.
            const QUANTIZED: &[u8] = b"{\"format_version\":3";
            const SPARSE: &[u8] = b"{\"format_version\":4";
            if map
                .windows(QUANTIZED.len())
                .any(|w| w == QUANTIZED || w == SPARSE)
            {
                return Err(corrupt(
                    path,
                    format!("{reason}; a quantized or sparse (format version 3 or 4) index has no complete footer left: it was damaged, not interrupted; restore it from a copy or rebuild it"),
                ));
            }
            let (segments, end) = find_segments(&map, identity.dimension);
            drop(map);
            let footer = Footer {
                format_version: FORMAT_VERSION,
                identity: identity.clone(),
                count: segments.iter().map(|s| s.count).sum(),
                segments,
                quantizer: None,
                sparse: None,
            };
            let json = serde_json::to_vec(&footer)
                .map_err(|e| IndexError::Invalid(format!("cannot encode the footer: {e}")))?;
            let mut tail = json.clone();
            tail.extend((json.len() as u64).to_le_bytes());
            tail.extend(crc32fast::hash(&json).to_le_bytes());
            tail.extend(MAGIC);
            file.set_len(end).map_err(io(path))?;
            let mut f = &file;
            std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(end)).map_err(io(path))?;
            f.write_all(&tail).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
            Index::open_file(&file, path, true)?;
            Ok(Repaired::Rebuilt {
                sentences: footer.count,
                segments: footer.segments.len(),
                bytes: len - end,
            })
        }
        Err(e) => Err(e),
    }
}

/// A later state's footer found after a damaged trailer.
pub(crate) struct LaterFooter {
    /// Offset of its JSON.
    pub at: u64,
    pub footer: Footer,
}

/// What the bytes after the last complete state are.
pub(crate) enum Tail {
    /// An interrupted append (the file does not end in a trailer): never
    /// committed, safe to cut.
    Interrupted,
    /// A committed state whose trailer is damaged but whose footer and new
    /// segments check out: its trailer can be written again.
    Committed {
        footer: Box<LaterFooter>,
        json_crc: u32,
    },
}

/// Classify the bytes after `base_end` (the end of the last complete state,
/// whose footer is `base`). A committed state that cannot be proved complete
/// is an error: cutting it would drop committed sentences.
pub(crate) fn tail(
    file: &std::fs::File,
    path: &Path,
    base: &Footer,
    base_end: u64,
) -> Result<Tail, IndexError> {
    // SAFETY: read-only map, dropped before the file is changed; the caller
    // holds the file's lock.
    let map = unsafe { Mmap::map(file) }.map_err(io(path))?;
    let len = map.len() as u64;
    if let Some((footer, json_crc)) = footer_before(&map, base, base_end, path) {
        return Ok(Tail::Committed {
            footer: Box::new(footer),
            json_crc,
        });
    }
    if len >= base_end + TRAILER_LEN as u64 && map.ends_with(MAGIC) {
        return Err(corrupt(
            path,
            format!(
                "the last {} bytes end in a trailer (a committed `index add`) but its footer or segments do not check out; they were not removed. The index holds {} sentences before them; restore the file from a copy, or rebuild it",
                len - base_end,
                base.count
            ),
        ));
    }
    Ok(Tail::Interrupted)
}

/// The footer of a committed state ending just before the file's last
/// [`TRAILER_LEN`] bytes, after `base_end`, if it extends `base` and every new
/// segment's checksum matches.
fn footer_before(
    map: &[u8],
    base: &Footer,
    base_end: u64,
    path: &Path,
) -> Option<(LaterFooter, u32)> {
    const START: &[u8] = b"{\"format_version\":";
    let json_end = map.len().checked_sub(TRAILER_LEN)?;
    let from = usize::try_from(base_end).ok()?;
    let region = map.get(from..json_end)?;
    let mut hi = region.len();
    while let Some(p) = region[..hi].windows(START.len()).rposition(|w| w == START) {
        hi = p;
        let json = &region[p..];
        let Ok(footer) = serde_json::from_slice::<Footer>(json) else {
            continue;
        };
        let n = base.segments.len();
        let extends = footer.identity == base.identity
            && footer.quantizer == base.quantizer
            && footer.sparse == base.sparse
            && footer.segments.len() > n
            && footer.segments[..n] == base.segments[..]
            && footer.count == footer.segments.iter().map(|s| s.count).sum::<u64>();
        if !extends {
            continue;
        }
        let at = (from + p) as u64;
        let json_crc = crc32fast::hash(json);
        let located = Located {
            footer_at: at,
            footer: footer.clone(),
            footer_crc: json_crc,
            end: map.len() as u64,
            discarded: 0,
        };
        if crate::reader::layout(map, &located, path).is_err() {
            continue;
        }
        let dimension = footer.identity.dimension;
        let checksums_match = footer.segments[n..].iter().all(|s| {
            let start = s.offset as usize;
            let end = start + s.len(dimension, footer.code_width()).unwrap_or(0) as usize;
            let sparse_ok = s.sparse.as_ref().is_none_or(|b| {
                let at = b.offset as usize;
                let bytes = map.get(at..at + b.byte_len().unwrap_or(0) as usize);
                bytes.is_some_and(|bytes| crc32fast::hash(bytes) == b.crc32)
            });
            sparse_ok
                && map
                    .get(start..end)
                    .is_some_and(|bytes| crc32fast::hash(bytes) == s.crc32)
        });
        if checksums_match {
            return Some((LaterFooter { at, footer }, json_crc));
        }
    }
    None
}

/// A row of a segment's vectors: unit length or all zero.
fn unit_or_zero(row: &[u8]) -> bool {
    let mut sum = 0f64;
    let mut zero = true;
    for b in row.chunks_exact(4) {
        let x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if !x.is_finite() {
            return false;
        }
        zero &= x.to_bits() == 0;
        sum += f64::from(x) * f64::from(x);
    }
    zero || (sum - 1.0).abs() < 1e-4
}

/// The segment of `count` rows at `at`, if its offsets and texts are complete
/// and consistent.
fn segment_at(map: &[u8], at: usize, count: usize, dimension: usize) -> Option<SegmentMeta> {
    let offsets_at = at + count * dimension * 4;
    let texts_at = offsets_at + (count + 1) * 8;
    let offset = |k: usize| {
        let p = offsets_at + k * 8;
        map.get(p..p + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    if offset(0)? != 0 {
        return None;
    }
    let mut previous = 0u64;
    for k in 1..=count {
        let next = offset(k)?;
        if next < previous {
            return None;
        }
        let text = map.get(texts_at + previous as usize..texts_at + next as usize)?;
        std::str::from_utf8(text).ok()?;
        previous = next;
    }
    let end = texts_at + previous as usize;
    Some(SegmentMeta {
        offset: at as u64,
        count: count as u64,
        text_bytes: previous,
        crc32: crc32fast::hash(&map[at..end]),
        sparse: None,
    })
}

/// The complete segments of a footerless file, in order, and where the last
/// one ends.
fn find_segments(map: &[u8], dimension: usize) -> (Vec<SegmentMeta>, u64) {
    let row = dimension * 4;
    let mut segments: Vec<SegmentMeta> = Vec::new();
    let mut end = MAGIC.len();
    loop {
        let at = align_up(end as u64) as usize;
        if at > map.len() || map[end..at].iter().any(|&b| b != 0) {
            break;
        }
        let mut rows = 0;
        while at + (rows + 1) * row <= map.len() && unit_or_zero(&map[at + rows * row..][..row]) {
            rows += 1;
        }
        // The first offset (0) can look like the start of a zero row: try a
        // few counts below the longest run too.
        let found = (rows.saturating_sub(3).max(1)..=rows)
            .rev()
            .find_map(|count| segment_at(map, at, count, dimension));
        let Some(segment) = found else { break };
        end = (segment.offset + segment.len(dimension, 0).unwrap_or(0)) as usize;
        segments.push(segment);
    }
    (segments, end as u64)
}
