//! Statuses as text-embeddings-inference answers them, on every route
//! alike: 422 for a bad field (a token id outside the vocabulary), 413 for an
//! input longer than the model without `truncate` (texts, pairs and token
//! ids), 424 only for a backend that cannot do the task; and `GET /info`
//! with every field of TEI's `Info`.
mod common;

use bertflow_server::ServerConfig;
use common::tei::{assert_tei_error, FakeReranker, TeiFake, TEI_VOCAB};
use common::{assert_error, TestServer};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_id_outside_the_vocabulary_is_a_bad_field_everywhere() {
    let s = TestServer::start(TeiFake::new(16), ServerConfig::default()).await;
    let bad = TEI_VOCAB as u64;
    let (status, body) = s
        .post("/v1/embeddings", &json!({"input": [[101, bad, 102]]}))
        .await;
    assert_error(status, &body, 422, "invalid_field");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("vocabulary"),
        "{body}"
    );
    for path in ["/embed", "/", "/embed_all"] {
        let (status, body) = s.post(path, &json!({"inputs": [[101, bad, 102]]})).await;
        assert_tei_error(status, &body, 422, "Validation");
    }
    // The last id of the vocabulary is fine.
    let (status, body) = s
        .post("/embed", &json!({"inputs": [[101, bad - 1, 102]]}))
        .await;
    assert_eq!(status, 200, "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_too_long_without_truncate_is_413_on_every_route() {
    // max_len 8: ten words are 12 tokens.
    let long = "w ".repeat(10);
    let s = TestServer::start(TeiFake::new(8), ServerConfig::default()).await;
    let ids: Vec<u32> = vec![1001; 9];
    let cases = [
        ("/embed", json!({ "inputs": long })),
        ("/embed", json!({ "inputs": [ids] })),
        ("/", json!({ "inputs": long })),
        ("/embed_all", json!({ "inputs": long })),
        (
            "/similarity",
            json!({"inputs": {"source_sentence": long, "sentences": ["a"]}}),
        ),
    ];
    for (path, body) in &cases {
        let (status, answer) = s.post(path, body).await;
        assert_tei_error(status, &answer, 413, "Validation");
        assert!(
            answer["error"].as_str().unwrap().contains("truncate"),
            "{path}: {answer}"
        );
    }
    // With truncate, each is cut and answered.
    for (path, body) in &cases {
        let mut body = body.clone();
        if *path == "/similarity" {
            body["parameters"] = json!({"truncate": true});
        } else {
            body["truncate"] = json!(true);
        }
        let (status, answer) = s.post(path, &body).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    // bertflow's own route always cuts, token ids included.
    let (status, body) = s.post("/v1/embeddings", &json!({ "input": [ids] })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["truncated"], json!([0]));
    s.stop().await;

    // A classifier: a single text and a pair alike.
    let s = TestServer::start(FakeReranker::new(8, &["LABEL_0"]), ServerConfig::default()).await;
    let cases = [
        ("/predict", json!({ "inputs": long })),
        ("/predict", json!({ "inputs": [long, "a"] })),
        ("/rerank", json!({"query": long, "texts": ["a"]})),
        ("/", json!({"query": "q", "texts": [long]})),
    ];
    for (path, body) in &cases {
        let (status, answer) = s.post(path, body).await;
        assert_tei_error(status, &answer, 413, "Validation");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_carries_every_field_of_teis_schema() {
    let required = [
        "model_id",
        "served_model_name",
        "model_dtype",
        "model_type",
        "max_concurrent_requests",
        "max_input_length",
        "max_batch_tokens",
        "max_client_batch_size",
        "auto_truncate",
        "tokenization_workers",
        "version",
    ];
    let s = TestServer::start(TeiFake::new(16), ServerConfig::default()).await;
    let (status, info) = s.get("/info").await;
    assert_eq!(status, 200);
    for field in required {
        assert!(
            info.get(field).is_some_and(|v| !v.is_null()),
            "{field}: {info}"
        );
    }
    assert_eq!(info["served_model_name"], "fake-bert");
    assert_eq!(info["served_model_name"], info["model_id"]);
    assert!(info["tokenization_workers"].as_u64().unwrap() >= 1);
    s.stop().await;

    let config = ServerConfig {
        served_model_name: Some("my-embedder".into()),
        ..ServerConfig::default()
    };
    let s = TestServer::start(TeiFake::new(16), config).await;
    let (_, info) = s.get("/info").await;
    assert_eq!(info["served_model_name"], "my-embedder");
    assert_eq!(info["model_id"], "fake-bert");
    let (status, body) = s.post("/v1/embeddings", &json!({"input": "a"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "my-embedder");
    let (_, models) = s.get("/v1/models").await;
    assert_eq!(models["data"][0]["id"], "my-embedder");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_statuses_only_for_a_model_that_cannot_do_the_task() {
    let s = TestServer::start(FakeReranker::new(16, &["LABEL_0"]), ServerConfig::default()).await;
    for (path, body) in [
        ("/embed", json!({"inputs": "a"})),
        ("/embed_all", json!({"inputs": "a"})),
    ] {
        let (status, answer) = s.post(path, &body).await;
        assert_tei_error(status, &answer, 424, "Backend");
    }
    s.stop().await;
    let s = TestServer::start(TeiFake::new(16), ServerConfig::default()).await;
    let (status, answer) = s
        .post("/rerank", &json!({"query": "q", "texts": ["a"]}))
        .await;
    assert_tei_error(status, &answer, 424, "Backend");
    s.stop().await;
}
