//! Opening an index (memory-mapped, checked) and exact cosine search.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use memmap2::Mmap;

use crate::format::{Footer, Identity, ALIGN, FORMAT_VERSION, MAGIC, TRAILER_LEN};
use crate::IndexError;

/// One segment, checked: byte ranges into the map.
#[derive(Debug, Clone)]
struct Segment {
    /// Number of the segment's first sentence in the whole index.
    first: usize,
    count: usize,
    vectors: std::ops::Range<usize>,
    offsets: std::ops::Range<usize>,
    texts: std::ops::Range<usize>,
}

/// A memory-mapped index. Searches read the vectors straight from the map.
pub struct Index {
    map: Mmap,
    footer: Footer,
    /// CRC-32 of the footer: changes whenever the content does.
    footer_crc: u32,
    segments: Vec<Segment>,
}

fn corrupt(path: &Path, what: impl std::fmt::Display) -> IndexError {
    IndexError::Corrupt(format!("{}: {what}", path.display()))
}

/// Read and check the trailer and footer of the index file `file`; returns
/// the footer's offset, the footer and its CRC-32.
pub(crate) fn read_footer(mut file: &File, path: &Path) -> Result<(u64, Footer, u32), IndexError> {
    let io = |e: std::io::Error| IndexError::Io(format!("{}: {e}", path.display()));
    let len = file.metadata().map_err(io)?.len();
    if len < (MAGIC.len() + TRAILER_LEN) as u64 {
        return Err(corrupt(
            path,
            format!("{len} bytes is too short for an index"),
        ));
    }
    let mut magic = [0u8; 8];
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.read_exact(&mut magic).map_err(io)?;
    if &magic != MAGIC {
        return Err(corrupt(path, "not a bertflow index (bad magic)"));
    }
    let mut trailer = [0u8; TRAILER_LEN];
    file.seek(SeekFrom::Start(len - TRAILER_LEN as u64))
        .map_err(io)?;
    file.read_exact(&mut trailer).map_err(io)?;
    if &trailer[12..] != MAGIC {
        return Err(corrupt(
            path,
            "no trailer: the file is truncated, or an append was interrupted",
        ));
    }
    let footer_len = u64::from_le_bytes(trailer[..8].try_into().unwrap_or_default());
    let footer_crc = u32::from_le_bytes(trailer[8..12].try_into().unwrap_or_default());
    let body = len - TRAILER_LEN as u64;
    if footer_len > body - MAGIC.len() as u64 {
        return Err(corrupt(path, "footer length out of range"));
    }
    let footer_at = body - footer_len;
    let mut json = vec![0u8; footer_len as usize];
    file.seek(SeekFrom::Start(footer_at)).map_err(io)?;
    file.read_exact(&mut json).map_err(io)?;
    if crc32fast::hash(&json) != footer_crc {
        return Err(corrupt(path, "footer checksum mismatch"));
    }
    let footer: Footer =
        serde_json::from_slice(&json).map_err(|e| corrupt(path, format!("bad footer: {e}")))?;
    if footer.format_version != FORMAT_VERSION {
        return Err(IndexError::Invalid(format!(
            "{}: index format version {} is not supported (this build reads {FORMAT_VERSION})",
            path.display(),
            footer.format_version
        )));
    }
    Ok((footer_at, footer, footer_crc))
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
    pub fn open(path: &Path, verify: bool) -> Result<Self, IndexError> {
        if !cfg!(target_endian = "little") {
            return Err(IndexError::Invalid(
                "index files are little-endian; this machine is not".into(),
            ));
        }
        let file =
            File::open(path).map_err(|e| IndexError::Io(format!("{}: {e}", path.display())))?;
        let (footer_at, footer, footer_crc) = read_footer(&file, path)?;
        // SAFETY: the map is read-only; the file must not be truncated while it
        // is mapped (index add rewrites only the footer region, after the
        // segments a reader uses, and `serve` maps a file nobody appends to).
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| IndexError::Io(format!("{}: cannot map: {e}", path.display())))?;
        let dimension = footer.identity.dimension;
        if dimension == 0 {
            return Err(corrupt(path, "dimension 0"));
        }
        let mut segments = Vec::with_capacity(footer.segments.len());
        let mut next_free = MAGIC.len() as u64;
        let mut first = 0usize;
        for (k, meta) in footer.segments.iter().enumerate() {
            let bad = |what: &str| corrupt(path, format!("segment {k}: {what}"));
            let len = meta.len(dimension).ok_or_else(|| bad("size overflows"))?;
            if meta.offset % ALIGN != 0 || meta.offset < next_free || meta.offset > footer_at {
                return Err(bad("misplaced"));
            }
            if map[next_free as usize..meta.offset as usize]
                .iter()
                .any(|&b| b != 0)
            {
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
            let count = usize::try_from(meta.count).map_err(|_| bad("too large"))?;
            let start = meta.offset as usize;
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
                vectors,
                offsets,
                texts,
            });
            first += count;
        }
        if next_free != footer_at {
            return Err(corrupt(path, "unaccounted bytes before the footer"));
        }
        if first as u64 != footer.count {
            return Err(corrupt(path, "the segment counts do not add up"));
        }
        let index = Self {
            map,
            footer,
            footer_crc,
            segments,
        };
        if verify {
            index.verify()?;
        }
        Ok(index)
    }

    /// Check every segment's CRC-32 against the footer (reads every page of
    /// the file once).
    pub fn verify(&self) -> Result<(), IndexError> {
        for (k, (s, meta)) in self.segments.iter().zip(&self.footer.segments).enumerate() {
            let bytes = &self.map[s.vectors.start..s.texts.end];
            if crc32fast::hash(bytes) != meta.crc32 {
                return Err(IndexError::Corrupt(format!(
                    "segment {k} (sentences {} to {}): checksum mismatch (the file is corrupt)",
                    s.first,
                    s.first + s.count
                )));
            }
        }
        Ok(())
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

    fn segment_of(&self, i: usize) -> Option<&Segment> {
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
    /// (ties: lower index first), as `(index, score)`. Exact: every vector is
    /// scored. A query of the wrong dimension is an error.
    pub fn search(&self, query: &[f32], top_k: usize) -> Result<Vec<(usize, f32)>, IndexError> {
        let d = self.footer.identity.dimension;
        if query.len() != d {
            return Err(IndexError::Invalid(format!(
                "query of dimension {} for an index of dimension {d}",
                query.len()
            )));
        }
        let mut q = Vec::with_capacity(d);
        crate::format::normalise_into(query, &mut q);
        let k = top_k.min(self.len());
        let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(k + 1);
        if k == 0 {
            return Ok(Vec::new());
        }
        for (i, v) in self.iter_vectors() {
            let candidate = Ranked {
                score: dot(v, &q),
                index: i,
            };
            if heap.len() < k {
                heap.push(candidate);
            } else if heap.peek().is_some_and(|worst| candidate < *worst) {
                heap.pop();
                heap.push(candidate);
            }
        }
        let mut ranked = heap.into_sorted_vec();
        ranked.truncate(k);
        Ok(ranked.into_iter().map(|r| (r.index, r.score)).collect())
    }
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
