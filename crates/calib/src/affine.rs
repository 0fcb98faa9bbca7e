//! Calibrators that are affine maps, `z = x W + b`, in closed form: what a
//! sentence-transformers `Dense` module (identity activation) computes, so a
//! model calibrated by them can be exported without bertflow.

use ndarray::{Array1, Array2, Axis};

use crate::Fitted;

/// `z = x W + b` for row vectors `x` (`weight`: input x output dimension).
#[derive(Debug, Clone, PartialEq)]
pub struct Affine {
    /// `W`, input dimension x output dimension.
    pub weight: Array2<f64>,
    /// `b`, output dimension.
    pub bias: Array1<f64>,
}

impl Affine {
    /// `(x - mean) W`.
    fn centred(mean: &Array1<f64>, weight: Array2<f64>) -> Self {
        let bias = -mean.dot(&weight);
        Self { weight, bias }
    }

    /// `self` then `next`.
    fn then(self, next: Affine) -> Self {
        Self {
            bias: self.bias.dot(&next.weight) + &next.bias,
            weight: self.weight.dot(&next.weight),
        }
    }

    /// Apply to the rows of `x` (in f64).
    pub fn apply(&self, x: &Array2<f64>) -> Array2<f64> {
        x.dot(&self.weight) + self.bias.view().insert_axis(Axis(0))
    }
}

/// `mean`-centring then `I - D D^T` (all-but-the-top with directions `D`).
fn natsv(mean: &Array1<f64>, directions: &Array2<f64>) -> Affine {
    let d = mean.len();
    let weight = Array2::eye(d) - directions.dot(&directions.t());
    Affine::centred(mean, weight)
}

impl Fitted {
    /// The calibrator as an affine map, or `None` when it is not one (`flow`,
    /// and `softwhiten`/`auto` with `blend`, which normalise before mixing).
    pub fn affine(&self) -> Option<Affine> {
        match self {
            Fitted::None(c) => Some(Affine {
                weight: Array2::eye(c.dim),
                bias: Array1::zeros(c.dim),
            }),
            Fitted::Sn(c) => Some(Affine::centred(c.mean(), Array2::from_diag(c.scale()))),
            Fitted::Whiten(c) => Some(Affine::centred(c.mean(), c.matrix().clone())),
            Fitted::Natsv(c) => Some(natsv(c.mean(), c.directions())),
            Fitted::SnNatsv(c) => Some(
                Affine::centred(c.sn.mean(), Array2::from_diag(c.sn.scale()))
                    .then(natsv(c.natsv.mean(), c.natsv.directions())),
            ),
            Fitted::SoftWhiten(c) if c.params.blend == 0.0 => {
                Some(Affine::centred(c.mean(), c.matrix().clone()))
            }
            Fitted::Auto(a) => match &a.transform {
                None => Some(Affine {
                    weight: Array2::eye(a.dim),
                    bias: Array1::zeros(a.dim),
                }),
                Some(t) if t.params.blend == 0.0 => {
                    Some(Affine::centred(t.mean(), t.matrix().clone()))
                }
                Some(_) => None,
            },
            Fitted::Pca(c) => Some(Affine::centred(c.mean(), c.rotation().clone())),
            Fitted::SoftWhiten(_) | Fitted::Flow(_) => None,
        }
    }
}
