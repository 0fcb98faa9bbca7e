//! `bertflow serve` started with text-embeddings-inference's launcher flags
//! (the command line of TEI's documentation) answers TEI's routes with the
//! vectors of `bertflow encode`: the real binary, the real model.
use crate::common;

use common::serve::{model_dir, reference, reply_of, runtime, serial, Reply, Server, SENTENCES};
use reqwest::StatusCode;
use serde_json::{json, Value};

const KEY: &str = "tei-test-key";

async fn call(c: &reqwest::Client, url: &str, body: Option<&Value>) -> Reply {
    let request = match body {
        Some(body) => c.post(url).json(body),
        None => c.get(url),
    };
    reply_of(request.bearer_auth(KEY).send().await).await
}

fn unit(row: ndarray::ArrayView1<f32>) -> Vec<f32> {
    let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
    row.iter().map(|x| x / norm).collect()
}

fn close(got: &Value, want: &[f32], tol: f32) {
    let got: Vec<f32> = got
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {got}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got.len(), want.len());
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= tol, "max |diff| {worst}");
}

#[test]
fn teis_command_line_starts_bertflow_and_its_routes_answer() {
    let _serial = serial();
    let want = &reference().raw;
    let model = model_dir();
    let server = Server::start_raw(&[
        "--model-id",
        model.to_str().unwrap(),
        "--hostname",
        "127.0.0.1",
        "--port",
        "0",
        "--max-batch-tokens",
        "4096",
        "--max-client-batch-size",
        "4",
        "--auto-truncate",
        "--api-key",
        KEY,
    ]);
    runtime().block_on(async {
        let c = reqwest::Client::new();
        // /info: TEI's fields from TEI's flags.
        let info = call(&c, &server.url("/info"), None).await;
        assert_eq!(info.status, StatusCode::OK, "{}", info.body);
        let i = &info.body;
        assert_eq!(i["model_id"], model.to_str().unwrap());
        assert_eq!(i["max_batch_tokens"], 4096);
        assert_eq!(i["max_client_batch_size"], 4);
        assert_eq!(i["auto_truncate"], true);
        assert_eq!(i["max_input_length"], 512);
        assert_eq!(
            i["model_type"],
            json!({"embedding": {"pooling": "last-avg"}})
        );

        // /embed and POST /: unit vectors of `bertflow encode`'s.
        let texts = &SENTENCES[..4];
        for path in ["/embed", "/"] {
            let r = call(&c, &server.url(path), Some(&json!({ "inputs": texts }))).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.body);
            for (k, row) in r.body.as_array().unwrap().iter().enumerate() {
                close(row, &unit(want.row(k)), 1e-5);
            }
        }
        // Token ids from /tokenize embed exactly as the text does.
        let tokens = call(
            &c,
            &server.url("/tokenize"),
            Some(&json!({"inputs": SENTENCES[1]})),
        )
        .await;
        assert_eq!(tokens.status, StatusCode::OK, "{}", tokens.body);
        let ids: Vec<u64> = tokens.body[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_u64().unwrap())
            .collect();
        assert_eq!(tokens.body[0][0]["text"], "[CLS]");
        assert_eq!(tokens.body[0][0]["special"], true);
        let by_ids = call(
            &c,
            &server.url("/embed"),
            Some(&json!({"inputs": [ids], "normalize": false})),
        )
        .await;
        assert_eq!(by_ids.status, StatusCode::OK, "{}", by_ids.body);
        close(&by_ids.body[0], want.row(1).as_slice().unwrap(), 1e-5);
        // /decode gives the (lowercased) words back.
        let text = call(&c, &server.url("/decode"), Some(&json!({ "ids": ids }))).await;
        assert_eq!(text.status, StatusCode::OK, "{}", text.body);
        assert!(
            text.body[0]
                .as_str()
                .unwrap()
                .starts_with(&SENTENCES[1][..5].to_lowercase()),
            "{}",
            text.body
        );
        // /embed_all: the mean of the last layer's token vectors is last-avg's vector.
        let all = call(
            &c,
            &server.url("/embed_all"),
            Some(&json!({"inputs": SENTENCES[1]})),
        )
        .await;
        assert_eq!(all.status, StatusCode::OK, "{}", all.body);
        let rows = all.body[0].as_array().unwrap();
        assert_eq!(rows.len(), ids.len());
        let dim = want.ncols();
        let mut mean = vec![0.0f32; dim];
        for row in rows {
            for (m, x) in mean.iter_mut().zip(row.as_array().unwrap()) {
                *m += x.as_f64().unwrap() as f32 / rows.len() as f32;
            }
        }
        close(&json!(mean), want.row(1).as_slice().unwrap(), 1e-5);

        // --auto-truncate: a long input is cut, unless the request says not to.
        let long = "word ".repeat(600);
        let r = call(&c, &server.url("/embed"), Some(&json!({ "inputs": long }))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let r = call(
            &c,
            &server.url("/embed"),
            Some(&json!({"inputs": long, "truncate": false})),
        )
        .await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
        assert_eq!(r.body["error_type"], "Validation");
        // --max-client-batch-size 4.
        let r = call(
            &c,
            &server.url("/embed"),
            Some(&json!({ "inputs": &SENTENCES[..5] })),
        )
        .await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
        // An embedding model does not rerank: TEI's 424.
        let r = call(
            &c,
            &server.url("/rerank"),
            Some(&json!({"query": "q", "texts": ["a"]})),
        )
        .await;
        assert_eq!(r.status, StatusCode::FAILED_DEPENDENCY, "{}", r.body);
        assert_eq!(r.body["error_type"], "Backend");
        // --api-key: no key, 401.
        let r = reply_of(
            c.post(server.url("/embed"))
                .json(&json!({"inputs": "a"}))
                .send()
                .await,
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    });
}

/// A cross-encoder checkpoint served: TEI's `/rerank` (and `POST /` with
/// `query` + `texts`) scores as transformers does (the fixture's golden
/// logits, through the sigmoid), `/info` says it is a reranker, and an
/// embedding route answers that it is one.
#[test]
fn a_cross_encoder_is_served_for_rerank() {
    let _serial = serial();
    let dir = common::repo().join("crates/encoder/tests/fixtures/tiny-roberta-cls");
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let case = &golden["cases"][6];
    let (query, text) = (
        case["text"].as_str().unwrap(),
        case["pair"].as_str().unwrap(),
    );
    let logit = case["logits"][0].as_f64().unwrap() as f32;
    let want = 1.0 / (1.0 + (-logit).exp());
    let server = Server::start_raw(&[
        "--model-id",
        dir.to_str().unwrap(),
        "--port",
        "0",
        "--api-key",
        KEY,
    ]);
    runtime().block_on(async {
        let c = reqwest::Client::new();
        let info = call(&c, &server.url("/info"), None).await;
        assert_eq!(info.status, StatusCode::OK, "{}", info.body);
        assert!(
            info.body["model_type"].get("reranker").is_some(),
            "{}",
            info.body
        );
        let body = json!({"query": query, "texts": [text, "Hi"], "truncate": true});
        for path in ["/rerank", "/"] {
            let r = call(&c, &server.url(path), Some(&body)).await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
            let hit = r
                .body
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["index"] == 0)
                .unwrap_or_else(|| panic!("{}", r.body));
            let got = hit["score"].as_f64().unwrap() as f32;
            assert!((got - want).abs() < 1e-5, "{path}: {got} vs {want}");
        }
        let r = call(&c, &server.url("/embed"), Some(&json!({"inputs": "a b"}))).await;
        assert!(!r.status.is_success(), "{}", r.body);
        assert!(
            r.body["error"].as_str().unwrap().contains("reranker"),
            "{}",
            r.body
        );
    });
}
