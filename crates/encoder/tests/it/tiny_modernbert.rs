//! A tiny random ModernBERT (3 layers: global, local with a window of 4, global;
//! byte-level BPE tokenizer; a sentence past the 64 positions) against
//! transformers' hidden states and poolings in one padded batch
//! (scripts/reference/make_tiny_modernbert.py).
use crate::common::max_abs_diff;
use bertflow_encoder::engine::Workspace;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tiny-modernbert"
);
const POOLINGS: [&str; 5] = ["cls", "last-avg", "first-last-avg", "emb-avg", "layers:1,2"];

fn golden() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/golden.json")).unwrap()).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn ids(case: &serde_json::Value) -> Vec<u32> {
    floats(&case["ids"]).iter().map(|&x| x as u32).collect()
}

fn texts(golden: &serde_json::Value) -> Vec<String> {
    golden["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect()
}

/// Every pooling of every case, in batches of `batch_size` (8: the whole batch
/// in one padded forward pass; 1: each sentence alone, unpadded).
fn encode_in(enc: &Encoder, texts: &[String], batch_size: usize) -> Vec<Vec<Vec<f32>>> {
    let sources: Vec<_> = POOLINGS
        .iter()
        .map(|n| enc.source(&n.parse::<Pooling>().unwrap()).unwrap())
        .collect();
    let opts = EncodeOptions {
        batch_size,
        threads: 1,
    };
    let out = enc.encode(texts, &sources, &opts, &|_| {}).unwrap();
    assert_eq!(out.num_truncated(), 1);
    out.embeddings
        .iter()
        .map(|m| m.rows().into_iter().map(|r| r.to_vec()).collect())
        .collect()
}

fn encode_all(enc: &Encoder, texts: &[String]) -> Vec<Vec<Vec<f32>>> {
    encode_in(enc, texts, 8)
}

#[test]
fn tokens_and_truncation_match_transformers() {
    let golden = golden();
    let enc = Encoder::load(DIR, None).unwrap();
    assert_eq!(enc.config().model_type, "modernbert");
    assert_eq!(enc.num_layers(), 3);
    assert_eq!(enc.max_len(), golden["max_len"].as_u64().unwrap() as usize);
    assert!(!enc.model().has_pooler());
    for case in golden["cases"].as_array().unwrap() {
        let (got, truncated) = enc.tokenize(case["text"].as_str().unwrap()).unwrap();
        assert_eq!(got, ids(case), "{}", case["text"]);
        assert_eq!(truncated, case["truncated"].as_bool().unwrap());
    }
}

#[test]
fn every_hidden_state_matches_transformers_in_a_padded_batch() {
    let golden = golden();
    let enc = Encoder::load(DIR, None).unwrap();
    let h = enc.dim();
    let cases = golden["cases"].as_array().unwrap();
    let rows: Vec<Vec<u32>> = cases.iter().map(ids).collect();
    let lens: Vec<usize> = rows.iter().map(|r| r.len()).collect();
    let t = *lens.iter().max().unwrap();
    let pad = enc.config().pad_token_id as u32;
    let batch: Vec<u32> = rows
        .iter()
        .flat_map(|r| r.iter().copied().chain(std::iter::repeat(pad)).take(t))
        .collect();
    let mut ws = Workspace::new();
    enc.model()
        .forward_into(&batch, &lens, t, 3, &mut ws)
        .unwrap();
    let states = ws.states();
    assert_eq!(states.len(), 4);
    let mut checked = 0;
    for (r, case) in cases.iter().enumerate() {
        let Some(layers) = case.get("hidden_states") else {
            continue;
        };
        for (l, tokens) in layers.as_array().unwrap().iter().enumerate() {
            for (i, want) in tokens.as_array().unwrap().iter().enumerate() {
                let at = (r * t + i) * h;
                let d = max_abs_diff(&states[l][at..at + h], &floats(want));
                assert!(d < 1e-5, "case {r} state {l} token {i}: max abs diff {d}");
                checked += 1;
            }
        }
    }
    // three sentences of 12, 14 and 14 tokens, 4 states each
    assert_eq!(checked, 4 * (12 + 14 + 14));
}

#[test]
fn poolings_match_transformers_fp32_padded_or_not() {
    let golden = golden();
    let enc = Encoder::load(DIR, None).unwrap();
    for batch_size in [8, 1] {
        let got = encode_in(&enc, &texts(&golden), batch_size);
        for (p, name) in POOLINGS.iter().enumerate() {
            let cases = golden["poolings"][name].as_array().unwrap();
            for (r, want) in cases.iter().enumerate() {
                let d = max_abs_diff(&got[p][r], &floats(want));
                assert!(
                    d < 1e-5,
                    "{name} of case {r} (batches of {batch_size}): {d}"
                );
            }
        }
    }
}

#[test]
fn int8_poolings_are_close_to_transformers() {
    let golden = golden();
    let enc = Encoder::load_with_precision(DIR, None, Precision::Int8).unwrap();
    assert_eq!(enc.precision(), Precision::Int8);
    let got = encode_all(&enc, &texts(&golden));
    for (p, name) in POOLINGS.iter().enumerate() {
        for (r, want) in golden["poolings"][name]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let (g, want) = (&got[p][r], &floats(want));
            let dot: f64 = g.iter().zip(want).map(|(a, b)| *a as f64 * b).sum();
            let na = g.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
            let nb = want.iter().map(|b| b * b).sum::<f64>().sqrt();
            let cos = dot / (na * nb);
            let d = max_abs_diff(g, want);
            if *name == "emb-avg" {
                // the embeddings are not quantised
                assert!(d < 1e-5, "{name} of case {r}: {d}");
                continue;
            }
            assert!(cos > INT8_MIN_COS, "{name} of case {r}: cosine {cos}");
            assert!(
                d > 1e-7,
                "{name} of case {r}: int8 equals fp32, not quantised?"
            );
        }
    }
}

/// int8 against transformers' fp32 vectors: the lowest cosine measured on this
/// fixture is 0.99994 (last-avg); 0.999 leaves a margin of about 15x in 1 - cos
/// for other int8 kernels (AVX2's 7-bit activations, the portable kernel).
const INT8_MIN_COS: f64 = 0.999;

#[test]
fn weights_under_the_model_prefix_load_the_same() {
    // ModernBertForMaskedLM and the other heads save the encoder as `model.*`.
    let golden = golden();
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(format!("{DIR}/{f}"), tmp.path().join(f)).unwrap();
    }
    use bertflow_encoder::checkpoint::{read_safetensors, to_safetensors_bytes, HostTensor};
    let save = |t: &std::collections::HashMap<String, HostTensor>| {
        let bytes = to_safetensors_bytes(t.iter().map(|(k, v)| (k.as_str(), v))).unwrap();
        std::fs::write(tmp.path().join("model.safetensors"), bytes).unwrap();
    };
    let tensors = read_safetensors(format!("{DIR}/model.safetensors").as_ref()).unwrap();
    let prefixed: std::collections::HashMap<String, HostTensor> = tensors
        .into_iter()
        .map(|(k, v)| (format!("model.{k}"), v))
        .collect();
    save(&prefixed);
    let enc = Encoder::load(tmp.path().to_str().unwrap(), None).unwrap();
    let got = encode_all(&enc, &texts(&golden));
    for (r, want) in golden["poolings"]["cls"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let d = max_abs_diff(&got[0][r], &floats(want));
        assert!(d < 1e-5, "cls of case {r}: max abs diff {d}");
    }
    // without the final norm's weights the checkpoint is refused, not guessed
    let mut partial = prefixed;
    partial.remove("model.final_norm.weight");
    save(&partial);
    let err = Encoder::load(tmp.path().to_str().unwrap(), None)
        .err()
        .expect("a checkpoint without final_norm loads");
    assert!(err.to_string().contains("final_norm"), "{err}");
}
