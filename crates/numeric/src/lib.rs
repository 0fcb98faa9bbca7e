//! # bertflow-numeric
//!
//! The numeric helpers that several bertflow crates need, written once:
//!
//! * [`rng`]: deterministic generators ([`SplitMix64`], [`Xoshiro256StarStar`])
//!   whose streams depend only on their seed, never on a dependency's version
//!   (the analyses' samples and the flow's initialisation and batches are
//!   reproducible from a seed);
//! * [`linalg`]: column means, centred Gram (co-moment) matrices accumulated
//!   in f64 over row blocks, and symmetric eigendecompositions with a fixed
//!   order and sign convention;
//! * [`cosine`]: the cosine similarity every crate computes (f64 sums over
//!   f32 coordinates; 0 when either vector is zero).
//!
//! The crate has no opinion about tolerances or error types of its callers:
//! `bertflow-calib` and `bertflow-analysis` wrap these functions in their own
//! checks and errors.

#![warn(missing_docs)]

pub mod linalg;
pub mod rng;

pub use linalg::{
    centred_gram_cols, centred_gram_rows, centred_gram_sym, col_mean, sym_eigen_desc,
    sym_eigenvalues_desc, EigenError,
};
pub use rng::{SplitMix64, Xoshiro256StarStar};

/// Cosine similarity of two vectors of equal length, summed in f64 in
/// coordinate order; 0 when either vector is zero.
pub fn cosine(a: impl IntoIterator<Item = f32>, b: impl IntoIterator<Item = f32>) -> f64 {
    let (mut dot, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.into_iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    dot / (aa.sqrt() * bb.sqrt())
}

#[cfg(test)]
mod tests {
    use super::cosine;

    #[test]
    fn cosine_of_parallel_orthogonal_opposite_and_zero_vectors() {
        assert_eq!(cosine([1.0, 0.0], [2.0, 0.0]), 1.0);
        assert_eq!(cosine([1.0, 0.0], [0.0, 3.0]), 0.0);
        assert!((cosine([1.0, 1.0], [-1.0, -1.0]) + 1.0).abs() < 1e-15);
        assert_eq!(cosine([0.0, 0.0], [1.0, 2.0]), 0.0);
        // 3-4-5 against 5-12-13: 63/65.
        assert!((cosine([3.0, 4.0], [5.0, 12.0]) - 63.0 / 65.0).abs() < 1e-15);
    }
}
