//! The tiny random checkpoints in `tests/fixtures/tiny-NAME` and their golden
//! outputs from transformers (`golden.json` beside each): loading them,
//! encoding every golden pooling, and the checks that every architecture's
//! tests share.
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision};
use serde_json::Value;

use super::cosine;

/// The fixture folder of the tiny checkpoint `name`.
pub fn dir(name: &str) -> String {
    format!("{}/tests/fixtures/tiny-{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The fixture's `golden.json`.
pub fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/golden.json", dir(name))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A JSON array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Every golden pooling of `g` encoded by `enc`, as a padded batch in input
/// order (`padded`) or length-sorted; per pooling, per sentence. Checks
/// which cases were truncated.
pub fn encode_all(enc: &Encoder, g: &Value, padded: bool) -> Vec<Vec<Vec<f32>>> {
    let sources: Vec<_> = g["poolings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let p: Pooling = n.as_str().unwrap().parse().unwrap();
            enc.source(&p).unwrap()
        })
        .collect();
    let cases = g["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let opts = EncodeOptions {
        batch_size: 16,
        threads: 1,
    };
    let out = if padded {
        enc.encode_in_order(&texts, &sources, &opts, &|_| {})
    } else {
        enc.encode(&texts, &sources, &opts, &|_| {})
    }
    .unwrap();
    let want: Vec<bool> = cases
        .iter()
        .map(|c| c["truncated"].as_bool().unwrap())
        .collect();
    assert_eq!(out.truncated, want);
    out.embeddings
        .iter()
        .map(|m| m.rows().into_iter().map(|r| r.to_vec()).collect())
        .collect()
}

/// Every pooling of every case within 1e-5 of transformers, padded or not.
pub fn assert_matches(name: &str, enc: &Encoder, g: &Value) {
    let cases = g["cases"].as_array().unwrap();
    for padded in [true, false] {
        let got = encode_all(enc, g, padded);
        for (p, pname) in g["poolings"].as_array().unwrap().iter().enumerate() {
            let pname = pname.as_str().unwrap();
            for (i, c) in cases.iter().enumerate() {
                let want = floats(&c[pname]);
                let diff = super::max_abs_diff(&got[p][i], &want);
                assert!(
                    diff < 1e-5,
                    "{name} {pname} (padded {padded}) of {:?}: max abs diff {diff:e}",
                    c["text"]
                );
            }
        }
    }
}

/// The fixture `name` loads as transformers configured it (model type, token
/// limit, 2 layers), tokenizes every case to transformers' ids (one case at
/// least is truncated) and encodes every pooling within 1e-5.
pub fn assert_equals_transformers(name: &str) {
    let g = golden(name);
    let enc = Encoder::load(&dir(name), None).unwrap();
    assert_eq!(enc.config().model_type, g["model_type"].as_str().unwrap());
    assert_eq!(enc.max_len() as u64, g["max_tokens"].as_u64().unwrap());
    assert_eq!(enc.num_layers(), 2);
    let cases = g["cases"].as_array().unwrap();
    for c in cases {
        let ids: Vec<u32> = floats(&c["ids"]).iter().map(|&x| x as u32).collect();
        let (got, cut) = enc.tokenize(c["text"].as_str().unwrap()).unwrap();
        assert_eq!(got, ids, "{name}: ids of {}", c["text"]);
        assert_eq!(cut, c["truncated"].as_bool().unwrap());
    }
    assert!(
        cases.iter().any(|c| c["truncated"].as_bool().unwrap()),
        "{name}: no truncated case"
    );
    assert_matches(name, &enc, &g);
}

/// The fixture `name` at int8: every pooling but `emb-avg` (the embeddings are
/// not quantised) differs from transformers' fp32 output, by a cosine of
/// 0.99 at worst.
pub fn assert_int8_close(name: &str) {
    let g = golden(name);
    let enc = Encoder::load_with_precision(&dir(name), None, Precision::Int8).unwrap();
    assert_eq!(enc.precision(), Precision::Int8);
    let got = encode_all(&enc, &g, true);
    let mut worst = 1f64;
    for (p, pname) in g["poolings"].as_array().unwrap().iter().enumerate() {
        let pname = pname.as_str().unwrap();
        if pname == "emb-avg" {
            continue;
        }
        for (i, c) in g["cases"].as_array().unwrap().iter().enumerate() {
            let cos = cosine(&got[p][i], &floats(&c[pname]));
            assert!(cos < 1.0 - 1e-9, "{name} {pname}: int8 equals fp32");
            worst = worst.min(cos);
        }
    }
    eprintln!("{name}: int8 vs transformers fp32, worst cosine {worst:.5}");
    assert!(worst >= 0.99, "{name}: worst cosine {worst}");
}
