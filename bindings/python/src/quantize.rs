//! Quantizers and code scoring: `bertflow.Quantizer`'s compiled half, the
//! quantizer stage of a calibrator file, and Hamming / int8 dot products of
//! code matrices through the kernels crate.

use bertflow_core::calib::{CalibratorMeta, Fitted, Identity};
use bertflow_core::quantize::{dot_i8, hamming, Codes, QuantSpec, Quantizer};
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors;
use crate::fitted::PyFitted;

/// A fitted quantizer (see `bertflow.Quantizer`).
#[pyclass(module = "bertflow._bertflow", name = "FittedQuantizer", frozen)]
pub struct PyQuantizer {
    pub(crate) q: Quantizer,
}

fn parse(spec: &str) -> PyResult<QuantSpec> {
    spec.parse().map_err(errors::calib)
}

/// Codes as a NumPy array: int8 for `int8`/`binary`, uint8 otherwise.
fn codes_array<'py>(py: Python<'py>, c: bertflow_core::quantize::Codes) -> Bound<'py, PyAny> {
    if c.signed() {
        c.as_i8().into_pyarray(py).into_any()
    } else {
        c.bytes.into_pyarray(py).into_any()
    }
}

/// The bytes of a calibrator file holding only `q` (an identity of its
/// dimension, then the stage): how a quantizer pickles.
fn stage_bytes(q: &Quantizer) -> PyResult<Vec<u8>> {
    let mut meta = CalibratorMeta::new("quantizer", "external", q.dim, 0);
    meta.quantizer = Some(q.clone());
    Fitted::None(Identity { dim: q.dim })
        .to_bytes(&meta)
        .map_err(errors::calib)
}

/// Fits the quantizer `spec` on the rows of `x` (GIL released); `after`, the
/// kind of the calibrator whose output `x` is, brings the defaults that
/// depend on it (ITQ for bits after a rotation, as `bertflow fit --quantize`).
#[pyfunction]
#[pyo3(signature = (spec, x, after=None))]
fn fit_quantizer(
    py: Python<'_>,
    spec: &str,
    x: PyReadonlyArray2<'_, f32>,
    after: Option<&str>,
) -> PyResult<PyQuantizer> {
    let spec = match after {
        Some(kind) => spec
            .parse::<bertflow_core::quantize::QuantRequest>()
            .map_err(errors::calib)?
            .after(kind),
        None => parse(spec)?,
    };
    let x = x.as_array();
    let q = py
        .detach(|| Quantizer::fit(&spec, x))
        .map_err(errors::calib)?;
    Ok(PyQuantizer { q })
}

/// A quantizer from the bytes `FittedQuantizer.to_bytes` gives.
#[pyfunction]
fn quantizer_from_bytes(data: &[u8]) -> PyResult<PyQuantizer> {
    let (_, meta) = Fitted::from_bytes(data).map_err(errors::calib)?;
    let q = meta
        .quantizer
        .ok_or_else(|| PyValueError::new_err("these bytes hold no quantizer stage"))?;
    Ok(PyQuantizer { q })
}

#[pymethods]
impl PyQuantizer {
    /// The codes of the rows of `x` (GIL released).
    fn quantize<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray2<'py, f32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let x = x.as_array();
        let c = py.detach(|| self.q.quantize(x)).map_err(errors::calib)?;
        Ok(codes_array(py, c))
    }

    /// Vectors back from codes given as their raw bytes (uint8; int8 codes
    /// viewed as uint8): the centre of each code's step (`s q` for one global
    /// scale), +-1 per dimension for bits. Errors on a width that is not
    /// this quantizer's.
    fn dequantize<'py>(
        &self,
        py: Python<'py>,
        codes: PyReadonlyArray2<'py, u8>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let bytes = codes.as_array().to_owned();
        let c = Codes::new(self.q.spec.kind, self.q.dim, bytes).map_err(errors::calib)?;
        let y = py.detach(|| self.q.dequantize(&c)).map_err(errors::calib)?;
        Ok(y.into_pyarray(py))
    }

    /// Canonical spec string.
    #[getter]
    fn spec(&self) -> String {
        self.q.spec.to_string()
    }

    /// Dimension of the vectors it takes.
    #[getter]
    fn dim(&self) -> usize {
        self.q.dim
    }

    /// Bytes per row of its codes.
    #[getter]
    fn code_bytes(&self) -> usize {
        self.q.code_bytes()
    }

    /// ITQ's objective before and after each iteration (empty without ITQ).
    #[getter]
    fn objective(&self) -> Vec<f64> {
        self.q.objective().to_vec()
    }

    /// The global scale or per-dimension steps (int8/uint8).
    #[getter]
    fn scales(&self) -> Vec<f64> {
        self.q.scales().to_vec()
    }

    /// One line.
    fn describe(&self) -> String {
        self.q.describe()
    }

    /// The quantizer as bytes (a calibrator file of an identity ending in it).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &stage_bytes(&self.q)?))
    }

    fn __repr__(&self) -> String {
        format!("<bertflow fitted quantizer {}>", self.q.describe())
    }

    /// Pickles as its bytes.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let module = py.import("bertflow._bertflow")?;
        let ctor = module.getattr("quantizer_from_bytes")?;
        let args = PyTuple::new(py, [self.to_bytes(py)?])?;
        Ok((ctor, args))
    }
}

/// `Fitted.quantizer`: the stage the file ends in, if any.
pub(crate) fn stage_of(f: &PyFitted) -> Option<PyQuantizer> {
    f.meta.quantizer.clone().map(|q| PyQuantizer { q })
}

/// `Fitted.with_quantizer`: a copy ending in `stage` (`None`: without one);
/// an error when the stage takes another dimension than the calibrator gives.
pub(crate) fn with_stage(f: &PyFitted, stage: Option<&PyQuantizer>) -> PyResult<PyFitted> {
    use bertflow_core::calib::Calibrator;
    if let Some(s) = stage {
        if s.q.dim != f.fitted.output_dim() {
            return Err(PyValueError::new_err(format!(
                "the quantizer takes {} dimensions, the calibrator gives {}",
                s.q.dim,
                f.fitted.output_dim()
            )));
        }
    }
    let mut meta = f.meta.clone();
    meta.quantizer = stage.map(|s| s.q.clone());
    Ok(PyFitted {
        fitted: f.fitted.clone(),
        meta,
    })
}

fn same_width(a: usize, b: usize) -> PyResult<()> {
    if a != b {
        return Err(PyValueError::new_err(format!(
            "codes of different widths: {a} and {b} bytes per row"
        )));
    }
    Ok(())
}

/// Hamming distances of every row of `a` against every row of `b`
/// (uint8 packed bits; GIL released).
#[pyfunction]
fn hamming_matrix<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, u8>,
    b: PyReadonlyArray2<'py, u8>,
) -> PyResult<Bound<'py, PyArray2<u32>>> {
    let (a, b) = (a.as_array(), b.as_array());
    same_width(a.ncols(), b.ncols())?;
    let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
    let out = py.detach(|| {
        ndarray::Array2::from_shape_fn((a.nrows(), b.nrows()), |(i, j)| {
            hamming(
                a.row(i).as_slice().expect("standard layout"),
                b.row(j).as_slice().expect("standard layout"),
            )
        })
    });
    Ok(out.into_pyarray(py))
}

/// int8 dot products of every row of `a` against every row of `b` (GIL
/// released).
#[pyfunction]
fn int8_dot_matrix<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'py, i8>,
    b: PyReadonlyArray2<'py, i8>,
) -> PyResult<Bound<'py, PyArray2<i32>>> {
    let (a, b) = (a.as_array(), b.as_array());
    same_width(a.ncols(), b.ncols())?;
    let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
    let out = py.detach(|| {
        ndarray::Array2::from_shape_fn((a.nrows(), b.nrows()), |(i, j)| {
            dot_i8(
                a.row(i).as_slice().expect("standard layout"),
                b.row(j).as_slice().expect("standard layout"),
            )
        })
    });
    Ok(out.into_pyarray(py))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyQuantizer>()?;
    m.add_function(wrap_pyfunction!(fit_quantizer, m)?)?;
    m.add_function(wrap_pyfunction!(quantizer_from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(hamming_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(int8_dot_matrix, m)?)?;
    Ok(())
}
