//! text-embeddings-inference's embedding routes over real HTTP, each answer
//! checked field by field against TEI's documented schema (OpenAPI 1.9):
//! `/embed`, `/embed_all`, `/similarity` and `/tokenize` given `inputs`,
//! `/decode`, `/info`'s TEI fields, `POST /` routed by the body's shape,
//! `/v1/models`, and every TEI error in TEI's shape.

mod common;

use std::sync::Arc;

use bertflow_server::{Limits, ServerConfig};
use common::tei::{assert_close, assert_tei_error, f32s, ids_key, unit, word_id, TeiFake};
use common::{assert_error, cosine, vector_of, Fake, TestServer, DIM};
use serde_json::{json, Value};

async fn server(max_len: usize) -> TestServer {
    TestServer::start(TeiFake::new(max_len), ServerConfig::default()).await
}

/// The vectors of an `[[f32]]` answer.
fn rows(body: &Value) -> Vec<Vec<f32>> {
    body.as_array()
        .unwrap_or_else(|| panic!("not [[f32]]: {body}"))
        .iter()
        .map(f32s)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_answers_unit_vectors_by_default_and_raw_ones_on_request() {
    let s = server(512).await;
    let (status, body) = s
        .post("/embed", &json!({"inputs": "a man plays guitar"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let got = rows(&body);
    assert_eq!(got.len(), 1);
    assert_close(&got[0], &unit(&vector_of("a man plays guitar")), 1e-6);
    let norm: f32 = got[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-6, "{norm}");

    let texts = ["first", "the second one", "third"];
    let (status, body) = s
        .post(
            "/embed",
            &json!({"inputs": texts, "normalize": false, "truncate": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let got = rows(&body);
    assert_eq!(got.len(), 3);
    for (row, text) in got.iter().zip(texts) {
        assert_eq!(row, &vector_of(text));
    }

    // `dimensions`: the first components, normalised after the cut.
    let (status, body) = s
        .post("/embed", &json!({"inputs": ["first"], "dimensions": 3}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_close(&rows(&body)[0], &unit(&vector_of("first")[..3]), 1e-6);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_takes_token_ids_alone_in_batches_and_mixed_with_text() {
    let s = server(512).await;
    let ids = [101u32, 1004, 1005, 102];
    let (status, body) = s
        .post("/embed", &json!({"inputs": ids, "normalize": false}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rows(&body), vec![vector_of(&ids_key(&ids))]);

    let (status, body) = s
        .post(
            "/embed",
            &json!({"inputs": ["a text", [101, 1001, 102], [7]], "normalize": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        rows(&body),
        vec![
            vector_of("a text"),
            vector_of("101,1001,102"),
            vector_of("7")
        ]
    );
    // The same ids on the OpenAI route.
    let (status, body) = s
        .post("/v1/embeddings", &json!({"input": [[101, 1001, 102]]}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        f32s(&body["data"][0]["embedding"]),
        vector_of("101,1001,102")
    );

    // Bad ids: negative, fractional, past u32, more than max_len.
    for inputs in [
        json!([1, -2]),
        json!([[1.5]]),
        json!([4294967296u64]),
        json!([[]]),
    ] {
        let (status, body) = s.post("/embed", &json!({ "inputs": inputs })).await;
        assert!(status == 422 || status == 400, "{inputs}: {status} {body}");
        assert_tei_error(
            status,
            &body,
            status,
            if status == 400 { "Empty" } else { "Validation" },
        );
    }
    // More ids than max_len, without truncate: 413, as a long text.
    let long: Vec<u32> = vec![1001; 513];
    let (status, body) = s.post("/embed", &json!({ "inputs": long })).await;
    assert_tei_error(status, &body, 413, "Validation");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_ids_run_on_every_backend_and_missing_tasks_are_refused_clearly() {
    // Every backend takes token batches: a plain one embeds a client's ids too.
    let s = TestServer::start(Fake::new(512), ServerConfig::default()).await;
    let (status, body) = s.post("/embed", &json!({"inputs": [101, 102]})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s
        .post("/v1/embeddings", &json!({"input": [[101, 102]]}))
        .await;
    assert_eq!(status, 200, "{body}");
    // Nor per-token vectors, TEI tokens or decoding.
    let (status, body) = s.post("/embed_all", &json!({"inputs": "a b"})).await;
    assert_tei_error(status, &body, 424, "Backend");
    let (status, body) = s.post("/tokenize", &json!({"inputs": "a b"})).await;
    assert_tei_error(status, &body, 424, "Backend");
    let (status, body) = s.post("/decode", &json!({"ids": [101]})).await;
    assert_tei_error(status, &body, 424, "Backend");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_inputs_follow_truncate_auto_truncate_and_the_direction() {
    // max_len 4: "a b c d e" is 7 tokens.
    let long = "a b c d e";
    let s = server(4).await;
    let (status, body) = s.post("/embed", &json!({"inputs": ["ok", long]})).await;
    assert_tei_error(status, &body, 413, "Validation");
    assert!(
        body["error"].as_str().unwrap().contains("inputs[1]"),
        "{body}"
    );
    let (status, body) = s
        .post(
            "/embed",
            &json!({"inputs": long, "truncate": true, "normalize": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Cut once, when tokenized: the model sees [CLS] a b [SEP].
    assert_eq!(rows(&body), vec![vector_of("a b")]);
    let (status, body) = s
        .post(
            "/embed",
            &json!({"inputs": long, "truncate": true, "truncation_direction": "Left"}),
        )
        .await;
    assert_tei_error(status, &body, 422, "Validation");
    // Left on inputs that are not cut changes nothing.
    let (status, body) = s
        .post(
            "/embed",
            &json!({"inputs": "a b", "truncation_direction": "Left"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The same rule on /similarity's parameters and /embed_all.
    let similarity = json!({"inputs": {"source_sentence": long, "sentences": ["x"]}});
    let (status, body) = s.post("/similarity", &similarity).await;
    assert_tei_error(status, &body, 413, "Validation");
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"inputs": {"source_sentence": long, "sentences": ["x"]}, "parameters": {"truncate": true}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.post("/embed_all", &json!({"inputs": long})).await;
    assert_tei_error(status, &body, 413, "Validation");
    s.stop().await;

    // --auto-truncate: a request that does not say is cut.
    let config = ServerConfig {
        auto_truncate: true,
        ..ServerConfig::default()
    };
    let s = TestServer::start(TeiFake::new(4), config).await;
    let (status, body) = s.post("/embed", &json!({ "inputs": long })).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s
        .post("/embed", &json!({"inputs": long, "truncate": false}))
        .await;
    assert_tei_error(status, &body, 413, "Validation");
    let (_, info) = s.get("/info").await;
    assert_eq!(info["auto_truncate"], true);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_embed_error_comes_in_teis_shape_with_teis_status() {
    let config = ServerConfig {
        limits: Limits {
            max_inputs_per_request: 2,
            max_chars_per_input: 20,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = TestServer::start(TeiFake::new(512), config).await;
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"inputs": []}), 400, "Empty"),
        (json!({"inputs": ""}), 400, "Empty"),
        (json!({"inputs": ["a", "b", "c"]}), 413, "Validation"),
        (json!({"inputs": "x".repeat(21)}), 413, "Validation"),
        (
            json!({"inputs": "a", "prompt_name": "query"}),
            422,
            "Validation",
        ),
        (json!({"inputs": "a", "dimensions": 0}), 422, "Validation"),
        (
            json!({"inputs": "a", "dimensions": DIM + 1}),
            422,
            "Validation",
        ),
        (json!({"inputs": 5}), 422, "Validation"),
        (json!({"inputs": [true]}), 422, "Validation"),
        (json!({"normalize": true}), 422, "Validation"),
        (
            json!({"inputs": "a", "truncation_direction": "Up"}),
            422,
            "Validation",
        ),
        (
            json!({"inputs": "a", "normalize": "yes"}),
            422,
            "Validation",
        ),
    ];
    for (request, want_status, want_type) in cases {
        let (status, body) = s.post("/embed", &request).await;
        assert_tei_error(status, &body, want_status, want_type);
    }
    let (status, body) = s.post_raw("/embed", "{not json").await;
    assert_tei_error(status, &body, 400, "Validation");
    // prompt_name says why.
    let (_, body) = s
        .post("/embed", &json!({"inputs": "a", "prompt_name": "query"}))
        .await;
    assert!(
        body["error"].as_str().unwrap().contains("no prompts"),
        "{body}"
    );
    // Errors before any handler keep bertflow's shape: 404, 405.
    let (status, body) = s.get("/embed").await;
    assert_error(status, &body, 405, "method_not_allowed");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_queue_answers_429_overloaded() {
    let fake = TeiFake::new(512);
    fake.0.gate.set_closed(true);
    let config = ServerConfig {
        limits: Limits {
            max_queue_inputs: 1,
            max_inputs_per_request: 1,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = Arc::new(TestServer::start(fake.clone(), config).await);
    let post = |body: Value| {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.post("/embed", &body).await })
    };
    let running = post(json!({"inputs": "one"}));
    s.wait_load(|l| l["busy_workers"] == 1).await;
    let queued = post(json!({"inputs": "two"}));
    s.wait_load(|l| l["queued_requests"] == 1).await;
    let (status, body) = s.post("/embed", &json!({"inputs": "three"})).await;
    assert_tei_error(status, &body, 429, "Overloaded");
    fake.0.gate.set_closed(false);
    for request in [running, queued] {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_all_answers_one_row_per_token() {
    let s = server(512).await;
    let (status, body) = s.post("/embed_all", &json!({"inputs": ["a b", "c"]})).await;
    assert_eq!(status, 200, "{body}");
    let inputs = body.as_array().unwrap();
    assert_eq!(inputs.len(), 2);
    let tokens = [
        vec!["[CLS]", "a", "b", "[SEP]"],
        vec!["[CLS]", "c", "[SEP]"],
    ];
    for (matrix, tokens) in inputs.iter().zip(tokens) {
        let matrix = rows(matrix);
        assert_eq!(matrix.len(), tokens.len());
        for (row, token) in matrix.iter().zip(tokens) {
            assert_eq!(row.len(), DIM);
            assert_eq!(row, &vector_of(token));
        }
    }
    // Token ids enter the one queue as texts do (TEI's /embed_all takes
    // them): one row per id.
    let (status, body) = s.post("/embed_all", &json!({"inputs": [[101, 102]]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0].as_array().map(Vec::len), Some(2), "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn similarity_speaks_both_shapes() {
    let s = server(512).await;
    let source = "a man plays guitar";
    let sentences = ["a woman plays violin", "a dog runs", source];
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"inputs": {"source_sentence": source, "sentences": sentences}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let got = f32s(&body);
    let want: Vec<f32> = sentences
        .iter()
        .map(|t| cosine(&vector_of(source), &vector_of(t)) as f32)
        .collect();
    assert_close(&got, &want, 1e-6);
    assert!((got[2] - 1.0).abs() < 1e-6);
    // With parameters (null, and every field).
    for parameters in [
        json!(null),
        json!({"truncate": true, "truncation_direction": "Right", "prompt_name": null}),
    ] {
        let (status, body) = s
            .post(
                "/similarity",
                &json!({"inputs": {"source_sentence": source, "sentences": sentences}, "parameters": parameters}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_close(&f32s(&body), &want, 1e-6);
    }
    // bertflow's own shape is unchanged.
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"source": source, "targets": sentences}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["scores"].as_array().unwrap().len(), 3);
    // Errors: TEI's shape for TEI's request, bertflow's for bertflow's.
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"inputs": {"source_sentence": source, "sentences": []}}),
        )
        .await;
    assert_tei_error(status, &body, 400, "Empty");
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"inputs": {"source_sentence": source}}),
        )
        .await;
    assert_tei_error(status, &body, 422, "Validation");
    let (status, body) = s
        .post(
            "/similarity",
            &json!({"inputs": {"source_sentence": source, "sentences": ["x"]}, "parameters": {"prompt_name": "q"}}),
        )
        .await;
    assert_tei_error(status, &body, 422, "Validation");
    let (status, body) = s.post("/similarity", &json!({"targets": ["x"]})).await;
    assert_error(status, &body, 422, "invalid_field");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_speaks_both_shapes() {
    let s = server(512).await;
    let text = "hello  big world";
    let (status, body) = s.post("/tokenize", &json!({ "inputs": text })).await;
    assert_eq!(status, 200, "{body}");
    let want = json!([[
        {"id": 101, "text": "[CLS]", "special": true, "start": null, "stop": null},
        {"id": word_id("hello"), "text": "hello", "special": false, "start": 0, "stop": 5},
        {"id": word_id("big"), "text": "big", "special": false, "start": 7, "stop": 10},
        {"id": word_id("world"), "text": "world", "special": false, "start": 11, "stop": 16},
        {"id": 102, "text": "[SEP]", "special": true, "start": null, "stop": null},
    ]]);
    assert_eq!(body, want);
    // Every token has exactly TEI's SimpleToken fields.
    for token in body[0].as_array().unwrap() {
        let mut keys: Vec<&str> = token
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["id", "special", "start", "stop", "text"]);
    }
    let (status, body) = s
        .post(
            "/tokenize",
            &json!({"inputs": ["a", "b c"], "add_special_tokens": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 2);
    assert_eq!(body[0].as_array().unwrap().len(), 1);
    assert_eq!(body[1][1]["text"], "c");
    assert_eq!(body[1][1]["start"], 2);
    // bertflow's own shape is unchanged.
    let (status, body) = s.post("/tokenize", &json!({ "input": text })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["tokens"][1], "hello");
    // Errors.
    let (status, body) = s.post("/tokenize", &json!({"inputs": "FAIL"})).await;
    assert_tei_error(status, &body, 422, "Tokenizer");
    let (status, body) = s.post("/tokenize", &json!({"inputs": []})).await;
    assert_tei_error(status, &body, 400, "Empty");
    let (status, body) = s
        .post("/tokenize", &json!({"inputs": "a", "prompt_name": "q"}))
        .await;
    assert_tei_error(status, &body, 422, "Validation");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_answers_one_string_per_list() {
    let s = server(512).await;
    let (status, body) = s
        .post("/decode", &json!({"ids": [101, 1002, 1003, 102]}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!(["ww www"]));
    let (status, body) = s
        .post(
            "/decode",
            &json!({"ids": [[101, 1001, 102], [1004]], "skip_special_tokens": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!(["[CLS] w [SEP]", "wwww"]));
    let (status, body) = s.post("/decode", &json!({"ids": [99999]})).await;
    assert_tei_error(status, &body, 422, "Validation");
    let (status, body) = s.post("/decode", &json!({"ids": []})).await;
    assert_tei_error(status, &body, 400, "Empty");
    for ids in [json!("101"), json!([-1]), json!([[1], "x"])] {
        let (status, body) = s.post("/decode", &json!({ "ids": ids })).await;
        assert_tei_error(status, &body, 422, "Validation");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_has_teis_fields_beside_bertflows() {
    let s = server(128).await;
    let (status, info) = s.get("/info").await;
    assert_eq!(status, 200, "{info}");
    // TEI's required fields with their types.
    assert_eq!(info["model_id"], "fake-bert");
    assert!(info["model_sha"].is_null());
    assert_eq!(info["model_dtype"], "float32");
    assert_eq!(
        info["model_type"],
        json!({"embedding": {"pooling": "mean"}})
    );
    let limits = &info["limits"];
    assert_eq!(info["max_concurrent_requests"], limits["max_connections"]);
    assert_eq!(info["max_input_length"], 128);
    assert_eq!(info["max_batch_tokens"], limits["max_batch_tokens"]);
    assert_eq!(info["max_batch_requests"], limits["max_batch_size"]);
    assert_eq!(
        info["max_client_batch_size"],
        limits["max_inputs_per_request"]
    );
    assert_eq!(info["auto_truncate"], false);
    assert!(info["tokenization_workers"]
        .as_u64()
        .is_some_and(|w| w >= 1));
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert!(info["sha"].is_null() && info["docker_label"].is_null());
    // bertflow's own, unchanged.
    assert_eq!(info["model"], "fake-bert");
    assert_eq!(info["calibrator"], "flow(test)");
    assert_eq!(info["dimension"], DIM);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_root_is_routed_by_the_bodys_shape() {
    let s = server(512).await;
    let (status, body) = s.post("/", &json!({"inputs": "a man plays guitar"})).await;
    assert_eq!(status, 200, "{body}");
    let (_, direct) = s
        .post("/embed", &json!({"inputs": "a man plays guitar"}))
        .await;
    assert_eq!(body, direct);
    let (status, body) = s
        .post("/", &json!({"inputs": ["a", "b"], "normalize": false}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rows(&body), vec![vector_of("a"), vector_of("b")]);
    let request = json!({"inputs": {"source_sentence": "a", "sentences": ["b", "a"]}});
    let (status, body) = s.post("/", &request).await;
    assert_eq!(status, 200, "{body}");
    let (_, direct) = s.post("/similarity", &request).await;
    assert_eq!(body, direct);
    // A rerank on an embedding model: TEI's 424.
    let (status, body) = s.post("/", &json!({"query": "q", "texts": ["a"]})).await;
    assert_tei_error(status, &body, 424, "Backend");
    for request in [
        json!({"foo": 1}),
        json!({"inputs": 3}),
        json!({"query": "q"}),
    ] {
        let (status, body) = s.post("/", &request).await;
        assert_tei_error(status, &body, 422, "Validation");
    }
    let (status, body) = s.post_raw("/", "[1, 2]").await;
    assert_tei_error(status, &body, 422, "Validation");
    // GET / is still the playground.
    let page = s.client.get(s.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_models_lists_the_served_model_and_embeddings_name_it() {
    let s = server(512).await;
    let (status, body) = s.get("/v1/models").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["id"], "fake-bert");
    assert_eq!(data[0]["object"], "model");
    assert_eq!(data[0]["owned_by"], "bertflow");
    assert!(data[0]["created"]
        .as_u64()
        .is_some_and(|t| t > 1_600_000_000));
    // Whatever the request names, the answer names the served model.
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "a b", "model": "text-embedding-3-small"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "fake-bert");
    // `normalize` on the OpenAI route (default: the calibrated vector as is).
    assert_eq!(f32s(&body["data"][0]["embedding"]), vector_of("a b"));
    let (_, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "a b", "normalize": true, "dimensions": 4}),
        )
        .await;
    assert_close(
        &f32s(&body["data"][0]["embedding"]),
        &unit(&vector_of("a b")[..4]),
        1e-6,
    );
    s.stop().await;
}
