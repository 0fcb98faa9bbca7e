// Shared by the encoder's integration tests.
#![allow(dead_code)]
use std::path::PathBuf;

pub mod tiny;

/// The default model, installed by scripts/setup.sh (or $BERTFLOW_TEST_MODEL).
pub fn model_dir() -> PathBuf {
    let p = std::env::var("BERTFLOW_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        });
    assert!(
        p.join("model.safetensors").is_file(),
        "test model missing at {}: run scripts/setup.sh (or set BERTFLOW_TEST_MODEL)",
        p.display()
    );
    p
}

pub fn golden() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/golden_minilm.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The largest absolute difference between `got` and `want` (same length).
pub fn max_abs_diff(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&a, b)| (a as f64 - b).abs())
        .fold(0.0, f64::max)
}

pub fn cosine(a: &[f32], b: &[f64]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let x = x as f64;
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}
