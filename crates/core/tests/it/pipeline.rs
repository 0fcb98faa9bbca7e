//! `Pipeline`: the model, pooling, token weights and calibrator opened and
//! checked together, on the tiny BERT fixture (PyTorch's vectors in
//! crates/encoder/tests/fixtures/tiny-bert/golden.json).
use bertflow_core::fitting::{fit_embeddings, fit_sentences, ExternalFit};
use bertflow_core::matrix_file::NpyWriter;
use bertflow_core::progress::silent;
use bertflow_core::weighting::Weighting;
use bertflow_core::{
    CalibSpec, Calibrator, EmbedderConfig, Pipeline, PipelineConfig, PipelineInfo,
};
use std::path::{Path, PathBuf};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../encoder/tests/fixtures/tiny-bert"
);

fn config(pooling: &str, weighting: &str) -> PipelineConfig {
    PipelineConfig {
        model: EmbedderConfig {
            model: TINY.to_string(),
            runtime: bertflow_core::RuntimeConfig {
                threads: Some(1),
                ..Default::default()
            },
            no_cache: true,
            ..Default::default()
        },
        pooling: Some(pooling.parse().unwrap()),
        weighting: Weighting::new(weighting.parse().unwrap()),
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

/// 48 distinct sentences in the fixture's 28-piece vocabulary.
fn corpus() -> Vec<String> {
    let mut v = Vec::new();
    for s in ["the man", "a woman", "the cat", "a dog"] {
        for verb in ["is playing", "sleeps on", "runs"] {
            for o in ["the guitar", "a mat", "the park", "an onion"] {
                v.push(format!("{s} {verb} {o} ."));
            }
        }
    }
    v
}

/// A calibrator file of `spec` fitted on the corpus with this pooling and weighting.
fn fit_file(dir: &Path, spec: &str, pooling: &str, weighting: &str) -> PathBuf {
    let p = open(&config(pooling, "mean"));
    let fitted = fit_sentences(
        p.embedder(),
        &corpus(),
        &pooling.parse().unwrap(),
        &spec.parse::<CalibSpec>().unwrap(),
        None,
        &Weighting::new(weighting.parse().unwrap()),
    )
    .unwrap();
    let path = dir.join(format!("{spec}-{pooling}-{weighting}.safetensors"));
    bertflow_core::calib::save(&fitted.fitted, &path, &fitted.meta).unwrap();
    path
}

fn with_calibrator(mut cfg: PipelineConfig, path: &Path, allow: bool) -> PipelineConfig {
    cfg.calibrator = Some(path.to_path_buf());
    cfg.allow_mismatch = allow;
    cfg
}

fn golden() -> Vec<(String, Vec<f32>)> {
    let text = std::fs::read_to_string(format!("{TINY}/golden.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let x = c["first-last-avg"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            (c["text"].as_str().unwrap().to_string(), x)
        })
        .collect()
}

#[test]
fn embeds_as_pytorch_and_applies_the_calibrator() {
    let p = open(&config("first-last-avg", "mean"));
    let cases = golden();
    let texts: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let raw = p.embed(&texts).unwrap();
    for (row, (text, want)) in raw.outer_iter().zip(&cases) {
        for (a, b) in row.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{text}: {a} vs {b}");
        }
    }
    // No calibrator: encode is the raw embeddings.
    assert_eq!(p.encode(&texts).unwrap(), raw);

    let dir = tempfile::tempdir().unwrap();
    let file = fit_file(dir.path(), "whiten:k=8", "first-last-avg", "mean");
    let c = open(&with_calibrator(
        config("first-last-avg", "mean"),
        &file,
        false,
    ));
    let (fitted, _) = bertflow_core::calib::load(&file).unwrap();
    let want = fitted.transform(raw.view()).unwrap();
    let got = c.encode(&texts).unwrap();
    assert_eq!(got.dim(), (3, 8));
    assert_eq!(got, want);
    // The uncached batch path gives the same vectors and the token counts.
    let opts = bertflow_core::encoder::EncodeOptions {
        batch_size: 2,
        threads: 1,
    };
    let batch = c.embed_batch(&texts, &opts).unwrap();
    assert_eq!(c.calibrate(batch.vectors).unwrap(), want);
    assert_eq!(batch.truncated, vec![false; 3]);
    let tokens: Vec<usize> = texts
        .iter()
        .map(|t| c.encoder().tokenize(t).unwrap().0.len())
        .collect();
    assert_eq!(batch.tokens, tokens);
}

#[test]
fn info_names_model_pooling_weighting_calibrator_and_dimension() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(&config("last-avg", "mean"));
    let fp = p.encoder().files_fingerprint().to_string();
    assert_eq!(
        p.info(),
        PipelineInfo {
            model_id: p.encoder().model_id().to_string(),
            model: format!("tiny-bert@{fp}"),
            pooling: "last-avg".into(),
            weighting: "mean".into(),
            calibrator: None,
            dimension: 32,
            max_len: 64,
            precision: "fp32".into(),
            prompt: None,
        }
    );
    let file = fit_file(dir.path(), "whiten:k=8", "last-avg", "usif");
    let c = open(&with_calibrator(config("last-avg", "mean"), &file, false));
    let info = c.info();
    assert_eq!(info.dimension, 8);
    assert_eq!(info.weighting, "usif:special=drop,punct=drop");
    let (fitted, _) = bertflow_core::calib::load(&file).unwrap();
    assert_eq!(info.calibrator, Some(fitted.describe()));
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["dimension"], 8);
    assert_eq!(json["pooling"], "last-avg");
}

#[test]
fn a_calibrator_of_another_pooling_needs_allow_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let file = fit_file(dir.path(), "sn", "last-avg", "mean");
    let err = open_err(&with_calibrator(config("cls", "mean"), &file, false));
    assert!(
        err.contains("pooling: the calibrator")
            && err.contains("fitted with pooling last-avg, not cls"),
        "{err}"
    );
    let p = open(&with_calibrator(config("cls", "mean"), &file, true));
    assert_eq!(p.info().pooling, "cls");
    assert_eq!(p.dimension(), 32);
}

#[test]
fn a_calibrator_of_another_dimension_is_refused_even_with_allow_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("x.npy");
    let mut w = NpyWriter::create(&npy, 20, 5).unwrap();
    let x = ndarray::Array2::from_shape_fn((20, 5), |(i, j)| ((i * 7 + j * 3) % 11) as f32);
    w.write_chunk(x.view()).unwrap();
    w.finish().unwrap();
    let out = fit_embeddings(
        &ExternalFit {
            input: npy,
            spec: "sn".parse().unwrap(),
            label: None,
            sample: None,
        },
        &bertflow_core::Silent,
    )
    .unwrap();
    let file = dir.path().join("sn5.safetensors");
    bertflow_core::calib::save(&out.fitted, &file, &out.meta).unwrap();
    for allow in [false, true] {
        let err = open_err(&with_calibrator(config("last-avg", "mean"), &file, allow));
        assert!(err.contains("does not fit these embeddings"), "{err}");
        assert!(
            err.contains("fitted on 5-dimensional embeddings, these have 32"),
            "{err}"
        );
    }
}

#[test]
fn weights_are_counted_on_a_corpus_unless_known() {
    let corpus = corpus();
    let mut p = open(&config("last-avg", "usif"));
    assert!(!p.weighting().ready());
    let err = p.embed(&corpus).unwrap_err().chain();
    assert!(err.contains("needs word-piece frequencies"), "{err}");
    p.count_weights(&corpus, false).unwrap();
    assert!(p.weighting().ready());
    let want = Weighting::new("usif".parse().unwrap())
        .weights(p.encoder(), &corpus)
        .unwrap()
        .unwrap();
    assert_eq!(p.weighting().weights().unwrap().key(), want.key());
    assert_eq!(p.weighting().weights().unwrap().weights(), want.weights());
    // Counted once: another corpus does not change them.
    p.count_weights(&corpus[..3], false).unwrap();
    assert_eq!(p.weighting().weights().unwrap().key(), want.key());
    let direct = p
        .embedder()
        .embed_weighted(&corpus, p.pooling(), Some(&want))
        .unwrap();
    assert_eq!(p.embed(&corpus).unwrap(), direct);
    // ... recount_weights does.
    p.count_weights(&corpus[..3], true).unwrap();
    assert_ne!(p.weighting().weights().unwrap().key(), want.key());
    // The plain mean needs nothing; a weighting needs an averaging pooling.
    assert!(open(&config("last-avg", "mean"))
        .weighting()
        .weights()
        .is_none());
    let err = open_err(&config("cls", "usif"));
    assert!(err.contains("averaging poolings"), "{err}");
}

#[test]
fn a_calibrator_brings_its_weights_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let file = fit_file(dir.path(), "sn", "last-avg", "usif");
    let (_, meta) = bertflow_core::calib::load(&file).unwrap();
    let own = meta.weighting.clone().unwrap();
    // The command line's rule: `mean` (the default) takes the file's weights.
    for asked in ["mean", "usif"] {
        let p = open(&with_calibrator(config("last-avg", asked), &file, false));
        assert_eq!(p.weighting().weights().unwrap().key(), own.key, "{asked}");
        assert_eq!(p.weighting().weights().unwrap().weights(), &own.weights[..]);
        assert!(p.weighting().ready());
    }
    let err = open_err(&with_calibrator(config("last-avg", "sif"), &file, false));
    assert!(
        err.contains("was fitted with weighting usif:special=drop,punct=drop, not sif"),
        "{err}"
    );
    // An encoder given its weighting (Python's rule): the file's must be the same.
    let mut mean = open(&config("last-avg", "mean"));
    let err = mean.use_weights_of(Some(&own)).unwrap_err().chain();
    assert!(
        err.contains("fitted with weighting usif:special=drop,punct=drop, this encoder has mean"),
        "{err}"
    );
    mean.use_weights_of(None).unwrap();
    assert!(mean.weighting().weights().is_none());
    let mut usif = open(&config("last-avg", "usif"));
    usif.use_weights_of(Some(&own)).unwrap();
    assert_eq!(usif.weighting().weights().unwrap().key(), own.key);
    let record = usif.weighting().record().unwrap().unwrap();
    assert_eq!(record.key, own.key);
    assert_eq!(record.weights, own.weights);
    // The STS grid gets the file's exact weights.
    let p = open(&with_calibrator(config("last-avg", "mean"), &file, false));
    assert_eq!(p.weighting().for_grid().fixed_key(), Some(own.key.as_str()));
}

#[test]
fn the_config_reads_and_writes_json() {
    let cfg: PipelineConfig = serde_json::from_value(serde_json::json!({
        "model": "some/model",
        "pooling": "first-last-avg",
        "precision": "int8",
        "weighting": "sif:a=0.0001",
        "calibrator": "c.safetensors",
        "batch_size": 8
    }))
    .unwrap();
    assert_eq!(cfg.model.model, "some/model");
    assert_eq!(cfg.pooling.as_ref().unwrap().to_string(), "first-last-avg");
    assert_eq!(cfg.model.runtime.precision.to_string(), "int8");
    assert_eq!(cfg.model.runtime.batch_size, 8);
    assert_eq!(cfg.weighting.spec, "sif:a=0.0001".parse().unwrap());
    assert_eq!(cfg.calibrator, Some(PathBuf::from("c.safetensors")));
    assert!(!cfg.allow_mismatch);
    let back = serde_json::to_value(&cfg).unwrap();
    assert_eq!(back["pooling"], "first-last-avg");
    assert_eq!(back["precision"], "int8");
    assert_eq!(back["model"], "some/model");
    let again: PipelineConfig = serde_json::from_value(back).unwrap();
    assert_eq!(again.model, cfg.model);
    let bad = serde_json::from_value::<PipelineConfig>(serde_json::json!({"pooling": "nope"}));
    assert!(bad.is_err());
    // Defaults: the CLI's. The pooling is left to the pipeline (the
    // calibrator's, an exported directory's st, else last-avg); the model is
    // found from the working directory or above the test binary.
    let d = PipelineConfig::default();
    assert!(d.pooling.is_none());
    assert_eq!(
        bertflow_core::pipeline::DEFAULT_POOLING.to_string(),
        "last-avg"
    );
    if std::env::var_os("BERTFLOW_MODEL").is_none() {
        assert!(
            d.model.model.ends_with(bertflow_core::DEFAULT_MODEL),
            "{}",
            d.model.model
        );
    }
    assert!(d.weighting.is_plain_mean());
}
