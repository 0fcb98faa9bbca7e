//! Persistent search indexes (`bertflow index build|add|ann`): a corpus embedded
//! once with a model, pooling and optional calibrator, written to one
//! checksummed file ([`bertflow_index`]) that `serve --index` memory-maps, and an
//! optional HNSW graph next to it.
use crate::error::{Context, Result};
use crate::pipeline::Pipeline;
use crate::progress::Progress;
use crate::quantize::{QuantKind, QuantSpec, Quantizer, Ranges};
use bertflow_index::{Ann, AnnParams, CodeKind, Identity, Index, IndexWriter, Quantization};
use ndarray::{Array2, ArrayView2};
use std::path::Path;
use std::sync::Arc;

pub use crate::vector_input::{open_rows, RowSource, PARQUET_TEXT_COLUMN, PARQUET_VECTOR_COLUMN};

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
        let raw = pipeline
            .embed_batch(part, &embedder.opts)
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
            let bytes = std::fs::read(c).map_err(crate::CoreError::io("read calibrator", c))?;
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

/// Fills what `config` leaves unset from what `index` records (files carry
/// their settings): its pooling, and its calibrator (the copy `index build`
/// kept beside it, when its digest is the one recorded). A calibrator the
/// index records but cannot give back is an error naming the setting.
pub fn adopt_index_settings(config: &mut crate::PipelineConfig, index: &Path) -> Result<()> {
    let opened =
        Index::open(index, false).with_context(|| format!("cannot open {}", index.display()))?;
    let id = opened.identity();
    if config.pooling.is_none() {
        config.pooling = id.pooling.parse().ok();
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
            .and_then(|c| crate::quantize::stage_of(c).map(|q| (c, q)));
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
    let head = pipeline
        .calibrate(
            pipeline
                .embed_batch(&texts[..first], &pipeline.embedder().opts)
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

/// The settings a vectors file declares (the metadata `bertflow encode`
/// writes into a `.safetensors` file: `model`, `pooling`, `calibrator`, ...);
/// `None` for a `.npy` file, which has no place for them.
pub fn declared_settings(
    path: &Path,
) -> Result<Option<std::collections::BTreeMap<String, String>>> {
    use std::io::Read;
    if path.extension().is_none_or(|e| e != "safetensors") {
        return Ok(None);
    }
    let bad = |why: String| crate::CoreError::Input(format!("{}: {why}", path.display()));
    let mut file = std::fs::File::open(path).map_err(crate::CoreError::io("open", path))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| bad("not a .safetensors file (too short)".into()))?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return Err(bad("implausible .safetensors header size".into()));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|_| bad("truncated .safetensors header".into()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| bad(format!("bad header: {e}")))?;
    let Some(meta) = v.get("__metadata__").and_then(|m| m.as_object()) else {
        return Ok(Some(Default::default()));
    };
    Ok(Some(
        meta.iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect(),
    ))
}

/// Error unless the settings `declared` by a vectors file are those of
/// `pipeline`: the same model (as given, by identity, or the same directory
/// name), pooling and calibrator.
pub fn check_declared(
    declared: &std::collections::BTreeMap<String, String>,
    pipeline: &Pipeline,
    vectors: &Path,
) -> Result<()> {
    let info = pipeline.info();
    let base = |m: &str| {
        Path::new(m.split('@').next().unwrap_or(m))
            .file_name()
            .map(|n| n.to_os_string())
    };
    let mut differences = Vec::new();
    match declared.get("model") {
        None => differences.push("the file declares no model".to_owned()),
        Some(m) if *m == info.model_id || *m == info.model || base(m) == base(&info.model_id) => {}
        Some(m) => differences.push(format!("model: the vectors {m}, now {}", info.model_id)),
    }
    if declared.get("pooling") != Some(&info.pooling) {
        differences.push(format!(
            "pooling: the vectors {}, now {}",
            declared.get("pooling").map_or("none", |s| s.as_str()),
            info.pooling
        ));
    }
    if declared.get("calibrator") != info.calibrator.as_ref() {
        let show = |c: Option<&String>| c.map_or("none".to_owned(), |c| c.clone());
        differences.push(format!(
            "calibrator: the vectors {}, now {}",
            show(declared.get("calibrator")),
            show(info.calibrator.as_ref())
        ));
    }
    if differences.is_empty() {
        return Ok(());
    }
    Err(crate::CoreError::Input(format!(
        "{} was not made with the settings given ({}): give the model, pooling and calibrator \
         that made it, or re-encode the corpus",
        vectors.display(),
        differences.join("; ")
    )))
}

/// Where the vectors of `index build|add --vectors` come from and how their
/// sentences are found.
pub struct VectorsInput<'a> {
    /// The rows (a file's reader, or a matrix in memory).
    pub rows: &'a mut dyn RowSource,
    /// The sentences, one per row, unless the rows carry them (Parquet).
    pub texts: Option<&'a [String]>,
    /// Named in messages (the file, or "the vectors").
    pub what: String,
}

impl VectorsInput<'_> {
    /// Error unless there is one sentence per row and rows of `dimension`.
    pub fn check(&self, dimension: usize) -> Result<()> {
        let rows = self.rows.rows();
        match self.texts {
            Some(t) if t.len() != rows => {
                return Err(crate::CoreError::Input(format!(
                    "{} holds {rows} vectors for {} sentences: one row per sentence",
                    self.what,
                    t.len()
                )))
            }
            _ => {}
        }
        if self.rows.cols() != dimension {
            return Err(crate::CoreError::Input(format!(
                "{} holds vectors of dimension {}; the index's are of dimension {dimension}",
                self.what,
                self.rows.cols()
            )));
        }
        Ok(())
    }
}

/// The settings `vectors` declares (a `.safetensors` file written by
/// `bertflow encode`), checked against `pipeline`'s.
pub fn check_vectors_file(pipeline: &Pipeline, vectors: &Path) -> Result<()> {
    if let Some(declared) = declared_settings(vectors)? {
        check_declared(&declared, pipeline, vectors)?;
    }
    Ok(())
}

/// The identity of vectors made by no model bertflow knows (the Python
/// `Index.build` from an array without an `Encoder`): such an index is
/// searched with vectors only, and `serve --index` refuses it.
pub fn external_identity(dimension: usize) -> Identity {
    Identity {
        model: EXTERNAL_MODEL.to_owned(),
        pooling: "none".to_owned(),
        calibrator: None,
        dimension,
        precision: "fp32".to_owned(),
    }
}

/// The model an index of [`external_identity`] records.
pub const EXTERNAL_MODEL: &str = "external";

/// Write every row of `input` to `writer`, `chunk` rows per segment, after
/// checking one sentence per row and the index's dimension (`index add
/// --vectors`; a quantized index codes them with its quantizer).
pub fn write_vectors(
    input: &mut VectorsInput,
    chunk: usize,
    writer: &mut IndexWriter,
    progress: &dyn Progress,
) -> Result<usize> {
    input.check(writer.identity().dimension)?;
    let n = input.rows.rows();
    let bar = progress.bar(n as u64, "writing the vectors", "vectors");
    let mut done = 0;
    while let Some((part, own_texts)) = input.rows.next_rows(chunk.max(1))? {
        let rows = part.nrows();
        let part = part.as_standard_layout();
        let flat = part
            .as_slice()
            .ok_or_else(|| crate::CoreError::Input("the vectors are not contiguous".into()))?;
        let texts: &[String] = match (input.texts, &own_texts) {
            (Some(t), None) => t.get(done..done + rows).ok_or_else(|| {
                crate::CoreError::Input(format!("{}: more rows than sentences", input.what))
            })?,
            (None, Some(t)) => t,
            (Some(_), Some(_)) => {
                return Err(crate::CoreError::Input(format!(
                    "{} holds the sentences: give no other texts",
                    input.what
                )))
            }
            (None, None) => {
                return Err(crate::CoreError::Input(format!(
                    "{} holds no sentences: give them (one per row, --texts)",
                    input.what
                )))
            }
        };
        writer.add(flat, texts)?;
        done += rows;
        bar.set_position(done as u64);
    }
    bar.finish();
    Ok(done)
}

/// `index build --vectors`, Python `Index.build(vectors=...)`: write the rows
/// of `input` (made elsewhere with the model, pooling and calibrator that
/// `identity` names: stored as they are, not calibrated again) to a new index
/// at `path`, `chunk` rows per segment, quantized as `quantize` says (a
/// fitted quantizer is fitted on an evenly spaced sample of at most
/// [`QUANTIZER_FIT_ROWS`] rows). Returns the sentences written.
pub fn build_index_from_rows(
    identity: &Identity,
    mut input: VectorsInput,
    chunk: usize,
    path: &Path,
    quantize: QuantizeWith,
    progress: &dyn Progress,
) -> Result<u64> {
    input.check(identity.dimension)?;
    let n = input.rows.rows();
    let sample = match quantize {
        QuantizeWith::Nothing => Array2::zeros((0, identity.dimension)),
        _ => {
            let m = n.min(QUANTIZER_FIT_ROWS);
            let rows: Vec<usize> = (0..m).map(|i| i * n / m).collect();
            input.rows.sample(&rows)?
        }
    };
    let what = format!("an even sample of {}", input.what);
    let mut writer = create_writer(path, identity, quantize, sample.view(), &what)?;
    drop(sample);
    write_vectors(&mut input, chunk, &mut writer, progress)?;
    Ok(writer.finish()?)
}

/// `index build --vectors FILE`: [`build_index_from_rows`] over a `.npy`,
/// `.safetensors` or Parquet file (sentences from `texts`, or the Parquet
/// file's `text_column`), after checking the settings a `.safetensors` file
/// declares against `pipeline`'s. Returns the sentences written.
#[allow(clippy::too_many_arguments)]
pub fn build_index_from_vectors(
    pipeline: &Pipeline,
    vectors: &Path,
    texts: Option<&[String]>,
    columns: (&str, &str),
    chunk: usize,
    path: &Path,
    quantize: QuantizeWith,
) -> Result<u64> {
    check_vectors_file(pipeline, vectors)?;
    let mut rows = open_rows(vectors, columns.0, columns.1)?;
    let input = VectorsInput {
        rows: &mut *rows,
        texts,
        what: vectors.display().to_string(),
    };
    build_index_from_rows(
        &pipeline.identity()?,
        input,
        chunk,
        path,
        quantize,
        &*pipeline.embedder().progress,
    )
}
