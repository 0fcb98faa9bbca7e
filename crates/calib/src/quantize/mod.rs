//! Quantizers fitted on the corpus: the last stage a calibrator file may
//! carry (see [`crate::CalibratorMeta::quantizer`]), turning calibrated
//! vectors into int8/uint8 codes or packed sign bits.
//!
//! Codes are bytes, one row per vector ([`Codes`]):
//!
//! - `int8`, global ranges: `q = clamp(round(x / s), -127, 127)` with one
//!   scale `s = max |x| / 127` over the fit set, so `s^2 q . q'` is the dot
//!   product and the codes compare directly as integers; `uint8`: `q + 128`.
//! - `ranges=dim`: per dimension, `[min, max]` of the fit set cut into 255
//!   steps, `i = clamp(round((x - min) / step), 0, 255)` (as
//!   sentence-transformers' calibration embeddings, rounded); `uint8` is
//!   `i`, `int8` is `i - 128`. Score with [`Quantizer::dequantize`].
//! - `binary`/`ubinary`: bit `x_j > 0` (after the optional ITQ rotation),
//!   packed MSB-first per byte as `numpy.packbits` does (the last byte
//!   zero-padded); `ubinary` stores the byte, `binary` the int8 `byte - 128`
//!   (sentence-transformers' two forms). Either compares by Hamming
//!   distance on the raw bytes (the offset cancels in the XOR).
//! - `pq:m=M`: product quantization (see [`pq`]): one byte per sub-vector,
//!   the index of its nearest of 256 centroids (after the OPQ rotation);
//!   score with [`Quantizer::dequantize`] (the centroids concatenated and
//!   rotated back).

mod itq;
mod kmeans;
pub mod pq;
mod spec;

use ndarray::{Array2, Array3, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::error::{CalibError, Result};
use crate::stats;
use crate::stats::check_transform_input;
use crate::tensors::{TensorReader, TensorWriter};

pub use spec::{
    QuantKind, QuantRequest, QuantSpec, Ranges, ITQ_AFTER, ITQ_ITERS, OPQ_ITERS, PQ_OPQ_DEFAULT,
    QUANTIZERS, QUANT_SYNOPSIS,
};

/// Prefix of a quantizer's tensors in a calibrator file.
pub const QUANTIZER_PREFIX: &str = "quantizer.";

/// A fitted quantizer. Its serde form (in a file's header) holds the spec
/// and dimension; the scales and the ITQ rotation travel as tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quantizer {
    /// What was fitted.
    pub spec: QuantSpec,
    /// Dimension of the vectors it takes.
    pub dim: usize,
    /// Per-dimension step (`ranges=dim`) or the one scale (global).
    #[serde(skip)]
    scale: Vec<f64>,
    /// Per-dimension minimum (`ranges=dim`).
    #[serde(skip)]
    start: Vec<f64>,
    /// ITQ or OPQ rotation (dim x dim).
    #[serde(skip)]
    rotation: Option<Array2<f64>>,
    /// pq: centroids (m x 256 x dim / m).
    #[serde(skip)]
    centroids: Option<Array3<f32>>,
    /// ITQ's objective before and after each iteration, or OPQ's after each
    /// round (not saved).
    #[serde(skip)]
    objective: Vec<f64>,
}

/// Codes of `rows` vectors: `bytes` holds each row's code bytes (for
/// `int8` and `binary`, the two's-complement bit patterns of the int8
/// values).
#[derive(Debug, Clone, PartialEq)]
pub struct Codes {
    /// The code.
    pub kind: QuantKind,
    /// Dimension of the vectors they code (bits per row for binary codes).
    pub dim: usize,
    /// One row of [`QuantKind::bytes_per_row`] bytes per vector.
    pub bytes: Array2<u8>,
}

impl Codes {
    /// Codes from their bytes, checking the width: `dim` bytes per row, or
    /// `ceil(dim / 8)` for bit codes.
    pub fn new(kind: QuantKind, dim: usize, bytes: Array2<u8>) -> Result<Self> {
        let want = kind.bytes_per_row(dim);
        if bytes.ncols() != want {
            return Err(CalibError::Incompatible(format!(
                "{} codes of {dim} dimensions have {want} bytes per row, these have {}",
                kind.name(),
                bytes.ncols()
            )));
        }
        Ok(Codes { kind, dim, bytes })
    }

    /// Whether the bytes are read as int8 (`int8`, `binary`).
    pub fn signed(&self) -> bool {
        matches!(self.kind, QuantKind::Int8 | QuantKind::Binary)
    }

    /// The codes as int8 values (for `int8` and `binary`).
    pub fn as_i8(&self) -> Array2<i8> {
        self.bytes.mapv(|b| b as i8)
    }
}

/// Packs the bits `row[j] > 0` MSB-first into `out` (`ceil(len / 8)` bytes).
pub fn pack_signs(row: impl IntoIterator<Item = f64>, out: &mut [u8]) {
    out.fill(0);
    for (j, v) in row.into_iter().enumerate() {
        if v > 0.0 {
            out[j / 8] |= 0x80 >> (j % 8);
        }
    }
}

/// An error unless `m` sub-vectors cut `dim` evenly.
fn check_pq_width(spec: &QuantSpec, m: usize, dim: usize) -> Result<()> {
    if m == 0 || !dim.is_multiple_of(m) {
        return Err(CalibError::Quantizer {
            spec: spec.to_string(),
            reason: format!(
                "m = {m} does not divide the dimension {dim}: pq cuts vectors into m equal \
                 sub-vectors"
            ),
        });
    }
    Ok(())
}

impl Quantizer {
    /// Fits `spec` on `x` (rows of calibrated vectors): the ranges, and for
    /// `itq` the rotation. Errors on empty or non-finite data, or global
    /// ranges of an all-zero matrix.
    pub fn fit(spec: &QuantSpec, x: ArrayView2<f32>) -> Result<Self> {
        let kind = spec.kind.name();
        let min_rows = if spec.kind.is_pq() { pq::CENTROIDS } else { 1 };
        stats::check_fit_input(kind, x, min_rows)?;
        let dim = x.ncols();
        let mut q = Quantizer {
            spec: *spec,
            dim,
            scale: Vec::new(),
            start: Vec::new(),
            rotation: None,
            centroids: None,
            objective: Vec::new(),
        };
        if let QuantKind::Pq { m } = spec.kind {
            check_pq_width(spec, m, dim)?;
            let fit = pq::fit(x, m, spec.opq)?;
            q.centroids = Some(fit.centroids);
            q.rotation = fit.rotation;
            q.objective = fit.objective;
        } else if spec.kind.is_bits() {
            if let Some(iters) = spec.itq {
                let v = x.mapv(f64::from);
                let (r, history) = itq::fit(&v, iters)?;
                q.rotation = Some(r);
                q.objective = history;
            }
        } else if spec.ranges == Ranges::Global {
            let max = x.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
            if max <= 0.0 {
                return Err(CalibError::BadData {
                    kind,
                    reason: "every value is zero: no scale to fit".into(),
                });
            }
            q.scale = vec![max / 127.0];
        } else {
            for col in x.columns() {
                let lo = col.iter().fold(f64::INFINITY, |m, &v| m.min(v.into()));
                let hi = col.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v.into()));
                q.start.push(lo);
                q.scale.push((hi - lo) / 255.0);
            }
        }
        Ok(q)
    }

    /// Bytes per row of its codes.
    pub fn code_bytes(&self) -> usize {
        self.spec.kind.bytes_per_row(self.dim)
    }

    /// The pq centroids (`m x 256 x dim / m`), for a `pq` quantizer.
    pub fn centroids(&self) -> Option<&Array3<f32>> {
        self.centroids.as_ref()
    }

    /// The ITQ or OPQ rotation, if fitted with one.
    pub fn rotation(&self) -> Option<&Array2<f64>> {
        self.rotation.as_ref()
    }

    /// ITQ's objective `||B - V R||^2` before the first and after each
    /// iteration, or OPQ's `||X R - Y||^2` after the first k-means and each
    /// round (empty without ITQ or OPQ, and after loading).
    pub fn objective(&self) -> &[f64] {
        &self.objective
    }

    /// The one scale (global ranges) or the per-dimension steps.
    pub fn scales(&self) -> &[f64] {
        &self.scale
    }

    /// One line for logs.
    pub fn describe(&self) -> String {
        let what = match (self.spec.kind.is_bits(), self.spec.ranges, self.spec.itq) {
            _ if self.spec.kind.is_pq() => match self.spec.opq {
                Some(n) => format!("product quantizer after an OPQ rotation ({n} rounds)"),
                None => "product quantizer".into(),
            },
            (true, _, Some(n)) => format!("sign bits after an ITQ rotation ({n} iterations)"),
            (true, _, None) => "sign bits".into(),
            (false, Ranges::Global, _) => "one scale for every dimension".into(),
            (false, Ranges::Dim, _) => "per-dimension ranges".into(),
        };
        format!(
            "{} ({what}; {} dims -> {} bytes)",
            self.spec,
            self.dim,
            self.code_bytes()
        )
    }

    /// The codes of the rows of `x`. Errors on a column count other than
    /// [`Quantizer::dim`] or a non-finite value.
    pub fn quantize(&self, x: ArrayView2<f32>) -> Result<Codes> {
        check_transform_input(self.dim, x)?;
        let width = self.code_bytes();
        let mut bytes = Array2::<u8>::zeros((x.nrows(), width));
        let kind = self.spec.kind;
        match (kind, self.spec.ranges) {
            (QuantKind::Pq { .. }, _) => {
                let centroids = self.centroids.as_ref().expect("a fitted or loaded pq");
                let z = pq::rotate(x, self.rotation.as_ref());
                bytes = pq::encode(z.view(), centroids);
            }
            (QuantKind::Binary | QuantKind::Ubinary, _) => {
                let z = match &self.rotation {
                    Some(r) => x.mapv(f64::from).dot(r),
                    None => x.mapv(f64::from),
                };
                for (row, mut out) in z.rows().into_iter().zip(bytes.rows_mut()) {
                    let out = out.as_slice_mut().expect("a standard-layout row");
                    pack_signs(row.iter().copied(), out);
                    if kind == QuantKind::Binary {
                        out.iter_mut().for_each(|b| *b ^= 0x80);
                    }
                }
            }
            (_, Ranges::Global) => {
                let s = self.scale[0];
                for (v, b) in x.iter().zip(bytes.iter_mut()) {
                    let q = (f64::from(*v) / s).round().clamp(-127.0, 127.0) as i32;
                    *b = if kind == QuantKind::Int8 {
                        q as i8 as u8
                    } else {
                        (q + 128) as u8
                    };
                }
            }
            (_, Ranges::Dim) => {
                for (row, mut out) in x.rows().into_iter().zip(bytes.rows_mut()) {
                    for (j, (v, b)) in row.iter().zip(out.iter_mut()).enumerate() {
                        let step = self.scale[j];
                        let i = if step > 0.0 {
                            ((f64::from(*v) - self.start[j]) / step)
                                .round()
                                .clamp(0.0, 255.0) as i32
                        } else {
                            0
                        };
                        *b = if kind == QuantKind::Int8 {
                            (i - 128) as i8 as u8
                        } else {
                            i as u8
                        };
                    }
                }
            }
        }
        Codes::new(kind, self.dim, bytes)
    }

    /// Checks that `codes` are this quantizer's: same kind and dimension.
    pub fn check_codes(&self, codes: &Codes) -> Result<()> {
        if codes.kind != self.spec.kind || codes.dim != self.dim {
            return Err(CalibError::Incompatible(format!(
                "{} codes of {} dimensions given to a {} quantizer of {}",
                codes.kind.name(),
                codes.dim,
                self.spec.kind.name(),
                self.dim
            )));
        }
        Codes::new(codes.kind, codes.dim, codes.bytes.clone()).map(|_| ())
    }

    /// Vectors back from int8/uint8 codes (the centre of each code's step;
    /// for global ranges, `s q`). Bit codes give `+-1` per dimension (in
    /// the ITQ-rotated space). pq codes give their centroids concatenated,
    /// rotated back to the input's axes.
    pub fn dequantize(&self, codes: &Codes) -> Result<Array2<f32>> {
        self.check_codes(codes)?;
        if let Some(centroids) = &self.centroids {
            let y = pq::decode(codes.bytes.view(), centroids);
            return Ok(match &self.rotation {
                Some(r) => y.dot(&r.t().mapv(|v| v as f32)),
                None => y,
            });
        }
        let n = codes.bytes.nrows();
        let mut y = Array2::<f32>::zeros((n, self.dim));
        for (mut out, row) in y.rows_mut().into_iter().zip(codes.bytes.rows()) {
            for (j, v) in out.iter_mut().enumerate() {
                *v = match (self.spec.kind, self.spec.ranges) {
                    (QuantKind::Binary | QuantKind::Ubinary, _) => {
                        let byte = row[j / 8] ^ if codes.signed() { 0x80 } else { 0 };
                        if byte & (0x80 >> (j % 8)) != 0 {
                            1.0
                        } else {
                            -1.0
                        }
                    }
                    (QuantKind::Int8, Ranges::Global) => {
                        (self.scale[0] * f64::from(row[j] as i8)) as f32
                    }
                    (_, Ranges::Global) => (self.scale[0] * (f64::from(row[j]) - 128.0)) as f32,
                    (kind, Ranges::Dim) => {
                        let i = if kind == QuantKind::Int8 {
                            i32::from(row[j] as i8) + 128
                        } else {
                            i32::from(row[j])
                        };
                        (self.start[j] + self.scale[j] * f64::from(i)) as f32
                    }
                };
            }
        }
        Ok(y)
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter) {
        let p = QUANTIZER_PREFIX;
        if !self.scale.is_empty() {
            w.f64(
                &format!("{p}scale"),
                &[self.scale.len()],
                self.scale.iter().copied(),
            );
        }
        if !self.start.is_empty() {
            w.f64(
                &format!("{p}start"),
                &[self.dim],
                self.start.iter().copied(),
            );
        }
        if let Some(c) = &self.centroids {
            let (m, k, dsub) = c.dim();
            w.f32(&format!("{p}centroids"), &[m, k, dsub], c.iter().copied());
        }
        if let Some(r) = &self.rotation {
            w.f64(
                &format!("{p}rotation"),
                &[self.dim, self.dim],
                r.iter().copied(),
            );
        }
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader) -> Result<()> {
        let p = QUANTIZER_PREFIX;
        if self.dim == 0 {
            return Err(r.format_error("the quantizer has dimension 0".into()));
        }
        let bad = |r: &TensorReader, what: &str| r.format_error(format!("quantizer: {what}"));
        if let QuantKind::Pq { m } = self.spec.kind {
            check_pq_width(&self.spec, m, self.dim).map_err(|e| bad(r, &e.to_string()))?;
            let dsub = self.dim / m;
            let shape = [m, pq::CENTROIDS, dsub];
            let c = r.f32(&format!("{p}centroids"), &shape)?;
            let c = Array3::from_shape_vec(shape, c).map_err(|e| bad(r, &e.to_string()))?;
            self.centroids = Some(c);
            if let Some(rounds) = self.spec.opq {
                if rounds == 0 {
                    return Err(bad(r, "opq with 0 rounds"));
                }
                self.rotation = Some(r.matrix_f64(&format!("{p}rotation"), self.dim, self.dim)?);
            }
            return Ok(());
        }
        match (self.spec.kind.is_bits(), self.spec.ranges) {
            (true, _) => {
                if let Some(iters) = self.spec.itq {
                    if iters == 0 {
                        return Err(bad(r, "itq with 0 iterations"));
                    }
                    self.rotation =
                        Some(r.matrix_f64(&format!("{p}rotation"), self.dim, self.dim)?);
                }
            }
            (false, Ranges::Global) => {
                self.scale = r.f64(&format!("{p}scale"), &[1])?;
                if self.scale[0] <= 0.0 {
                    return Err(bad(r, "the scale must be positive"));
                }
            }
            (false, Ranges::Dim) => {
                self.scale = r.f64(&format!("{p}scale"), &[self.dim])?;
                self.start = r.f64(&format!("{p}start"), &[self.dim])?;
                if self.scale.iter().any(|&s| s < 0.0) {
                    return Err(bad(r, "a step is negative"));
                }
            }
        }
        Ok(())
    }
}
