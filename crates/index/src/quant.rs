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
    /// row-major (`z_j = sum_i x_i R[i][j]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<Vec<f64>>,
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
            fitted_on: fitted_on.into(),
        };
        q.check().map_err(IndexError::Invalid)?;
        Ok(q)
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
                match &self.rotation {
                    Some(r) => {
                        // z = x R, row by row of R (contiguous).
                        let mut z = vec![0f64; d];
                        for (&x, row) in unit.iter().zip(r.chunks_exact(d)) {
                            let x = f64::from(x);
                            z.iter_mut().zip(row).for_each(|(z, &r)| *z += x * r);
                        }
                        z.into_iter().enumerate().for_each(|(j, z)| set(j, z));
                    }
                    None => unit
                        .iter()
                        .enumerate()
                        .for_each(|(j, &x)| set(j, f64::from(x))),
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
