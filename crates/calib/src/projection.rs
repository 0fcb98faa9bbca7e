//! The affine projection `y = (x - mean) M` that whitening ([`crate::Whitening`]),
//! PCA ([`crate::Pca`]) and soft whitening ([`crate::SoftWhitening`], and so
//! `auto`) are configurations of: one [`Projection`] (the mean, the matrix and
//! the spectrum it was built from) with one transform, one tensor layout and one
//! [`Calibrator`] impl. A configuration says how it was fitted, its dimensions,
//! the names of its tensors in the file, and what follows the projection
//! (soft whitening's blend).

use ndarray::{Array1, Array2, ArrayView2};

use crate::error::{not_loaded, Result};
use crate::stats::{self, check_transform_input};
use crate::tensors::{TensorReader, TensorWriter};
use crate::Calibrator;

/// `y = (x - mean) M`, in f64, and the spectrum (covariance or second-moment
/// eigenvalues, decreasing) `M` was built from. Empty until fitted or read
/// from a file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Projection {
    mean: Array1<f64>,
    matrix: Array2<f64>,
    spectrum: Array1<f64>,
}

/// Where a configuration keeps its projection in a calibrator file: tensor
/// names (after the caller's prefix) and the spectrum's length.
pub(crate) struct Layout {
    /// The mean's tensor; `None`: the mean is zero and not stored.
    pub mean: Option<&'static str>,
    pub matrix: &'static str,
    pub spectrum: &'static str,
    pub spectrum_len: usize,
}

impl Projection {
    pub(crate) fn new(mean: Array1<f64>, matrix: Array2<f64>, spectrum: Array1<f64>) -> Self {
        Self {
            mean,
            matrix,
            spectrum,
        }
    }

    /// Subtracted first (zeros for an uncentred PCA).
    pub fn mean(&self) -> &Array1<f64> {
        &self.mean
    }

    /// `M`, input dimension x output dimension.
    pub fn matrix(&self) -> &Array2<f64> {
        &self.matrix
    }

    /// The eigenvalues `M` was built from, decreasing.
    pub fn spectrum(&self) -> &Array1<f64> {
        &self.spectrum
    }

    /// `(x - mean) M` in f64, for `kind` of `dim` -> `out` dimensions: an
    /// error when the parameters are missing or `x` is not `dim` wide and finite.
    pub(crate) fn apply(
        &self,
        kind: &str,
        dim: usize,
        out: usize,
        x: ArrayView2<f32>,
    ) -> Result<Array2<f64>> {
        if self.mean.len() != dim || self.matrix.dim() != (dim, out) {
            return Err(not_loaded(kind));
        }
        check_transform_input(dim, x)?;
        Ok(stats::centred(x, &self.mean).dot(&self.matrix))
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter, prefix: &str, layout: &Layout) {
        let (dim, out) = self.matrix.dim();
        if let Some(mean) = layout.mean {
            w.f64(
                &format!("{prefix}{mean}"),
                &[dim],
                self.mean.iter().copied(),
            );
        }
        w.f64(
            &format!("{prefix}{}", layout.matrix),
            &[dim, out],
            self.matrix.iter().copied(),
        );
        w.f64(
            &format!("{prefix}{}", layout.spectrum),
            &[layout.spectrum_len],
            self.spectrum.iter().copied(),
        );
    }

    /// The projection of `dim` -> `out` dimensions stored under `prefix`.
    pub(crate) fn read_tensors(
        r: &mut TensorReader,
        prefix: &str,
        layout: &Layout,
        dim: usize,
        out: usize,
    ) -> Result<Self> {
        let mean = match layout.mean {
            Some(mean) => Array1::from(r.f64(&format!("{prefix}{mean}"), &[dim])?),
            None => Array1::zeros(dim),
        };
        let matrix = r.matrix_f64(&format!("{prefix}{}", layout.matrix), dim, out)?;
        let spectrum = Array1::from(r.f64(
            &format!("{prefix}{}", layout.spectrum),
            &[layout.spectrum_len],
        )?);
        Ok(Self {
            mean,
            matrix,
            spectrum,
        })
    }
}

/// A configuration of [`Projection`] (whitening, PCA, soft whitening): its
/// [`Calibrator`] impl is the projection's. Public in a private module: not
/// nameable outside the crate, so no other type takes the blanket impl.
pub trait Configuration {
    /// The kind's name, in errors.
    const KIND: &'static str;
    /// The fitted projection.
    fn projection(&self) -> &Projection;
    /// Input and output dimensions.
    fn dims(&self) -> (usize, usize);
    /// One line for tables and logs ([`Calibrator::describe`]).
    fn description(&self) -> String;
    /// What follows the projection, given the input rows `x` (soft
    /// whitening's blend); nothing by default.
    fn finish(&self, _x: ArrayView2<f32>, z: Array2<f64>) -> Array2<f64> {
        z
    }
    /// The transform in f64.
    fn project(&self, x: ArrayView2<f32>) -> Result<Array2<f64>> {
        let (dim, out) = self.dims();
        let z = self.projection().apply(Self::KIND, dim, out, x)?;
        Ok(self.finish(x, z))
    }
}

impl<T: Configuration> Calibrator for T {
    fn input_dim(&self) -> usize {
        self.dims().0
    }
    fn output_dim(&self) -> usize {
        self.dims().1
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.project(x)?.mapv(|v| v as f32))
    }
    fn describe(&self) -> String {
        self.description()
    }
}
