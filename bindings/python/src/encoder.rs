//! `Encoder`: bertflow-core's `Embedder` (a loaded BERT model with the
//! embedding cache) and one pooling.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bertflow_core::fitting::check_weighting;
use bertflow_core::progress::silent;
use bertflow_core::weighting::{from_meta, to_meta, Weighting};
use bertflow_core::{model_identity, Bar, Embedder, EmbedderConfig, Progress, SharedProgress};
use bertflow_encoder::{EmbeddingCache, Pooling, Precision, TokenWeights, WeightingSpec, POOLINGS};
use numpy::{IntoPyArray, PyArray2};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::calib::PyFitted;
use crate::errors;

/// A BERT model with one pooling (see `bertflow.Encoder`).
#[pyclass(module = "bertflow._bertflow", name = "Encoder", frozen)]
pub struct PyEncoder {
    /// Locked for the duration of one `encode` (which uses every worker
    /// thread anyway), to set its batch size and progress callback.
    embedder: Mutex<Embedder>,
    pooling: Pooling,
    dim: usize,
    model_id: String,
    fingerprint: String,
    identity: String,
    max_len: usize,
    num_layers: usize,
    threads: usize,
    cache_dir: Option<PathBuf>,
    precision: String,
    /// The token weighting and where its frequencies come from.
    weighting: Weighting,
    /// Its weights, once known (from `freq_file`, `fit_weighting` or a
    /// calibrator file); `None` for the plain mean.
    weights: Mutex<Option<TokenWeights>>,
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

/// Progress of one `encode` call, forwarded to a Python callable
/// `progress(done, total)` (under the GIL, from the worker threads).
struct CallbackProgress(Option<Py<PyAny>>);

struct CallbackBar {
    cb: Option<Py<PyAny>>,
    len: AtomicU64,
}

impl Progress for CallbackProgress {
    fn bar(&self, len: u64, _label: &str, _unit: &str) -> Box<dyn Bar> {
        let cb = self
            .0
            .as_ref()
            .map(|c| Python::attach(|py| c.clone_ref(py)));
        Box::new(CallbackBar {
            cb,
            len: AtomicU64::new(len),
        })
    }
    fn note(&self, _msg: &str) {}
}

impl Bar for CallbackBar {
    fn set_length(&self, len: u64) {
        self.len.store(len, Ordering::Relaxed);
    }
    fn set_position(&self, pos: u64) {
        if let Some(cb) = &self.cb {
            let total = self.len.load(Ordering::Relaxed);
            Python::attach(|py| {
                if let Err(e) = cb.call1(py, (pos, total)) {
                    e.write_unraisable(py, Some(cb.bind(py)));
                }
            });
        }
    }
    fn inc(&self, _delta: u64) {}
}

impl PyEncoder {
    /// The calibrator-file record of the current weights (None: plain mean).
    pub(crate) fn weighting_record(&self) -> PyResult<Option<bertflow_calib::WeightingMeta>> {
        let w = self.weights.lock().unwrap_or_else(|p| p.into_inner());
        match (&*w, self.weighting.is_plain_mean()) {
            (_, true) => Ok(None),
            (Some(w), false) => Ok(Some(to_meta(w, self.weighting.counts_from()))),
            (None, false) => Err(not_fitted(&self.weighting)),
        }
    }
}

#[pymethods]
impl PyEncoder {
    #[new]
    #[pyo3(signature = (model, pooling, max_len=None, threads=None, cache_dir=None, precision="fp32", weighting="mean", freq_file=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: String,
        pooling: &str,
        max_len: Option<usize>,
        threads: Option<usize>,
        cache_dir: Option<PathBuf>,
        precision: &str,
        weighting: &str,
        freq_file: Option<PathBuf>,
    ) -> PyResult<Self> {
        let pooling: Pooling = pooling.parse().map_err(errors::encoder)?;
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let precision: Precision = precision.parse().map_err(errors::encoder)?;
        let spec: WeightingSpec = weighting.parse().map_err(errors::encoder)?;
        let weighting = Weighting {
            spec,
            freq_file,
            fixed: None,
        };
        let config = EmbedderConfig {
            model,
            max_len,
            threads,
            no_cache: cache_dir.is_none(),
            cache_dir,
            precision,
            ..Default::default()
        };
        let (embedder, weights) = py
            .detach(|| {
                let e = config.load(silent())?;
                check_weighting(&e.encoder, &pooling, &weighting)?;
                // Frequencies from a file are known now; from a corpus, at fit_weighting.
                let w = match (&weighting.freq_file, weighting.spec.needs_counts()) {
                    (Some(_), _) | (None, false) => weighting.weights(&e.encoder, &[])?,
                    (None, true) => None,
                };
                Ok::<_, bertflow_core::CoreError>((e, w))
            })
            .map_err(errors::core)?;
        let enc = &embedder.encoder;
        let dim = bertflow_core::st_pipeline::dim(enc, &pooling).map_err(errors::core)?;
        Ok(PyEncoder {
            pooling,
            dim,
            model_id: enc.model_id().to_string(),
            fingerprint: enc.fingerprint().to_string(),
            identity: model_identity(enc),
            max_len: enc.max_len(),
            num_layers: enc.num_layers(),
            threads: embedder.opts.threads,
            cache_dir: embedder.cache.as_ref().map(|c| c.dir().to_path_buf()),
            precision: precision.to_string(),
            weighting,
            weights: Mutex::new(weights),
            embedder: Mutex::new(embedder),
        })
    }

    /// Counts word-piece frequencies on `texts` for the weighting (GIL released).
    fn fit_weighting(&self, py: Python<'_>, texts: &Bound<'_, PyAny>) -> PyResult<()> {
        let texts = extract_texts(texts, "texts")?;
        let w = py
            .detach(|| {
                let e = self.embedder.lock().unwrap_or_else(|p| p.into_inner());
                let w = Weighting {
                    freq_file: None,
                    ..self.weighting.clone()
                };
                w.weights(&e.encoder, &texts)
            })
            .map_err(errors::core)?;
        *self.weights.lock().unwrap_or_else(|p| p.into_inner()) = w;
        Ok(())
    }

    /// Takes the token weights recorded in a calibrator file (refused when
    /// its weighting is not this encoder's).
    fn use_weights_of(&self, fitted: &PyFitted) -> PyResult<()> {
        let own = fitted.weighting_meta();
        let w = own.map(from_meta).transpose().map_err(errors::core)?;
        let label = w
            .as_ref()
            .map(|w| Weighting::new(w.spec.clone()).label())
            .unwrap_or_else(|| "mean".into());
        if label != self.weighting.label() {
            return Err(PyValueError::new_err(format!(
                "the calibrator was fitted with weighting {label}, this encoder has {}",
                self.weighting.label()
            )));
        }
        *self.weights.lock().unwrap_or_else(|p| p.into_inner()) = w;
        Ok(())
    }

    /// The weighting spec (`mean` for the plain mean).
    #[getter]
    fn weighting(&self) -> String {
        self.weighting.label()
    }

    /// Whether the weighting's word-piece frequencies are known.
    #[getter]
    fn weighting_ready(&self) -> bool {
        self.weighting.is_plain_mean()
            || self
                .weights
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
    }

    /// fp32 or int8.
    #[getter]
    fn precision(&self) -> &str {
        &self.precision
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
        let progress: SharedProgress = Arc::new(CallbackProgress(progress));
        let m = py
            .detach(|| {
                let weights = self
                    .weights
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                if weights.is_none() && !self.weighting.is_plain_mean() {
                    return Err(None);
                }
                let mut e = self.embedder.lock().unwrap_or_else(|p| p.into_inner());
                e.opts.batch_size = batch_size;
                e.progress = progress;
                let r = e.embed_weighted(&texts, &self.pooling, weights.as_ref());
                e.progress = silent();
                r.map_err(Some)
            })
            .map_err(|e| match e {
                Some(e) => errors::core(e),
                None => not_fitted(&self.weighting),
            })?;
        Ok(m.into_pyarray(py))
    }

    /// Embedding dimension.
    #[getter]
    fn dimension(&self) -> usize {
        self.dim
    }

    /// The model as given (directory or hub id).
    #[getter]
    fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Short hash of the model files: equal fingerprints give equal vectors.
    #[getter]
    fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The model identity recorded in calibrator files (`name@fingerprint`),
    /// as the CLI writes it.
    #[getter]
    fn identity(&self) -> &str {
        &self.identity
    }

    /// Canonical name of the pooling.
    #[getter]
    fn pooling(&self) -> String {
        self.pooling.to_string()
    }

    /// Token limit per sentence, [CLS] and [SEP] included.
    #[getter]
    fn max_len(&self) -> usize {
        self.max_len
    }

    /// Worker threads.
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    /// Number of transformer layers.
    #[getter]
    fn num_layers(&self) -> usize {
        self.num_layers
    }

    /// The cache folder, or None when the cache is off.
    #[getter]
    fn cache_dir(&self) -> Option<PathBuf> {
        self.cache_dir.clone()
    }
}

fn not_fitted(w: &Weighting) -> PyErr {
    PyValueError::new_err(format!(
        "weighting {} needs word-piece frequencies: call fit_weighting(corpus) first, \
         or pass freq_file",
        w.label()
    ))
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
