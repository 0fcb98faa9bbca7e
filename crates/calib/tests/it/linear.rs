//! The closed-form calibrators: sn, whiten, natsv, sn+natsv, none.

use crate::common;

use bertflow_calib::{fit, CalibError, CalibSpec, Calibrator, FitOptions, Fitted, Natsv};
use common::*;
use ndarray::{s, Array2, Axis};

fn fit_str(spec: &str, x: &Array2<f32>) -> Result<Fitted, CalibError> {
    let spec: CalibSpec = spec.parse().unwrap();
    fit(&spec, x.view(), &mut FitOptions::new())
}

fn anisotropic(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mean: Vec<f64> = (0..d).map(|j| 2.0 - 0.3 * j as f64).collect();
    gaussian(n, &mean, &logspace(1e-3, 1e2, d), true, seed)
}

#[test]
fn none_is_the_identity() {
    let x = anisotropic(50, 6, 1);
    let f = fit_str("none", &x).unwrap();
    assert_eq!(f.transform(x.view()).unwrap(), x);
    assert_eq!((f.input_dim(), f.output_dim()), (6, 6));
}

#[test]
fn sn_standardises_and_maps_constant_columns_to_zero() {
    let mut x = anisotropic(500, 8, 2);
    x.column_mut(5).fill(3.25);
    let f = fit_str("sn", &x).unwrap();
    let Fitted::Sn(sn) = &f else { panic!() };
    assert_eq!(sn.zero_variance, vec![5]);
    let y = f.transform(x.view()).unwrap();
    let yf = y.mapv(|v| v as f64);
    for j in 0..8 {
        let col = yf.column(j);
        let mean = col.mean().unwrap();
        let std = col.std(0.0);
        assert!(mean.abs() < 1e-6, "column {j} mean {mean}");
        if j == 5 {
            assert!(
                col.iter().all(|&v| v == 0.0),
                "constant column must map to 0"
            );
        } else {
            assert!((std - 1.0).abs() < 1e-5, "column {j} std {std}");
        }
    }
    // a column with variance ~1e-14 of the largest also counts as constant
    let mut x2 = x.clone();
    for (i, v) in x2.column_mut(1).iter_mut().enumerate() {
        *v = 1.0 + if i % 2 == 0 { 1e-6 } else { 0.0 };
    }
    let Fitted::Sn(sn2) = fit_str("sn", &x2).unwrap() else {
        panic!()
    };
    assert_eq!(sn2.zero_variance, vec![1, 5]);
}

#[test]
fn whitening_gives_identity_covariance() {
    let x = anisotropic(3000, 12, 3);
    let f = fit_str("whiten", &x).unwrap();
    let Fitted::Whiten(w) = &f else { panic!() };
    assert_eq!((w.rank, w.out_dim), (12, 12));
    let (m, c) = moments(&w.transform_f64(x.view()).unwrap());
    assert!(m.iter().all(|v| v.abs() < 1e-9), "{m}");
    let err = max_abs_diff(&c, &Array2::eye(12));
    assert!(err < 1e-6, "f64 whitened covariance off by {err}");
    let (_, c32) = moments(&f.transform(x.view()).unwrap());
    let err32 = max_abs_diff(&c32, &Array2::eye(12));
    assert!(err32 < 1e-4, "f32 whitened covariance off by {err32}");
    // eigenvalues are decreasing and span the generated range
    let ev = w.eigenvalues();
    assert!(ev.windows(2).into_iter().all(|p| p[0] >= p[1]));
    assert!(ev[0] > 50.0 && ev[11] < 2e-3, "{ev}");
}

#[test]
fn whitening_truncation_keeps_the_leading_directions() {
    let x = anisotropic(3000, 12, 4);
    let full = fit_str("whiten", &x).unwrap().transform(x.view()).unwrap();
    let f3 = fit_str("whiten:k=3", &x).unwrap();
    assert_eq!(f3.output_dim(), 3);
    let y3 = f3.transform(x.view()).unwrap();
    assert_eq!(y3.dim(), (3000, 3));
    let lead = full.slice(s![.., ..3]).to_owned();
    let diff = y3
        .iter()
        .zip(lead.iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-4, "{diff}");
    // the kept directions carry the largest variances of the input
    let Fitted::Whiten(w) = &f3 else { panic!() };
    let (_, cov) = moments(&x);
    let trace: f64 = cov.diag().sum();
    let kept: f64 = w.eigenvalues().sum();
    assert!(
        kept / trace > 0.9,
        "top-3 directions carry {kept} of {trace}"
    );
    // k larger than the dimension is clamped to the rank
    assert_eq!(fit_str("whiten:k=100", &x).unwrap().output_dim(), 12);
}

#[test]
fn whitening_handles_rank_deficiency() {
    // a constant column
    let mut x = anisotropic(400, 10, 5);
    x.column_mut(7).fill(-1.5);
    let f = fit_str("whiten", &x).unwrap();
    assert_eq!(f.output_dim(), 9);
    let Fitted::Whiten(w) = &f else { panic!() };
    let y = w.transform_f64(x.view()).unwrap();
    assert!(y.iter().all(|v| v.is_finite()));
    let (_, c) = moments(&y);
    assert!(max_abs_diff(&c, &Array2::eye(9)) < 1e-6);

    // fewer rows than dimensions: rank n - 1
    let x = anisotropic(8, 20, 6);
    let f = fit_str("whiten", &x).unwrap();
    assert_eq!(f.output_dim(), 7);
    let Fitted::Whiten(w) = &f else { panic!() };
    let y = w.transform_f64(x.view()).unwrap();
    assert!(y.iter().all(|v| v.is_finite()));
    let (_, c) = moments(&y);
    assert!(max_abs_diff(&c, &Array2::eye(7)) < 1e-6);
    assert_eq!(fit_str("whiten:k=3", &x).unwrap().output_dim(), 3);

    // nothing varies: an error, not an empty or NaN transform
    let x = Array2::<f32>::from_elem((10, 4), 2.0);
    assert!(matches!(
        fit_str("whiten", &x),
        Err(CalibError::BadData { .. })
    ));
    // too few rows
    assert!(matches!(
        fit_str("whiten", &anisotropic(1, 4, 7)),
        Err(CalibError::BadData { .. })
    ));
}

#[test]
fn natsv_removes_the_top_directions() {
    let x = anisotropic(2000, 10, 8);
    let f = fit_str("natsv:k=3", &x).unwrap();
    let Fitted::Natsv(n) = &f else { panic!() };
    assert_eq!((n.k, n.removed), (3, 3));
    let u = n.directions();
    // orthonormal
    let gram = u.t().dot(u);
    assert!(max_abs_diff(&gram, &Array2::eye(3)) < 1e-12);
    let y = n.transform_f64(x.view()).unwrap();
    let proj = y.dot(u);
    let worst = proj.iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert!(worst < 1e-9, "projection on removed directions {worst}");
    let (m, c) = moments(&y);
    assert!(m.iter().all(|v| v.abs() < 1e-9));
    // the removed directions were the top principal directions: what is
    // left has at most the 4th largest variance in any direction
    let (mx, cx) = moments(&x);
    let _ = mx;
    let total_x: f64 = cx.diag().sum();
    let total_y: f64 = c.diag().sum();
    assert!(total_y < 0.2 * total_x, "{total_y} vs {total_x}");
    assert_eq!(f.output_dim(), 10);
    // output f32 also orthogonal within f32 precision
    let y32 = f.transform(x.view()).unwrap().mapv(|v| v as f64);
    let worst32 = y32.dot(u).iter().map(|v| v.abs()).fold(0.0, f64::max);
    assert!(worst32 < 1e-4, "{worst32}");
}

#[test]
fn sn_natsv_composes_sn_then_natsv() {
    let mut x = anisotropic(1000, 8, 9);
    x.column_mut(2).fill(0.5);
    let f = fit_str("sn+natsv:k=2", &x).unwrap();
    let Fitted::SnNatsv(sn_natsv) = &f else {
        panic!()
    };
    // the same by hand: fit sn, then natsv on its output
    let sn = fit_str("sn", &x).unwrap();
    let z = sn.transform(x.view()).unwrap();
    let Fitted::Natsv(nat) = fit_str("natsv:k=2", &z).unwrap() else {
        panic!()
    };
    let by_hand = nat.transform_f64(z.view()).unwrap();
    let y = f.transform(x.view()).unwrap().mapv(|v| v as f64);
    assert!(max_abs_diff(&y, &by_hand) < 1e-5);
    assert_eq!(sn_natsv.sn.zero_variance, vec![2]);
    assert!(y.column(2).iter().all(|&v| v.abs() < 1e-6));
    let u: &Array2<f64> = Natsv::directions(&sn_natsv.natsv);
    let proj = y.dot(u);
    assert!(proj.iter().all(|v| v.abs() < 1e-5));
    assert!(f.describe().starts_with("sn+natsv"));
}

#[test]
fn natsv_with_k_above_the_rank_removes_the_rank() {
    let x = anisotropic(4, 10, 10); // rank 3
    let Fitted::Natsv(n) = fit_str("natsv:k=5", &x).unwrap() else {
        panic!()
    };
    assert_eq!(n.removed, 3);
    let y = n.transform_f64(x.view()).unwrap();
    assert!(y.iter().all(|v| v.abs() < 1e-5), "all variance removed");
}

#[test]
fn transform_checks_dimension_and_finiteness() {
    let x = anisotropic(100, 6, 11);
    for spec in ["none", "sn", "whiten", "natsv:k=1", "sn+natsv:k=1"] {
        let f = fit_str(spec, &x).unwrap();
        let wrong = Array2::<f32>::zeros((3, 5));
        match f.transform(wrong.view()) {
            Err(CalibError::DimMismatch {
                expected: 6,
                found: 5,
            }) => {}
            other => panic!("{spec}: {other:?}"),
        }
        let mut bad = x.slice(s![..4, ..]).to_owned();
        bad[[2, 1]] = f32::NAN;
        assert!(matches!(
            f.transform(bad.view()),
            Err(CalibError::NonFiniteInput { row: 2, col: 1, .. })
        ));
        // zero rows is fine
        let empty = Array2::<f32>::zeros((0, 6));
        assert_eq!(f.transform(empty.view()).unwrap().nrows(), 0);
        // the input is not modified and the output is finite
        assert!(f.transform(x.view()).unwrap().iter().all(|v| v.is_finite()));
    }
}

#[test]
fn fit_rejects_bad_data() {
    for spec in [
        "none",
        "sn",
        "whiten",
        "natsv:k=1",
        "sn+natsv:k=1",
        "flow:levels=1",
    ] {
        let mut x = anisotropic(50, 6, 12);
        x[[7, 0]] = f32::NAN;
        assert!(
            matches!(
                fit_str(spec, &x),
                Err(CalibError::NonFiniteInput { row: 7, col: 0, .. })
            ),
            "{spec}"
        );
        let empty = Array2::<f32>::zeros((0, 6));
        assert!(
            matches!(fit_str(spec, &empty), Err(CalibError::BadData { .. })),
            "{spec}"
        );
        let no_cols = Array2::<f32>::zeros((10, 0));
        assert!(
            matches!(fit_str(spec, &no_cols), Err(CalibError::BadData { .. })),
            "{spec}"
        );
    }
}

#[test]
fn every_kind_survives_zero_variance_columns_at_d384() {
    // Like all-MiniLM-L6-v2's last layer: a few dimensions never vary.
    let x = embeddings(600, 384, &[7, 100, 383], 13);
    for spec in [
        "none",
        "sn",
        "whiten",
        "whiten:k=256",
        "natsv:k=5",
        "sn+natsv:k=5",
        "flow:epochs=2",
        "flow:levels=2,epochs=2,coupling=affine",
        "flow:levels=2,steps=2,permutation=lu",
    ] {
        let f = fit_str(spec, &x).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let y = f.transform(x.view()).unwrap();
        assert!(y.iter().all(|v| v.is_finite()), "{spec}: non-finite output");
        let expected = match spec {
            "whiten" => 381,
            "whiten:k=256" => 256,
            _ => 384,
        };
        assert_eq!(y.ncols(), expected, "{spec}");
        if let Some(flow) = f.as_flow() {
            assert!(flow.final_loss.is_finite());
            let back = flow.inverse(y.view()).unwrap();
            let err = back
                .iter()
                .zip(x.iter())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-4, "{spec}: inverse error {err}");
        }
    }
    let _ = Axis(0);
}
