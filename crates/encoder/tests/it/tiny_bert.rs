//! A tiny random BERT in the old layout (pytorch_model.bin, `bert.` prefix,
//! LayerNorm gamma/beta, vocab.txt only) against PyTorch's vectors
//! (scripts/reference/make_tiny_bert.py).
use crate::common;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling};

#[test]
fn pytorch_bin_with_prefix_and_gamma_beta_matches_pytorch() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-bert");
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/golden.json")).unwrap())
            .unwrap();
    let enc = Encoder::load(dir, None).unwrap();
    assert_eq!(enc.num_layers(), 2);
    let names = ["cls", "pooler", "first-last-avg", "emb-avg"];
    let sources: Vec<_> = names
        .iter()
        .map(|n| enc.source(&n.parse::<Pooling>().unwrap()).unwrap())
        .collect();
    let cases = golden.as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let out = enc
        .encode(
            &texts,
            &sources,
            &EncodeOptions {
                batch_size: 8,
                threads: 1,
            },
            &|_| {},
        )
        .unwrap();
    for (i, case) in cases.iter().enumerate() {
        let ids: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(enc.tokenize(texts[i]).unwrap().0, ids, "{}", texts[i]);
        for (p, name) in names.iter().enumerate() {
            let want: Vec<f64> = case[name]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let got = out.embeddings[p].row(i);
            let max_abs = common::max_abs_diff(&got.to_vec(), &want);
            assert!(
                max_abs < 1e-5,
                "{name} of {:?}: max abs diff {max_abs}",
                texts[i]
            );
        }
    }
}
