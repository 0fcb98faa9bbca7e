//! `bertflow serve` under load, end to end (the real binary and model, driven
//! over HTTP; fixtures and helpers in common/serve.rs): many concurrent clients
//! get exactly the vectors of `bertflow encode`, raw and calibrated, packed into
//! shared batches; a tiny queue answers 429 promptly and loses nothing; SIGTERM
//! answers every request in flight, then exits 0.
//!
//! The tests take a global lock so that they run one at a time: they share two
//! cores, and the overload and shutdown tests reason about a busy server.
use crate::common;

use common::serve::{
    assert_error, check_embeddings, client, get, post, reference, runtime, serial, Server,
    SENTENCES,
};
use ndarray::Array2;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Load generation

/// Deterministic pseudo-random numbers (splitmix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % n as u64) as usize
    }
}

/// `clients` concurrent clients, each sending `per_client` requests of 1-3
/// sentences (a bare string or an array) to /v1/embeddings; every vector is
/// checked against `want`. Returns (vectors checked, largest difference).
async fn hammer(base: &str, want: &Array2<f32>, clients: usize, per_client: usize) -> (usize, f32) {
    let url = format!("{base}/v1/embeddings");
    let want = Arc::new(want.clone());
    let client = client();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (url, want, client) = (url.clone(), Arc::clone(&want), client.clone());
            tokio::spawn(async move {
                let mut rng = Rng(c as u64);
                let (mut vectors, mut worst) = (0usize, 0f32);
                for r in 0..per_client {
                    let k = 1 + rng.below(3);
                    let idx: Vec<usize> = (0..k).map(|_| rng.below(SENTENCES.len())).collect();
                    let input = if k == 1 && r % 2 == 0 {
                        json!(SENTENCES[idx[0]])
                    } else {
                        json!(idx.iter().map(|&i| SENTENCES[i]).collect::<Vec<_>>())
                    };
                    let reply = post(&client, &url, &json!({ "input": input })).await;
                    match check_embeddings(&reply, &idx, &want) {
                        Ok(d) => worst = worst.max(d),
                        Err(e) => return Err(format!("client {c} request {r} {idx:?}: {e}")),
                    }
                    vectors += k;
                }
                Ok((vectors, worst))
            })
        })
        .collect();
    let (mut vectors, mut worst) = (0, 0f32);
    let mut failures = Vec::new();
    for task in tasks {
        match task.await.expect("client task panicked") {
            Ok((v, w)) => {
                vectors += v;
                worst = worst.max(w);
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {clients} clients failed, e.g. {}",
        failures.len(),
        failures[0]
    );
    (vectors, worst)
}

/// Vectors each client of [`hammer`] should get back (same random draws).
fn expected_vectors(clients: usize, per_client: usize) -> usize {
    (0..clients)
        .map(|c| {
            let mut rng = Rng(c as u64);
            (0..per_client)
                .map(|_| {
                    let k = 1 + rng.below(3);
                    (0..k).for_each(|_| {
                        rng.below(SENTENCES.len());
                    });
                    k
                })
                .sum::<usize>()
        })
        .sum()
}

// ---------------------------------------------------------------------------
// Tests

/// 16 clients of 8 requests (then 4 calibrated): enough to pack batches.
#[test]
fn concurrent_clients_get_the_vectors_of_bertflow_encode_raw_and_calibrated_ci() {
    concurrent_clients(16, 8, 4);
}

#[test]
#[ignore = "slow: 64 clients of 20 requests; run scripts/slow-tests.sh"]
fn concurrent_clients_get_the_vectors_of_bertflow_encode_raw_and_calibrated() {
    concurrent_clients(64, 20, 6);
}

/// `clients` concurrent clients of `per_client` requests against a server
/// without a calibrator, then of `calibrated_per_client` against one with.
fn concurrent_clients(clients: usize, per_client: usize, calibrated_per_client: usize) {
    let _serial = serial();
    let reference = reference();
    let expected = expected_vectors(clients, per_client);

    // Raw vectors; this server has no corpus.
    let server = Server::start(&[]);
    runtime().block_on(async {
        let c = client();
        let search = post(&c, &server.url("/search"), &json!({ "query": "anything" })).await;
        assert_error(&search, 404, "no_corpus");

        let (vectors, worst) = hammer(&server.base, &reference.raw, clients, per_client).await;
        assert_eq!(vectors, expected, "vectors lost");
        eprintln!("raw: {vectors} vectors, largest difference from bertflow encode {worst:e}");

        let load = get(&c, &server.url("/info")).await.body["load"].clone();
        assert_eq!(load["queued_inputs"], 0, "{load}");
        let batches = load["batches"].as_u64().unwrap();
        assert!(
            batches > 0 && batches < (clients * per_client) as u64,
            "{batches} batches for {} requests: concurrent requests were not packed together",
            clients * per_client
        );
    });
    server.stop();

    // Calibrated vectors (whitening fitted for "another model": --allow-mismatch).
    let calib = reference.path("whiten.safetensors");
    let server = Server::start(&["--calibrator", calib.to_str().unwrap(), "--allow-mismatch"]);
    assert!(
        server.log().contains("warning"),
        "no mismatch warning:\n{}",
        server.log()
    );
    runtime().block_on(async {
        let c = client();
        let info = get(&c, &server.url("/info")).await.body;
        assert!(info["calibrator"].as_str().is_some_and(|d| d.contains("whiten")), "{info}");
        assert_eq!(info["dimension"], reference.calibrated_dim, "{info}");

        // Fewer requests per client: the batching was exercised above; this checks
        // that the calibrator is applied to every vector of every batch.
        let per_client = calibrated_per_client;
        let (vectors, worst) = hammer(&server.base, &reference.calibrated, clients, per_client).await;
        assert_eq!(vectors, expected_vectors(clients, per_client), "vectors lost");
        eprintln!("calibrated: {vectors} vectors, largest difference from bertflow encode --calibrator {worst:e}");
    });
    server.stop();
}

/// Long sentences, so that a worker is busy for a while with each input.
const LONG: &[usize] = &[10, 18, 22, 25, 28, 34, 39];

#[test]
fn tiny_queue_answers_429_promptly_and_loses_nothing() {
    let _serial = serial();
    let want = &reference().raw;
    let server = Server::start(&[
        "--workers",
        "1",
        "--max-batch-size",
        "1",
        "--max-queue-inputs",
        "4",
        "--max-inputs-per-request",
        "4",
    ]);
    runtime().block_on(async {
        let c = client();
        let url = server.url("/v1/embeddings");
        let burst = 40;
        let tasks: Vec<_> = (0..burst)
            .map(|r| {
                let (c, url) = (c.clone(), url.clone());
                let idx = vec![LONG[r % LONG.len()], LONG[(r + 3) % LONG.len()]];
                tokio::spawn(async move {
                    let start = Instant::now();
                    let input: Vec<&str> = idx.iter().map(|&i| SENTENCES[i]).collect();
                    let reply = post(&c, &url, &json!({ "input": input })).await;
                    (idx, reply, start.elapsed())
                })
            })
            .collect();
        let (mut ok, mut overloaded) = (0, 0);
        for task in tasks {
            let (idx, reply, elapsed) = task.await.expect("client task panicked");
            match reply.status.as_u16() {
                200 => {
                    check_embeddings(&reply, &idx, want).unwrap();
                    ok += 1;
                }
                429 => {
                    assert_error(&reply, 429, "overloaded");
                    assert_eq!(reply.body["error"]["type"], "rate_limit_error");
                    assert_eq!(reply.retry_after.as_deref(), Some("1"));
                    assert!(elapsed < Duration::from_secs(5), "a 429 took {elapsed:?}");
                    overloaded += 1;
                }
                other => panic!("status {other}: {}", reply.body),
            }
        }
        assert_eq!(ok + overloaded, burst);
        assert!(
            ok >= 1 && overloaded >= 1,
            "{ok} answered 200 and {overloaded} 429 out of {burst}"
        );
        eprintln!("burst of {burst}: {ok} x 200, {overloaded} x 429");

        // Nothing left behind, and the server still serves.
        let load = get(&c, &server.url("/info")).await.body["load"].clone();
        assert_eq!(load["queued_inputs"], 0, "{load}");
        let after = post(&c, &url, &json!({ "input": [SENTENCES[0]] })).await;
        check_embeddings(&after, &[0], want).unwrap();
    });
    server.stop();
}

#[test]
fn sigterm_answers_every_request_in_flight_then_exits_zero() {
    let _serial = serial();
    let want = &reference().raw;
    // One input per batch on one worker: the requests queue up behind each other.
    let mut server = Server::start(&["--workers", "1", "--max-batch-size", "1"]);
    let rt = runtime();
    let c = client();
    let requests = 12;
    let per_request = 3;
    let url = server.url("/v1/embeddings");
    let tasks: Vec<_> = (0..requests)
        .map(|r| {
            let (c, url) = (c.clone(), url.clone());
            let idx: Vec<usize> = (0..per_request)
                .map(|k| LONG[(r + 2 * k) % LONG.len()])
                .collect();
            rt.spawn(async move {
                let input: Vec<&str> = idx.iter().map(|&i| SENTENCES[i]).collect();
                let reply = post(&c, &url, &json!({ "input": input })).await;
                (idx, reply)
            })
        })
        .collect();

    // Wait until the server has received every input (queued, running or done),
    // with work still queued.
    let total = (requests * per_request) as u64;
    let info_url = server.url("/info");
    let queued = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let load = get(&c, &info_url).await.body["load"].clone();
            let count = |k: &str| load[k].as_u64().unwrap_or(0);
            if count("queued_inputs") + count("busy_workers") + count("batches") == total {
                return count("queued_inputs");
            }
            assert!(
                Instant::now() < deadline,
                "the server never received every request: {load}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(
        queued > 0,
        "every request finished before SIGTERM: nothing was in flight"
    );

    server.sigterm();
    rt.block_on(async {
        for task in tasks {
            let (idx, reply) = task.await.expect("client task panicked");
            check_embeddings(&reply, &idx, want).unwrap();
        }
    });
    let status = server.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit status {status}; stderr:\n{}",
        server.log()
    );
    // The stderr reader may lag the exit a little.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log().contains("server stopped") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.log().contains("server stopped"), "{}", server.log());
    eprintln!("SIGTERM with {queued} of {total} inputs still queued: all answered 200, exit 0");
}
