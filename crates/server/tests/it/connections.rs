//! The connection layer over real sockets: slow and idle clients are closed
//! by the timeouts, more clients than the connection cap do not starve
//! `/health`, `Expect: 100-continue` over the body limit gets 413, every
//! error of the HTTP layer is JSON in the API's shape, and shutdown drops
//! half-sent requests after its timeout.

use crate::common;

use std::time::Duration;

use bertflow_server::{Limits, ServerConfig};
use common::{assert_error, Fake, TestServer};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous bound for "eventually" (the timeouts here are 200-300 ms): a test
/// that hits it has hung.
const HANG: Duration = Duration::from_secs(20);

fn config(limits: Limits) -> ServerConfig {
    ServerConfig {
        limits,
        ..ServerConfig::default()
    }
}

fn short_timeouts() -> Limits {
    Limits {
        header_timeout_ms: 300,
        body_timeout_ms: 300,
        idle_timeout_ms: 300,
        shutdown_timeout_ms: 300,
        ..Limits::default()
    }
}

/// Read until the server closes the connection (or resets it).
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(HANG, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server kept the connection open; read so far: {:?}",
                String::from_utf8_lossy(&all)
            ),
        }
    }
}

/// Status and JSON body of a raw HTTP/1.1 answer.
fn parse_answer(raw: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete answer");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (status, serde_json::from_str(body).expect("a JSON body"))
}

async fn send(s: &TestServer, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_are_closed_and_health_answers_past_the_connection_cap() {
    let s = TestServer::start(
        Fake::new(16),
        config(Limits {
            max_connections: 8,
            ..short_timeouts()
        }),
    )
    .await;
    // Five times the cap, each holding half a request head.
    let mut slow = Vec::new();
    for _ in 0..40 {
        slow.push(send(&s, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ").await);
    }
    let client = reqwest::Client::builder().timeout(HANG).build().unwrap();
    let health = client.get(s.url("/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    for stream in &mut slow {
        // Closed without an answer (the head never completed).
        assert!(read_until_closed(stream).await.is_empty());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_and_an_idle_kept_alive_connection_are_closed() {
    let s = TestServer::start(Fake::new(16), config(short_timeouts())).await;
    let mut silent = TcpStream::connect(s.addr).await.unwrap();
    assert!(read_until_closed(&mut silent).await.is_empty());

    let mut kept = send(&s, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = String::from_utf8_lossy(&read_until_closed(&mut kept).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(r#"{"status":"ok"}"#), "{answer}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_gets_408_json_and_the_connection_closes() {
    let s = TestServer::start(Fake::new(16), config(short_timeouts())).await;
    let mut stream = send(
        &s,
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"input\":",
    )
    .await;
    let (status, body) = parse_answer(&read_until_closed(&mut stream).await);
    assert_error(status, &body, 408, "request_timeout");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_over_the_body_limit_gets_413_not_100() {
    let s = TestServer::start(
        Fake::new(16),
        config(Limits {
            max_body_bytes: 1000,
            ..short_timeouts()
        }),
    )
    .await;
    let mut stream = send(
        &s,
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 50000000\r\n\r\n",
    )
    .await;
    let raw = read_until_closed(&mut stream).await;
    assert!(
        !raw.starts_with(b"HTTP/1.1 100"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
    let (status, body) = parse_answer(&raw);
    assert_error(status, &body, 413, "body_too_large");

    // Within the limit, 100 Continue and then the answer.
    let body = br#"{"input": "a b"}"#;
    let head = format!(
        "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = send(&s, head.as_bytes()).await;
    let mut first = [0u8; 25];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(body).await.unwrap();
    let (status, answer) = parse_answer(&read_until_closed(&mut stream).await);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"].as_array().unwrap().len(), 1);

    // Without `Expect`, a body a little over the limit is read and dropped
    // first, so that the client, still sending, reads the 413.
    let mut request =
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 3000\r\n\r\n"
            .to_vec();
    request.extend(vec![b' '; 3000]);
    let mut stream = send(&s, &request).await;
    let (status, body) = parse_answer(&read_until_closed(&mut stream).await);
    assert_error(status, &body, 413, "body_too_large");

    // A streamed (chunked) body that grows past the limit: 413 too.
    let mut stream = send(
        &s,
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await;
    let chunk = format!("{:x}\r\n{}\r\n", 2000, "x".repeat(2000));
    let _ = stream.write_all(chunk.as_bytes()).await;
    let (status, body) = parse_answer(&read_until_closed(&mut stream).await);
    assert_error(status, &body, 413, "body_too_large");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_of_the_http_parser_are_json() {
    let s = TestServer::start(Fake::new(16), config(short_timeouts())).await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"NOT A REQUEST\r\n\r\n".to_vec(), 400, "bad_request"),
        (
            b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            {
                let mut r = b"GET /health HTTP/1.1\r\nHost: x\r\n".to_vec();
                for i in 0..200 {
                    r.extend(format!("X-H{i}: v\r\n").as_bytes());
                }
                r.extend(b"\r\n");
                r
            },
            431,
            "headers_too_large",
        ),
        (
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000)).into_bytes(),
            414,
            "uri_too_long",
        ),
    ];
    for (request, want_status, want_code) in cases {
        let mut stream = send(&s, &request).await;
        let (status, body) = parse_answer(&read_until_closed(&mut stream).await);
        assert_error(status, &body, want_status, want_code);
    }
    // The server still answers.
    let (status, _) = s.get("/health").await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_finished_requests_and_drops_half_sent_ones() {
    let mut s = TestServer::start(
        Fake::new(16),
        config(Limits {
            // Only the shutdown timeout can end these requests.
            header_timeout_ms: 600_000,
            body_timeout_ms: 600_000,
            idle_timeout_ms: 600_000,
            shutdown_timeout_ms: 300,
            ..Limits::default()
        }),
    )
    .await;
    let mut half_body = send(
        &s,
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"in",
    )
    .await;
    let mut half_head = send(&s, b"GET /health HTTP/1.1\r\nHost: x\r\n").await;
    // A complete request on a kept-alive connection, answered before shutdown.
    let mut complete = send(&s, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut first = [0u8; 15];
    complete.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200 OK");

    s.trigger_shutdown();
    let result = tokio::time::timeout(HANG, &mut s.handle)
        .await
        .expect("shutdown waited for the half-sent requests")
        .expect("server task panicked");
    result.expect("serve returned an error");
    read_until_closed(&mut half_body).await;
    assert!(read_until_closed(&mut half_head).await.is_empty());
    read_until_closed(&mut complete).await;
}
