//! `bertflow serve --index X` over an index that stores sparse vectors (the
//! tiny SPLADE checkpoint's, `index build --with-sparse`): `POST /search`
//! with `mode` sparse and hybrid answers what `bertflow index search --mode`
//! answers for the same queries (same rows in the same order, scores within
//! 1e-6); `/embed_sparse` answers the head's vectors; a server over a dense
//! index refuses `mode` sparse with a 422 naming the field, as it refuses a
//! fusion parameter out of range.
use super::hybrid::assert_same;
use crate::common;
use common::{bertflow, ok};
use serde_json::{json, Value};
use std::path::Path;

fn model() -> String {
    common::repo()
        .join("crates/encoder/tests/fixtures/tiny-bert-splade")
        .to_string_lossy()
        .into_owned()
}

const WORDS: [&str; 12] = [
    "the", "cat", "dog", "runs", "sleeps", "park", "man", "plays", "music", "red", "car", "tree",
];

fn corpus() -> Vec<String> {
    (0..30)
        .map(|i| {
            (0..3 + i % 4)
                .map(|j| WORDS[(i * 7 + j * 5 + j * j) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `index search` hits of each query: (row, score).
fn cli_hits(index: &str, queries: &[&str], extra: &[&str], dir: &Path) -> Vec<Vec<(usize, f32)>> {
    let m = model();
    let mut args = vec!["index", "search", "-m", &m, "--index", index];
    for q in queries {
        args.extend(["--query", q]);
    }
    args.extend(extra);
    ok(&bertflow(&args, dir))
        .lines()
        .map(|l| hits(&serde_json::from_str::<Value>(l).unwrap()["hits"]))
        .collect()
}

fn hits(list: &Value) -> Vec<(usize, f32)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["index"].as_u64().unwrap() as usize,
                h["score"].as_f64().unwrap() as f32,
            )
        })
        .collect()
}

#[test]
fn search_modes_over_http_equal_index_search() {
    let _serial = common::serve::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let corpus_file = dir.join("corpus.txt");
    std::fs::write(&corpus_file, corpus().join("\n") + "\n").unwrap();
    let m = model();
    let (sparse_idx, dense_idx) = (dir.join("s.bfi"), dir.join("d.bfi"));
    let (s_idx, d_idx) = (sparse_idx.to_str().unwrap(), dense_idx.to_str().unwrap());
    let c = corpus_file.to_str().unwrap();
    ok(&bertflow(
        &[
            "index",
            "build",
            "-m",
            &m,
            "--corpus",
            c,
            "-o",
            s_idx,
            "--with-sparse",
        ],
        dir,
    ));
    ok(&bertflow(
        &["index", "build", "-m", &m, "--corpus", c, "-o", d_idx],
        dir,
    ));
    let queries = ["the cat runs", "red car in the park", "music"];

    let server = common::serve::Server::start_raw(&[
        "--model",
        &m,
        "--index",
        s_idx,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]);
    assert!(
        server
            .log()
            .contains("/search takes mode sparse and hybrid"),
        "{}",
        server.log()
    );
    let cases: [(&[&str], Value); 4] = [
        (
            &["--mode", "sparse", "-k", "6"],
            json!({"mode": "sparse", "top_k": 6}),
        ),
        (
            &["--mode", "hybrid", "-k", "5"],
            json!({"mode": "hybrid", "top_k": 5}),
        ),
        (
            &[
                "--mode", "hybrid", "-k", "4", "--fusion", "weighted", "--alpha", "0.3",
            ],
            json!({"mode": "hybrid", "top_k": 4, "fusion": "weighted", "alpha": 0.3}),
        ),
        (
            &[
                "--mode", "hybrid", "-k", "4", "--rrf-k", "10", "--depth", "6",
            ],
            json!({"mode": "hybrid", "top_k": 4, "rrf_k": 10.0, "depth": 6}),
        ),
    ];
    for (flags, body) in cases {
        let want = cli_hits(s_idx, &queries, flags, dir);
        let mut request = body.clone();
        request["queries"] = json!(queries);
        let (status, answer) = common::serve::post_json(&server, "/search", request);
        assert_eq!(status, 200, "{body}: {answer}");
        let got: Vec<Vec<(usize, f32)>> = answer["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(hits)
            .collect();
        assert_eq!(got.len(), queries.len());
        for (qi, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(!w.is_empty(), "{body}: query {qi} found nothing");
            assert_same(g, w, &format!("{body} query {qi}"));
        }
    }
    // One query: one list; dense stays the default.
    let (status, answer) = common::serve::post_json(
        &server,
        "/search",
        json!({"query": "music", "mode": "sparse"}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_same(
        &hits(&answer["results"]),
        &cli_hits(s_idx, &["music"], &["--mode", "sparse"], dir)[0],
        "one query",
    );
    let (status, answer) = common::serve::post_json(&server, "/search", json!({"query": "music"}));
    assert_eq!(status, 200, "{answer}");
    assert_same(
        &hits(&answer["results"]),
        &cli_hits(s_idx, &["music"], &[], dir)[0],
        "dense",
    );
    // The sparse head answers /embed_sparse too.
    let (status, answer) =
        common::serve::post_json(&server, "/embed_sparse", json!({"inputs": "music"}));
    assert_eq!(status, 200, "{answer}");
    assert!(!answer[0].as_array().unwrap().is_empty(), "{answer}");
    // Out of range, or unknown: 422 naming the field.
    for (body, param) in [
        (json!({"query": "x", "mode": "bm25"}), "mode"),
        (
            json!({"query": "x", "mode": "hybrid", "alpha": 1.5}),
            "alpha",
        ),
        (
            json!({"query": "x", "mode": "hybrid", "rrf_k": 0.5}),
            "rrf_k",
        ),
        (
            json!({"query": "x", "mode": "hybrid", "fusion": "max"}),
            "fusion",
        ),
        (json!({"query": "x", "mode": "hybrid", "depth": 0}), "depth"),
    ] {
        let (status, answer) = common::serve::post_json(&server, "/search", body.clone());
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
    }
    server.stop();

    // A dense index: mode sparse is the request's mistake, said so.
    let server = common::serve::Server::start_raw(&[
        "--model",
        &m,
        "--index",
        d_idx,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]);
    let (status, answer) = common::serve::post_json(
        &server,
        "/search",
        json!({"query": "music", "mode": "sparse"}),
    );
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["param"], "mode", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--with-sparse") && message.contains("mode dense"),
        "{message}"
    );
    let (status, answer) = common::serve::post_json(
        &server,
        "/search",
        json!({"query": "music", "mode": "dense"}),
    );
    assert_eq!(status, 200, "{answer}");
    server.stop();
}
