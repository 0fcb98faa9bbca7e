//! Statistics in f64: means, covariances, eigendecompositions.

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

/// Common checks before fitting: at least `min_rows` rows, at least one
/// column, all values finite.
pub(crate) fn check_fit_input(
    kind: &'static str,
    x: ArrayView2<f32>,
    min_rows: usize,
) -> Result<()> {
    if x.ncols() == 0 {
        return Err(CalibError::BadData {
            kind,
            reason: "the input has no columns".into(),
        });
    }
    if x.nrows() < min_rows {
        return Err(CalibError::BadData {
            kind,
            reason: format!("needs at least {min_rows} rows, got {}", x.nrows()),
        });
    }
    check_finite(x)
}

/// Column means in f64.
pub(crate) fn mean(x: ArrayView2<f32>) -> Array1<f64> {
    let mut m = Array1::<f64>::zeros(x.ncols());
    for row in x.rows() {
        for (a, &v) in m.iter_mut().zip(row.iter()) {
            *a += v as f64;
        }
    }
    m /= x.nrows().max(1) as f64;
    m
}

/// The data minus its mean, in f64.
pub(crate) fn centred(x: ArrayView2<f32>, mean: &Array1<f64>) -> Array2<f64> {
    let mut c = x.mapv(|v| v as f64);
    c -= &mean.view().insert_axis(Axis(0));
    c
}

/// Sample covariance of already centred data, divided by n - 1 (numpy's
/// `np.cov` default, as in the BERT-whitening code). Needs n >= 2.
pub(crate) fn covariance(xc: &Array2<f64>) -> Array2<f64> {
    let n = xc.nrows();
    let mut cov = xc.t().dot(xc);
    cov /= (n.max(2) - 1) as f64;
    // Exact symmetry (the product is symmetric up to rounding).
    let d = cov.nrows();
    for i in 0..d {
        for j in 0..i {
            let v = 0.5 * (cov[[i, j]] + cov[[j, i]]);
            cov[[i, j]] = v;
            cov[[j, i]] = v;
        }
    }
    cov
}

/// Eigen-decomposition of a symmetric matrix: eigenvalues in decreasing
/// order, eigenvectors as the matching columns. Each eigenvector's sign is
/// fixed so that its largest-magnitude component (the first one on ties) is
/// positive, so the result is reproducible.
pub(crate) fn sym_eigen_desc(a: &Array2<f64>) -> Result<(Vec<f64>, Array2<f64>)> {
    let d = a.nrows();
    let m = nalgebra::DMatrix::<f64>::from_fn(d, d, |i, j| a[[i, j]]);
    let eig = nalgebra::SymmetricEigen::try_new(m, f64::EPSILON, 0).ok_or_else(|| {
        CalibError::Numerical("the symmetric eigendecomposition did not converge".into())
    })?;
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&i, &j| eig.eigenvalues[j].total_cmp(&eig.eigenvalues[i]));
    let values: Vec<f64> = order.iter().map(|&i| eig.eigenvalues[i]).collect();
    if values.iter().any(|v| !v.is_finite()) {
        return Err(CalibError::Numerical(
            "the eigendecomposition produced non-finite eigenvalues".into(),
        ));
    }
    let mut vectors = Array2::<f64>::zeros((d, d));
    for (new, &old) in order.iter().enumerate() {
        let col = eig.eigenvectors.column(old);
        let mut best = 0;
        for i in 1..d {
            if col[i].abs() > col[best].abs() {
                best = i;
            }
        }
        let sign = if col[best] < 0.0 { -1.0 } else { 1.0 };
        for i in 0..d {
            vectors[[i, new]] = sign * col[i];
        }
    }
    Ok((values, vectors))
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
