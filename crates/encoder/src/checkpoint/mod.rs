//! Checkpoint files read into host tensors, without a tensor library:
//! `model.safetensors` (the `safetensors` crate parses and bounds-checks the
//! header) and `pytorch_model.bin` / `*.pt` state dicts as `torch.save` writes
//! them (a zip archive of a pickle and raw storages: [`torch`]). Every offset,
//! shape and dtype of a file is checked against its size: a bad file is an
//! error naming it, never a panic.
//!
//! A [`HostTensor`] keeps the file's bytes and its dtype; values are converted
//! to f32 when asked for ([`HostTensor::to_f32`]), so a checkpoint is held in
//! memory once, at its own precision, while the model is built from it.
use crate::error::{io_err, EncoderError, Result};
use safetensors::tensor::{Dtype, SafeTensors};
use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

mod pickle;
pub mod torch;
mod zip;

pub use torch::read_torch_state_dict;

/// Element types a checkpoint may store; every one converts to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    fn from_safetensors(d: Dtype) -> Option<Self> {
        Some(match d {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            Dtype::F64 => DType::F64,
            Dtype::I64 => DType::I64,
            Dtype::I32 => DType::I32,
            Dtype::I16 => DType::I16,
            Dtype::I8 => DType::I8,
            Dtype::U8 => DType::U8,
            Dtype::BOOL => DType::Bool,
            _ => return None,
        })
    }

    fn to_safetensors(self) -> Dtype {
        match self {
            DType::F32 => Dtype::F32,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            DType::F64 => Dtype::F64,
            DType::I64 => Dtype::I64,
            DType::I32 => Dtype::I32,
            DType::I16 => Dtype::I16,
            DType::I8 => Dtype::I8,
            DType::U8 => Dtype::U8,
            DType::Bool => Dtype::BOOL,
        }
    }
}

/// A dense row-major tensor on the host: a dtype, a shape and little-endian
/// bytes (shared with the file buffer it was read from; cloning is cheap).
#[derive(Clone)]
pub struct HostTensor {
    dtype: DType,
    shape: Vec<usize>,
    buf: Arc<Vec<u8>>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostTensor({:?}, {:?})", self.dtype, self.shape)
    }
}

/// The element count of `shape`, or None on overflow.
fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

impl HostTensor {
    /// The tensor of `shape` and `dtype` whose bytes start at `start` in
    /// `buf`; an error (a message) when they do not fit in it.
    pub(crate) fn view(
        buf: Arc<Vec<u8>>,
        start: usize,
        dtype: DType,
        shape: Vec<usize>,
    ) -> std::result::Result<Self, String> {
        let len = numel(&shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| format!("shape {shape:?} overflows"))?;
        match start.checked_add(len) {
            Some(end) if end <= buf.len() => Ok(Self {
                dtype,
                shape,
                buf,
                start,
                len,
            }),
            _ => Err(format!(
                "a {dtype:?} tensor of shape {shape:?} at byte {start} runs past the end of its \
                 data ({} bytes)",
                buf.len()
            )),
        }
    }

    /// An f32 tensor of `shape` holding `values` (row-major).
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Self> {
        if numel(&shape) != Some(values.len()) {
            return Err(EncoderError::Weights(format!(
                "{} values do not fill shape {shape:?}",
                values.len()
            )));
        }
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        Self::view(Arc::new(bytes), 0, DType::F32, shape).map_err(EncoderError::Weights)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.len / self.dtype.size()
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The values as f32, row-major (f64 and integers rounded to the nearest f32).
    pub fn to_f32(&self) -> Vec<f32> {
        let b = self.bytes();
        fn each<const N: usize>(b: &[u8], f: impl Fn([u8; N]) -> f32) -> Vec<f32> {
            b.chunks_exact(N)
                .map(|c| f(c.try_into().expect("chunks of N bytes")))
                .collect()
        }
        match self.dtype {
            DType::F32 => each(b, f32::from_le_bytes),
            DType::F64 => each(b, |c| f64::from_le_bytes(c) as f32),
            DType::F16 => each(b, |c| f16_to_f32(u16::from_le_bytes(c))),
            DType::BF16 => each(b, |c| f32::from_bits((u16::from_le_bytes(c) as u32) << 16)),
            DType::I64 => each(b, |c| i64::from_le_bytes(c) as f32),
            DType::I32 => each(b, |c| i32::from_le_bytes(c) as f32),
            DType::I16 => each(b, |c| i16::from_le_bytes(c) as f32),
            DType::I8 => each(b, |c: [u8; 1]| c[0] as i8 as f32),
            DType::U8 | DType::Bool => each(b, |c: [u8; 1]| c[0] as f32),
        }
    }

    /// `n` slices of the first dimension from `first` on.
    pub fn narrow_rows(&self, first: usize, n: usize) -> Result<Self> {
        let rows = self.shape.first().copied().unwrap_or(0);
        if first.checked_add(n).is_none_or(|end| end > rows) {
            return Err(EncoderError::Weights(format!(
                "rows {first}..{} of a tensor of shape {:?}",
                first.saturating_add(n),
                self.shape
            )));
        }
        let row = self.len.checked_div(rows).unwrap_or(0);
        let mut shape = self.shape.clone();
        shape[0] = n;
        Self::view(
            self.buf.clone(),
            self.start + first * row,
            self.dtype,
            shape,
        )
        .map_err(EncoderError::Weights)
    }

    /// `parts` stacked along the first dimension (same dtype, same other dimensions).
    pub fn concat_rows(parts: &[HostTensor]) -> Result<Self> {
        let first = parts
            .first()
            .ok_or_else(|| EncoderError::Weights("nothing to concatenate".into()))?;
        let mut rows = 0;
        let mut bytes = Vec::new();
        for p in parts {
            if p.dtype != first.dtype || p.shape.is_empty() || p.shape[1..] != first.shape[1..] {
                return Err(EncoderError::Weights(format!(
                    "cannot stack {:?} {:?} on {:?} {:?}",
                    p.dtype, p.shape, first.dtype, first.shape
                )));
            }
            rows += p.shape[0];
            bytes.extend_from_slice(p.bytes());
        }
        let mut shape = first.shape.clone();
        shape[0] = rows;
        Self::view(Arc::new(bytes), 0, first.dtype, shape).map_err(EncoderError::Weights)
    }
}

/// IEEE half to single precision, exactly (subnormals, infinities and NaN included).
fn f16_to_f32(h: u16) -> f32 {
    let negative = h & 0x8000 != 0;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let magnitude = match exp {
        // zero and subnormals: man * 2^-24, exact in f32
        0 => man as f32 * (1.0 / 16_777_216.0),
        31 => f32::from_bits(0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(((exp + 112) << 23) | (man << 13)),
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// A checkpoint's tensors by name, in the file's order.
pub type NamedTensors = Vec<(String, HostTensor)>;

fn bad(path: &Path, msg: impl Into<String>) -> EncoderError {
    EncoderError::BadFile {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

/// The tensors of a `.safetensors` file.
pub fn read_safetensors(path: &Path) -> Result<NamedTensors> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    parse_safetensors(Arc::new(bytes)).map_err(|m| bad(path, m))
}

/// The tensors of a safetensors file's bytes.
pub(crate) fn parse_safetensors(buf: Arc<Vec<u8>>) -> std::result::Result<NamedTensors, String> {
    let (n, meta) = SafeTensors::read_metadata(&buf).map_err(|e| format!("safetensors: {e}"))?;
    let data = 8 + n;
    let mut out = Vec::new();
    for name in meta.offset_keys() {
        let info = meta.info(&name).ok_or("safetensors: header index")?;
        let dtype = DType::from_safetensors(info.dtype)
            .ok_or_else(|| format!("tensor {name} has dtype {:?}, not supported", info.dtype))?;
        let t = HostTensor::view(
            buf.clone(),
            data + info.data_offsets.0,
            dtype,
            info.shape.clone(),
        )?;
        out.push((name, t));
    }
    Ok(out)
}

/// The tensors of a `torch.save`'d state dict (`pytorch_model.bin`, `*.pt`).
pub fn read_torch(path: &Path) -> Result<NamedTensors> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    torch::parse(Arc::new(bytes)).map_err(|m| bad(path, m))
}

impl safetensors::View for &HostTensor {
    fn dtype(&self) -> Dtype {
        self.dtype.to_safetensors()
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.bytes())
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// `tensors` as the bytes of a safetensors file (tests write checkpoints with it).
pub fn to_safetensors_bytes<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a HostTensor)>,
) -> Result<Vec<u8>> {
    safetensors::serialize(tensors, None).map_err(|e| EncoderError::Weights(e.to_string()))
}

#[cfg(test)]
mod tests;
