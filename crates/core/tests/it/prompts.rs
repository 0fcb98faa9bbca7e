//! Prompts (`bertflow_core::prompt`): the vectors of a tiny sentence-transformers
//! directory with prompts equal sentence-transformers' own `encode(...,
//! prompt_name=...)`, `encode(..., prompt=...)`, `encode_query` and
//! `encode_document` (crates/encoder/tests/fixtures/tiny-st/prompts/golden.json,
//! scripts/reference/make_tiny_st_prompts.py) within 1e-5; the cache keeps
//! prompts apart; calibrators record their prompt and refuse another.
use bertflow_core::fitting::fit_sentences;
use bertflow_core::progress::silent;
use bertflow_core::prompt::{for_role, Role};
use bertflow_core::weighting::Weighting;
use bertflow_core::{CalibSpec, EmbedderConfig, Pipeline, PipelineConfig, PromptConfig};
use std::path::{Path, PathBuf};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../encoder/tests/fixtures/tiny-st/prompts"
);

fn config(pooling: &str, prompt: PromptConfig) -> PipelineConfig {
    PipelineConfig {
        model: EmbedderConfig {
            model: DIR.to_string(),
            runtime: bertflow_core::RuntimeConfig {
                threads: Some(2),
                batch_size: 4,
                ..Default::default()
            },
            no_cache: true,
            prompt,
        },
        pooling: Some(pooling.parse().unwrap()),
        ..Default::default()
    }
}

fn open(cfg: &PipelineConfig) -> Pipeline {
    cfg.open(silent())
        .unwrap_or_else(|e| panic!("{}", e.chain()))
}

fn open_err(cfg: &PipelineConfig) -> String {
    match cfg.open(silent()) {
        Ok(_) => panic!("opened"),
        Err(e) => e.chain(),
    }
}

fn ask(name: Option<&str>, text: Option<&str>) -> PromptConfig {
    PromptConfig {
        prompt_name: name.map(str::to_string),
        prompt: text.map(str::to_string),
    }
}

fn golden() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/golden.json")).unwrap()).unwrap()
}

fn texts() -> Vec<String> {
    golden()["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

fn worst(got: &ndarray::Array2<f32>, want: &serde_json::Value) -> f64 {
    let want = want.as_array().unwrap();
    assert_eq!(got.nrows(), want.len());
    let mut worst = 0f64;
    for (row, w) in got.rows().into_iter().zip(want) {
        let w = w.as_array().unwrap();
        assert_eq!(row.len(), w.len());
        for (a, b) in row.iter().zip(w) {
            worst = worst.max((*a as f64 - b.as_f64().unwrap()).abs());
        }
    }
    worst
}

#[test]
fn every_way_of_choosing_a_prompt_equals_sentence_transformers() {
    let g = golden();
    let texts = texts();
    let p = open(&config("st", PromptConfig::default()));
    assert_eq!(
        p.prompt().map(|p| p.text.as_str()),
        Some("someone is playing ")
    );
    assert_eq!(
        p.info().prompt.as_deref(),
        Some("query (\"someone is playing \")")
    );
    let cases = g["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 9);
    for (name, case) in cases {
        let kwargs = &case["kwargs"];
        let asked = ask(kwargs["prompt_name"].as_str(), kwargs["prompt"].as_str());
        let asked = match case["method"].as_str().unwrap() {
            "encode" => asked,
            "encode_query" => for_role(&p.embedder().prompts, &asked, Role::Query),
            "encode_document" => for_role(&p.embedder().prompts, &asked, Role::Document),
            other => panic!("{other}"),
        };
        let got = p.encode_prompted(&texts, &asked).unwrap();
        let w = worst(&got, &case["vectors"]);
        assert!(
            w < 1e-5,
            "{name}: max |bertflow - sentence-transformers| = {w}"
        );
        // The same prompt as the pipeline's own gives the same vectors.
        let own = open(&config("st", asked.clone())).encode(&texts).unwrap();
        let w = worst(&own, &case["vectors"]);
        assert!(w < 1e-5, "{name} as the pipeline's prompt: {w}");
    }
}

#[test]
fn the_prompt_is_prepended_before_tokenizing_and_cut_with_the_text() {
    let p = open(&config("st", PromptConfig::default()));
    let one = |name| p.prompt_texts(vec!["cat".into()], name).unwrap();
    assert_eq!(one(None), ["someone is playing cat"]);
    assert_eq!(one(Some("search")), ["query: cat"]);
    assert_eq!(one(Some("empty")), ["cat"]);
    let e = p
        .prompt_texts(vec!["cat".into()], Some("passage"))
        .unwrap_err()
        .chain();
    assert!(
        e.contains("\"passage\"") && e.contains("\"query\", \"document\", \"search\", \"empty\""),
        "{e}"
    );
    // The long text is cut at 32 tokens with its prompt, at its end.
    let long = texts_with_prompt(&p, texts()[5].clone());
    let (ids, cut) = p.tokenize(&long).unwrap();
    assert_eq!((ids.len(), cut), (32, true));
}

fn texts_with_prompt(p: &Pipeline, t: String) -> String {
    p.prompt_texts(vec![t], None).unwrap().remove(0)
}

#[test]
fn every_pooling_gets_the_prompt_and_the_cache_keeps_prompts_apart() {
    let cache = tempfile::tempdir().unwrap();
    let cfg = |prompt| {
        let mut c = config("last-avg", prompt);
        c.model.no_cache = false;
        c.model.runtime.cache_dir = Some(cache.path().to_path_buf());
        c
    };
    let texts = texts();
    let plain = open(&cfg(ask(None, Some("")))).encode(&texts).unwrap();
    let query = open(&cfg(PromptConfig::default())).encode(&texts).unwrap();
    let again = open(&cfg(ask(Some("query"), None))).encode(&texts).unwrap();
    assert_eq!(query, again);
    assert!((&plain - &query).iter().any(|d| d.abs() > 1e-3));
    // Equal to the plain pooling of the prompted texts.
    let prompted: Vec<String> = texts
        .iter()
        .map(|t| format!("someone is playing {t}"))
        .collect();
    let by_hand = open(&cfg(ask(None, Some("")))).encode(&prompted).unwrap();
    assert_eq!(query, by_hand);
}

#[test]
fn an_unknown_name_or_both_a_name_and_a_text_are_errors() {
    let e = open_err(&config("st", ask(Some("passage"), None)));
    assert!(
        e.contains("prompt_name: \"passage\" is not a prompt of model"),
        "{e}"
    );
    assert!(e.contains("\"query\", \"document\""), "{e}");
    let e = open_err(&config("st", ask(Some("query"), Some("x"))));
    assert!(e.contains("not both"), "{e}");
    // A model without prompts: any name is unknown; a text is fine.
    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../encoder/tests/fixtures/tiny-bert"
    );
    let mut c = config("last-avg", ask(Some("query"), None));
    c.model.model = tiny.to_string();
    let e = open_err(&c);
    assert!(e.contains("its prompts: none"), "{e}");
    c.model.prompt = ask(None, Some("query: "));
    assert_eq!(open(&c).prompt().unwrap().text, "query: ");
}

#[test]
fn include_prompt_false_refuses_a_prompt_with_pooling_st() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    copy_dir(Path::new(DIR), &dir);
    let pooling = dir.join("1_Pooling/config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pooling).unwrap()).unwrap();
    cfg["include_prompt"] = false.into();
    std::fs::write(&pooling, cfg.to_string()).unwrap();
    let mut c = config("st", PromptConfig::default());
    c.model.model = dir.to_str().unwrap().to_string();
    let e = open_err(&c);
    assert!(e.contains("include_prompt false"), "{e}");
    // Without a prompt it runs; with another pooling the prompt is pooled.
    c.model.prompt = ask(None, Some(""));
    let p = open(&c);
    let e = p
        .encode_prompted(&texts(), &ask(Some("query"), None))
        .unwrap_err()
        .chain();
    assert!(e.contains("include_prompt false"), "{e}");
    c.pooling = Some("last-avg".parse().unwrap());
    c.model.prompt = PromptConfig::default();
    open(&c);
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

/// A whitening fitted on the golden texts with pooling last-avg and `prompt`.
fn fit_file(dir: &Path, prompt: PromptConfig, name: &str) -> PathBuf {
    let p = open(&config("last-avg", prompt));
    let mut corpus = texts();
    for t in texts() {
        for w in ["the dog", "a cat", "a man"] {
            corpus.push(format!("{w} and {t}"));
        }
    }
    let out = fit_sentences(
        p.embedder(),
        &corpus,
        &"last-avg".parse().unwrap(),
        &"whiten".parse::<CalibSpec>().unwrap(),
        None,
        &Weighting::default(),
    )
    .unwrap();
    let path = dir.join(name);
    bertflow_core::calib::save(&out.fitted, &path, &out.meta).unwrap();
    path
}

#[test]
fn a_calibrator_records_its_prompt_and_refuses_another_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let query = fit_file(tmp.path(), PromptConfig::default(), "query.safetensors");
    let plain = fit_file(tmp.path(), ask(None, Some("")), "plain.safetensors");
    let (_, meta) = bertflow_core::calib::load(&query).unwrap();
    assert_eq!(meta.prompt.as_deref(), Some("someone is playing "));
    let (_, meta) = bertflow_core::calib::load(&plain).unwrap();
    assert_eq!(meta.prompt, None);
    let with = |prompt, file: &Path, allow| {
        let mut c = config("last-avg", prompt);
        c.calibrator = Some(file.to_path_buf());
        c.allow_mismatch = allow;
        c
    };
    // Its own prompt: fine (the default one, or named).
    open(&with(PromptConfig::default(), &query, false));
    open(&with(ask(Some("query"), None), &query, false));
    open(&with(ask(None, Some("")), &plain, false));
    // Another prompt, or none, is refused like another pooling.
    let e = open_err(&with(ask(Some("document"), None), &query, false));
    assert!(
        e.contains("fitted on sentences with prompt \"someone is playing \", these have prompt \"the big red \"")
            && e.contains("allow the mismatch"),
        "{e}"
    );
    let e = open_err(&with(PromptConfig::default(), &plain, false));
    assert!(e.contains("with no prompt, these have prompt"), "{e}");
    // A file written before prompts existed reads as "no prompt".
    let bytes = std::fs::read(&plain).unwrap();
    assert!(!String::from_utf8_lossy(&bytes).contains("\"prompt\""));
    // allow_mismatch lets it through.
    let p = open(&with(ask(Some("document"), None), &query, true));
    p.encode(&texts()).unwrap();
    // Per-call prompts are checked the same way.
    let p = open(&with(PromptConfig::default(), &query, false));
    let e = p
        .encode_prompted(&texts(), &ask(Some("search"), None))
        .unwrap_err()
        .chain();
    assert!(e.contains("these have prompt \"query: \""), "{e}");
    let e = p
        .prompt_texts(texts(), Some("document"))
        .unwrap_err()
        .chain();
    assert!(e.contains("these have prompt \"the big red \""), "{e}");
    assert_eq!(p.prompt_texts(texts(), Some("query")).unwrap().len(), 6);
}
