//! `Encoder`: a bertflow-core `Pipeline` without calibrator (a loaded BERT
//! model with the embedding cache, one pooling and its token weighting).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bertflow_core::encoder::EmbeddingCache;
use bertflow_core::progress::silent;
use bertflow_core::prompt::{for_role, Role};
use bertflow_core::PromptConfig;
use bertflow_core::{
    Bar, Pipeline, PipelineConfig, Pooling, Precision, Progress, SharedProgress, WeightingSpec,
    POOLINGS,
};
use numpy::{IntoPyArray, PyArray2};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors;
use crate::fitted::PyFitted;

/// A BERT model with one pooling (see `bertflow.Encoder`).
#[pyclass(module = "bertflow._bertflow", name = "Encoder", frozen)]
pub struct PyEncoder {
    /// Locked for the duration of one `encode` (which uses every worker
    /// thread anyway), to set its batch size and progress callback; never
    /// locked while holding the GIL (the progress callback needs it).
    pipeline: Mutex<Pipeline>,
    pooling: String,
    /// The token weighting's label (`mean` for the plain mean).
    weighting: String,
    dim: usize,
    model_id: String,
    fingerprint: String,
    identity: String,
    max_len: usize,
    num_layers: usize,
    threads: usize,
    cache_dir: Option<PathBuf>,
    precision: String,
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
    /// The pipeline, locked with the GIL released.
    pub(crate) fn with_pipeline<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Pipeline) -> T + Send,
    ) -> T {
        py.detach(|| f(&mut self.pipeline.lock().unwrap_or_else(|p| p.into_inner())))
    }

    /// `encode`, `encode_query` and `encode_document`: `asked` resolved for
    /// `role` by core's rule, then the pipeline's encode with that prompt.
    #[allow(clippy::too_many_arguments)]
    fn encode_with<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        batch_size: Option<usize>,
        progress: Option<Py<PyAny>>,
        normalize: bool,
        asked: PromptConfig,
        role: Option<Role>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let texts = extract_texts(texts, "texts")?;
        let progress: SharedProgress = Arc::new(CallbackProgress(progress));
        let m = self
            .with_pipeline(py, |p| {
                let asked = match role {
                    Some(role) => for_role(&p.embedder().prompts, &asked, role),
                    None => asked,
                };
                let batch = batch_size.unwrap_or(bertflow_core::defaults::BATCH_SIZE);
                p.embedder_mut().set_batch_size(batch)?;
                p.embedder_mut().progress = progress;
                let r = p.encode_prompted(&texts, &asked);
                p.embedder_mut().progress = silent();
                let mut m = r?;
                if normalize {
                    Pipeline::normalize(&mut m);
                }
                Ok::<_, bertflow_core::CoreError>(m)
            })
            .map_err(errors::core)?;
        Ok(m.into_pyarray(py))
    }

    /// The calibrator-file record of the current weights (None: plain mean).
    pub(crate) fn weighting_record(&self) -> PyResult<Option<bertflow_core::calib::WeightingMeta>> {
        Python::attach(|py| self.with_pipeline(py, |p| p.weighting().record()))
            .map_err(errors::core)
    }
}

#[pymethods]
impl PyEncoder {
    /// Every argument left as None takes core's default (`bertflow.defaults()`);
    /// `calibrator` is a calibrator file's path or a fitted `Calibrator`, checked
    /// against the model, pooling and weighting as the CLI's `--calibrator`.
    #[new]
    #[pyo3(signature = (model=None, pooling=None, max_len=None, threads=None, cache_dir=None, precision=None, weighting=None, freq_file=None, calibrator=None, allow_mismatch=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: Option<String>,
        pooling: Option<&str>,
        max_len: Option<usize>,
        threads: Option<usize>,
        cache_dir: Option<PathBuf>,
        precision: Option<&str>,
        weighting: Option<&str>,
        freq_file: Option<PathBuf>,
        calibrator: Option<&Bound<'_, PyAny>>,
        allow_mismatch: bool,
    ) -> PyResult<Self> {
        let mut config = PipelineConfig::default();
        if let Some(m) = model {
            config.model.model = m;
        }
        config.pooling = pooling
            .map(str::parse::<Pooling>)
            .transpose()
            .map_err(errors::encoder)?;
        config.model.runtime.max_len = max_len;
        config.model.runtime.threads = threads;
        config.model.no_cache = cache_dir.is_none();
        config.model.runtime.cache_dir = cache_dir;
        if let Some(p) = precision {
            config.model.runtime.precision = p.parse::<Precision>().map_err(errors::encoder)?;
        }
        if let Some(w) = weighting {
            config.weighting.spec = w.parse::<WeightingSpec>().map_err(errors::encoder)?;
        }
        config.weighting.freq_file = freq_file;
        config.allow_mismatch = allow_mismatch;
        // A file is opened by core (before the model loads); a Calibrator
        // object is checked the same way once the model is there.
        let in_memory = match calibrator {
            None => None,
            Some(c) => match c.cast::<PyFitted>() {
                Ok(f) => {
                    let f = f.borrow();
                    if f.meta.is_external() && !allow_mismatch {
                        // Fitted on a bare matrix: nothing says which model
                        // and pooling made it, so name the fit that records them.
                        return Err(PyValueError::new_err(
                            "this Calibrator records no model and pooling (it was fitted \
                             without source=enc), so it cannot be checked against this Encoder: \
                             fit it with \
                             cal.fit(enc.encode(texts), source=enc), enc the bertflow.Encoder \
                             that made them (or pass allow_mismatch=True to use it unchecked)",
                        ));
                    }
                    Some((f.fitted.clone(), f.meta.clone()))
                }
                Err(_) => {
                    config.calibrator = Some(c.extract::<PathBuf>().map_err(|_| {
                        PyTypeError::new_err(format!(
                            "calibrator must be a path or a bertflow Calibrator, not {}",
                            c.get_type()
                                .name()
                                .map(|n| n.to_string())
                                .unwrap_or_default()
                        ))
                    })?);
                    None
                }
            },
        };
        // Frequencies from a file are read now; from a corpus, at fit_weighting.
        let pipeline = py
            .detach(|| match in_memory {
                None => config.open(silent()),
                Some((fitted, meta)) => config.open_with(
                    Some(bertflow_core::LoadedCalibrator::from_parts(
                        fitted,
                        meta,
                        "(a Calibrator object)",
                        allow_mismatch,
                    )),
                    silent(),
                ),
            })
            .map_err(errors::core)?;
        let info = pipeline.info();
        let embedder = pipeline.embedder();
        let enc = &embedder.encoder;
        Ok(PyEncoder {
            pooling: info.pooling,
            weighting: pipeline.weighting().label(),
            dim: info.dimension,
            model_id: info.model_id,
            fingerprint: enc.fingerprint().to_string(),
            identity: info.model,
            max_len: info.max_len,
            num_layers: enc.num_layers(),
            threads: embedder.opts.threads,
            cache_dir: embedder.cache.as_ref().map(|c| c.dir().to_path_buf()),
            precision: info.precision,
            pipeline: Mutex::new(pipeline),
        })
    }

    /// Counts word-piece frequencies on `texts` for the weighting (GIL released).
    fn fit_weighting(&self, py: Python<'_>, texts: &Bound<'_, PyAny>) -> PyResult<()> {
        let texts = extract_texts(texts, "texts")?;
        self.with_pipeline(py, |p| p.count_weights(&texts, true))
            .map_err(errors::core)
    }

    /// Takes the token weights recorded in a calibrator file (refused when
    /// its weighting is not this encoder's).
    fn use_weights_of(&self, py: Python<'_>, fitted: &PyFitted) -> PyResult<()> {
        let own = fitted.weighting_meta().cloned();
        self.with_pipeline(py, |p| p.use_weights_of(own.as_ref()))
            .map_err(errors::core)
    }

    /// The weighting spec (`mean` for the plain mean).
    #[getter]
    fn weighting(&self) -> String {
        self.weighting.clone()
    }

    /// Whether the weighting's word-piece frequencies are known.
    #[getter]
    fn weighting_ready(&self, py: Python<'_>) -> bool {
        self.with_pipeline(py, |p| p.weighting().ready())
    }

    /// fp32 or int8.
    #[getter]
    fn precision(&self) -> &str {
        &self.precision
    }

    /// Embeddings of `texts` (float32, one row per text, in order), through
    /// the calibrator if any; `normalize` scales each row to unit length.
    /// `prompt_name` (a prompt of the model) or `prompt` (a text) goes before
    /// every text; neither: the encoder's default (core's prompt rule).
    #[pyo3(signature = (texts, batch_size=None, progress=None, normalize=false, prompt_name=None, prompt=None))]
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        batch_size: Option<usize>,
        progress: Option<Py<PyAny>>,
        normalize: bool,
        prompt_name: Option<String>,
        prompt: Option<String>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let asked = PromptConfig {
            prompt_name,
            prompt,
        };
        self.encode_with(py, texts, batch_size, progress, normalize, asked, None)
    }

    /// [`encode`] of queries: the model's `query` prompt unless a prompt is
    /// given (sentence-transformers' `encode_query`).
    #[pyo3(signature = (texts, batch_size=None, progress=None, normalize=false, prompt_name=None, prompt=None))]
    #[allow(clippy::too_many_arguments)]
    fn encode_query<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        batch_size: Option<usize>,
        progress: Option<Py<PyAny>>,
        normalize: bool,
        prompt_name: Option<String>,
        prompt: Option<String>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let asked = PromptConfig {
            prompt_name,
            prompt,
        };
        self.encode_with(
            py,
            texts,
            batch_size,
            progress,
            normalize,
            asked,
            Some(Role::Query),
        )
    }

    /// [`encode`] of documents: the model's `document` (else `passage`, else
    /// `corpus`) prompt unless a prompt is given (sentence-transformers'
    /// `encode_document`).
    #[pyo3(signature = (texts, batch_size=None, progress=None, normalize=false, prompt_name=None, prompt=None))]
    #[allow(clippy::too_many_arguments)]
    fn encode_document<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        batch_size: Option<usize>,
        progress: Option<Py<PyAny>>,
        normalize: bool,
        prompt_name: Option<String>,
        prompt: Option<String>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let asked = PromptConfig {
            prompt_name,
            prompt,
        };
        self.encode_with(
            py,
            texts,
            batch_size,
            progress,
            normalize,
            asked,
            Some(Role::Document),
        )
    }

    /// The model's prompts (name: text), from its config_sentence_transformers.json.
    #[getter]
    fn prompts(&self, py: Python<'_>) -> Vec<(String, String)> {
        self.with_pipeline(py, |p| p.embedder().prompts.prompts.clone())
    }

    /// The text put before every text by default (None: no prompt).
    #[getter]
    fn default_prompt(&self, py: Python<'_>) -> Option<String> {
        self.with_pipeline(py, |p| p.prompt().map(|p| p.text.clone()))
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
        self.pooling.clone()
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

/// Every named pooling with its one-line description.
#[pyfunction]
fn poolings() -> Vec<(&'static str, &'static str)> {
    POOLINGS.to_vec()
}

/// The `model_type`s of config.json that load (the encoder's registry).
#[pyfunction]
fn model_types() -> Vec<&'static str> {
    bertflow_core::encoder::Architecture::SUPPORTED
        .iter()
        .map(|(name, _)| *name)
        .collect()
}

/// The canonical name of a pooling, or ValueError.
#[pyfunction]
fn canonical_pooling(name: &str) -> PyResult<String> {
    let p: Pooling = name.parse().map_err(errors::encoder)?;
    Ok(p.to_string())
}

/// Every default, resolved now, as JSON (core's `defaults::defaults()`).
#[pyfunction]
fn defaults() -> PyResult<String> {
    serde_json::to_string(&bertflow_core::defaults::defaults())
        .map_err(|e| errors::calib_meta(e.to_string()))
}

/// Writes `data` to `path` through core's atomic writer.
#[pyfunction]
fn write_atomic(py: Python<'_>, path: PathBuf, data: Vec<u8>) -> PyResult<()> {
    py.detach(|| bertflow_core::write_file(&path, &data))
        .map_err(errors::core)
}

/// Adds the installed package's folder as a place to find default paths above.
#[pyfunction]
fn add_anchor(dir: PathBuf) {
    bertflow_core::defaults::add_anchor(dir);
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
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    m.add_function(wrap_pyfunction!(model_types, m)?)?;
    m.add_function(wrap_pyfunction!(add_anchor, m)?)?;
    m.add_function(wrap_pyfunction!(write_atomic, m)?)?;
    Ok(())
}
