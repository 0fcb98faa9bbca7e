//! The server's JSON request bodies, through the whole request path: the
//! real router (`bertflow_server::App`) driven in-process, with a small
//! deterministic backend and a corpus to search. Every answer must be a
//! success or an error in the API's shape, never a 500 or a panic.
//!
//! Mode byte (the first): bits 0-1 pick the endpoint (`/v1/embeddings`,
//! `/similarity`, `/search`, `/tokenize`); with bit 2 set, the rest's first
//! line is sent as the `X-Request-Id` header and the remainder as the body.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bertflow_server::{
    App, BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ModelKind, ServerConfig,
    Tokenized,
};
use tower::ServiceExt;

const DIM: usize = 8;
const MAX_LEN: usize = 16;
const ENDPOINTS: [&str; 4] = ["/v1/embeddings", "/similarity", "/search", "/tokenize"];

/// Vectors from a hash of the token ids (the text "ZERO" gives the zero
/// vector), tokens = `[CLS]`, a hash of each whitespace word, `[SEP]`.
struct Hashed;

/// The id the word "ZERO" gets.
const ZERO_ID: u32 = 7;

fn vector_of(text: &str) -> Vec<f32> {
    if text == "ZERO" {
        return vec![0.0; DIM];
    }
    let mut rng = crate::Rng::new(u64::from(crc32fast::hash(text.as_bytes())));
    (0..DIM)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

impl EmbedBackend for Hashed {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            model_id: "fuzz-backend".into(),
            pooling: "mean".into(),
            calibrator: None,
            dimension: DIM,
            max_len: MAX_LEN,
            kind: ModelKind::Embedding,
            labels: Vec::new(),
        }
    }

    fn encode(&self, text: &str, _pair: Option<&str>) -> Result<Encoding, BackendError> {
        let mut ids = vec![101];
        ids.extend(text.split_whitespace().map(|w| match w {
            "ZERO" => ZERO_ID,
            w => 1000 + crc32fast::hash(w.as_bytes()) % 29_000,
        }));
        let truncated = ids.len() + 1 > MAX_LEN;
        ids.truncate(MAX_LEN - 1);
        ids.push(102);
        Ok(Encoding {
            ids,
            type_ids: Vec::new(),
            truncated,
        })
    }

    fn vocab_size(&self) -> Option<usize> {
        Some(30_000)
    }

    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        Ok(batch
            .iter()
            .map(|e| {
                let key: Vec<String> = e.ids.iter().map(u32::to_string).collect();
                Embedded {
                    vector: if e.ids == [101, ZERO_ID, 102] {
                        vector_of("ZERO")
                    } else {
                        vector_of(&key.join(","))
                    },
                    tokens: e.ids.len(),
                    truncated: e.truncated,
                }
            })
            .collect())
    }

    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        let mut tokens: Vec<String> = std::iter::once("[CLS]".to_owned())
            .chain(text.split_whitespace().map(str::to_owned))
            .collect();
        let truncated = tokens.len() + 1 > MAX_LEN;
        tokens.truncate(MAX_LEN - 1);
        tokens.push("[SEP]".to_owned());
        let ids = tokens.iter().map(|t| t.len() as u32).collect();
        Some(Ok(Tokenized {
            ids,
            tokens,
            truncated,
        }))
    }
}

struct Server {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime");
        let config = ServerConfig {
            limits: bertflow_server::Limits {
                max_inputs_per_request: 16,
                max_chars_per_input: 200,
                max_body_bytes: 64 * 1024,
                max_top_k: 12,
                ..bertflow_server::Limits::default()
            },
            corpus: Some((0..20).map(|i| format!("corpus sentence {i}")).collect()),
            ..ServerConfig::default()
        };
        let app = runtime
            .block_on(App::new(Arc::new(Hashed), config))
            .expect("starting the server");
        Server {
            router: app.router(),
            runtime,
        }
    })
}

/// Valid (and a few edge-case) bodies for every endpoint.
pub fn seeds() -> Vec<Vec<u8>> {
    let bodies: [(u8, &str); 16] = [
        (0, r#"{"input": "A man is playing a guitar."}"#),
        (
            0,
            r#"{"input": ["one", "two words", "ZERO"], "model": "m", "encoding_format": "base64", "dimensions": 4, "user": "u"}"#,
        ),
        (
            0,
            r#"{"input": ["x"], "encoding_format": "float", "dimensions": 8}"#,
        ),
        (0, r#"{"input": [], "dimensions": 0}"#),
        (1, r#"{"pairs": [["a b", "c"], ["ZERO", "d"]]}"#),
        (
            1,
            r#"{"source": "a man", "targets": ["a woman", "a dog", "ZERO"]}"#,
        ),
        (1, r#"{"pairs": [], "source": "x"}"#),
        (2, r#"{"query": "corpus sentence", "top_k": 3}"#),
        (2, r#"{"queries": ["one", "two"], "top_k": 12}"#),
        (2, r#"{"query": "x"}"#),
        (3, r#"{"input": "tokenize me please"}"#),
        (
            3,
            r#"{"input": ["a", "b c d e f g h i j k l m n o p q r s"]}"#,
        ),
        (4, "req-1:a.b_c\n{\"input\": \"with an id\"}"),
        (5, "id\u{7f}bad\n{\"source\": \"s\", \"targets\": [\"t\"]}"),
        (6, "\n{\"query\": \"q\", \"top_k\": 1}"),
        (7, "\u{e9}t\u{e9}\n{\"input\": [\"\u{1f600}\"]}"),
    ];
    bodies
        .iter()
        .map(|(mode, body)| {
            let mut out = vec![*mode];
            out.extend(body.as_bytes());
            out
        })
        .collect()
}

/// Posts `data` (after the mode byte) to the endpoint the mode names and
/// checks the answer.
pub fn run(data: &[u8]) {
    let Some((status, bytes)) = post(data) else {
        return;
    };
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{bytes:?}");
    let json: serde_json::Value = serde_json::from_slice(&bytes).expect("a JSON answer");
    if !status.is_success() {
        assert!(
            json["error"]["message"].is_string(),
            "error not in the API's shape: {status} {json}"
        );
    }
}

/// The status and body of the answer to `data` (`None` for an empty input).
pub fn post(data: &[u8]) -> Option<(StatusCode, axum::body::Bytes)> {
    let (&mode, rest) = data.split_first()?;
    let endpoint = ENDPOINTS[usize::from(mode & 3)];
    let mut request = Request::post(endpoint).header("content-type", "application/json");
    let body = if mode & 4 == 4 {
        let cut = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        if let Ok(value) = axum::http::HeaderValue::from_bytes(&rest[..cut]) {
            request = request.header("x-request-id", value);
        }
        &rest[(cut + 1).min(rest.len())..]
    } else {
        rest
    };
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    let server = server();
    Some(server.runtime.block_on(async {
        let response = server
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("reading the response");
        (status, bytes)
    }))
}
