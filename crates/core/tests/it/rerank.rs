//! `Reranker`: the tiny cross-encoders of crates/encoder/tests/fixtures
//! (transformers' logits in their golden.json) through core: TEI's `/rerank`
//! scores (sigmoid, raw), predict's logits, and the errors that name the
//! `model` setting: an embedding model asked to rerank, a reranker asked to
//! embed, a classifier of two labels asked for one score.
use bertflow_core::progress::silent;
use bertflow_core::rerank::{is_reranker, ranked, Truncation};
use bertflow_core::{CoreError, EmbedderConfig, PipelineConfig, RerankerConfig};
use serde_json::Value;

fn fixture(name: &str) -> String {
    format!(
        "{}/../encoder/tests/fixtures/tiny-{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/golden.json", fixture(name))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn config(name: &str) -> RerankerConfig {
    let mut cfg = RerankerConfig::new(fixture(name));
    cfg.runtime.threads = Some(2);
    cfg
}

fn logit(g: &Value, case: usize, label: usize) -> f32 {
    g["cases"][case]["logits"][label].as_f64().unwrap() as f32
}

#[test]
fn rerank_scores_are_the_sigmoid_of_transformers_logits() {
    let g = golden("xlm-roberta-cls");
    let r = config("xlm-roberta-cls").open(silent()).unwrap();
    assert_eq!(r.labels(), ["LABEL_0"]);
    assert_eq!(r.max_len(), 38);
    assert_eq!(r.class(), "XLMRobertaForSequenceClassification");
    // Case 6 is the pair (query, long text), cut by truncation.
    let query = g["cases"][6]["text"].as_str().unwrap();
    let long = g["cases"][6]["pair"].as_str().unwrap().to_string();
    let texts = vec![long.clone(), "Hi".to_string(), long];
    let raw = r.rerank(query, &texts, true, true).unwrap();
    let scores = r.rerank(query, &texts, false, true).unwrap();
    assert!((raw[0] - logit(&g, 6, 0)).abs() < 1e-5, "{raw:?}");
    assert_eq!(raw[0], raw[2]);
    for (s, x) in scores.iter().zip(&raw) {
        assert!((s - 1.0 / (1.0 + (-x).exp())).abs() < 1e-6);
        assert!((0.0..=1.0).contains(s));
    }
    // Cut on the left, as transformers with truncation_side="left".
    let left = r
        .rerank_with(query, &texts[..1], true, Truncation::Left)
        .unwrap();
    assert!((left[0] - g["cases"][6]["left"]["logits"][0].as_f64().unwrap() as f32).abs() < 1e-5);
    // Without truncation the long text is an error, the short one is not.
    let e = r.rerank(query, &texts, false, false).unwrap_err();
    assert!(e.chain().contains("too long"), "{}", e.chain());
    assert!(r.rerank(query, &texts[1..2], false, false).is_ok());
    // The ranks order the texts by score.
    let order = ranked(&scores);
    assert!(order[0].score >= order[1].score && order[1].score >= order[2].score);
}

#[test]
fn predict_gives_every_label_and_rerank_needs_one() {
    let g = golden("bert-cls");
    let r = config("bert-cls").open(silent()).unwrap();
    assert_eq!(r.labels(), ["contradiction", "entailment"]);
    let inputs: Vec<(String, Option<String>)> = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["text"].as_str().unwrap().to_string(),
                c["pair"].as_str().map(str::to_string),
            )
        })
        .collect();
    let logits = r.predict(&inputs, true).unwrap();
    for (i, row) in logits.iter().enumerate() {
        assert_eq!(row.len(), 2);
        for (l, x) in row.iter().enumerate() {
            assert!((x - logit(&g, i, l)).abs() < 1e-5, "case {i}: {row:?}");
        }
    }
    // /predict's answer: labels by softmax score, highest first.
    let classes = r.classify(&inputs[2..3], false, Truncation::Right).unwrap();
    let (a, b) = (logit(&g, 2, 0), logit(&g, 2, 1));
    let p1 = 1.0 / (1.0 + (a - b).exp());
    let best = if p1 >= 0.5 {
        "entailment"
    } else {
        "contradiction"
    };
    assert_eq!(classes[0][0].label, best);
    assert!((classes[0][0].score - p1.max(1.0 - p1)).abs() < 1e-5);
    assert!((classes[0][0].score + classes[0][1].score - 1.0).abs() < 1e-6);
    let e = r.rerank("a", &["b".to_string()], false, true).unwrap_err();
    assert!(
        matches!(&e, CoreError::Setting { field: "model", message } if message.contains("2 labels")),
        "{e}"
    );
}

#[test]
fn embedding_models_and_rerankers_are_told_apart() {
    assert!(is_reranker(&fixture("mpnet-cls")).unwrap());
    assert!(!is_reranker(&fixture("mpnet")).unwrap());
    assert!(is_reranker("/no/such/model").is_err());
    // An embedding model asked to rerank.
    let e = config("mpnet").open(silent()).err().unwrap();
    assert!(
        matches!(&e, CoreError::NotReranker { field: "model", .. }),
        "{e}"
    );
    let (field, msg) = e.setting_parts().unwrap();
    assert_eq!(field, "model");
    assert!(
        msg.contains("is an embedding model; it has no classification head"),
        "{msg}"
    );
    // A reranker asked to embed.
    let cfg = PipelineConfig {
        model: EmbedderConfig {
            model: fixture("mpnet-cls"),
            no_cache: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = cfg.open(silent()).err().unwrap();
    assert!(
        matches!(&e, CoreError::IsReranker { field: "model", .. }),
        "{e}"
    );
    assert!(e
        .to_string()
        .contains("is a reranker (cross-encoder): use bertflow rerank / bertflow.Reranker"));
    // No model, and a bad batch size, name their settings.
    let e = RerankerConfig::default().open(silent()).err().unwrap();
    assert!(
        matches!(e, CoreError::Setting { field: "model", .. }),
        "{e}"
    );
    let mut cfg = config("mpnet-cls");
    cfg.runtime.batch_size = 0;
    let e = cfg.open(silent()).err().unwrap();
    assert!(
        matches!(
            e,
            CoreError::Setting {
                field: "batch_size",
                ..
            }
        ),
        "{e}"
    );
}
