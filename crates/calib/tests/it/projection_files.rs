//! Calibrator files of the projection kinds (`whiten`, `pca`, `softwhiten`, and
//! `auto`, which holds a soft whitening) written before they became
//! configurations of one `Projection` (issue 48) still load, transform to the
//! same bits, and are written back byte for byte.
//!
//! The fixtures in `tests/fixtures/projection/` were written by
//! `cargo test --release -p bertflow-calib --test projection_files -- --ignored write_fixtures`
//! at the commit before that change: `NAME.safetensors` the file, `NAME.out` the
//! transform of [`probe`] (f32, little-endian, row-major).

use crate::common;

use std::path::{Path, PathBuf};

use bertflow_calib::{fit, CalibSpec, Calibrator, CalibratorMeta, FitOptions, Fitted};
use common::gaussian;
use ndarray::Array2;

const CASES: &[(&str, &str)] = &[
    ("whiten", "whiten"),
    ("whiten_k3", "whiten:k=3"),
    ("pca", "pca"),
    ("pca_centre_k2", "pca:k=2,centre=true"),
    ("softwhiten", "softwhiten"),
    ("softwhiten_drop", "softwhiten:alpha=0.5,shrink=0.2,drop=1"),
    ("softwhiten_blend", "softwhiten:alpha=0.7,blend=0.3"),
    ("auto", "auto"),
];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/projection")
}

/// The fit data: anisotropic, rotated, off-centre, one rank short.
fn data() -> Array2<f32> {
    let mut x = gaussian(
        48,
        &[0.5, -1.0, 2.0, 0.0, 0.25, 1.5],
        &[9.0, 4.0, 1.0, 0.5, 0.1, 0.02],
        true,
        7,
    );
    // The last column a copy of the first: rank 5 of 6.
    for mut r in x.rows_mut() {
        r[5] = r[0];
    }
    x
}

/// Rows the fixtures' outputs were computed on.
fn probe() -> Array2<f32> {
    gaussian(9, &[0.0; 6], &[4.0, 2.0, 1.0, 1.0, 0.5, 0.5], true, 11)
}

/// Whether this CPU takes the kernels the fixtures were computed with (x86-64
/// with AVX2 and FMA, as ndarray's products pick at run time): then the
/// numbers must match bit for bit, elsewhere within rounding.
fn same_kernels() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn bytes_of(y: &Array2<f32>) -> Vec<u8> {
    y.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
#[ignore = "writes the fixtures; run once at the commit before a format change"]
fn write_fixtures() {
    std::fs::create_dir_all(dir()).unwrap();
    let x = data();
    for (name, spec) in CASES {
        let spec: CalibSpec = spec.parse().unwrap();
        let f = fit(&spec, x.view(), &mut FitOptions::new()).unwrap();
        let meta = CalibratorMeta::new("fixture", "last-avg", 6, x.nrows());
        f.save(dir().join(format!("{name}.safetensors")), &meta)
            .unwrap();
        let y = f.transform(probe().view()).unwrap();
        std::fs::write(dir().join(format!("{name}.out")), bytes_of(&y)).unwrap();
    }
}

#[test]
fn files_written_before_the_projection_load_transform_and_save_the_same() {
    for (name, spec) in CASES {
        let path = dir().join(format!("{name}.safetensors"));
        let old = std::fs::read(&path).unwrap();
        let (f, meta) = Fitted::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            f.spec().to_string(),
            spec.parse::<CalibSpec>().unwrap().to_string()
        );
        let y = f.transform(probe().view()).unwrap();
        let want = std::fs::read(dir().join(format!("{name}.out"))).unwrap();
        if same_kernels() {
            assert!(bytes_of(&y) == want, "{name}: the transform changed");
        } else {
            let want: Vec<f32> = want
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(want.len(), y.len(), "{name}");
            for (a, b) in y.iter().zip(&want) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{name}: {a} vs {b}"
                );
            }
        }
        // `auto`'s header keeps the statistics it decided on, whose JSON
        // numbers need not print back the same: its tensors are compared
        // through the transform above.
        let written = f.to_bytes(&meta).unwrap();
        if *name != "auto" {
            assert!(written == old, "{name}: the file is written differently");
        }
        // And a fit today gives the same file (same arithmetic).
        if !same_kernels() || *name == "auto" {
            continue;
        }
        let again = fit(
            &spec.parse().unwrap(),
            data().view(),
            &mut FitOptions::new(),
        )
        .unwrap();
        assert!(
            again.to_bytes(&meta).unwrap() == written,
            "{name}: a fit today writes another file"
        );
    }
}
