//! `/v1/embeddings`' code formats with a fake backend whose calibrator ends
//! in a quantizer stage: the codes against an independent computation (sign
//! bits packed MSB-first; `round(x / s)` with `s = max |x| / 127` of the fit
//! set), the sibling formats, base64 of the code bytes, and the errors.
mod common;

use std::sync::Arc;

use base64::Engine as _;
use bertflow_core::quantize::{QuantSpec, Quantizer};
use bertflow_server::{
    BackendError, BackendInfo, EmbedBackend, Embedded, Encoding, ServerConfig, Tokenized,
};
use common::{assert_error, vector_of, Fake, TestServer, DIM};
use serde_json::{json, Value};

/// [`Fake`] with a quantizer stage fitted on the vectors of `fit`.
struct Coded {
    fake: Arc<Fake>,
    stage: Quantizer,
}

impl Coded {
    fn new(spec: &str, fit: &[String]) -> Arc<Self> {
        let rows: Vec<f32> = fit.iter().flat_map(|t| vector_of(t)).collect();
        let x = ndarray::Array2::from_shape_vec((fit.len(), DIM), rows).unwrap();
        let spec: QuantSpec = spec.parse().unwrap();
        Arc::new(Coded {
            fake: Fake::new(512),
            stage: Quantizer::fit(&spec, x.view()).unwrap(),
        })
    }
}

impl EmbedBackend for Coded {
    fn info(&self) -> BackendInfo {
        self.fake.info()
    }
    fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoding, BackendError> {
        self.fake.encode(text, pair)
    }
    fn embed(&self, batch: &[Encoding]) -> Result<Vec<Embedded>, BackendError> {
        self.fake.embed(batch)
    }
    fn tokenize(&self, text: &str) -> Option<Result<Tokenized, BackendError>> {
        self.fake.tokenize(text)
    }
    fn quantizer(&self) -> Option<&Quantizer> {
        Some(&self.stage)
    }
}

fn texts() -> Vec<String> {
    (0..12).map(|i| format!("sentence number {i}")).collect()
}

fn integers(body: &Value) -> Vec<Vec<i64>> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap_or_else(|| panic!("not an array: {d}"))
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_bits_are_packed_msb_first() {
    let t = texts();
    let s = TestServer::start(Coded::new("ubinary", &t), ServerConfig::default()).await;
    // numpy.packbits(v > 0): DIM = 8 bits, one byte, the first dimension the top bit.
    let want: Vec<u8> = t
        .iter()
        .map(|x| {
            vector_of(x)
                .iter()
                .enumerate()
                .fold(0u8, |b, (j, &v)| if v > 0.0 { b | 0x80 >> j } else { b })
        })
        .collect();
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": t, "encoding_format": "ubinary"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let got = integers(&body);
    assert_eq!(
        got,
        want.iter().map(|&b| vec![i64::from(b)]).collect::<Vec<_>>()
    );
    let (_, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": t, "encoding_format": "binary"}),
        )
        .await;
    let signed: Vec<Vec<i64>> = want
        .iter()
        .map(|&b| vec![i64::from(b as i8 ^ i8::MIN)])
        .collect();
    assert_eq!(integers(&body), signed);
    let (_, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": t, "encoding_format": "ubinary", "code_encoding": "base64"}),
        )
        .await;
    for (d, &b) in body["data"].as_array().unwrap().iter().zip(&want) {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(d["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(raw, vec![b]);
    }
    // Floats unchanged; int8 is the other family; a cut changes the width.
    let (status, body) = s
        .post("/v1/embeddings", &json!({"input": t[0], "dimensions": 3}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 3);
    for (req, param) in [
        (
            json!({"input": "a", "encoding_format": "int8"}),
            "encoding_format",
        ),
        (
            json!({"input": "a", "encoding_format": "binary", "dimensions": 4}),
            "dimensions",
        ),
        (
            json!({"input": "a", "encoding_format": "float", "code_encoding": "base64"}),
            "code_encoding",
        ),
    ] {
        let (status, body) = s.post("/v1/embeddings", &req).await;
        assert_error(status, &body, 422, "invalid_field");
        assert_eq!(body["error"]["param"], param, "{body}");
    }
    let (_, info) = s.get("/info").await;
    assert_eq!(
        info["encoding_formats"],
        json!(["float", "base64", "binary", "ubinary"])
    );
    assert!(
        info["quantizer"]
            .as_str()
            .unwrap()
            .starts_with("ubinary (sign bits; 8 dims -> 1 bytes)"),
        "{info}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int8_codes_use_the_fitted_scale() {
    let t = texts();
    let s = TestServer::start(Coded::new("int8", &t), ServerConfig::default()).await;
    let max = t
        .iter()
        .flat_map(|x| vector_of(x))
        .fold(0.0f64, |m, v| m.max(f64::from(v).abs()));
    let scale = max / 127.0;
    let want: Vec<Vec<i64>> = t
        .iter()
        .map(|x| {
            vector_of(x)
                .iter()
                .map(|&v| (f64::from(v) / scale).round() as i64)
                .collect()
        })
        .collect();
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": t, "encoding_format": "int8"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(integers(&body), want);
    assert!(want.iter().flatten().any(|&v| v.abs() == 127));
    let (_, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": t, "encoding_format": "uint8"}),
        )
        .await;
    let shifted: Vec<Vec<i64>> = want
        .iter()
        .map(|r| r.iter().map(|v| v + 128).collect())
        .collect();
    assert_eq!(integers(&body), shifted);
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "a", "encoding_format": "int8", "normalize": true}),
        )
        .await;
    assert_error(status, &body, 422, "invalid_field");
    assert_eq!(body["error"]["param"], "normalize");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_without_a_stage_or_of_an_unknown_name_are_refused() {
    let s = TestServer::start(Fake::new(512), ServerConfig::default()).await;
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "a", "encoding_format": "binary"}),
        )
        .await;
    assert_error(status, &body, 422, "invalid_field");
    assert_eq!(body["error"]["param"], "encoding_format");
    let m = body["error"]["message"].as_str().unwrap();
    assert!(m.contains("`bertflow fit ... --quantize binary`"), "{m}");
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"input": "a", "encoding_format": "bits"}),
        )
        .await;
    assert_error(status, &body, 422, "invalid_field");
    let m = body["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("expected one of `float`, `base64`, `int8`, `uint8`, `binary`, `ubinary`"),
        "{m}"
    );
    let (_, info) = s.get("/info").await;
    assert_eq!(info["quantizer"], Value::Null);
    assert_eq!(info["encoding_formats"], json!(["float", "base64"]));
    s.stop().await;
}
