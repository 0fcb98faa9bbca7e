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

use crate::error::{CalibError, Result};
use crate::moments::{check_moments, MomentStats};
use crate::projection::{Configuration, Layout, Projection};
use crate::stats;
use crate::tensors::{TensorReader, TensorWriter};

/// The fitted rotation: `y = (x - mean) R[:, :k]`, `mean` zero unless
/// `centre`; a configuration of [`Projection`].
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
    /// The kept axes and their energies (the mean zero unless `centre`).
    #[serde(skip)]
    projection: Projection,
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
            projection: Projection::new(
                mean,
                vectors.slice(ndarray::s![.., ..out_dim]).to_owned(),
                values[..out_dim].iter().map(|v| v.max(0.0)).collect(),
            ),
        })
    }

    /// Mean subtracted first (zeros when uncentred).
    pub fn mean(&self) -> &Array1<f64> {
        self.projection.mean()
    }

    /// The kept axes as orthonormal columns (dim x out_dim).
    pub fn rotation(&self) -> &Array2<f64> {
        self.projection.matrix()
    }

    /// The energy (second-moment or covariance eigenvalue) of each kept
    /// axis, decreasing.
    pub fn eigenvalues(&self) -> &Array1<f64> {
        self.projection.spectrum()
    }

    /// The projection (mean, axes, energies).
    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// Transform in f64.
    pub fn transform_f64(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        self.project(x)
    }

    /// The file's tensors: `mean` (only when centred), `rotation`, `eigenvalues`.
    fn layout(&self) -> Layout {
        Layout {
            mean: self.centre.then_some("mean"),
            matrix: "rotation",
            spectrum: "eigenvalues",
            spectrum_len: self.out_dim,
        }
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter) {
        self.projection.write_tensors(w, "", &self.layout());
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader) -> Result<()> {
        if self.out_dim > self.dim || self.out_dim == 0 || self.k.is_some_and(|k| k < self.out_dim)
        {
            return Err(r.format_error(format!(
                "inconsistent header: out_dim {} k {:?} dim {}",
                self.out_dim, self.k, self.dim
            )));
        }
        self.projection = Projection::read_tensors(r, "", &self.layout(), self.dim, self.out_dim)?;
        Ok(())
    }
}

impl Configuration for Pca {
    const KIND: &'static str = "pca";
    fn projection(&self) -> &Projection {
        &self.projection
    }
    fn dims(&self) -> (usize, usize) {
        (self.dim, self.out_dim)
    }
    fn description(&self) -> String {
        let axes = if self.centre {
            "covariance axes, centred"
        } else {
            "second-moment axes, a rotation"
        };
        format!("pca ({axes}; {} -> {} dims)", self.dim, self.out_dim)
    }
}
