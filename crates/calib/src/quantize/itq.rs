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
    // The u_j as the rows of `ut`: the projections read them contiguously
    // (as columns, strided, they took two thirds of an ITQ fit at c = 384).
    let mut ut = Array2::<f64>::zeros((c, c));
    // Every M w_j at once (one product, not c strided ones).
    let mw = m.dot(&w);
    let mut next_basis = 0;
    for (j, &value) in values.iter().enumerate() {
        let mut v = if value > 1e-14 * max {
            mw.column(j).to_owned()
        } else {
            ndarray::Array1::zeros(c)
        };
        loop {
            for k in 0..j {
                let d = v.dot(&ut.row(k));
                v.scaled_add(-d, &ut.row(k));
            }
            let norm = v.dot(&v).sqrt();
            if norm > 1e-8 * max.sqrt().max(f64::MIN_POSITIVE) && norm > 0.0 {
                ut.row_mut(j).assign(&(v / norm));
                break;
            }
            // A unit vector not yet in the span (one of them always is).
            v = ndarray::Array1::zeros(c);
            v[next_basis % c] = 1.0;
            next_basis += 1;
        }
    }
    Ok(ut.t().dot(&w.t()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use bertflow_numeric::rng::SplitMix64;

    /// The polar factor's defining properties: `R` orthogonal and `R^T M`
    /// symmetric positive semi-definite (`M = R P`), so `tr(R^T M)` is the
    /// sum of `M`'s singular values; on a full-rank and a rank-deficient `M`.
    #[test]
    fn polar_is_the_orthogonal_factor_of_m() {
        let mut rng = SplitMix64::new(7);
        let c = 48;
        let full = Array2::from_shape_simple_fn((c, c), || rng.normal());
        // Rank 5: every column one of five (as equal sign columns make it).
        let low = Array2::from_shape_fn((c, c), |(i, j)| full[[i, j % 5]]);
        for m in [full, low] {
            let r = polar(&m).unwrap();
            let eye = Array2::<f64>::eye(c);
            let off = (&r.t().dot(&r) - &eye)
                .iter()
                .fold(0.0f64, |a, v| a.max(v.abs()));
            assert!(off < 1e-10, "R^T R - I: {off}");
            let p = r.t().dot(&m);
            let asym = (&p - &p.t()).iter().fold(0.0f64, |a, v| a.max(v.abs()));
            assert!(asym < 1e-9, "R^T M not symmetric: {asym}");
            let (eig_p, _) = stats::sym_eigen_desc(&p).unwrap();
            assert!(*eig_p.last().unwrap() > -1e-9, "R^T M not PSD: {eig_p:?}");
            let (eig_mtm, _) = stats::sym_eigen_desc(&m.t().dot(&m)).unwrap();
            // (M^T M's round-off eigenvalues, ~1e-16 of the largest, are zeros.)
            let tiny = 1e-12 * eig_mtm[0];
            let nuclear: f64 = eig_mtm
                .iter()
                .filter(|&&v| v > tiny)
                .map(|v| v.sqrt())
                .sum();
            let trace: f64 = p.diag().sum();
            assert!(
                (trace - nuclear).abs() < 1e-8 * nuclear,
                "{trace} vs {nuclear}"
            );
        }
    }
}
