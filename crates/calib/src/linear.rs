//! The closed-form calibrators: identity, standard normalisation, whitening
//! and all-but-the-top. Statistics and transforms are computed in f64; the
//! parameters are stored as f64 tensors.

use ndarray::{Array1, Array2, ArrayView2, Axis};
use serde::{Deserialize, Serialize};

use crate::error::not_loaded;
use crate::error::{CalibError, Result};
use crate::moments::{check_moments, MomentStats};
use crate::projection::{Configuration, Layout, Projection};
use crate::stats::check_transform_input;
use crate::stats::{self, ZERO_VARIANCE_RTOL};
use crate::tensors::{TensorReader, TensorWriter};
use crate::Calibrator;

/// The identity: the raw embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// Input (= output) dimension.
    pub dim: usize,
}

impl Calibrator for Identity {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.dim
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        check_transform_input(self.dim, x)?;
        Ok(x.to_owned())
    }
    fn describe(&self) -> String {
        format!("none (identity, {} dims)", self.dim)
    }
}

/// Standard normalisation per dimension: `(x - mean) / std`, with the
/// population standard deviation (divide by n, like scikit-learn's
/// `StandardScaler`).
///
/// A dimension whose variance is zero, or at most
/// [`ZERO_VARIANCE_RTOL`] times the largest variance, is mapped to 0 (its
/// scale is stored as 0) instead of producing inf/NaN; its indices are listed
/// in `zero_variance`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandardNorm {
    /// Input (= output) dimension.
    pub dim: usize,
    /// Dimensions treated as constant (mapped to 0).
    pub zero_variance: Vec<usize>,
    #[serde(skip)]
    mean: Array1<f64>,
    #[serde(skip)]
    scale: Array1<f64>,
}

impl StandardNorm {
    pub(crate) fn from_moments(stats: &MomentStats) -> Result<Self> {
        check_moments("sn", stats, 2)?;
        let var = stats.variance()?;
        let max_var = var.iter().copied().fold(0.0, f64::max);
        let mut zero_variance = Vec::new();
        let scale = Array1::from_iter(var.iter().enumerate().map(|(j, &v)| {
            if v > ZERO_VARIANCE_RTOL * max_var && v > 0.0 {
                1.0 / v.sqrt()
            } else {
                zero_variance.push(j);
                0.0
            }
        }));
        Ok(StandardNorm {
            dim: stats.dim(),
            zero_variance,
            mean: stats.mean().clone(),
            scale,
        })
    }

    /// Per-dimension means.
    pub fn mean(&self) -> &Array1<f64> {
        &self.mean
    }

    /// Per-dimension multipliers (1/std, or 0 for zero-variance dimensions).
    pub fn scale(&self) -> &Array1<f64> {
        &self.scale
    }

    /// Transform kept in f64 (used by `sn+natsv`).
    pub(crate) fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        if self.mean.len() != self.dim || self.scale.len() != self.dim {
            return Err(not_loaded("sn"));
        }
        check_transform_input(self.dim, x)?;
        let mut y = x.mapv(|v| v as f64);
        for mut row in y.rows_mut() {
            for ((v, &m), &s) in row.iter_mut().zip(self.mean.iter()).zip(self.scale.iter()) {
                *v = (*v - m) * s;
            }
        }
        Ok(y)
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter, prefix: &str) {
        w.f64(
            &format!("{prefix}mean"),
            &[self.dim],
            self.mean.iter().copied(),
        );
        w.f64(
            &format!("{prefix}scale"),
            &[self.dim],
            self.scale.iter().copied(),
        );
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader, prefix: &str) -> Result<()> {
        self.mean = Array1::from(r.f64(&format!("{prefix}mean"), &[self.dim])?);
        self.scale = Array1::from(r.f64(&format!("{prefix}scale"), &[self.dim])?);
        Ok(())
    }
}

impl Calibrator for StandardNorm {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.dim
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.transform_f64(x)?.mapv(|v| v as f32))
    }
    fn describe(&self) -> String {
        format!(
            "sn (standardise {} dims; {} zero-variance dims mapped to 0)",
            self.dim,
            self.zero_variance.len()
        )
    }
}

/// BERT-whitening (Su et al. 2021), a configuration of [`Projection`]: `y = (x - mu) U[:, :k] diag(1/sqrt(s[:k]))`
/// with `Sigma = U diag(s) U^T` the covariance (divided by n - 1), eigenvalues
/// in decreasing order.
///
/// Rank deficiency (constant dimensions, n <= d, collinear dimensions):
/// eigenvalues at most [`ZERO_VARIANCE_RTOL`] times the largest are null
/// directions and are dropped, so the output dimension is
/// `min(k, numerical rank)` and never contains inf/NaN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Whitening {
    /// Input dimension.
    pub dim: usize,
    /// Requested number of directions (`None`: all of non-zero variance).
    pub k: Option<usize>,
    /// Numerical rank of the fit data's covariance.
    pub rank: usize,
    /// Output dimension: `min(k, rank)`.
    pub out_dim: usize,
    /// `W[:, :k]` and the kept eigenvalues.
    #[serde(skip)]
    projection: Projection,
}

impl Whitening {
    pub(crate) fn from_moments(stats: &MomentStats, k: Option<usize>) -> Result<Self> {
        check_moments("whiten", stats, 2)?;
        let (values, vectors) = stats::sym_eigen_desc(&stats.covariance()?)?;
        let rank = stats::numerical_rank(&values);
        if rank == 0 {
            return Err(CalibError::BadData {
                kind: "whiten",
                reason: "every dimension is constant (zero covariance)".into(),
            });
        }
        let out_dim = k.map_or(rank, |k| k.min(rank));
        let d = stats.dim();
        let mut w = Array2::<f64>::zeros((d, out_dim));
        for j in 0..out_dim {
            let f = 1.0 / values[j].sqrt();
            for i in 0..d {
                w[[i, j]] = vectors[[i, j]] * f;
            }
        }
        Ok(Whitening {
            dim: d,
            k,
            rank,
            out_dim,
            projection: Projection::new(
                stats.mean().clone(),
                w,
                Array1::from(values[..out_dim].to_vec()),
            ),
        })
    }

    /// Mean subtracted before projecting.
    pub fn mean(&self) -> &Array1<f64> {
        self.projection.mean()
    }

    /// The whitening matrix `W[:, :k]` (dim x out_dim).
    pub fn matrix(&self) -> &Array2<f64> {
        self.projection.matrix()
    }

    /// The covariance eigenvalues of the kept directions, decreasing.
    pub fn eigenvalues(&self) -> &Array1<f64> {
        self.projection.spectrum()
    }

    /// The projection (mean, `W`, eigenvalues).
    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// Transform in f64 (tests check the whitened covariance at f64 precision).
    pub fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        self.project(x)
    }

    /// The file's tensors: `mean`, `w`, `eigenvalues` (of the kept directions).
    fn layout(&self) -> Layout {
        Layout {
            mean: Some("mean"),
            matrix: "w",
            spectrum: "eigenvalues",
            spectrum_len: self.out_dim,
        }
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter) {
        self.projection.write_tensors(w, "", &self.layout());
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader) -> Result<()> {
        if self.out_dim > self.dim || self.rank > self.dim || self.out_dim > self.rank {
            return Err(r.format_error(format!(
                "inconsistent header: out_dim {} rank {} dim {}",
                self.out_dim, self.rank, self.dim
            )));
        }
        self.projection = Projection::read_tensors(r, "", &self.layout(), self.dim, self.out_dim)?;
        Ok(())
    }
}

impl Configuration for Whitening {
    const KIND: &'static str = "whiten";
    fn projection(&self) -> &Projection {
        &self.projection
    }
    fn dims(&self) -> (usize, usize) {
        (self.dim, self.out_dim)
    }
    fn description(&self) -> String {
        let k = self.k.map_or("all".to_string(), |k| k.to_string());
        format!(
            "whiten (k={k}, covariance rank {}; {} -> {} dims)",
            self.rank, self.dim, self.out_dim
        )
    }
}

/// All-but-the-top (Mu & Viswanath 2018): subtract the mean, then remove the
/// projections on the top-k principal directions of the centred data.
///
/// If the covariance has numerical rank below k, only the rank-many
/// directions of non-zero variance are removed (`removed` says how many).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Natsv {
    /// Input (= output) dimension.
    pub dim: usize,
    /// Requested number of directions to remove.
    pub k: usize,
    /// Directions actually removed: `min(k, rank)`.
    pub removed: usize,
    #[serde(skip)]
    mean: Array1<f64>,
    #[serde(skip)]
    directions: Array2<f64>,
}

impl Natsv {
    /// From the mean and the covariance (divided by n - 1) of the data.
    fn from_covariance(mean: Array1<f64>, cov: &Array2<f64>, k: usize) -> Result<Self> {
        let (values, vectors) = stats::sym_eigen_desc(cov)?;
        let removed = k.min(stats::numerical_rank(&values));
        let directions = vectors.slice(ndarray::s![.., ..removed]).to_owned();
        Ok(Natsv {
            dim: mean.len(),
            k,
            removed,
            mean,
            directions,
        })
    }

    pub(crate) fn from_moments(stats: &MomentStats, k: usize) -> Result<Self> {
        check_moments("natsv", stats, 2)?;
        Self::from_covariance(stats.mean().clone(), &stats.covariance()?, k)
    }

    /// Mean subtracted first.
    pub fn mean(&self) -> &Array1<f64> {
        &self.mean
    }

    /// The removed principal directions, as orthonormal columns (dim x removed).
    pub fn directions(&self) -> &Array2<f64> {
        &self.directions
    }

    pub(crate) fn transform_from_f64(&self, x: Array2<f64>) -> Result<Array2<f64>> {
        if self.mean.len() != self.dim || self.directions.dim() != (self.dim, self.removed) {
            return Err(not_loaded("natsv"));
        }
        let xc = x - self.mean.view().insert_axis(Axis(0));
        let proj = xc.dot(&self.directions);
        Ok(xc - proj.dot(&self.directions.t()))
    }

    /// Transform in f64.
    pub fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        check_transform_input(self.dim, x)?;
        self.transform_from_f64(x.mapv(|v| v as f64))
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter, prefix: &str) {
        w.f64(
            &format!("{prefix}mean"),
            &[self.dim],
            self.mean.iter().copied(),
        );
        w.f64(
            &format!("{prefix}directions"),
            &[self.dim, self.removed],
            self.directions.iter().copied(),
        );
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader, prefix: &str) -> Result<()> {
        if self.removed > self.dim || self.removed > self.k {
            return Err(r.format_error(format!(
                "inconsistent header: removed {} k {} dim {}",
                self.removed, self.k, self.dim
            )));
        }
        self.mean = Array1::from(r.f64(&format!("{prefix}mean"), &[self.dim])?);
        self.directions = r.matrix_f64(&format!("{prefix}directions"), self.dim, self.removed)?;
        Ok(())
    }
}

impl Calibrator for Natsv {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.dim
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.transform_f64(x)?.mapv(|v| v as f32))
    }
    fn describe(&self) -> String {
        format!(
            "natsv (centre, remove top {} of {} principal directions; k={})",
            self.removed, self.dim, self.k
        )
    }
}

/// `sn` followed by `natsv` fitted on the standardised data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnNatsv {
    /// The standardisation, applied first.
    pub sn: StandardNorm,
    /// All-but-the-top on the standardised data.
    pub natsv: Natsv,
}

impl SnNatsv {
    /// The standardised data `z = S (x - mean)` (S the diagonal of sn's
    /// scales, 0 on zero-variance dimensions) has mean 0 and covariance
    /// `S C S`, C the covariance of x: natsv is fitted from those. The
    /// product `c_ij (s_i s_j)` keeps the matrix exactly symmetric.
    pub(crate) fn from_moments(stats: &MomentStats, k: usize) -> Result<Self> {
        check_moments("sn+natsv", stats, 2)?;
        let sn = StandardNorm::from_moments(stats)?;
        let mut cov = stats.covariance()?;
        for ((i, j), c) in cov.indexed_iter_mut() {
            *c *= sn.scale[i] * sn.scale[j];
        }
        let natsv = Natsv::from_covariance(Array1::zeros(stats.dim()), &cov, k)?;
        Ok(SnNatsv { sn, natsv })
    }
}

impl Calibrator for SnNatsv {
    fn input_dim(&self) -> usize {
        self.sn.dim
    }
    fn output_dim(&self) -> usize {
        self.natsv.dim
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        let z = self.sn.transform_f64(x)?;
        Ok(self.natsv.transform_from_f64(z)?.mapv(|v| v as f32))
    }
    fn describe(&self) -> String {
        format!(
            "sn+natsv: {}, then {}",
            self.sn.describe(),
            self.natsv.describe()
        )
    }
}
