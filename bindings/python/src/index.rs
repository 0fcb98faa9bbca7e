//! `Index`: a bertflow-index file (the CLI's `index build|add|search`), built
//! from vectors (a NumPy array) or from sentences with an `Encoder`, searched
//! with vectors or sentences. The work is core's (`bertflow_core::indexing`,
//! the functions `bertflow index` calls); this file only converts.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use bertflow_core::index::{Identity, Index, IndexWriter, SearchParams};
use bertflow_core::indexing::{
    build_index, build_index_from_rows, embed_into_index, external_identity, write_vectors,
    QuantizeWith, VectorsInput, DEFAULT_CHUNK, DEFAULT_RESCORE, DEFAULT_SHORTLIST,
};
use bertflow_core::progress::silent;
use bertflow_core::quantize::QuantSpec;
use bertflow_core::vector_input::MemoryRows;
use bertflow_core::{CoreError, Pipeline};
use numpy::ndarray::{Array2, Axis};
use numpy::{IntoPyArray, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::encoder::{extract_texts, PyEncoder};
use crate::errors;

/// A persistent sentence-vector index: the file of ``bertflow index build``
/// (checksummed, memory-mapped, appended to without rewriting), searched
/// exactly or, quantized, by scanning compact codes and rescoring the best
/// ``rescore x k`` candidates exactly (``docs/quantized-index.md``).
///
/// Build it with ``Index.build(path, vectors=..., texts=...)`` from vectors
/// made anywhere (recorded as model ``"external"``: searched with vectors), or
/// with ``encoder=`` (its model, pooling and calibrator are recorded; sentence
/// queries work); open it with ``Index.open(path, encoder=None)``.
///
/// Example::
///
///     X = np.random.default_rng(0).standard_normal((1000, 64), dtype=np.float32)
///     index = bertflow.Index.build("x.bfi", vectors=X, texts=[str(i) for i in range(1000)],
///                                  quantize="int8")
///     scores, ids = index.search(X[:5], k=10)      # like faiss: (5, 10) each
#[pyclass(module = "bertflow._bertflow", name = "Index", frozen)]
pub struct PyIndex {
    path: PathBuf,
    /// Reopened after `add`.
    inner: RwLock<Arc<Index>>,
    /// Embeds sentence queries and `add`ed sentences.
    encoder: Option<Py<PyEncoder>>,
}

fn index_err(e: bertflow_core::index::IndexError) -> PyErr {
    errors::core(CoreError::from(e))
}

/// The native encoder of a `bertflow.Encoder` (or the native object itself).
fn native_encoder(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyEncoder>>> {
    let Some(obj) = obj else { return Ok(None) };
    if let Ok(e) = obj.cast::<PyEncoder>() {
        return Ok(Some(e.clone().unbind()));
    }
    let inner = obj.getattr("_inner").ok();
    match inner.as_ref().and_then(|i| i.cast::<PyEncoder>().ok()) {
        Some(e) => Ok(Some(e.clone().unbind())),
        None => Err(PyTypeError::new_err(format!(
            "encoder must be a bertflow.Encoder, not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))),
    }
}

/// A float32 matrix from a 2-D (or, `one_row`, 1-D) float32 or float64 array.
fn matrix(x: &Bound<'_, PyAny>, what: &str, one_row: bool) -> PyResult<Array2<f32>> {
    if let Ok(a) = x.extract::<PyReadonlyArray2<f32>>() {
        return Ok(a.as_array().to_owned());
    }
    if let Ok(a) = x.extract::<PyReadonlyArray2<f64>>() {
        return Ok(a.as_array().mapv(|v| v as f32));
    }
    if one_row {
        if let Ok(a) = x.extract::<PyReadonlyArray1<f32>>() {
            return Ok(a.as_array().to_owned().insert_axis(Axis(0)));
        }
        if let Ok(a) = x.extract::<PyReadonlyArray1<f64>>() {
            return Ok(a.as_array().mapv(|v| v as f32).insert_axis(Axis(0)));
        }
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be a {} float32 or float64 NumPy array{}",
        if one_row { "1-D or 2-D" } else { "2-D" },
        if one_row { ", or a list of str" } else { "" }
    )))
}

fn quantize_spec(quantize: Option<&str>) -> PyResult<Option<QuantSpec>> {
    quantize
        .map(|q| {
            q.parse::<QuantSpec>()
                .map_err(|e| PyValueError::new_err(format!("quantize={q:?}: {e}")))
        })
        .transpose()
}

impl PyIndex {
    fn open_at(path: PathBuf, encoder: Option<Py<PyEncoder>>, verify: bool) -> PyResult<Self> {
        if !path.is_file() {
            return Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
                "no index file {}",
                path.display()
            )));
        }
        let index = Index::open(&path, verify).map_err(index_err)?;
        let me = PyIndex {
            path,
            inner: RwLock::new(Arc::new(index)),
            encoder,
        };
        if let Some(e) = &me.encoder {
            let id = Python::attach(|py| e.get().with_pipeline(py, |p| p.identity()))
                .map_err(errors::core)?;
            me.index()
                .identity()
                .check_matches(&id)
                .map_err(index_err)?;
        }
        Ok(me)
    }

    fn index(&self) -> Arc<Index> {
        Arc::clone(&self.inner.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn encoder_for(&self, given: Option<Py<PyEncoder>>) -> Option<Py<PyEncoder>> {
        given.or_else(|| {
            self.encoder
                .as_ref()
                .map(|e| Python::attach(|py| e.clone_ref(py)))
        })
    }
}

/// The vectors of `texts` through `encoder`'s pipeline (its calibrator).
fn embed(py: Python<'_>, encoder: &PyEncoder, texts: &[String]) -> PyResult<Array2<f32>> {
    encoder
        .with_pipeline(py, |p: &mut Pipeline| p.encode(texts))
        .map_err(errors::core)
}

#[pymethods]
impl PyIndex {
    /// A new index at `path` (replaced once complete) from `vectors` (one row
    /// per sentence of `texts`, stored as given) or from `texts` embedded by
    /// `encoder`; `quantize` stores codes too (core's `index build --quantize`).
    /// `vectors` may be a file (core's `index build --vectors`): `.npy` or
    /// `.safetensors` with `texts`, or Parquet (Spark's output folder) with
    /// its sentences in `text_column` and vectors in `vector_column`.
    #[staticmethod]
    #[pyo3(signature = (path, vectors=None, texts=None, quantize=None, encoder=None, chunk=DEFAULT_CHUNK, text_column="text", vector_column="embedding"))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        path: PathBuf,
        vectors: Option<&Bound<'_, PyAny>>,
        texts: Option<&Bound<'_, PyAny>>,
        quantize: Option<&str>,
        encoder: Option<&Bound<'_, PyAny>>,
        chunk: usize,
        text_column: &str,
        vector_column: &str,
    ) -> PyResult<Self> {
        let spec = quantize_spec(quantize)?;
        let encoder = native_encoder(encoder)?;
        if let Some(file) = vectors.and_then(|v| v.extract::<PathBuf>().ok()) {
            let texts = texts.map(|t| extract_texts(t, "texts")).transpose()?;
            crate::vectors::build_from_file(
                py,
                &path,
                &file,
                texts,
                (text_column, vector_column),
                spec.as_ref(),
                encoder.as_ref(),
                chunk,
            )?;
            return PyIndex::open_at(path, encoder, false);
        }
        let texts = texts
            .map(|t| extract_texts(t, "texts"))
            .transpose()?
            .ok_or_else(|| PyValueError::new_err("give texts (one per row of vectors)"))?;
        let built = match (vectors, &encoder) {
            (Some(v), _) => {
                let m = matrix(v, "vectors", false)?;
                let identity: Identity = match &encoder {
                    Some(e) => e
                        .get()
                        .with_pipeline(py, |p| p.identity())
                        .map_err(errors::core)?,
                    None => external_identity(m.ncols()),
                };
                let quantize = match &spec {
                    Some(s) => QuantizeWith::Fit(s),
                    None => QuantizeWith::Nothing,
                };
                py.detach(|| {
                    let mut rows = MemoryRows::new(m.view());
                    let input = VectorsInput {
                        rows: &mut rows,
                        texts: Some(&texts),
                        what: "vectors".into(),
                    };
                    build_index_from_rows(&identity, input, chunk, &path, quantize, &*silent())
                })
            }
            (None, Some(e)) => e.get().with_pipeline(py, |p| {
                let quantize = QuantizeWith::of(p, spec.as_ref())?;
                build_index(p, &texts, chunk, &path, quantize)
            }),
            (None, None) => {
                return Err(PyValueError::new_err(
                    "give vectors, or an encoder to embed the texts",
                ))
            }
        };
        built.map_err(errors::core)?;
        PyIndex::open_at(path, encoder, false)
    }

    /// Opens the index at `path`; `encoder` (checked against the model,
    /// pooling and calibrator the index records) embeds sentence queries.
    #[staticmethod]
    #[pyo3(signature = (path, encoder=None, verify=false))]
    fn open(path: PathBuf, encoder: Option<&Bound<'_, PyAny>>, verify: bool) -> PyResult<Self> {
        PyIndex::open_at(path, native_encoder(encoder)?, verify)
    }

    /// The `k` best matches of each query, as faiss: `(scores, ids)`, float32
    /// cosines and int64 row numbers, shape `(queries, k)`, best first; rows
    /// past the index's size are `-inf` and `-1`. With `return_texts`, a
    /// third item: the sentences (lists of str). A quantized index scans its
    /// codes and rescores the best `rescore x k` exactly; bit codes keep
    /// `shortlist` times as many first, re-ranked by the query against the
    /// codes' signs (1: none).
    #[pyo3(signature = (queries, k=10, rescore=DEFAULT_RESCORE, exact=false, threads=0, return_texts=false, shortlist=DEFAULT_SHORTLIST))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        rescore: usize,
        exact: bool,
        threads: usize,
        return_texts: bool,
        shortlist: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let q = match extract_texts(queries, "queries") {
            Ok(texts) => {
                let enc = self.encoder.as_ref().ok_or_else(|| {
                    PyValueError::new_err(
                        "sentence queries need an encoder: Index.open(path, encoder=...)",
                    )
                })?;
                embed(py, enc.get(), &texts)?
            }
            Err(_) => matrix(queries, "queries", true)?,
        };
        let index = self.index();
        let params = SearchParams {
            rescore,
            shortlist,
            threads,
        };
        let hits = py
            .detach(|| {
                q.rows()
                    .into_iter()
                    .map(|row| {
                        let row: Vec<f32> = row.iter().copied().collect();
                        if exact {
                            index.search_exact(&row, k)
                        } else {
                            index.search_with(&row, k, &params)
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(index_err)?;
        let n = hits.len();
        let mut scores = Array2::from_elem((n, k), f32::NEG_INFINITY);
        let mut ids = Array2::from_elem((n, k), -1i64);
        let mut texts = Vec::with_capacity(n);
        for (r, row) in hits.iter().enumerate() {
            let mut these = Vec::with_capacity(row.len());
            for (c, &(i, s)) in row.iter().enumerate() {
                scores[(r, c)] = s;
                ids[(r, c)] = i as i64;
                if return_texts {
                    these.push(index.text(i).map_err(index_err)?.to_owned());
                }
            }
            texts.push(these);
        }
        let (scores, ids) = (scores.into_pyarray(py), ids.into_pyarray(py));
        if return_texts {
            PyTuple::new(
                py,
                [scores.into_any(), ids.into_any(), texts.into_pyobject(py)?],
            )
        } else {
            PyTuple::new(py, [scores.into_any(), ids.into_any()])
        }
    }

    /// Appends `vectors` (one row per sentence of `texts`) or `texts`
    /// embedded by `encoder` (default: the index's), coded with the index's
    /// quantizer; returns the sentences in the index.
    #[pyo3(signature = (vectors=None, texts=None, encoder=None, chunk=DEFAULT_CHUNK))]
    fn add(
        &self,
        py: Python<'_>,
        vectors: Option<&Bound<'_, PyAny>>,
        texts: Option<&Bound<'_, PyAny>>,
        encoder: Option<&Bound<'_, PyAny>>,
        chunk: usize,
    ) -> PyResult<usize> {
        let texts = texts
            .map(|t| extract_texts(t, "texts"))
            .transpose()?
            .ok_or_else(|| PyValueError::new_err("give texts (one per row of vectors)"))?;
        let encoder = self.encoder_for(native_encoder(encoder)?);
        let mut guard = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let path = self.path.clone();
        let result = match (vectors, &encoder) {
            (Some(v), _) => {
                let m = matrix(v, "vectors", false)?;
                let identity = match &encoder {
                    Some(e) => e
                        .get()
                        .with_pipeline(py, |p| p.identity())
                        .map_err(errors::core)?,
                    None => guard.identity().clone(),
                };
                py.detach(|| {
                    let mut writer = IndexWriter::append(&path, &identity)?;
                    let mut rows = MemoryRows::new(m.view());
                    let mut input = VectorsInput {
                        rows: &mut rows,
                        texts: Some(&texts),
                        what: "vectors".into(),
                    };
                    write_vectors(&mut input, chunk, &mut writer, &*silent())?;
                    Ok::<_, CoreError>(writer.finish()?)
                })
            }
            (None, Some(e)) => e.get().with_pipeline(py, |p| {
                let mut writer = IndexWriter::append(&path, &p.identity()?)?;
                embed_into_index(p, &texts, chunk, &mut writer)?;
                Ok(writer.finish()?)
            }),
            (None, None) => {
                return Err(PyValueError::new_err(
                    "give vectors, or an encoder to embed the texts",
                ))
            }
        };
        let total = result.map_err(errors::core)?;
        *guard = Arc::new(Index::open(&path, false).map_err(index_err)?);
        Ok(total as usize)
    }

    /// The sentence of row `i`.
    fn text(&self, i: usize) -> PyResult<String> {
        let index = self.index();
        if i >= index.len() {
            return Err(PyValueError::new_err(format!(
                "row {i} of an index of {} sentences",
                index.len()
            )));
        }
        Ok(index.text(i).map_err(index_err)?.to_owned())
    }

    fn __len__(&self) -> usize {
        self.index().len()
    }

    /// Length of every vector.
    #[getter]
    fn dimension(&self) -> usize {
        self.index().identity().dimension
    }

    /// The quantizer spec (e.g. ``"binary:itq=true"``), or None without codes.
    #[getter]
    fn quantizer(&self) -> Option<String> {
        self.index().quantizer().map(|q| q.spec.clone())
    }

    /// The model (``name@fingerprint``, or ``"external"`` for vectors made
    /// without an Encoder) whose vectors the index holds.
    #[getter]
    fn model(&self) -> String {
        self.index().identity().model.clone()
    }

    /// The file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn __repr__(&self) -> String {
        let index = self.index();
        format!(
            "Index({:?}, sentences={}, dimension={}, quantizer={:?}, model={:?})",
            self.path.display().to_string(),
            index.len(),
            index.identity().dimension,
            index.quantizer().map(|q| q.spec.as_str()),
            index.identity().model
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndex>()?;
    m.add("DEFAULT_RESCORE", DEFAULT_RESCORE)?;
    m.add("DEFAULT_SHORTLIST", DEFAULT_SHORTLIST)?;
    Ok(())
}
