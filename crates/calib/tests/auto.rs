//! `softwhiten` and `auto`: the transform's algebra, the decision on synthetic
//! data with a known answer, and file round trips.

mod common;

use bertflow_calib::{
    advise, fit, load, stats, CalibSpec, Calibrator, CalibratorMeta, FitOptions, Fitted,
};
use common::*;
use ndarray::Array2;

fn fitted(spec: &str, x: &Array2<f32>) -> Fitted {
    let spec: CalibSpec = spec.parse().unwrap();
    fit(&spec, x.view(), &mut FitOptions::new()).unwrap()
}

/// Isotropic Gaussian around the origin: no common direction.
fn isotropic(seed: u64) -> Array2<f32> {
    gaussian(4000, &[0.0; 32], &[1.0; 32], true, seed)
}

/// A narrow cone whose axis is the main axis of variation: a large mean
/// along the leading principal directions of a steep spectrum (static,
/// frequency-driven embeddings look like this).
fn spectral_cone(seed: u64) -> Array2<f32> {
    let d = 32;
    let vars = logspace(1.0, 1e-3, d);
    let mut mean = vec![0.0; d];
    mean[0] = 3.0;
    mean[1] = 2.0;
    gaussian(4000, &mean, &vars, false, seed)
}

/// A cone whose axis is a constant offset `scale * (1, 1) / sqrt(2)` in
/// two low-variance directions, outside the leading principal directions.
fn offset_cone(seed: u64, scale: f64) -> Array2<f32> {
    let d = 32;
    let vars = logspace(1.0, 1e-3, d);
    let mut mean = vec![0.0; d];
    mean[d - 1] = scale / 2f64.sqrt();
    mean[d - 2] = scale / 2f64.sqrt();
    gaussian(4000, &mean, &vars, false, seed)
}

fn cov_f64(y: &Array2<f64>) -> Array2<f64> {
    moments(y).1
}

#[test]
fn softwhiten_scales_each_principal_direction_by_the_shrunk_eigenvalue() {
    let x = embeddings(2000, 12, &[], 3);
    let (_, cov) = moments(&x);
    let (s, _) = {
        let m = nalgebra::DMatrix::from_fn(12, 12, |i, j| cov[[i, j]]);
        let e = nalgebra::SymmetricEigen::new(m);
        let mut v: Vec<f64> = e.eigenvalues.iter().copied().collect();
        v.sort_by(|a, b| b.total_cmp(a));
        (v, ())
    };
    for (alpha, shrink) in [(0.0, 0.0), (0.5, 0.0), (1.0, 0.0), (1.0, 0.5), (0.7, 0.25)] {
        let f = fitted(&format!("softwhiten:alpha={alpha},shrink={shrink}"), &x);
        let Fitted::SoftWhiten(sw) = &f else {
            panic!("not softwhiten")
        };
        let y = sw.transform_f64(x.view()).unwrap();
        let c = cov_f64(&y);
        let mean_s = s.iter().sum::<f64>() / s.len() as f64;
        let sp: Vec<f64> = s
            .iter()
            .map(|&v| (1.0 - shrink) * v + shrink * mean_s)
            .collect();
        for j in 0..12 {
            // Output variance along direction j: s_j (s'_j / s'_0)^(-alpha).
            let want = s[j] * (sp[j] / sp[0]).powf(-alpha);
            assert!(
                (c[[j, j]] - want).abs() <= 1e-8 * want.max(1e-12) + 1e-12,
                "alpha {alpha} shrink {shrink} dir {j}: {} vs {want}",
                c[[j, j]]
            );
            for k in 0..j {
                assert!(c[[j, k]].abs() < 1e-9 * (c[[j, j]] * c[[k, k]]).sqrt());
            }
        }
    }
    // alpha = 1, shrink = 0 is BERT-whitening up to one global factor.
    let a = fitted("softwhiten:alpha=1,shrink=0", &x)
        .transform(x.view())
        .unwrap();
    let b = fitted("whiten", &x).transform(x.view()).unwrap();
    let ratio = b[[0, 0]] as f64 / a[[0, 0]] as f64;
    for (p, q) in a.iter().zip(b.iter()) {
        assert!((*p as f64 * ratio - *q as f64).abs() < 1e-3 * (1.0 + q.abs() as f64));
    }
}

#[test]
fn softwhiten_rejects_bad_parameters() {
    for bad in [
        "softwhiten:alpha=1.5",
        "softwhiten:alpha=-0.1",
        "softwhiten:shrink=2",
        "softwhiten:alpha=x",
        "softwhiten:k=3",
    ] {
        assert!(bad.parse::<CalibSpec>().is_err(), "{bad}");
    }
    let s: CalibSpec = "softwhiten:alpha=0.25".parse().unwrap();
    assert_eq!(s.to_string(), "softwhiten:alpha=0.25,shrink=0");
    assert_eq!(s.to_string().parse::<CalibSpec>().unwrap(), s);
    assert_eq!("auto".parse::<CalibSpec>().unwrap(), CalibSpec::Auto);
    assert!("auto:alpha=1".parse::<CalibSpec>().is_err());
}

#[test]
fn mean_cosine_is_exact() {
    // Rows (1,0), (0,1), (1,1)/sqrt2 -> cosines 0, 1/sqrt2, 1/sqrt2.
    let x = ndarray::arr2(&[[1.0f32, 0.0], [0.0, 1.0], [2.0, 2.0]]);
    let s = stats(x.view()).unwrap();
    let want = (2.0 / 2f64.sqrt()) / 3.0;
    assert!((s.mean_cosine - want).abs() < 1e-12, "{}", s.mean_cosine);
}

#[test]
fn isotropic_data_is_left_alone() {
    for seed in 0..3 {
        let x = isotropic(seed);
        let a = advise(x.view()).unwrap();
        assert!(a.stats.mean_cosine.abs() < 0.01, "{:?}", a.stats);
        assert_eq!(a.decision.action, "identity", "{:?}", a.decision);
        assert_eq!(a.expected, "none");
        assert!(a.message.starts_with("Do not calibrate"));
        let f = fitted("auto", &x);
        assert_eq!(f.transform(x.view()).unwrap(), x);
        assert!(
            f.describe().starts_with("auto (auto-v1: identity"),
            "{}",
            f.describe()
        );
    }
}

#[test]
fn a_cone_along_the_main_axis_is_whitened_strongly() {
    for seed in 0..3 {
        let x = spectral_cone(seed);
        let a = advise(x.view()).unwrap();
        assert!(a.stats.mean_cosine > 0.3, "{:?}", a.stats);
        assert!(a.stats.mean_top10_align > 0.9, "{:?}", a.stats);
        assert_eq!(a.decision.alpha, Some(bertflow_calib::rule::ALPHA_SPECTRAL));
        assert_eq!(a.decision.shrink, bertflow_calib::rule::SHRINK_SPECTRAL);
        assert_eq!(a.expected, "improves");
        // The calibrated data is close to isotropic.
        let y = fitted("auto", &x).transform(x.view()).unwrap();
        let after = stats(y.view()).unwrap();
        assert!(after.mean_cosine.abs() < 0.01, "{after:?}");
    }
}

#[test]
fn a_narrow_offset_cone_is_whitened_softly_and_a_mild_one_left_alone() {
    let x = offset_cone(1, 1.5);
    let a = advise(x.view()).unwrap();
    assert!(
        a.stats.mean_cosine > 0.17 && a.stats.mean_cosine < 0.42,
        "{:?}",
        a.stats
    );
    assert_eq!(a.decision.action, "identity", "{:?}", a.decision);
    assert!(a.decision.reason.contains("mild offset"));
    let x = offset_cone(1, 4.0);
    let a = advise(x.view()).unwrap();
    assert!(a.stats.mean_cosine > 0.42, "{:?}", a.stats);
    assert!(a.stats.mean_top10_align < 0.01, "{:?}", a.stats);
    assert_eq!(a.decision.alpha, Some(bertflow_calib::rule::ALPHA_NARROW));
    assert_eq!(a.decision.shrink, bertflow_calib::rule::SHRINK_NARROW);
}

#[test]
fn auto_files_round_trip_with_their_decision() {
    let dir = tempfile::tempdir().unwrap();
    for (name, x) in [
        ("iso", isotropic(7)),
        ("cone", spectral_cone(7)),
        ("offset", offset_cone(7, 4.0)),
    ] {
        let f = fitted("auto", &x);
        let meta = CalibratorMeta::new("m", "last-avg", x.ncols(), x.nrows());
        let path = dir.path().join(format!("{name}.safetensors"));
        f.save(&path, &meta).unwrap();
        let (g, m) = load(&path).unwrap();
        assert_eq!(m, meta);
        assert_eq!(g.spec(), CalibSpec::Auto);
        assert_eq!(g.describe(), f.describe());
        let (Fitted::Auto(a), Fitted::Auto(b)) = (&f, &g) else {
            panic!("not auto")
        };
        // serde_json may round the statistics' last bit; everything that
        // acts is exact.
        assert_eq!(a.decision, b.decision, "{name}");
        assert_eq!(a.transform, b.transform, "{name}");
        assert!((a.stats.mean_cosine - b.stats.mean_cosine).abs() < 1e-12);
        assert_eq!(
            f.transform(x.view()).unwrap(),
            g.transform(x.view()).unwrap()
        );
        // The header carries the decision and its statistics.
        let header = serde_json::to_value(&g).unwrap();
        assert_eq!(header["kind"], "auto");
        assert_eq!(header["rule"], "auto-v1");
        assert!(header["decision"]["reason"]
            .as_str()
            .unwrap()
            .contains("mean pair cosine"));
        assert!(header["stats"]["mean_cosine"].is_number());
        // Same data, same bytes.
        assert_eq!(
            f.to_bytes(&meta).unwrap(),
            fitted("auto", &x).to_bytes(&meta).unwrap()
        );
    }
    let f = fitted("softwhiten:alpha=0.6,shrink=0.25", &spectral_cone(2));
    let x = spectral_cone(2);
    let meta = CalibratorMeta::new("m", "cls", x.ncols(), x.nrows());
    let path = dir.path().join("sw.safetensors");
    f.save(&path, &meta).unwrap();
    let (g, _) = load(&path).unwrap();
    assert_eq!(g.spec(), f.spec());
    assert_eq!(
        f.transform(x.view()).unwrap(),
        g.transform(x.view()).unwrap()
    );
}

#[test]
fn auto_rejects_bad_input() {
    let x = Array2::<f32>::zeros((1, 4));
    assert!(advise(x.view()).is_err());
    let mut x = isotropic(1);
    x[[3, 2]] = f32::NAN;
    assert!(advise(x.view()).is_err());
    let c = Array2::<f32>::from_elem((10, 4), 1.0);
    assert!(advise(c.view()).is_err());
    let f = fitted("auto", &isotropic(1));
    assert!(f.transform(Array2::<f32>::zeros((2, 5)).view()).is_err());
}
