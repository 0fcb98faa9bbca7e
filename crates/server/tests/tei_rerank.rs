//! `POST /rerank` and `POST /predict` over the backend's classifier seam
//! (a fake cross-encoder whose logits the tests recompute), in TEI's shapes:
//! scores exact, order best first, and every error in TEI's shape.

mod common;

use bertflow_server::{Limits, ServerConfig};
use common::tei::{assert_tei_error, fake_logit, FakeReranker, TeiFake};
use common::{assert_error, TestServer};
use serde_json::{json, Value};

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn score(v: &Value) -> f32 {
    v["score"].as_f64().unwrap() as f32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_scores_each_pair_and_sorts_best_first() {
    let fake = FakeReranker::new(512, &["LABEL_0"]);
    let s = TestServer::start(fake.clone(), ServerConfig::default()).await;
    let query = "what is deep learning";
    // Fewer words score higher (the fake's logit falls with the text's words).
    let texts = ["one two three", "one", "one two"];
    let (status, body) = s
        .post("/rerank", &json!({"query": query, "texts": texts}))
        .await;
    assert_eq!(status, 200, "{body}");
    let ranks = body.as_array().unwrap();
    assert_eq!(ranks.len(), 3);
    let order: Vec<u64> = ranks.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(order, [1, 2, 0]);
    for rank in ranks {
        let index = rank["index"].as_u64().unwrap() as usize;
        assert_eq!(
            score(rank),
            sigmoid(fake_logit(query, Some(texts[index]), 0))
        );
        // TEI's Rank: index and score; text only with return_text.
        let mut keys: Vec<&str> = rank
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["index", "score"]);
    }
    assert_eq!(*fake.truncate_seen.lock().unwrap(), [false]);

    let (status, body) = s
        .post(
            "/rerank",
            &json!({"query": query, "texts": texts, "raw_scores": true, "return_text": true, "truncate": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for rank in body.as_array().unwrap() {
        let index = rank["index"].as_u64().unwrap() as usize;
        assert_eq!(score(rank), fake_logit(query, Some(texts[index]), 0));
        assert_eq!(rank["text"], texts[index]);
    }
    assert_eq!(*fake.truncate_seen.lock().unwrap(), [false, false]);

    // POST / with query and texts is a rerank.
    let (status, root) = s.post("/", &json!({"query": query, "texts": texts})).await;
    assert_eq!(status, 200, "{root}");
    let (_, direct) = s
        .post("/rerank", &json!({"query": query, "texts": texts}))
        .await;
    assert_eq!(root, direct);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_errors_come_in_teis_shape() {
    let config = ServerConfig {
        limits: Limits {
            max_inputs_per_request: 2,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    // max_len 6: the pair "a b" + "c d e" is 3 + 4 + 1 = 8 tokens.
    let fake = FakeReranker::new(6, &["LABEL_0"]);
    let s = TestServer::start(fake.clone(), config).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"query": "q", "texts": []}), 400, "Empty"),
        (json!({"query": "", "texts": ["a"]}), 400, "Empty"),
        (
            json!({"query": "q", "texts": ["a", "b", "c"]}),
            413,
            "Validation",
        ),
        (
            json!({"query": "a b", "texts": ["c d e"]}),
            413,
            "Validation",
        ),
        (
            json!({"query": "a b", "texts": ["c d e"], "truncate": true, "truncation_direction": "Left"}),
            422,
            "Validation",
        ),
        (json!({"texts": ["a"]}), 422, "Validation"),
        (json!({"query": "q", "texts": "a"}), 422, "Validation"),
        (json!({"query": "q", "texts": ["FAIL"]}), 424, "Backend"),
    ];
    for (request, want_status, want_type) in cases {
        let (status, body) = s.post("/rerank", &request).await;
        assert_tei_error(status, &body, want_status, want_type);
    }
    // The long pair runs when cut.
    let (status, body) = s
        .post(
            "/rerank",
            &json!({"query": "a b", "texts": ["c d e"], "truncate": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fake.truncate_seen.lock().unwrap().last(), Some(&true));
    // A reranker does not embed: TEI's 424 on its routes, 501 on OpenAI's.
    let (status, body) = s.post("/embed", &json!({"inputs": "a"})).await;
    assert_tei_error(status, &body, 424, "Backend");
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"inputs": {"source_sentence": "a", "sentences": ["b"]}}),
        )
        .await;
    assert_tei_error(status, &body, 424, "Backend");
    let (status, body) = s.post("/v1/embeddings", &json!({"input": "a"})).await;
    assert_error(status, &body, 501, "not_supported");
    s.stop().await;

    // An embedding model, and a classifier of several labels, do not rerank.
    let s = TestServer::start(TeiFake::new(512), ServerConfig::default()).await;
    let (status, body) = s
        .post("/rerank", &json!({"query": "q", "texts": ["a"]}))
        .await;
    assert_tei_error(status, &body, 424, "Backend");
    assert!(
        body["error"].as_str().unwrap().contains("not a re-ranker"),
        "{body}"
    );
    let (status, body) = s.post("/predict", &json!({"inputs": "a"})).await;
    assert_tei_error(status, &body, 424, "Backend");
    s.stop().await;
    let s = TestServer::start(FakeReranker::new(512, &["a", "b"]), ServerConfig::default()).await;
    let (status, body) = s
        .post("/rerank", &json!({"query": "q", "texts": ["a"]}))
        .await;
    assert_tei_error(status, &body, 424, "Backend");
    s.stop().await;
}

/// Softmax in f64, as the server computes it.
fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = row.iter().map(|&x| f64::from(x - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.into_iter().map(|e| (e / sum) as f32).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predict_answers_labels_with_probabilities_best_first() {
    let labels = ["negative", "neutral", "positive"];
    let s = TestServer::start(FakeReranker::new(512, &labels), ServerConfig::default()).await;
    let check = |predictions: &Value, a: &str, b: Option<&str>, raw: bool| {
        let logits: Vec<f32> = (0..3).map(|j| fake_logit(a, b, j)).collect();
        let want = if raw { logits } else { softmax(&logits) };
        let list = predictions.as_array().unwrap();
        assert_eq!(list.len(), 3);
        // The fake's logits rise with the label index: best first is the last label.
        let names: Vec<&str> = list.iter().map(|p| p["label"].as_str().unwrap()).collect();
        assert_eq!(names, ["positive", "neutral", "negative"]);
        for p in list {
            let j = labels.iter().position(|l| *l == p["label"]).unwrap();
            assert_eq!(score(p), want[j], "{predictions}");
            assert_eq!(p.as_object().unwrap().len(), 2);
        }
    };
    let (status, body) = s.post("/predict", &json!({"inputs": "I like it"})).await;
    assert_eq!(status, 200, "{body}");
    check(&body, "I like it", None, false);
    let (status, body) = s
        .post(
            "/predict",
            &json!({"inputs": ["a b", "c"], "raw_scores": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    check(&body, "a b", Some("c"), true);
    let (status, body) = s
        .post("/predict", &json!({"inputs": [["a b c"], ["a", "b"]]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let batch = body.as_array().unwrap();
    assert_eq!(batch.len(), 2);
    check(&batch[0], "a b c", None, false);
    check(&batch[1], "a", Some("b"), false);
    for inputs in [
        json!([]),
        json!(["a", "b", "c"]),
        json!([["a", "b", "c"]]),
        json!([["a"], "b"]),
        json!(5),
        json!([[]]),
    ] {
        let (status, body) = s.post("/predict", &json!({ "inputs": inputs })).await;
        let want = if inputs == json!([]) {
            (400, "Empty")
        } else {
            (422, "Validation")
        };
        assert_tei_error(status, &body, want.0, want.1);
    }
    s.stop().await;

    // One label: the sigmoid of its logit.
    let s = TestServer::start(FakeReranker::new(512, &["score"]), ServerConfig::default()).await;
    let (status, body) = s.post("/predict", &json!({"inputs": ["q", "d e"]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(score(&body[0]), sigmoid(fake_logit("q", Some("d e"), 0)));
    assert_eq!(body[0]["label"], "score");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_describes_a_reranker_as_tei_does() {
    let s = TestServer::start(
        FakeReranker::new(512, &["LABEL_0"]),
        ServerConfig::default(),
    )
    .await;
    let (_, info) = s.get("/info").await;
    assert_eq!(
        info["model_type"],
        json!({"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}})
    );
    s.stop().await;
    let s = TestServer::start(FakeReranker::new(512, &["a", "b"]), ServerConfig::default()).await;
    let (_, info) = s.get("/info").await;
    assert_eq!(
        info["model_type"],
        json!({"classifier": {"id2label": {"0": "a", "1": "b"}, "label2id": {"a": 0, "b": 1}}})
    );
    s.stop().await;
}
