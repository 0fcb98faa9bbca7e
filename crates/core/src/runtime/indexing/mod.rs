//! Persistent search indexes (`bertflow index build|add|ann`): a corpus embedded
//! once with a model, pooling and optional calibrator, written to one
//! checksummed file ([`bertflow_index`]) that `serve --index` memory-maps, and an
//! optional HNSW graph next to it.
use crate::error::{Context, Result};
use crate::runtime::pipeline::Pipeline;
use crate::runtime::progress::Progress;
use crate::runtime::quantize::{QuantKind, QuantSpec, Quantizer, Ranges};
use bertflow_index::{Ann, AnnParams, CodeKind, Identity, Index, IndexWriter, Quantization};
use ndarray::{Array2, ArrayView2};
use std::path::Path;
use std::sync::Arc;

mod modes;
mod sparse;
mod vectors;

pub use crate::runtime::vector_input::{
    open_rows, RowSource, PARQUET_TEXT_COLUMN, PARQUET_VECTOR_COLUMN,
};
pub use modes::{
    default_depth, fuse_rrf, fuse_weighted, search_index, search_index_with, Fusion, FusionParams,
    SearchMode, DEFAULT_ALPHA, DEFAULT_RRF_K,
};
pub use sparse::{
    add_with_sparse, build_sparse_index, build_sparse_index_from_vectors, check_sparse_source,
    embed_into_sparse_index, file_sparse_source, model_sparse_info, read_sparse_file,
    write_vectors_sparse, SparseInput,
};
pub use vectors::{
    build_index_from_rows, build_index_from_vectors, check_declared, check_vectors_file,
    declared_settings, external_identity, write_vectors, VectorsInput, EXTERNAL_MODEL,
};

/// Embed `texts` `chunk` sentences at a time through `pipeline` (its pooling,
/// token weights and calibrator) and write each chunk as a segment of
/// `writer`. Memory is bounded by the chunk, whatever the corpus size.
/// Returns the number of sentences written.
pub fn embed_into_index(
    pipeline: &Pipeline,
    texts: &[String],
    chunk: usize,
    writer: &mut IndexWriter,
) -> Result<usize> {
    let embedder = pipeline.embedder();
    let bar = embedder
        .progress
        .bar(texts.len() as u64, "embedding the corpus", "sentences");
    let mut done = 0;
    for part in texts.chunks(chunk.max(1)) {
        // The pipeline's default prompt, as every front end embeds.
        let prompted = pipeline.prompt_texts(part.to_vec(), None)?;
        let raw = pipeline
            .embed_batch(&prompted, &embedder.opts)
            .context("encoding the corpus failed")?
            .vectors;
        let vectors = pipeline.calibrate(raw)?;
        let vectors = vectors.as_standard_layout();
        let flat = vectors
            .as_slice()
            .ok_or_else(|| crate::CoreError::Input("the embeddings are not contiguous".into()))?;
        writer.add(flat, part)?;
        done += part.len();
        bar.set_position(done as u64);
    }
    bar.finish();
    Ok(done)
}

/// What [`build_ann`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnBuilt {
    /// Points inserted now.
    pub inserted: usize,
    /// Points in the graph.
    pub total: usize,
    /// Whether an existing graph was extended (after `index add`) rather than built.
    pub extended: bool,
    /// What its distance compares: the codes of a quantized index, or the
    /// f32 rows (an unquantized index, or a graph from before codes were used).
    pub metric: bertflow_index::AnnMetric,
}

/// Build the HNSW graph of the index at `path` and store it next to it; a
/// graph already there that covers the index's first segments is extended
/// with the rows added since (unless `rebuild`).
pub fn build_ann(
    path: &Path,
    params: AnnParams,
    rebuild: bool,
    progress: &dyn Progress,
) -> Result<AnnBuilt> {
    let index = Arc::new(
        Index::open(path, false).with_context(|| format!("cannot open {}", path.display()))?,
    );
    let n = index.len();
    let bar = progress.bar(n as u64, "building the HNSW graph", "points");
    let tick = |i: usize| bar.set_position(i as u64);
    let existing = if rebuild {
        None
    } else {
        Ann::load(Arc::clone(&index), path)?
    };
    let built = match existing {
        Some(mut ann) => {
            let inserted = ann.extend(&tick)?;
            if inserted > 0 {
                ann.save(path)?;
            }
            AnnBuilt {
                inserted,
                total: ann.len(),
                extended: true,
                metric: ann.metric(),
            }
        }
        None => {
            let ann = Ann::build(index, params, &tick)?;
            ann.save(path)?;
            AnnBuilt {
                inserted: ann.len(),
                total: ann.len(),
                extended: false,
                metric: ann.metric(),
            }
        }
    };
    bar.finish();
    Ok(built)
}

/// Where `index build --calibrator` keeps a copy of its calibrator file, so
/// that the index carries everything that made its vectors:
/// `NAME.bfi` -> `NAME.bfi.calibrator.safetensors`.
pub fn calibrator_sidecar(index: &Path) -> std::path::PathBuf {
    let mut name = index.file_name().unwrap_or_default().to_os_string();
    name.push(".calibrator.safetensors");
    index.with_file_name(name)
}

/// Copies `calibrator` beside `index` (atomically); without one, removes a
/// stale copy of an earlier build.
pub fn keep_calibrator(index: &Path, calibrator: Option<&Path>) -> Result<()> {
    let side = calibrator_sidecar(index);
    match calibrator {
        Some(c) => {
            let bytes = crate::runtime::regular::read_regular_file(
                c,
                bertflow_index::MAX_CALIBRATOR_BYTES,
                "calibrator file",
            )?;
            crate::write_file(&side, bytes)
        }
        None => match std::fs::remove_file(&side) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(crate::CoreError::io("remove", &side)(e))
            }
            _ => Ok(()),
        },
    }
}

/// `index verify`'s check of the calibrator copy [`keep_calibrator`] keeps
/// beside `index`, when the index (of `identity`) records a calibrator: the
/// copy must be there, a regular file whose digest is the one recorded, and
/// load whole (header keys, tensors and their checksum). Returns the copy
/// checked, `None` for an index built without a calibrator.
pub fn verify_calibrator_copy(
    index: &Path,
    identity: &bertflow_index::Identity,
) -> Result<Option<std::path::PathBuf>> {
    let Some(recorded) = &identity.calibrator else {
        return Ok(None);
    };
    let side = calibrator_sidecar(index);
    let bad = |why: String| {
        crate::CoreError::Input(format!(
            "{}: the index's copy of its calibrator ({recorded}) {why}; build the index again, or copy that calibrator file to this path",
            side.display()
        ))
    };
    let digest =
        bertflow_index::file_digest(&side).map_err(|e| bad(format!("cannot be read: {e}")))?;
    if !recorded.ends_with(&digest) {
        return Err(bad(format!("is another file ({digest})")));
    }
    bertflow_calib::load(&side).map_err(|e| bad(format!("is damaged: {e}")))?;
    Ok(Some(side))
}

/// Fills what `config` leaves unset from what `index` records (files carry
/// their settings): its pooling, and its calibrator (the copy `index build`
/// kept beside it, when its digest is the one recorded). A calibrator the
/// index records but cannot give back is an error naming the setting.
pub fn adopt_index_settings(config: &mut crate::PipelineConfig, index: &Path) -> Result<()> {
    let opened =
        Index::open(index, false).with_context(|| format!("cannot open {}", index.display()))?;
    let id = opened.identity();
    let recorded_pooling = id.pooling.parse::<crate::Pooling>().ok();
    match (&config.pooling, &recorded_pooling) {
        (None, _) => config.pooling = recorded_pooling,
        // Without a calibrator given, the index's own (a hidden copy) would
        // refuse the pooling: the index is what the user named, so name it.
        (Some(given), Some(recorded)) if given != recorded && config.calibrator.is_none() => {
            return Err(crate::CoreError::setting(
                "pooling",
                format!(
                    "the index {} was built with pooling {recorded}, not {given}: leave the \
                     pooling unset to use the index's, or build an index with pooling {given} \
                     (`bertflow index build --pooling {given} ...`)",
                    index.display()
                ),
            ));
        }
        _ => {}
    }
    if let (None, Some(recorded)) = (&config.calibrator, &id.calibrator) {
        let side = calibrator_sidecar(index);
        let same = side.is_file() && recorded.ends_with(&bertflow_index::file_digest(&side)?);
        if !same {
            return Err(crate::CoreError::setting(
                "calibrator",
                format!(
                    "the index {} was built with calibrator {recorded}: give that file \
                     (its copy {} is missing or another file)",
                    index.display(),
                    side.display()
                ),
            ));
        }
        config.calibrator = Some(side);
    }
    Ok(())
}

/// Vectors the quantizer of a quantized index is fitted on, at most: an
/// evenly spaced sample of a vectors file, or the first chunk embedded.
pub const QUANTIZER_FIT_ROWS: usize = 65_536;

/// Sentences embedded (or vectors written) per segment, by default (`--chunk`):
/// bounds the memory of a build.
pub const DEFAULT_CHUNK: usize = 8192;

/// Candidates rescored exactly per result asked (`--rescore`), by default.
pub use bertflow_index::DEFAULT_RESCORE;

/// Bit codes: candidates the scan keeps per candidate rescored (`--shortlist`),
/// by default.
pub use bertflow_index::DEFAULT_SHORTLIST;

/// The HNSW graph over a quantized index's codes (`--ann`): candidates
/// rescored exactly per result asked (`--rescore`; over bit codes, over int8
/// codes: `Ann::default_rescore`), and candidates explored per query (`--ef`,
/// `--ef-search`), by default.
pub use bertflow_index::{DEFAULT_ANN_RESCORE, DEFAULT_ANN_RESCORE_INT8, DEFAULT_EF_SEARCH};

/// The quantizer a quantized index records, from calibrator's quantizer
/// `q` (fitted elsewhere) or fitted now, and the unit-normalised `sample` of
/// the build corpus: sign bits (`binary`, `ubinary`, with or without ITQ)
/// keep `q`'s rotation; `int8` with global ranges gets its scale fitted on
/// the unit-normalised sample (the index codes unit vectors). Per-dimension
/// ranges and `uint8` are refused: their codes do not compare as integers.
fn index_quantization(
    q: &Quantizer,
    unit_sample: ArrayView2<f32>,
    fitted_on: String,
) -> Result<Quantization> {
    let spec = q.spec;
    let kind = match (spec.kind, spec.ranges) {
        (QuantKind::Binary, _) => CodeKind::Binary,
        (QuantKind::Ubinary, _) => CodeKind::Ubinary,
        (QuantKind::Int8, Ranges::Global) => CodeKind::Int8,
        _ => {
            return Err(crate::CoreError::setting(
                "quantize",
                format!(
                    "an index stores int8 (global ranges), binary or ubinary codes, not {spec}: \
                     their codes are scored as integers"
                ),
            ))
        }
    };
    let scale = match kind {
        CodeKind::Int8 => {
            let refit = Quantizer::fit(&spec, unit_sample)
                .with_context(|| format!("fitting the quantizer {spec}"))?;
            refit.scales().first().copied()
        }
        _ => None,
    };
    let rotation = q.rotation().map(|r| r.iter().copied().collect());
    Ok(Quantization::new(
        spec.to_string(),
        kind,
        q.dim,
        scale,
        rotation,
        fitted_on,
    )?)
}

/// Rows of `x` scaled to unit length (as the index stores them).
fn unit_rows(x: ArrayView2<f32>) -> Array2<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.rows() {
        let row: Vec<f32> = row.iter().copied().collect();
        bertflow_index::format::normalise_into(&row, &mut out);
    }
    Array2::from_shape_vec(x.raw_dim(), out).unwrap_or_else(|_| Array2::zeros(x.raw_dim()))
}

/// The error for a product quantizer given to an index (checked before any
/// fit: its codes are centroid indices, not scored as integers).
fn pq_refused(spec: &QuantSpec) -> crate::CoreError {
    crate::CoreError::setting(
        "quantize",
        format!(
            "an index stores int8 (global ranges), binary or ubinary codes, not {spec}: product \
             quantizer codes are centroid indices (encode them with `bertflow encode`)"
        ),
    )
}

/// What quantizes a new index: the quantizer `spec` (`--quantize`, fitted on
/// the build corpus), or the quantizer stage the calibrator file ends in;
/// both is an error, neither is an index without codes.
#[derive(Debug, Clone, Copy)]
pub enum QuantizeWith<'a> {
    /// No codes.
    Nothing,
    /// Fit this spec on the build corpus.
    Fit(&'a QuantSpec),
    /// A fitted quantizer (a calibrator file's last stage).
    Stage(&'a Quantizer),
}

impl<'a> QuantizeWith<'a> {
    /// From `--quantize` and the pipeline's calibrator.
    pub fn of(pipeline: &'a Pipeline, spec: Option<&'a QuantSpec>) -> Result<Self> {
        let stage = pipeline
            .calibrator()
            .and_then(|c| crate::runtime::quantize::stage_of(c).map(|q| (c, q)));
        Ok(match (spec, stage) {
            (Some(spec), Some((c, q))) => {
                return Err(crate::CoreError::setting(
                    "quantize",
                    format!(
                    "the calibrator {} already ends in the quantizer {}: drop --quantize {spec}",
                    c.path.display(),
                    q.spec
                ),
                ))
            }
            (Some(spec), None) if spec.kind.is_pq() => return Err(pq_refused(spec)),
            (None, Some((_, q))) if q.spec.kind.is_pq() => return Err(pq_refused(&q.spec)),
            (Some(spec), None) => QuantizeWith::Fit(spec),
            (None, Some((_, q))) => QuantizeWith::Stage(q),
            (None, None) => QuantizeWith::Nothing,
        })
    }

    /// The index's quantizer, fitted on (or checked against) `sample`.
    pub fn quantization(
        &self,
        sample: ArrayView2<f32>,
        what: &str,
    ) -> Result<Option<Quantization>> {
        let unit = unit_rows(sample);
        let fitted_on = format!("{} vectors ({what})", sample.nrows());
        match self {
            QuantizeWith::Nothing => Ok(None),
            QuantizeWith::Fit(spec) if spec.kind.is_bits() => {
                // Sign bits of vectors centred on the corpus's mean: each bit
                // splits the corpus about evenly (sentence embeddings share a
                // large common direction, which raw signs waste bits on).
                let centre = unit
                    .mean_axis(ndarray::Axis(0))
                    .ok_or_else(|| crate::CoreError::Input("no vector to fit on".into()))?;
                let centred = &unit - &centre;
                let q = Quantizer::fit(spec, centred.view())
                    .with_context(|| format!("fitting the quantizer {spec}"))?;
                let q = index_quantization(&q, unit.view(), format!("{fitted_on}, centred"))?;
                Ok(Some(
                    q.centred(centre.iter().map(|&c| f64::from(c)).collect())?,
                ))
            }
            QuantizeWith::Fit(spec) => {
                let q = Quantizer::fit(spec, unit.view())
                    .with_context(|| format!("fitting the quantizer {spec}"))?;
                index_quantization(&q, unit.view(), fitted_on).map(Some)
            }
            QuantizeWith::Stage(q) => index_quantization(
                q,
                unit.view(),
                format!("the calibrator's stage; {fitted_on}"),
            )
            .map(Some),
        }
    }
}

/// Create the index file `path` for vectors of `identity`, quantized as
/// `quantize` says (fitted on `sample`, the first vectors).
fn create_writer(
    path: &Path,
    identity: &Identity,
    quantize: QuantizeWith,
    sample: ArrayView2<f32>,
    what: &str,
) -> Result<IndexWriter> {
    Ok(match quantize.quantization(sample, what)? {
        Some(q) => IndexWriter::create_quantized(path, identity.clone(), q)?,
        None => IndexWriter::create(path, identity.clone())?,
    })
}

/// `index build`: embed `texts` into a new index at `path`, `chunk`
/// sentences per segment, quantized as `quantize` says (a fitted quantizer
/// is fitted on the first chunk). Returns the sentences written.
pub fn build_index(
    pipeline: &Pipeline,
    texts: &[String],
    chunk: usize,
    path: &Path,
    quantize: QuantizeWith,
) -> Result<u64> {
    let identity = pipeline.identity()?;
    let first = texts.len().min(chunk.max(1));
    // The pipeline's default prompt, as `embed_into_index` embeds the rest.
    let prompted = pipeline.prompt_texts(texts[..first].to_vec(), None)?;
    let head = pipeline
        .calibrate(
            pipeline
                .embed_batch(&prompted, &pipeline.embedder().opts)
                .context("encoding the corpus failed")?
                .vectors,
        )?
        .as_standard_layout()
        .to_owned();
    let mut writer = create_writer(path, &identity, quantize, head.view(), "the first chunk")?;
    let flat = head
        .as_slice()
        .ok_or_else(|| crate::CoreError::Input("the embeddings are not contiguous".into()))?;
    writer.add(flat, &texts[..first])?;
    embed_into_index(pipeline, &texts[first..], chunk, &mut writer)?;
    Ok(writer.finish()?)
}
