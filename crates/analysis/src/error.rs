//! Error type shared by every analysis in this crate.

use thiserror::Error;

/// Everything that can go wrong in an analysis, a plot or a report.
///
/// The functions of this crate validate their inputs and return one of these
/// instead of panicking.
#[derive(Debug, Error)]
pub enum AnalysisError {
    /// An input has fewer rows (sentences, pairs, tokens) than the analysis needs.
    #[error("{what}: need at least {needed}, got {got}")]
    TooFew {
        /// Which input.
        what: &'static str,
        /// The minimum.
        needed: usize,
        /// What was given.
        got: usize,
    },
    /// Two inputs that must have the same length (or shape) do not.
    #[error("{what}: lengths differ ({left} vs {right})")]
    LengthMismatch {
        /// Which inputs.
        what: &'static str,
        /// Length of the first.
        left: usize,
        /// Length of the second.
        right: usize,
    },
    /// An input contains NaN or an infinity.
    #[error("{0} contains a non-finite value (NaN or infinity)")]
    NonFinite(&'static str),
    /// A parameter is out of its valid range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// The input is valid but the quantity is undefined for it
    /// (e.g. the spectrum of a matrix whose centred version is zero).
    #[error("degenerate input: {0}")]
    Degenerate(String),
    /// Drawing a figure failed.
    #[error("plotting failed: {0}")]
    Plot(String),
    /// Encoding a PNG failed.
    #[error("PNG encoding failed: {0}")]
    Png(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, AnalysisError>;

/// Returns an error if any element of `values` is not finite.
pub(crate) fn check_finite<'a, I>(what: &'static str, values: I) -> Result<()>
where
    I: IntoIterator<Item = &'a f32>,
{
    if values.into_iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(AnalysisError::NonFinite(what))
    }
}

/// Returns an error if any element of `values` is not finite.
pub(crate) fn check_finite_f64(what: &'static str, values: &[f64]) -> Result<()> {
    if values.iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(AnalysisError::NonFinite(what))
    }
}
