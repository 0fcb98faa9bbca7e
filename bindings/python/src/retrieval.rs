//! `Retriever`: bertflow-core's `Retriever` (sparse vectors of SPLADE and
//! BGE-M3 models, per-token vectors, late interaction). The Python class
//! `bertflow.SparseEncoder` wraps it (SciPy CSR matrices, decoding).

use std::path::PathBuf;

use bertflow_core::defaults::BATCH_SIZE;
use bertflow_core::encoder::head::{Outputs, RetrievalOptions};
use bertflow_core::progress::silent;
use bertflow_core::retrieval::{maxsim, Retriever, SparseVector};
use bertflow_core::{EmbedderConfig, Precision};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::encoder::extract_texts;
use crate::errors;

/// A model with its retrieval heads (see ``bertflow.SparseEncoder``).
#[pyclass(module = "bertflow._bertflow", name = "Retriever", frozen)]
pub struct PyRetriever {
    inner: Retriever,
}

/// CSR parts (indptr, indices, values) of sparse vectors.
type Csr<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<f32>>,
);

fn csr<'py>(py: Python<'py>, vecs: &[SparseVector]) -> Csr<'py> {
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for v in vecs {
        indices.extend(v.indices.iter().map(|&i| i as i32));
        values.extend_from_slice(&v.values);
        indptr.push(indices.len() as i64);
    }
    (
        indptr.into_pyarray(py),
        indices.into_pyarray(py),
        values.into_pyarray(py),
    )
}

#[pymethods]
impl PyRetriever {
    #[new]
    #[pyo3(signature = (model, max_len=None, threads=None, batch_size=BATCH_SIZE, precision=None, cache_dir=None))]
    fn new(
        py: Python<'_>,
        model: PathBuf,
        max_len: Option<usize>,
        threads: Option<usize>,
        batch_size: usize,
        precision: Option<&str>,
        cache_dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        let mut cfg = EmbedderConfig {
            model: model.to_string_lossy().into_owned(),
            runtime: bertflow_core::RuntimeConfig {
                max_len,
                threads,
                batch_size,
                cache_dir,
                ..Default::default()
            },
            ..EmbedderConfig::default()
        };
        if let Some(p) = precision {
            cfg.runtime.precision = p.parse::<Precision>().map_err(errors::encoder)?;
        }
        let inner = py
            .detach(|| Retriever::open(&cfg, silent()))
            .map_err(errors::core)?;
        Ok(Self { inner })
    }

    /// ``(indptr, indices, values)`` of the sparse vectors of ``texts`` (CSR).
    #[pyo3(signature = (texts, max_active_dims=None))]
    fn encode_sparse<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        max_active_dims: Option<usize>,
    ) -> PyResult<Csr<'py>> {
        let texts = extract_texts(texts, "texts")?;
        let vecs = py
            .detach(|| self.inner.encode_sparse(&texts, max_active_dims))
            .map_err(errors::core)?;
        Ok(csr(py, &vecs))
    }

    /// One ``[tokens, dim]`` array per text.
    #[pyo3(signature = (texts, skip_first=None, query_length=None))]
    fn encode_multi<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        skip_first: Option<bool>,
        query_length: Option<usize>,
    ) -> PyResult<Vec<Bound<'py, PyArray2<f32>>>> {
        let texts = extract_texts(texts, "texts")?;
        let mats = py
            .detach(|| self.inner.encode_multi(&texts, skip_first, query_length))
            .map_err(errors::core)?;
        Ok(mats.into_iter().map(|m| m.into_pyarray(py)).collect())
    }

    /// Every output of ``outputs`` (``"dense,sparse,multi"``) from one pass,
    /// as a dict: ``dense`` (array), ``sparse`` (CSR parts), ``multi`` (list).
    #[pyo3(signature = (texts, outputs="dense,sparse,multi", max_active_dims=None, skip_first=None, query_length=None))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        outputs: &str,
        max_active_dims: Option<usize>,
        skip_first: Option<bool>,
        query_length: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let texts = extract_texts(texts, "texts")?;
        let opts = RetrievalOptions {
            outputs: Outputs::parse(outputs).map_err(PyValueError::new_err)?,
            max_active_dims,
            skip_first,
            query_length,
        };
        let got = py
            .detach(|| self.inner.encode(&texts, &opts))
            .map_err(errors::core)?;
        let d = PyDict::new(py);
        if let Some(m) = got.dense {
            d.set_item("dense", m.into_pyarray(py))?;
        }
        if let Some(s) = got.sparse {
            d.set_item("sparse", csr(py, &s))?;
        }
        if let Some(m) = got.multi {
            let list: Vec<_> = m.into_iter().map(|m| m.into_pyarray(py)).collect();
            d.set_item("multi", list)?;
        }
        Ok(d)
    }

    /// The ``top_k`` largest entries of one sparse vector as (token, weight).
    #[pyo3(signature = (indices, values, top_k=None))]
    fn decode(
        &self,
        indices: Vec<u32>,
        values: Vec<f32>,
        top_k: Option<usize>,
    ) -> PyResult<Vec<(String, f32)>> {
        let v = SparseVector::from_pairs(indices.into_iter().zip(values).collect());
        let k = top_k.unwrap_or(v.nnz());
        if k == 0 {
            return Err(PyValueError::new_err("top_k must be a positive integer"));
        }
        Ok(self.inner.decode(&v, k))
    }

    /// MaxSim scores of ``texts`` against ``query``.
    #[pyo3(signature = (query, texts, query_length=None, skip_first=None))]
    fn late_interaction(
        &self,
        py: Python<'_>,
        query: &str,
        texts: &Bound<'_, PyAny>,
        query_length: Option<usize>,
        skip_first: Option<bool>,
    ) -> PyResult<Vec<f32>> {
        let texts = extract_texts(texts, "texts")?;
        py.detach(|| {
            self.inner
                .late_interaction(query, &texts, query_length, skip_first)
        })
        .map_err(errors::core)
    }

    /// The sparse vectors' dimension (the vocabulary size).
    #[getter]
    fn sparse_dim(&self) -> usize {
        self.inner.encoder.sparse_dim()
    }

    /// The per-token vectors' dimension.
    #[getter]
    fn multi_dim(&self) -> usize {
        self.inner.encoder.multi_dim()
    }

    /// ``"splade"``, ``"bge-m3"`` or None.
    #[getter]
    fn sparse_kind(&self) -> Option<&'static str> {
        self.inner.encoder.sparse_kind()
    }

    #[getter]
    fn model_id(&self) -> String {
        self.inner.encoder.encoder().model_id().to_string()
    }
}

/// ColBERT's MaxSim of a query's and a document's token vectors.
#[pyfunction]
fn maxsim_score(query: PyReadonlyArray2<'_, f32>, doc: PyReadonlyArray2<'_, f32>) -> PyResult<f32> {
    maxsim(query.as_array(), doc.as_array()).map_err(errors::core)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRetriever>()?;
    m.add_function(wrap_pyfunction!(maxsim_score, m)?)?;
    Ok(())
}
