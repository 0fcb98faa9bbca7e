//! Quantized segments (format version 3): each vector also stored as a
//! compact code that search scans from memory, the full f32 vectors read only
//! to rescore the best candidates exactly.
//!
//! The codes are those of bertflow-calib's quantizers (the index records the
//! fitted parameters, so that it codes queries the same way):
//!
//! - `int8` (global ranges): `q = clamp(round(x / s), -127, 127)` of the
//!   unit-normalised vector, one scale `s` for every dimension; codes are
//!   scored by their integer dot product.
//! - `binary` / `ubinary`: the sign bits `x R > 0` (`R` the optional ITQ
//!   rotation), packed MSB-first; `binary` stores each byte XOR 0x80
//!   (sentence-transformers' int8 form). Codes are scored by minus their
//!   Hamming distance (the XOR cancels).

use serde::{Deserialize, Serialize};

use bertflow_kernels::codes::{dot_i8_with, hamming_with, CodeIsa};

use crate::IndexError;

/// The code of a quantized index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodeKind {
    /// One signed byte per dimension.
    Int8,
    /// Sign bits, each byte XOR 0x80.
    Binary,
    /// Sign bits.
    Ubinary,
}

impl CodeKind {
    /// Its name (`int8`, `binary`, `ubinary`).
    pub fn name(self) -> &'static str {
        match self {
            CodeKind::Int8 => "int8",
            CodeKind::Binary => "binary",
            CodeKind::Ubinary => "ubinary",
        }
    }

    /// Bytes per code of a `dimension`-long vector.
    pub fn width(self, dimension: usize) -> usize {
        match self {
            CodeKind::Int8 => dimension,
            CodeKind::Binary | CodeKind::Ubinary => dimension.div_ceil(8),
        }
    }
}

/// A fitted quantizer, as the index's footer records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quantization {
    /// The quantizer spec it was fitted from (bertflow-calib's syntax, e.g.
    /// `binary:itq=true`), for display.
    pub spec: String,
    /// The code.
    pub kind: CodeKind,
    /// Length of the vectors coded.
    pub dimension: usize,
    /// `int8`: the scale `s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// `binary`/`ubinary` with ITQ: the rotation, `dimension x dimension`,
    /// row-major (`z_j = sum_i (x_i - c_i) R[i][j]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<Vec<f64>>,
    /// `binary`/`ubinary`: the centre `c` subtracted before the rotation and
    /// the signs (the mean of the unit vectors it was fitted on, so that each
    /// bit splits the corpus about evenly); `None`: no centring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub centre: Option<Vec<f64>>,
    /// Where it was fitted (e.g. `the first 8192 vectors of the build`).
    pub fitted_on: String,
}

impl Quantization {
    /// A quantizer of `kind` for vectors of length `dimension`, checked.
    pub fn new(
        spec: impl Into<String>,
        kind: CodeKind,
        dimension: usize,
        scale: Option<f64>,
        rotation: Option<Vec<f64>>,
        fitted_on: impl Into<String>,
    ) -> Result<Self, IndexError> {
        let q = Quantization {
            spec: spec.into(),
            kind,
            dimension,
            scale,
            rotation,
            centre: None,
            fitted_on: fitted_on.into(),
        };
        q.check().map_err(IndexError::Invalid)?;
        Ok(q)
    }

    /// The same, subtracting `centre` before the rotation and the signs (bit
    /// codes only).
    pub fn centred(mut self, centre: Vec<f64>) -> Result<Self, IndexError> {
        self.centre = Some(centre);
        self.check().map_err(IndexError::Invalid)?;
        Ok(self)
    }

    /// Why these parameters cannot code vectors, if they cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.dimension == 0 {
            return Err("the quantizer has dimension 0".into());
        }
        match self.kind {
            CodeKind::Int8 => match self.scale {
                Some(s) if s.is_finite() && s > 0.0 => {}
                _ => return Err("an int8 quantizer needs a positive, finite scale".into()),
            },
            CodeKind::Binary | CodeKind::Ubinary => {
                if self.scale.is_some() {
                    return Err("a binary quantizer has no scale".into());
                }
            }
        }
        if let Some(c) = &self.centre {
            if self.kind == CodeKind::Int8 {
                return Err("an int8 quantizer has no centre".into());
            }
            if c.len() != self.dimension || c.iter().any(|x| !x.is_finite()) {
                return Err(format!(
                    "the centre must hold {} finite values",
                    self.dimension
                ));
            }
        }
        if let Some(r) = &self.rotation {
            if self.kind == CodeKind::Int8 {
                return Err("an int8 quantizer has no rotation".into());
            }
            let want = self.dimension.checked_mul(self.dimension);
            if Some(r.len()) != want {
                return Err(format!(
                    "the rotation has {} values, not {} x {}",
                    r.len(),
                    self.dimension,
                    self.dimension
                ));
            }
            if r.iter().any(|x| !x.is_finite()) {
                return Err("the rotation has a non-finite value".into());
            }
        }
        Ok(())
    }

    /// Bytes per code.
    pub fn width(&self) -> usize {
        self.kind.width(self.dimension)
    }

    /// Write the code of `unit` (a unit-normalised vector of
    /// [`Quantization::dimension`] floats) into `out` ([`width`](Self::width) bytes).
    pub fn encode(&self, unit: &[f32], out: &mut [u8]) {
        debug_assert_eq!(unit.len(), self.dimension);
        debug_assert_eq!(out.len(), self.width());
        match self.kind {
            CodeKind::Int8 => {
                let s = self.scale.unwrap_or(1.0);
                for (b, &x) in out.iter_mut().zip(unit) {
                    *b = (f64::from(x) / s).round().clamp(-127.0, 127.0) as i32 as i8 as u8;
                }
            }
            CodeKind::Binary | CodeKind::Ubinary => {
                out.fill(0);
                let d = self.dimension;
                let mut set = |j: usize, z: f64| {
                    if z > 0.0 {
                        out[j / 8] |= 0x80 >> (j % 8);
                    }
                };
                let centre = |i: usize| self.centre.as_ref().map_or(0.0, |c| c[i]);
                match &self.rotation {
                    Some(r) => {
                        // z = (x - c) R, row by row of R (contiguous).
                        let mut z = vec![0f64; d];
                        for (i, (&x, row)) in unit.iter().zip(r.chunks_exact(d)).enumerate() {
                            let x = f64::from(x) - centre(i);
                            z.iter_mut().zip(row).for_each(|(z, &r)| *z += x * r);
                        }
                        z.into_iter().enumerate().for_each(|(j, z)| set(j, z));
                    }
                    None => unit
                        .iter()
                        .enumerate()
                        .for_each(|(j, &x)| set(j, f64::from(x) - centre(j))),
                }
                if self.kind == CodeKind::Binary {
                    out.iter_mut().for_each(|b| *b ^= 0x80);
                }
            }
        }
    }

    /// The code of `unit` as a new vector.
    pub fn code(&self, unit: &[f32]) -> Vec<u8> {
        let mut out = vec![0u8; self.width()];
        self.encode(unit, &mut out);
        out
    }

    /// A scorer of codes against the query code `query`: higher is closer.
    pub(crate) fn scorer(&self) -> fn(CodeIsa, &[u8], &[u8]) -> i32 {
        match self.kind {
            CodeKind::Int8 => score_int8,
            CodeKind::Binary | CodeKind::Ubinary => score_bits,
        }
    }
}

fn score_int8(isa: CodeIsa, q: &[u8], c: &[u8]) -> i32 {
    dot_i8_with(isa, bytemuck::cast_slice(q), bytemuck::cast_slice(c))
}

fn score_bits(isa: CodeIsa, q: &[u8], c: &[u8]) -> i32 {
    -(hamming_with(isa, q, c) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_codes_round_and_clamp() {
        let q = Quantization::new("int8", CodeKind::Int8, 4, Some(0.01), None, "test").unwrap();
        let code = q.code(&[0.5, -0.004, 0.006, -2.0]);
        assert_eq!(code, vec![50u8, 0, 1, (-127i8) as u8]);
    }

    #[test]
    fn bit_codes_are_msb_first_and_binary_flips_the_top_bit() {
        let v = [1.0, -1.0, 0.0, 2.0, -0.5, 0.1, 0.1, 0.1, 3.0];
        let u = Quantization::new("ubinary", CodeKind::Ubinary, 9, None, None, "t").unwrap();
        assert_eq!(u.code(&v), vec![0b1001_0111, 0b1000_0000]);
        let b = Quantization::new("binary", CodeKind::Binary, 9, None, None, "t").unwrap();
        assert_eq!(b.code(&v), vec![0b0001_0111, 0b0000_0000]);
        // A rotation that swaps the two coordinates.
        let r = vec![0.0, 1.0, 1.0, 0.0];
        let q = Quantization::new("ubinary:itq", CodeKind::Ubinary, 2, None, Some(r), "t").unwrap();
        assert_eq!(q.code(&[1.0, -1.0]), vec![0b0100_0000]);
        // A centre moves the threshold of each bit.
        let c = u.clone().centred(vec![2.0; 9]).unwrap();
        assert_eq!(c.code(&v), vec![0b0000_0000, 0b1000_0000]);
        assert!(u.clone().centred(vec![0.0; 8]).is_err());
        assert!(u.centred(vec![f64::NAN; 9]).is_err());
        let i = Quantization::new("int8", CodeKind::Int8, 9, Some(1.0), None, "t").unwrap();
        assert!(i.centred(vec![0.0; 9]).is_err());
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = |k, d, s, r: Option<Vec<f64>>| Quantization::new("x", k, d, s, r, "t").is_err();
        assert!(bad(CodeKind::Int8, 4, None, None));
        assert!(bad(CodeKind::Int8, 4, Some(-1.0), None));
        assert!(bad(CodeKind::Int8, 4, Some(f64::NAN), None));
        assert!(bad(CodeKind::Int8, 0, Some(1.0), None));
        assert!(bad(CodeKind::Binary, 2, None, Some(vec![1.0; 3])));
        assert!(bad(CodeKind::Binary, 2, None, Some(vec![f64::INFINITY; 4])));
        assert!(bad(CodeKind::Binary, 2, Some(1.0), None));
        assert!(bad(CodeKind::Int8, 2, Some(1.0), Some(vec![1.0; 4])));
    }
}

/// Hamming distances of the query code `q` to each `q.len()`-byte code of
/// `codes`, into `out` (one per code): the whole block in one call, with the
/// CPU's `popcnt` where it has it (8 bytes per instruction, no call per code).
/// Equal to `bertflow_kernels::codes::hamming` code by code (tested).
pub(crate) fn hamming_block(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    out.clear();
    if q.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: popcnt is present (checked just above).
        unsafe { hamming_block_popcnt(q, codes, out) };
        return;
    }
    hamming_block_generic(q, codes, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn hamming_block_popcnt(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    hamming_block_generic(q, codes, out);
}

#[inline(always)]
fn hamming_block_generic(q: &[u8], codes: &[u8], out: &mut Vec<u32>) {
    let words = q.len() / 8;
    let qw: Vec<u64> = q
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
        .collect();
    let tail = &q[words * 8..];
    out.extend(codes.chunks_exact(q.len()).map(|c| {
        let mut n = 0u32;
        for (k, &w) in qw.iter().enumerate() {
            let cw = u64::from_le_bytes(c[k * 8..k * 8 + 8].try_into().unwrap_or_default());
            n += (w ^ cw).count_ones();
        }
        for (a, b) in tail.iter().zip(&c[words * 8..]) {
            n += (a ^ b).count_ones();
        }
        n
    }));
}

#[cfg(test)]
mod block_tests {
    #[test]
    fn block_distances_equal_the_kernels_one_by_one() {
        let mut h = 7u64;
        let mut byte = move || {
            h = h
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (h >> 33) as u8
        };
        for width in [1usize, 5, 8, 13, 48, 96] {
            let q: Vec<u8> = (0..width).map(|_| byte()).collect();
            let codes: Vec<u8> = (0..width * 37).map(|_| byte()).collect();
            let mut out = Vec::new();
            super::hamming_block(&q, &codes, &mut out);
            let want: Vec<u32> = codes
                .chunks_exact(width)
                .map(|c| bertflow_kernels::codes::hamming_scalar(&q, c))
                .collect();
            assert_eq!(out, want, "width {width}");
        }
    }
}
