//! Slow group: the real all-mpnet-base-v2 through the Encoder's `last-avg`
//! against transformers' token-mean vectors on STS-B test sentences.
//!
//! Needs the model (`scripts/fetch_mpnet.sh`, or `$BERTFLOW_MPNET_MODEL`) and
//! the reference vectors, made once in an environment with torch:
//! `REFENV/bin/python scripts/reference/mpnet_stsb_reference.py` (or
//! `$BERTFLOW_MPNET_REFERENCE`). Run with
//! `cargo test --release --locked -p bertflow-encoder --test real_mpnet -- --ignored`
//! (part of scripts/slow-tests.sh); skipped with a message when either is absent.
use crate::common;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision};
use common::cosine;
use std::path::PathBuf;

fn path(var: &str, default: &str) -> PathBuf {
    std::env::var(var)
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(default))
}

fn encode(enc: &Encoder, texts: &[String], padded: bool) -> Vec<Vec<f32>> {
    let src = enc.source(&Pooling::LastAvg).unwrap();
    let opts = EncodeOptions {
        batch_size: 32,
        threads: 2,
    };
    let out = if padded {
        enc.encode_in_order(texts, &[src], &opts, &|_| {})
    } else {
        enc.encode(texts, &[src], &opts, &|_| {})
    }
    .unwrap();
    out.embeddings[0]
        .rows()
        .into_iter()
        .map(|r| r.to_vec())
        .collect()
}

#[test]
#[ignore = "slow: all-mpnet-base-v2 on 300 STS-B sentences; run scripts/slow-tests.sh"]
fn mpnet_last_avg_equals_transformers_on_stsb() {
    let model = path("BERTFLOW_MPNET_MODEL", "../../models/all-mpnet-base-v2");
    let reference = path(
        "BERTFLOW_MPNET_REFERENCE",
        "../../models/reference/all-mpnet-base-v2-stsb-last-avg.json",
    );
    if !model.join("config.json").is_file() {
        eprintln!(
            "skipped: no all-mpnet-base-v2 at {} (scripts/fetch_mpnet.sh installs it)",
            model.display()
        );
        return;
    }
    if !reference.is_file() {
        eprintln!(
            "skipped: no reference vectors at {} (make them with scripts/reference/mpnet_stsb_reference.py)",
            reference.display()
        );
        return;
    }
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reference).unwrap()).unwrap();
    let texts: Vec<String> = r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let want: Vec<Vec<f64>> = r["last_avg"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert!(texts.len() >= 200, "{} reference sentences", texts.len());
    let enc = Encoder::load(model.to_str().unwrap(), None).unwrap();
    assert_eq!(enc.config().model_type, "mpnet");
    assert_eq!(enc.max_len(), 512);
    for padded in [false, true] {
        let got = encode(&enc, &texts, padded);
        let diff = got
            .iter()
            .zip(&want)
            .flat_map(|(g, w)| g.iter().zip(w).map(|(a, b)| (*a as f64 - b).abs()))
            .fold(0.0, f64::max);
        eprintln!(
            "mpnet last-avg (padded batches: {padded}) vs transformers: max abs diff {diff:.2e} over {} sentences",
            texts.len()
        );
        assert!(diff < 1e-4, "padded {padded}: max abs diff {diff}");
    }
    let int8 =
        Encoder::load_with_precision(model.to_str().unwrap(), None, Precision::Int8).unwrap();
    let got = encode(&int8, &texts, false);
    let cs: Vec<f64> = got.iter().zip(&want).map(|(g, w)| cosine(g, w)).collect();
    let mean = cs.iter().sum::<f64>() / cs.len() as f64;
    let min = cs.iter().copied().fold(1.0, f64::min);
    eprintln!("mpnet int8 last-avg vs transformers fp32: cosine mean {mean:.5}, min {min:.5}");
    assert!(mean >= 0.99, "int8 mean cosine {mean}");
}
