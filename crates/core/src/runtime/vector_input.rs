//! Vectors made elsewhere, read chunk by chunk for `index build|add
//! --vectors`, `fit --embeddings`, `transform` and the Python `Index`: a
//! `.npy` / `.safetensors` matrix ([`MatrixReader`]), a matrix in memory, or
//! Parquet (feature `parquet`) as Spark writes it: a folder of part files
//! (read in name order; `_SUCCESS` and other `_`/`.` files skipped) or one
//! file, with a text column and an `array<float>` or `array<double>`
//! embedding column, required or optional, in any order among other columns,
//! under any root name (`spark_schema`, pyarrow's `schema`), snappy, zstd or
//! uncompressed.
use crate::error::{CoreError, Result};
use crate::runtime::matrix_file::MatrixReader;
use ndarray::{Array2, ArrayView2};
use std::path::Path;
#[cfg(feature = "parquet")]
use {
    parquet::file::reader::{FileReader, SerializedFileReader},
    parquet::record::reader::RowIter,
    parquet::record::Field,
    parquet::schema::types::Type,
    sha2::{Digest, Sha256},
    std::path::PathBuf,
};

/// The Spark job's text column (`python -m bertflow.spark --text-col`).
pub const PARQUET_TEXT_COLUMN: &str = "text";
/// The Spark job's embedding column (`array<float>`).
pub const PARQUET_VECTOR_COLUMN: &str = "embedding";

/// Some rows of vectors and, when the source holds them, their sentences.
pub type Rows = (Array2<f32>, Option<Vec<String>>);

/// Rows of vectors (and, for Parquet, their sentences) read in order.
pub trait RowSource {
    /// Rows in all.
    fn rows(&self) -> usize;
    /// Length of every row.
    fn cols(&self) -> usize;
    /// Up to `max_rows` next rows, and their sentences when the source holds
    /// them; `None` at the end.
    fn next_rows(&mut self, max_rows: usize) -> Result<Option<Rows>>;
    /// The rows `indices` (increasing), read without moving the position of
    /// `next_rows` (used before the first `next_rows`).
    fn sample(&mut self, indices: &[usize]) -> Result<Array2<f32>>;
    /// The input's identity for a calibrator file (see
    /// [`crate::matrix_file::matrix_fingerprint`]) once every row has been read
    /// in order, without a sample; else `None`.
    fn fingerprint(&self) -> Option<String> {
        None
    }
}

impl RowSource for MatrixReader {
    fn rows(&self) -> usize {
        MatrixReader::rows(self)
    }
    fn cols(&self) -> usize {
        MatrixReader::cols(self)
    }
    fn next_rows(&mut self, max_rows: usize) -> Result<Option<Rows>> {
        Ok(self.next_chunk(max_rows)?.map(|m| (m, None)))
    }
    fn sample(&mut self, indices: &[usize]) -> Result<Array2<f32>> {
        self.read_rows(indices)
    }
    fn fingerprint(&self) -> Option<String> {
        MatrixReader::fingerprint(self)
    }
}

/// A matrix in memory (the Python `Index`).
pub struct MemoryRows<'a> {
    matrix: ArrayView2<'a, f32>,
    next: usize,
}

impl<'a> MemoryRows<'a> {
    pub fn new(matrix: ArrayView2<'a, f32>) -> Self {
        MemoryRows { matrix, next: 0 }
    }
}

impl RowSource for MemoryRows<'_> {
    fn rows(&self) -> usize {
        self.matrix.nrows()
    }
    fn cols(&self) -> usize {
        self.matrix.ncols()
    }
    fn next_rows(&mut self, max_rows: usize) -> Result<Option<Rows>> {
        let n = self.matrix.nrows();
        if self.next >= n {
            return Ok(None);
        }
        let end = (self.next + max_rows.max(1)).min(n);
        let part = self
            .matrix
            .slice(ndarray::s![self.next..end, ..])
            .to_owned();
        self.next = end;
        Ok(Some((part, None)))
    }
    fn sample(&mut self, indices: &[usize]) -> Result<Array2<f32>> {
        Ok(self.matrix.select(ndarray::Axis(0), indices))
    }
}

/// Parquet files (one, or a folder's `*.parquet` part files in name order)
/// read row by row: a string column of sentences (optional: see
/// [`ParquetRows::open_vectors`]) and a list-of-float (or double) column of
/// vectors, every row of the same length.
#[cfg(feature = "parquet")]
pub struct ParquetRows {
    files: Vec<PathBuf>,
    text: Option<String>,
    vector: String,
    rows: usize,
    cols: usize,
    /// The file being read and its rows, and the row read next (overall).
    current: Option<(usize, RowIter<'static>)>,
    next_file: usize,
    next_row: usize,
    /// SHA-256 of the rows read in order (as [`crate::matrix_file::matrix_fingerprint`]);
    /// dropped by a sample.
    hasher: Option<Sha256>,
}

fn bad(path: &Path, why: impl std::fmt::Display) -> CoreError {
    CoreError::Input(format!("{}: {why}", path.display()))
}

/// The part files of a Spark output folder, or the file itself.
#[cfg(feature = "parquet")]
fn parquet_files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(CoreError::io("read folder", path))? {
        let p = entry.map_err(CoreError::io("read folder", path))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if p.is_file() && !name.starts_with(['.', '_']) && name.ends_with(".parquet") {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(bad(path, "a folder without .parquet files"));
    }
    Ok(files)
}

/// The columns `text` (when given) and `vector` of `path`'s schema,
/// checked (a string and a list), as a projection the record reader accepts:
/// under the file's own root name (Spark's `spark_schema`, pyarrow's
/// `schema`), since the reader compares the root names too.
#[cfg(feature = "parquet")]
fn projection(
    path: &Path,
    reader: &SerializedFileReader<std::fs::File>,
    text: Option<&str>,
    vector: &str,
) -> Result<Type> {
    let schema = reader.metadata().file_metadata().schema_descr();
    let root = schema.root_schema();
    let fields = root.get_fields();
    let find = |name: &str| {
        fields
            .iter()
            .find(|f| f.name() == name)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
                bad(
                    path,
                    format!("no column {name:?} (columns: {})", names.join(", ")),
                )
            })
    };
    let v = find(vector)?;
    let mut columns = Vec::with_capacity(2);
    if let Some(text) = text {
        let t = find(text)?;
        if !t.is_primitive() || t.get_physical_type() != parquet::basic::Type::BYTE_ARRAY {
            return Err(bad(path, format!("column {text:?} is not a string column")));
        }
        columns.push(t);
    }
    if v.is_primitive() {
        return Err(bad(
            path,
            format!("column {vector:?} is not a list of floats (array<float>)"),
        ));
    }
    columns.push(v);
    Type::group_type_builder(root.name())
        .with_fields(columns)
        .build()
        .map_err(|e| bad(path, e))
}

/// `f()`, with a panic of the parquet crate (it panics on some damaged
/// metadata) turned into an error naming `path`: outside bytes never panic.
#[cfg(feature = "parquet")]
fn guarded<T>(path: &Path, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| {
        bad(
            path,
            "not a readable Parquet file (damaged metadata or pages)",
        )
    })
}

#[cfg(feature = "parquet")]
fn open_parquet(path: &Path) -> Result<SerializedFileReader<std::fs::File>> {
    let (file, _) = crate::io::open_regular_file(path, "Parquet file")?;
    guarded(path, || SerializedFileReader::new(file))?
        .map_err(|e| bad(path, format!("not a readable Parquet file ({e})")))
}

#[cfg(feature = "parquet")]
impl ParquetRows {
    /// Opens `path` (a file or a folder of part files), reading sentences
    /// from the column `text` and vectors from `vector`; the row length is
    /// that of the first row.
    pub fn open(path: &Path, text: &str, vector: &str) -> Result<Self> {
        Self::open_columns(path, Some(text), vector)
    }

    /// Opens `path` for its vectors alone (`fit --embeddings`, `transform`):
    /// `next_rows` gives no sentences.
    pub fn open_vectors(path: &Path, vector: &str) -> Result<Self> {
        Self::open_columns(path, None, vector)
    }

    fn open_columns(path: &Path, text: Option<&str>, vector: &str) -> Result<Self> {
        let files = parquet_files(path)?;
        let mut rows = 0usize;
        for f in &files {
            let reader = open_parquet(f)?;
            projection(f, &reader, text, vector)?;
            let n = reader.metadata().file_metadata().num_rows();
            rows += usize::try_from(n).map_err(|_| bad(f, format!("{n} rows")))?;
        }
        if rows == 0 {
            return Err(bad(path, "no rows"));
        }
        let mut me = ParquetRows {
            files,
            text: text.map(str::to_owned),
            vector: vector.to_owned(),
            rows,
            cols: 0,
            current: None,
            next_file: 0,
            next_row: 0,
            hasher: None,
        };
        let (first, _) = me.next_row()?.ok_or_else(|| bad(path, "no rows"))?;
        me.cols = first.len();
        if me.cols == 0 {
            return Err(bad(
                path,
                format!("row 0 of column {vector:?} is an empty vector"),
            ));
        }
        me.rewind();
        let mut hasher = Sha256::new();
        hasher.update(format!("{}x{}:F32", me.rows, me.cols).as_bytes());
        me.hasher = Some(hasher);
        Ok(me)
    }

    fn rewind(&mut self) {
        self.current = None;
        self.next_file = 0;
        self.next_row = 0;
    }

    /// The next row's vector and sentence (empty without a text column).
    fn next_row(&mut self) -> Result<Option<(Vec<f32>, String)>> {
        loop {
            if self.current.is_none() {
                let Some(f) = self.files.get(self.next_file) else {
                    return Ok(None);
                };
                let reader = open_parquet(f)?;
                let proj = projection(f, &reader, self.text.as_deref(), &self.vector)?;
                let iter = guarded(f, || {
                    RowIter::from_file_into(Box::new(reader)).project(Some(proj))
                })?
                .map_err(|e| bad(f, e))?;
                self.current = Some((self.next_file, iter));
                self.next_file += 1;
            }
            let Some((file, iter)) = self.current.as_mut() else {
                continue;
            };
            let path = &self.files[*file];
            let next = guarded(path, || iter.next());
            let Some(row) = next.inspect_err(|_| self.next_file = self.files.len())? else {
                self.current = None;
                continue;
            };
            let row = row.map_err(|e| bad(path, format!("row {}: {e}", self.next_row)))?;
            let i = self.next_row;
            let (mut text, mut vector) = (self.text.is_none().then(String::new), None);
            for (name, field) in row.into_columns() {
                if self.text.as_deref() == Some(name.as_str()) {
                    text = Some(match field {
                        Field::Str(s) => s,
                        Field::Null => String::new(),
                        other => {
                            return Err(bad(
                                path,
                                format!("row {i}: column {name:?} holds {other}, not a string"),
                            ))
                        }
                    });
                } else if name == self.vector {
                    vector = Some(floats(path, i, &name, field)?);
                }
            }
            let (Some(text), Some(vector)) = (text, vector) else {
                return Err(bad(path, format!("row {i}: a column is missing")));
            };
            if self.cols != 0 && vector.len() != self.cols {
                return Err(bad(
                    path,
                    format!(
                        "row {i}: a vector of length {}, the first row's is {}",
                        vector.len(),
                        self.cols
                    ),
                ));
            }
            if let Some(j) = vector.iter().position(|v| !v.is_finite()) {
                return Err(bad(
                    path,
                    format!(
                        "row {i}: column {:?} holds {} at {j} (every value must be finite)",
                        self.vector, vector[j]
                    ),
                ));
            }
            self.next_row += 1;
            return Ok(Some((vector, text)));
        }
    }
}

/// The floats of a list field (a null is an error: the Spark job writes a
/// null embedding for a null text, which an index cannot hold).
#[cfg(feature = "parquet")]
fn floats(path: &Path, row: usize, name: &str, field: Field) -> Result<Vec<f32>> {
    let list = match field {
        Field::ListInternal(list) => list,
        Field::Null => {
            return Err(bad(
                path,
                format!(
                    "row {row}: column {name:?} is null (drop rows without an embedding first)"
                ),
            ))
        }
        other => {
            return Err(bad(
                path,
                format!("row {row}: column {name:?} holds {other}, not a list of floats"),
            ))
        }
    };
    list.elements()
        .iter()
        .map(|e| match e {
            Field::Float(x) => Ok(*x),
            Field::Double(x) => Ok(*x as f32),
            other => Err(bad(
                path,
                format!("row {row}: column {name:?} holds {other} in its list, not a float"),
            )),
        })
        .collect()
}

#[cfg(feature = "parquet")]
impl RowSource for ParquetRows {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
    fn next_rows(&mut self, max_rows: usize) -> Result<Option<Rows>> {
        let mut flat = Vec::new();
        let mut texts = Vec::new();
        while texts.len() < max_rows.max(1) {
            let Some((v, t)) = self.next_row()? else {
                break;
            };
            if let Some(h) = &mut self.hasher {
                for x in &v {
                    h.update(x.to_le_bytes());
                }
            }
            flat.extend_from_slice(&v);
            texts.push(t);
        }
        if texts.is_empty() {
            if self.next_row != self.rows {
                return Err(CoreError::Input(format!(
                    "{} rows read, the files' metadata announces {}",
                    self.next_row, self.rows
                )));
            }
            return Ok(None);
        }
        let m = Array2::from_shape_vec((texts.len(), self.cols), flat)
            .map_err(|e| CoreError::Input(e.to_string()))?;
        Ok(Some((m, self.text.is_some().then_some(texts))))
    }
    fn sample(&mut self, indices: &[usize]) -> Result<Array2<f32>> {
        // Sampling breaks the sequential fingerprint.
        self.hasher = None;
        self.rewind();
        let mut flat = Vec::with_capacity(indices.len() * self.cols);
        for &want in indices {
            while self.next_row < want {
                self.next_row()?;
            }
            let (v, _) = self
                .next_row()?
                .ok_or_else(|| CoreError::Input(format!("row {want} is missing")))?;
            flat.extend_from_slice(&v);
        }
        self.rewind();
        Array2::from_shape_vec((indices.len(), self.cols), flat)
            .map_err(|e| CoreError::Input(e.to_string()))
    }
    fn fingerprint(&self) -> Option<String> {
        if self.next_row < self.rows {
            return None;
        }
        let digest = self.hasher.clone()?.finalize();
        Some(digest.iter().take(8).map(|b| format!("{b:02x}")).collect())
    }
}

/// Whether `path` names Parquet: a `.parquet` file or a folder (Spark's output).
pub fn is_parquet(path: &Path) -> bool {
    path.is_dir() || path.extension().is_some_and(|e| e == "parquet")
}

/// The reader of a vectors file: Parquet (by [`is_parquet`]) with the given
/// columns, else `.npy` / `.safetensors`.
pub fn open_rows(path: &Path, text: &str, vector: &str) -> Result<Box<dyn RowSource>> {
    if is_parquet(path) {
        return open_parquet_rows(path, Some(text), vector);
    }
    Ok(Box::new(MatrixReader::open(path)?))
}

/// The reader of an embedding matrix without sentences (`fit --embeddings`,
/// `transform`): a `.npy` / `.safetensors` file, or Parquet's
/// [`PARQUET_VECTOR_COLUMN`].
pub fn open_vectors(path: &Path) -> Result<Box<dyn RowSource>> {
    if is_parquet(path) {
        return open_parquet_rows(path, None, PARQUET_VECTOR_COLUMN);
    }
    Ok(Box::new(MatrixReader::open(path)?))
}

#[cfg(feature = "parquet")]
fn open_parquet_rows(path: &Path, text: Option<&str>, vector: &str) -> Result<Box<dyn RowSource>> {
    Ok(Box::new(ParquetRows::open_columns(path, text, vector)?))
}

#[cfg(not(feature = "parquet"))]
fn open_parquet_rows(
    path: &Path,
    _text: Option<&str>,
    _vector: &str,
) -> Result<Box<dyn RowSource>> {
    Err(bad(
        path,
        "Parquet input needs bertflow-core's `parquet` feature",
    ))
}
