//! `Encoder`: a loaded BERT model, one pooling, and the embedding cache.

use std::path::PathBuf;

use bertflow_encoder::{
    CachedEntry, EmbeddingCache, EncodeOptions, Encoder, EncoderError, PoolSource, Pooling,
    POOLINGS,
};
use ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors;

/// A BERT model with one pooling (see `bertflow.Encoder`).
#[pyclass(module = "bertflow._bertflow", name = "Encoder", frozen)]
pub struct PyEncoder {
    encoder: Encoder,
    pooling: Pooling,
    source: PoolSource,
    threads: usize,
    cache: Option<EmbeddingCache>,
}

/// A list of str from any iterable of str (not a single str or bytes).
pub fn extract_texts(texts: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<String>> {
    if texts.is_instance_of::<PyString>() || texts.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a list of str, not a single {}; wrap it in a list",
            texts.get_type().name()?
        )));
    }
    let iter = texts.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a list of str, not {}",
            texts
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}[{i}] is {}, not str",
                item.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        out.push(s.to_cow()?.into_owned());
    }
    if out.is_empty() {
        return Err(PyValueError::new_err(format!(
            "{what} is empty: give at least one sentence"
        )));
    }
    Ok(out)
}

impl PyEncoder {
    /// Embeddings of `texts`, through the cache (the CLI's key, so the two
    /// share entries).
    // TODO: delegate to bertflow-core's Embedder once crates/core is on main.
    fn embed(
        &self,
        texts: &[String],
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Array2<f32>, EncoderError> {
        let enc = &self.encoder;
        let key = EmbeddingCache::key(enc.fingerprint(), &self.source.key(), enc.max_len(), texts);
        if let Some(cache) = &self.cache {
            if let Some(e) = cache.get(&key, texts.len()) {
                if e.embeddings.ncols() == enc.dim() {
                    progress(texts.len());
                    return Ok(e.embeddings);
                }
            }
        }
        let opts = EncodeOptions {
            batch_size,
            threads: self.threads,
        };
        let mut out = enc.encode(texts, std::slice::from_ref(&self.source), &opts, progress)?;
        let truncated = out.num_truncated();
        let m = out.embeddings.remove(0);
        if let Some(cache) = &self.cache {
            let entry = CachedEntry {
                embeddings: m,
                truncated,
            };
            // A cache that cannot be written only costs time later.
            let _ = cache.put(&key, &entry);
            return Ok(entry.embeddings);
        }
        Ok(m)
    }
}

#[pymethods]
impl PyEncoder {
    #[new]
    #[pyo3(signature = (model, pooling, max_len=None, threads=None, cache_dir=None))]
    fn new(
        py: Python<'_>,
        model: String,
        pooling: &str,
        max_len: Option<usize>,
        threads: Option<usize>,
        cache_dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        let pooling: Pooling = pooling.parse().map_err(errors::encoder)?;
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let encoder = py
            .detach(|| Encoder::load(&model, max_len))
            .map_err(errors::encoder)?;
        let source = encoder.source(&pooling).map_err(errors::encoder)?;
        Ok(PyEncoder {
            encoder,
            pooling,
            source,
            threads: threads.unwrap_or_else(|| EncodeOptions::default().threads),
            cache: cache_dir.map(EmbeddingCache::new),
        })
    }

    /// Embeddings of `texts` (float32, one row per text, in order).
    #[pyo3(signature = (texts, batch_size=32, progress=None))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        batch_size: usize,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        let texts = extract_texts(texts, "texts")?;
        let total = texts.len();
        let report = |done: usize| {
            if let Some(cb) = &progress {
                Python::attach(|py| {
                    if let Err(e) = cb.call1(py, (done, total)) {
                        e.write_unraisable(py, Some(cb.bind(py)));
                    }
                });
            }
        };
        let m = py
            .detach(|| self.embed(&texts, batch_size, &report))
            .map_err(errors::encoder)?;
        Ok(m.into_pyarray(py))
    }

    /// Embedding dimension.
    #[getter]
    fn dimension(&self) -> usize {
        self.encoder.dim()
    }

    /// The model as given (directory or hub id).
    #[getter]
    fn model_id(&self) -> &str {
        self.encoder.model_id()
    }

    /// Short hash of the model files: equal fingerprints give equal vectors.
    #[getter]
    fn fingerprint(&self) -> &str {
        self.encoder.fingerprint()
    }

    /// The model identity recorded in calibrator files (`name@fingerprint`),
    /// as the CLI writes it.
    // TODO: delegate to bertflow-core once crates/core is on main.
    #[getter]
    fn identity(&self) -> String {
        let name = self
            .encoder
            .files()
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.encoder.model_id().to_string());
        format!("{name}@{}", self.encoder.fingerprint())
    }

    /// Canonical name of the pooling.
    #[getter]
    fn pooling(&self) -> String {
        self.pooling.to_string()
    }

    /// Token limit per sentence, [CLS] and [SEP] included.
    #[getter]
    fn max_len(&self) -> usize {
        self.encoder.max_len()
    }

    /// Worker threads.
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    /// Number of transformer layers.
    #[getter]
    fn num_layers(&self) -> usize {
        self.encoder.num_layers()
    }

    /// The cache folder, or None when the cache is off.
    #[getter]
    fn cache_dir(&self) -> Option<PathBuf> {
        self.cache.as_ref().map(|c| c.dir().to_path_buf())
    }
}

/// Every named pooling with its one-line description.
#[pyfunction]
fn poolings() -> Vec<(&'static str, &'static str)> {
    POOLINGS.to_vec()
}

/// The canonical name of a pooling, or ValueError.
#[pyfunction]
fn canonical_pooling(name: &str) -> PyResult<String> {
    let p: Pooling = name.parse().map_err(errors::encoder)?;
    Ok(p.to_string())
}

/// `$BERTFLOW_CACHE`, else `$XDG_CACHE_HOME/bertflow`, else `~/.cache/bertflow`.
#[pyfunction]
fn default_cache_dir() -> PathBuf {
    EmbeddingCache::default_dir()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEncoder>()?;
    m.add_function(wrap_pyfunction!(poolings, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_pooling, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)?;
    Ok(())
}
