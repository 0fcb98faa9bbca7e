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
//!
//! Two options extend the family:
//! - `drop = k` removes the k leading principal directions first (as
//!   all-but-the-top does) and scales the rest relative to the first kept one;
//! - `blend = b` (in [0, 1)) mixes the raw direction back in: with `z` the soft
//!   whitened vector rotated back into input coordinates,
//!   `y = b x/|x| + (1 - b) z/|z|`, so the cosine of two outputs is (up to the
//!   norm of `y`) a mix of their raw and their whitened cosine. A blended
//!   output keeps the input dimension. This is not linear: it is what lets
//!   `auto` beat every linear map on CLS embeddings.
//!
//! Null directions (eigenvalues at most [`ZERO_VARIANCE_RTOL`] times the
//! largest) are dropped as in [`crate::Whitening`], so the output has the
//! covariance's numerical rank as dimension and never contains inf/NaN.
//!
//! [`ZERO_VARIANCE_RTOL`]: crate::ZERO_VARIANCE_RTOL

use ndarray::{Array1, Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::error::{CalibError, Result};
use crate::moments::MomentStats;
use crate::projection::{Configuration, Layout, Projection};
use crate::spec::{CalibSpec, SoftParams};
use crate::stats;
use crate::tensors::{TensorReader, TensorWriter};

/// Soft whitening `y = (x - mu) U diag(s'^(-alpha/2))`, a configuration of
/// [`Projection`] (then the blend, if any); see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SoftWhitening {
    /// Input dimension.
    pub dim: usize,
    /// The options it was fitted with (flattened into the file header).
    #[serde(flatten)]
    pub params: SoftParams,
    /// Numerical rank of the fit data's covariance (the output dimension is
    /// `rank - drop`, or `dim` when blended).
    pub rank: usize,
    /// The mean, the matrix and the kept eigenvalues (before shrinkage).
    #[serde(skip)]
    projection: Projection,
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
        Self::from_moments(kind, &MomentStats::from_data(x)?)
    }

    /// The same from moment statistics (streamed or merged).
    pub(crate) fn from_moments(kind: &'static str, moments: &MomentStats) -> Result<Self> {
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
    pub(crate) fn fit(x: ArrayView2<f32>, p: SoftParams) -> Result<Self> {
        let e = Eigen::of("softwhiten", x)?;
        Self::from_eigen(&e, p)
    }

    /// `p` comes from a checked spec or from `auto`'s rule.
    pub(crate) fn from_eigen(e: &Eigen, p: SoftParams) -> Result<Self> {
        let d = e.mean.len();
        let r = e.rank;
        if p.drop >= r {
            return Err(CalibError::BadData {
                kind: "softwhiten",
                reason: format!(
                    "drop={} leaves no direction: the fit data's covariance has rank {r}",
                    p.drop
                ),
            });
        }
        let kept = &e.values[..r];
        let mean_value = kept.iter().sum::<f64>() / r as f64;
        let shrunk: Vec<f64> = kept
            .iter()
            .map(|&s| (1.0 - p.shrink) * s + p.shrink * mean_value)
            .collect();
        let out = if p.blend > 0.0 { d } else { r - p.drop };
        let mut w = Array2::<f64>::zeros((d, out));
        for (j, &s) in shrunk.iter().enumerate().skip(p.drop) {
            // Relative to the largest kept value, so alpha = 0 is an exact
            // rotation and the scale of the output stays near that of the input.
            let f = (s / shrunk[p.drop]).powf(-p.alpha / 2.0);
            if p.blend > 0.0 {
                // U_kept diag(f) U_kept^T: back in input coordinates.
                for i in 0..d {
                    let a = e.vectors[[i, j]] * f;
                    for k in 0..d {
                        w[[i, k]] += a * e.vectors[[k, j]];
                    }
                }
            } else {
                for i in 0..d {
                    w[[i, j - p.drop]] = e.vectors[[i, j]] * f;
                }
            }
        }
        Ok(SoftWhitening {
            dim: d,
            params: p,
            rank: r,
            projection: Projection::new(e.mean.clone(), w, Array1::from(kept.to_vec())),
        })
    }

    fn out_dim(&self) -> usize {
        if self.params.blend > 0.0 {
            self.dim
        } else {
            self.rank.saturating_sub(self.params.drop)
        }
    }

    /// Mean subtracted before projecting.
    pub fn mean(&self) -> &Array1<f64> {
        self.projection.mean()
    }

    /// The projection `U diag(s'^(-alpha/2))` over the kept directions,
    /// scaled so that its first column has unit norm (dim x (rank - drop));
    /// when blended, `U diag(s'^(-alpha/2)) U^T` (dim x dim).
    pub fn matrix(&self) -> &Array2<f64> {
        self.projection.matrix()
    }

    /// Covariance eigenvalues of the kept directions (before shrinkage), decreasing.
    pub fn eigenvalues(&self) -> &Array1<f64> {
        self.projection.spectrum()
    }

    /// The projection (mean, matrix, eigenvalues).
    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// Transform in f64.
    pub fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        self.project(x)
    }

    /// The file's tensors: `mean`, `w`, `eigenvalues` (all `rank` of them).
    fn layout(&self) -> Layout {
        Layout {
            mean: Some("mean"),
            matrix: "w",
            spectrum: "eigenvalues",
            spectrum_len: self.rank,
        }
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter, prefix: &str) {
        self.projection.write_tensors(w, prefix, &self.layout());
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader, prefix: &str) -> Result<()> {
        if self.rank > self.dim || self.rank == 0 || self.params.drop >= self.rank {
            return Err(r.format_error(format!(
                "inconsistent header: rank {} dim {} drop {}",
                self.rank, self.dim, self.params.drop
            )));
        }
        if let Err(e) = CalibSpec::from_soft(&self.params) {
            let reason = match e {
                CalibError::Spec { reason, .. } => reason,
                other => other.to_string(),
            };
            return Err(r.format_error(format!("inconsistent header: {reason}")));
        }
        let out = self.out_dim();
        self.projection = Projection::read_tensors(r, prefix, &self.layout(), self.dim, out)?;
        Ok(())
    }
}

impl Configuration for SoftWhitening {
    const KIND: &'static str = "softwhiten";
    fn projection(&self) -> &Projection {
        &self.projection
    }
    fn dims(&self) -> (usize, usize) {
        (self.dim, self.out_dim())
    }
    /// The blend: `y = b x/|x| + (1 - b) z/|z|`.
    fn finish(&self, x: ArrayView2<f32>, mut z: Array2<f64>) -> Array2<f64> {
        if self.params.blend > 0.0 {
            let b = self.params.blend;
            for (mut zr, xr) in z.rows_mut().into_iter().zip(x.rows()) {
                let xn = xr.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
                let zn = zr.iter().map(|v| v * v).sum::<f64>().sqrt();
                let xs = if xn > 0.0 { b / xn } else { 0.0 };
                let zs = if zn > 0.0 { (1.0 - b) / zn } else { 0.0 };
                for (zv, &xv) in zr.iter_mut().zip(xr.iter()) {
                    *zv = xs * xv as f64 + zs * *zv;
                }
            }
        }
        z
    }
    fn description(&self) -> String {
        let mut opts = format!("alpha={}, shrink={}", self.params.alpha, self.params.shrink);
        if self.params.drop > 0 {
            opts.push_str(&format!(", drop={}", self.params.drop));
        }
        if self.params.blend > 0.0 {
            opts.push_str(&format!(", blend={}", self.params.blend));
        }
        format!(
            "softwhiten ({opts}, covariance rank {}; {} -> {} dims)",
            self.rank,
            self.dim,
            self.out_dim()
        )
    }
}
