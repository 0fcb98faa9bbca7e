//! Writing an index: [`IndexWriter::create`] for a new file (written to a
//! temporary file next to it, renamed into place by `finish`), and
//! [`IndexWriter::append`] to add segments to an existing one.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::format::{
    align_up, normalise_into, Footer, Identity, SegmentMeta, FORMAT_VERSION, MAGIC,
};
use crate::reader::read_footer;
use crate::IndexError;

/// Adds segments to an index file; nothing is visible until [`finish`](Self::finish).
pub struct IndexWriter {
    file: BufWriter<File>,
    /// Where the next byte goes.
    position: u64,
    footer: Footer,
    /// The file being written.
    path: PathBuf,
    /// For a new index, where `finish` moves the file.
    rename_to: Option<PathBuf>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> IndexError + '_ {
    move |e| IndexError::Io(format!("{}: {e}", path.display()))
}

impl IndexWriter {
    /// Start a new index at `path` (replaced by `finish`, not before).
    pub fn create(path: &Path, identity: Identity) -> Result<Self, IndexError> {
        if identity.dimension == 0 {
            return Err(IndexError::Invalid(
                "the dimension must be at least 1".into(),
            ));
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".partial");
        let tmp = path.with_file_name(name);
        let file = File::create(&tmp).map_err(io(&tmp))?;
        let mut file = BufWriter::with_capacity(1 << 20, file);
        file.write_all(MAGIC).map_err(io(&tmp))?;
        Ok(Self {
            file,
            position: MAGIC.len() as u64,
            footer: Footer {
                format_version: FORMAT_VERSION,
                identity,
                count: 0,
                segments: Vec::new(),
            },
            path: tmp,
            rename_to: Some(path.to_path_buf()),
        })
    }

    /// Open the existing index at `path` to add segments, after checking that
    /// it was made with `identity`. The segments already there are kept as
    /// they are (their checksums are verified first); `finish` writes the new
    /// footer. An append interrupted before `finish` leaves a file that is
    /// refused as corrupt.
    pub fn append(path: &Path, identity: &Identity) -> Result<Self, IndexError> {
        let index = crate::Index::open(path, true)?;
        index.identity().check_matches(identity)?;
        // The new segments go where the footer was.
        let footer = index.footer().clone();
        let end = footer
            .segments
            .last()
            .map(|s| s.offset + s.len(footer.identity.dimension).unwrap_or(0))
            .unwrap_or(MAGIC.len() as u64);
        drop(index);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(path))?;
        // Re-read the footer from the handle we write through.
        let (_, check, _) = read_footer(&file, path)?;
        if check != footer {
            return Err(IndexError::Io(format!(
                "{} changed while it was being opened",
                path.display()
            )));
        }
        file.set_len(end).map_err(io(path))?;
        let mut file = BufWriter::with_capacity(1 << 20, file);
        file.seek(SeekFrom::Start(end)).map_err(io(path))?;
        Ok(Self {
            file,
            position: end,
            footer,
            path: path.to_path_buf(),
            rename_to: None,
        })
    }

    /// Sentences written so far (including those of an appended-to index).
    pub fn count(&self) -> u64 {
        self.footer.count
    }

    /// Write one segment: `vectors` holds `texts.len()` rows of `dimension`
    /// floats (normalised here to unit length). An empty call writes nothing.
    pub fn add(&mut self, vectors: &[f32], texts: &[String]) -> Result<(), IndexError> {
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
        if vectors.iter().any(|x| !x.is_finite()) {
            return Err(IndexError::Invalid(
                "a vector has a NaN or infinite component".into(),
            ));
        }
        let path = self.path.clone();
        let start = align_up(self.position);
        self.write(&vec![0u8; (start - self.position) as usize], &path)?;
        let mut crc = crc32fast::Hasher::new();
        let mut unit = Vec::with_capacity(dimension);
        let mut bytes = Vec::with_capacity(dimension * 4);
        for row in vectors.chunks_exact(dimension) {
            unit.clear();
            normalise_into(row, &mut unit);
            bytes.clear();
            bytes.extend(unit.iter().flat_map(|x| x.to_le_bytes()));
            crc.update(&bytes);
            self.write(&bytes, &path)?;
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity((texts.len() + 1) * 8);
        offsets.extend(offset.to_le_bytes());
        for text in texts {
            offset += text.len() as u64;
            offsets.extend(offset.to_le_bytes());
        }
        crc.update(&offsets);
        self.write(&offsets, &path)?;
        for text in texts {
            crc.update(text.as_bytes());
            self.write(text.as_bytes(), &path)?;
        }
        self.footer.segments.push(SegmentMeta {
            offset: start,
            count: texts.len() as u64,
            text_bytes: offset,
            crc32: crc.finalize(),
        });
        self.footer.count += texts.len() as u64;
        Ok(())
    }

    fn write(&mut self, bytes: &[u8], path: &Path) -> Result<(), IndexError> {
        self.file.write_all(bytes).map_err(io(path))?;
        self.position += bytes.len() as u64;
        Ok(())
    }

    /// Write the footer, flush to disk and (for a new index) move the file into
    /// place. Returns the number of sentences in the index.
    pub fn finish(mut self) -> Result<u64, IndexError> {
        let path = self.path.clone();
        let json = serde_json::to_vec(&self.footer)
            .map_err(|e| IndexError::Invalid(format!("cannot encode the footer: {e}")))?;
        let crc = crc32fast::hash(&json);
        self.write(&json, &path)?;
        self.write(&(json.len() as u64).to_le_bytes(), &path)?;
        self.write(&crc.to_le_bytes(), &path)?;
        self.write(MAGIC, &path)?;
        let file = self
            .file
            .into_inner()
            .map_err(|e| IndexError::Io(format!("{}: {}", path.display(), e.error())))?;
        file.sync_all().map_err(io(&path))?;
        drop(file);
        if let Some(target) = &self.rename_to {
            std::fs::rename(&self.path, target).map_err(io(target))?;
        }
        Ok(self.footer.count)
    }
}
