//! Fitted calibrators: fit, transform, bytes and files (the CLI's format).

use std::path::PathBuf;

use bertflow_core::calib::{CalibSpec, Calibrator, Fitted, EXTERNAL_POOLING};
use bertflow_core::matrix_file::matrix_fingerprint;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::encoder::PyEncoder;
use crate::errors;
pub(crate) use crate::fitted::PyFitted;

pub(crate) fn parse_spec(spec: &str) -> PyResult<CalibSpec> {
    spec.parse().map_err(errors::calib)
}

/// Canonical spec string, kind and hyper-parameters (as JSON) of a spec.
#[pyfunction]
fn spec_info(spec: &str) -> PyResult<(String, String, String)> {
    let s = parse_spec(spec)?;
    let json = serde_json::to_string(&s).map_err(|e| errors::calib_meta(e.to_string()))?;
    Ok((s.to_string(), s.kind().to_string(), json))
}

/// The registry of calibrator kinds as JSON (`bertflow kinds --json`).
#[pyfunction]
fn kinds() -> String {
    bertflow_core::calib::registry::to_json().to_string()
}

/// Fits `spec` on the rows of `x` (GIL released). The file metadata records
/// external embeddings with the optional `label`.
#[pyfunction]
#[pyo3(signature = (spec, x, label=None))]
fn fit(
    py: Python<'_>,
    spec: &str,
    x: PyReadonlyArray2<'_, f32>,
    label: Option<String>,
) -> PyResult<PyFitted> {
    let spec = parse_spec(spec)?;
    let x = x.as_array();
    let (n, d) = x.dim();
    let (fitted, warnings, fingerprint) = py
        .detach(|| {
            let fp = matrix_fingerprint(n, d, x.iter().copied());
            bertflow_core::calibration::fit_checked(&spec, x, "fit", &bertflow_core::Silent)
                .map(|(f, w)| (f, w, fp))
        })
        .map_err(errors::core)?;
    let mut out = PyFitted::external(fitted, &spec, (n, d), fingerprint, label);
    out.meta.warnings = warnings;
    Ok(out)
}

/// Reads a calibrator file (written by `bertflow fit` or `save`).
#[pyfunction]
fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyFitted> {
    let (fitted, meta) = py
        .detach(|| bertflow_core::calib::load(&path))
        .map_err(errors::calib)?;
    Ok(PyFitted { fitted, meta })
}

/// Parses the bytes of a calibrator file.
#[pyfunction]
fn fitted_from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<PyFitted> {
    let (fitted, meta) = py
        .detach(|| Fitted::from_bytes(data))
        .map_err(errors::calib)?;
    Ok(PyFitted { fitted, meta })
}

#[pymethods]
impl PyFitted {
    /// Calibrated rows of `x` (float32; GIL released).
    fn transform<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray2<'py, f32>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let x = x.as_array();
        let y = py
            .detach(|| self.fitted.transform(x))
            .map_err(errors::calib)?;
        Ok(y.into_pyarray(py))
    }

    /// The content of the calibrator file.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let b = self.fitted.to_bytes(&self.meta).map_err(errors::calib)?;
        Ok(PyBytes::new(py, &b))
    }

    /// Writes the calibrator file (atomically).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.fitted.save(&path, &self.meta))
            .map_err(errors::calib)
    }

    /// A copy whose metadata names another source of embeddings: a model
    /// identity and pooling, or (with `model=None`) external embeddings with
    /// an optional label.
    #[pyo3(signature = (model=None, pooling=None, label=None))]
    fn with_source(
        &self,
        model: Option<String>,
        pooling: Option<String>,
        label: Option<String>,
    ) -> PyFitted {
        let source = model.map(|m| (m, pooling.unwrap_or_else(|| EXTERNAL_POOLING.to_string())));
        PyFitted {
            fitted: self.fitted.clone(),
            meta: self.meta.with_source(source, label),
        }
    }

    /// A copy recording the token weighting of `encoder` (its weights included),
    /// so the CLI and `Encoder.use_weights_of` apply the same weights.
    fn with_weighting_of(&self, encoder: &PyEncoder) -> PyResult<PyFitted> {
        let mut meta = self.meta.clone();
        meta.weighting = encoder.weighting_record()?;
        Ok(PyFitted {
            fitted: self.fitted.clone(),
            meta,
        })
    }

    /// A copy recording the prompt its embeddings were made with (`None` or
    /// empty: none), checked like the CLI's wherever it is applied.
    #[pyo3(signature = (prompt=None))]
    fn with_prompt(&self, prompt: Option<String>) -> PyFitted {
        let mut meta = self.meta.clone();
        meta.prompt = prompt.filter(|p| !p.is_empty());
        PyFitted {
            fitted: self.fitted.clone(),
            meta,
        }
    }

    /// The prompt recorded (None: none).
    #[getter]
    fn prompt(&self) -> Option<String> {
        self.meta.prompt.clone()
    }

    /// A copy whose metadata records that it was fitted on a sample of
    /// `fit_corpus_size` rows drawn from `total` rows (`sampled_from`).
    fn with_sampled_from(&self, total: usize) -> PyFitted {
        PyFitted {
            fitted: self.fitted.clone(),
            meta: self.meta.clone().with_sampled_from(total),
        }
    }

    /// Kind: a name of the registry (`bertflow.kinds()`).
    #[getter]
    fn kind(&self) -> &'static str {
        self.fitted.kind()
    }

    /// Canonical spec string of the fitted kind and hyper-parameters.
    #[getter]
    fn spec(&self) -> String {
        self.fitted.spec().to_string()
    }

    /// Columns `transform` expects.
    #[getter]
    fn input_dim(&self) -> usize {
        self.fitted.input_dim()
    }

    /// Columns `transform` returns.
    #[getter]
    fn output_dim(&self) -> usize {
        self.fitted.output_dim()
    }

    /// One line describing the calibrator.
    fn describe(&self) -> String {
        self.fitted.describe()
    }

    /// The file metadata as JSON (model, pooling, input_dim, fit_corpus_size,
    /// seed, bertflow_version, format_version; external and sampled_from
    /// when set).
    #[getter]
    fn meta_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.meta).map_err(|e| errors::calib_meta(e.to_string()))
    }

    /// The calibrator's own header as JSON (kind, hyper-parameters,
    /// dimensions; for `auto` its decision and statistics).
    #[getter]
    fn header_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.fitted).map_err(|e| errors::calib_meta(e.to_string()))
    }

    /// The quantizer stage the file ends in, if any.
    #[getter]
    fn quantizer(&self) -> Option<crate::quantize::PyQuantizer> {
        crate::quantize::stage_of(self)
    }

    /// A copy ending in the quantizer `stage` (`None`: without one).
    #[pyo3(signature = (stage=None))]
    fn with_quantizer(&self, stage: Option<&crate::quantize::PyQuantizer>) -> PyResult<PyFitted> {
        crate::quantize::with_stage(self, stage)
    }

    fn __repr__(&self) -> String {
        format!("<bertflow fitted {}>", self.fitted.describe())
    }

    /// Pickles as the calibrator file's bytes.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let module = py.import("bertflow._bertflow")?;
        let ctor = module.getattr("fitted_from_bytes")?;
        let args = PyTuple::new(py, [self.to_bytes(py)?])?;
        Ok((ctor, args))
    }
}

/// "Should I calibrate?" for the rows of `x` (GIL released): the JSON of
/// `bertflow_core::calib::Advice` (stats, decision, expected, message).
#[pyfunction]
fn advise(py: Python<'_>, x: PyReadonlyArray2<'_, f32>) -> PyResult<String> {
    let x = x.as_array();
    let advice = py
        .detach(|| bertflow_core::calib::advise(x))
        .map_err(errors::calib)?;
    serde_json::to_string(&advice).map_err(|e| errors::calib_meta(e.to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFitted>()?;
    m.add_function(wrap_pyfunction!(advise, m)?)?;
    m.add_function(wrap_pyfunction!(spec_info, m)?)?;
    m.add_function(wrap_pyfunction!(kinds, m)?)?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(fitted_from_bytes, m)?)?;
    Ok(())
}
