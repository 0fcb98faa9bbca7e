//! The served index file changed under the server: cut in place, rewritten,
//! replaced. Never a crash (reading a cut map is SIGBUS): `/search` answers
//! 503 `index_unavailable` while no complete index is there, and searches
//! the file again once one is back.

use crate::common;

use bertflow_core::index::{Identity, IndexWriter};
use bertflow_server::model::{IndexOptions, MappedIndex};
use bertflow_server::ServerConfig;
use common::{assert_error, vector_of, Fake, TestServer, DIM};
use serde_json::json;

fn identity() -> Identity {
    Identity {
        model: "fake@0".into(),
        pooling: "mean".into(),
        calibrator: None,
        dimension: DIM,
        precision: "fp32".into(),
    }
}

/// An index of `n` sentences `doc 0`, `doc 1`, ... (vectors from the fake backend).
fn write_index(path: &std::path::Path, n: usize) {
    let texts: Vec<String> = (0..n).map(|i| format!("doc {i}")).collect();
    let vectors: Vec<f32> = texts.iter().flat_map(|t| vector_of(t)).collect();
    let mut writer = IndexWriter::create(path, identity()).unwrap();
    writer.add(&vectors, &texts).unwrap();
    writer.finish().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_cut_or_replaced_under_the_server_gives_503_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.bfi");
    write_index(&path, 3000);
    let good = std::fs::read(&path).unwrap();
    let mapped = MappedIndex::open(&path, &identity(), IndexOptions::default()).unwrap();
    let s = TestServer::start(
        Fake::new(16),
        ServerConfig {
            search_index: Some(mapped.shared()),
            ..ServerConfig::default()
        },
    )
    .await;
    let query = json!({"query": "doc 7", "top_k": 1});
    let (status, body) = s.post("/search", &query).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["text"], "doc 7");

    // Cut in place (`truncate -s`): 503, and the server lives on.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(good.len() as u64 / 2)
        .unwrap();
    for _ in 0..3 {
        let (status, body) = s.post("/search", &query).await;
        assert_error(status, &body, 503, "index_unavailable");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cut to"),
            "{body}"
        );
    }
    assert_eq!(s.get("/health").await.0, 200);

    // The complete file back in place (`cp good live.bfi`): searched again.
    std::fs::write(&path, &good).unwrap();
    let (status, body) = s.post("/search", &query).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["text"], "doc 7");

    // Another index put in its place (rename): the new one is searched.
    let other = dir.path().join("other.bfi");
    write_index(&other, 5);
    std::fs::rename(&other, &path).unwrap();
    let (status, body) = s
        .post("/search", &json!({"query": "doc 7", "top_k": 10}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"].as_array().unwrap().len(), 5);

    // Garbage in its place: 503 again, not a crash.
    std::fs::write(&path, b"not an index at all").unwrap();
    let (status, body) = s.post("/search", &query).await;
    assert_error(status, &body, 503, "index_unavailable");
    s.stop().await;
}
