//! Compact embeddings: a calibrator file may end in a quantizer stage
//! (`bertflow fit --quantize`), or a quantizer is fitted on the vectors
//! themselves (`bertflow encode --quantize`); what comes out is an
//! [`Output`]: float vectors, int8 or uint8 codes, or packed sign bits.
//! Codes are scored by [`similarity`] (Hamming similarity of bits, cosine
//! of int8 codes as integers, cosine of dequantized per-dimension codes),
//! with the SIMD kernels of `bertflow_kernels::codes`.

use crate::bail;
use crate::error::{Context, Result};
use crate::runtime::calibration::LoadedCalibrator;
use crate::runtime::pipeline::Pipeline;
pub use bertflow_calib::quantize::{
    Codes, QuantKind, QuantRequest, QuantSpec, Quantizer, Ranges, ITQ_AFTER, ITQ_ITERS, OPQ_ITERS,
    PQ_OPQ_DEFAULT, QUANTIZERS, QUANT_SYNOPSIS,
};
use bertflow_calib::{Calibrator, Fitted};
pub use bertflow_kernels::codes::{dot_i8, hamming};
use ndarray::{Array2, ArrayView2, Axis};
use std::path::Path;

/// What an encode writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Float vectors.
    F32(Array2<f32>),
    /// int8 codes, one per dimension.
    I8(Array2<i8>),
    /// uint8 codes, one per dimension.
    U8(Array2<u8>),
    /// Sign bits packed MSB-first (`numpy.packbits`), `dim` bits per row;
    /// `signed`: written as int8 `byte - 128` (`binary`), else as uint8
    /// (`ubinary`). `packed` holds the plain packed bytes either way.
    Bits {
        packed: Array2<u8>,
        dim: usize,
        signed: bool,
    },
}

impl Output {
    /// The output of a quantizer's codes.
    pub fn from_codes(c: Codes) -> Output {
        match c.kind {
            QuantKind::Int8 => Output::I8(c.as_i8()),
            QuantKind::Uint8 => Output::U8(c.bytes),
            QuantKind::Binary => Output::Bits {
                packed: c.bytes.mapv(|b| b ^ 0x80),
                dim: c.dim,
                signed: true,
            },
            QuantKind::Ubinary => Output::Bits {
                packed: c.bytes,
                dim: c.dim,
                signed: false,
            },
            // Centroid indices, one byte per sub-vector.
            QuantKind::Pq { .. } => Output::U8(c.bytes),
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        match self {
            Output::F32(m) => m.nrows(),
            Output::I8(m) => m.nrows(),
            Output::U8(m) => m.nrows(),
            Output::Bits { packed, .. } => packed.nrows(),
        }
    }

    /// Dimensions coded per row (bits for `Bits`).
    pub fn dim(&self) -> usize {
        match self {
            Output::F32(m) => m.ncols(),
            Output::I8(m) => m.ncols(),
            Output::U8(m) => m.ncols(),
            Output::Bits { dim, .. } => *dim,
        }
    }

    /// Bytes per row as stored.
    pub fn bytes_per_row(&self) -> usize {
        match self {
            Output::F32(m) => 4 * m.ncols(),
            Output::I8(m) => m.ncols(),
            Output::U8(m) => m.ncols(),
            Output::Bits { packed, .. } => packed.ncols(),
        }
    }

    /// What the rows are, for messages: `float32`, `int8`, `uint8`,
    /// `binary`, `ubinary`.
    pub fn kind(&self) -> &'static str {
        match self {
            Output::F32(_) => "float32",
            Output::I8(_) => "int8",
            Output::U8(_) => "uint8",
            Output::Bits { signed: true, .. } => "binary",
            Output::Bits { signed: false, .. } => "ubinary",
        }
    }

    /// A NumPy `.npy` (format 1.0), C order: float32, int8 (`int8`,
    /// `binary`) or uint8 (`uint8`, `ubinary`).
    pub fn npy_bytes(&self) -> Vec<u8> {
        let (descr, rows, cols, body): (&str, usize, usize, Vec<u8>) = match self {
            Output::F32(m) => return crate::runtime::io::npy_bytes(m),
            Output::I8(m) => (
                "|i1",
                m.nrows(),
                m.ncols(),
                m.iter().map(|&v| v as u8).collect(),
            ),
            Output::U8(m) => ("|u1", m.nrows(), m.ncols(), m.iter().copied().collect()),
            Output::Bits { packed, signed, .. } => {
                let flip = if *signed { 0x80 } else { 0 };
                let descr = if *signed { "|i1" } else { "|u1" };
                let body = packed.iter().map(|&b| b ^ flip).collect();
                (descr, packed.nrows(), packed.ncols(), body)
            }
        };
        let mut out = crate::runtime::matrix_file::npy_header_descr(descr, rows, cols);
        out.extend_from_slice(&body);
        out
    }
}

/// Fits `spec` on the rows `x` (raw embeddings) after `fitted`: the stage a
/// calibrator file may end in.
pub fn fit_stage(fitted: &Fitted, x: ArrayView2<f32>, spec: &QuantSpec) -> Result<Quantizer> {
    let y = transform_chunks(fitted, x)?;
    Quantizer::fit(spec, y.view()).with_context(|| format!("fitting the quantizer {spec}"))
}

fn transform_chunks(fitted: &Fitted, x: ArrayView2<f32>) -> Result<Array2<f32>> {
    let mut parts = Vec::new();
    for chunk in x.axis_chunks_iter(Axis(0), crate::runtime::fitting::CHUNK_ROWS) {
        parts.push(fitted.transform(chunk)?);
    }
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    if views.is_empty() {
        return Ok(Array2::zeros((0, fitted.output_dim())));
    }
    ndarray::concatenate(Axis(0), &views).map_err(|e| crate::CoreError::Input(e.to_string()))
}

/// The quantizer stage a loaded calibrator file ends in, if any.
pub fn stage_of(c: &LoadedCalibrator) -> Option<&Quantizer> {
    c.meta.quantizer.as_ref()
}

/// What `encode` writes for the calibrated `vectors` of `pipeline`: the
/// vectors (scaled to unit length with `normalize`), or the codes of the
/// calibrator file's quantizer stage, or of a quantizer `quantize` fitted on
/// `vectors` themselves. Errors: `quantize` with a file that has a stage
/// already; `normalize` before a file's int8/uint8 stage (its ranges were
/// fitted on vectors that were not normalized; sign bits are unchanged by
/// it).
pub fn encode_output(
    pipeline: &Pipeline,
    mut vectors: Array2<f32>,
    quantize: Option<&QuantSpec>,
    normalize: bool,
) -> Result<Output> {
    let file_stage = pipeline
        .calibrator()
        .and_then(|c| stage_of(c).map(|q| (c, q)));
    if let (Some((c, q)), Some(spec)) = (file_stage, quantize) {
        bail!(
            "the calibrator {} already ends in the quantizer {}: drop --quantize {spec} (or use a \
             calibrator file without a quantizer)",
            c.path.display(),
            q.spec
        );
    }
    if let (Some((c, q)), true) = (file_stage, normalize) {
        if !q.spec.kind.is_bits() {
            bail!(
                "the calibrator {} ends in the quantizer {}, whose ranges were fitted on vectors \
                 that were not normalized: drop --normalize",
                c.path.display(),
                q.spec
            );
        }
    }
    if normalize {
        Pipeline::normalize(&mut vectors);
    }
    match (file_stage, quantize) {
        (Some((_, q)), _) => Ok(Output::from_codes(q.quantize(vectors.view())?)),
        (None, Some(spec)) => {
            let q = Quantizer::fit(spec, vectors.view())
                .with_context(|| format!("fitting the quantizer {spec} on the input"))?;
            Ok(Output::from_codes(q.quantize(vectors.view())?))
        }
        (None, None) => Ok(Output::F32(vectors)),
    }
}

/// An error unless `path` is a `.npy`, the only format for codes of the
/// quantizer `kind`: front ends check it before encoding.
pub fn check_codes_output(path: &Path, kind: &str) -> Result<()> {
    if path.extension().is_none_or(|e| e != "npy") {
        bail!(
            "{}: {kind} codes are written as .npy (int8 or uint8)",
            path.display()
        );
    }
    Ok(())
}

/// Writes codes as a `.npy` (the only format for codes).
pub fn write_codes(path: &Path, out: &Output) -> Result<()> {
    check_codes_output(path, out.kind())?;
    Ok(bertflow_durable::write(path, out.npy_bytes())?)
}

/// Similarity of the codes `a[i]` and `b[i]` for every row `i`, as the
/// quantizer's codes are meant to be compared: for sign bits `1 - 2 h / d`
/// (the cosine of the +-1 vectors; `h` the Hamming distance), for int8/uint8
/// codes with one global scale the cosine of the codes as integers (uint8
/// minus 128), for per-dimension ranges and pq codes the cosine of the
/// dequantized vectors (reconstructions). A zero vector scores 0. Errors on codes that are not this
/// quantizer's (kind, width) or row counts that differ.
pub fn similarity(q: &Quantizer, a: &Codes, b: &Codes) -> Result<Vec<f64>> {
    q.check_codes(a)?;
    q.check_codes(b)?;
    if a.bytes.nrows() != b.bytes.nrows() {
        bail!(
            "{} codes against {}: the row counts differ",
            a.bytes.nrows(),
            b.bytes.nrows()
        );
    }
    let rows = a.bytes.outer_iter().zip(b.bytes.outer_iter());
    if q.spec.kind.is_bits() {
        let d = q.dim as f64;
        return Ok(rows
            .map(|(x, y)| {
                let h = hamming(x.as_slice().expect("rows"), y.as_slice().expect("rows"));
                1.0 - 2.0 * f64::from(h) / d
            })
            .collect());
    }
    if q.spec.ranges == Ranges::Global && !q.spec.kind.is_pq() {
        let signed = |c: &Codes| -> Array2<i8> {
            if c.signed() {
                c.as_i8()
            } else {
                c.bytes.mapv(|v| (i16::from(v) - 128) as i8)
            }
        };
        let (sa, sb) = (signed(a), signed(b));
        return Ok(sa
            .outer_iter()
            .zip(sb.outer_iter())
            .map(|(x, y)| {
                let (x, y) = (x.as_slice().expect("rows"), y.as_slice().expect("rows"));
                let (xy, xx, yy) = (dot_i8(x, y), dot_i8(x, x), dot_i8(y, y));
                cosine(f64::from(xy), f64::from(xx), f64::from(yy))
            })
            .collect());
    }
    let (da, db) = (q.dequantize(a)?, q.dequantize(b)?);
    Ok(da
        .outer_iter()
        .zip(db.outer_iter())
        .map(|(x, y)| {
            let dot = |u: &ndarray::ArrayView1<f32>, v: &ndarray::ArrayView1<f32>| {
                u.iter()
                    .zip(v)
                    .map(|(p, q)| f64::from(*p) * f64::from(*q))
                    .sum::<f64>()
            };
            cosine(dot(&x, &y), dot(&x, &x), dot(&y, &y))
        })
        .collect())
}

fn cosine(xy: f64, xx: f64, yy: f64) -> f64 {
    if xx == 0.0 || yy == 0.0 {
        0.0
    } else {
        xy / (xx * yy).sqrt()
    }
}

/// Vectors whose cosines are the code similarities of [`similarity`]: the
/// codes of `x` under `q` as +-1 (bits), as integers (global int8/uint8,
/// uint8 minus 128), or dequantized (per-dimension ranges, pq). `eval` scores a
/// calibrator file that ends in a quantizer through them.
pub fn scoring_vectors(q: &Quantizer, x: ArrayView2<f32>) -> Result<Array2<f32>> {
    let c = q.quantize(x)?;
    Ok(match (q.spec.kind, q.spec.ranges) {
        (QuantKind::Binary | QuantKind::Ubinary | QuantKind::Pq { .. }, _) => q.dequantize(&c)?,
        (QuantKind::Int8, Ranges::Global) => c.as_i8().mapv(f32::from),
        (QuantKind::Uint8, Ranges::Global) => c.bytes.mapv(|v| f32::from(v) - 128.0),
        (_, Ranges::Dim) => q.dequantize(&c)?,
    })
}

/// A loaded calibrator applied to `x` for scoring: its output, or, when
/// the file ends in a quantizer, the [`scoring_vectors`] of its codes.
pub fn apply_for_scoring(c: &LoadedCalibrator, x: ArrayView2<f32>) -> Result<Array2<f32>> {
    let y = c.apply(x)?;
    match stage_of(c) {
        Some(q) => scoring_vectors(q, y.view()),
        None => Ok(y),
    }
}

/// [`crate::runtime::fitting::fit_embeddings`] followed by the quantizer `spec`
/// fitted on the calibrated rows (every row of the file, or a flow's
/// sample), recorded as the file's last stage. Keeps those rows in memory.
pub fn fit_embeddings_quantized(
    cfg: &crate::runtime::fitting::ExternalFit,
    spec: &QuantSpec,
    progress: &dyn crate::runtime::progress::Progress,
) -> Result<crate::runtime::fitting::FitOutcome> {
    let (mut out, rows) = crate::runtime::fitting::fit_embeddings_keep(cfg, progress, true)?;
    let rows = rows.expect("rows kept");
    out.meta.quantizer = Some(fit_stage(&out.fitted, rows.view(), spec)?);
    Ok(out)
}

/// [`crate::runtime::fitting::fit_sentences`] followed by the quantizer `spec`
/// fitted on the calibrated embeddings (every sentence's, or a flow's
/// sample), recorded as the file's last stage. Keeps those embeddings in
/// memory.
pub fn fit_sentences_quantized(
    embedder: &crate::Embedder,
    sentences: &[String],
    pooling: &bertflow_encoder::Pooling,
    calib: &bertflow_calib::CalibSpec,
    sample: Option<usize>,
    weighting: &crate::runtime::weighting::Weighting,
    spec: &QuantSpec,
) -> Result<crate::runtime::fitting::FitOutcome> {
    let (mut out, rows) = crate::runtime::fitting::fit_sentences_keep(
        embedder, sentences, pooling, calib, sample, weighting, true,
    )?;
    let rows = rows.expect("rows kept");
    out.meta.quantizer = Some(fit_stage(&out.fitted, rows.view(), spec)?);
    Ok(out)
}

/// [`crate::runtime::fitting::transform_file`], writing codes when the calibrator
/// file ends in a quantizer (the codes are collected in memory, then
/// written as one `.npy`); returns (rows, dimension, what was written).
pub fn transform_file_output(
    calibrator: &LoadedCalibrator,
    input: &Path,
    output: &Path,
    progress: &dyn crate::runtime::progress::Progress,
) -> Result<(usize, usize, &'static str)> {
    let Some(q) = stage_of(calibrator) else {
        let (rows, dim) =
            crate::runtime::fitting::transform_file(calibrator, input, output, progress)?;
        return Ok((rows, dim, "float32"));
    };
    if output.extension().is_none_or(|e| e != "npy") {
        bail!(
            "{}: {} codes are written as .npy (int8 or uint8)",
            output.display(),
            q.spec.kind.name()
        );
    }
    let mut reader = crate::runtime::vector_input::open_vectors(input)?;
    if reader.cols() != calibrator.fitted.input_dim() {
        bail!(
            "{} has {}-dimensional rows, the calibrator {} expects {}",
            input.display(),
            reader.cols(),
            calibrator.path.display(),
            calibrator.fitted.input_dim()
        );
    }
    let mut parts = Vec::new();
    while let Some((chunk, _)) = reader.next_rows(crate::runtime::fitting::CHUNK_ROWS)? {
        let y = calibrator.apply(chunk.view())?;
        parts.push(q.quantize(y.view())?.bytes);
    }
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    let bytes = if views.is_empty() {
        Array2::zeros((0, q.code_bytes()))
    } else {
        ndarray::concatenate(Axis(0), &views).map_err(|e| crate::CoreError::Input(e.to_string()))?
    };
    let out = Output::from_codes(Codes::new(q.spec.kind, q.dim, bytes)?);
    write_codes(output, &out)?;
    Ok((out.rows(), out.dim(), out.kind()))
}

/// Whether codes of `kind` can come from a quantizer stage of kind `stage`:
/// the same kind, or its sibling (`int8` and `uint8`, `binary` and
/// `ubinary`: the same codes, each byte XOR 0x80, as a quantizer of that
/// kind fitted on the same rows gives).
pub fn same_family(stage: QuantKind, kind: QuantKind) -> bool {
    stage.is_bits() == kind.is_bits()
}

/// Checks a request for `kind` codes of calibrated vectors cut to `keep`
/// dimensions (and scaled to unit length with `normalize`) against the
/// quantizer `stage` the calibrator file ends in: there must be one (no
/// quantizer is fitted on the fly), of `kind`'s family
/// ([`same_family`]); a cut must keep the quantizer's width (its ranges
/// and rotation are of every dimension); `normalize` only before sign
/// bits (int8/uint8 ranges were fitted on vectors that were not
/// normalized). Errors are [`crate::CoreError::Setting`] naming the field:
/// `quantize`, `dimensions` or `normalize`.
pub fn check_stage_request(
    stage: Option<&Quantizer>,
    kind: QuantKind,
    keep: usize,
    normalize: bool,
) -> Result<()> {
    let name = kind.name();
    let Some(q) = stage else {
        return Err(crate::CoreError::setting(
            "quantize",
            format!(
                "{name} codes come from a quantizer fitted on the corpus, and this calibrator has \
                 none: fit one that ends in it (`bertflow fit ... --quantize {name}`) and use that \
                 calibrator file"
            ),
        ));
    };
    if !same_family(q.spec.kind, kind) {
        let family = if q.spec.kind.is_bits() {
            "binary or ubinary"
        } else {
            "int8 or uint8"
        };
        return Err(crate::CoreError::setting(
            "quantize",
            format!(
                "the calibrator ends in the quantizer {}, which gives {family} codes, not {name}: \
                 fit a calibrator with `--quantize {name}` for those",
                q.spec
            ),
        ));
    }
    if keep != q.dim {
        return Err(crate::CoreError::setting(
            "dimensions",
            format!(
                "the quantizer {} codes {} dimensions: a cut to {keep} would change its width; \
                 fit a calibrator that cuts first (e.g. `--kind pca:k={keep} --quantize {}`)",
                q.spec, q.dim, q.spec
            ),
        ));
    }
    if normalize && !q.spec.kind.is_bits() {
        return Err(crate::CoreError::setting(
            "normalize",
            format!(
                "the quantizer {}'s ranges were fitted on vectors that were not normalized: drop \
                 normalize",
                q.spec
            ),
        ));
    }
    Ok(())
}

/// The codes of the calibrated rows `x` under the stage `q`, written as
/// `kind` (checked first by [`check_stage_request`]): `q`'s own codes, or
/// its sibling's (each byte XOR 0x80).
pub fn stage_output(q: &Quantizer, x: ArrayView2<f32>, kind: QuantKind) -> Result<Output> {
    check_stage_request(Some(q), kind, x.ncols(), false)?;
    let mut codes = q.quantize(x)?;
    if codes.kind != kind {
        codes.bytes.mapv_inplace(|b| b ^ 0x80);
        codes.kind = kind;
    }
    Ok(Output::from_codes(codes))
}
