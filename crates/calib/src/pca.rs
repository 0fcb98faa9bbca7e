//! `pca[:k=N,centre=BOOL]`: a rotation onto the principal axes, in order of
//! decreasing energy, optionally cut to the first `k`.
//!
//! Uncentred (the default), the axes are the eigenvectors of the second
//! moment `X^T X / n`: the map is a pure rotation (with `k` absent, every
//! cosine and norm is kept exactly), and the first `k` coordinates are the
//! linear cut that keeps the most energy. With `centre=true` the axes are
//! those of the covariance and the mean is subtracted first (PCA proper).

use ndarray::{Array1, Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::error::not_loaded;
use crate::error::{CalibError, Result};
use crate::moments::{check_moments, MomentStats};
use crate::stats::check_transform_input;
use crate::tensors::{TensorReader, TensorWriter};
use crate::{stats, Calibrator};

/// The fitted rotation: `y = (x - mean) R[:, :k]`, `mean` zero unless
/// `centre`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pca {
    /// Input dimension.
    pub dim: usize,
    /// Requested number of axes kept (`None`: all).
    pub k: Option<usize>,
    /// Whether the mean is subtracted (axes of the covariance).
    pub centre: bool,
    /// Output dimension: `min(k, dim)`.
    pub out_dim: usize,
    #[serde(skip)]
    mean: Array1<f64>,
    #[serde(skip)]
    rotation: Array2<f64>,
    #[serde(skip)]
    eigenvalues: Array1<f64>,
}

impl Pca {
    pub(crate) fn from_moments(
        stats: &MomentStats,
        k: Option<usize>,
        centre: bool,
    ) -> Result<Self> {
        let d = stats.dim();
        let (matrix, mean) = if centre {
            check_moments("pca", stats, 2)?;
            (stats.covariance()?, stats.mean().clone())
        } else {
            check_moments("pca", stats, 1)?;
            // X^T X / n = M2 / n + mean mean^T, kept exactly symmetric.
            let n = stats.count() as f64;
            let m = stats.mean();
            let mut s = stats.comoment() / n;
            for ((i, j), v) in s.indexed_iter_mut() {
                *v += m[i] * m[j];
            }
            (s, Array1::zeros(d))
        };
        let (values, vectors) = stats::sym_eigen_desc(&matrix)?;
        if values.first().copied().unwrap_or(0.0) <= 0.0 {
            return Err(CalibError::BadData {
                kind: "pca",
                reason: if centre {
                    "every dimension is constant (zero covariance)".into()
                } else {
                    "every row is zero".into()
                },
            });
        }
        let out_dim = k.map_or(d, |k| k.min(d));
        Ok(Pca {
            dim: d,
            k,
            centre,
            out_dim,
            mean,
            rotation: vectors.slice(ndarray::s![.., ..out_dim]).to_owned(),
            eigenvalues: values[..out_dim].iter().map(|v| v.max(0.0)).collect(),
        })
    }

    /// Mean subtracted first (zeros when uncentred).
    pub fn mean(&self) -> &Array1<f64> {
        &self.mean
    }

    /// The kept axes as orthonormal columns (dim x out_dim).
    pub fn rotation(&self) -> &Array2<f64> {
        &self.rotation
    }

    /// The energy (second-moment or covariance eigenvalue) of each kept
    /// axis, decreasing.
    pub fn eigenvalues(&self) -> &Array1<f64> {
        &self.eigenvalues
    }

    /// Transform in f64.
    pub fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        if self.mean.len() != self.dim || self.rotation.dim() != (self.dim, self.out_dim) {
            return Err(not_loaded("pca"));
        }
        check_transform_input(self.dim, x)?;
        Ok(stats::centred(x, &self.mean).dot(&self.rotation))
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter) {
        if self.centre {
            w.f64("mean", &[self.dim], self.mean.iter().copied());
        }
        w.f64(
            "rotation",
            &[self.dim, self.out_dim],
            self.rotation.iter().copied(),
        );
        w.f64(
            "eigenvalues",
            &[self.out_dim],
            self.eigenvalues.iter().copied(),
        );
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader) -> Result<()> {
        if self.out_dim > self.dim || self.out_dim == 0 || self.k.is_some_and(|k| k < self.out_dim)
        {
            return Err(r.format_error(format!(
                "inconsistent header: out_dim {} k {:?} dim {}",
                self.out_dim, self.k, self.dim
            )));
        }
        self.mean = if self.centre {
            Array1::from(r.f64("mean", &[self.dim])?)
        } else {
            Array1::zeros(self.dim)
        };
        self.rotation = r.matrix_f64("rotation", self.dim, self.out_dim)?;
        self.eigenvalues = Array1::from(r.f64("eigenvalues", &[self.out_dim])?);
        Ok(())
    }
}

impl Calibrator for Pca {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.out_dim
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.transform_f64(x)?.mapv(|v| v as f32))
    }
    fn describe(&self) -> String {
        let axes = if self.centre {
            "covariance axes, centred"
        } else {
            "second-moment axes, a rotation"
        };
        format!("pca ({axes}; {} -> {} dims)", self.dim, self.out_dim)
    }
}
