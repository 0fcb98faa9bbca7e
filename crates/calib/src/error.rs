//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while parsing a spec, fitting, applying,
/// saving or loading a calibrator.
#[derive(Debug, thiserror::Error)]
pub enum CalibError {
    /// A calibrator spec string could not be parsed.
    #[error("invalid calibrator spec {spec:?}: {reason}")]
    Spec {
        /// The string that was parsed.
        spec: String,
        /// What is wrong and what would be valid.
        reason: String,
    },

    /// A quantizer spec (`--quantize`, `quantize=`) could not be parsed or
    /// does not fit the vectors.
    #[error("invalid quantizer {spec:?}: {reason}")]
    Quantizer {
        /// The string that was parsed.
        spec: String,
        /// What is wrong and what would be valid.
        reason: String,
    },

    /// The data handed to `fit` cannot be used (empty, too few rows, ...).
    #[error("cannot fit {kind}: {reason}")]
    BadData {
        /// The calibrator kind being fitted.
        kind: &'static str,
        /// Why.
        reason: String,
    },

    /// A NaN or infinite value was found in the input matrix.
    #[error("non-finite value {value} in the input at row {row}, column {col}")]
    NonFiniteInput {
        /// Row of the first offending value.
        row: usize,
        /// Column of the first offending value.
        col: usize,
        /// The value itself.
        value: f32,
    },

    /// The number of columns of the input does not match the calibrator.
    #[error("dimension mismatch: the calibrator expects {expected} columns, got {found}")]
    DimMismatch {
        /// Dimension the calibrator was fitted on.
        expected: usize,
        /// Dimension that was given.
        found: usize,
    },

    /// The flow architecture cannot be built for this input dimension.
    #[error("flow architecture does not fit input dimension {dim}: {reason}")]
    Architecture {
        /// Input dimension.
        dim: usize,
        /// Why.
        reason: String,
    },

    /// Training produced a non-finite quantity or an exploding loss; no
    /// model is returned.
    #[error("flow training diverged at step {step} (epoch {epoch}): {reason}")]
    Diverged {
        /// 1-based optimisation step.
        step: usize,
        /// 1-based epoch.
        epoch: usize,
        /// What went wrong, naming the quantity (the loss, or a parameter
        /// tensor or its gradient).
        reason: String,
    },

    /// A linear-algebra routine failed (e.g. the eigendecomposition).
    #[error("numerical failure: {0}")]
    Numerical(String),

    /// A calibrator file could not be written (the old one, if any, is intact).
    #[error(transparent)]
    Write(#[from] bertflow_durable::DurableError),

    /// Reading or writing a file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// "reading" or "writing".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A calibrator file is damaged, truncated, of an unknown version, or its
    /// tensors do not match its header.
    #[error("invalid calibrator file {path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// Serialised moment statistics are damaged, truncated, of an unknown
    /// version, or the statistics cannot be combined.
    #[error("invalid moment statistics: {0}")]
    Moments(String),

    /// The metadata handed to `save` is inconsistent with the calibrator.
    #[error("invalid calibrator metadata: {0}")]
    Meta(String),

    /// A saved calibrator does not fit the model/pooling/dimension in use.
    #[error("incompatible calibrator: {0}")]
    Incompatible(String),
}

/// Short alias used throughout the crate.
pub type Result<T, E = CalibError> = std::result::Result<T, E>;

/// Parameters missing (a header deserialized without its tensors).
pub(crate) fn not_loaded(kind: &str) -> CalibError {
    CalibError::Numerical(format!(
        "the {kind} calibrator has no parameters (deserialized without its tensors?); use load()"
    ))
}
