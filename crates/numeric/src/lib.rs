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
//!   order and sign convention.
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
