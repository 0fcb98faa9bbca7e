//! `Reranker`: a bertflow-core `Reranker` (a cross-encoder scoring a query
//! against texts, as text-embeddings-inference's `/rerank` and `/predict`).

use std::path::PathBuf;

use bertflow_core::defaults::{BATCH_SIZE, RERANK_RAW_SCORES, RERANK_TRUNCATE};
use bertflow_core::progress::silent;
use bertflow_core::rerank::ranked;
use bertflow_core::{Precision, Reranker, RerankerConfig, RuntimeConfig};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::encoder::extract_texts;
use crate::errors;

/// A reranker (cross-encoder): a checkpoint whose config.json names a
/// ``*ForSequenceClassification`` architecture (BERT, RoBERTa, XLM-RoBERTa,
/// CamemBERT, DistilBERT, MPNet, ModernBERT), scoring a query and a text read
/// together.
///
/// Args:
///     model: A directory in Hugging Face layout, or a hub id (e.g.
///         ``"cross-encoder/ms-marco-MiniLM-L6-v2"``, ``"BAAI/bge-reranker-base"``)
///         found in the local Hugging Face cache (nothing is downloaded). An
///         embedding model is a ``ValueError``.
///     max_len: The most tokens of a query and text together, special tokens
///         included. Default: the model's position limit.
///     threads: Worker threads. Default: ``$BERTFLOW_THREADS``, else every core.
///     batch_size: Pairs per forward pass (sorted by length first).
///     precision: ``"fp32"`` or ``"int8"`` (the transformer layers' products;
///         the classification head stays fp32).
///     cache_dir: Where the kernels chosen for this CPU are kept (kernels.json).
///
/// Example::
///
///     rr = bertflow.Reranker("cross-encoder/ms-marco-MiniLM-L6-v2")
///     rr.rerank("what is panda?", ["hi", "The giant panda is a bear."])
///     # [{'index': 1, 'score': 0.99...}, {'index': 0, 'score': 0.0...}]
#[pyclass(module = "bertflow._bertflow", name = "Reranker", frozen)]
pub struct PyReranker {
    inner: Reranker,
    precision: String,
}

/// `(text, pair)` inputs from a list of str or of (str, str) pairs.
fn extract_pairs(items: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Option<String>)>> {
    if items.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "pairs must be a list of str or of (str, str) pairs, not a single str; wrap it in a list",
        ));
    }
    let iter = items
        .try_iter()
        .map_err(|_| PyTypeError::new_err("pairs must be a list of str or of (str, str) pairs"))?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        if let Ok(s) = item.cast::<PyString>() {
            out.push((s.to_cow()?.into_owned(), None));
            continue;
        }
        let pair = (item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>())
            .then(|| item.extract::<Vec<String>>().ok())
            .flatten()
            .and_then(|v| <[String; 2]>::try_from(v).ok())
            .ok_or_else(|| {
                PyTypeError::new_err(format!(
                    "pairs[{i}] is {}, not a str or a (str, str) pair",
                    item.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))
            })?;
        let [a, b] = pair;
        out.push((a, Some(b)));
    }
    if out.is_empty() {
        return Err(PyValueError::new_err("pairs is empty: give at least one"));
    }
    Ok(out)
}

#[pymethods]
impl PyReranker {
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
        let mut config = RerankerConfig {
            runtime: RuntimeConfig {
                max_len,
                threads,
                batch_size,
                cache_dir,
                ..RuntimeConfig::default()
            },
            ..RerankerConfig::new(model.to_string_lossy())
        };
        if let Some(p) = precision {
            config.runtime.precision = p.parse::<Precision>().map_err(errors::encoder)?;
        }
        let inner = py.detach(|| config.open(silent())).map_err(errors::core)?;
        Ok(Self {
            inner,
            precision: config.runtime.precision.to_string(),
        })
    }

    /// The texts ranked against ``query``, best first, as
    /// text-embeddings-inference's ``/rerank``: a list of dicts ``{"index",
    /// "score"}`` (``"text"`` too with ``return_text``), ``index`` the text's
    /// position in ``texts``. Scores are the sigmoid of the model's logit
    /// (0 to 1), or the logit itself with ``raw_scores``. A query and text
    /// longer than ``max_len`` tokens together are cut (the longer of the two
    /// loses tokens) when ``truncate``, else a ``ValueError``. A model of more
    /// than one label is a ``ValueError``: use ``predict``.
    #[pyo3(signature = (query, texts, raw_scores=RERANK_RAW_SCORES, return_text=false, truncate=RERANK_TRUNCATE))]
    fn rerank<'py>(
        &self,
        py: Python<'py>,
        query: String,
        texts: &Bound<'py, PyAny>,
        raw_scores: bool,
        return_text: bool,
        truncate: bool,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let texts = extract_texts(texts, "texts")?;
        let scores = py
            .detach(|| self.inner.rerank(&query, &texts, raw_scores, truncate))
            .map_err(errors::core)?;
        ranked(&scores)
            .into_iter()
            .map(|r| {
                let d = PyDict::new(py);
                d.set_item("index", r.index)?;
                d.set_item("score", r.score)?;
                if return_text {
                    d.set_item("text", &texts[r.index])?;
                }
                Ok(d)
            })
            .collect()
    }

    /// The raw classifier logits (float32, one row per input, one column per
    /// label in ``labels`` order) of each input: a str, or a ``(text,
    /// text_pair)`` pair read as one sequence (as text-embeddings-inference's
    /// ``/predict``); ``truncate`` as in ``rerank``.
    #[pyo3(signature = (pairs, truncate=RERANK_TRUNCATE))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        pairs: &Bound<'py, PyAny>,
        truncate: bool,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let inputs = extract_pairs(pairs)?;
        let logits = py
            .detach(|| self.inner.predict(&inputs, truncate))
            .map_err(errors::core)?;
        let k = self.inner.labels().len();
        let flat: Vec<f32> = logits.into_iter().flatten().collect();
        let m = Array2::from_shape_vec((inputs.len(), k), flat)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(m.into_pyarray(py))
    }

    /// The labels, one per logit (config.json's ``id2label``).
    #[getter]
    fn labels(&self) -> Vec<String> {
        self.inner.labels().to_vec()
    }

    /// The most tokens of a query and text together, special tokens included.
    #[getter]
    fn max_len(&self) -> usize {
        self.inner.max_len()
    }

    /// The model as given.
    #[getter]
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    /// The checkpoint's ``*ForSequenceClassification`` class.
    #[getter]
    fn architecture(&self) -> &str {
        self.inner.class()
    }

    #[getter]
    fn precision(&self) -> &str {
        &self.precision
    }

    fn __repr__(&self) -> String {
        format!(
            "Reranker(model={:?}, labels={:?}, max_len={}, precision={:?})",
            self.inner.model_id(),
            self.inner.labels(),
            self.inner.max_len(),
            self.precision
        )
    }
}

/// Whether `model` (a directory or a hub id in the local cache) is a reranker:
/// its config.json names a ``*ForSequenceClassification`` architecture.
#[pyfunction]
fn is_reranker(model: PathBuf) -> PyResult<bool> {
    bertflow_core::rerank::is_reranker(&model.to_string_lossy()).map_err(errors::core)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyReranker>()?;
    m.add_function(wrap_pyfunction!(is_reranker, m)?)?;
    Ok(())
}
