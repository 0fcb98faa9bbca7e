//! Reading a sentence-transformers directory's prompts
//! (`config_sentence_transformers.json`) and its Pooling's `include_prompt`;
//! the vectors made with them are checked against sentence-transformers in
//! bertflow-core's tests (`crates/core/tests/it/prompts.rs`).
use bertflow_encoder::st::{StPrompts, PROMPTS_FILE};
use bertflow_encoder::{Encoder, EncoderError, PoolSource, Pooling};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tiny-st")
        .join(name)
}

/// A copy of the `prompts` fixture with `file`'s content replaced (None: removed).
fn edited(file: &str, content: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    copy_dir(&fixture("prompts"), &dir);
    match content {
        Some(c) => std::fs::write(dir.join(file), c).unwrap(),
        None => std::fs::remove_file(dir.join(file)).unwrap(),
    }
    (tmp, dir)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[test]
fn prompts_and_default_name_are_read_in_file_order() {
    let enc = Encoder::load(fixture("prompts").to_str().unwrap(), None).unwrap();
    let p = StPrompts::of_model(enc.files()).unwrap();
    let names: Vec<&str> = p.prompts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["query", "document", "search", "empty"]);
    assert_eq!(p.get("query"), Some("someone is playing "));
    assert_eq!(p.get("empty"), Some(""));
    assert_eq!(p.get("passage"), None);
    assert_eq!(p.default_prompt_name.as_deref(), Some("query"));
    assert_eq!(p.names(), "\"query\", \"document\", \"search\", \"empty\"");
    // Pooling st runs a directory with a default prompt (it used to refuse it).
    let src = enc.source(&Pooling::St).unwrap();
    match src {
        PoolSource::St(head) => assert!(head.include_prompt),
        other => panic!("{}", other.key()),
    }
}

#[test]
fn a_model_without_the_file_has_no_prompts() {
    let (_tmp, dir) = edited(PROMPTS_FILE, None);
    assert_eq!(StPrompts::read(&dir).unwrap(), StPrompts::default());
    // Nor does a model that is not a sentence-transformers directory.
    let bert = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-bert");
    let enc = Encoder::load(bert.to_str().unwrap(), None).unwrap();
    let p = StPrompts::of_model(enc.files()).unwrap();
    assert_eq!(p, StPrompts::default());
    assert_eq!(p.names(), "none");
    // Null and missing fields are no prompts.
    let (_tmp, dir) = edited(
        PROMPTS_FILE,
        Some(r#"{"prompts": null, "default_prompt_name": null}"#),
    );
    assert_eq!(StPrompts::read(&dir).unwrap(), StPrompts::default());
}

#[test]
fn malformed_prompts_are_errors_naming_the_file() {
    for (content, says) in [
        ("{", "config_sentence_transformers.json"),
        ("[]", "expected a JSON object"),
        (r#"{"prompts": ["query: "]}"#, "`prompts` must be an object"),
        (
            r#"{"prompts": {"query": 3}}"#,
            "prompt \"query\" must be a string",
        ),
        (
            r#"{"prompts": {}, "default_prompt_name": 1}"#,
            "`default_prompt_name` must be",
        ),
        (
            r#"{"prompts": {"query": "q: "}, "default_prompt_name": "passage"}"#,
            "default_prompt_name \"passage\" is not one of its prompts (\"query\")",
        ),
    ] {
        let (_tmp, dir) = edited(PROMPTS_FILE, Some(content));
        let e = StPrompts::read(&dir).unwrap_err();
        assert!(matches!(e, EncoderError::BadFile { .. }), "{content}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(PROMPTS_FILE), "{content}: {msg}");
        assert!(msg.contains(says), "{content}: {msg}");
        // The model still loads; pooling st reads the file and refuses it too.
        let enc = Encoder::load(dir.to_str().unwrap(), None).unwrap();
        assert!(enc.source(&Pooling::St).is_err(), "{content}");
    }
}

#[test]
fn include_prompt_false_is_read_from_the_pooling_config() {
    let pooling = fixture("prompts").join("1_Pooling/config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pooling).unwrap()).unwrap();
    cfg["include_prompt"] = serde_json::Value::Bool(false);
    let (_tmp, dir) = edited("1_Pooling/config.json", Some(&cfg.to_string()));
    let enc = Encoder::load(dir.to_str().unwrap(), None).unwrap();
    assert!(!enc.st_spec().unwrap().include_prompt);
    match enc.source(&Pooling::St).unwrap() {
        PoolSource::St(head) => assert!(!head.include_prompt),
        other => panic!("{}", other.key()),
    }
    cfg["include_prompt"] = serde_json::Value::from("no");
    let (_tmp, dir) = edited("1_Pooling/config.json", Some(&cfg.to_string()));
    let enc = Encoder::load(dir.to_str().unwrap(), None).unwrap();
    let e = enc.source(&Pooling::St).unwrap_err().to_string();
    assert!(e.contains("include_prompt"), "{e}");
}
