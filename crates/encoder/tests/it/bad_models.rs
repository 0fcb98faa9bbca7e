//! Model files that would give silently wrong vectors or a failure per
//! request are refused at load, with the field or tensor named: config.json
//! ranges, non-finite weights, tokenizer ids past the vocabulary.
use bertflow_encoder::Encoder;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A copy of a fixture directory with `config.json` patched by `patch`.
fn patched(name: &str, patch: impl Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    patch(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    tmp
}

fn load_err(dir: &Path) -> String {
    match Encoder::load(dir.to_str().unwrap(), None) {
        Ok(_) => panic!("{} should be refused", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_fixtures_load() {
    for name in ["tiny-bert", "tiny-roberta"] {
        let dir = patched(name, |_| {});
        Encoder::load(dir.path().to_str().unwrap(), None).unwrap();
    }
}

#[test]
fn config_values_out_of_range_are_refused_by_name() {
    let cases: [(&str, serde_json::Value, &str); 6] = [
        ("layer_norm_eps", serde_json::json!(-1.0), "epsilon"),
        ("layer_norm_eps", serde_json::json!(0.0), "epsilon"),
        ("type_vocab_size", serde_json::json!(0), "type_vocab_size"),
        (
            "num_hidden_layers",
            serde_json::json!(0),
            "num_hidden_layers",
        ),
        ("vocab_size", serde_json::json!(0), "vocab_size"),
        ("hidden_size", serde_json::json!(0), "hidden_size"),
    ];
    for (field, value, named) in cases {
        let dir = patched("tiny-bert", |c| c[field] = value.clone());
        let e = load_err(dir.path());
        assert!(
            e.contains("config.json") && e.contains(named),
            "{field}={value}: {e}"
        );
    }
}

#[test]
fn a_non_finite_weight_is_refused_naming_the_tensor() {
    use bertflow_encoder::checkpoint::{read_torch, to_safetensors_bytes, HostTensor};
    let dir = patched("tiny-bert", |_| {});
    let bin = dir.path().join("pytorch_model.bin");
    let mut tensors: std::collections::HashMap<String, HostTensor> =
        read_torch(&bin).unwrap().into_iter().collect();
    std::fs::remove_file(&bin).unwrap();
    let name = tensors
        .keys()
        .find(|k| k.contains("encoder.layer.0.attention.self.query.weight"))
        .unwrap()
        .clone();
    for bad in [f32::NAN, f32::INFINITY] {
        let t = &tensors[&name];
        let mut values = t.to_f32();
        values[3] = bad;
        let patched = HostTensor::from_f32(t.shape().to_vec(), &values).unwrap();
        tensors.insert(name.clone(), patched);
        let bytes = to_safetensors_bytes(tensors.iter().map(|(k, v)| (k.as_str(), v))).unwrap();
        std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
        let e = load_err(dir.path());
        assert!(
            e.contains(&name) && e.contains("non-finite") && e.contains("element 3"),
            "{e}"
        );
    }
}

#[test]
fn a_tokenizer_id_past_the_vocabulary_is_refused_at_load() {
    // tiny-roberta's tokenizer has ids 0..=299; a model of 299 rows lacks one.
    let dir = patched("tiny-roberta", |c| c["vocab_size"] = serde_json::json!(299));
    let e = load_err(dir.path());
    assert!(
        e.contains("id 299") && e.contains("vocabulary of 299"),
        "{e}"
    );
}

#[test]
fn a_long_text_is_cut_by_characters_with_the_same_tokens() {
    let dir = fixture("tiny-roberta");
    let encoder = Encoder::load(dir.to_str().unwrap(), Some(32)).unwrap();
    let tokenizer = encoder.tokenizer();
    let words = ["alpha", "beta", "gamma", "delta", "the", "a", "of"];
    let mut text = String::new();
    let mut i = 0usize;
    while text.len() < 2_000_000 {
        text.push_str(words[i % words.len()]);
        text.push(if i.is_multiple_of(11) { '\n' } else { ' ' });
        i += 1;
    }
    let full = tokenizer.encode(&text).unwrap();
    let cut = tokenizer.encode_prefix(&text, 32, false).unwrap();
    assert!(
        cut.len() >= 32 + bertflow_encoder::tokenize::CUT_SLACK,
        "{}",
        cut.len()
    );
    assert!(cut.len() < full.len() / 100);
    // The kept tokens are the full text's (the last one of `cut` is its [SEP]).
    assert!(cut[..cut.len() - 1] == full[..cut.len() - 1]);
    let (ids, truncated) = encoder.tokenize(&text).unwrap();
    assert!(truncated);
    assert_eq!(ids.len(), 32);
    assert!(ids[..31] == full[..31]);

    // Mostly spaces, or one long word: the first tokens are still the full
    // text's.
    for odd in [
        format!("{}{}", " ".repeat(100_000), "alpha beta ".repeat(200)),
        format!("{} tail", "x".repeat(100_000)),
    ] {
        let full = tokenizer.encode(&odd).unwrap();
        let cut = tokenizer.encode_prefix(&odd, 32, false).unwrap();
        assert!(cut.len() >= 32 && cut[..31] == full[..31]);
    }
}
