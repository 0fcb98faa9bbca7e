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

    /// `z`, what the signs of a bit code are taken of: `(unit - c) R` (or
    /// `unit - c` without a rotation; `c` = 0 without a centre), by the same
    /// arithmetic as [`Quantization::encode`] (tested: its signs are the
    /// code). `None` for int8 codes.
    pub(crate) fn project(&self, unit: &[f32]) -> Option<Vec<f64>> {
        if self.kind == CodeKind::Int8 {
            return None;
        }
        let d = self.dimension;
        let centre = |i: usize| self.centre.as_ref().map_or(0.0, |c| c[i]);
        Some(match &self.rotation {
            Some(r) => {
                let mut z = vec![0f64; d];
                for (i, (&x, row)) in unit.iter().zip(r.chunks_exact(d)).enumerate() {
                    let x = f64::from(x) - centre(i);
                    z.iter_mut().zip(row).for_each(|(z, &r)| *z += x * r);
                }
                z
            }
            None => unit
                .iter()
                .enumerate()
                .map(|(j, &x)| f64::from(x) - centre(j))
                .collect(),
        })
    }

    /// The asymmetric scorer of bit codes against the float query `unit`
    /// (see [`SignTable`]); `None` for int8 codes.
    pub(crate) fn sign_table(&self, unit: &[f32]) -> Option<SignTable> {
        let z = self.project(unit)?;
        let width = self.width();
        let flip = if self.kind == CodeKind::Binary {
            0x80
        } else {
            0
        };
        let mut table = vec![0f32; width * 256];
        for (p, part) in table.chunks_exact_mut(256).enumerate() {
            let zs = z.get(p * 8..).unwrap_or(&[]);
            for (stored, sum) in part.iter_mut().enumerate() {
                let bits = stored ^ flip;
                let s: f64 = zs
                    .iter()
                    .take(8)
                    .enumerate()
                    .map(|(t, &z)| if bits & (0x80 >> t) != 0 { z } else { -z })
                    .sum();
                *sum = s as f32;
            }
        }
        Some(SignTable { width, table })
    }

    /// A scorer of codes against the query code `query`: higher is closer.
    pub(crate) fn scorer(&self) -> fn(CodeIsa, &[u8], &[u8]) -> i32 {
        match self.kind {
            CodeKind::Int8 => score_int8,
            CodeKind::Binary | CodeKind::Ubinary => score_bits,
        }
    }
}

/// Scores bit codes against a float query: `sum_j z_j (2 b_j - 1)`, `z` the
/// query as [`Quantization::project`] gives it and `b` the code's bits (what
/// `z`'s signs would be for the code's own vector); higher is closer. Unlike
/// the Hamming distance it weighs each bit by how far the query is from that
/// bit's threshold. Computed by lookup: 256 partial sums per code byte, made
/// once per query.
pub(crate) struct SignTable {
    width: usize,
    table: Vec<f32>,
}

impl SignTable {
    /// The score of `code` (`width` bytes as stored).
    pub(crate) fn score(&self, code: &[u8]) -> f32 {
        debug_assert_eq!(code.len(), self.width);
        table_score(&self.table, code)
    }

    /// The table itself (`width x 256` partial sums), for a scorer that
    /// keeps it elsewhere (the graph's query, [`crate::ann`]).
    pub(crate) fn entries(&self) -> &[f32] {
        &self.table
    }

    /// The highest score a code can have (`sum_j |z_j|`: the query's own
    /// code): the best entry of each byte's part, summed.
    pub(crate) fn best(&self) -> f32 {
        self.table
            .chunks_exact(256)
            .map(|part| part.iter().copied().fold(f32::MIN, f32::max))
            .sum()
    }
}

/// The score of `code` by the entries of a [`SignTable`] (`256` per code
/// byte); bytes past the table count nothing.
pub(crate) fn table_score(table: &[f32], code: &[u8]) -> f32 {
    // Four running sums: the additions of one code do not wait on each other.
    let mut sums = [0f32; 4];
    for (p, (part, &b)) in table.chunks_exact(256).zip(code).enumerate() {
        sums[p % 4] += part[usize::from(b)];
    }
    (sums[0] + sums[1]) + (sums[2] + sums[3])
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

    /// Seeded floats in [-1, 1).
    fn floats(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = bertflow_numeric::rng::SplitMix64::new(seed);
        (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect()
    }

    /// Bit quantizers of dimension `d`: plain, centred, rotated and centred,
    /// in both bit orders.
    fn bit_quantizers(d: usize) -> Vec<Quantization> {
        let mut out = Vec::new();
        for kind in [CodeKind::Binary, CodeKind::Ubinary] {
            let plain = Quantization::new("b", kind, d, None, None, "t").unwrap();
            let centred = plain.clone().centred(floats(d, 3)).unwrap();
            let r = floats(d * d, 4 + d as u64);
            let rotated = Quantization::new("b:itq", kind, d, None, Some(r), "t")
                .unwrap()
                .centred(floats(d, 5).iter().map(|c| c * 0.1).collect())
                .unwrap();
            out.extend([plain, centred, rotated]);
        }
        out
    }

    #[test]
    fn the_projection_has_the_codes_signs() {
        for d in [1usize, 7, 8, 9, 24, 61] {
            for q in bit_quantizers(d) {
                for seed in 0..20 {
                    let x: Vec<f32> = floats(d, 100 + seed).iter().map(|&v| v as f32).collect();
                    let z = q.project(&x).unwrap();
                    let mut bits = vec![0u8; q.width()];
                    for (j, &z) in z.iter().enumerate() {
                        if z > 0.0 {
                            bits[j / 8] |= 0x80 >> (j % 8);
                        }
                    }
                    if q.kind == CodeKind::Binary {
                        bits.iter_mut().for_each(|b| *b ^= 0x80);
                    }
                    assert_eq!(bits, q.code(&x), "{} d={d}", q.spec);
                }
            }
        }
        let i = Quantization::new("int8", CodeKind::Int8, 4, Some(0.1), None, "t").unwrap();
        assert!(i.project(&[0.0; 4]).is_none() && i.sign_table(&[0.0; 4]).is_none());
    }

    #[test]
    fn the_sign_table_scores_the_direct_sum() {
        for d in [1usize, 7, 8, 9, 24, 61, 384] {
            for q in bit_quantizers(d) {
                let x: Vec<f32> = floats(d, 7 + d as u64).iter().map(|&v| v as f32).collect();
                let z = q.project(&x).unwrap();
                let table = q.sign_table(&x).unwrap();
                for seed in 0..50 {
                    // Random codes as stored (padding bits set at random too:
                    // they weigh nothing).
                    let code: Vec<u8> = floats(q.width(), 900 + seed)
                        .iter()
                        .map(|&v| ((v + 1.0) * 128.0) as u8)
                        .collect();
                    let flip = if q.kind == CodeKind::Binary { 0x80 } else { 0 };
                    let direct: f64 = z
                        .iter()
                        .enumerate()
                        .map(|(j, &z)| {
                            let bit = (code[j / 8] ^ flip) & (0x80 >> (j % 8)) != 0;
                            if bit {
                                z
                            } else {
                                -z
                            }
                        })
                        .sum();
                    let got = f64::from(table.score(&code));
                    let scale: f64 = z.iter().map(|z| z.abs()).sum::<f64>().max(1.0);
                    assert!(
                        (got - direct).abs() <= 1e-5 * scale,
                        "{} d={d}: {got} against {direct}",
                        q.spec
                    );
                }
                // The query's own code scores sum |z_j|, the most any code can.
                let own = f64::from(table.score(&q.code(&x)));
                let most: f64 = z.iter().map(|z| z.abs()).sum();
                assert!(
                    (own - most).abs() <= 1e-5 * most.max(1.0),
                    "{} d={d}",
                    q.spec
                );
                let best = f64::from(table.best());
                assert!(
                    (best - most).abs() <= 1e-5 * most.max(1.0),
                    "{} d={d}: best {best} against {most}",
                    q.spec
                );
            }
        }
    }
}
