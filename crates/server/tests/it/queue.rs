//! The one inference queue, over real HTTP: every route that runs the model
//! (text and token-id embeddings, `/embed_all`, `/similarity`, `POST /`,
//! `/rerank`, `/predict`) is admitted by tokens and refused at once (429)
//! when the queue cannot take it; a client that goes away takes its inputs
//! out of the queue (the /metrics gauges say so) and they never run; batches
//! group inputs of similar length and the padding is counted.
use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bertflow_server::{Limits, ServerConfig};
use common::tei::{assert_tei_error, FakeReranker, TeiFake};
use common::{assert_error, Fake, TestServer};
use serde_json::{json, Value};

/// A server whose queue holds at most `tokens` tokens.
fn tiny_queue(tokens: usize) -> ServerConfig {
    ServerConfig {
        limits: Limits {
            max_queue_tokens: tokens,
            ..Limits::default()
        },
        ..ServerConfig::default()
    }
}

/// The value of an unlabelled series in `GET /metrics`.
async fn metric(s: &TestServer, name: &str) -> f64 {
    let text = s
        .client
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| {
            let (series, value) = line.split_once(' ')?;
            (series == name).then(|| value.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no series {name} in:\n{text}"))
}

/// Poll /metrics until `name` equals `want` (panics after 10 s).
async fn wait_metric(s: &TestServer, name: &str, want: f64) {
    for _ in 0..1000 {
        if metric(s, name).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{name} never reached {want} (now {})",
        metric(s, name).await
    );
}

/// POST and time the answer.
async fn timed(s: &TestServer, path: &str, body: &Value) -> (u16, Value, Duration) {
    let start = Instant::now();
    let (status, body) = s.post(path, body).await;
    (status, body, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_embedding_route_is_admitted_by_tokens_and_refused_at_once() {
    let fake = TeiFake::new(512);
    fake.0.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), tiny_queue(8)).await);
    // One request runs (held by the gate), one waits with 5 tokens.
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/embed", &json!({"inputs": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    let queued = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/embed", &json!({"inputs": "a b c"})).await }
    });
    s.wait_load(|l| l["queued_tokens"] == 5).await;

    // Each of these needs more than the 3 tokens left: 429 at once, in
    // TEI's shape on TEI's routes and OpenAI's on bertflow's.
    // (Each fits the whole budget of 8: a request over it is a 413, see admission.rs.)
    let ids: Vec<u32> = vec![1001; 4];
    let tei_cases = [
        ("/embed", json!({ "inputs": ids })),
        ("/embed", json!({ "inputs": [ids, ids] })),
        ("/", json!({ "inputs": [ids] })),
        ("/embed_all", json!({"inputs": "one two three four five"})),
        (
            "/similarity",
            json!({"inputs": {"source_sentence": "x y", "sentences": ["z w"]}}),
        ),
        ("/embed", json!({"inputs": "p q r s"})),
    ];
    for (path, body) in &tei_cases {
        let (status, answer, took) = timed(&s, path, body).await;
        assert_tei_error(status, &answer, 429, "Overloaded");
        assert!(took < Duration::from_secs(5), "{path}: {took:?}");
    }
    let openai_cases = [
        ("/v1/embeddings", json!({ "input": [ids] })),
        ("/v1/embeddings", json!({"input": "p q r s"})),
        ("/similarity", json!({"pairs": [["x y", "z w"]]})),
    ];
    for (path, body) in &openai_cases {
        let (status, answer, took) = timed(&s, path, body).await;
        assert_error(status, &answer, 429, "overloaded");
        assert!(took < Duration::from_secs(5), "{path}: {took:?}");
    }
    // Nothing refused was queued; the two admitted requests are answered.
    let (_, info) = s.get("/info").await;
    assert_eq!(info["load"]["queued_tokens"], 5, "{info}");
    assert_eq!(info["load"]["tokenizing_inputs"], 0, "{info}");
    fake.0.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    assert_eq!(queued.await.unwrap().0, 200);
    // With room again, the same requests run.
    for (path, body) in &tei_cases {
        let (status, answer) = s.post(path, body).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_and_predict_are_admitted_by_tokens_and_refused_at_once() {
    let fake = FakeReranker::new(512, &["LABEL_0"]);
    fake.fake.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), tiny_queue(8)).await);
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move {
            s.post("/rerank", &json!({"query": "q", "texts": ["a"]}))
                .await
        }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // [CLS] a b [SEP]: 4 tokens wait.
    let queued = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/predict", &json!({"inputs": "a b"})).await }
    });
    s.wait_load(|l| l["queued_tokens"] == 4).await;
    let cases = [
        ("/rerank", json!({"query": "q r", "texts": ["s t"]})),
        ("/", json!({"query": "q r", "texts": ["s t"]})),
        ("/predict", json!({"inputs": [["a b", "c d"]]})),
        ("/predict", json!({"inputs": "one two three"})),
    ];
    for (path, body) in &cases {
        let (status, answer, took) = timed(&s, path, body).await;
        assert_tei_error(status, &answer, 429, "Overloaded");
        assert!(took < Duration::from_secs(5), "{path}: {took:?}");
    }
    fake.fake.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    assert_eq!(queued.await.unwrap().0, 200);
    for (path, body) in &cases {
        let (status, answer) = s.post(path, body).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_takes_its_inputs_out_of_the_queue() {
    let fake = TeiFake::new(512);
    fake.0.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), ServerConfig::default()).await);
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/embed", &json!({"inputs": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // Three routes' requests wait: 2 + 1 + 1 inputs.
    let gone: Vec<_> = [
        ("/v1/embeddings", json!({"input": ["gone one", "gone two"]})),
        ("/embed_all", json!({"inputs": "gone three"})),
        ("/embed", json!({"inputs": [[1001, 1002, 1003]]})),
    ]
    .into_iter()
    .map(|(path, body)| {
        let s = Arc::clone(&s);
        tokio::spawn(async move { s.post(path, &body).await })
    })
    .collect();
    wait_metric(&s, "bertflow_queue_inputs", 4.0).await;
    assert_eq!(metric(&s, "bertflow_queue_requests").await, 3.0);
    // Their clients go away (the connections close).
    for task in &gone {
        task.abort();
    }
    wait_metric(&s, "bertflow_queue_inputs", 0.0).await;
    assert_eq!(metric(&s, "bertflow_queue_requests").await, 0.0);
    assert_eq!(metric(&s, "bertflow_queue_tokens").await, 0.0);
    assert_eq!(metric(&s, "bertflow_requests_cancelled_total").await, 3.0);
    fake.0.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    // None of them ran.
    let kept = s.post("/embed", &json!({"inputs": "kept"})).await;
    assert_eq!(kept.0, 200);
    let ran: Vec<String> = fake.0.batches().concat();
    assert_eq!(ran, ["first", "kept"]);
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_pairs_of_a_client_gone_are_not_scored() {
    let fake = FakeReranker::new(512, &["LABEL_0"]);
    fake.fake.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), ServerConfig::default()).await);
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/predict", &json!({"inputs": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    let texts: Vec<String> = (0..64).map(|i| format!("text number {i}")).collect();
    let gone = tokio::spawn({
        let s = Arc::clone(&s);
        async move {
            s.post("/rerank", &json!({"query": "q", "texts": texts}))
                .await
        }
    });
    wait_metric(&s, "bertflow_queue_inputs", 64.0).await;
    gone.abort();
    wait_metric(&s, "bertflow_queue_inputs", 0.0).await;
    fake.fake.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    // Only the first request's one input was scored.
    assert_eq!(fake.truncate_seen.lock().unwrap().len(), 1);
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_group_inputs_of_similar_length_and_count_the_padding() {
    let fake = Fake::new(512);
    fake.gate.set_closed(true);
    let config = ServerConfig {
        limits: Limits {
            max_batch_size: 2,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = Arc::new(TestServer::start(fake.clone(), config).await);
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/v1/embeddings", &json!({"input": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // Short, long, short, long: batches of two pair the short ones and the long ones.
    let long = "w ".repeat(40);
    let inputs = json!(["s1", long.clone() + "1", "s2", long.clone() + "2"]);
    let queued = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/v1/embeddings", &json!({ "input": inputs })).await }
    });
    s.wait_load(|l| l["queued_inputs"] == 4).await;
    fake.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    let (status, body) = queued.await.unwrap();
    assert_eq!(status, 200, "{body}");
    // The answer keeps input order whatever the batches.
    let batches = fake.batches();
    assert_eq!(batches.len(), 3, "{batches:?}");
    assert_eq!(batches[1], ["s1", "s2"]);
    assert!(batches[2].iter().all(|t| t.starts_with("w w")));
    // No padding: each batch held inputs of one length.
    assert_eq!(metric(&s, "bertflow_batch_padding_tokens_total").await, 0.0);
    assert!(metric(&s, "bertflow_batch_tokens_total").await > 80.0);
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_load_ends_within_the_timeout_even_with_a_batch_stuck() {
    let fake = TeiFake::new(512);
    fake.0.gate.set_closed(true);
    let config = ServerConfig {
        limits: Limits {
            shutdown_timeout_ms: 1000,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let mut s = TestServer::start(fake.clone(), config).await;
    let client = s.client.clone();
    // A batch that never ends (the gate stays closed), and every route queued behind it.
    let bodies = [
        ("/embed", json!({"inputs": "stuck"})),
        ("/embed", json!({"inputs": [[1001, 1002]]})),
        ("/embed_all", json!({"inputs": "a b"})),
        ("/v1/embeddings", json!({"input": ["c", "d"]})),
    ];
    let mut clients = Vec::new();
    for (path, body) in bodies {
        let (client, url) = (client.clone(), s.url(path));
        clients.push(tokio::spawn(async move {
            client.post(url).json(&body).send().await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.wait_load(|l| l["busy_workers"] == 1 && l["queued_requests"] == 3)
        .await;
    let start = Instant::now();
    s.trigger_shutdown();
    let result = tokio::time::timeout(Duration::from_secs(5), &mut s.handle)
        .await
        .expect("serve did not return within 5 s of the signal")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
    // Every client got an answer or a closed connection; none hangs.
    for task in clients {
        let _ = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("a client still waits after the server stopped");
    }
    fake.0.gate.set_closed(false);
}
