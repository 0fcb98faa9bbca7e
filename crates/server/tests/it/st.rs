//! `bertflow serve --model DIR --pooling st`: the server's model backend on a
//! tiny sentence-transformers directory answers `/v1/embeddings` with what
//! `SentenceTransformer(dir).encode` gave (scripts/reference/make_tiny_st.py).
use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use bertflow_core::progress::silent;
use bertflow_core::{EmbedderConfig, Pipeline, PipelineConfig, Pooling};
use bertflow_server::model::ModelBackend;
use bertflow_server::{EmbedBackend, ServerConfig};
use common::{floats, TestServer};
use serde_json::{json, Value};

/// The pipeline of `dir` with the `st` pooling, no cache.
fn st_pipeline(dir: &std::path::Path) -> Result<Pipeline, String> {
    PipelineConfig {
        model: EmbedderConfig {
            model: dir.to_str().unwrap().to_string(),
            runtime: bertflow_core::RuntimeConfig {
                threads: Some(1),
                ..Default::default()
            },
            no_cache: true,
            ..Default::default()
        },
        pooling: Some(Pooling::St),
        ..Default::default()
    }
    .open(silent())
    .map_err(|e| e.chain())
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../encoder/tests/fixtures/tiny-st")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_pooling_st_answers_sentence_transformers_vectors() {
    let dir = fixture("mean-dense");
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let texts: Vec<String> = golden["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let backend = ModelBackend::new(st_pipeline(&dir).unwrap(), 4).unwrap();
    let info = backend.info();
    assert_eq!(
        (info.pooling.as_str(), info.dimension, info.max_len),
        ("st", 8, 12)
    );
    let server = TestServer::start(Arc::new(backend), ServerConfig::default()).await;
    let (status, body) = server
        .post("/v1/embeddings", &json!({ "input": texts }))
        .await;
    assert_eq!(status, 200, "{body}");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), texts.len());
    for (i, item) in data.iter().enumerate() {
        let got = floats(item);
        let want = golden["vectors"][i].as_array().unwrap();
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            let b = b.as_f64().unwrap();
            assert!((*a as f64 - b).abs() < 1e-5, "text {i}: {a} vs {b}");
        }
    }
    // The truncation reported is sentence-transformers' (12 tokens), not the model's 32.
    let (_, body) = server
        .post("/v1/embeddings", &json!({ "input": [texts[5].clone()] }))
        .await;
    assert_eq!(body["usage"]["prompt_tokens"], 12, "{body}");
    server.stop().await;
}

#[test]
fn serve_with_pooling_st_on_a_plain_model_directory_is_an_error() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../encoder/tests/fixtures/tiny-bert");
    let err = st_pipeline(&dir).err().unwrap();
    assert!(err.contains("no modules.json"), "{err}");
}
