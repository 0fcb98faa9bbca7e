//! `bertflow serve` end to end: the real binary with the real model
//! (models/all-MiniLM-L6-v2, or $BERTFLOW_TEST_MODEL) on 127.0.0.1 with an
//! OS-chosen port, driven over HTTP. Vectors are checked against
//! `bertflow encode` on the same sentences.
//!
//! This file: the command line (help, options refused at startup) and every
//! endpoint and error class over HTTP. The concurrency, overload and shutdown
//! tests are in serve_load.rs; the shared fixtures and helpers in common/serve.rs.
//!
//! The tests take a global lock so that they run one at a time: they share two
//! cores, and the overload and shutdown tests reason about a busy server.
use crate::common;

use base64::Engine as _;
use common::serve::{
    assert_error, check_embeddings, client, floats, get, max_diff, post, post_bytes, reference,
    runtime, serial, startup_failure, Server, BIN, SENTENCES, TOL,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::process::Command;

// ---------------------------------------------------------------------------
// HTTP helpers

fn cosine(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

// ---------------------------------------------------------------------------
// Tests

#[test]
fn help_explains_every_option() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run bertflow serve --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--model",
        "--pooling",
        "--calibrator",
        "--allow-mismatch",
        "--corpus",
        "--host",
        "--port",
        "--workers",
        "--max-inputs-per-request",
        "--max-chars-per-input",
        "--max-body-bytes",
        "--max-queue-inputs",
        "--max-batch-tokens",
        "--max-batch-size",
        "--max-top-k",
        "SIGTERM",
    ] {
        assert!(
            help.contains(flag),
            "serve --help does not mention {flag}:\n{help}"
        );
    }
}

#[test]
fn bad_startup_options_fail_with_a_message() {
    let _serial = serial();
    let reference = reference();
    let small_queue = startup_failure(&["--max-queue-inputs", "8"]);
    assert!(small_queue.contains("max_queue_inputs"), "{small_queue}");
    let missing = startup_failure(&["--corpus", "/nonexistent/corpus.txt"]);
    assert!(missing.contains("corpus"), "{missing}");
    let calib = reference.path("whiten.safetensors");
    let calib = calib.to_str().unwrap();
    let mismatch = startup_failure(&["--calibrator", calib]);
    assert!(mismatch.contains("allow"), "{mismatch}");
    let pooling = startup_failure(&["--pooling", "nonsense"]);
    assert!(pooling.contains("--pooling"), "{pooling}");
}

#[test]
fn every_endpoint_and_error_class_over_http() {
    let _serial = serial();
    let reference = reference();
    let want = &reference.raw;
    // The corpus: JSONL with a blank line (skipped).
    let corpus_idx = [0usize, 1, 2, 3, 16, 17];
    let mut corpus = String::new();
    for (k, &i) in corpus_idx.iter().enumerate() {
        corpus.push_str(&json!({ "text": SENTENCES[i], "id": k }).to_string());
        corpus.push('\n');
        if k == 2 {
            corpus.push('\n');
        }
    }
    let corpus_path = reference.path("corpus.jsonl");
    std::fs::write(&corpus_path, corpus).unwrap();
    let server = Server::start(&["--corpus", corpus_path.to_str().unwrap()]);

    runtime().block_on(async {
        let c = client();
        let embeddings = server.url("/v1/embeddings");

        // GET /health
        let health = get(&c, &server.url("/health")).await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.body, json!({ "status": "ok" }));

        // GET /info: the model, pooling and every limit as passed on the command line.
        let info = get(&c, &server.url("/info")).await;
        assert_eq!(info.status, StatusCode::OK, "{}", info.body);
        let i = &info.body;
        assert!(
            i["model"].as_str().unwrap().contains("all-MiniLM-L6-v2"),
            "{i}"
        );
        assert_eq!(i["pooling"], "last-avg");
        assert_eq!(i["calibrator"], Value::Null);
        assert_eq!(i["dimension"], want.ncols());
        assert_eq!(i["max_len"], 512);
        assert_eq!(i["normalized"], false);
        assert_eq!(i["corpus_size"], corpus_idx.len());
        assert_eq!(
            i["limits"],
            json!({
                "max_inputs_per_request": 256, "max_chars_per_input": 10000,
                "max_body_bytes": 4194304, "max_queue_inputs": 1024, "max_queue_tokens": 32768,
                "max_batch_tokens": 8192, "max_batch_size": 64,
                "workers": std::thread::available_parallelism().map_or(1, |n| n.get()),
                // 0: as many tokenization workers as batch workers.
                "tokenization_workers": 0,
                "max_top_k": 1000,
                "max_connections": 512, "header_timeout_ms": 10000, "body_timeout_ms": 30000,
                "idle_timeout_ms": 60000, "shutdown_timeout_ms": 30000
            })
        );

        // POST /v1/embeddings, string input.
        let one = post(&c, &embeddings, &json!({ "input": SENTENCES[4] })).await;
        check_embeddings(&one, &[4], want).unwrap();
        assert_eq!(one.body["object"], "list");
        assert_eq!(one.body["data"][0]["object"], "embedding");
        assert_eq!(one.body["model"], i["model"]);
        assert_eq!(
            one.body["usage"]["prompt_tokens"],
            one.body["usage"]["total_tokens"]
        );

        // Array input, in order; the answer names the served model, not the request's.
        let idx = [5, 22, 9];
        let input: Vec<&str> = idx.iter().map(|&k| SENTENCES[k]).collect();
        let many = post(
            &c,
            &embeddings,
            &json!({ "input": input, "model": "my-model" }),
        )
        .await;
        check_embeddings(&many, &idx, want).unwrap();
        assert_eq!(many.body["model"], i["model"]);

        // base64 of the first 10 components.
        let b64 = post(
            &c,
            &embeddings,
            &json!({ "input": [SENTENCES[7]], "encoding_format": "base64", "dimensions": 10 }),
        )
        .await;
        assert_eq!(b64.status, StatusCode::OK, "{}", b64.body);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(
                b64.body["data"][0]["embedding"]
                    .as_str()
                    .expect("a base64 string"),
            )
            .expect("valid base64");
        let v: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert!(
            max_diff(&v, want.row(7).slice(ndarray::s![..10])) <= TOL,
            "{v:?}"
        );

        // An input over max_len is truncated to 512 tokens and reported.
        let long = "word ".repeat(700);
        let cut = post(&c, &embeddings, &json!({ "input": long })).await;
        assert_eq!(cut.status, StatusCode::OK, "{}", cut.body);
        assert_eq!(cut.body["truncated"], json!([0]));
        assert_eq!(cut.body["usage"]["prompt_tokens"], 512);
        assert_eq!(
            floats(&cut.body["data"][0]["embedding"]).len(),
            want.ncols()
        );

        // POST /similarity, both shapes.
        let sim = post(
            &c,
            &server.url("/similarity"),
            &json!({ "source": SENTENCES[0], "targets": [SENTENCES[16], SENTENCES[2]] }),
        )
        .await;
        assert_eq!(sim.status, StatusCode::OK, "{}", sim.body);
        let scores: Vec<f64> = sim.body["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .collect();
        assert_eq!(scores.len(), 2);
        assert!(
            (scores[0] - cosine(want.row(0), want.row(16))).abs() < 1e-5,
            "{scores:?}"
        );
        assert!(
            (scores[1] - cosine(want.row(0), want.row(2))).abs() < 1e-5,
            "{scores:?}"
        );
        assert!(
            scores[0] > scores[1],
            "guitar/flute should beat guitar/cat: {scores:?}"
        );
        let pairs = post(
            &c,
            &server.url("/similarity"),
            &json!({ "pairs": [[SENTENCES[1], SENTENCES[17]], [SENTENCES[3], SENTENCES[3]]] }),
        )
        .await;
        assert_eq!(pairs.status, StatusCode::OK, "{}", pairs.body);
        let p0 = pairs.body["scores"][0].as_f64().unwrap();
        assert!(
            (p0 - cosine(want.row(1), want.row(17))).abs() < 1e-5,
            "{}",
            pairs.body
        );
        assert!(
            (pairs.body["scores"][1].as_f64().unwrap() - 1.0).abs() < 1e-5,
            "{}",
            pairs.body
        );

        // POST /search: a corpus sentence finds itself first; scores are exact cosines.
        let search = post(
            &c,
            &server.url("/search"),
            &json!({ "query": SENTENCES[16], "top_k": 3 }),
        )
        .await;
        assert_eq!(search.status, StatusCode::OK, "{}", search.body);
        let hits = search.body["results"].as_array().unwrap();
        assert_eq!(hits.len(), 3, "{}", search.body);
        assert_eq!(hits[0]["index"], 4);
        assert_eq!(hits[0]["text"], SENTENCES[16]);
        let mut previous = f64::INFINITY;
        for hit in hits {
            let k = hit["index"].as_u64().unwrap() as usize;
            let score = hit["score"].as_f64().unwrap();
            assert_eq!(hit["text"], SENTENCES[corpus_idx[k]]);
            assert!(
                (score - cosine(want.row(16), want.row(corpus_idx[k]))).abs() < 1e-5,
                "{hit}"
            );
            assert!(score <= previous, "not best first: {}", search.body);
            previous = score;
        }
        let batch = post(
            &c,
            &server.url("/search"),
            &json!({ "queries": ["someone plays an instrument", "a pet is resting"] }),
        )
        .await;
        assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
        let lists = batch.body["results"].as_array().unwrap();
        assert_eq!(lists.len(), 2);
        assert_eq!(
            lists[0].as_array().unwrap().len(),
            corpus_idx.len(),
            "top_k 10 is capped at the corpus size"
        );
        assert_eq!(lists[1][0]["text"], SENTENCES[2], "{}", batch.body);

        // Every error class.
        assert_error(
            &post_bytes(&c, &embeddings, b"{\"input\": ".to_vec()).await,
            400,
            "invalid_json",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": [] })).await,
            400,
            "empty_input",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": "" })).await,
            400,
            "empty_input",
        );
        assert_error(&get(&c, &server.url("/nope")).await, 404, "not_found");
        assert_error(&get(&c, &embeddings).await, 405, "method_not_allowed");
        let too_many = vec!["x"; 257];
        assert_error(
            &post(&c, &embeddings, &json!({ "input": too_many })).await,
            413,
            "too_many_inputs",
        );
        let huge = json!({ "input": "a".repeat(4 * 1024 * 1024) })
            .to_string()
            .into_bytes();
        assert_error(
            &post_bytes(&c, &embeddings, huge).await,
            413,
            "body_too_large",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": "x", "dimensions": 0 })).await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "inputs": "x" })).await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": [1, -2] })).await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &embeddings, &json!({ "input": "a".repeat(10_001) })).await,
            422,
            "input_too_long",
        );
        assert_error(
            &post(
                &c,
                &server.url("/search"),
                &json!({ "query": "x", "top_k": 0 }),
            )
            .await,
            422,
            "invalid_field",
        );
        assert_error(
            &post(&c, &server.url("/similarity"), &json!({ "source": "x" })).await,
            422,
            "invalid_field",
        );

        // Still healthy after all that.
        assert_eq!(get(&c, &server.url("/health")).await.status, StatusCode::OK);
    });
    server.stop();
}
