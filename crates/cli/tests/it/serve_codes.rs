//! `bertflow serve`'s compact outputs against the CLI: `/v1/embeddings` with
//! `encoding_format` `int8`/`uint8`/`binary`/`ubinary` answers exactly the
//! bytes `bertflow encode --calibrator F` writes for the same sentences (F
//! fitted with `--quantize`), the sibling code of the family is the same
//! bytes XOR 0x80, and the errors (no quantizer stage, the other family, a
//! cut, normalize before int8, an unknown format); `serve --index` over a
//! quantized index names its codes and rescore depth and takes `--rescore`
//! and a per-request `rescore`, whose hits match `bertflow index search`;
//! with `--ann` its graph walks the codes and `--rescore` applies to it.
use crate::common;
use base64::Engine as _;
use common::serve::{assert_error, client, get, post, runtime, serial, Server};
use common::{bertflow, ok, sts_test_sentences};
use serde_json::{json, Value};
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The body of an int8/uint8 `.npy` (its descr, and the bytes).
fn npy_body(path: &Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + len]).unwrap();
    let descr = header.split("'descr': '").nth(1).unwrap()[..3].to_string();
    (descr, b[10 + len..].to_vec())
}

/// Every embedding of a reply as integers, flattened.
fn integers(reply: &Value) -> Vec<i64> {
    reply["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {reply}"))
        .iter()
        .flat_map(|d| {
            d["embedding"]
                .as_array()
                .unwrap_or_else(|| panic!("not an array: {d}"))
                .iter()
                .map(|v| v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}")))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Fits `kind` then `quant` on `sentences`, encodes them with the file; returns
/// (the file, the codes' descr and bytes).
fn fit_and_encode(
    dir: &Path,
    cache: &Path,
    sentences: &str,
    kind: &str,
    quant: &str,
) -> (String, String, Vec<u8>) {
    let f = dir.join(format!(
        "{}.safetensors",
        quant.replace([':', '=', ','], "_")
    ));
    ok(&bertflow(
        &[
            "fit",
            "--on",
            sentences,
            "--kind",
            kind,
            "--quantize",
            quant,
            "-o",
            s(&f),
        ],
        cache,
    ));
    let codes = dir.join("codes.npy");
    ok(&bertflow(
        &[
            "encode",
            "--calibrator",
            s(&f),
            "-i",
            sentences,
            "-o",
            s(&codes),
        ],
        cache,
    ));
    let (descr, body) = npy_body(&codes);
    (s(&f).to_owned(), descr, body)
}

#[test]
fn served_codes_are_the_cli_codes_byte_for_byte() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let sentences = sts_test_sentences(dir.path(), 40);
    let texts: Vec<String> = std::fs::read_to_string(&sentences)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(texts.len(), 40);
    let rt = runtime();
    let http = client();

    // Sign bits after pca:k=16 and ITQ: 2 bytes per sentence.
    let (f, descr, cli) = fit_and_encode(
        dir.path(),
        &cache,
        &sentences,
        "pca:k=16",
        "binary:itq=true,iters=5",
    );
    assert_eq!((descr.as_str(), cli.len()), ("|i1", 80));
    let server = Server::start(&["--calibrator", &f]);
    let url = server.url("/v1/embeddings");
    rt.block_on(async {
        let r = post(&http, &url, &json!({"input": texts, "encoding_format": "binary"})).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let want: Vec<i64> = cli.iter().map(|&b| i64::from(b as i8)).collect();
        assert_eq!(integers(&r.body), want);
        // ubinary: the same bits as uint8 (each byte XOR 0x80), normalize changes no sign.
        let r = post(
            &http,
            &url,
            &json!({"input": texts, "encoding_format": "ubinary", "normalize": true, "dimensions": 16}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let want: Vec<i64> = cli.iter().map(|&b| i64::from(b ^ 0x80)).collect();
        assert_eq!(integers(&r.body), want);
        // base64 of the code bytes, exactly the .npy's body.
        let r = post(
            &http,
            &url,
            &json!({"input": texts, "encoding_format": "binary", "code_encoding": "base64"}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let mut got = Vec::new();
        for d in r.body["data"].as_array().unwrap() {
            let b64 = d["embedding"].as_str().expect("a base64 string");
            got.extend(base64::engine::general_purpose::STANDARD.decode(b64).unwrap());
        }
        assert_eq!(got, cli);
        // Floats are still the calibrated vectors, cut after the rotation.
        let full = post(&http, &url, &json!({"input": texts[0]})).await;
        let cut = post(&http, &url, &json!({"input": texts[0], "dimensions": 5})).await;
        let full = full.body["data"][0]["embedding"].as_array().unwrap().clone();
        assert_eq!(full.len(), 16);
        assert_eq!(cut.body["data"][0]["embedding"].as_array().unwrap()[..], full[..5]);
        // Errors: the other family, a cut, code_encoding with floats, an unknown format.
        let r = post(&http, &url, &json!({"input": "a", "encoding_format": "int8"})).await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "encoding_format");
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(m.contains("binary or ubinary") && m.contains("--quantize int8"), "{m}");
        let r = post(
            &http,
            &url,
            &json!({"input": "a", "encoding_format": "binary", "dimensions": 8}),
        )
        .await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "dimensions");
        let r = post(&http, &url, &json!({"input": "a", "code_encoding": "base64"})).await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "code_encoding");
        let r = post(&http, &url, &json!({"input": "a", "encoding_format": "int4"})).await;
        assert_error(&r, 422, "invalid_field");
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(
            m.contains("`float`, `base64`, `int8`, `uint8`, `binary`, `ubinary`"),
            "{m}"
        );
        let info = get(&http, &server.url("/info")).await.body;
        assert!(
            info["quantizer"]
                .as_str()
                .is_some_and(|q| q.starts_with("binary:itq=true") && q.contains("16 dims -> 2 bytes")),
            "{info}"
        );
        assert_eq!(
            info["encoding_formats"],
            json!(["float", "base64", "binary", "ubinary"])
        );
    });
    server.stop();

    // int8 with one scale after pca:k=24.
    let (f, descr, cli) = fit_and_encode(dir.path(), &cache, &sentences, "pca:k=24", "int8");
    assert_eq!((descr.as_str(), cli.len()), ("|i1", 40 * 24));
    let server = Server::start(&["--calibrator", &f]);
    let url = server.url("/v1/embeddings");
    rt.block_on(async {
        let r = post(
            &http,
            &url,
            &json!({"input": texts, "encoding_format": "int8"}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let want: Vec<i64> = cli.iter().map(|&b| i64::from(b as i8)).collect();
        assert_eq!(integers(&r.body), want);
        let r = post(
            &http,
            &url,
            &json!({"input": texts, "encoding_format": "uint8"}),
        )
        .await;
        let want: Vec<i64> = cli.iter().map(|&b| i64::from(b as i8) + 128).collect();
        assert_eq!(integers(&r.body), want);
        let r = post(
            &http,
            &url,
            &json!({"input": "a", "encoding_format": "int8", "normalize": true}),
        )
        .await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "normalize");
        let info = get(&http, &server.url("/info")).await.body;
        assert_eq!(
            info["encoding_formats"],
            json!(["float", "base64", "int8", "uint8"])
        );
    });
    server.stop();

    // No quantizer stage: no codes, and the error says which calibrator to fit.
    let server = Server::start(&[]);
    rt.block_on(async {
        let url = server.url("/v1/embeddings");
        for format in ["int8", "uint8", "binary", "ubinary"] {
            let r = post(
                &http,
                &url,
                &json!({"input": "a", "encoding_format": format}),
            )
            .await;
            assert_error(&r, 422, "invalid_field");
            let m = r.body["error"]["message"].as_str().unwrap();
            assert!(
                m.contains(&format!("bertflow fit ... --quantize {format}")),
                "{m}"
            );
        }
        let info = get(&http, &server.url("/info")).await.body;
        assert_eq!(info["quantizer"], Value::Null);
        assert_eq!(info["encoding_formats"], json!(["float", "base64"]));
    });
    server.stop();
}

/// `bertflow index search` hits as (index, score).
fn cli_hits(idx: &str, query: &str, k: usize, cache: &Path, extra: &[&str]) -> Vec<(u64, f64)> {
    let k = k.to_string();
    let mut args = vec![
        "index", "search", "--index", idx, "--query", query, "-k", &k,
    ];
    args.extend(extra);
    let out = ok(&bertflow(&args, cache));
    let v: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["index"].as_u64().unwrap(), h["score"].as_f64().unwrap()))
        .collect()
}

fn served_hits(v: &Value) -> Vec<(u64, f64)> {
    v["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {v}"))
        .iter()
        .map(|h| (h["index"].as_u64().unwrap(), h["score"].as_f64().unwrap()))
        .collect()
}

#[test]
fn serve_a_quantized_index_with_rescore() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let sentences = sts_test_sentences(dir.path(), 60);
    let idx = dir.path().join("q.idx");
    ok(&bertflow(
        &[
            "index",
            "build",
            "--corpus",
            &sentences,
            "--output",
            s(&idx),
            "--quantize",
            "binary",
        ],
        &cache,
    ));
    let plain = dir.path().join("p.idx");
    ok(&bertflow(
        &[
            "index",
            "build",
            "--corpus",
            &sentences,
            "--output",
            s(&plain),
        ],
        &cache,
    ));
    // The index owns the range of --rescore; an index without codes takes none.
    let e = common::serve::startup_failure(&["--index", s(&idx), "--rescore", "0"]);
    assert!(e.contains("--rescore: rescore must be at least 1"), "{e}");
    let e = common::serve::startup_failure(&["--index", s(&plain), "--rescore", "5"]);
    assert!(e.contains("stores no codes"), "{e}");
    let e = common::serve::startup_failure(&["--index", s(&idx), "--shortlist", "0"]);
    assert!(
        e.contains("--shortlist: shortlist must be at least 1"),
        "{e}"
    );
    let e = common::serve::startup_failure(&["--index", s(&plain), "--shortlist", "2"]);
    assert!(
        e.contains("--shortlist: the index") && e.contains("stores no codes"),
        "{e}"
    );

    let query = "A man is playing a musical instrument.";
    let exact = cli_hits(s(&idx), query, 5, &cache, &["--exact"]);
    let shallow = cli_hits(s(&idx), query, 5, &cache, &["--rescore", "1"]);
    let shortlisted = cli_hits(
        s(&idx),
        query,
        5,
        &cache,
        &["--rescore", "1", "--shortlist", "3"],
    );
    let hamming_only = cli_hits(
        s(&idx),
        query,
        5,
        &cache,
        &["--rescore", "1", "--shortlist", "1"],
    );
    assert_eq!(exact.len(), 5);
    let rt = runtime();
    let http = client();
    let server = Server::start(&["--index", s(&idx), "--rescore", "1"]);
    rt.block_on(async {
        let info = get(&http, &server.url("/info")).await.body;
        let method = info["search_method"].as_str().unwrap_or_default();
        assert!(
            method.contains("binary codes (binary, 48 bytes per vector)")
                && method.contains("best 1 x top_k rescored"),
            "{info}"
        );
        let url = server.url("/search");
        // The server's --rescore 1 searches as `index search --rescore 1` ...
        let r = post(&http, &url, &json!({"query": query, "top_k": 5})).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let got = served_hits(&r.body);
        assert_eq!(got.len(), shallow.len());
        for (g, w) in got.iter().zip(&shallow) {
            assert_eq!(g.0, w.0, "{got:?} vs {shallow:?}");
            assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {shallow:?}");
        }
        // ... and a request rescoring every sentence (12 x 5 >= 60) finds the exact top 5.
        // A depth far beyond the index (no room is allocated for it) is the same.
        for rescore in [12u64, 1_000_000_000_000_000] {
            let r = post(
                &http,
                &url,
                &json!({"query": query, "top_k": 5, "rescore": rescore}),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.body);
            let got = served_hits(&r.body);
            assert_eq!(got.len(), 5);
            for (g, w) in got.iter().zip(&exact) {
                assert_eq!(g.0, w.0, "{got:?} vs {exact:?}");
                assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {exact:?}");
            }
        }
        let r = post(&http, &url, &json!({"query": query, "rescore": 0})).await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "rescore");
        // A request's shortlist searches as `index search --shortlist`.
        for (shortlist, want) in [(3u64, &shortlisted), (1, &hamming_only)] {
            let body = json!({"query": query, "top_k": 5, "shortlist": shortlist});
            let r = post(&http, &url, &body).await;
            assert_eq!(r.status, 200, "{}", r.body);
            let got = served_hits(&r.body);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert_eq!(g.0, w.0, "shortlist {shortlist}: {got:?} vs {want:?}");
                assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {want:?}");
            }
        }
        let r = post(&http, &url, &json!({"query": query, "shortlist": 0})).await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "shortlist");
    });
    server.stop();
    let server = Server::start(&["--index", s(&plain)]);
    rt.block_on(async {
        let r = post(
            &http,
            &server.url("/search"),
            &json!({"query": query, "rescore": 3}),
        )
        .await;
        assert_error(&r, 422, "invalid_field");
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(m.contains("stores codes"), "{m}");
        let r = post(
            &http,
            &server.url("/search"),
            &json!({"query": query, "shortlist": 3}),
        )
        .await;
        assert_error(&r, 422, "invalid_field");
        assert_eq!(r.body["error"]["param"], "shortlist");
        let info = get(&http, &server.url("/info")).await.body;
        assert_eq!(info["search_method"], "exact");
    });
    server.stop();
}

#[test]
fn serve_a_quantized_index_over_its_graph() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let sentences = sts_test_sentences(dir.path(), 60);
    let idx = dir.path().join("q.idx");
    let out = ok(&bertflow(
        &[
            "index",
            "build",
            "--corpus",
            &sentences,
            "--output",
            s(&idx),
            "--quantize",
            "binary",
            "--ann",
            "--hnsw-m",
            "8",
            "--ef-construction",
            "32",
        ],
        &cache,
    ));
    assert!(
        out.contains("built the HNSW graph") && out.contains("(hamming distance of the codes)"),
        "{out}"
    );
    let json = std::fs::read_to_string(dir.path().join("q.idx.hnsw.json")).unwrap();
    assert!(json.contains("\"metric\": \"hamming\""), "{json}");
    let query = "A man is playing a musical instrument.";
    let exact = cli_hits(s(&idx), query, 5, &cache, &["--exact"]);
    // 12 x 5 >= 60: the graph's candidates are every sentence, rescored exactly.
    let all = cli_hits(s(&idx), query, 5, &cache, &["--ann", "--rescore", "12"]);
    assert_eq!(all, exact);
    // One candidate per result: five found by the codes alone, scored exactly.
    let shallow = cli_hits(s(&idx), query, 5, &cache, &["--ann", "--rescore", "1"]);
    assert_eq!(shallow.len(), 5);
    assert!(shallow.iter().all(|h| exact[0].1 >= h.1));

    let rt = runtime();
    let http = client();
    let server = Server::start(&["--index", s(&idx), "--ann", "--rescore", "1"]);
    rt.block_on(async {
        // The graph loads in the background (the scan answers meanwhile).
        let mut method = String::new();
        for _ in 0..200 {
            let info = get(&http, &server.url("/info")).await.body;
            method = info["search_method"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if method.starts_with("hnsw") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(
            method.contains("over the binary codes")
                && method.contains("hamming distance")
                && method.contains("best 1 x top_k rescored"),
            "{method}"
        );
        let url = server.url("/search");
        // --rescore 1 walks the graph as `index search --ann --rescore 1` ...
        let r = post(&http, &url, &json!({"query": query, "top_k": 5})).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let got = served_hits(&r.body);
        assert_eq!(got.len(), 5);
        for (g, w) in got.iter().zip(&shallow) {
            assert_eq!(g.0, w.0, "{got:?} vs {shallow:?}");
            assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {shallow:?}");
        }
        // ... and a request's rescore applies to the graph too.
        let r = post(
            &http,
            &url,
            &json!({"query": query, "top_k": 5, "rescore": 12}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let got = served_hits(&r.body);
        for (g, w) in got.iter().zip(&exact) {
            assert_eq!(g.0, w.0, "{got:?} vs {exact:?}");
            assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {exact:?}");
        }
    });
    server.stop();
}
