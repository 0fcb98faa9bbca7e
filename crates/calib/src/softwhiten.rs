//! Soft whitening with covariance shrinkage: a one-parameter family between
//! centring and BERT-whitening.
//!
//! With `Sigma = U diag(s) U^T` the covariance of the fit data (divided by
//! n - 1), the shrunk eigenvalues are `s' = (1 - shrink) s + shrink mean(s)`
//! (Ledoit-Wolf-style shrinkage towards the mean eigenvalue, computed over the
//! directions of non-zero variance) and
//!
//! ```text
//! y = (x - mu) U diag(s'^(-alpha/2))
//! ```
//!
//! `alpha = 0` is centring (a rotation of the centred data: cosines are those
//! of the centred embeddings), `alpha = 1, shrink = 0` is BERT-whitening.
//! Null directions (eigenvalues at most [`ZERO_VARIANCE_RTOL`] times the
//! largest) are dropped as in [`crate::Whitening`], so the output has the
//! covariance's numerical rank as dimension and never contains inf/NaN.
//!
//! [`ZERO_VARIANCE_RTOL`]: crate::ZERO_VARIANCE_RTOL

use ndarray::{Array1, Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::error::{CalibError, Result};
use crate::io::{TensorReader, TensorWriter};
use crate::linear::{check_transform_input, not_loaded};
use crate::stats;
use crate::Calibrator;

/// Soft whitening `y = (x - mu) U diag(s'^(-alpha/2))`; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoftWhitening {
    /// Input dimension.
    pub dim: usize,
    /// Whitening strength in [0, 1]: 0 centres, 1 whitens fully.
    pub alpha: f64,
    /// Shrinkage of the eigenvalues towards their mean, in [0, 1].
    pub shrink: f64,
    /// Numerical rank of the fit data's covariance (= output dimension).
    pub rank: usize,
    #[serde(skip)]
    mean: Array1<f64>,
    #[serde(skip)]
    w: Array2<f64>,
    #[serde(skip)]
    eigenvalues: Array1<f64>,
}

/// Checks `alpha` and `shrink` (both finite, in [0, 1]).
pub(crate) fn check_params(alpha: f64, shrink: f64) -> std::result::Result<(), String> {
    if !(alpha.is_finite() && (0.0..=1.0).contains(&alpha)) {
        return Err(format!("alpha must be a number in [0, 1], got {alpha}"));
    }
    if !(shrink.is_finite() && (0.0..=1.0).contains(&shrink)) {
        return Err(format!("shrink must be a number in [0, 1], got {shrink}"));
    }
    Ok(())
}

/// The covariance eigendecomposition of `x` (f64, decreasing), its mean and
/// numerical rank: what soft whitening and `auto` both start from.
pub(crate) struct Eigen {
    pub mean: Array1<f64>,
    pub values: Vec<f64>,
    pub vectors: Array2<f64>,
    pub rank: usize,
}

impl Eigen {
    pub(crate) fn of(kind: &'static str, x: ArrayView2<f32>) -> Result<Self> {
        stats::check_fit_input(kind, x, 2)?;
        Self::from_moments(kind, &crate::MomentStats::from_data(x)?)
    }

    /// The same from moment statistics (streamed or merged).
    pub(crate) fn from_moments(kind: &'static str, moments: &crate::MomentStats) -> Result<Self> {
        stats::check_rows(kind, moments.count(), 2)?;
        let mean = moments.mean().clone();
        let cov = moments.covariance()?;
        let (values, vectors) = stats::sym_eigen_desc(&cov)?;
        let rank = stats::numerical_rank(&values);
        if rank == 0 {
            return Err(CalibError::BadData {
                kind,
                reason: "every dimension is constant (zero covariance)".into(),
            });
        }
        Ok(Eigen {
            mean,
            values,
            vectors,
            rank,
        })
    }
}

impl SoftWhitening {
    pub(crate) fn fit(x: ArrayView2<f32>, alpha: f64, shrink: f64) -> Result<Self> {
        check_params(alpha, shrink).map_err(|reason| CalibError::BadData {
            kind: "softwhiten",
            reason,
        })?;
        let e = Eigen::of("softwhiten", x)?;
        Ok(Self::from_eigen(&e, alpha, shrink))
    }

    pub(crate) fn from_eigen(e: &Eigen, alpha: f64, shrink: f64) -> Self {
        let d = e.mean.len();
        let r = e.rank;
        let kept = &e.values[..r];
        let mean_value = kept.iter().sum::<f64>() / r as f64;
        let shrunk: Vec<f64> = kept
            .iter()
            .map(|&s| (1.0 - shrink) * s + shrink * mean_value)
            .collect();
        let mut w = Array2::<f64>::zeros((d, r));
        for (j, &s) in shrunk.iter().enumerate() {
            // Relative to the largest value, so alpha = 0 is an exact rotation
            // and the scale of the output stays near that of the input.
            let f = (s / shrunk[0]).powf(-alpha / 2.0);
            for i in 0..d {
                w[[i, j]] = e.vectors[[i, j]] * f;
            }
        }
        SoftWhitening {
            dim: d,
            alpha,
            shrink,
            rank: r,
            mean: e.mean.clone(),
            w,
            eigenvalues: Array1::from(kept.to_vec()),
        }
    }

    /// Mean subtracted before projecting.
    pub fn mean(&self) -> &Array1<f64> {
        &self.mean
    }

    /// The projection `U diag(s'^(-alpha/2))`, scaled so that its first
    /// column has unit norm (dim x rank).
    pub fn matrix(&self) -> &Array2<f64> {
        &self.w
    }

    /// Covariance eigenvalues of the kept directions (before shrinkage), decreasing.
    pub fn eigenvalues(&self) -> &Array1<f64> {
        &self.eigenvalues
    }

    /// Transform in f64.
    pub fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        if self.mean.len() != self.dim || self.w.dim() != (self.dim, self.rank) {
            return Err(not_loaded("softwhiten"));
        }
        check_transform_input(self.dim, x)?;
        let xc = stats::centred(x, &self.mean);
        Ok(xc.dot(&self.w))
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter, prefix: &str) {
        w.f64(
            &format!("{prefix}mean"),
            &[self.dim],
            self.mean.iter().copied(),
        );
        w.f64(
            &format!("{prefix}w"),
            &[self.dim, self.rank],
            self.w.iter().copied(),
        );
        w.f64(
            &format!("{prefix}eigenvalues"),
            &[self.rank],
            self.eigenvalues.iter().copied(),
        );
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader, prefix: &str) -> Result<()> {
        if self.rank > self.dim || self.rank == 0 {
            return Err(r.format_error(format!(
                "inconsistent header: rank {} dim {}",
                self.rank, self.dim
            )));
        }
        if let Err(reason) = check_params(self.alpha, self.shrink) {
            return Err(r.format_error(format!("inconsistent header: {reason}")));
        }
        self.mean = Array1::from(r.f64(&format!("{prefix}mean"), &[self.dim])?);
        self.w = Array2::from_shape_vec(
            (self.dim, self.rank),
            r.f64(&format!("{prefix}w"), &[self.dim, self.rank])?,
        )
        .map_err(|e| r.format_error(e.to_string()))?;
        self.eigenvalues = Array1::from(r.f64(&format!("{prefix}eigenvalues"), &[self.rank])?);
        Ok(())
    }
}

impl Calibrator for SoftWhitening {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.rank
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.transform_f64(x)?.mapv(|v| v as f32))
    }
    fn describe(&self) -> String {
        format!(
            "softwhiten (alpha={}, shrink={}, covariance rank {}; {} -> {} dims)",
            self.alpha, self.shrink, self.rank, self.dim, self.rank
        )
    }
}
