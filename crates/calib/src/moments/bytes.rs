//! The byte format of [`MomentStats`], all little-endian:
//!
//! | offset          | size               | content                                      |
//! |-----------------|--------------------|----------------------------------------------|
//! | 0               | 8                  | magic `BFMOMENT`                             |
//! | 8               | 4                  | format version (u32, currently 1)            |
//! | 12              | 4                  | reserved, 0                                  |
//! | 16              | 8                  | dimension `d` (u64)                          |
//! | 24              | 8                  | count `n` (u64)                              |
//! | 32              | 8 d                | mean (f64)                                   |
//! | 32 + 8 d        | 8 d (d + 1) / 2    | upper triangle of `M2`, row by row (f64)     |
//! | end - 4         | 4                  | CRC-32 (IEEE) of every byte before it (u32)  |

use ndarray::{Array1, Array2};

use super::{from_parts, MomentStats};
use crate::error::{CalibError, Result};

/// The first 8 bytes.
pub(crate) const MAGIC: &[u8; 8] = b"BFMOMENT";
/// The version written; the only one read.
pub(crate) const VERSION: u32 = 1;
const HEADER: usize = 32;
const CRC: usize = 4;

fn bad(reason: impl Into<String>) -> CalibError {
    CalibError::Moments(reason.into())
}

/// Bytes of the whole buffer for dimension `d`, `None` on overflow.
fn encoded_len(d: u64) -> Option<usize> {
    let d = usize::try_from(d).ok()?;
    let tri = d.checked_mul(d.checked_add(1)?)? / 2;
    let floats = d.checked_add(tri)?;
    floats.checked_mul(8)?.checked_add(HEADER + CRC)
}

pub(crate) fn encode(s: &MomentStats) -> Vec<u8> {
    let d = s.dim;
    let mut out = Vec::with_capacity(encoded_len(d as u64).unwrap_or(0));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(d as u64).to_le_bytes());
    out.extend_from_slice(&s.count.to_le_bytes());
    for v in &s.mean {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for i in 0..d {
        for j in i..d {
            out.extend_from_slice(&s.m2[[i, j]].to_le_bytes());
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn decode(buf: &[u8]) -> Result<MomentStats> {
    if buf.len() < MAGIC.len() && MAGIC.starts_with(buf) {
        return Err(bad(format!("truncated: {} bytes", buf.len())));
    }
    if buf.len() < MAGIC.len() || &buf[..MAGIC.len()] != MAGIC {
        return Err(bad(
            "not moment statistics: the buffer does not start with the magic bytes BFMOMENT",
        ));
    }
    if buf.len() < HEADER + CRC {
        return Err(bad(format!(
            "truncated: {} bytes, the header alone needs {}",
            buf.len(),
            HEADER + CRC
        )));
    }
    let version = u32_at(buf, 8);
    if version != VERSION {
        return Err(bad(format!(
            "format version {version} is not supported (this build reads version {VERSION})"
        )));
    }
    let d64 = u64_at(buf, 16);
    let count = u64_at(buf, 24);
    let expected = encoded_len(d64)
        .ok_or_else(|| bad(format!("dimension {d64} is too large (corrupted header?)")))?;
    if buf.len() != expected {
        return Err(bad(format!(
            "{} bytes where dimension {d64} needs {expected} (truncated, padded or corrupted)",
            buf.len()
        )));
    }
    let (body, tail) = buf.split_at(buf.len() - CRC);
    let stored = u32_at(tail, 0);
    let actual = crc32fast::hash(body);
    if stored != actual {
        return Err(bad(format!(
            "checksum mismatch (stored {stored:08x}, computed {actual:08x}): the bytes are corrupted"
        )));
    }
    if u32_at(buf, 12) != 0 {
        return Err(bad("the reserved header field is not 0"));
    }
    let d = d64 as usize; // fits: encoded_len succeeded
    let mut floats = body[HEADER..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")));
    let mean: Array1<f64> = floats.by_ref().take(d).collect();
    let mut m2 = Array2::<f64>::zeros((d, d));
    for i in 0..d {
        for j in i..d {
            let v = floats.next().ok_or_else(|| bad("truncated matrix"))?;
            m2[[i, j]] = v;
            m2[[j, i]] = v;
        }
    }
    if mean.iter().chain(m2.iter()).any(|v| !v.is_finite()) {
        return Err(bad("the mean or the co-moment matrix holds NaN or inf"));
    }
    if m2.diag().iter().any(|&v| v < 0.0) {
        return Err(bad("the co-moment matrix has a negative diagonal entry"));
    }
    if count == 0 && mean.iter().chain(m2.iter()).any(|&v| v != 0.0) {
        return Err(bad(
            "empty statistics (count 0) with a non-zero mean or matrix",
        ));
    }
    Ok(from_parts(d, count, mean, m2))
}
