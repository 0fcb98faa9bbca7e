//! Tiny random checkpoints of every architecture against transformers' vectors
//! (scripts/reference/make_tiny_models.py): token ids, truncation at the
//! model's token limit, and several poolings (every hidden state) for one
//! right-padded batch and for length-sorted unpadded batches, fp32 within 1e-5;
//! int8 close by cosine.
use crate::common::tiny::{self, dir, floats, golden};
use bertflow_encoder::arch::mpnet::relative_position_bucket;
use bertflow_encoder::{Encoder, TokenWeights};

const ARCHS: [&str; 5] = ["roberta", "xlm-roberta", "camembert", "distilbert", "mpnet"];

#[test]
fn every_architecture_equals_transformers_within_1e5() {
    for name in ARCHS {
        tiny::assert_equals_transformers(name);
    }
}

#[test]
fn every_architecture_runs_int8_close_to_transformers() {
    for name in ARCHS {
        tiny::assert_int8_close(name);
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
