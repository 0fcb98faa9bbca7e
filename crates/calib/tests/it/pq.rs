//! The product quantizer: OPQ's objective and rotation, codes and their
//! reconstructions, files that end in a pq stage, and bad input.

use crate::common;

use bertflow_calib::{
    fit, load, CalibSpec, Calibrator, CalibratorMeta, Codes, FitOptions, QuantKind, QuantSpec,
    Quantizer,
};
use common::*;
use ndarray::Array2;

fn quantizer(spec: &str, x: &Array2<f32>) -> Quantizer {
    Quantizer::fit(&spec.parse().unwrap(), x.view()).unwrap()
}

/// Mean squared reconstruction error per row.
fn mse(q: &Quantizer, x: &Array2<f32>) -> f64 {
    let y = q.dequantize(&q.quantize(x.view()).unwrap()).unwrap();
    let e: f64 = x
        .iter()
        .zip(y.iter())
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum();
    e / x.nrows() as f64
}

#[test]
fn opq_objective_never_increases_and_the_rotation_is_orthogonal() {
    let x = embeddings(1200, 16, &[], 11);
    let q = quantizer("pq:m=4,opq=true,iters=8", &x);
    let obj = q.objective();
    assert_eq!(obj.len(), 9, "{obj:?}");
    for w in obj.windows(2) {
        assert!(
            w[1] <= w[0] * (1.0 + 1e-6),
            "objective rose: {} -> {}",
            w[0],
            w[1]
        );
    }
    let r = q.rotation().expect("opq fits a rotation");
    assert!(max_abs_diff(&r.t().dot(r), &Array2::eye(16)) < 1e-9);
    assert_eq!(q.centroids().unwrap().dim(), (4, 256, 4));
    // The reported objective is the error of the codes (the final k-means
    // only lowers it further).
    let total = mse(&q, &x) * x.nrows() as f64;
    assert!(total <= obj[8] * (1.0 + 1e-4), "{total} vs {}", obj[8]);
}

#[test]
fn codes_are_nearest_centroids_and_decode_to_them() {
    let x = embeddings(600, 8, &[], 3);
    let q = quantizer("pq:m=2,opq=false", &x);
    assert!(q.rotation().is_none() && q.objective().is_empty());
    let c = q.quantize(x.view()).unwrap();
    assert_eq!(
        (c.kind, c.dim, c.bytes.dim()),
        (QuantKind::Pq { m: 2 }, 8, (600, 2))
    );
    let cent = q.centroids().unwrap();
    let y = q.dequantize(&c).unwrap();
    for i in 0..50 {
        for j in 0..2 {
            let sub = x.slice(ndarray::s![i, j * 4..j * 4 + 4]);
            let dist = |k: usize| -> f64 {
                sub.iter()
                    .zip(cent.slice(ndarray::s![j, k, ..]))
                    .map(|(a, b)| f64::from(a - b).powi(2))
                    .sum()
            };
            let code = usize::from(c.bytes[[i, j]]);
            let best = (0..256).map(dist).fold(f64::INFINITY, f64::min);
            assert!(dist(code) <= best + 1e-5, "row {i} sub {j}");
            assert_eq!(
                y.slice(ndarray::s![i, j * 4..j * 4 + 4]).to_vec(),
                cent.slice(ndarray::s![j, code, ..]).to_vec()
            );
        }
    }
}

/// 256 centroids per sub-space on a Gaussian: the error is far below the
/// data's energy, and the rotation helps when the energy sits in a few
/// coordinates of one sub-space (PQ without it spends most codes on
/// sub-spaces with nothing in them).
#[test]
fn opq_lowers_the_error_of_a_skewed_gaussian() {
    let x = embeddings(2000, 16, &[], 21);
    let energy: f64 = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / 2000.0;
    let plain = mse(&quantizer("pq:m=4,opq=false", &x), &x);
    let opq = mse(&quantizer("pq:m=4", &x), &x);
    assert!(plain < 0.25 * energy, "{plain} of {energy}");
    assert!(opq < plain, "opq {opq} vs pq {plain}");
    // Deterministic: the same fit twice gives the same codes.
    let a = quantizer("pq:m=4", &x).quantize(x.view()).unwrap();
    let b = quantizer("pq:m=4", &x).quantize(x.view()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_file_ending_in_pq_round_trips_bit_exactly() {
    let x = embeddings(500, 12, &[], 4);
    let dir = tempfile::tempdir().unwrap();
    for (kind, qspec) in [("pca", "pq:m=3"), ("pca:k=8", "pq:m=8,opq=false")] {
        let spec: CalibSpec = kind.parse().unwrap();
        let f = fit(&spec, x.view(), &mut FitOptions::new()).unwrap();
        let y = f.transform(x.view()).unwrap();
        let q = quantizer(qspec, &y);
        let mut meta = CalibratorMeta::new("m", "mean", 12, 500);
        meta.quantizer = Some(q.clone());
        let path = dir.path().join("pq.safetensors");
        f.save(&path, &meta).unwrap();
        let (g, m) = load(&path).unwrap();
        let back = m.quantizer.expect("the stage is kept");
        assert_eq!(back.spec.to_string(), qspec);
        assert_eq!(back.centroids(), q.centroids());
        assert_eq!(back.rotation(), q.rotation());
        let codes = back
            .quantize(g.transform(x.view()).unwrap().view())
            .unwrap();
        let want = q.quantize(y.view()).unwrap();
        assert_eq!(codes, want, "{kind} {qspec}");
        assert_eq!(
            back.dequantize(&codes).unwrap(),
            q.dequantize(&want).unwrap()
        );
    }
}

#[test]
fn bad_pq_specs_widths_and_codes_are_refused() {
    for (bad, words) in [
        ("pq", "pq needs m"),
        ("pq:m=0", "1..=65536"),
        ("pq:m=4,opq=maybe", "valid values: false, true"),
        ("pq:m=4,opq=false,iters=3", "iters applies with opq=true"),
        ("pq:m=4,ranges=dim", "valid options for pq: m, opq, iters"),
        ("pq:m=4,m=8", "given twice"),
    ] {
        let e = bad.parse::<QuantSpec>().unwrap_err().to_string();
        assert!(e.contains(words), "{bad}: {e}");
    }
    for s in ["pq:m=64", "pq:m=8,opq=false", "pq:m=16,opq=true,iters=5"] {
        assert_eq!(s.parse::<QuantSpec>().unwrap().to_string(), s);
    }
    let x = embeddings(300, 10, &[], 7);
    let e = Quantizer::fit(&"pq:m=4".parse().unwrap(), x.view())
        .unwrap_err()
        .to_string();
    assert!(e.contains("m = 4 does not divide the dimension 10"), "{e}");
    let few = embeddings(100, 10, &[], 7);
    let e = Quantizer::fit(&"pq:m=5".parse().unwrap(), few.view())
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least 256 rows"), "{e}");
    let q = quantizer("pq:m=5,opq=false", &x);
    let e = Codes::new(QuantKind::Pq { m: 5 }, 10, Array2::zeros((2, 4))).unwrap_err();
    assert!(
        e.to_string().contains("have 5 bytes per row, these have 4"),
        "{e}"
    );
    let other = Codes::new(QuantKind::Pq { m: 2 }, 10, Array2::zeros((2, 2))).unwrap();
    assert!(q.dequantize(&other).is_err());
    let e = q.quantize(embeddings(3, 8, &[], 1).view()).unwrap_err();
    assert!(e.to_string().contains("expects 10 columns, got 8"), "{e}");
}
