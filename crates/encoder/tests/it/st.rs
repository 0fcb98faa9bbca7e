//! `--pooling st` against sentence-transformers: three tiny sentence-transformers
//! directories (scripts/reference/make_tiny_st.py) with the vectors
//! `SentenceTransformer(dir).encode(texts)` gave; and malformed directories.
use bertflow_encoder::{EncodeOptions, Encoder, EncoderError, PoolSource, Pooling};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny-st")
        .join(name)
}

fn opts() -> EncodeOptions {
    EncodeOptions {
        batch_size: 3,
        threads: 2,
    }
}

fn check_golden(name: &str, dim: usize) {
    let dir = fixture(name);
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let texts: Vec<&str> = golden["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let enc = Encoder::load(dir.to_str().unwrap(), None).unwrap();
    let src = enc.source(&Pooling::St).unwrap();
    assert_eq!(src.dim(enc.dim()), dim, "{name}");
    let out = enc.encode(&texts, &[src], &opts(), &|_| {}).unwrap();
    let got = &out.embeddings[0];
    assert_eq!(got.dim(), (texts.len(), dim), "{name}");
    let mut worst = 0f64;
    for (i, row) in golden["vectors"].as_array().unwrap().iter().enumerate() {
        let want: Vec<f64> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(want.len(), dim);
        for (a, b) in got.row(i).iter().zip(&want) {
            worst = worst.max((*a as f64 - b).abs());
        }
    }
    assert!(
        worst < 1e-5,
        "{name}: max |bertflow - sentence-transformers| = {worst}"
    );
}

#[test]
fn mean_max_sqrt_dense_tanh_identity_normalize_equal_sentence_transformers() {
    check_golden("mean-dense", 8);
    // The long sentences were cut at sentence-transformers' 12 tokens, not at the
    // encoder's 32.
    let enc = Encoder::load(fixture("mean-dense").to_str().unwrap(), None).unwrap();
    assert_eq!(enc.max_len(), 32);
    let src = enc.source(&Pooling::St).unwrap();
    let long = ["a big red car and a big red dog and a cat sleeps on the mat in the sun"];
    let out = enc
        .encode(&long, std::slice::from_ref(&src), &opts(), &|_| {})
        .unwrap();
    assert_eq!((out.tokens[0], out.truncated[0]), (12, true));
    // With another pooling in the same call, each keeps its own truncation.
    let out = enc
        .encode(
            &long,
            &[enc.source(&Pooling::LastAvg).unwrap(), src],
            &opts(),
            &|_| {},
        )
        .unwrap();
    assert_eq!(out.embeddings[0].ncols(), 16);
    assert_eq!(out.embeddings[1].ncols(), 8);
    let alone = enc
        .encode(
            &long,
            &[enc.source(&Pooling::LastAvg).unwrap()],
            &opts(),
            &|_| {},
        )
        .unwrap();
    assert_eq!(out.embeddings[0], alone.embeddings[0]);
}

#[test]
fn cls_weightedmean_lasttoken_and_default_tanh_from_pytorch_bin_equal_sentence_transformers() {
    check_golden("cls-multi", 6);
}

#[test]
fn legacy_pooling_flags_and_do_lower_case_equal_sentence_transformers() {
    check_golden("legacy", 32);
}

#[test]
fn st_is_a_named_pooling_with_a_stable_key() {
    assert_eq!("st".parse::<Pooling>().unwrap(), Pooling::St);
    assert_eq!(Pooling::St.to_string(), "st");
    assert!(bertflow_encoder::POOLINGS.iter().any(|(n, _)| *n == "st"));
    let enc = Encoder::load(fixture("legacy").to_str().unwrap(), None).unwrap();
    let a = enc.source(&Pooling::St).unwrap();
    let b = enc.source(&Pooling::St).unwrap();
    assert_eq!(a, b);
    assert!(a.key().starts_with("st@"));
    let other = Encoder::load(fixture("mean-dense").to_str().unwrap(), None).unwrap();
    assert_ne!(a.key(), other.source(&Pooling::St).unwrap().key());
    assert!(matches!(a, PoolSource::St(_)));
}

/// A copy of a fixture that `edit` then damages.
fn damaged(name: &str, edit: impl FnOnce(&Path)) -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture(name), tmp.path());
    edit(tmp.path());
    let dir = tmp.path().to_str().unwrap().to_string();
    (tmp, dir)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The error loading `dir` (the model loader reads modules.json too) or
/// resolving `st` on it.
fn st_error(dir: &str) -> String {
    match Encoder::load(dir, None) {
        Err(e) => e.to_string(),
        Ok(enc) => enc.source(&Pooling::St).unwrap_err().to_string(),
    }
}

#[test]
fn a_directory_without_modules_json_is_an_error_saying_so() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-bert");
    let enc = Encoder::load(dir, None).unwrap();
    let e = enc.source(&Pooling::St).unwrap_err();
    assert!(matches!(e, EncoderError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("no modules.json"), "{e}");
    // Pooling::source alone cannot resolve it.
    assert!(Pooling::St.source(2).is_err());
}

#[test]
fn malformed_directories_are_errors_naming_the_file() {
    let write = |p: &Path, rel: &str, text: &str| std::fs::write(p.join(rel), text).unwrap();
    type Edit<'a> = Box<dyn FnOnce(&Path) + 'a>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "mean-dense",
            Box::new(|p| write(p, "modules.json", "{not json")),
            "modules.json",
        ),
        (
            "mean-dense",
            Box::new(|p| write(p, "modules.json", r#"{"a": 1}"#)),
            "modules.json",
        ),
        (
            "mean-dense",
            Box::new(|p| write(p, "1_Pooling/config.json", r#"{"pooling_mode": "median"}"#)),
            "1_Pooling/config.json",
        ),
        (
            "mean-dense",
            Box::new(|p| write(p, "1_Pooling/config.json", r#"{"embedding_dimension": 17}"#)),
            "1_Pooling/config.json",
        ),
        (
            "mean-dense",
            Box::new(|p| {
                write(
                    p,
                    "2_Dense/config.json",
                    r#"{"in_features": 48, "out_features": 20, "activation_function": "torch.nn.modules.activation.ReLU"}"#,
                )
            }),
            "2_Dense/config.json",
        ),
        (
            "mean-dense",
            Box::new(|p| {
                write(
                    p,
                    "2_Dense/config.json",
                    r#"{"in_features": 47, "out_features": 20}"#,
                )
            }),
            "2_Dense/config.json",
        ),
        (
            // Right config, weights of another shape.
            "mean-dense",
            Box::new(|p| {
                std::fs::copy(
                    p.join("3_Dense/model.safetensors"),
                    p.join("2_Dense/model.safetensors"),
                )
                .unwrap();
            }),
            "2_Dense/model.safetensors",
        ),
        (
            "mean-dense",
            Box::new(|p| write(p, "2_Dense/model.safetensors", "garbage")),
            "2_Dense/model.safetensors",
        ),
        (
            "cls-multi",
            Box::new(|p| write(p, "2_Dense/pytorch_model.bin", "PK garbage")),
            "2_Dense/pytorch_model.bin",
        ),
        (
            "legacy",
            Box::new(|p| {
                write(
                    p,
                    "sentence_bert_config.json",
                    r#"{"max_seq_length": "long"}"#,
                )
            }),
            "sentence_bert_config.json",
        ),
        (
            "legacy",
            Box::new(|p| {
                write(
                    p,
                    "modules.json",
                    r#"[{"idx":0,"path":"","type":"sentence_transformers.models.Transformer"},
                        {"idx":1,"path":"x","type":"sentence_transformers.models.LSTM"}]"#,
                )
            }),
            "modules.json",
        ),
        (
            "legacy",
            Box::new(|p| {
                write(
                    p,
                    "modules.json",
                    r#"[{"idx":0,"path":"","type":"sentence_transformers.models.Transformer"},
                        {"idx":1,"path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
                )
            }),
            "modules.json",
        ),
        (
            "legacy",
            Box::new(|p| {
                std::fs::create_dir_all(p.join("2_Bertflow")).unwrap();
                write(
                    p,
                    "2_Bertflow/config.json",
                    r#"{"source": {"mean": [0, 9]}}"#,
                );
                write(
                    p,
                    "modules.json",
                    r#"[{"idx":0,"path":"","type":"sentence_transformers.models.Transformer"},
                        {"idx":1,"path":"2_Bertflow","type":"bertflow.st.Calibrator"}]"#,
                )
            }),
            "2_Bertflow/config.json",
        ),
        (
            "legacy",
            Box::new(|p| {
                write(
                    p,
                    "config_sentence_transformers.json",
                    r#"{"prompts": {"query": 3}}"#,
                )
            }),
            "config_sentence_transformers.json",
        ),
    ];
    for (name, edit, file) in cases {
        let (_tmp, dir) = damaged(name, edit);
        let e = st_error(&dir);
        assert!(e.contains(file), "{name}/{file}: {e}");
    }
}

#[test]
fn bertflow_module_without_calibrator_pools_from_hidden_states() {
    // `{"mean": [1, 2]}`: first-last-avg of this 2-layer model; `{"cls": 1}`.
    for (source, pooling) in [
        (r#"{"mean": [2, 1]}"#, "first-last-avg"),
        (r#"{"cls": 2}"#, "cls"),
        (r#"{"mean": [0]}"#, "emb-avg"),
    ] {
        let (_tmp, dir) = damaged("legacy", |p| {
            std::fs::create_dir_all(p.join("1_Bertflow")).unwrap();
            std::fs::write(
                p.join("1_Bertflow/config.json"),
                format!(r#"{{"source": {source}, "calibrator": null}}"#),
            )
            .unwrap();
            std::fs::write(
                p.join("modules.json"),
                r#"[{"idx":0,"path":"","type":"sentence_transformers.models.Transformer"},
                    {"idx":1,"path":"1_Bertflow","type":"bertflow.st.Calibrator"}]"#,
            )
            .unwrap();
        });
        let enc = Encoder::load(&dir, None).unwrap();
        let texts = ["the dog runs in the park", "cat", "a man plays guitar."];
        let srcs = [
            enc.source(&Pooling::St).unwrap(),
            enc.source(&pooling.parse().unwrap()).unwrap(),
        ];
        let out = enc.encode(&texts, &srcs, &opts(), &|_| {}).unwrap();
        // The legacy directory lowercases and truncates at 10; these texts are short and lowercase.
        assert_eq!(out.embeddings[0], out.embeddings[1], "{source}");
    }
}
