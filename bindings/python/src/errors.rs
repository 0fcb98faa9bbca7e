//! Rust errors to Python exceptions: bad input is a `ValueError` (or
//! `TypeError`), a missing file a `FileNotFoundError`, a damaged calibrator
//! file a `CalibratorFileError` (a `ValueError`), a failed computation a
//! `RuntimeError`. Nothing panics across the boundary.

use bertflow_core::calib::CalibError;
use bertflow_core::encoder::EncoderError;
use bertflow_core::eval::{DataError, EvalError};
use bertflow_core::CoreError;
use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyOSError, PyPermissionError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;

create_exception!(
    _bertflow,
    CalibratorFileError,
    PyValueError,
    "A calibrator file (or bytes) is damaged, truncated, of an unknown format version, or not a bertflow calibrator."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add(
        "CalibratorFileError",
        m.py().get_type::<CalibratorFileError>(),
    )
}

fn io_error(e: &std::io::Error, msg: String) -> PyErr {
    match e.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
        std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
        _ => PyOSError::new_err(msg),
    }
}

pub fn calib(e: CalibError) -> PyErr {
    let msg = e.to_string();
    calib_kind(&e, msg)
}

fn calib_kind(e: &CalibError, msg: String) -> PyErr {
    match e {
        CalibError::Io { source, .. } => io_error(source, msg),
        CalibError::Write(w) => io_error(&w.source, msg),
        CalibError::Format { .. } => CalibratorFileError::new_err(msg),
        CalibError::Diverged { .. } | CalibError::Numerical(_) => PyRuntimeError::new_err(msg),
        CalibError::Spec { .. }
        | CalibError::Quantizer { .. }
        | CalibError::BadData { .. }
        | CalibError::NonFiniteInput { .. }
        | CalibError::DimMismatch { .. }
        | CalibError::Architecture { .. }
        | CalibError::Meta(_)
        | CalibError::Moments(_)
        | CalibError::Incompatible(_) => PyValueError::new_err(msg),
    }
}

pub fn encoder(e: EncoderError) -> PyErr {
    let msg = e.to_string();
    encoder_kind(&e, msg)
}

fn encoder_kind(e: &EncoderError, msg: String) -> PyErr {
    match e {
        EncoderError::ModelNotFound { .. } | EncoderError::IncompleteModel { .. } => {
            PyFileNotFoundError::new_err(msg)
        }
        EncoderError::Io { source, .. } => io_error(source, msg),
        _ => PyValueError::new_err(msg),
    }
}

pub fn data(e: DataError) -> PyErr {
    let msg = e.to_string();
    data_kind(&e, msg)
}

fn data_kind(e: &DataError, msg: String) -> PyErr {
    match e {
        DataError::MissingDir { .. } | DataError::MissingFile { .. } => {
            PyFileNotFoundError::new_err(msg)
        }
        DataError::Io { source, .. } => io_error(source, msg),
        _ => PyValueError::new_err(msg),
    }
}

pub fn eval(e: EvalError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A metadata or serialisation failure that is no fault of the input.
pub fn calib_meta(msg: String) -> PyErr {
    PyRuntimeError::new_err(msg)
}

/// A workflow error: mapped by its innermost cause, with the whole context
/// chain as the message.
pub fn core(e: CoreError) -> PyErr {
    let msg = e.chain();
    let mapped = match e.root() {
        CoreError::Encoder(inner) => encoder_kind(inner, msg),
        CoreError::Calib(inner) => calib_kind(inner, msg),
        CoreError::Data(inner) => data_kind(inner, msg),
        CoreError::Io { source, .. } => io_error(source, msg),
        CoreError::Write(w) => io_error(&w.source, msg),
        CoreError::Index(inner) => index_kind(inner, msg),
        CoreError::Eval(_)
        | CoreError::Input(_)
        | CoreError::Setting { .. }
        | CoreError::NotReranker { .. }
        | CoreError::IsReranker { .. } => PyValueError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    };
    mapped
}

/// An index file error: bad input (a damaged file, other settings, a bad
/// argument) is a `ValueError`, a failed read or write an `OSError`.
fn index_kind(e: &bertflow_core::index::IndexError, msg: String) -> PyErr {
    use bertflow_core::index::IndexError;
    match e {
        IndexError::Io(_) | IndexError::Changed(_) => PyOSError::new_err(msg),
        IndexError::Corrupt(_) | IndexError::Mismatch(_) | IndexError::Invalid(_) => {
            PyValueError::new_err(msg)
        }
    }
}
