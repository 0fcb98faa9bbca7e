//! Writing an index: [`IndexWriter::create`] for a new file (written to a
//! temporary file next to it, renamed into place by `finish`), and
//! [`IndexWriter::append`] to add segments to an existing one without
//! touching the state it starts from (see [`crate::format`]).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bertflow_durable::{crash_armed, crash_point, AtomicFile};

use crate::format::{
    align_up, codes_len, normalise_into, Footer, Identity, SegmentMeta, FORMAT_VERSION, MAGIC,
};
use crate::locate::io;
use crate::IndexError;
use crate::Quantization;

/// Where the bytes go.
enum Sink {
    /// A new index: a temporary file renamed over the path by `finish`.
    New(AtomicFile),
    /// An existing index, opened for appending (and locked).
    Append(BufWriter<File>),
}

impl Sink {
    fn out(&mut self) -> &mut dyn Write {
        match self {
            Sink::New(f) => f,
            Sink::Append(f) => f,
        }
    }
}

/// Adds segments to an index file; nothing is visible until [`finish`](Self::finish).
pub struct IndexWriter {
    sink: Sink,
    /// Where the next byte goes.
    position: u64,
    footer: Footer,
    /// The index file.
    path: PathBuf,
    /// Segments added by this writer.
    added: usize,
    /// A lock held on this writer's temporary file (`index build`), so that
    /// another build knows it is not stale.
    _tmp_lock: Option<File>,
}

/// The temporary files `.NAME.*.tmp` beside `path` (what the atomic writer
/// names them).
fn temporaries(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let prefix = format!(".{name}.");
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with(&prefix)
                && n.ends_with(".tmp")
                && e.file_type().is_ok_and(|t| t.is_file())
        })
        .map(|e| e.path())
        .collect()
}

/// Remove the temporary files of earlier `index build`s of `path` that were
/// killed (no live writer holds their lock); returns how many.
fn remove_stale_temporaries(path: &Path, keep: &[PathBuf]) -> usize {
    let mut removed = 0;
    for tmp in temporaries(path) {
        if keep.contains(&tmp) {
            continue;
        }
        let Ok(file) = File::open(&tmp) else { continue };
        if file.try_lock().is_ok() && std::fs::remove_file(&tmp).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl From<bertflow_durable::DurableError> for IndexError {
    fn from(e: bertflow_durable::DurableError) -> Self {
        IndexError::Io(e.to_string())
    }
}

impl IndexWriter {
    /// Start a new index at `path` (replaced by `finish`, not before; an
    /// error or a drop before then leaves what was at `path`).
    pub fn create(path: &Path, identity: Identity) -> Result<Self, IndexError> {
        Self::create_with(path, identity, None, None)
    }

    /// [`IndexWriter::create`] for a quantized index (format version 3):
    /// every segment also stores the codes of its vectors under `quantizer`.
    pub fn create_quantized(
        path: &Path,
        identity: Identity,
        quantizer: Quantization,
    ) -> Result<Self, IndexError> {
        Self::create_with(path, identity, Some(quantizer), None)
    }

    /// [`IndexWriter::create`] for an index that also stores a sparse
    /// vector beside each dense row (format version 4; see
    /// [`crate::sparse_format`]), quantized when `quantizer` is given:
    /// segments are written with [`IndexWriter::add_sparse`].
    pub fn create_sparse(
        path: &Path,
        identity: Identity,
        quantizer: Option<Quantization>,
        sparse: crate::SparseInfo,
    ) -> Result<Self, IndexError> {
        if sparse.dimension == 0 || sparse.dimension > 1 << 32 {
            return Err(IndexError::Invalid(format!(
                "a sparse dimension of {} (1 to 2^32)",
                sparse.dimension
            )));
        }
        Self::create_with(path, identity, quantizer, Some(sparse))
    }

    fn create_with(
        path: &Path,
        identity: Identity,
        quantizer: Option<Quantization>,
        sparse: Option<crate::SparseInfo>,
    ) -> Result<Self, IndexError> {
        if let Some(q) = &quantizer {
            q.check().map_err(IndexError::Invalid)?;
            if q.dimension != identity.dimension {
                return Err(IndexError::Invalid(format!(
                    "a quantizer of {} dimensions for vectors of {}",
                    q.dimension, identity.dimension
                )));
            }
        }
        if identity.dimension == 0 {
            return Err(IndexError::Invalid(
                "the dimension must be at least 1".into(),
            ));
        }
        let before = temporaries(path);
        let mut file = AtomicFile::create(path)?;
        // Ours is the temporary file that was not there before; lock it, then
        // remove those of killed builds (unlocked).
        let ours: Vec<PathBuf> = temporaries(path)
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect();
        let tmp_lock = match ours.as_slice() {
            [tmp] => File::open(tmp).ok().filter(|f| f.try_lock().is_ok()),
            _ => None,
        };
        if tmp_lock.is_some() {
            remove_stale_temporaries(path, &ours);
        }
        file.write_all(MAGIC).map_err(io(path))?;
        Ok(Self {
            sink: Sink::New(file),
            position: MAGIC.len() as u64,
            footer: {
                let mut footer = Footer {
                    format_version: FORMAT_VERSION,
                    identity,
                    count: 0,
                    segments: Vec::new(),
                    quantizer,
                    sparse,
                };
                footer.format_version = footer.version_needed();
                footer
            },
            path: path.to_path_buf(),
            added: 0,
            _tmp_lock: tmp_lock,
        })
    }

    /// Open the existing index at `path` to add segments, after checking that
    /// it was made with `identity` and every checksum. The file is locked
    /// against other writers until the writer is dropped. The state it holds
    /// is never changed: new segments go after it, and `finish` publishes
    /// them (a crash before leaves the old state, which readers find). The
    /// bytes of an earlier interrupted append are cut off first.
    pub fn append(path: &Path, identity: &Identity) -> Result<Self, IndexError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(path))?;
        lock_briefly(&file).map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => IndexError::Io(format!(
                "{}: another `index add` (or `index ann`) is writing this index",
                path.display()
            )),
            std::fs::TryLockError::Error(e) => io(path)(e),
        })?;
        let index = crate::Index::open_file(&file, path, true)?;
        index.identity().check_matches(identity)?;
        let mut footer = index.footer().clone();
        let end = index.end();
        drop(index);
        if file.metadata().map_err(io(path))?.len() > end {
            // Only the bytes of an interrupted append are cut; a committed
            // state with a damaged trailer is for `index verify --repair`.
            if let crate::repair::Tail::Committed { footer: later, .. } =
                crate::repair::tail(&file, path, &footer, end)?
            {
                return Err(IndexError::Corrupt(format!(
                    "{}: the trailer of the last `index add` ({} sentences) is damaged; run `bertflow index verify --repair --index {}` first, which rewrites it",
                    path.display(),
                    later.footer.count,
                    path.display()
                )));
            }
            file.set_len(end).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
        }
        footer.format_version = footer.version_needed();
        let mut file = BufWriter::with_capacity(1 << 20, file);
        file.seek(SeekFrom::Start(end)).map_err(io(path))?;
        Ok(Self {
            sink: Sink::Append(file),
            position: end,
            footer,
            path: path.to_path_buf(),
            added: 0,
            _tmp_lock: None,
        })
    }

    /// The quantizer of the index written (`None`: no codes).
    pub fn quantizer(&self) -> Option<&Quantization> {
        self.footer.quantizer.as_ref()
    }

    /// What produced the vectors of the index written.
    pub fn identity(&self) -> &Identity {
        &self.footer.identity
    }

    /// Sentences written so far (including those of an appended-to index).
    pub fn count(&self) -> u64 {
        self.footer.count
    }

    /// What made the sparse vectors of the index written (`None`: it stores
    /// none, and [`IndexWriter::add`] writes its segments).
    pub fn sparse(&self) -> Option<&crate::SparseInfo> {
        self.footer.sparse.as_ref()
    }

    /// Write one segment: `vectors` holds `texts.len()` rows of `dimension`
    /// floats (normalised here to unit length). An empty call writes nothing.
    /// An index with sparse vectors takes [`IndexWriter::add_sparse`].
    pub fn add(&mut self, vectors: &[f32], texts: &[String]) -> Result<(), IndexError> {
        if self.footer.sparse.is_some() {
            return Err(IndexError::Invalid(
                "this index stores a sparse vector beside each dense one: give them (`index add` with the model's sparse output or --sparse FILE)".into(),
            ));
        }
        self.add_segment(vectors, texts, None)
    }

    /// [`IndexWriter::add`] for an index with sparse vectors: `sparse` holds
    /// one per text (token ids strictly ascending and below the index's
    /// sparse dimension, weights finite and `>= 0`; zeros are not stored),
    /// written as the segment's postings after it.
    pub fn add_sparse(
        &mut self,
        vectors: &[f32],
        texts: &[String],
        sparse: &[crate::SparseRef],
    ) -> Result<(), IndexError> {
        let Some(info) = &self.footer.sparse else {
            return Err(IndexError::Invalid(
                "this index stores no sparse vectors (it was built without them); build a new one with them".into(),
            ));
        };
        if sparse.len() != texts.len() {
            return Err(IndexError::Invalid(format!(
                "{} sparse vectors for {} texts",
                sparse.len(),
                texts.len()
            )));
        }
        for (i, row) in sparse.iter().enumerate() {
            crate::sparse_format::check_row(i, *row, info.dimension)?;
        }
        self.add_segment(vectors, texts, Some(sparse))
    }

    fn add_segment(
        &mut self,
        vectors: &[f32],
        texts: &[String],
        sparse: Option<&[crate::SparseRef]>,
    ) -> Result<(), IndexError> {
        let dimension = self.footer.identity.dimension;
        if vectors.len() != texts.len() * dimension {
            return Err(IndexError::Invalid(format!(
                "{} floats for {} texts of dimension {dimension}",
                vectors.len(),
                texts.len()
            )));
        }
        if texts.is_empty() {
            return Ok(());
        }
        if let Some(at) = vectors.iter().position(|x| !x.is_finite()) {
            return Err(IndexError::Invalid(format!(
                "vector {} of this batch has a NaN or infinite component ({}); refused: such a vector would rank first for every query",
                at / dimension,
                vectors[at]
            )));
        }
        let start = align_up(self.position);
        self.write(&vec![0u8; (start - self.position) as usize])?;
        let mut crc = crc32fast::Hasher::new();
        if let Some(q) = &self.footer.quantizer {
            let width = q.width();
            let padded = codes_len(texts.len() as u64, width).unwrap_or(0) as usize;
            let mut codes = vec![0u8; padded];
            // Coding (a rotation is d x d multiply-adds per vector) on every core.
            let rows = texts.len();
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            let per = rows.div_ceil(cores.min(rows.div_ceil(256)).max(1));
            std::thread::scope(|scope| {
                for (vs, cs) in vectors
                    .chunks(per * dimension)
                    .zip(codes[..rows * width].chunks_mut(per * width))
                {
                    scope.spawn(move || {
                        let mut unit = Vec::with_capacity(dimension);
                        for (row, code) in
                            vs.chunks_exact(dimension).zip(cs.chunks_exact_mut(width))
                        {
                            unit.clear();
                            normalise_into(row, &mut unit);
                            q.encode(&unit, code);
                        }
                    });
                }
            });
            crc.update(&codes);
            self.write(&codes)?;
        }
        let mut unit = Vec::with_capacity(dimension);
        let mut bytes = Vec::with_capacity(dimension * 4);
        for row in vectors.chunks_exact(dimension) {
            unit.clear();
            normalise_into(row, &mut unit);
            bytes.clear();
            bytes.extend(unit.iter().flat_map(|x| x.to_le_bytes()));
            crc.update(&bytes);
            self.write(&bytes)?;
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity((texts.len() + 1) * 8);
        offsets.extend(offset.to_le_bytes());
        for text in texts {
            offset += text.len() as u64;
            offsets.extend(offset.to_le_bytes());
        }
        crc.update(&offsets);
        self.write(&offsets)?;
        for text in texts {
            crc.update(text.as_bytes());
            self.write(text.as_bytes())?;
        }
        let crc32 = crc.finalize();
        let sparse = match sparse {
            Some(rows) => {
                let (block, tokens, postings) = crate::sparse_format::encode_block(rows);
                let pad = crate::sparse_format::padding(self.position);
                self.write(&vec![0u8; pad])?;
                let offset = self.position;
                self.write(&block)?;
                Some(crate::SparseSegment {
                    offset,
                    tokens,
                    postings,
                    crc32: crc32fast::hash(&block),
                })
            }
            None => None,
        };
        self.footer.segments.push(SegmentMeta {
            offset: start,
            count: texts.len() as u64,
            text_bytes: offset,
            crc32,
            sparse,
        });
        self.footer.count += texts.len() as u64;
        self.added += 1;
        if crash_armed("index:segment-written") {
            self.flush()?;
            crash_point("index:segment-written");
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), IndexError> {
        self.sink.out().write_all(bytes).map_err(io(&self.path))?;
        self.position += bytes.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IndexError> {
        self.sink.out().flush().map_err(io(&self.path))
    }

    /// Write the footer and trailer and make them durable: a new index is
    /// renamed into place; an append is fsynced with its footer before the
    /// trailer that publishes it is written (and fsynced). Returns the number
    /// of sentences in the index. An append that added nothing writes nothing.
    pub fn finish(mut self) -> Result<u64, IndexError> {
        if matches!(self.sink, Sink::Append(_)) && self.added == 0 {
            return Ok(self.footer.count);
        }
        let json = serde_json::to_vec(&self.footer)
            .map_err(|e| IndexError::Invalid(format!("cannot encode the footer: {e}")))?;
        let crc = crc32fast::hash(&json);
        self.write(&json)?;
        let mut trailer = Vec::with_capacity(20);
        trailer.extend((json.len() as u64).to_le_bytes());
        trailer.extend(crc.to_le_bytes());
        trailer.extend(MAGIC);
        let path = self.path.clone();
        match self.sink {
            Sink::New(mut file) => {
                file.write_all(&trailer).map_err(io(&path))?;
                file.commit()?;
            }
            Sink::Append(file) => {
                let mut file = file
                    .into_inner()
                    .map_err(|e| IndexError::Io(format!("{}: {}", path.display(), e.error())))?;
                file.sync_all().map_err(io(&path))?;
                crash_point("index:footer-synced");
                file.write_all(&trailer).map_err(io(&path))?;
                crash_point("index:trailer-written");
                file.sync_all().map_err(io(&path))?;
            }
        }
        Ok(self.footer.count)
    }
}

/// The file's exclusive lock, waiting up to half a second for it: a lock just
/// released can still be held for an instant by a process forked (by another
/// thread) while it was taken, until that process's `exec` closes the
/// descriptor; a real writer holds it far longer.
pub(crate) fn lock_briefly(file: &File) -> Result<(), std::fs::TryLockError> {
    for _ in 0..50 {
        match file.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => return other,
        }
    }
    file.try_lock()
}
