//! Fitting calibrators with bounded memory, on sentences (through the encoder)
//! or on embeddings from anywhere (a `.npy` / `.safetensors` matrix): whiten, sn,
//! natsv and sn+natsv stream through mergeable moment statistics, so memory does
//! not grow with the number of rows; a flow needs its sample in memory (every row,
//! or `sample` rows drawn with its seed). And applying a calibrator file to such a
//! matrix chunk by chunk.
use crate::bail;
use crate::error::{Context, CoreError, Result};
use crate::runtime::calibration::{self, model_identity, LoadedCalibrator};
use crate::runtime::embedder::Embedder;
use crate::runtime::matrix_file::NpyWriter;
use crate::runtime::progress::Progress;
use crate::runtime::vector_input::{open_vectors, RowSource};
use crate::runtime::weighting::Weighting;
use bertflow_calib::{
    fit_from_moments, CalibSpec, Calibrator, CalibratorMeta, Fitted, MomentStats,
};
use bertflow_encoder::Pooling;
use ndarray::Array2;
use std::path::{Path, PathBuf};

/// Rows read at a time.
pub const CHUNK_ROWS: usize = 4096;

/// How to fit on an embedding file.
#[derive(Debug, Clone)]
pub struct ExternalFit {
    /// The `.npy` or `.safetensors` matrix (one embedding per row), or
    /// Parquet with an `embedding` column (Spark's output).
    pub input: PathBuf,
    /// What to fit.
    pub spec: CalibSpec,
    /// A label for the source, stored in the file (e.g. the model that made the vectors).
    pub label: Option<String>,
    /// Fit a flow on this many rows drawn without replacement (seeded by the
    /// flow's seed); `None` uses every row. Closed-form kinds ignore it: they
    /// stream every row.
    pub sample: Option<usize>,
}

/// A fitted calibrator with the metadata to save with it.
pub struct FitOutcome {
    pub fitted: Fitted,
    pub meta: CalibratorMeta,
}

/// Fits `cfg.spec` on the embedding file.
pub fn fit_embeddings(cfg: &ExternalFit, progress: &dyn Progress) -> Result<FitOutcome> {
    Ok(fit_embeddings_keep(cfg, progress, false)?.0)
}

/// [`fit_embeddings`], also returning the rows fitted on when `keep` (the
/// sample of a flow, else every row).
pub(crate) fn fit_embeddings_keep(
    cfg: &ExternalFit,
    progress: &dyn Progress,
    keep: bool,
) -> Result<(FitOutcome, Option<Array2<f32>>)> {
    check_sample(cfg.sample)?;
    crate::runtime::retrieval::refuse_non_dense_file(&cfg.input)?;
    let mut kept = None;
    let mut reader = open_vectors(&cfg.input)?;
    let (rows, cols) = (reader.rows(), reader.cols());
    let label = cfg.spec.to_string();
    let warnings: Vec<String>;
    let (fitted, used) = match &cfg.spec {
        spec if needs_rows(spec) => {
            let x = match cfg.sample {
                Some(n) if n < rows => {
                    let idx = sample_indices(rows, n, sample_seed(spec));
                    reader.sample(&idx)?
                }
                _ => read_all(&mut *reader)?,
            };
            let n = x.nrows();
            let (fitted, warned) = calibration::fit_checked(&cfg.spec, x.view(), &label, progress)?;
            warnings = warned;
            kept = keep.then_some(x);
            (fitted, n)
        }
        spec => {
            let stats = stream_moments(&mut *reader, progress)?;
            if keep {
                kept = Some(read_all(&mut *open_vectors(&cfg.input)?)?);
            }
            let fitted = fit_from_moments(spec, &stats)
                .with_context(|| format!("fitting {spec} on {}", cfg.input.display()))?;
            warnings = calibration::small_fit_warnings(spec, rows, cols);
            for w in &warnings {
                progress.note(&format!("warning: {w}"));
            }
            (fitted, rows)
        }
    };
    // A sampled flow read only part of the file: fingerprint the shape and path instead.
    let fingerprint = reader
        .fingerprint()
        .unwrap_or_else(|| format!("sample-of-{rows}x{cols}"));
    let mut meta = CalibratorMeta::external(cfg.label.clone(), fingerprint, cols, used);
    if used < rows {
        meta = meta.with_sampled_from(rows);
    }
    if let Some(seed) = cfg.spec.seed() {
        meta = meta.with_seed(seed);
    }
    meta.warnings = warnings;
    Ok((FitOutcome { fitted, meta }, kept))
}

/// Sentences encoded at a time when streaming statistics over a corpus.
pub const SENTENCE_CHUNK: usize = 8192;

/// Fits `spec` on the embeddings of `sentences` (deduplicated by the caller).
/// Closed-form kinds encode the corpus chunk by chunk into moment statistics;
/// a flow encodes its sample (every sentence, or `sample` of them chosen with
/// the flow's seed) and keeps it in memory. A token `weighting` counts its
/// word-piece frequencies on all of `sentences` (or reads its frequency file)
/// and is recorded, weights included, in the calibrator's metadata.
pub fn fit_sentences(
    embedder: &Embedder,
    sentences: &[String],
    pooling: &Pooling,
    spec: &CalibSpec,
    sample: Option<usize>,
    weighting: &Weighting,
) -> Result<FitOutcome> {
    let keep = false;
    Ok(fit_sentences_keep(embedder, sentences, pooling, spec, sample, weighting, keep)?.0)
}

/// [`fit_sentences`], also returning the embeddings fitted on when `keep`
/// (the sample of a flow, else every sentence's).
pub(crate) fn fit_sentences_keep(
    embedder: &Embedder,
    sentences: &[String],
    pooling: &Pooling,
    spec: &CalibSpec,
    sample: Option<usize>,
    weighting: &Weighting,
    keep: bool,
) -> Result<(FitOutcome, Option<Array2<f32>>)> {
    check_sample(sample)?;
    crate::runtime::retrieval::refuse_sparse_pooling(pooling)?;
    let mut kept = None;
    if sentences.is_empty() {
        bail!("the fit corpus is empty");
    }
    weighting.check_pooling(&embedder.encoder, pooling)?;
    let weights = weighting.weights(&embedder.encoder, sentences)?;
    let w = weights.as_ref();
    let progress = &*embedder.progress;
    let label = spec.to_string();
    let dim = crate::runtime::st_pipeline::dim(&embedder.encoder, pooling)?;
    let warnings: Vec<String>;
    let (fitted, used) = match spec {
        spec if needs_rows(spec) => {
            let picked: Vec<String> = match sample {
                Some(n) if n < sentences.len() => {
                    sample_indices(sentences.len(), n, sample_seed(spec))
                        .into_iter()
                        .map(|i| sentences[i].clone())
                        .collect()
                }
                _ => sentences.to_vec(),
            };
            let x = embedder.embed_weighted(&picked, pooling, w)?;
            let (fitted, warned) = calibration::fit_checked(spec, x.view(), &label, progress)?;
            warnings = warned;
            let n = x.nrows();
            kept = keep.then_some(x);
            (fitted, n)
        }
        spec => {
            let mut stats = MomentStats::new(dim);
            let mut parts = Vec::new();
            for chunk in sentences.chunks(SENTENCE_CHUNK) {
                let x = embedder.embed_weighted(chunk, pooling, w)?;
                stats.update(x.view())?;
                if keep {
                    parts.push(x);
                }
            }
            if keep {
                let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
                kept = Some(
                    ndarray::concatenate(ndarray::Axis(0), &views)
                        .map_err(|e| CoreError::Input(e.to_string()))?,
                );
            }
            let fitted =
                fit_from_moments(spec, &stats).with_context(|| format!("fitting {spec}"))?;
            warnings = calibration::small_fit_warnings(spec, sentences.len(), dim);
            for w in &warnings {
                progress.note(&format!("warning: {w}"));
            }
            (fitted, sentences.len())
        }
    };
    let mut meta = CalibratorMeta::new(
        model_identity(&embedder.encoder),
        pooling.to_string(),
        dim,
        used,
    );
    if let Some(seed) = spec.seed() {
        meta = meta.with_seed(seed);
    }
    if used < sentences.len() {
        meta = meta.with_sampled_from(sentences.len());
    }
    meta.weighting = weights.map(|w| weighting.record(&w));
    meta.warnings = warnings;
    meta.prompt = embedder.prompt.as_ref().map(|p| p.text.clone());
    Ok((FitOutcome { fitted, meta }, kept))
}

/// Kinds fitted on the rows themselves (kept in memory, or a `--sample` of
/// them), not on streamed moment statistics: flow and auto.
pub fn needs_rows(spec: &CalibSpec) -> bool {
    !spec.from_moments()
}

/// A sample size, when one is given, is at least 1 row.
pub fn check_sample(sample: Option<usize>) -> Result<()> {
    if sample == Some(0) {
        return Err(CoreError::setting("sample", "must be at least 1"));
    }
    Ok(())
}

/// The seed a `--sample` is drawn with: the flow's, else 42.
fn sample_seed(spec: &CalibSpec) -> u64 {
    spec.seed().unwrap_or(42)
}

/// Every remaining row of `reader` in one matrix.
fn read_all(reader: &mut dyn RowSource) -> Result<Array2<f32>> {
    let mut parts = Vec::new();
    while let Some((c, _)) = reader.next_rows(CHUNK_ROWS)? {
        parts.push(c);
    }
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    ndarray::concatenate(ndarray::Axis(0), &views).map_err(|e| CoreError::Input(e.to_string()))
}

/// Moment statistics of every row of the file, one chunk at a time.
pub fn stream_moments(reader: &mut dyn RowSource, progress: &dyn Progress) -> Result<MomentStats> {
    let mut stats = MomentStats::new(reader.cols());
    let pb = progress.bar(reader.rows() as u64, "statistics", "rows");
    while let Some((chunk, _)) = reader.next_rows(CHUNK_ROWS)? {
        stats.update(chunk.view())?;
        pb.inc(chunk.nrows() as u64);
    }
    pb.finish();
    Ok(stats)
}

/// `n` distinct row indices out of `rows`, sorted, chosen by a seeded generator
/// (Floyd's algorithm: exactly `n` draws).
pub fn sample_indices(rows: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut rng = bertflow_numeric::Xoshiro256StarStar::new(seed);
    let mut chosen = std::collections::BTreeSet::new();
    for j in rows - n.min(rows)..rows {
        let t = rng.below(j as u64 + 1) as usize;
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    chosen.into_iter().collect()
}

/// Applies `calibrator` to every row of `input`, writing a float32 `.npy`;
/// returns (rows, output dimension).
pub fn transform_file(
    calibrator: &LoadedCalibrator,
    input: &Path,
    output: &Path,
    progress: &dyn Progress,
) -> Result<(usize, usize)> {
    if output.extension().is_none_or(|e| e != "npy") {
        bail!(
            "{}: the output of transform is a .npy file",
            output.display()
        );
    }
    let mut reader = open_vectors(input)?;
    let fitted = &calibrator.fitted;
    if reader.cols() != fitted.input_dim() {
        bail!(
            "{} has {}-dimensional rows, the calibrator {} expects {}",
            input.display(),
            reader.cols(),
            calibrator.path.display(),
            fitted.input_dim()
        );
    }
    let mut out = NpyWriter::create(output, reader.rows(), fitted.output_dim())?;
    let pb = progress.bar(reader.rows() as u64, "transform", "rows");
    while let Some((chunk, _)) = reader.next_rows(CHUNK_ROWS)? {
        let y = fitted.transform(chunk.view())?;
        out.write_chunk(y.view())?;
        pb.inc(chunk.nrows() as u64);
    }
    pb.finish();
    out.finish()?;
    Ok((reader.rows(), fitted.output_dim()))
}
