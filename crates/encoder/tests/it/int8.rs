//! `Precision::Int8` against the fp32 encoder: close vectors, separate fingerprints,
//! and (slow group) mean cosine >= 0.99 over the unique sentences of STS-B test.
use crate::common;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision};
use common::*;

fn encode(enc: &Encoder, texts: &[String], pooling: &str) -> Vec<Vec<f32>> {
    let src = enc.source(&pooling.parse::<Pooling>().unwrap()).unwrap();
    let opts = EncodeOptions {
        batch_size: 32,
        threads: 2,
    };
    let out = enc.encode(texts, &[src], &opts, &|_| {}).unwrap();
    out.embeddings[0]
        .rows()
        .into_iter()
        .map(|r| r.to_vec())
        .collect()
}

fn cos(a: &[f32], b: &[f32]) -> f64 {
    let b64: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    cosine(a, &b64)
}

#[test]
fn int8_vectors_are_close_to_fp32_and_keyed_apart() {
    let model = model_dir();
    let model = model.to_str().unwrap();
    let fp32 = Encoder::load(model, None).unwrap();
    let int8 = Encoder::load_with_precision(model, None, Precision::Int8).unwrap();
    assert_eq!(int8.precision(), Precision::Int8);
    assert_eq!(fp32.precision(), Precision::Fp32);
    let bits = if bertflow_kernels::Isa::selected().unwrap().act_max() > 127 {
        8
    } else {
        7
    };
    assert_eq!(
        int8.fingerprint(),
        format!("{}-int8-{bits}bit-v2", fp32.fingerprint())
    );
    assert_eq!(int8.files_fingerprint(), fp32.files_fingerprint());
    let golden = golden();
    let texts: Vec<String> = golden["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    for pooling in ["last-avg", "first-last-avg", "cls"] {
        let a = encode(&fp32, &texts, pooling);
        let b = encode(&int8, &texts, pooling);
        for (x, y) in a.iter().zip(&b) {
            let c = cos(x, y);
            assert!(c > 0.97, "{pooling}: cosine {c}");
            assert!(
                c < 1.0 - 1e-7,
                "{pooling}: int8 equals fp32 ({c}): not quantised?"
            );
        }
    }
}

/// The unique sentences of STS-B test, whitespace-normalised, first appearance order.
fn stsb_test_sentences() -> Vec<String> {
    let dir = std::env::var("BERTFLOW_DATA").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/sts").to_string()
    });
    let text = std::fs::read_to_string(format!("{dir}/STSBenchmark/sts-test.csv")).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 7 {
            continue;
        }
        for s in &f[5..7] {
            let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
            if seen.insert(s.clone()) {
                out.push(s);
            }
        }
    }
    out
}

#[test]
#[ignore = "slow: encodes STS-B test twice; run scripts/slow-tests.sh"]
fn int8_mean_cosine_to_fp32_over_stsb_test_is_at_least_0_99() {
    let texts = stsb_test_sentences();
    assert_eq!(texts.len(), 2551);
    let model = model_dir();
    let model = model.to_str().unwrap();
    let fp32 = Encoder::load(model, None).unwrap();
    let int8 = Encoder::load_with_precision(model, None, Precision::Int8).unwrap();
    for pooling in ["last-avg", "first-last-avg"] {
        let a = encode(&fp32, &texts, pooling);
        let b = encode(&int8, &texts, pooling);
        let cs: Vec<f64> = a.iter().zip(&b).map(|(x, y)| cos(x, y)).collect();
        let mean = cs.iter().sum::<f64>() / cs.len() as f64;
        let min = cs.iter().copied().fold(1.0, f64::min);
        eprintln!("{pooling}: int8 vs fp32 cosine mean {mean:.5}, min {min:.5}");
        assert!(mean >= 0.99, "{pooling}: mean cosine {mean}");
    }
}
