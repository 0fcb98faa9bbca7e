//! Calibrators on embeddings from anywhere: `bertflow fit --embeddings` and
//! `bertflow transform`, chunked, with external identities, and their errors.
use crate::common;
use bertflow_calib::Calibrator;
use common::{bertflow, fails, ok, read_npy};
use ndarray::Array2;
use std::path::Path;

/// A seeded anisotropic sample: a narrow cone (large shared mean, unequal scales).
fn cone(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    Array2::from_shape_fn((n, d), |(_, j)| {
        (3.0 + next() * (1.0 + j as f64) + 0.3 * next()) as f32
    })
}

fn write_npy(path: &Path, m: &Array2<f32>) {
    std::fs::write(path, bertflow_core::io::npy_bytes(m)).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn whiten_on_external_npy_whitens_across_chunk_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let (x_path, c_path, y_path) = (
        dir.path().join("x.npy"),
        dir.path().join("w.safetensors"),
        dir.path().join("y.npy"),
    );
    // More rows than one chunk (4096), so statistics and transform span chunks.
    let x = cone(5000, 8, 1);
    write_npy(&x_path, &x);
    ok(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&x_path),
            "--kind",
            "whiten",
            "--label",
            "my-api",
            "-o",
            s(&c_path),
        ],
        dir.path(),
    ));
    ok(&bertflow(
        &[
            "transform",
            "-c",
            s(&c_path),
            "-i",
            s(&x_path),
            "-o",
            s(&y_path),
        ],
        dir.path(),
    ));
    let y = read_npy(&y_path);
    assert_eq!(y.dim(), (5000, 8));
    // Whitened: zero mean and identity covariance (n - 1), an implementation-free check.
    let y64 = y.mapv(f64::from);
    let mean = y64.mean_axis(ndarray::Axis(0)).unwrap();
    let c = &y64 - &mean;
    let cov = c.t().dot(&c) / 4999.0;
    for i in 0..8 {
        assert!(mean[i].abs() < 1e-4, "mean {i} = {}", mean[i]);
        for j in 0..8 {
            let want = if i == j { 1.0 } else { 0.0 };
            assert!(
                (cov[[i, j]] - want).abs() < 1e-3,
                "cov[{i},{j}] = {}",
                cov[[i, j]]
            );
        }
    }
    // The file records the external source, and in-memory transform agrees.
    let (fitted, meta) = bertflow_calib::load(&c_path).unwrap();
    assert!(meta.is_external());
    assert_eq!(meta.pooling, bertflow_calib::EXTERNAL_POOLING);
    assert_eq!(meta.input_dim, 8);
    assert_eq!(meta.fit_corpus_size, 5000);
    let ext = meta.external.unwrap();
    assert_eq!(ext.label.as_deref(), Some("my-api"));
    assert_eq!(ext.fingerprint.len(), 16);
    assert!(meta.model.starts_with("external:my-api@"));
    let direct = fitted.transform(x.view()).unwrap();
    let diff = (&direct - &y).mapv(f32::abs).fold(0.0f32, |a, &b| a.max(b));
    assert!(
        diff < 1e-5,
        "chunked vs in-memory transform differ by {diff}"
    );
}

#[test]
fn float64_input_and_every_closed_form_kind() {
    let dir = tempfile::tempdir().unwrap();
    let x = cone(300, 6, 2);
    // float64 .npy written by hand (as np.save does).
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let mut h = "{'descr': '<f8', 'fortran_order': False, 'shape': (300, 6), }".to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    for v in x.iter() {
        bytes.extend_from_slice(&f64::from(*v).to_le_bytes());
    }
    let x64 = dir.path().join("x64.npy");
    std::fs::write(&x64, bytes).unwrap();
    for kind in ["sn", "natsv:k=2", "sn+natsv:k=2", "whiten:k=3", "none"] {
        let c = dir.path().join(format!(
            "{}.safetensors",
            kind.replace([':', '=', '+'], "_")
        ));
        let y = dir.path().join("y.npy");
        ok(&bertflow(
            &["fit", "--embeddings", s(&x64), "--kind", kind, "-o", s(&c)],
            dir.path(),
        ));
        ok(&bertflow(
            &["transform", "-c", s(&c), "-i", s(&x64), "-o", s(&y)],
            dir.path(),
        ));
        let (fitted, _) = bertflow_calib::load(&c).unwrap();
        let want = fitted.transform(x.view()).unwrap();
        let got = read_npy(&y);
        assert_eq!(got.dim(), want.dim(), "{kind}");
        let diff = (&want - &got).mapv(f32::abs).fold(0.0f32, |a, &b| a.max(b));
        assert!(diff < 1e-5, "{kind}: {diff}");
    }
}

#[test]
fn flow_sample_is_seeded_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let x_path = dir.path().join("x.npy");
    write_npy(&x_path, &cone(1000, 8, 3));
    let fit = |name: &str| {
        let c = dir.path().join(name);
        ok(&bertflow(
            &[
                "fit",
                "--embeddings",
                s(&x_path),
                "--kind",
                "flow:levels=1,steps=1,width=8,epochs=1,seed=7",
                "--sample",
                "300",
                "-o",
                s(&c),
            ],
            dir.path(),
        ));
        c
    };
    let (a, b) = (fit("a.safetensors"), fit("b.safetensors"));
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let (_, meta) = bertflow_calib::load(&a).unwrap();
    assert_eq!(meta.fit_corpus_size, 300);
    assert_eq!(meta.sampled_from, Some(1000));
    assert_eq!(meta.seed, Some(7));
}

#[test]
fn model_calibrator_applies_to_vectors_encoded_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let sentences = dir.path().join("s.txt");
    let lines: Vec<String> = (0..40)
        .map(|i| format!("Sentence number {i} talks about topic {}.", i % 7))
        .collect();
    std::fs::write(&sentences, lines.join("\n")).unwrap();
    let (c, raw, cal, via_transform) = (
        dir.path().join("c.safetensors"),
        dir.path().join("raw.npy"),
        dir.path().join("cal.npy"),
        dir.path().join("t.npy"),
    );
    ok(&bertflow(
        &[
            "fit",
            "--kind",
            "whiten:k=16",
            "--on",
            s(&sentences),
            "-o",
            s(&c),
        ],
        dir.path(),
    ));
    ok(&bertflow(
        &["encode", "-i", s(&sentences), "-o", s(&raw)],
        dir.path(),
    ));
    ok(&bertflow(
        &[
            "encode",
            "-i",
            s(&sentences),
            "-o",
            s(&cal),
            "--calibrator",
            s(&c),
        ],
        dir.path(),
    ));
    let out = bertflow(
        &[
            "transform",
            "-c",
            s(&c),
            "-i",
            s(&raw),
            "-o",
            s(&via_transform),
        ],
        dir.path(),
    );
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be checked"));
    let (a, b) = (read_npy(&cal), read_npy(&via_transform));
    assert_eq!(a.dim(), (40, 16));
    let diff = (&a - &b).mapv(f32::abs).fold(0.0f32, |m, &v| m.max(v));
    assert!(diff < 1e-6, "{diff}");
    // An external calibrator is refused by encode without --allow-mismatch.
    let ext = dir.path().join("ext.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&raw),
            "--kind",
            "sn",
            "-o",
            s(&ext),
        ],
        dir.path(),
    ));
    let err = fails(&bertflow(
        &[
            "encode",
            "-i",
            s(&sentences),
            "-o",
            s(&cal),
            "--calibrator",
            s(&ext),
        ],
        dir.path(),
    ));
    assert!(err.contains("external"), "{err}");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let x_path = dir.path().join("x.npy");
    write_npy(&x_path, &cone(50, 4, 4));
    let c = dir.path().join("c.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&x_path),
            "--kind",
            "sn",
            "-o",
            s(&c),
        ],
        dir.path(),
    ));
    let other = dir.path().join("o.npy");
    write_npy(&other, &cone(10, 5, 5));
    let y = dir.path().join("y.npy");
    let err = fails(&bertflow(
        &["transform", "-c", s(&c), "-i", s(&other), "-o", s(&y)],
        dir.path(),
    ));
    assert!(
        err.contains("5-dimensional") && err.contains("expects 4"),
        "{err}"
    );
    let err = fails(&bertflow(
        &[
            "transform",
            "-c",
            s(&c),
            "-i",
            s(&x_path),
            "-o",
            s(&dir.path().join("y.csv")),
        ],
        dir.path(),
    ));
    assert!(err.contains(".npy"), "{err}");
    let err = fails(&bertflow(
        &["transform", "-c", s(&x_path), "-i", s(&x_path), "-o", s(&y)],
        dir.path(),
    ));
    assert!(err.contains("cannot load calibrator"), "{err}");
    let err = fails(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&dir.path().join("missing.npy")),
            "--kind",
            "sn",
            "-o",
            s(&c),
        ],
        dir.path(),
    ));
    assert!(
        err.contains("cannot open") && err.contains("missing.npy"),
        "{err}"
    );
    let mut nan = cone(5, 4, 6);
    nan[[3, 2]] = f32::NAN;
    write_npy(&other, &nan);
    let err = fails(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&other),
            "--kind",
            "whiten",
            "-o",
            s(&c),
        ],
        dir.path(),
    ));
    assert!(err.contains("row 3 column 2"), "{err}");
    let err = fails(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&x_path),
            "--kind",
            "flow",
            "--sample",
            "0",
            "-o",
            s(&c),
        ],
        dir.path(),
    ));
    assert!(err.contains("--sample"), "{err}");
}

#[test]
fn auto_fits_on_the_rows_and_equals_the_library_fit() {
    let dir = tempfile::tempdir().unwrap();
    let x = cone(400, 6, 5);
    let x_path = dir.path().join("x.npy");
    write_npy(&x_path, &x);
    let c = dir.path().join("auto.safetensors");
    ok(&bertflow(
        &[
            "fit",
            "--embeddings",
            s(&x_path),
            "--kind",
            "auto",
            "-o",
            s(&c),
        ],
        dir.path(),
    ));
    let (fitted, meta) = bertflow_calib::load(&c).unwrap();
    assert_eq!(meta.fit_corpus_size, 400);
    let spec: bertflow_calib::CalibSpec = "auto".parse().unwrap();
    let lib = bertflow_calib::fit(&spec, x.view(), &mut bertflow_calib::FitOptions::new()).unwrap();
    assert_eq!(fitted.describe(), lib.describe());
    let diff = (&fitted.transform(x.view()).unwrap() - &lib.transform(x.view()).unwrap())
        .mapv(f32::abs)
        .fold(0.0f32, |a, &b| a.max(b));
    assert!(diff < 1e-6, "{diff}");
}
