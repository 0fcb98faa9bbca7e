//! Tiny random checkpoints of every architecture against transformers' vectors
//! (scripts/reference/make_tiny_models.py): token ids, truncation at the
//! model's token limit, and several poolings (every hidden state) for one
//! right-padded batch and for length-sorted unpadded batches, fp32 within 1e-5;
//! int8 close by cosine.
use crate::common;
use bertflow_encoder::arch::mpnet::relative_position_bucket;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision, TokenWeights};
use common::cosine;
use serde_json::Value;

const ARCHS: [&str; 5] = ["roberta", "xlm-roberta", "camembert", "distilbert", "mpnet"];

fn dir(name: &str) -> String {
    format!("{}/tests/fixtures/tiny-{name}", env!("CARGO_MANIFEST_DIR"))
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/golden.json", dir(name))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Every golden pooling of `name` encoded by `enc`, as a padded batch in input
/// order (`padded`) or length-sorted; per pooling, per sentence.
fn encode_all(enc: &Encoder, g: &Value, padded: bool) -> Vec<Vec<Vec<f32>>> {
    let names: Vec<&str> = g["poolings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let sources: Vec<_> = names
        .iter()
        .map(|n| enc.source(&n.parse::<Pooling>().unwrap()).unwrap())
        .collect();
    let texts: Vec<&str> = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
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
    let want: Vec<bool> = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["truncated"].as_bool().unwrap())
        .collect();
    assert_eq!(out.truncated, want);
    out.embeddings
        .iter()
        .map(|m| m.rows().into_iter().map(|r| r.to_vec()).collect())
        .collect()
}

#[test]
fn every_architecture_equals_transformers_within_1e5() {
    for name in ARCHS {
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
        for padded in [true, false] {
            let got = encode_all(&enc, &g, padded);
            for (p, pname) in g["poolings"].as_array().unwrap().iter().enumerate() {
                let pname = pname.as_str().unwrap();
                for (i, c) in cases.iter().enumerate() {
                    let want = floats(&c[pname]);
                    let diff = got[p][i]
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (*a as f64 - b).abs())
                        .fold(0.0, f64::max);
                    assert!(
                        diff < 1e-5,
                        "{name} {pname} (padded {padded}) of {:?}: max abs diff {diff:e}",
                        c["text"]
                    );
                }
            }
        }
    }
}

#[test]
fn every_architecture_runs_int8_close_to_transformers() {
    for name in ARCHS {
        let g = golden(name);
        let enc = Encoder::load_with_precision(&dir(name), None, Precision::Int8).unwrap();
        assert_eq!(enc.precision(), Precision::Int8);
        let got = encode_all(&enc, &g, true);
        let mut worst = 1f64;
        for (p, pname) in g["poolings"].as_array().unwrap().iter().enumerate() {
            let pname = pname.as_str().unwrap();
            if pname == "emb-avg" {
                continue; // the embeddings are not quantised
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
}

#[test]
fn mpnet_buckets_equal_transformers_from_minus_300_to_300() {
    let g = golden("mpnet");
    let from = g["buckets_from"].as_i64().unwrap();
    for (k, want) in floats(&g["buckets"]).iter().enumerate() {
        let rel = from + k as i64;
        assert_eq!(relative_position_bucket(rel) as f64, *want, "{rel}");
    }
}

#[test]
fn special_tokens_come_from_the_tokenizer() {
    // RoBERTa: <s> and </s> (and <pad>, <mask>) are special, <unk> is a word.
    let enc = Encoder::load(&dir("roberta"), None).unwrap();
    let tok = enc.tokenizer();
    let drop = TokenWeights::new(&"mean:special=drop".parse().unwrap(), None, tok).unwrap();
    for (t, special) in [
        ("<s>", true),
        ("</s>", true),
        ("<pad>", true),
        ("<unk>", false),
    ] {
        let id = tok.token_to_id(t).unwrap();
        assert_eq!(tok.is_special_id(id), special, "{t}");
        assert_eq!(drop.weight(id), if special { 0.0 } else { 1.0 }, "{t}");
    }
    // CamemBERT declares <s>NOTUSED special in its tokenizer.json only.
    let enc = Encoder::load(&dir("camembert"), None).unwrap();
    let tok = enc.tokenizer();
    assert!(tok.is_special_id(tok.token_to_id("<s>NOTUSED").unwrap()));
    // Truncation keeps </s> last.
    let (ids, cut) = enc.tokenize(&"très bien ".repeat(40)).unwrap();
    assert!(cut);
    assert_eq!(ids.len(), 38);
    assert_eq!(ids[0], tok.token_to_id("<s>").unwrap());
    assert_eq!(*ids.last().unwrap(), tok.token_to_id("</s>").unwrap());
}

#[test]
fn a_max_len_past_the_position_limit_is_refused() {
    // RoBERTa's 40 positions hold 38 tokens (positions start at padding_idx + 1).
    let e = Encoder::load(&dir("roberta"), Some(39)).err().unwrap();
    assert!(
        e.to_string()
            .contains("between 2 and the model's position limit 38"),
        "{e}"
    );
    assert!(Encoder::load(&dir("roberta"), Some(38)).is_ok());
    assert!(Encoder::load(&dir("distilbert"), Some(40)).is_ok());
}
