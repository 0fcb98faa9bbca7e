//! Vectors files (`.npy`, `.safetensors`, Parquet as Spark writes it) read by
//! core's readers (`bertflow_core::vector_input`, the ones `bertflow index
//! build --vectors`, `fit --embeddings` and `transform` use):
//! `bertflow.read_vectors`, and `Index.build(path, vectors="FILE")`.

use std::path::{Path, PathBuf};

use bertflow_core::index::Identity;
use bertflow_core::indexing::{
    build_index_from_rows, build_index_from_vectors, external_identity, keep_calibrator,
    QuantizeWith, VectorsInput,
};
use bertflow_core::progress::silent;
use bertflow_core::quantize::QuantSpec;
use bertflow_core::vector_input::{is_parquet, open_rows, open_vectors, ParquetRows, RowSource};
use bertflow_core::CoreError;
use numpy::ndarray::{concatenate, Array2, Axis};
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::encoder::PyEncoder;
use crate::errors;

/// Every row of `rows` and, when it holds them, their sentences.
fn read_all(rows: &mut dyn RowSource) -> Result<(Array2<f32>, Option<Vec<String>>), CoreError> {
    let (mut parts, mut texts) = (Vec::new(), None::<Vec<String>>);
    while let Some((m, t)) = rows.next_rows(8192)? {
        parts.push(m);
        if let Some(t) = t {
            texts.get_or_insert_with(Vec::new).extend(t);
        }
    }
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    let m = concatenate(Axis(0), &views).map_err(|e| CoreError::Input(e.to_string()))?;
    Ok((m, texts))
}

/// ``(vectors, texts)``: the float32 matrix of a vectors file (``.npy``,
/// ``.safetensors`` or Parquet) and, for Parquet read with a ``text_column``,
/// its sentences (else None). Parquet is a file or a folder of part files
/// (Spark's output, ``_SUCCESS`` and all); its vectors are ``vector_column``
/// (``array<float>`` or ``array<double>``). The readers of ``bertflow index
/// build --vectors``, ``fit --embeddings`` and ``transform``.
#[pyfunction]
#[pyo3(signature = (path, text_column=Some("text".to_owned()), vector_column="embedding".to_owned()))]
fn read_vectors<'py>(
    py: Python<'py>,
    path: PathBuf,
    text_column: Option<String>,
    vector_column: String,
) -> PyResult<Bound<'py, PyTuple>> {
    if !path.exists() {
        return Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
            "no vectors file {}",
            path.display()
        )));
    }
    let (m, texts) = py
        .detach(|| {
            let mut rows: Box<dyn RowSource> = match (&text_column, is_parquet(&path)) {
                (Some(t), true) => open_rows(&path, t, &vector_column)?,
                (None, true) => Box::new(ParquetRows::open_vectors(&path, &vector_column)?),
                _ => open_vectors(&path)?,
            };
            read_all(&mut *rows)
        })
        .map_err(errors::core)?;
    PyTuple::new(
        py,
        [m.into_pyarray(py).into_any(), texts.into_pyobject(py)?],
    )
}

/// `Index.build(path, vectors="FILE")`: core's `index build --vectors` (the
/// model, pooling and calibrator of `encoder` recorded and checked against a
/// `.safetensors` file's declared settings; its calibrator file copied beside
/// the index), or vectors recorded as external without an encoder. `texts`: one per row of a matrix file; none
/// for Parquet (its `text_column`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_from_file(
    py: Python<'_>,
    path: &Path,
    file: &Path,
    texts: Option<Vec<String>>,
    columns: (&str, &str),
    quantize: Option<&QuantSpec>,
    encoder: Option<&Py<PyEncoder>>,
    chunk: usize,
) -> PyResult<()> {
    match (is_parquet(file), &texts) {
        (true, Some(_)) => {
            return Err(PyValueError::new_err(format!(
                "{} is Parquet: its sentences come from its column {:?}; drop texts",
                file.display(),
                columns.0
            )))
        }
        (false, None) => {
            return Err(PyValueError::new_err(format!(
                "give the sentences of {} as texts (one per row)",
                file.display()
            )))
        }
        _ => {}
    }
    let built = match encoder {
        Some(e) => e.get().with_pipeline(py, |p| {
            let quantize = QuantizeWith::of(p, quantize)?;
            let n = build_index_from_vectors(
                p,
                file,
                texts.as_deref(),
                columns,
                chunk,
                path,
                quantize,
            )?;
            // As `index build`: a copy of the calibrator file beside the index.
            keep_calibrator(path, p.calibrator().map(|c| c.path.as_path()))?;
            Ok(n)
        }),
        None => py.detach(|| {
            let mut rows = open_rows(file, columns.0, columns.1)?;
            let identity: Identity = external_identity(rows.cols());
            let quantize = match quantize {
                Some(s) => QuantizeWith::Fit(s),
                None => QuantizeWith::Nothing,
            };
            let input = VectorsInput {
                rows: &mut *rows,
                texts: texts.as_deref(),
                what: file.display().to_string(),
            };
            build_index_from_rows(&identity, input, chunk, path, quantize, &*silent())
        }),
    };
    built.map(|_| ()).map_err(errors::core)
}

/// Core's parse of a quantizer spec (`index build --quantize`): its canonical
/// form, or ValueError.
#[pyfunction]
fn check_quantize(spec: &str) -> PyResult<String> {
    spec.parse::<QuantSpec>()
        .map(|s| s.to_string())
        .map_err(|e| PyValueError::new_err(format!("quantize={spec:?}: {e}")))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_vectors, m)?)?;
    m.add_function(wrap_pyfunction!(check_quantize, m)?)?;
    Ok(())
}
