//! Tiny random cross-encoders of every family against transformers' logits
//! (scripts/reference/make_tiny_rerankers.py): the head of each
//! `*ForSequenceClassification` class, ids and token types of single texts
//! and pairs as the Hugging Face tokenizer gives them (pairs cut by
//! `longest_first` truncation included), logits within 1e-5; and the errors
//! of inputs too long without truncation, of an embedding model loaded as a
//! cross-encoder and of a head that does not match its config.
use crate::common::tiny::{dir, golden};
use bertflow_encoder::head::{
    classification_class, is_classifier_config, Truncation, SUPPORTED_HEADS,
};
use bertflow_encoder::{CrossEncoder, EncodeOptions, EncoderError, Precision};
use serde_json::Value;

const FAMILIES: [&str; 8] = [
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "mpnet",
    "modernbert",
    "deberta",
];

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn inputs(g: &Value) -> Vec<(String, Option<String>)> {
    g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["text"].as_str().unwrap().to_string(),
                c["pair"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn assert_logits(name: &str, got: &[Vec<f32>], g: &Value) {
    let cases = g["cases"].as_array().unwrap();
    assert_eq!(got.len(), cases.len(), "{name}");
    for (i, (row, c)) in got.iter().zip(cases).enumerate() {
        let want: Vec<f64> = c["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(row.len(), want.len(), "{name} case {i}");
        for (a, b) in row.iter().zip(&want) {
            assert!(
                (*a as f64 - b).abs() < 1e-5,
                "{name} case {i}: {row:?} vs {want:?}"
            );
        }
    }
}

#[test]
fn every_family_scores_as_transformers() {
    for fam in FAMILIES {
        let name = format!("{fam}-cls");
        let g = golden(&name);
        let ce = CrossEncoder::load(&dir(&name), None, Precision::Fp32).unwrap();
        assert_eq!(ce.class(), g["class"].as_str().unwrap(), "{name}");
        assert_eq!(
            ce.max_len() as u64,
            g["max_len"].as_u64().unwrap(),
            "{name}"
        );
        let labels: Vec<&str> = g["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(ce.labels(), labels.as_slice(), "{name}");
        let ins = inputs(&g);
        for (c, (text, pair)) in g["cases"].as_array().unwrap().iter().zip(&ins) {
            let t = ce
                .tokenize(text, pair.as_deref(), Truncation::Right)
                .unwrap();
            assert_eq!(t.ids, u32s(&c["ids"]), "{name}: ids of {text:?} / {pair:?}");
            assert_eq!(t.types, u32s(&c["types"]), "{name}: types of {text:?}");
        }
        // One batch of mixed lengths on two threads, and each input alone.
        let opts = EncodeOptions {
            batch_size: 3,
            threads: 2,
        };
        assert_logits(
            &name,
            &ce.predict(&ins, Truncation::Right, &opts).unwrap(),
            &g,
        );
        let alone: Vec<Vec<f32>> = ins
            .iter()
            .map(|i| {
                ce.predict(std::slice::from_ref(i), Truncation::Right, &opts)
                    .unwrap()[0]
                    .clone()
            })
            .collect();
        assert_logits(&name, &alone, &g);
    }
}

#[test]
fn left_truncation_keeps_the_last_tokens_as_transformers() {
    let opts = EncodeOptions {
        batch_size: 4,
        threads: 2,
    };
    for fam in FAMILIES {
        let name = format!("{fam}-cls");
        let g = golden(&name);
        let ce = CrossEncoder::load(&dir(&name), None, Precision::Fp32).unwrap();
        let cases: Vec<&Value> = g["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.get("left").is_some())
            .collect();
        assert!(cases.len() >= 3, "{name}");
        let ins: Vec<(String, Option<String>)> = cases
            .iter()
            .map(|c| {
                let text = c["text"].as_str().unwrap().to_string();
                (text, c["pair"].as_str().map(str::to_string))
            })
            .collect();
        let got = ce.predict(&ins, Truncation::Left, &opts).unwrap();
        for ((c, (text, pair)), row) in cases.iter().zip(&ins).zip(&got) {
            let t = ce
                .tokenize(text, pair.as_deref(), Truncation::Left)
                .unwrap();
            assert_eq!(t.ids, u32s(&c["left"]["ids"]), "{name}: {text:?}");
            assert_eq!(t.types, u32s(&c["left"]["types"]), "{name}: {text:?}");
            assert_ne!(t.ids, u32s(&c["ids"]), "{name}: {text:?}");
            let want = c["left"]["logits"][0].as_f64().unwrap();
            assert!(
                (row[0] as f64 - want).abs() < 1e-5,
                "{name}: {row:?} vs {want}"
            );
        }
    }
    // A text far past the character cut keeps the tokens of its end.
    let ce = CrossEncoder::load(&dir("bert-cls"), None, Precision::Fp32).unwrap();
    let huge = format!("{} the cat sleeps", "guitar ".repeat(40_000));
    let short = format!("{} the cat sleeps", "guitar ".repeat(100));
    let cut = ce.tokenize("q", Some(&huge), Truncation::Left).unwrap();
    assert_eq!(cut.ids.len(), 40);
    assert_eq!(
        cut,
        ce.tokenize("q", Some(&short), Truncation::Left).unwrap()
    );
}

#[test]
fn the_bert_pair_reads_its_token_types() {
    // The BERT fixture's pairs have type-1 tokens; its logits match only
    // because the second text reads row 1 of the token-type table.
    let g = golden("bert-cls");
    let pair = &g["cases"][2];
    assert!(u32s(&pair["types"]).contains(&1));
    let ce = CrossEncoder::load(&dir("bert-cls"), None, Precision::Fp32).unwrap();
    let one = [(pair["text"].as_str().unwrap().to_string(), None::<String>)];
    // The first text alone differs from the pair.
    let alone = ce
        .predict(&one, Truncation::Right, &EncodeOptions::default())
        .unwrap();
    let want = pair["logits"][0].as_f64().unwrap();
    assert!((alone[0][0] as f64 - want).abs() > 1e-3);
}

#[test]
fn too_long_without_truncation_is_an_error() {
    let g = golden("roberta-cls");
    let ce = CrossEncoder::load(&dir("roberta-cls"), None, Precision::Fp32).unwrap();
    let ins = inputs(&g);
    let opts = EncodeOptions::default();
    for (c, input) in g["cases"].as_array().unwrap().iter().zip(&ins) {
        let got = ce.predict(std::slice::from_ref(input), Truncation::Error, &opts);
        if c["truncated"].as_bool().unwrap() {
            let e = got.unwrap_err();
            assert!(matches!(e, EncoderError::TooLong { max: 38, .. }), "{e}");
            assert!(e.to_string().contains("at most 38"), "{e}");
        } else {
            let want = c["logits"][0].as_f64().unwrap();
            assert!((got.unwrap()[0][0] as f64 - want).abs() < 1e-5);
        }
    }
    // A text far past the character cut is refused without tokenising it all.
    let huge = "guitar ".repeat(40_000);
    let e = ce
        .tokenize("q", Some(&huge), Truncation::Error)
        .unwrap_err();
    assert!(e.to_string().contains("more than"), "{e}");
    // Truncated, the cut text gives the tokens of the whole one.
    let cut = ce.tokenize("q", Some(&huge), Truncation::Right).unwrap();
    assert_eq!(cut.ids.len(), 38);
    assert_eq!(
        cut,
        ce.tokenize("q", Some(&"guitar ".repeat(100)), Truncation::Right)
            .unwrap()
    );
}

#[test]
fn an_embedding_model_is_not_a_cross_encoder() {
    let e = CrossEncoder::load(&dir("roberta"), None, Precision::Fp32)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("no *ForSequenceClassification"),
        "{e}"
    );
    let text = std::fs::read_to_string(format!("{}/config.json", dir("roberta"))).unwrap();
    assert!(!is_classifier_config(&text).unwrap());
    for fam in FAMILIES {
        let text =
            std::fs::read_to_string(format!("{}/config.json", dir(&format!("{fam}-cls")))).unwrap();
        assert!(is_classifier_config(&text).unwrap(), "{fam}");
        let raw: Value = serde_json::from_str(&text).unwrap();
        assert!(SUPPORTED_HEADS.contains(&classification_class(&raw).unwrap()));
    }
}

/// A copy of fixture `name` with its config.json edited by `edit`.
fn edited(name: &str, edit: impl Fn(&mut Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir(name)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, cfg.to_string()).unwrap();
    tmp
}

#[test]
fn heads_that_do_not_match_their_config_are_errors() {
    let load = |t: &tempfile::TempDir| {
        CrossEncoder::load(t.path().to_str().unwrap(), None, Precision::Fp32)
            .err()
            .unwrap()
            .to_string()
    };
    // Three labels named, two rows in the classifier.
    let t = edited("bert-cls", |c| {
        c["id2label"] = serde_json::json!({"0": "a", "1": "b", "2": "c"});
    });
    let e = load(&t);
    assert!(
        e.contains("classifier.weight") && e.contains("[3, 32]"),
        "{e}"
    );
    // A class whose head bertflow does not run.
    let t = edited("bert-cls", |c| {
        c["architectures"] = serde_json::json!(["ElectraForSequenceClassification"]);
    });
    let e = load(&t);
    assert!(
        e.contains("ElectraForSequenceClassification is not supported"),
        "{e}"
    );
    // Labels that are not ids.
    let t = edited("distilbert-cls", |c| {
        c["id2label"] = serde_json::json!({"zero": "a"});
    });
    assert!(load(&t).contains("id2label"));
    // An unknown pooling or activation of ModernBERT's head.
    let t = edited("modernbert-cls", |c| c["classifier_pooling"] = "max".into());
    assert!(load(&t).contains("classifier_pooling 'max'"));
    let t = edited("modernbert-cls", |c| {
        c["classifier_activation"] = "softmax".into()
    });
    assert!(load(&t).contains("classifier_activation 'softmax'"));
    // ModernBERT's mean pooling is what the logits need: cls gives others.
    let t = edited("modernbert-cls", |c| c["classifier_pooling"] = "cls".into());
    let ce = CrossEncoder::load(t.path().to_str().unwrap(), None, Precision::Fp32).unwrap();
    let g = golden("modernbert-cls");
    let got = ce
        .predict(
            &inputs(&g)[..1],
            Truncation::Right,
            &EncodeOptions::default(),
        )
        .unwrap();
    assert!((got[0][0] as f64 - g["cases"][0]["logits"][0].as_f64().unwrap()).abs() > 1e-3);
}

#[test]
fn int8_scores_stay_close() {
    let g = golden("xlm-roberta-cls");
    let ce = CrossEncoder::load(&dir("xlm-roberta-cls"), None, Precision::Int8).unwrap();
    let got = ce
        .predict(&inputs(&g), Truncation::Right, &EncodeOptions::default())
        .unwrap();
    for (row, c) in got.iter().zip(g["cases"].as_array().unwrap()) {
        let want = c["logits"][0].as_f64().unwrap();
        assert!((row[0] as f64 - want).abs() < 0.15, "{row:?} vs {want}");
    }
}
