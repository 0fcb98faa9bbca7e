//! `bertflow._bertflow`: the compiled half of the `bertflow` Python package.
//!
//! Only conversion and delegation live here: Python objects and NumPy arrays
//! in, calls into the bertflow crates, errors mapped to Python exceptions,
//! results out. The user-facing classes (argument defaults, docstrings,
//! scikit-learn glue) are in `python/bertflow/`. Every long computation runs
//! with the GIL released.

use pyo3::prelude::*;

mod calib;
mod encoder;
mod errors;
mod export;
mod fitted;
mod index;
mod moments;
mod quantize;
mod rerank;
mod retrieval;
mod rules;
mod sts;
mod vectors;

/// The compiled core of bertflow; use the `bertflow` package instead.
#[pymodule]
fn _bertflow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    encoder::register(m)?;
    calib::register(m)?;
    moments::register(m)?;
    rules::register(m)?;
    quantize::register(m)?;
    sts::register(m)?;
    export::register(m)?;
    rerank::register(m)?;
    retrieval::register(m)?;
    index::register(m)?;
    vectors::register(m)?;
    Ok(())
}
