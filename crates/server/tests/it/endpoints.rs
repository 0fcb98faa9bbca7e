//! Every endpoint's happy path and every error class, over real HTTP.

use crate::common;

use base64::Engine as _;
use bertflow_server::ServerConfig;
use common::{assert_error, cosine, floats, vector_of, Fake, TestServer, DIM};
use serde_json::{json, Value};

fn corpus() -> Vec<String> {
    (0..20)
        .map(|i| format!("corpus sentence number {i} about topic {}", i % 4))
        .collect()
}

async fn server() -> TestServer {
    TestServer::start(
        Fake::new(512),
        ServerConfig {
            corpus: Some(corpus()),
            ..ServerConfig::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_string_input() {
    let s = server().await;
    let (status, body) = s
        .post("/v1/embeddings", &json!({"input": "a man plays guitar"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], "fake-bert");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["object"], "embedding");
    assert_eq!(data[0]["index"], 0);
    assert_eq!(floats(&data[0]), vector_of("a man plays guitar"));
    // 4 words + 2 special tokens.
    assert_eq!(body["usage"]["prompt_tokens"], 6);
    assert_eq!(body["usage"]["total_tokens"], 6);
    assert_eq!(body["truncated"], json!([]));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_array_input_names_the_served_model_and_keeps_order() {
    let s = server().await;
    let texts = ["first", "the second one", "third text here now"];
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": texts, "model": "my-model", "encoding_format": "float", "user": "u1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "fake-bert");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(data[i]["index"], i);
        assert_eq!(floats(&data[i]), vector_of(text));
    }
    assert_eq!(body["usage"]["prompt_tokens"], 3 + 5 + 6);
    s.stop().await;
}

fn decode_base64(item: &Value) -> Vec<f32> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(item["embedding"].as_str().expect("base64 string"))
        .unwrap();
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_base64_round_trips_exactly() {
    let s = server().await;
    let texts = ["alpha beta", "gamma"];
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": texts, "encoding_format": "base64"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(decode_base64(&body["data"][i]), vector_of(text));
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_dimensions_is_a_prefix() {
    let s = server().await;
    let full = vector_of("prefix me");
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "prefix me", "dimensions": 3}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(floats(&body["data"][0]), full[..3].to_vec());
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "prefix me", "dimensions": DIM, "encoding_format": "base64"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(decode_base64(&body["data"][0]), full);
    let (_, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "prefix me", "dimensions": 1, "encoding_format": "base64"}),
        )
        .await;
    assert_eq!(decode_base64(&body["data"][0]), full[..1].to_vec());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_report_truncation_and_count_truncated_tokens() {
    let s = TestServer::start(Fake::new(6), ServerConfig::default()).await;
    let texts = [
        "short one",
        "this input has far too many words for the model",
    ];
    let (status, body) = s.post("/v1/embeddings", &json!({"input": texts})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["truncated"], json!([1]));
    // 2 + 2 tokens, then 10 + 2 clamped to max_len 6.
    assert_eq!(body["usage"]["prompt_tokens"], 4 + 6);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn similarity_pairs_and_source_targets() {
    let s = server().await;
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"pairs": [["a cat", "a dog"], ["same text", "same text"], ["ZERO", "a cat"]]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let scores: Vec<f64> = body["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(scores.len(), 3);
    assert!((scores[0] - cosine(&vector_of("a cat"), &vector_of("a dog"))).abs() < 1e-12);
    assert!((scores[1] - 1.0).abs() < 1e-12);
    assert_eq!(scores[2], 0.0);

    let targets = ["one", "two words", "three more words"];
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"source": "query", "targets": targets}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let scores = body["scores"].as_array().unwrap();
    assert_eq!(scores.len(), 3);
    for (score, target) in scores.iter().zip(targets) {
        let want = cosine(&vector_of("query"), &vector_of(target));
        assert!((score.as_f64().unwrap() - want).abs() < 1e-12);
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_returns_exact_top_k_in_order() {
    let s = server().await;
    let corpus = corpus();
    let query = "a query about something";
    let (status, body) = s
        .post("/search", &json!({"query": query, "top_k": 5}))
        .await;
    assert_eq!(status, 200, "{body}");
    let hits = body["results"].as_array().unwrap();
    assert_eq!(hits.len(), 5);
    // Brute-force expectation.
    let mut want: Vec<(usize, f64)> = corpus
        .iter()
        .enumerate()
        .map(|(i, t)| (i, cosine(&vector_of(query), &vector_of(t))))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (hit, (index, score)) in hits.iter().zip(&want) {
        assert_eq!(hit["index"], *index);
        assert_eq!(hit["text"], corpus[*index]);
        assert!((hit["score"].as_f64().unwrap() - score).abs() < 1e-5);
    }

    // A corpus sentence finds itself first with score 1; default top_k 10.
    let (status, body) = s
        .post("/search", &json!({"queries": [corpus[7], corpus[3]]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let lists = body["results"].as_array().unwrap();
    assert_eq!(lists.len(), 2);
    for (list, index) in lists.iter().zip([7, 3]) {
        let hits = list.as_array().unwrap();
        assert_eq!(hits.len(), 10);
        assert_eq!(hits[0]["index"], index);
        assert!((hits[0]["score"].as_f64().unwrap() - 1.0).abs() < 1e-5);
        let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    }

    // top_k larger than the corpus returns the whole corpus.
    let (_, body) = s
        .post("/search", &json!({"query": "x", "top_k": 500}))
        .await;
    assert_eq!(body["results"].as_array().unwrap().len(), corpus.len());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_info() {
    let s = server().await;
    let (status, body) = s.get("/health").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"status": "ok"}));
    let (status, info) = s.get("/info").await;
    assert_eq!(status, 200);
    assert_eq!(info["model"], "fake-bert");
    assert_eq!(info["pooling"], "mean");
    assert_eq!(info["calibrator"], "flow(test)");
    assert_eq!(info["dimension"], DIM);
    assert_eq!(info["max_len"], 512);
    assert_eq!(info["normalized"], false);
    assert_eq!(info["corpus_size"], 20);
    let defaults = ServerConfig::default();
    assert_eq!(
        info["limits"]["max_inputs_per_request"],
        defaults.limits.max_inputs_per_request
    );
    assert_eq!(
        info["limits"]["max_batch_tokens"],
        defaults.limits.max_batch_tokens
    );
    assert_eq!(
        info["limits"]["max_body_bytes"],
        defaults.limits.max_body_bytes
    );
    assert_eq!(info["load"]["queued_inputs"], 0);
    s.stop().await;
}

// ---------------------------------------------------------------------------
// Errors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_400_in_openai_shape() {
    let s = server().await;
    for path in ["/v1/embeddings", "/similarity", "/search"] {
        let (status, body) = s.post_raw(path, "{\"input\": [\"a\",").await;
        assert_error(status, &body, 400, "invalid_json");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    let (status, body) = s.post_raw("/v1/embeddings", "").await;
    assert_error(status, &body, 400, "invalid_json");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_input_is_400() {
    let s = server().await;
    let cases = [
        ("/v1/embeddings", json!({"input": ""})),
        ("/v1/embeddings", json!({"input": []})),
        ("/v1/embeddings", json!({"input": ["ok", ""]})),
        ("/similarity", json!({"pairs": []})),
        ("/similarity", json!({"source": "a", "targets": []})),
        ("/similarity", json!({"pairs": [["a", ""]]})),
        ("/search", json!({"query": ""})),
        ("/search", json!({"queries": []})),
    ];
    for (path, request) in cases {
        let (status, body) = s.post(path, &request).await;
        assert_error(status, &body, 400, "empty_input");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_inputs_is_413() {
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_inputs_per_request: 4,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = TestServer::start(Fake::new(512), config).await;
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": ["a", "b", "c", "d", "e"]}),
        )
        .await;
    assert_error(status, &body, 413, "too_many_inputs");
    // Two texts per pair: 3 pairs are 6 inputs.
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"pairs": [["a", "b"], ["c", "d"], ["e", "f"]]}),
        )
        .await;
    assert_error(status, &body, 413, "too_many_inputs");
    // At the limit it is fine.
    let (status, _) = s
        .post("/v1/embeddings", &json!({"input": ["a", "b", "c", "d"]}))
        .await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_too_large_is_413() {
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_body_bytes: 1024,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = TestServer::start(Fake::new(512), config).await;
    let big = json!({"input": "word ".repeat(1000)}).to_string();
    let (status, body) = s.post_raw("/v1/embeddings", big).await;
    assert_error(status, &body, 413, "body_too_large");
    // Without a Content-Length (chunked), the limit still applies.
    let (status, body) = chunked_post(
        s.addr,
        "/v1/embeddings",
        &["{\"input\": \"", &"x".repeat(4000), "\"}"],
    )
    .await;
    assert_error(status, &body, 413, "body_too_large");
    s.stop().await;
}

/// POST a chunked body over a raw connection; returns status and JSON body.
async fn chunked_post(addr: std::net::SocketAddr, path: &str, chunks: &[&str]) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for chunk in chunks {
        request.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    request.push_str("0\r\n\r\n");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_fields_are_422() {
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_chars_per_input: 50,
            ..bertflow_server::Limits::default()
        },
        corpus: Some(corpus()),
        ..ServerConfig::default()
    };
    let s = TestServer::start(Fake::new(512), config.clone()).await;
    let cases = [
        ("/v1/embeddings", json!({"input": 5}), "invalid_field"),
        (
            "/v1/embeddings",
            json!({"input": [1, -2, 3]}),
            "invalid_field",
        ),
        (
            "/v1/embeddings",
            json!({"input": ["a", null]}),
            "invalid_field",
        ),
        ("/v1/embeddings", json!({"model": "m"}), "invalid_field"),
        (
            "/v1/embeddings",
            json!({"input": "a", "encoding_format": "hex"}),
            "invalid_field",
        ),
        (
            "/v1/embeddings",
            json!({"input": "a", "dimensions": 0}),
            "invalid_field",
        ),
        (
            "/v1/embeddings",
            json!({"input": "a", "dimensions": DIM + 1}),
            "invalid_field",
        ),
        (
            "/v1/embeddings",
            json!({"input": "a", "dimensions": -3}),
            "invalid_field",
        ),
        (
            "/v1/embeddings",
            json!({"input": "a", "dimensions": "4"}),
            "invalid_field",
        ),
        ("/v1/embeddings", json!({"inputs": "a"}), "invalid_field"),
        (
            "/v1/embeddings",
            json!({"input": "a", "extra": 1}),
            "invalid_field",
        ),
        ("/v1/embeddings", json!(["a"]), "invalid_field"),
        (
            "/v1/embeddings",
            json!({"input": "x".repeat(51)}),
            "input_too_long",
        ),
        (
            "/v1/embeddings",
            json!({"input": ["ok", "é".repeat(51)]}),
            "input_too_long",
        ),
        ("/similarity", json!({"source": "a"}), "invalid_field"),
        (
            "/similarity",
            json!({"pairs": [["a", "b"]], "source": "a", "targets": ["b"]}),
            "invalid_field",
        ),
        (
            "/similarity",
            json!({"pairs": [["a", "b", "c"]]}),
            "invalid_field",
        ),
        (
            "/search",
            json!({"query": "a", "top_k": 0}),
            "invalid_field",
        ),
        (
            "/search",
            json!({"query": "a", "top_k": 1_000_000}),
            "invalid_field",
        ),
        (
            "/search",
            json!({"query": "a", "queries": ["b"]}),
            "invalid_field",
        ),
        ("/search", json!({"query": "a", "topk": 3}), "invalid_field"),
    ];
    for (path, request, code) in cases {
        let (status, body) = s.post(path, &request).await;
        assert_error(status, &body, 422, code);
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // The field is named where it is known.
    let (_, body) = s
        .post("/v1/embeddings", &json!({"input": "a", "dimensions": 0}))
        .await;
    assert_eq!(body["error"]["param"], "dimensions");
    let (_, body) = s
        .post("/v1/embeddings", &json!({"input": ["ok", "x".repeat(51)]}))
        .await;
    assert_eq!(body["error"]["param"], "input[1]");
    let (_, body) = s
        .post(
            "/similarity",
            &json!({"pairs": [["a", "b"], ["c", "x".repeat(51)]]}),
        )
        .await;
    assert_eq!(body["error"]["param"], "pairs[1][1]");
    // Exactly at the character limit is fine (50 two-byte characters).
    let (status, _) = s
        .post("/v1/embeddings", &json!({"input": "é".repeat(50)}))
        .await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_without_corpus_is_404() {
    let s = TestServer::start(Fake::new(512), ServerConfig::default()).await;
    let (status, body) = s.post("/search", &json!({"query": "anything"})).await;
    assert_error(status, &body, 404, "no_corpus");
    let (_, info) = s.get("/info").await;
    assert_eq!(info["corpus_size"], Value::Null);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_failure_and_panic_are_500_and_the_server_survives() {
    let s = server().await;
    let (status, body) = s
        .post("/v1/embeddings", &json!({"input": ["fine", "please FAIL"]}))
        .await;
    assert_error(status, &body, 500, "backend_error");
    assert_eq!(body["error"]["type"], "server_error");
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"source": "PANIC now", "targets": ["x"]}),
        )
        .await;
    assert_error(status, &body, 500, "backend_error");
    // The worker is still alive.
    let (status, body) = s.post("/v1/embeddings", &json!({"input": "fine"})).await;
    assert_eq!(status, 200, "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_route_and_wrong_method_use_the_error_shape() {
    let s = server().await;
    let (status, body) = s.get("/v2/nothing").await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = s.get("/v1/embeddings").await;
    assert_error(status, &body, 405, "method_not_allowed");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_is_indexed_in_batches_and_start_up_errors_are_reported() {
    // Indexing goes through the backend under the same batch limits.
    let fake = Fake::new(512);
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_batch_size: 3,
            ..bertflow_server::Limits::default()
        },
        corpus: Some(corpus()),
        ..ServerConfig::default()
    };
    let s = TestServer::start(fake.clone(), config).await;
    let (status, _) = s.get("/health").await;
    assert_eq!(status, 200);
    let batches = fake.batches();
    assert_eq!(batches.concat(), corpus());
    assert!(batches.iter().all(|b| b.len() <= 3), "{batches:?}");
    s.stop().await;

    // A backend failure while indexing stops start-up with an error.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        corpus: Some(vec!["fine".into(), "FAIL here".into()]),
        ..ServerConfig::default()
    };
    let result = bertflow_server::serve(Fake::new(512), config, listener, async {}).await;
    assert!(
        matches!(result, Err(bertflow_server::ServerError::Corpus(_))),
        "{result:?}"
    );

    // So does an unusable configuration.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            workers: 0,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let result = bertflow_server::serve(Fake::new(512), config, listener, async {}).await;
    assert!(
        matches!(result, Err(bertflow_server::ServerError::Config(_))),
        "{result:?}"
    );
}
