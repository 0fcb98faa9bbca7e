//! Tiny random decoder-style checkpoints (scripts/reference/make_tiny_decoders.py)
//! against transformers: Qwen3 (grouped-query attention, query/key norms,
//! head_dim apart from hidden / heads, causal), Qwen2 (q/k/v biases, causal),
//! Gemma 3 with bidirectional attention (sliding / global / sliding layers with
//! a window of 6, four (1 + w) norms per layer, scaled embeddings) and EuroBERT
//! (biases, grouped-query attention, bidirectional). Every hidden state of a
//! right-padded batch within 1e-5 (a sentence cut at the 64-token limit among
//! them); the poolings, `last-token` against transformers' right- and
//! left-padded batches, padded and unpadded; int8 close by cosine; and two
//! sentence-transformers directories (EmbeddingGemma's Pooling mean + Dense +
//! Dense + Normalize, Qwen3-Embedding's last-token Pooling + Normalize) against
//! `SentenceTransformer(dir).encode`.
use crate::common;
use crate::common::tiny::{dir, floats, golden};
use bertflow_encoder::engine::Workspace;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision};
use common::{cosine, max_abs_diff};
use serde_json::Value;

const FAMILIES: [&str; 4] = ["qwen3", "qwen2", "gemma3", "eurobert"];
/// golden pooling -> bertflow pooling
const POOLINGS: [(&str, &str); 6] = [
    ("last-token", "last-token"),
    ("last-token-left", "last-token"),
    ("last-avg", "last-avg"),
    ("first-last-avg", "first-last-avg"),
    ("emb-avg", "emb-avg"),
    ("cls", "cls"),
];

fn ids(case: &Value) -> Vec<u32> {
    floats(&case["ids"]).iter().map(|&x| x as u32).collect()
}

fn texts(g: &Value) -> Vec<String> {
    g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect()
}

/// Every pooling of [`POOLINGS`] for every case, in batches of `batch_size`.
fn encode(enc: &Encoder, g: &Value, batch_size: usize) -> Vec<Vec<Vec<f32>>> {
    let sources: Vec<_> = POOLINGS
        .iter()
        .map(|(_, p)| enc.source(&p.parse::<Pooling>().unwrap()).unwrap())
        .collect();
    let opts = EncodeOptions {
        batch_size,
        threads: 1,
    };
    let out = enc.encode(&texts(g), &sources, &opts, &|_| {}).unwrap();
    assert_eq!(out.num_truncated(), 1);
    out.embeddings
        .iter()
        .map(|m| m.rows().into_iter().map(|r| r.to_vec()).collect())
        .collect()
}

#[test]
fn tokens_and_truncation_match_transformers() {
    for name in FAMILIES {
        let g = golden(name);
        let enc = Encoder::load(&dir(name), None).unwrap();
        assert_eq!(enc.config().model_type, g["model_type"].as_str().unwrap());
        assert_eq!(enc.num_layers(), 3);
        assert_eq!(enc.max_len() as u64, g["max_len"].as_u64().unwrap());
        for case in g["cases"].as_array().unwrap() {
            let (got, cut) = enc.tokenize(case["text"].as_str().unwrap()).unwrap();
            assert_eq!(got, ids(case), "{name}: {}", case["text"]);
            assert_eq!(cut, case["truncated"].as_bool().unwrap(), "{name}");
        }
    }
}

#[test]
fn every_hidden_state_matches_transformers_in_a_padded_batch() {
    for name in FAMILIES {
        let g = golden(name);
        let enc = Encoder::load(&dir(name), None).unwrap();
        let h = enc.dim();
        let cases = g["cases"].as_array().unwrap();
        let rows: Vec<Vec<u32>> = cases.iter().map(ids).collect();
        let lens: Vec<usize> = rows.iter().map(Vec::len).collect();
        let t = *lens.iter().max().unwrap();
        assert_eq!(t, 64, "{name}: a case at the token limit");
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
            for (l, tokens) in case["hidden_states"].as_array().unwrap().iter().enumerate() {
                for (i, want) in tokens.as_array().unwrap().iter().enumerate() {
                    let at = (r * t + i) * h;
                    let d = max_abs_diff(&states[l][at..at + h], &floats(want));
                    assert!(
                        d < 1e-5,
                        "{name} case {r} state {l} token {i}: max abs diff {d:e}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 4 * lens.iter().sum::<usize>(), "{name}");
    }
}

#[test]
fn poolings_match_transformers_padded_and_alone_whatever_the_padding_side() {
    for name in FAMILIES {
        let g = golden(name);
        let enc = Encoder::load(&dir(name), None).unwrap();
        for batch_size in [8, 1] {
            let got = encode(&enc, &g, batch_size);
            for (p, (gname, _)) in POOLINGS.iter().enumerate() {
                for (i, want) in g["poolings"][gname].as_array().unwrap().iter().enumerate() {
                    let d = max_abs_diff(&got[p][i], &floats(want));
                    assert!(
                        d < 1e-5,
                        "{name} {gname} case {i} (batch {batch_size}): max abs diff {d:e}"
                    );
                }
            }
        }
    }
}

#[test]
fn int8_stays_close_to_transformers() {
    for name in FAMILIES {
        let g = golden(name);
        let enc = Encoder::load_with_precision(&dir(name), None, Precision::Int8).unwrap();
        assert_eq!(enc.precision(), Precision::Int8);
        let got = encode(&enc, &g, 8);
        let mut worst = 1f64;
        for (p, (gname, _)) in POOLINGS.iter().enumerate() {
            if *gname == "emb-avg" {
                continue; // the embeddings are not quantised
            }
            for (i, want) in g["poolings"][gname].as_array().unwrap().iter().enumerate() {
                let cos = cosine(&got[p][i], &floats(want));
                assert!(cos < 1.0 - 1e-9, "{name} {gname}: int8 equals fp32");
                worst = worst.min(cos);
            }
        }
        eprintln!("{name}: int8 vs transformers fp32, worst cosine {worst:.5}");
        assert!(worst >= 0.99, "{name}: worst cosine {worst}");
    }
}

#[test]
fn decoders_name_their_architecture_and_causality() {
    for (name, causal) in [
        ("qwen3", true),
        ("qwen2", true),
        ("gemma3", false),
        ("eurobert", false),
    ] {
        let enc = Encoder::load(&dir(name), None).unwrap();
        assert_eq!(enc.config().architecture.is_causal(), causal, "{name}");
        assert!(!enc.model().has_pooler());
    }
    assert_eq!(
        "last-token".parse::<Pooling>().unwrap().to_string(),
        "last-token"
    );
}

fn st_golden(name: &str, dim: usize) {
    let d = format!(
        "{}/tests/fixtures/tiny-st-decoders/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{d}/golden.json")).unwrap())
            .unwrap();
    let texts: Vec<&str> = g["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let enc = Encoder::load(&d, None).unwrap();
    let src = enc.source(&Pooling::St).unwrap();
    assert_eq!(src.dim(enc.dim()), dim, "{name}");
    for batch_size in [3, 1] {
        let opts = EncodeOptions {
            batch_size,
            threads: 2,
        };
        let out = enc
            .encode(&texts, std::slice::from_ref(&src), &opts, &|_| {})
            .unwrap();
        for (i, want) in g["vectors"].as_array().unwrap().iter().enumerate() {
            let row: Vec<f32> = out.embeddings[0].row(i).iter().copied().collect();
            let diff = max_abs_diff(&row, &floats(want));
            assert!(diff < 1e-5, "{name} text {i}: max abs diff {diff:e}");
        }
    }
}

#[test]
fn embeddinggemma_like_st_directory_equals_sentence_transformers() {
    st_golden("gemma-dense", 16);
}

#[test]
fn qwen3_embedding_like_st_directory_equals_sentence_transformers() {
    st_golden("qwen-lasttoken", 32);
}

/// The error of loading `name`'s checkpoint with `edit` applied to its config.
fn config_error(name: &str, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(format!("{}/{f}", dir(name)), tmp.path().join(f)).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(cfg.as_object_mut().unwrap());
    std::fs::write(&path, cfg.to_string()).unwrap();
    match Encoder::load(tmp.path().to_str().unwrap(), None) {
        Ok(_) => panic!("{name}: loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unsupported_decoder_configs_are_errors_naming_the_field() {
    let e = config_error("gemma3", |c| {
        c.insert("use_bidirectional_attention".into(), false.into());
    });
    assert!(e.contains("use_bidirectional_attention"), "{e}");
    let e = config_error("qwen3", |c| {
        c.insert("use_sliding_window".into(), true.into());
    });
    assert!(e.contains("use_sliding_window"), "{e}");
    let e = config_error("qwen3", |c| {
        c.insert(
            "rope_parameters".into(),
            serde_json::json!({"rope_type": "yarn", "rope_theta": 10000.0}),
        );
    });
    assert!(e.contains("rope_type"), "{e}");
    let e = config_error("eurobert", |c| {
        c.insert("num_key_value_heads".into(), 3.into());
    });
    assert!(e.contains("num_key_value_heads"), "{e}");
    let e = config_error("qwen2", |c| {
        c.insert("hidden_act".into(), "relu".into());
    });
    assert!(e.contains("hidden_act"), "{e}");
}
