//! `POST /embed_sparse` (TEI's shape), `POST /embed_multi` and `/rerank` by
//! late interaction, through the queue, over a fake retrieval model whose
//! outputs the tests recompute:
//! - tokens: `[CLS]` (101), each whitespace word as 1000 + its length, `[SEP]` (102);
//! - sparse: each distinct word id with weight = its count in the text;
//! - multi: one unit vector per token of 4 dimensions, axis `id % 4`;
//! - a query padded with 103 (the mask) to 6 tokens.

mod common;

use std::sync::Arc;

use bertflow_server::{
    BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, Limits, ModelKind, ServerConfig,
    SparseEmbedded,
};
use common::tei::{assert_tei_error, TeiFake};
use common::TestServer;
use serde_json::{json, Value};

const QUERY_LEN: usize = 6;

struct Retrieval;

fn ids(text: &str) -> Vec<u32> {
    std::iter::once(101)
        .chain(text.split_whitespace().map(|w| 1000 + w.len() as u32))
        .chain(std::iter::once(102))
        .collect()
}

fn sparse_of(ids: &[u32]) -> Vec<(u32, f32)> {
    let mut words: Vec<u32> = ids.iter().copied().filter(|&id| id >= 1000).collect();
    words.sort_unstable();
    let mut out: Vec<(u32, f32)> = Vec::new();
    for id in words {
        match out.last_mut() {
            Some((last, w)) if *last == id => *w += 1.0,
            _ => out.push((id, 1.0)),
        }
    }
    out
}

fn token_vector(id: u32) -> Vec<f32> {
    let mut v = vec![0.0; 4];
    v[id as usize % 4] = 1.0;
    v
}

fn maxsim(q: &[u32], d: &[u32]) -> f32 {
    q.iter()
        .map(|&a| {
            if d.iter().any(|&b| a % 4 == b % 4) {
                1.0
            } else {
                0.0
            }
        })
        .sum()
}

impl EmbedBackend for Retrieval {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            model_id: "fake-retrieval".into(),
            pooling: "splade (sparse, multi)".into(),
            calibrator: None,
            dimension: 4,
            max_len: 16,
            kind: ModelKind::Embedding,
            labels: Vec::new(),
        }
    }
    fn encode(&self, text: &str, _pair: Option<&str>) -> Result<Encoding, BackendError> {
        let mut ids = ids(text);
        let truncated = ids.len() > 16;
        ids.truncate(16);
        Ok(Encoding {
            ids,
            type_ids: Vec::new(),
            truncated,
        })
    }
    fn encode_query(&self, text: &str) -> Result<Encoding, BackendError> {
        let mut ids = ids(text);
        ids.truncate(QUERY_LEN);
        ids.resize(QUERY_LEN, 103);
        Ok(Encoding::of_ids(ids))
    }
    fn embed(&self, _batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        Err(BackendError::new("this fake serves no dense vectors"))
    }
    fn embed_sparse(
        &self,
        batch: &[Encoding],
    ) -> Option<Result<Vec<SparseEmbedded>, BackendError>> {
        Some(Ok(batch
            .iter()
            .map(|e| {
                let (indices, values) = sparse_of(&e.ids).into_iter().unzip();
                SparseEmbedded { indices, values }
            })
            .collect()))
    }
    fn embed_multi(&self, batch: &[Encoding]) -> Option<Result<Vec<Vec<Vec<f32>>>, BackendError>> {
        Some(Ok(batch
            .iter()
            .map(|e| e.ids.iter().map(|&id| token_vector(id)).collect())
            .collect()))
    }
    fn late_interaction(&self) -> bool {
        true
    }
}

fn sparse_json(ids: &[u32]) -> Value {
    Value::Array(
        sparse_of(ids)
            .into_iter()
            .map(|(index, value)| json!({"index": index, "value": value}))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_sparse_answers_teis_shape_for_texts_and_ids() {
    let s = TestServer::start(Arc::new(Retrieval), ServerConfig::default()).await;
    // One string: one list (TEI always answers a list of lists).
    let text = "a bb a ccc";
    let (status, body) = s.post("/embed_sparse", &json!({"inputs": text})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!([sparse_json(&ids(text))]));
    assert_eq!(
        body[0],
        json!([{"index": 1001, "value": 2.0}, {"index": 1002, "value": 1.0}, {"index": 1003, "value": 1.0}])
    );
    // A batch of texts and the client's own token ids, in input order.
    let (status, body) = s
        .post(
            "/embed_sparse",
            &json!({"inputs": ["x yy", [101, 1005, 1005, 102], "zzz"], "truncate": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!([
            sparse_json(&ids("x yy")),
            [{"index": 1005, "value": 2.0}],
            sparse_json(&ids("zzz"))
        ])
    );
    // Errors in TEI's shape: empty (400), too long without truncate (413).
    let (status, body) = s.post("/embed_sparse", &json!({"inputs": []})).await;
    assert_tei_error(status, &body, 400, "Empty");
    let long = vec!["w"; 40].join(" ");
    let (status, body) = s.post("/embed_sparse", &json!({"inputs": long})).await;
    assert_tei_error(status, &body, 413, "Validation");
    let (status, body) = s
        .post("/embed_sparse", &json!({"inputs": long, "truncate": true}))
        .await;
    assert_eq!(status, 200, "{body}");
    // [CLS] and 15 words: cut at 16 tokens.
    assert_eq!(body[0], json!([{"index": 1001, "value": 15.0}]));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_the_heads_answers_424() {
    let s = TestServer::start(TeiFake::new(512), ServerConfig::default()).await;
    for route in ["/embed_sparse", "/embed_multi"] {
        let (status, body) = s.post(route, &json!({"inputs": "a b"})).await;
        assert_tei_error(status, &body, 424, "Backend");
    }
    // /rerank on an embedding model stays TEI's 424 as well.
    let (status, body) = s
        .post("/rerank", &json!({"query": "a", "texts": ["b"]}))
        .await;
    assert_tei_error(status, &body, 424, "Backend");
    // The OpenAPI document describes both routes and TEI's SparseValue.
    let (status, doc) = s.get("/openapi.json").await;
    assert_eq!(status, 200);
    for route in ["/embed_sparse", "/embed_multi"] {
        assert!(doc["paths"][route]["post"].is_object(), "{route} missing");
    }
    let value = &doc["components"]["schemas"]["SparseValue"]["properties"];
    assert_eq!(value["index"]["type"], "integer", "{value}");
    assert_eq!(value["value"]["type"], "number", "{value}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_multi_gives_one_row_per_token_and_pads_queries() {
    let s = TestServer::start(Arc::new(Retrieval), ServerConfig::default()).await;
    let (status, body) = s
        .post("/embed_multi", &json!({"inputs": ["a bb", "ccc"]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let want: Vec<Vec<Vec<f32>>> = ["a bb", "ccc"]
        .iter()
        .map(|t| ids(t).into_iter().map(token_vector).collect())
        .collect();
    assert_eq!(body, json!(want));
    let (status, body) = s
        .post("/embed_multi", &json!({"inputs": "a", "is_query": true}))
        .await;
    assert_eq!(status, 200, "{body}");
    let rows = body[0].as_array().unwrap();
    assert_eq!(rows.len(), QUERY_LEN);
    assert_eq!(rows[5], json!(token_vector(103)));
    let (status, body) = s
        .post("/embed_multi", &json!({"inputs": "a", "unknown": 1}))
        .await;
    assert_tei_error(status, &body, 422, "Validation");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_by_late_interaction_scores_maxsim_best_first() {
    let config = ServerConfig {
        limits: Limits {
            max_batch_size: 2,
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let s = TestServer::start(Arc::new(Retrieval), config).await;
    let query = "a bb";
    let texts = ["zzzz", "a", "a bb ccc", "bb"];
    let (status, body) = s
        .post(
            "/rerank",
            &json!({"query": query, "texts": texts, "return_text": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let q = {
        let mut q = ids(query);
        q.resize(QUERY_LEN, 103);
        q
    };
    let mut want: Vec<(usize, f32)> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| (i, maxsim(&q, &ids(t))))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: Vec<(usize, f32)> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap() as usize,
                r["score"].as_f64().unwrap() as f32,
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(body[0]["text"], texts[want[0].0]);
    s.stop().await;
}
