//! Embedding matrices on disk, read and written in chunks of rows so that a
//! file larger than memory needs only one chunk at a time: NumPy `.npy`
//! (float32 or float64, C order, format 1.0-3.0) and `.safetensors` (one 2-D
//! F32/F64 tensor, `embeddings` if there are several). Reads go through plain
//! `read` calls, not a memory map, so resident memory stays bounded by the
//! chunk (a map's file-backed pages would count too).
use crate::bail;
use crate::error::{CoreError, Result};
use ndarray::{Array2, ArrayView2};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Element type of a matrix file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
}

/// A matrix file opened for reading chunk by chunk.
pub struct MatrixReader {
    path: PathBuf,
    file: File,
    rows: usize,
    cols: usize,
    dtype: Dtype,
    data_offset: u64,
    next_row: usize,
    hasher: Option<Sha256>,
}

impl MatrixReader {
    /// Opens a `.npy` or `.safetensors` file (by extension; other extensions are
    /// tried as `.npy`) and reads its header.
    pub fn open(path: &Path) -> Result<Self> {
        // A regular file only (a FIFO or a device is refused, without blocking).
        let (mut file, len) = crate::io::open_regular_file(path, "vector file")?;
        let is_st = path.extension().is_some_and(|e| e == "safetensors");
        let (rows, cols, dtype, data_offset) = if is_st {
            safetensors_header(&mut file, path)?
        } else {
            npy_header(&mut file, path)?
        };
        // Checked: a header may announce any shape (the product of two
        // usizes wraps, and then a short file would pass for a whole one).
        let need = rows
            .checked_mul(cols)
            .and_then(|n| n.checked_mul(dtype.size()))
            .and_then(|n| u64::try_from(n).ok())
            .and_then(|n| n.checked_add(data_offset));
        let Some(need) = need else {
            bail!(
                "{}: the header announces {rows} x {cols} values, more than any file can hold",
                path.display()
            );
        };
        if len < need {
            bail!(
                "{}: truncated: the header announces {rows} x {cols} values ({need} bytes with the header), the file has {len} bytes",
                path.display()
            );
        }
        if rows == 0 || cols == 0 {
            bail!("{}: the matrix is empty ({rows} x {cols})", path.display());
        }
        file.seek(SeekFrom::Start(data_offset))
            .map_err(CoreError::io("read", path))?;
        let mut hasher = Sha256::new();
        hasher.update(format!("{rows}x{cols}:{dtype:?}").as_bytes());
        Ok(Self {
            path: path.to_path_buf(),
            file,
            rows,
            cols,
            dtype,
            data_offset,
            next_row: 0,
            hasher: Some(hasher),
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next at most `max_rows` rows as float32 (float64 files are converted),
    /// or `None` at the end. Non-finite values are an error naming the row.
    pub fn next_chunk(&mut self, max_rows: usize) -> Result<Option<Array2<f32>>> {
        let n = max_rows.max(1).min(self.rows - self.next_row);
        if n == 0 {
            return Ok(None);
        }
        let mut buf = vec![0u8; n * self.cols * self.dtype.size()];
        self.file
            .read_exact(&mut buf)
            .map_err(CoreError::io("read", &self.path))?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf);
        }
        let values: Vec<f32> = match self.dtype {
            Dtype::F32 => buf
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F64 => buf
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
                .collect(),
        };
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            bail!(
                "{}: row {} column {} is {} (every value must be finite)",
                self.path.display(),
                self.next_row + i / self.cols,
                i % self.cols,
                values[i]
            );
        }
        let chunk = Array2::from_shape_vec((n, self.cols), values)
            .map_err(|e| CoreError::Input(e.to_string()))?;
        self.next_row += n;
        Ok(Some(chunk))
    }

    /// Rows `indices` (sorted ascending, in range), read with seeks: a sample.
    pub fn read_rows(&mut self, indices: &[usize]) -> Result<Array2<f32>> {
        let row_bytes = self.cols * self.dtype.size();
        let mut out = Array2::<f32>::zeros((indices.len(), self.cols));
        let mut buf = vec![0u8; row_bytes];
        for (k, &i) in indices.iter().enumerate() {
            if i >= self.rows {
                bail!("row {i} is out of range ({} rows)", self.rows);
            }
            self.file
                .seek(SeekFrom::Start(self.data_offset + (i * row_bytes) as u64))
                .map_err(CoreError::io("read", &self.path))?;
            self.file
                .read_exact(&mut buf)
                .map_err(CoreError::io("read", &self.path))?;
            for (j, v) in out.row_mut(k).iter_mut().enumerate() {
                let b = &buf[j * self.dtype.size()..(j + 1) * self.dtype.size()];
                *v = match self.dtype {
                    Dtype::F32 => f32::from_le_bytes(b.try_into().expect("4 bytes")),
                    Dtype::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32,
                };
                if !v.is_finite() {
                    bail!(
                        "{}: row {i} column {j} is {v} (every value must be finite)",
                        self.path.display()
                    );
                }
            }
        }
        // Sampling breaks the sequential fingerprint.
        self.hasher = None;
        self.file
            .seek(SeekFrom::Start(
                self.data_offset + (self.next_row * row_bytes) as u64,
            ))
            .map_err(CoreError::io("read", &self.path))?;
        Ok(out)
    }

    /// SHA-256 (first 16 hex digits) of the shape, dtype and every byte read, once
    /// the whole file has been read sequentially.
    pub fn fingerprint(&self) -> Option<String> {
        if self.next_row < self.rows {
            return None;
        }
        Some(hex16(&self.hasher.clone()?.finalize()))
    }
}

/// The fingerprint [`MatrixReader::fingerprint`] gives for this float32 matrix
/// saved as `.npy` or `.safetensors`, computed from memory (row-major order), so
/// a calibrator fitted on an array in Python records the same input identity as
/// `bertflow fit --embeddings` on the array's file.
pub fn matrix_fingerprint(
    rows: usize,
    cols: usize,
    row_major: impl IntoIterator<Item = f32>,
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("{rows}x{cols}:{:?}", Dtype::F32).as_bytes());
    let mut buf = Vec::with_capacity(4 * cols.clamp(1, 4096));
    for v in row_major {
        buf.extend_from_slice(&v.to_le_bytes());
        if buf.len() >= 16384 {
            hasher.update(&buf);
            buf.clear();
        }
    }
    hasher.update(&buf);
    hex16(&hasher.finalize())
}

/// The fingerprint of input seen only as streaming statistics (Python's
/// `MomentStats.fit`, Spark): the same prefix of SHA-256 over their bytes.
pub fn bytes_fingerprint(bytes: &[u8]) -> String {
    hex16(&Sha256::digest(bytes))
}

fn hex16(digest: &[u8]) -> String {
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> CoreError {
    CoreError::Input(format!("{}: {msg}", path.display()))
}

/// (rows, cols, dtype, data offset) of a `.npy` file.
fn npy_header(file: &mut File, path: &Path) -> Result<(usize, usize, Dtype, u64)> {
    let mut magic = [0u8; 8];
    file.read_exact(&mut magic)
        .map_err(|_| bad(path, "not a .npy file (too short)"))?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err(bad(path, "not a .npy file (no \\x93NUMPY magic)"));
    }
    let (hlen, pre) = match magic[6] {
        1 => {
            let mut b = [0u8; 2];
            file.read_exact(&mut b)
                .map_err(CoreError::io("read", path))?;
            (u16::from_le_bytes(b) as usize, 10)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            file.read_exact(&mut b)
                .map_err(CoreError::io("read", path))?;
            (u32::from_le_bytes(b) as usize, 12)
        }
        v => return Err(bad(path, format!("unsupported .npy format version {v}"))),
    };
    if hlen > 1 << 20 {
        return Err(bad(path, "implausibly long .npy header"));
    }
    let mut h = vec![0u8; hlen];
    file.read_exact(&mut h)
        .map_err(|_| bad(path, "truncated .npy header"))?;
    let h = String::from_utf8_lossy(&h);
    let field = |key: &str| -> Option<String> {
        let i = h.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = h[i..].trim_start().strip_prefix(':')?.trim_start();
        let end = if rest.starts_with('(') {
            rest.find(')')? + 1
        } else {
            rest.find([',', '}'])?
        };
        Some(rest[..end].trim().to_string())
    };
    let descr = field("descr").ok_or_else(|| bad(path, "no 'descr' in the .npy header"))?;
    let dtype = match descr.trim_matches('\'') {
        "<f4" | "=f4" => Dtype::F32,
        "<f8" | "=f8" => Dtype::F64,
        d => {
            return Err(bad(
                path,
                format!("unsupported dtype {d}: use little-endian float32 or float64"),
            ))
        }
    };
    if field("fortran_order").as_deref() != Some("False") {
        return Err(bad(
            path,
            "Fortran-ordered arrays are not supported: save np.ascontiguousarray(x)",
        ));
    }
    let shape = field("shape").ok_or_else(|| bad(path, "no 'shape' in the .npy header"))?;
    let dims: Vec<usize> = shape
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(path, format!("bad shape {shape}")))?;
    if dims.len() != 2 {
        return Err(bad(
            path,
            format!(
                "expected a 2-D array (sentences x dimensions), got shape {shape} ({}-D)",
                dims.len()
            ),
        ));
    }
    Ok((dims[0], dims[1], dtype, (pre + hlen) as u64))
}

/// (rows, cols, dtype, data offset) of the embedding tensor of a `.safetensors` file.
fn safetensors_header(file: &mut File, path: &Path) -> Result<(usize, usize, Dtype, u64)> {
    let mut b = [0u8; 8];
    file.read_exact(&mut b)
        .map_err(|_| bad(path, "not a .safetensors file (too short)"))?;
    let n = u64::from_le_bytes(b);
    if n > 100 << 20 {
        return Err(bad(
            path,
            "not a .safetensors file (implausible header size)",
        ));
    }
    let mut h = vec![0u8; n as usize];
    file.read_exact(&mut h)
        .map_err(|_| bad(path, "truncated .safetensors header"))?;
    let v: serde_json::Value = serde_json::from_slice(&h)
        .map_err(|e| bad(path, format!("bad .safetensors header: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad(path, "bad .safetensors header"))?;
    let tensors: Vec<(&String, &serde_json::Value)> =
        obj.iter().filter(|(k, _)| *k != "__metadata__").collect();
    let (name, t) = match tensors.iter().find(|(k, _)| *k == "embeddings") {
        Some(t) => *t,
        None if tensors.len() == 1 => tensors[0],
        None => {
            return Err(bad(
                path,
                format!("{} tensors and none named 'embeddings'", tensors.len()),
            ))
        }
    };
    let dtype = match t["dtype"].as_str() {
        Some("F32") => Dtype::F32,
        Some("F64") => Dtype::F64,
        d => {
            return Err(bad(
                path,
                format!("tensor {name}: unsupported dtype {d:?}: use F32 or F64"),
            ))
        }
    };
    let shape: Vec<usize> = t["shape"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as usize)
                .collect()
        })
        .unwrap_or_default();
    if shape.len() != 2 {
        return Err(bad(
            path,
            format!("tensor {name}: expected 2-D (sentences x dimensions), got shape {shape:?}"),
        ));
    }
    let start = t["data_offsets"][0]
        .as_u64()
        .ok_or_else(|| bad(path, format!("tensor {name}: no data_offsets")))?;
    let offset = (8 + n)
        .checked_add(start)
        .ok_or_else(|| bad(path, format!("tensor {name}: data_offsets out of range")))?;
    Ok((shape[0], shape[1], dtype, offset))
}

/// Writes a float32 `.npy` file row chunk by row chunk; the shape is known up front.
pub struct NpyWriter {
    path: PathBuf,
    out: bertflow_durable::AtomicFile,
    rows: usize,
    cols: usize,
    written: usize,
}

/// The `.npy` 1.0 header for a float32 C-order `rows x cols` matrix.
pub fn npy_header_bytes(rows: usize, cols: usize) -> Vec<u8> {
    npy_header_descr("<f4", rows, cols)
}

/// The `.npy` 1.0 header for a C-order `rows x cols` matrix of NumPy type
/// `descr` (`<f4`, `|i1`, `|u1`).
pub fn npy_header_descr(descr: &str, rows: usize, cols: usize) -> Vec<u8> {
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // magic(6) + version(2) + len(2) + header + '\n' must be a multiple of 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out
}

impl NpyWriter {
    pub fn create(path: &Path, rows: usize, cols: usize) -> Result<Self> {
        let mut out = bertflow_durable::AtomicFile::create(path)?;
        out.write_all(&npy_header_bytes(rows, cols))
            .map_err(bertflow_durable::write_error(path))?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
            rows,
            cols,
            written: 0,
        })
    }

    pub fn write_chunk(&mut self, m: ArrayView2<f32>) -> Result<()> {
        if m.ncols() != self.cols || self.written + m.nrows() > self.rows {
            bail!(
                "internal: chunk {} x {} does not fit {} ({} of {} x {} rows written)",
                m.nrows(),
                m.ncols(),
                self.path.display(),
                self.written,
                self.rows,
                self.cols
            );
        }
        let mut bytes = Vec::with_capacity(m.len() * 4);
        for v in m.iter() {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.out
            .write_all(&bytes)
            .map_err(bertflow_durable::write_error(&self.path))?;
        self.written += m.nrows();
        Ok(())
    }

    /// Moves the file into place (atomically, fsynced); errors if fewer rows
    /// were written than announced. Dropped without `finish`, nothing is written.
    pub fn finish(self) -> Result<()> {
        if self.written != self.rows {
            bail!(
                "internal: {} of {} rows written to {}",
                self.written,
                self.rows,
                self.path.display()
            );
        }
        Ok(self.out.commit()?)
    }
}
