//! `pca`: the rotation onto the principal axes (known answers, the cut,
//! cosines kept, moments, the file and the affine form).

use crate::common;

use bertflow_calib::{
    fit, load, CalibSpec, Calibrator, CalibratorMeta, FitOptions, Fitted, MomentStats, Pca,
};
use common::*;
use ndarray::{Array2, Axis};

fn fit_str(spec: &str, x: &Array2<f32>) -> Fitted {
    let spec: CalibSpec = spec.parse().unwrap();
    fit(&spec, x.view(), &mut FitOptions::new()).unwrap()
}

fn pca(f: &Fitted) -> &Pca {
    let Fitted::Pca(p) = f else {
        panic!("not a pca: {f:?}")
    };
    p
}

/// Rows `offset +- c_j r_j` for the columns `r_j` of a random rotation: the
/// second moment about `offset` is exactly `sum_j 2 c_j^2 r_j r_j^T / n`.
fn known(d: usize, c: &[f64], offset: &[f64], seed: u64) -> (Array2<f32>, Array2<f64>) {
    let r = orthogonal(d, &mut Gen::new(seed));
    let mut x = Array2::<f32>::zeros((2 * d, d));
    for j in 0..d {
        for i in 0..d {
            x[[2 * j, i]] = (offset[i] + c[j] * r[[i, j]]) as f32;
            x[[2 * j + 1, i]] = (offset[i] - c[j] * r[[i, j]]) as f32;
        }
    }
    (x, r)
}

/// Each recovered axis equals the known one up to its sign.
fn assert_axes(found: &Array2<f64>, want: &Array2<f64>, k: usize, tol: f64) {
    let dots = found.t().dot(want);
    for j in 0..k {
        assert!(
            (dots[[j, j]].abs() - 1.0).abs() < tol,
            "axis {j}: |<found, want>| = {}",
            dots[[j, j]].abs()
        );
    }
}

#[test]
fn uncentred_axes_of_a_known_second_moment() {
    let d = 6;
    let c = [4.0, 3.0, 2.0, 1.5, 1.0, 0.5];
    let (x, r) = known(d, &c, &[0.0; 6], 3);
    let f = fit_str("pca", &x);
    let p = pca(&f);
    assert_eq!((p.out_dim, p.centre, p.k), (6, false, None));
    assert_axes(p.rotation(), &r, d, 1e-6);
    let n = (2 * d) as f64;
    for (j, cj) in c.iter().enumerate() {
        let want = 2.0 * cj * cj / n;
        assert!(
            (p.eigenvalues()[j] - want).abs() < 1e-5 * want,
            "eigenvalue {j}"
        );
    }
    assert!(p.mean().iter().all(|&m| m == 0.0));
}

#[test]
fn centred_axes_ignore_the_offset_the_uncentred_ones_do_not() {
    let d = 5;
    let c = [3.0, 2.0, 1.0, 0.6, 0.3];
    let offset = [5.0, -4.0, 3.0, 2.0, 1.0];
    let (x, r) = known(d, &c, &offset, 8);
    let f = fit_str("pca:centre=true", &x);
    let p = pca(&f);
    assert!(p.centre);
    assert_axes(p.rotation(), &r, d, 1e-6);
    for (m, o) in p.mean().iter().zip(offset) {
        assert!((m - o).abs() < 1e-5);
    }
    let n1 = (2 * d - 1) as f64;
    assert!((p.eigenvalues()[0] - 2.0 * 9.0 / n1).abs() < 1e-5);
    // The offset (norm ~7.7) dominates the second moment: the first
    // uncentred axis is the offset's direction, not r_0.
    let g = fit_str("pca", &x);
    let first = pca(&g).rotation().column(0).to_owned();
    let norm = offset.iter().map(|v| v * v).sum::<f64>().sqrt();
    let along: f64 = first.iter().zip(offset).map(|(a, o)| a * o / norm).sum();
    assert!(along.abs() > 0.95, "first axis along the offset: {along}");
}

#[test]
fn uncentred_full_rotation_keeps_every_cosine_and_norm() {
    let x = embeddings(400, 24, &[5], 11);
    let f = fit_str("pca", &x);
    let y = f.transform(x.view()).unwrap();
    assert_eq!(y.dim(), (400, 24));
    let (xf, yf) = (x.mapv(f64::from), y.mapv(f64::from));
    let (gx, gy) = (xf.dot(&xf.t()), yf.dot(&yf.t()));
    for i in 0..40 {
        for j in 0..40 {
            let cx = gx[[i, j]] / (gx[[i, i]] * gx[[j, j]]).sqrt();
            let cy = gy[[i, j]] / (gy[[i, i]] * gy[[j, j]]).sqrt();
            assert!((cx - cy).abs() < 1e-5, "cosine ({i},{j}): {cx} vs {cy}");
        }
        assert!((gx[[i, i]].sqrt() - gy[[i, i]].sqrt()).abs() < 1e-4 * gx[[i, i]].sqrt());
    }
    // Energy per output coordinate is decreasing.
    let energy: Vec<f64> = yf.mapv(|v| v * v).mean_axis(Axis(0)).unwrap().to_vec();
    assert!(energy.windows(2).all(|w| w[0] >= w[1] * (1.0 - 1e-9)));
}

#[test]
fn k_cuts_to_the_leading_axes_and_is_capped_at_the_dimension() {
    let x = embeddings(300, 12, &[], 4);
    let full = fit_str("pca", &x).transform(x.view()).unwrap();
    let f = fit_str("pca:k=4", &x);
    assert_eq!((f.input_dim(), f.output_dim()), (12, 4));
    assert_eq!(f.spec().to_string(), "pca:k=4");
    let cut = f.transform(x.view()).unwrap();
    assert_eq!(cut, full.slice(ndarray::s![.., ..4]).to_owned());
    let big = fit_str("pca:k=1000", &x);
    assert_eq!(big.output_dim(), 12);
    assert_eq!(
        fit_str("pca:k=3,centre=true", &x).spec().to_string(),
        "pca:k=3,centre=true"
    );
}

#[test]
fn moments_merged_give_the_fit_on_rows() {
    let x = embeddings(500, 10, &[2], 5);
    for spec in ["pca:k=6", "pca:centre=true"] {
        let mut a = MomentStats::new(10);
        a.update(x.slice(ndarray::s![..200, ..])).unwrap();
        let mut b = MomentStats::new(10);
        b.update(x.slice(ndarray::s![200.., ..])).unwrap();
        a.merge(&b).unwrap();
        let from_moments = a.fit(&spec.parse().unwrap()).unwrap();
        let on_rows = fit_str(spec, &x);
        let diff = max_abs_diff(
            &from_moments.transform(x.view()).unwrap().mapv(f64::from),
            &on_rows.transform(x.view()).unwrap().mapv(f64::from),
        );
        assert!(diff < 1e-4, "{spec}: {diff}");
    }
}

#[test]
fn file_round_trip_and_affine_form() {
    let x = embeddings(200, 8, &[], 6);
    let dir = tempfile::tempdir().unwrap();
    for (spec, tensors) in [("pca:k=3", 2), ("pca:centre=true", 3)] {
        let f = fit_str(spec, &x);
        let path = dir.path().join("p.safetensors");
        f.save(&path, &CalibratorMeta::new("m", "mean", 8, 200))
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.names().len(), tensors, "{spec}");
        let (g, _) = load(&path).unwrap();
        assert_eq!(g.spec().to_string(), spec);
        let y = f.transform(x.view()).unwrap();
        assert_eq!(g.transform(x.view()).unwrap(), y);
        let affine = f.affine().expect("pca is affine");
        let z = affine.apply(&x.mapv(f64::from));
        assert!(max_abs_diff(&z, &y.mapv(f64::from)) < 1e-5, "{spec}");
    }
}

#[test]
fn bad_input_is_an_error() {
    let x = embeddings(50, 8, &[], 7);
    let f = fit_str("pca:k=2", &x);
    let wrong = Array2::<f32>::zeros((3, 7));
    assert!(f.transform(wrong.view()).is_err());
    let zeros = Array2::<f32>::zeros((10, 4));
    let spec: CalibSpec = "pca".parse().unwrap();
    assert!(fit(&spec, zeros.view(), &mut FitOptions::new()).is_err());
    assert!("pca:k=0".parse::<CalibSpec>().is_err());
    assert!("pca:centre=maybe".parse::<CalibSpec>().is_err());
}
