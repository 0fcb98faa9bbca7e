//! The encoder against golden vectors from PyTorch transformers
//! (scripts/reference/golden_encoder.py), for every pooling, with and without
//! truncation, encoding all sentences in one padded batch.
use crate::common;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling};
use common::*;

fn check_against_golden(model: &str, max_len: usize, threads: usize, batch_size: usize) {
    let golden = golden();
    let cases: Vec<&serde_json::Value> = golden["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["max_len"].as_u64() == Some(max_len as u64))
        .collect();
    assert_eq!(cases.len(), 8);
    let enc = Encoder::load(model, Some(max_len)).unwrap();
    let names: Vec<String> = cases[0]["poolings"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(names.len(), 8);
    let sources: Vec<_> = names
        .iter()
        .map(|n| enc.source(&n.parse::<Pooling>().unwrap()).unwrap())
        .collect();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let opts = EncodeOptions {
        batch_size,
        threads,
    };
    let out = enc.encode(&texts, &sources, &opts, &|_| {}).unwrap();
    let expect_trunc = cases
        .iter()
        .filter(|c| c["ids"].as_array().unwrap().len() >= max_len && max_len == 16)
        .count();
    for (i, case) in cases.iter().enumerate() {
        let ids: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            enc.tokenize(texts[i]).unwrap().0,
            ids,
            "token ids of {:?}",
            texts[i]
        );
        assert_eq!(out.tokens[i], ids.len());
        for (p, name) in names.iter().enumerate() {
            let want: Vec<f64> = case["poolings"][name]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let got = out.embeddings[p].row(i).to_vec();
            let c = cosine(&got, &want);
            assert!(
                c >= 0.99999,
                "{name} of {:?} (max_len {max_len}): cosine {c}",
                texts[i]
            );
            let max_abs = max_abs_diff(&got, &want);
            assert!(
                max_abs < 1e-3,
                "{name} of {:?}: max abs diff {max_abs}",
                texts[i]
            );
        }
    }
    if max_len == 16 {
        assert!(
            out.num_truncated() >= 1 && out.num_truncated() == expect_trunc,
            "truncated {:?}",
            out.truncated
        );
    } else {
        assert_eq!(out.num_truncated(), 0);
    }
}

#[test]
fn matches_pytorch_every_pooling_one_batch() {
    check_against_golden(model_dir().to_str().unwrap(), 512, 1, 64);
}

#[test]
fn matches_pytorch_when_truncated_and_split_over_workers() {
    check_against_golden(model_dir().to_str().unwrap(), 16, 2, 3);
}

#[test]
fn vocab_txt_alone_gives_the_same_vectors() {
    let src = model_dir();
    let tmp = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer_config.json",
    ] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    check_against_golden(tmp.path().to_str().unwrap(), 512, 2, 4);
}

#[test]
fn a_sentence_gets_the_same_bits_whatever_its_batch() {
    let golden = golden();
    let texts: Vec<String> = golden["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    let enc = Encoder::load(model_dir().to_str().unwrap(), None).unwrap();
    let src = [enc.source(&Pooling::FirstLastAvg).unwrap()];
    let together = enc
        .encode(
            &texts,
            &src,
            &EncodeOptions {
                batch_size: 64,
                threads: 2,
            },
            &|_| {},
        )
        .unwrap();
    let mut doubled = texts.clone();
    doubled.extend(texts.iter().rev().cloned());
    let shuffled = enc
        .encode(
            &doubled,
            &src,
            &EncodeOptions {
                batch_size: 3,
                threads: 1,
            },
            &|_| {},
        )
        .unwrap();
    for (i, t) in texts.iter().enumerate() {
        let alone = enc
            .encode(
                &[t],
                &src,
                &EncodeOptions {
                    batch_size: 1,
                    threads: 1,
                },
                &|_| {},
            )
            .unwrap();
        assert_eq!(
            together.embeddings[0].row(i),
            alone.embeddings[0].row(0),
            "{t:?}"
        );
        assert_eq!(
            shuffled.embeddings[0].row(i),
            alone.embeddings[0].row(0),
            "{t:?}"
        );
    }
}
