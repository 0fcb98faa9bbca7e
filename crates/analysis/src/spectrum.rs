//! Singular spectrum of the centred embedding matrix.

use bertflow_numeric::{centred_gram_cols, centred_gram_rows, col_mean, sym_eigenvalues_desc};
use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};

use crate::error::{check_finite, AnalysisError, Result};
use crate::linalg::n_threads;

/// Singular spectrum of the column-centred embedding matrix `Xc` (n x d).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spectrum {
    /// The `min(n, d)` singular values of `Xc` in decreasing order, divided
    /// by the largest (so the first is 1). Values that are numerically zero
    /// (see [`spectrum`]) are exactly 0.
    pub singular_values_normalised: Vec<f64>,
    /// Share of the total variance carried by the top direction:
    /// `s_1^2 / sum_i s_i^2` (variance is proportional to squared singular values).
    pub variance_share_top1: f64,
    /// Share of the total variance carried by the top 5 directions.
    pub variance_share_top5: f64,
    /// Share of the total variance carried by the top 10 directions.
    pub variance_share_top10: f64,
    /// Effective rank (Roy & Vetterli 2007): `exp(H(p))` with
    /// `p_i = s_i / sum_j s_j` and `H(p) = -sum_i p_i ln p_i` (0 ln 0 = 0).
    /// It equals the number of non-zero singular values for a flat spectrum
    /// and is 1 for a rank-one matrix.
    pub effective_rank: f64,
    /// Number of sentences (rows).
    pub n_sentences: usize,
    /// Embedding dimension (columns).
    pub dim: usize,
}

/// The scalar part of a [`Spectrum`], for tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpectrumSummary {
    /// See [`Spectrum::variance_share_top1`].
    pub variance_share_top1: f64,
    /// See [`Spectrum::variance_share_top5`].
    pub variance_share_top5: f64,
    /// See [`Spectrum::variance_share_top10`].
    pub variance_share_top10: f64,
    /// See [`Spectrum::effective_rank`].
    pub effective_rank: f64,
}

impl Spectrum {
    /// The scalar summary (everything but the singular values).
    pub fn summary(&self) -> SpectrumSummary {
        SpectrumSummary {
            variance_share_top1: self.variance_share_top1,
            variance_share_top5: self.variance_share_top5,
            variance_share_top10: self.variance_share_top10,
            effective_rank: self.effective_rank,
        }
    }
}

/// Singular spectrum of the column-centred rows of `x`.
///
/// The singular values are the square roots of the eigenvalues of the Gram
/// matrix, computed in f64: `Xc^T Xc` (d x d, accumulated over row blocks)
/// when `n >= d`, otherwise `Xc Xc^T` (n x n); both have the same non-zero
/// eigenvalues. Eigenvalues below `max(n, d) * f64::EPSILON * lambda_max`
/// (rounding noise, including tiny negative values) are set to 0.
///
/// Cost: `O(n d^2)` for the product plus `O(d^3)` for the eigenvalues
/// (n = 30k, d = 1024: a few seconds).
///
/// Errors: fewer than 2 rows, zero columns, non-finite values, or all rows
/// identical (the centred matrix is zero and the normalisation undefined).
pub fn spectrum(x: ArrayView2<'_, f32>) -> Result<Spectrum> {
    let (n, d) = x.dim();
    if n < 2 {
        return Err(AnalysisError::TooFew {
            what: "spectrum: sentences",
            needed: 2,
            got: n,
        });
    }
    if d == 0 {
        return Err(AnalysisError::TooFew {
            what: "spectrum: embedding dimensions",
            needed: 1,
            got: 0,
        });
    }
    check_finite("spectrum: embeddings", x.iter())?;

    let mean = col_mean(x).to_vec();
    let gram = if n >= d {
        centred_gram_cols(x, &mean, n_threads())
    } else {
        centred_gram_rows(x, &mean)
    };
    let mut eig = sym_eigenvalues_desc(&gram).map_err(|_| {
        AnalysisError::Degenerate(
            "spectrum: eigenvalue computation produced a non-finite value".into(),
        )
    })?;
    let lambda_max = eig.first().copied().unwrap_or(0.0);
    if lambda_max <= 0.0 {
        return Err(AnalysisError::Degenerate(
            "spectrum: all rows are identical, the centred matrix is zero".into(),
        ));
    }
    let tol = n.max(d) as f64 * f64::EPSILON * lambda_max;
    for v in &mut eig {
        if *v <= tol {
            *v = 0.0;
        }
    }
    Ok(from_eigenvalues(&eig, n, d))
}

/// Builds the spectrum from sorted (decreasing), clamped eigenvalues of the
/// Gram matrix (squared singular values).
fn from_eigenvalues(eig: &[f64], n: usize, d: usize) -> Spectrum {
    let s: Vec<f64> = eig.iter().map(|v| v.max(0.0).sqrt()).collect();
    let s_max = s[0];
    let total_var: f64 = eig.iter().sum();
    let share = |k: usize| eig.iter().take(k).sum::<f64>() / total_var;
    let s_sum: f64 = s.iter().sum();
    let entropy: f64 = s
        .iter()
        .filter(|&&v| v > 0.0)
        .map(|&v| {
            let p = v / s_sum;
            -p * p.ln()
        })
        .sum();
    Spectrum {
        singular_values_normalised: s.iter().map(|v| v / s_max).collect(),
        variance_share_top1: share(1),
        variance_share_top5: share(5),
        variance_share_top10: share(10),
        effective_rank: entropy.exp(),
        n_sentences: n,
        dim: d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, Array2};

    /// A centred matrix with orthogonal columns of norms `norms`: its singular
    /// values are exactly `norms`. Columns use the centred, mutually
    /// orthogonal patterns of the 4-point Hadamard matrix.
    fn with_singular_values(norms: &[f32]) -> Array2<f32> {
        // Rows of the 4x4 Hadamard matrix without the constant column:
        // each column sums to 0 and columns are orthogonal, norm 2.
        let h = [
            [1.0f32, 1.0, 1.0],
            [-1.0, 1.0, -1.0],
            [1.0, -1.0, -1.0],
            [-1.0, -1.0, 1.0],
        ];
        Array2::from_shape_fn((4, norms.len()), |(i, j)| h[i][j] * norms[j] / 2.0)
    }

    #[test]
    fn known_singular_values() {
        // Singular values 3, 2, 1 (column norms); variance shares use squares:
        // 9 / 14, and top5 = top10 = 1.
        let x = with_singular_values(&[2.0, 3.0, 1.0]);
        let s = spectrum(x.view()).unwrap();
        let expect = [1.0, 2.0 / 3.0, 1.0 / 3.0];
        assert_eq!(s.singular_values_normalised.len(), 3);
        for (a, b) in s.singular_values_normalised.iter().zip(expect) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
        assert!((s.variance_share_top1 - 9.0 / 14.0).abs() < 1e-9);
        assert!((s.variance_share_top5 - 1.0).abs() < 1e-12);
        // p = (3, 2, 1) / 6 -> H = -(1/2 ln 1/2 + 1/3 ln 1/3 + 1/6 ln 1/6)
        let h = -(0.5f64 * 0.5f64.ln()
            + (1.0 / 3.0) * (1.0f64 / 3.0).ln()
            + (1.0 / 6.0) * (1.0f64 / 6.0).ln());
        assert!((s.effective_rank - h.exp()).abs() < 1e-9);
    }

    #[test]
    fn offset_rows_are_centred() {
        // Adding the same vector to every row does not change the spectrum.
        let mut x = with_singular_values(&[2.0, 3.0, 1.0]);
        for mut r in x.rows_mut() {
            r += &array![10.0f32, -5.0, 7.0];
        }
        let s = spectrum(x.view()).unwrap();
        assert!((s.singular_values_normalised[1] - 2.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn flat_spectrum_effective_rank_counts_non_zero_values() {
        // Three equal singular values -> effective rank 3.
        let x = with_singular_values(&[1.5, 1.5, 1.5]);
        let s = spectrum(x.view()).unwrap();
        assert!((s.effective_rank - 3.0).abs() < 1e-9);
        // Two equal non-zero values and one zero column -> 2.
        let x = with_singular_values(&[1.5, 0.0, 1.5]);
        let s = spectrum(x.view()).unwrap();
        assert_eq!(s.singular_values_normalised[2], 0.0);
        assert!((s.effective_rank - 2.0).abs() < 1e-9);
        assert!((s.variance_share_top1 - 0.5).abs() < 1e-9);
    }

    #[test]
    fn wide_matrix_uses_row_gram() {
        // n = 4 < d = 6: at most 4 values, the last is 0 because centring
        // removes one degree of freedom. Columns: the Hadamard pattern with
        // norms 3, 2, 1, padded with 3 zero columns.
        let x = with_singular_values(&[3.0, 2.0, 1.0]);
        let mut wide = Array2::<f32>::zeros((4, 6));
        wide.slice_mut(ndarray::s![.., 0..3]).assign(&x);
        let s = spectrum(wide.view()).unwrap();
        assert_eq!(s.singular_values_normalised.len(), 4);
        assert!((s.singular_values_normalised[1] - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.singular_values_normalised[3], 0.0);
    }

    #[test]
    fn rank_one() {
        let x = array![[1.0f32, 2.0], [2.0, 4.0], [3.0, 6.0]];
        let s = spectrum(x.view()).unwrap();
        assert!((s.variance_share_top1 - 1.0).abs() < 1e-12);
        assert!((s.effective_rank - 1.0).abs() < 1e-12);
        assert_eq!(s.summary().effective_rank, s.effective_rank);
    }

    #[test]
    fn degenerate_and_bad_inputs() {
        let same = Array2::from_elem((3, 2), 1.0f32);
        assert!(matches!(
            spectrum(same.view()),
            Err(AnalysisError::Degenerate(_))
        ));
        let one = Array2::<f32>::zeros((1, 2));
        assert!(matches!(
            spectrum(one.view()),
            Err(AnalysisError::TooFew { .. })
        ));
        let nan = array![[1.0f32, f32::INFINITY], [0.0, 1.0]];
        assert!(matches!(
            spectrum(nan.view()),
            Err(AnalysisError::NonFinite(_))
        ));
    }
}
