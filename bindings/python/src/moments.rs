//! `MomentStats`: streaming, mergeable count, mean and co-moment matrix.

use bertflow_core::calib::MomentStats;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::calib::{parse_spec, PyFitted};
use crate::errors;
use bertflow_core::matrix_file::bytes_fingerprint;

/// Moment statistics of a stream of rows (see `bertflow.MomentStats`).
#[pyclass(module = "bertflow._bertflow", name = "MomentStats")]
pub struct PyMomentStats {
    inner: MomentStats,
}

#[pymethods]
impl PyMomentStats {
    #[new]
    fn new(dim: usize) -> PyResult<Self> {
        if dim == 0 {
            return Err(PyValueError::new_err("dim must be at least 1"));
        }
        Ok(PyMomentStats {
            inner: MomentStats::new(dim),
        })
    }

    /// Adds the rows of a float32 matrix (GIL released).
    fn update(&mut self, py: Python<'_>, x: PyReadonlyArray2<'_, f32>) -> PyResult<()> {
        let x = x.as_array();
        let inner = &mut self.inner;
        py.detach(|| inner.update(x)).map_err(errors::calib)
    }

    /// Adds the rows of a float64 matrix (GIL released).
    fn update_f64(&mut self, py: Python<'_>, x: PyReadonlyArray2<'_, f64>) -> PyResult<()> {
        let x = x.as_array();
        let inner = &mut self.inner;
        py.detach(|| inner.update_f64(x)).map_err(errors::calib)
    }

    /// Adds the statistics of `other`.
    fn merge(&mut self, other: PyRef<'_, PyMomentStats>) -> PyResult<()> {
        self.inner.merge(&other.inner).map_err(errors::calib)
    }

    /// A copy.
    fn copy(&self) -> PyMomentStats {
        PyMomentStats {
            inner: self.inner.clone(),
        }
    }

    /// The versioned binary form.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }

    /// Parses `to_bytes`' form (ValueError when truncated or damaged).
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PyMomentStats> {
        let inner = MomentStats::from_bytes(data).map_err(errors::calib)?;
        Ok(PyMomentStats { inner })
    }

    /// Fits a moment-based calibrator (GIL released); the file metadata
    /// records external embeddings with the optional label.
    #[pyo3(signature = (spec, label=None))]
    fn fit(&self, py: Python<'_>, spec: &str, label: Option<String>) -> PyResult<PyFitted> {
        let spec = parse_spec(spec)?;
        let fitted = py.detach(|| self.inner.fit(&spec)).map_err(errors::calib)?;
        let n = usize::try_from(self.inner.count()).unwrap_or(usize::MAX);
        let fingerprint = bytes_fingerprint(&self.inner.to_bytes());
        Ok(PyFitted::external(
            fitted,
            &spec,
            (n, self.inner.dim()),
            fingerprint,
            label,
        ))
    }

    /// Row dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Rows seen.
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }

    /// Column means (float64).
    fn mean<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.inner.mean().clone().into_pyarray(py)
    }

    /// The co-moment matrix sum (x - mean)(x - mean)^T (float64).
    fn comoment<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<f64>> {
        self.inner.comoment().clone().into_pyarray(py)
    }

    /// Sample covariance M2 / (n - 1) (float64; needs 2 rows).
    fn covariance<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let c = self.inner.covariance().map_err(errors::calib)?;
        Ok(c.into_pyarray(py))
    }

    /// Pickles as the binary form.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let cls = py.get_type::<PyMomentStats>().getattr("from_bytes")?;
        let args = PyTuple::new(py, [self.to_bytes(py)])?;
        Ok((cls, args))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMomentStats>()
}
