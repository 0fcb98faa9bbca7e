//! Anisotropy of an embedding space: how much the sentence vectors point in
//! the same direction (Ethayarajh 2019; Li et al. 2020, section 2).

use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};

use crate::error::{check_finite, AnalysisError, Result};
use bertflow_numeric::{col_mean, SplitMix64};

/// Anisotropy statistics of a set of sentence embeddings.
///
/// An isotropic space has random-pair cosines around 0; BERT's raw sentence
/// embeddings typically have mean random-pair cosine well above 0.5.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anisotropy {
    /// Mean cosine similarity of `n_pairs` random pairs of distinct sentences.
    pub mean_random_pair_cosine: f64,
    /// Population standard deviation of those cosines.
    pub std_random_pair_cosine: f64,
    /// Mean, over all sentences, of the cosine between the sentence and the
    /// mean vector of all sentences.
    pub mean_cosine_to_mean: f64,
    /// Number of random pairs drawn.
    pub n_pairs: usize,
    /// Number of sentences.
    pub n_sentences: usize,
}

/// Cosine of two vectors given their norms; 0 when either vector is zero.
fn cosine(a: &[f64], b: &[f64], na: f64, nb: f64) -> f64 {
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    (dot / (na * nb)).clamp(-1.0, 1.0)
}

fn norm(a: &[f64]) -> f64 {
    a.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// Anisotropy of the rows of `x` (one sentence embedding per row).
///
/// * Random pairs: `n_pairs` ordered pairs `(i, j)`, `i != j`, drawn uniformly
///   with replacement using SplitMix64 seeded with `seed` (results are
///   reproducible for a seed and independent of any crate version).
/// * The cosine involving a zero vector is defined as 0.
/// * Arithmetic is in f64.
///
/// Errors: fewer than 2 rows, zero columns, `n_pairs == 0`, non-finite values.
pub fn anisotropy(x: ArrayView2<'_, f32>, n_pairs: usize, seed: u64) -> Result<Anisotropy> {
    let (n, d) = x.dim();
    if n < 2 {
        return Err(AnalysisError::TooFew {
            what: "anisotropy: sentences",
            needed: 2,
            got: n,
        });
    }
    if d == 0 {
        return Err(AnalysisError::TooFew {
            what: "anisotropy: embedding dimensions",
            needed: 1,
            got: 0,
        });
    }
    if n_pairs == 0 {
        return Err(AnalysisError::InvalidParameter(
            "anisotropy: n_pairs must be at least 1".into(),
        ));
    }
    check_finite("anisotropy: embeddings", x.iter())?;

    let rows: Vec<Vec<f64>> = x
        .rows()
        .into_iter()
        .map(|r| r.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let norms: Vec<f64> = rows.iter().map(|r| norm(r)).collect();

    let mut rng = SplitMix64::new(seed);
    let mut sum = 0.0;
    let mut sum_sq = 0.0;
    for _ in 0..n_pairs {
        let (i, j) = rng.distinct_pair(n);
        let c = cosine(&rows[i], &rows[j], norms[i], norms[j]);
        sum += c;
        sum_sq += c * c;
    }
    let mean = sum / n_pairs as f64;
    let var = (sum_sq / n_pairs as f64 - mean * mean).max(0.0);

    let mean_vec = col_mean(x).to_vec();
    let mean_norm = norm(&mean_vec);
    let to_mean = rows
        .iter()
        .zip(&norms)
        .map(|(r, &nr)| cosine(r, &mean_vec, nr, mean_norm))
        .sum::<f64>()
        / n as f64;

    Ok(Anisotropy {
        mean_random_pair_cosine: mean,
        std_random_pair_cosine: var.sqrt(),
        mean_cosine_to_mean: to_mean,
        n_pairs,
        n_sentences: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, Array2};

    #[test]
    fn identical_vectors_have_cosine_one() {
        let x = Array2::from_shape_fn((5, 4), |(_, j)| j as f32 + 1.0);
        let a = anisotropy(x.view(), 100, 3).unwrap();
        assert!((a.mean_random_pair_cosine - 1.0).abs() < 1e-12);
        assert!(a.std_random_pair_cosine < 1e-6);
        assert!((a.mean_cosine_to_mean - 1.0).abs() < 1e-12);
    }

    #[test]
    fn orthonormal_basis() {
        // Rows e_1..e_4: any two distinct rows are orthogonal (cosine 0).
        // The mean is (1/4)(1,1,1,1) with norm 1/2, so
        // cos(e_i, mean) = (1/4) / (1 * 1/2) = 1/2 = 1/sqrt(4).
        let x = Array2::<f32>::eye(4);
        let a = anisotropy(x.view(), 50, 7).unwrap();
        assert!(a.mean_random_pair_cosine.abs() < 1e-12);
        assert!(a.std_random_pair_cosine.abs() < 1e-12);
        assert!((a.mean_cosine_to_mean - 0.5).abs() < 1e-12);
    }

    #[test]
    fn three_vectors_hand_computed() {
        // a = (1,0), b = (0,1), c = (1,1).
        // Pair cosines: cos(a,b) = 0, cos(a,c) = cos(b,c) = 1/sqrt2; pairs are
        // uniform over the 3 unordered pairs, so the mean random-pair cosine
        // converges to (0 + 2/sqrt2) / 3 = 0.4714 (sampled: checked to 0.01).
        // Mean vector (2/3, 2/3): cos(a,mean) = cos(b,mean) = 1/sqrt2,
        // cos(c,mean) = 1, so mean_cosine_to_mean = (2/sqrt2 + 1) / 3 exactly.
        let x = array![[1.0f32, 0.0], [0.0, 1.0], [1.0, 1.0]];
        let a = anisotropy(x.view(), 60_000, 11).unwrap();
        let expect_pairs = (2.0 / 2f64.sqrt()) / 3.0;
        assert!((a.mean_random_pair_cosine - expect_pairs).abs() < 0.01);
        let expect_mean = (2.0 / 2f64.sqrt() + 1.0) / 3.0;
        assert!((a.mean_cosine_to_mean - expect_mean).abs() < 1e-12);
    }

    #[test]
    fn two_vectors_are_exact() {
        // With two sentences every distinct pair is (0,1) or (1,0):
        // cos((3,4),(4,3)) = 24/25 exactly, std 0.
        let x = array![[3.0f32, 4.0], [4.0, 3.0]];
        let a = anisotropy(x.view(), 10, 0).unwrap();
        assert!((a.mean_random_pair_cosine - 0.96).abs() < 1e-12);
        assert!(a.std_random_pair_cosine < 1e-6);
    }

    #[test]
    fn zero_vector_has_cosine_zero() {
        let x = array![[0.0f32, 0.0], [0.0, 0.0]];
        let a = anisotropy(x.view(), 10, 0).unwrap();
        assert_eq!(a.mean_random_pair_cosine, 0.0);
        assert_eq!(a.mean_cosine_to_mean, 0.0);
    }

    #[test]
    fn seed_determinism() {
        let x = Array2::from_shape_fn((50, 8), |(i, j)| ((i * 7 + j * 13) % 11) as f32 - 5.0);
        let a = anisotropy(x.view(), 200, 5).unwrap();
        let b = anisotropy(x.view(), 200, 5).unwrap();
        let c = anisotropy(x.view(), 200, 6).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.mean_random_pair_cosine, c.mean_random_pair_cosine);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let one = Array2::<f32>::zeros((1, 3));
        assert!(matches!(
            anisotropy(one.view(), 10, 0),
            Err(AnalysisError::TooFew { .. })
        ));
        let x = Array2::<f32>::eye(3);
        assert!(matches!(
            anisotropy(x.view(), 0, 0),
            Err(AnalysisError::InvalidParameter(_))
        ));
        let mut nan = Array2::<f32>::eye(3);
        nan[[1, 1]] = f32::NAN;
        assert!(matches!(
            anisotropy(nan.view(), 5, 0),
            Err(AnalysisError::NonFinite(_))
        ));
        let empty = Array2::<f32>::zeros((3, 0));
        assert!(anisotropy(empty.view(), 5, 0).is_err());
    }
}
