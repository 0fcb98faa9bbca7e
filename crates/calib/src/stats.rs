//! Input checks, the zero-variance tolerance and eigendecompositions in f64
//! (the moments themselves are in [`crate::moments`]).

use ndarray::{Array1, Array2, ArrayView2, Axis};

use crate::error::{CalibError, Result};

/// A variance (or covariance eigenvalue) counts as zero when it is at most
/// this fraction of the largest one (for standard deviations: 1e-5 of the
/// largest). Used by `sn`, `whiten`, `natsv` and the flow's actnorm
/// initialisation alike.
pub const ZERO_VARIANCE_RTOL: f64 = 1e-10;

/// First non-finite entry, as an error.
pub(crate) fn check_finite(x: ArrayView2<f32>) -> Result<()> {
    for ((row, col), &value) in x.indexed_iter() {
        if !value.is_finite() {
            return Err(CalibError::NonFiniteInput { row, col, value });
        }
    }
    Ok(())
}

/// Checks the size of fit data (the rows or their moment statistics): at
/// least one column and at least `min_rows` rows.
pub(crate) fn check_size(kind: &'static str, cols: usize, rows: u64, min_rows: u64) -> Result<()> {
    if cols == 0 {
        return Err(CalibError::BadData {
            kind,
            reason: "the input has no columns".into(),
        });
    }
    check_rows(kind, rows, min_rows)
}

/// At least `min_rows` rows.
pub(crate) fn check_rows(kind: &'static str, rows: u64, min_rows: u64) -> Result<()> {
    if rows < min_rows {
        return Err(CalibError::BadData {
            kind,
            reason: format!("needs at least {min_rows} rows, got {rows}"),
        });
    }
    Ok(())
}

/// Common checks before fitting: at least `min_rows` rows, at least one
/// column, all values finite.
pub(crate) fn check_fit_input(
    kind: &'static str,
    x: ArrayView2<f32>,
    min_rows: usize,
) -> Result<()> {
    check_size(kind, x.ncols(), x.nrows() as u64, min_rows as u64)?;
    check_finite(x)
}

/// The data minus its mean, in f64.
pub(crate) fn centred(x: ArrayView2<f32>, mean: &Array1<f64>) -> Array2<f64> {
    let mut c = x.mapv(|v| v as f64);
    c -= &mean.view().insert_axis(Axis(0));
    c
}

/// Eigen-decomposition of a symmetric matrix: eigenvalues in decreasing
/// order, eigenvectors as the matching columns, each with its
/// largest-magnitude component positive (see
/// [`bertflow_numeric::sym_eigen_desc`]).
pub(crate) fn sym_eigen_desc(a: &Array2<f64>) -> Result<(Vec<f64>, Array2<f64>)> {
    bertflow_numeric::sym_eigen_desc(a).map_err(|e| CalibError::Numerical(e.to_string()))
}

/// Number of eigenvalues (sorted decreasingly) above the relative tolerance.
pub(crate) fn numerical_rank(values_desc: &[f64]) -> usize {
    let max = values_desc.first().copied().unwrap_or(0.0);
    if max <= 0.0 {
        return 0;
    }
    values_desc
        .iter()
        .take_while(|&&v| v > ZERO_VARIANCE_RTOL * max)
        .count()
}

/// Checks the column count and finiteness of a matrix to transform.
pub(crate) fn check_transform_input(expected: usize, x: ArrayView2<f32>) -> Result<()> {
    if x.ncols() != expected {
        return Err(CalibError::DimMismatch {
            expected,
            found: x.ncols(),
        });
    }
    check_finite(x)
}
