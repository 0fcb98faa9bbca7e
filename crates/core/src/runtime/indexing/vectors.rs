//! Indexes of vectors embedded elsewhere (`bertflow index build --vectors`):
//! the settings a vectors file declares checked against the pipeline's, the
//! rows (`.npy`, `.safetensors`, Parquet) written as segments, quantized as the
//! build asks. Re-exported from [`super`].
use super::{create_writer, QuantizeWith, QUANTIZER_FIT_ROWS};
use crate::error::Result;
use crate::runtime::pipeline::Pipeline;
use crate::runtime::progress::Progress;
use crate::runtime::vector_input::{open_rows, RowSource};
use bertflow_index::{Identity, IndexWriter};
use ndarray::Array2;
use std::path::Path;

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
    let (mut file, _) = crate::io::open_regular_file(path, "vector file")?;
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
