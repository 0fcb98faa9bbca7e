//! Iterative quantization (Gong & Lazebnik 2011): the rotation `R` that
//! minimises `||B - V R||_F^2` over orthogonal `R` and sign codes `B`, by
//! alternating the two exact minimisations: `B = sign(V R)`, then `R` the
//! orthogonal polar factor of `V^T B` (orthogonal Procrustes). Each step
//! can only lower the objective. Starts from the identity (deterministic:
//! the first codes are the plain signs).

use ndarray::Array2;

use crate::error::Result;
use crate::stats;

/// The sign code of a value: 1 above 0, else -1 (the bit rule `x > 0`).
fn sign(v: f64) -> f64 {
    if v > 0.0 {
        1.0
    } else {
        -1.0
    }
}

/// `||sign(Z) - Z||_F^2` for `Z = V R`.
fn objective(z: &Array2<f64>) -> f64 {
    z.iter().map(|&v| (sign(v) - v).powi(2)).sum()
}

/// An orthogonal polar factor `U W^T` of a square `M = U S W^T`: the
/// orthogonal `R` maximising `tr(R^T M)`. From the eigenvectors `W` of
/// `M^T M`, in decreasing order: `u_j = M w_j`, orthonormalised in turn
/// (Gram-Schmidt); a direction `M` annihilates (several equal sign columns
/// make `M` singular) is completed with a unit vector orthogonal to the
/// others, which leaves `tr(R^T M)` unchanged.
pub(crate) fn polar(m: &Array2<f64>) -> Result<Array2<f64>> {
    let c = m.nrows();
    let (values, w) = stats::sym_eigen_desc(&m.t().dot(m))?;
    let max = values.first().copied().unwrap_or(0.0).max(0.0);
    let mut u = Array2::<f64>::zeros((c, c));
    let mut next_basis = 0;
    for (j, &value) in values.iter().enumerate() {
        let mut v = if value > 1e-14 * max {
            m.dot(&w.column(j))
        } else {
            ndarray::Array1::zeros(c)
        };
        loop {
            for k in 0..j {
                let d = v.dot(&u.column(k));
                v.scaled_add(-d, &u.column(k));
            }
            let norm = v.dot(&v).sqrt();
            if norm > 1e-8 * max.sqrt().max(f64::MIN_POSITIVE) && norm > 0.0 {
                u.column_mut(j).assign(&(v / norm));
                break;
            }
            // A unit vector not yet in the span (one of them always is).
            v = ndarray::Array1::zeros(c);
            v[next_basis % c] = 1.0;
            next_basis += 1;
        }
    }
    Ok(u.dot(&w.t()))
}

/// Fits the rotation on the rows of `v` (n x c) in `iters` iterations;
/// returns it with the objective before the first and after each
/// iteration (`iters + 1` values, non-increasing).
pub(crate) fn fit(v: &Array2<f64>, iters: usize) -> Result<(Array2<f64>, Vec<f64>)> {
    let c = v.ncols();
    let mut r = Array2::<f64>::eye(c);
    let mut z = v.clone();
    let mut history = vec![objective(&z)];
    for _ in 0..iters {
        let b = z.mapv(sign);
        r = polar(&v.t().dot(&b))?;
        z = v.dot(&r);
        history.push(objective(&z));
    }
    Ok((r, history))
}
