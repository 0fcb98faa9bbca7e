//! Opening an index (memory-mapped, checked) and exact cosine search.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::format::{Footer, Identity, ALIGN, MAGIC, TRAILER_LEN};
use crate::locate::{corrupt, locate, Located};
use crate::IndexError;

/// One segment, checked: byte ranges into the map.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    /// Number of the segment's first sentence in the whole index.
    pub(crate) first: usize,
    pub(crate) count: usize,
    /// The codes (format version 3; empty without a quantizer), without
    /// their padding.
    pub(crate) codes: std::ops::Range<usize>,
    pub(crate) vectors: std::ops::Range<usize>,
    offsets: std::ops::Range<usize>,
    texts: std::ops::Range<usize>,
    /// Format version 4: the segment's postings (see `sparse_format`).
    pub(crate) sparse: Option<crate::sparse_format::SparseBlock>,
}

/// A memory-mapped index. Exact searches read the vectors straight from the
/// map; a quantized search reads each segment's codes once into memory of
/// its own and the rows it rescores with positioned reads (see
/// [`Index::search_with`]).
pub struct Index {
    map: Mmap,
    /// The file mapped, kept open to notice changes under the map (and read
    /// from by a quantized search).
    pub(crate) file: File,
    /// The file's length and modification time when it was mapped.
    stamp: Stamp,
    footer: Footer,
    /// CRC-32 of the footer: changes whenever the content does.
    footer_crc: u32,
    segments: Vec<Segment>,
    /// Each segment's codes, read on the first quantized search that needs
    /// them (not by `open`: `index info` reads no codes).
    pub(crate) loaded_codes: Vec<std::sync::OnceLock<Vec<u8>>>,
    /// End of the state opened (just after its trailer).
    end: u64,
    /// Bytes after `end`: an interrupted append.
    discarded: u64,
}

/// What identifies a version of a file: length, modification time, inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        }
    }
}

/// Whether `gap` is exactly the footer and trailer of an earlier state, then
/// zero padding (what `index add` leaves between the old segments and its own).
fn is_dead_footer(gap: &[u8]) -> bool {
    let end = gap.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if end < TRAILER_LEN || &gap[end - MAGIC.len()..end] != MAGIC {
        return false;
    }
    let trailer = &gap[end - TRAILER_LEN..end];
    let len = u64::from_le_bytes(trailer[..8].try_into().unwrap_or_default());
    let crc = u32::from_le_bytes(trailer[8..12].try_into().unwrap_or_default());
    let json = &gap[..end - TRAILER_LEN];
    json.len() as u64 == len && crc32fast::hash(json) == crc
}

/// Check the layout of the state `l` of `map` and return its segments.
pub(crate) fn layout(map: &[u8], l: &Located, path: &Path) -> Result<Vec<Segment>, IndexError> {
    let footer = &l.footer;
    let footer_at = l.footer_at;
    let dimension = footer.identity.dimension;
    if dimension == 0 {
        return Err(corrupt(path, "dimension 0"));
    }
    // Version 3 and only it has codes.
    match (&footer.quantizer, footer.format_version >= 3) {
        (Some(q), true) => {
            q.check()
                .map_err(|e| corrupt(path, format!("quantizer: {e}")))?;
            if q.dimension != dimension {
                return Err(corrupt(
                    path,
                    format!(
                        "the quantizer codes {} dimensions, the vectors have {dimension}",
                        q.dimension
                    ),
                ));
            }
        }
        (None, false) => {}
        (Some(_), false) => {
            return Err(corrupt(
                path,
                "a quantizer in a footer of format version 1 or 2",
            ))
        }
        (None, true) if footer.format_version == 3 => {
            return Err(corrupt(path, "format version 3 without a quantizer"))
        }
        (None, true) => {}
    }
    if footer.sparse.is_some() != (footer.format_version >= 4) {
        return Err(corrupt(path, "sparse vectors are in format version 4 only"));
    }
    let width = footer.code_width();
    // Version 1 files are zero-padded between segments; version 2 may also
    // hold the footer and trailer of an earlier state there.
    let dead_footers = footer.format_version >= 2;
    let mut segments = Vec::with_capacity(footer.segments.len());
    let mut next_free = MAGIC.len() as u64;
    let mut first = 0usize;
    for (k, meta) in footer.segments.iter().enumerate() {
        let bad = |what: &str| corrupt(path, format!("segment {k}: {what}"));
        let len = meta
            .len(dimension, width)
            .ok_or_else(|| bad("size overflows"))?;
        if meta.offset % ALIGN != 0 || meta.offset < next_free || meta.offset > footer_at {
            return Err(bad("misplaced"));
        }
        let gap = &map[next_free as usize..meta.offset as usize];
        if !(gap.iter().all(|&b| b == 0) || dead_footers && is_dead_footer(gap)) {
            return Err(bad("non-zero padding before it"));
        }
        let end = meta
            .offset
            .checked_add(len)
            .ok_or_else(|| bad("size overflows"))?;
        if end > footer_at {
            return Err(bad("runs past the footer"));
        }
        next_free = end;
        let sparse = match (&meta.sparse, footer.sparse.is_some()) {
            (Some(m), true) => {
                let (block, end) =
                    crate::sparse_format::check_block(map, m, k, next_free, footer_at, path)?;
                next_free = end;
                Some(block)
            }
            (None, false) => None,
            _ => {
                return Err(bad(
                    "sparse postings in a footer without sparse vectors, or none in one with",
                ))
            }
        };
        let count = usize::try_from(meta.count).map_err(|_| bad("too large"))?;
        let start = meta.offset as usize;
        let codes = start..start + count * width;
        let start = start + crate::format::codes_len(meta.count, width).unwrap_or(0) as usize;
        let vectors = start..start + count * dimension * 4;
        let offsets = vectors.end..vectors.end + (count + 1) * 8;
        let texts = offsets.end..end as usize;
        // The offsets must start at 0 and end at text_bytes. Only the two ends are
        // read here (reading all of them costs 8 bytes per sentence of page faults
        // at start-up); `text` checks each pair it uses, and `verify` the CRC.
        let at = |k: usize| {
            let p = offsets.start + k * 8;
            u64::from_le_bytes(map[p..p + 8].try_into().unwrap_or_default())
        };
        if at(0) != 0 || at(count) != meta.text_bytes {
            return Err(bad("text offsets do not cover the texts"));
        }
        segments.push(Segment {
            first,
            count,
            codes,
            vectors,
            offsets,
            texts,
            sparse,
        });
        first += count;
    }
    if next_free != footer_at {
        return Err(corrupt(path, "unaccounted bytes before the footer"));
    }
    if first as u64 != footer.count {
        return Err(corrupt(path, "the segment counts do not add up"));
    }
    Ok(segments)
}

impl Index {
    /// Map the index at `path` and check its structure. With `verify`, also
    /// check every segment's CRC-32 (reads the whole file once: about a second
    /// per 1.5 GB from the page cache, more from disk); without it, the
    /// footer's checksum, the layout and the first and last text offset of
    /// each segment are checked, which reads the footer and two pages per
    /// segment, so a server is ready at once whatever the size;
    /// [`Index::verify`] checks the rest. Damage that only verification finds
    /// gives wrong vectors or an error from [`Index::text`], never a panic.
    ///
    /// A file whose end is not a complete state (an `index add` was
    /// interrupted) opens in the last complete state before it;
    /// [`Index::recovered`] says so.
    pub fn open(path: &Path, verify: bool) -> Result<Self, IndexError> {
        // A regular file only: a FIFO or a device at the path is refused
        // (without blocking), never mapped or read.
        let (file, _) = bertflow_durable::open_regular(path, u64::MAX)?;
        Self::open_file(&file, path, verify)
    }

    /// [`Index::open`] on a file already open (for reading).
    pub(crate) fn open_file(file: &File, path: &Path, verify: bool) -> Result<Self, IndexError> {
        if !cfg!(target_endian = "little") {
            return Err(IndexError::Invalid(
                "index files are little-endian; this machine is not".into(),
            ));
        }
        // SAFETY: the map is read-only. Writers never change or cut bytes of a
        // complete state (`index add` writes after it; only the bytes of an
        // interrupted append, after the last trailer, are cut), and a reader
        // touches only its own state's segments after `open`.
        let io = |e: std::io::Error| IndexError::Io(format!("{}: {e}", path.display()));
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(IndexError::Invalid(format!(
                "{}: not a regular file; refused",
                path.display()
            )));
        }
        let stamp = Stamp::of(&meta);
        let map = unsafe { Mmap::map(file) }
            .map_err(|e| IndexError::Io(format!("{}: cannot map: {e}", path.display())))?;
        let located = locate(&map, path, |l| layout(&map, l, path).map(drop))?;
        let segments = layout(&map, &located, path)?;
        let index = Self {
            map,
            file: file.try_clone().map_err(io)?,
            stamp,
            footer: located.footer,
            footer_crc: located.footer_crc,
            loaded_codes: segments.iter().map(|_| Default::default()).collect(),
            segments,
            end: located.end,
            discarded: located.discarded,
        };
        if index.footer.quantizer.is_some() {
            // Search reads the codes and a few rows of vectors at random: no
            // read-ahead of vectors it will not rescore.
            #[cfg(unix)]
            let _ = index.map.advise(memmap2::Advice::Random);
        }
        if verify {
            index.verify()?;
        }
        Ok(index)
    }

    /// Error unless the file at `path` is still the one mapped, unchanged:
    /// same inode at `path`, same length and modification time. Another
    /// process that cuts or rewrites the file under a reader would make the
    /// map's pages vanish (`SIGBUS`) or change; long-lived readers (the
    /// server) call this before each access and reopen on an error. (Checked
    /// here, then read: a change in the microseconds between is not seen.)
    pub fn unchanged(&self, path: &Path) -> Result<(), IndexError> {
        let io = |e: std::io::Error| IndexError::Changed(format!("{}: {e}", path.display()));
        let held = Stamp::of(&self.file.metadata().map_err(io)?);
        let at_path = Stamp::of(&std::fs::metadata(path).map_err(io)?);
        let what = if held.len < self.end {
            format!("it was cut to {} bytes", held.len)
        } else if held != self.stamp {
            "it was modified".to_owned()
        } else if at_path.inode != held.inode {
            "another file was put in its place".to_owned()
        } else {
            return Ok(());
        };
        Err(IndexError::Changed(format!(
            "{} changed while open: {what}",
            path.display()
        )))
    }

    /// Offset just after the trailer of the state opened: the file's length,
    /// unless an interrupted append left bytes after it.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// When the file ends in the bytes of an interrupted `index add`: a
    /// sentence saying so (the index opened in the state before it).
    pub fn recovered(&self) -> Option<String> {
        (self.discarded > 0).then(|| {
            format!(
                "the last {} bytes are not a complete state (an interrupted `index add`, or a damaged trailer) and were ignored: the index holds the {} sentences of the last complete state before them (`index verify --repair` keeps what it can prove complete and removes the rest)",
                self.discarded, self.footer.count
            )
        })
    }

    /// Check every segment's CRC-32 against the footer (reads every page of
    /// the file once).
    pub fn verify(&self) -> Result<(), IndexError> {
        for (k, (s, meta)) in self.segments.iter().zip(&self.footer.segments).enumerate() {
            let bytes = &self.map[meta.offset as usize..s.texts.end];
            if crc32fast::hash(bytes) != meta.crc32 {
                return Err(IndexError::Corrupt(format!(
                    "segment {k} (sentences {} to {}): checksum mismatch (the file is corrupt)",
                    s.first,
                    s.first + s.count
                )));
            }
            let d = self.footer.identity.dimension;
            if let Some(j) = self
                .vectors(s)
                .chunks_exact(d)
                .position(|v| !stored_row_ok(v))
            {
                return Err(IndexError::Corrupt(format!(
                    "segment {k}: the vector of sentence {} is {} (every stored vector is unit length or zero); it is never served",
                    s.first + j,
                    if row_norm2(&self.vectors(s)[j * d..(j + 1) * d]).is_finite() {
                        "not of unit length"
                    } else {
                        "not finite"
                    }
                )));
            }
        }
        self.verify_sparse()
    }

    /// An identifier of the content: the sentence count and the footer's
    /// CRC-32 (which covers every segment's CRC-32). Files derived from the
    /// index (the HNSW graph) record it.
    pub fn content_id(&self) -> String {
        format!("{}:{:08x}", self.footer.count, self.footer_crc)
    }

    /// An identifier of the first `segments` segments (their offsets, counts
    /// and CRC-32s): unchanged by `index add`, which only adds segments.
    pub fn prefix_id(&self, segments: usize) -> Option<String> {
        let metas = self.footer.segments.get(..segments)?;
        let json = serde_json::to_vec(metas).ok()?;
        Some(format!("{segments}:{:08x}", crc32fast::hash(&json)))
    }

    /// What produced the vectors.
    pub fn identity(&self) -> &Identity {
        &self.footer.identity
    }

    pub(crate) fn footer(&self) -> &Footer {
        &self.footer
    }

    /// Sentences in the index.
    pub fn len(&self) -> usize {
        self.footer.count as usize
    }

    /// Whether the index holds no sentence.
    pub fn is_empty(&self) -> bool {
        self.footer.count == 0
    }

    /// Number of segments (one per `build` chunk and per `add`).
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    pub(crate) fn segment_of(&self, i: usize) -> Option<&Segment> {
        let k = self.segments.partition_point(|s| s.first + s.count <= i);
        self.segments.get(k).filter(|s| i >= s.first)
    }

    /// Sentence `i`, or an error if `i` is out of range or its bytes are not UTF-8.
    pub fn text(&self, i: usize) -> Result<&str, IndexError> {
        let s = self.segment_of(i).ok_or_else(|| {
            IndexError::Invalid(format!("no sentence {i} in an index of {}", self.len()))
        })?;
        let j = i - s.first;
        let offset = |j: usize| {
            let at = s.offsets.start + j * 8;
            u64::from_le_bytes(self.map[at..at + 8].try_into().unwrap_or_default())
        };
        let (from, to) = (offset(j), offset(j + 1));
        let len = (s.texts.end - s.texts.start) as u64;
        if from > to || to > len {
            return Err(IndexError::Corrupt(format!(
                "sentence {i}: text offsets out of order"
            )));
        }
        let bytes = &self.map[s.texts.start + from as usize..s.texts.start + to as usize];
        std::str::from_utf8(bytes)
            .map_err(|_| IndexError::Corrupt(format!("sentence {i} is not valid UTF-8")))
    }

    /// The segments, checked.
    pub(crate) fn segment_list(&self) -> &[Segment] {
        &self.segments
    }

    /// The whole map (sparse postings are read from it; so is everything
    /// where positioned reads are not available).
    pub(crate) fn map_bytes(&self) -> &[u8] {
        &self.map
    }

    /// The unit-normalised vectors of one segment, row-major.
    fn vectors(&self, s: &Segment) -> &[f32] {
        // Segments are 64-byte aligned in the file and the map is page aligned.
        bytemuck::try_cast_slice(&self.map[s.vectors.clone()]).unwrap_or(&[])
    }

    /// Vector `i` (unit length, or zero).
    pub fn vector(&self, i: usize) -> Option<&[f32]> {
        let s = self.segment_of(i)?;
        let d = self.footer.identity.dimension;
        let j = i - s.first;
        self.vectors(s).get(j * d..(j + 1) * d)
    }

    /// Iterate over every vector in order, as `(index, vector)`.
    pub fn iter_vectors(&self) -> impl Iterator<Item = (usize, &[f32])> + '_ {
        let d = self.footer.identity.dimension;
        self.segments.iter().flat_map(move |s| {
            self.vectors(s)
                .chunks_exact(d)
                .enumerate()
                .map(move |(j, v)| (s.first + j, v))
        })
    }

    /// The `top_k` sentences most similar to `query` by cosine, best first
    /// (ties: lower index first), as `(index, score)`. Without a quantizer,
    /// exact: every vector is scored; with one, the codes are scanned and the
    /// best [`DEFAULT_RESCORE`](crate::DEFAULT_RESCORE)` x top_k` rescored
    /// exactly (see [`Index::search_with`]). A query of the wrong dimension is
    /// an error.
    pub fn search(&self, query: &[f32], top_k: usize) -> Result<Vec<(usize, f32)>, IndexError> {
        self.search_with(query, top_k, &crate::SearchParams::default())
    }

    /// Exact search: every vector is scored (the quantizer, if any, is not
    /// used).
    pub fn search_exact(
        &self,
        query: &[f32],
        top_k: usize,
    ) -> Result<Vec<(usize, f32)>, IndexError> {
        let q = self.unit_query(query, None)?;
        Ok(self::top_k(
            self.iter_vectors()
                .filter_map(|(i, v)| Some((i, stored_score(v, &q)?))),
            top_k.min(self.len()),
        ))
    }
}

/// The `k` best of `scored` (`(index, score)` pairs), best first: higher
/// score first, ties broken by the lower index. Exact, in O(n log k) time and
/// O(k) memory: the one top-k of bertflow (the index file's exact search, the
/// server's in-memory corpus).
pub fn top_k(scored: impl IntoIterator<Item = (usize, f32)>, k: usize) -> Vec<(usize, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(k + 1);
    for (index, score) in scored {
        if !score.is_finite() {
            // A NaN would rank first (and print as null): never served.
            continue;
        }
        let candidate = Ranked { score, index };
        if heap.len() < k {
            heap.push(candidate);
        } else if heap.peek().is_some_and(|worst| candidate < *worst) {
            heap.pop();
            heap.push(candidate);
        }
    }
    let mut ranked = heap.into_sorted_vec();
    ranked.truncate(k);
    ranked.into_iter().map(|r| (r.index, r.score)).collect()
}

/// A scored sentence ordered best first: `a < b` when `a` ranks before `b`
/// (higher score, then lower index), so a max-heap keeps the worst on top.
#[derive(Debug, Clone, Copy)]
struct Ranked {
    score: f32,
    index: usize,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.index.cmp(&other.index))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// Dot product with eight independent accumulators (vectorises well).
/// The squared length of a stored row, summed as [`dot`] sums.
pub fn row_norm2(v: &[f32]) -> f32 {
    dot(v, v)
}

/// Whether a stored row is as `index build` and `index add` write them: finite
/// and unit length (to 1e-3 in its square) or all zero. [`Index::verify`]
/// reports any other row as damage, and search never serves one
/// ([`stored_score`]): the two agree.
pub fn stored_row_ok(v: &[f32]) -> bool {
    let n = row_norm2(v);
    n == 0.0 || (n - 1.0).abs() < 1e-3
}

/// The cosine of a stored row with a unit query (their dot product, rows being
/// unit length), or `None` for a row that is not as stored rows must be
/// ([`stored_row_ok`]: a NaN, a row scaled by damage), which is never served.
pub fn stored_score(v: &[f32], unit_query: &[f32]) -> Option<f32> {
    let s = dot(v, unit_query);
    (stored_row_ok(v) && s.is_finite()).then_some(s)
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8 * 8;
    for (x, y) in a[..chunks].chunks_exact(8).zip(b[..chunks].chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, y) in a[chunks..].iter().zip(&b[chunks..]) {
        sum += x * y;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::top_k;

    #[test]
    fn top_k_is_best_first_with_ties_to_the_lower_index() {
        let scored = [(0, 0.5), (1, 0.9), (2, 0.5), (3, -1.0), (4, 0.9), (5, 0.7)];
        assert_eq!(top_k(scored, 3), vec![(1, 0.9), (4, 0.9), (5, 0.7)]);
        assert_eq!(
            top_k(scored, 5),
            vec![(1, 0.9), (4, 0.9), (5, 0.7), (0, 0.5), (2, 0.5)]
        );
        // k over the count: every pair, ranked; k = 0: none.
        assert_eq!(top_k(scored, 10).len(), 6);
        assert_eq!(top_k(scored, 10)[5], (3, -1.0));
        assert!(top_k(scored, 0).is_empty());
        assert!(top_k(std::iter::empty(), 4).is_empty());
    }
}
