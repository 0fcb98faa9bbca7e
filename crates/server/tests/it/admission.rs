//! Admission counts tokens (after truncation), not only inputs: clients with
//! long inputs get 429 at once when the queued work is full, rather than
//! waiting to time out; short inputs still get in.

use crate::common;

use std::sync::Arc;

use bertflow_server::{Limits, ServerConfig};
use common::{assert_error, Fake, TestServer};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_inputs_past_the_queued_token_budget_get_429_at_once() {
    // max_len 40: a text of 100 words costs 40 tokens after truncation.
    let fake = Fake::new(40);
    fake.gate.set_closed(true);
    let config = ServerConfig {
        limits: Limits {
            max_queue_tokens: 100,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = Arc::new(TestServer::start(fake.clone(), config).await);
    let long = vec!["word ".repeat(100); 1];
    let post = |body: serde_json::Value| {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.post("/v1/embeddings", &body).await })
    };
    // Taken by the worker (held at the gate): no longer queued.
    let running = post(json!({ "input": long }));
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // Two long inputs queued: 80 of 100 tokens.
    let queued = post(json!({ "input": [long[0].clone(), long[0].clone()] }));
    s.wait_load(|l| l["queued_requests"] == 1).await;
    // One more long input (40 tokens) does not fit: 429 now, not a timeout.
    for _ in 0..5 {
        let (status, body) = s.post("/v1/embeddings", &json!({ "input": long })).await;
        assert_error(status, &body, 429, "overloaded");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("80 of at most 100 tokens") && message.contains("40 more"),
            "{message}"
        );
    }
    // A short input (3 tokens) still fits.
    let short = post(json!({ "input": "a b c" }));
    s.wait_load(|l| l["queued_requests"] == 2).await;
    fake.gate.set_closed(false);
    for request in [running, queued, short] {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    // The queue is empty again, yet a request over the whole budget (3 x 40
    // tokens) could never fit: 413 naming the limit, not a long lone run.
    let big = vec!["word ".repeat(100); 3];
    let (status, body) = s.post("/v1/embeddings", &json!({ "input": big })).await;
    assert_error(status, &body, 413, "request_too_large");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("120 tokens") && message.contains("--max-queue-tokens"),
        "{message}"
    );
    // TEI's routes say so in TEI's shape; token ids count their length.
    let (status, body) = s.post("/embed", &json!({ "inputs": big })).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error_type"], "Validation", "{body}");
    let ids: Vec<Vec<u32>> = vec![(1..=40).collect(); 3];
    let (status, body) = s.post("/embed", &json!({ "inputs": ids })).await;
    assert_eq!(status, 413, "{body}");
    // Within the budget (80 of 100) it runs.
    let fits = vec!["word ".repeat(100), "word ".repeat(100)];
    let (status, body) = s.post("/v1/embeddings", &json!({ "input": fits })).await;
    assert_eq!(status, 200, "{body}");
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}
