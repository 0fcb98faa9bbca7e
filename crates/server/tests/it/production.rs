//! Production features over real HTTP: `/metrics` counts exactly the traffic
//! sent, API keys guard every route but `/health`.

use crate::common;

use std::collections::HashMap;

use bertflow_server::{ApiKeys, ServerConfig};
use common::{assert_error, Fake, NoTokens, TestServer};
use serde_json::json;

/// Parse the Prometheus text format into `series -> value` (comments skipped).
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            (series.to_owned(), value.parse::<f64>().expect("number"))
        })
        .collect()
}

async fn scrape(s: &TestServer, key: Option<&str>) -> (String, HashMap<String, f64>) {
    let mut request = s.client.get(s.url("/metrics"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    let parsed = parse_metrics(&text);
    (text, parsed)
}

fn value(m: &HashMap<String, f64>, series: &str) -> f64 {
    *m.get(series)
        .unwrap_or_else(|| panic!("no series {series} in {m:#?}"))
}

fn requests(m: &HashMap<String, f64>, route: &str, status: u16) -> f64 {
    value(
        m,
        &format!("bertflow_requests_total{{route=\"{route}\",status=\"{status}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_exactly_the_requests_made() {
    // max_len 4: a text of 3 or more words (5+ tokens) is truncated.
    let corpus: Vec<String> = (0..6).map(|i| format!("doc {i}")).collect();
    let s = TestServer::start(
        Fake::new(4),
        ServerConfig {
            corpus: Some(corpus),
            ..ServerConfig::default()
        },
    )
    .await;

    // Before any traffic: nothing counted, the gauges at rest, the corpus size known.
    let (text, m) = scrape(&s, None).await;
    assert!(!text.contains("bertflow_requests_total{"), "{text}");
    assert_eq!(value(&m, "bertflow_queue_inputs"), 0.0);
    assert_eq!(value(&m, "bertflow_corpus_size"), 6.0);
    assert_eq!(value(&m, "bertflow_batch_size_count"), 0.0);

    // Embeddings: 1 + 2 + 3 inputs; tokens 3, (3 + 4), (4 + 4 + 3) after the cap at 4;
    // truncated: "one two three" (5 tokens) and "a b c d" (6 tokens).
    let inputs = [
        json!({"input": "hello"}),
        json!({"input": ["hi", "one two"]}),
        json!({"input": ["one two three", "a b c d", "x"]}),
    ];
    for body in &inputs {
        let (status, _) = s.post("/v1/embeddings", body).await;
        assert_eq!(status, 200);
    }
    // Similarity: texts "p", "q", "p" -> 2 distinct embedded (3 tokens each), 4 counted.
    let (status, _) = s
        .post("/similarity", &json!({"pairs": [["p", "q"], ["p", "p"]]}))
        .await;
    assert_eq!(status, 200);
    // Search: one query, 3 tokens.
    let (status, _) = s.post("/search", &json!({"query": "z", "top_k": 2})).await;
    assert_eq!(status, 200);
    // Errors: 422 (bad field), 404 (no route), 405 (wrong method).
    let (status, _) = s
        .post("/v1/embeddings", &json!({"input": "x", "dimensions": 0}))
        .await;
    assert_eq!(status, 422);
    let (status, _) = s.get("/nope").await;
    assert_eq!(status, 404);
    let (status, _) = s.post("/health", &json!({})).await;
    assert_eq!(status, 405);
    for _ in 0..2 {
        let (status, _) = s.get("/health").await;
        assert_eq!(status, 200);
    }

    let (_, m) = scrape(&s, None).await;
    assert_eq!(requests(&m, "/v1/embeddings", 200), 3.0);
    assert_eq!(requests(&m, "/v1/embeddings", 422), 1.0);
    assert_eq!(requests(&m, "/similarity", 200), 1.0);
    assert_eq!(requests(&m, "/search", 200), 1.0);
    assert_eq!(requests(&m, "unmatched", 404), 1.0);
    assert_eq!(requests(&m, "/health", 405), 1.0);
    assert_eq!(requests(&m, "/health", 200), 2.0);
    // The first scrape is counted once it has been answered: exactly one so far.
    assert_eq!(requests(&m, "/metrics", 200), 1.0);
    let latency = |route: &str| {
        value(
            &m,
            &format!("bertflow_request_duration_seconds_count{{route=\"{route}\"}}"),
        )
    };
    assert_eq!(latency("/v1/embeddings"), 4.0);
    assert_eq!(latency("/similarity"), 1.0);
    assert_eq!(latency("/search"), 1.0);
    assert_eq!(latency("/health"), 3.0);
    assert_eq!(
        value(&m, "bertflow_inputs_total{route=\"/v1/embeddings\"}"),
        6.0
    );
    assert_eq!(
        value(&m, "bertflow_inputs_total{route=\"/similarity\"}"),
        4.0
    );
    assert_eq!(value(&m, "bertflow_inputs_total{route=\"/search\"}"), 1.0);
    assert_eq!(value(&m, "bertflow_inputs_truncated_total"), 2.0);
    // Batches: the requests were sent one after the other and each fits in one batch,
    // so 5 batches of 6 + 2 + 1 inputs and 3+7+11 + 6 + 3 tokens (the corpus is embedded
    // at start-up, outside the batcher).
    assert_eq!(value(&m, "bertflow_batch_size_count"), 5.0);
    assert_eq!(value(&m, "bertflow_batch_size_sum"), 9.0);
    assert_eq!(value(&m, "bertflow_batch_tokens_count"), 5.0);
    assert_eq!(value(&m, "bertflow_batch_tokens_sum"), 30.0);
    // Batch sizes 1, 2, 3, 2, 1.
    assert_eq!(value(&m, "bertflow_batch_size_bucket{le=\"1\"}"), 2.0);
    assert_eq!(value(&m, "bertflow_batch_size_bucket{le=\"2\"}"), 4.0);
    assert_eq!(value(&m, "bertflow_batch_size_bucket{le=\"4\"}"), 5.0);
    assert_eq!(value(&m, "bertflow_search_duration_seconds_count"), 1.0);
    assert_eq!(value(&m, "bertflow_queue_inputs"), 0.0);

    // And the next scrape sees exactly one more /metrics request.
    let (_, again) = scrape(&s, None).await;
    assert_eq!(requests(&again, "/metrics", 200), 2.0);
    assert_eq!(requests(&again, "/v1/embeddings", 200), 3.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_guard_every_route_but_health() {
    let keys = ApiKeys::new(["key-one", "key-two-longer"]).unwrap();
    let s = TestServer::start(
        Fake::new(512),
        ServerConfig {
            api_keys: keys,
            ..ServerConfig::default()
        },
    )
    .await;
    let client = &s.client;
    let send = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let www = response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap();
        (status, www, text)
    };

    // /health is open.
    let (status, _, _) = send(client.get(s.url("/health"))).await;
    assert_eq!(status, 200);

    let body = json!({"input": "hello"});
    let attempts: Vec<(&str, Option<&str>)> = vec![
        ("missing", None),
        ("wrong", Some("Bearer wrong-key-abc")),
        ("prefix", Some("Bearer key-on")),
        ("longer", Some("Bearer key-one-and-more")),
        ("scheme", Some("Basic key-one")),
        ("bare", Some("key-one")),
    ];
    for (what, header) in attempts {
        for (method, path) in [
            ("POST", "/v1/embeddings"),
            ("GET", "/info"),
            ("GET", "/metrics"),
            ("POST", "/search"),
            ("GET", "/no-such-route"),
        ] {
            let mut request = if method == "POST" {
                client.post(s.url(path)).json(&body)
            } else {
                client.get(s.url(path))
            };
            if let Some(h) = header {
                request = request.header("authorization", h);
            }
            let (status, www, text) = send(request).await;
            let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_error(status, &parsed, 401, "invalid_api_key");
            assert_eq!(parsed["error"]["type"], "invalid_request_error");
            assert_eq!(www.as_deref(), Some("Bearer"), "{what} {path}");
            // The presented key is never echoed.
            assert!(
                !text.contains("wrong-key-abc") && !text.contains("key-on"),
                "{what} {path}: {text}"
            );
        }
    }

    // Either key works, on every route.
    for key in ["key-one", "key-two-longer"] {
        let (status, _, text) = send(
            client
                .post(s.url("/v1/embeddings"))
                .bearer_auth(key)
                .json(&body),
        )
        .await;
        assert_eq!(status, 200, "{text}");
        let (status, _, _) = send(client.get(s.url("/info")).bearer_auth(key)).await;
        assert_eq!(status, 200);
        // No corpus: the key is accepted and the route answers its own 404.
        let (status, _, text) = send(
            client
                .post(s.url("/search"))
                .bearer_auth(key)
                .json(&json!({"query": "q"})),
        )
        .await;
        assert_eq!(status, 404, "{text}");
        assert!(text.contains("no_corpus"), "{text}");
    }
    let (_, m) = scrape(&s, Some("key-one")).await;
    // 6 attempts x 5 routes refused; the refusals are counted under their routes.
    assert_eq!(requests(&m, "/v1/embeddings", 401), 6.0);
    assert_eq!(requests(&m, "/metrics", 401), 6.0);
    assert_eq!(requests(&m, "unmatched", 401), 6.0);
    assert_eq!(requests(&m, "/v1/embeddings", 200), 2.0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_shows_the_tokens_and_flags_truncation() {
    let s = TestServer::start(Fake::new(4), ServerConfig::default()).await;
    let (status, body) = s
        .post("/tokenize", &json!({"input": ["a bb", "one two three"]}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "fake-bert");
    assert_eq!(body["max_len"], 4);
    assert_eq!(
        body["data"],
        json!([
            {"index": 0, "ids": [101, 1001, 1002, 102], "tokens": ["[CLS]", "a", "bb", "[SEP]"], "truncated": false},
            {"index": 1, "ids": [101, 1003, 1003, 102], "tokens": ["[CLS]", "one", "two", "[SEP]"], "truncated": true},
        ])
    );
    let (status, body) = s.post("/tokenize", &json!({"input": "x"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["data"][0]["tokens"], json!(["[CLS]", "x", "[SEP]"]));
    // The same validation as /v1/embeddings, and backend failures are 500.
    let (status, body) = s.post("/tokenize", &json!({"input": []})).await;
    assert_error(status, &body, 400, "empty_input");
    let (status, body) = s.post("/tokenize", &json!({"text": "x"})).await;
    assert_error(status, &body, 422, "invalid_field");
    let (status, body) = s.post("/tokenize", &json!({"input": "FAIL"})).await;
    assert_error(status, &body, 500, "backend_error");
    let (_, m) = scrape(&s, None).await;
    assert_eq!(value(&m, "bertflow_inputs_truncated_total"), 1.0);
    assert_eq!(value(&m, "bertflow_inputs_total{route=\"/tokenize\"}"), 4.0);
    s.stop().await;

    // A backend without tokenize: 501 not_supported.
    let s = TestServer::start(std::sync::Arc::new(NoTokens), ServerConfig::default()).await;
    let (status, body) = s.post("/tokenize", &json!({"input": "x"})).await;
    assert_error(status, &body, 501, "not_supported");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_lists_every_route_and_every_route_answers() {
    let s = TestServer::start(
        Fake::new(16),
        ServerConfig {
            corpus: Some(vec!["a".into(), "b".into()]),
            ..ServerConfig::default()
        },
    )
    .await;
    let (status, doc) = s.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    // Every route the router serves, with its method and a request it accepts.
    let routes: [(&str, &str, serde_json::Value); 18] = [
        ("get", "/", json!(null)),
        ("post", "/", json!({"inputs": "x"})),
        ("post", "/embed", json!({"inputs": "x"})),
        ("post", "/embed_all", json!({"inputs": "x"})),
        ("post", "/embed_sparse", json!({"inputs": "x"})),
        ("post", "/embed_multi", json!({"inputs": "x"})),
        ("post", "/decode", json!({"ids": [101]})),
        ("post", "/rerank", json!({"query": "x", "texts": ["y"]})),
        ("post", "/predict", json!({"inputs": "x"})),
        ("get", "/v1/models", json!(null)),
        ("post", "/v1/embeddings", json!({"input": "x"})),
        ("post", "/similarity", json!({"pairs": [["x", "y"]]})),
        ("post", "/search", json!({"query": "x"})),
        ("post", "/tokenize", json!({"input": "x"})),
        ("get", "/health", json!(null)),
        ("get", "/info", json!(null)),
        ("get", "/metrics", json!(null)),
        ("get", "/openapi.json", json!(null)),
    ];
    let paths = doc["paths"].as_object().expect("paths");
    // Every path once ("/" has GET and POST).
    assert_eq!(
        paths.len(),
        routes.len() - 1,
        "{:?}",
        paths.keys().collect::<Vec<_>>()
    );
    for (method, path, body) in &routes {
        let op = &paths[*path][*method];
        assert!(
            op.is_object(),
            "{method} {path} missing from the OpenAPI document"
        );
        assert!(
            op["responses"]["200"].is_object(),
            "{method} {path}: no 200 response"
        );
        let status = if *method == "post" {
            assert!(op["requestBody"].is_object(), "{path}: no request body");
            s.post(path, body).await.0
        } else {
            s.client
                .get(s.url(path))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        // The fake is an embedding model without TEI's extras: its TEI
        // routes answer TEI's 424, which proves they are routed.
        let want = match *path {
            "/embed_all" | "/embed_sparse" | "/embed_multi" | "/decode" | "/rerank"
            | "/predict" => 424,
            _ => 200,
        };
        assert_eq!(status, want, "{method} {path}");
    }
    // Schemas are generated from the types: the request fields are there.
    let schemas = &doc["components"]["schemas"];
    let props = &schemas["EmbeddingsRequest"]["properties"];
    for field in ["input", "model", "encoding_format", "dimensions", "user"] {
        assert!(
            props[field].is_object(),
            "EmbeddingsRequest.{field} missing: {props}"
        );
    }
    assert!(schemas["ErrorBody"].is_object());
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    s.stop().await;
}
