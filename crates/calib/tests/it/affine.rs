//! Every affine calibrator's closed form `x W + b` equals its `transform`
//! (including a zero-variance column and a rank-deficient covariance), and
//! the calibrators that are not affine say so.

use crate::common;

use bertflow_calib::{fit, CalibSpec, Calibrator, FitOptions, Fitted};
use common::*;
use ndarray::Array2;

fn fitted(spec: &str, x: &Array2<f32>) -> Fitted {
    let spec: CalibSpec = spec.parse().unwrap();
    fit(&spec, x.view(), &mut FitOptions::new()).unwrap()
}

/// Anisotropic data with a constant column and one column a copy of another.
fn data(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mean: Vec<f64> = (0..d).map(|j| 1.5 - 0.2 * j as f64).collect();
    let mut x = gaussian(n, &mean, &logspace(1e-3, 1e2, d), true, seed);
    x.column_mut(3).fill(0.75);
    let c = x.column(1).to_owned();
    x.column_mut(d - 1).assign(&c);
    x
}

#[test]
fn affine_forms_equal_the_transforms() {
    let x = data(400, 12, 5);
    let probe = data(50, 12, 6);
    for spec in [
        "none",
        "sn",
        "whiten",
        "whiten:k=5",
        "natsv:k=2",
        "sn+natsv:k=3",
        "softwhiten",
        "softwhiten:alpha=0.7,drop=1",
        "auto",
    ] {
        let f = fitted(spec, &x);
        let a = f.affine().unwrap_or_else(|| panic!("{spec} is affine"));
        assert_eq!(a.weight.dim(), (f.input_dim(), f.output_dim()), "{spec}");
        let want = f.transform(probe.view()).unwrap();
        let got = a.apply(&probe.mapv(f64::from));
        let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (g, w) in got.iter().zip(want.iter()) {
            assert!((*g as f32 - w).abs() <= 1e-5 * scale, "{spec}: {g} vs {w}");
        }
    }
}

#[test]
fn flow_and_blends_are_not_affine() {
    let x = data(300, 8, 7);
    for spec in ["flow:levels=1,width=8,steps=2", "softwhiten:blend=0.5"] {
        assert!(fitted(spec, &x).affine().is_none(), "{spec}");
    }
}
