//! Dynamic batching under concurrency, splitting, back-pressure (429) and
//! graceful shutdown, over real HTTP.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bertflow_server::ServerConfig;
use common::{assert_error, floats, vector_of, Fake, TestServer};
use serde_json::{json, Value};

fn texts_for(client: usize, request: usize) -> Vec<String> {
    let n = 1 + (client + request) % 3;
    (0..n)
        .map(|k| {
            let words = 1 + (client * 7 + request * 3 + k) % 9;
            let filler = vec!["w"; words].join(" ");
            format!("client {client} request {request} item {k} {filler}")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_their_own_vectors_and_requests_are_batched() {
    let fake = Arc::new(Fake::with(512, Duration::from_millis(2)));
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_batch_tokens: 256,
            max_batch_size: 32,
            max_queue_inputs: 4096,
            workers: 2,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = Arc::new(TestServer::start(fake.clone(), config).await);
    let reference = Fake::new(512);

    let mut tasks = Vec::new();
    for client in 0..64 {
        let s = Arc::clone(&s);
        let reference = Arc::clone(&reference);
        tasks.push(tokio::spawn(async move {
            let mut inputs = 0;
            for request in 0..20 {
                let texts = texts_for(client, request);
                let (status, body) = s.post("/v1/embeddings", &json!({"input": texts})).await;
                assert_eq!(status, 200, "{body}");
                let direct = reference.embed_texts(&texts);
                let data = body["data"].as_array().unwrap();
                assert_eq!(data.len(), texts.len());
                for (i, (item, want)) in data.iter().zip(&direct).enumerate() {
                    assert_eq!(item["index"], i);
                    assert_eq!(
                        floats(item),
                        want.vector,
                        "client {client} request {request}"
                    );
                }
                let tokens: usize = direct.iter().map(|e| e.tokens).sum();
                assert_eq!(body["usage"]["prompt_tokens"], tokens);
                inputs += texts.len();
            }
            inputs
        }));
    }
    let mut sent = 0;
    for task in tasks {
        sent += task.await.unwrap();
    }

    let batches = fake.batches();
    let seen: usize = batches.iter().map(Vec::len).sum();
    assert_eq!(seen, sent, "every input embedded exactly once");
    let distinct: HashSet<&String> = batches.iter().flatten().collect();
    assert_eq!(distinct.len(), sent);
    for batch in &batches {
        assert!(batch.len() <= 32);
        let tokens: usize = batch.iter().map(|t| reference.tokenize_len(t)).sum();
        assert!(tokens <= 256 || batch.len() == 1, "batch over budget");
    }
    // Dynamic batching happened: some batch mixed inputs of several requests.
    let mixed = batches.iter().any(|batch| {
        let requests: HashSet<String> = batch
            .iter()
            .map(|t| t.split(" item ").next().unwrap_or("").to_owned())
            .collect();
        requests.len() > 1
    });
    assert!(mixed, "no batch held more than one request");
    assert!(batches.len() < sent, "one batch per input: no batching");
    match Arc::try_unwrap(s) {
        Ok(s) => s.stop().await,
        Err(_) => panic!("server handle still shared"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_are_packed_into_one_batch() {
    let fake = Fake::new(512);
    fake.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), ServerConfig::default()).await);
    // The first request occupies the worker...
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/v1/embeddings", &json!({"input": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // ...while three more queue up.
    let mut rest = Vec::new();
    for i in 0..3 {
        let s = Arc::clone(&s);
        rest.push(tokio::spawn(async move {
            let texts = vec![format!("queued {i} a"), format!("queued {i} b")];
            let (status, body) = s.post("/v1/embeddings", &json!({"input": texts})).await;
            (texts, status, body)
        }));
    }
    s.wait_load(|l| l["queued_requests"] == 3 && l["queued_inputs"] == 6)
        .await;
    fake.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    for task in rest {
        let (texts, status, body) = task.await.unwrap();
        assert_eq!(status, 200, "{body}");
        for (item, text) in body["data"].as_array().unwrap().iter().zip(&texts) {
            assert_eq!(floats(item), vector_of(text));
        }
    }
    let batches = fake.batches();
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!(
        batches[1].len(),
        6,
        "the three queued requests share one batch"
    );
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_are_split_under_size_and_token_budget() {
    let fake = Fake::new(512);
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_batch_size: 3,
            max_batch_tokens: 13,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = TestServer::start(fake.clone(), config).await;
    // 10 inputs of 6 tokens each (4 words + 2): two fit in 13 tokens.
    let texts: Vec<String> = (0..10).map(|i| format!("input {i} four words")).collect();
    let (status, body) = s.post("/v1/embeddings", &json!({"input": texts})).await;
    assert_eq!(status, 200, "{body}");
    let data = body["data"].as_array().unwrap();
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(data[i]["index"], i);
        assert_eq!(floats(&data[i]), vector_of(text));
    }
    let batches = fake.batches();
    assert_eq!(batches.len(), 5, "{batches:?}");
    assert!(batches.iter().all(|b| b.len() == 2));
    assert_eq!(batches.concat(), texts);

    // Short inputs (3 tokens) are limited by the batch size instead.
    let before = fake.batches().len();
    let short: Vec<String> = (0..7).map(|i| format!("s{i}")).collect();
    let (status, _) = s.post("/v1/embeddings", &json!({"input": short})).await;
    assert_eq!(status, 200);
    let sizes: Vec<usize> = fake.batches()[before..].iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![3, 3, 1]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_input_does_not_fail_the_requests_batched_with_it() {
    let fake = Fake::new(512);
    fake.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), ServerConfig::default()).await);
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/v1/embeddings", &json!({"input": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    let bad = tokio::spawn({
        let s = Arc::clone(&s);
        async move {
            s.post("/v1/embeddings", &json!({"input": ["ok", "FAIL me"]}))
                .await
        }
    });
    s.wait_load(|l| l["queued_requests"] == 1).await;
    let good = tokio::spawn({
        let s = Arc::clone(&s);
        async move {
            s.post("/v1/embeddings", &json!({"input": "innocent"}))
                .await
        }
    });
    s.wait_load(|l| l["queued_requests"] == 2).await;
    fake.gate.set_closed(false);
    assert_eq!(first.await.unwrap().0, 200);
    let (status, body) = bad.await.unwrap();
    assert_error(status, &body, 500, "backend_error");
    let (status, body) = good.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(floats(&body["data"][0]), vector_of("innocent"));
    // They really were batched together first.
    assert!(fake.batches()[1].len() == 3, "{:?}", fake.batches());
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_answers_429_promptly_and_the_rest_succeed() {
    let fake = Fake::new(512);
    fake.gate.set_closed(true); // a backend slower than the test
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_inputs_per_request: 1,
            max_queue_inputs: 2,
            max_batch_size: 1,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = Arc::new(TestServer::start(fake.clone(), config).await);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, u16, Value)>();
    let send = |i: usize| {
        let s = Arc::clone(&s);
        let tx = tx.clone();
        tokio::spawn(async move {
            let (status, body) = s
                .post("/v1/embeddings", &json!({"input": format!("burst {i}")}))
                .await;
            let _ = tx.send((i, status, body));
        });
    };
    // The first request occupies the (stuck) worker...
    send(0);
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // ...then a burst of 31: two fit in the queue, 29 are refused while the
    // backend is still stuck, i.e. without waiting for it.
    for i in 1..32 {
        send(i);
    }
    drop(tx);
    for _ in 0..29 {
        let (_, status, body) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a 429 did not come back promptly")
            .expect("channel closed");
        assert_error(status, &body, 429, "overloaded");
        assert_eq!(body["error"]["type"], "rate_limit_error");
    }
    fake.gate.set_closed(false);
    let mut ok = 0;
    while let Some((i, status, body)) = rx.recv().await {
        assert_eq!(status, 200, "{body}");
        assert_eq!(floats(&body["data"][0]), vector_of(&format!("burst {i}")));
        ok += 1;
    }
    assert_eq!(ok, 3);
    assert_eq!(fake.started.load(Ordering::SeqCst), 3);
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_sends_retry_after() {
    let fake = Fake::new(512);
    fake.gate.set_closed(true);
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_inputs_per_request: 2,
            max_queue_inputs: 2,
            max_batch_size: 1,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = Arc::new(TestServer::start(fake.clone(), config).await);
    let held = tokio::spawn({
        let s = Arc::clone(&s);
        async move {
            s.post("/v1/embeddings", &json!({"input": ["a", "b", ]}))
                .await
        }
    });
    // "a" runs, "b" waits: one queued input, so two more cannot fit.
    s.wait_load(|l| l["busy_workers"] == 1 && l["queued_inputs"] == 1)
        .await;
    let response = s
        .client
        .post(s.url("/v1/embeddings"))
        .json(&json!({"input": ["c", "d"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    fake.gate.set_closed(false);
    let (status, body) = held.await.unwrap();
    assert_eq!(status, 200, "{body}");
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_requests_in_flight() {
    let fake = Arc::new(Fake::with(512, Duration::from_millis(20)));
    fake.gate.set_closed(true);
    let config = ServerConfig {
        limits: bertflow_server::Limits {
            max_batch_size: 1,
            ..bertflow_server::Limits::default()
        },
        ..ServerConfig::default()
    };
    let mut s = TestServer::start(fake.clone(), config).await;
    let client = s.client.clone();
    let url = s.url("/v1/embeddings");
    let mut tasks = Vec::new();
    for i in 0..5 {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let text = format!("in flight {i}");
            let response = client
                .post(url)
                .json(&json!({"input": text}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (text, status, body)
        }));
    }
    // One running, four queued for the worker.
    s.wait_load(|l| l["busy_workers"] == 1 && l["queued_requests"] == 4)
        .await;
    s.trigger_shutdown();
    // New connections are refused once shutdown has begun...
    let mut refused = false;
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(s.addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "still accepting connections after shutdown");
    // ...but the server waits for the requests it has.
    assert!(
        !s.handle.is_finished(),
        "serve returned with requests in flight"
    );
    fake.gate.set_closed(false);
    for task in tasks {
        let (text, status, body) = task.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(floats(&body["data"][0]), vector_of(&text));
    }
    let result = tokio::time::timeout(Duration::from_secs(10), s.handle)
        .await
        .expect("serve did not return after shutdown")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(fake.started.load(Ordering::SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_abandoned_by_their_client_are_not_embedded() {
    let fake = Fake::new(512);
    fake.gate.set_closed(true);
    let s = Arc::new(TestServer::start(fake.clone(), ServerConfig::default()).await);
    let first = tokio::spawn({
        let s = Arc::clone(&s);
        async move { s.post("/v1/embeddings", &json!({"input": "first"})).await }
    });
    s.wait_load(|l| l["busy_workers"] == 1).await;
    // A client that gives up while its request waits in the queue.
    let impatient = s
        .client
        .post(s.url("/v1/embeddings"))
        .json(&json!({"input": "abandoned"}))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(impatient.is_err(), "the request should still be queued");
    let (status, body) = {
        let kept = tokio::spawn({
            let s = Arc::clone(&s);
            async move { s.post("/v1/embeddings", &json!({"input": "kept"})).await }
        });
        // The abandoned request left the queue with its client: only the
        // kept one waits, and nothing is still being tokenized (under load
        // the server may notice the closed connection only after tokenizing
        // it, queueing it for a moment before its cancellation).
        s.wait_load(|l| {
            l["queued_requests"] == 1 && l["queued_inputs"] == 1 && l["tokenizing_inputs"] == 0
        })
        .await;
        fake.gate.set_closed(false);
        assert_eq!(first.await.unwrap().0, 200);
        kept.await.unwrap()
    };
    assert_eq!(status, 200, "{body}");
    let embedded: Vec<String> = fake.batches().concat();
    assert_eq!(embedded, vec!["first".to_owned(), "kept".to_owned()]);
    Arc::try_unwrap(s).ok().expect("unshared").stop().await;
}
