//! Every encoder family through the binary's front ends: the tiny random
//! checkpoints of crates/encoder/tests/fixtures (RoBERTa, XLM-RoBERTa,
//! CamemBERT, DistilBERT, MPNet, ModernBERT; made with transformers by
//! scripts/reference/make_tiny_models.py and make_tiny_modernbert.py) through
//! `bertflow index build` and `bertflow serve` give transformers' `last-avg`
//! vectors (golden.json beside each checkpoint), a truncated sentence
//! included.
use bertflow_core::index::Index;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_bertflow");
const FAMILIES: [&str; 6] = [
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "mpnet",
    "modernbert",
];

fn fixture(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../encoder/tests/fixtures")
        .join(format!("tiny-{family}"))
}

/// The texts and transformers' `last-avg` vectors of a fixture (stored per
/// case by make_tiny_models.py, per pooling by make_tiny_modernbert.py).
fn golden(dir: &Path) -> (Vec<String>, Vec<Vec<f32>>) {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let cases = g["cases"].as_array().unwrap();
    let texts = cases
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    let vectors = match g["poolings"].get("last-avg") {
        Some(per_pooling) => per_pooling.as_array().unwrap().iter().map(floats).collect(),
        None => cases.iter().map(|c| floats(&c["last-avg"])).collect(),
    };
    (texts, vectors)
}

fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn index_build_of_every_family_stores_transformers_vectors() {
    let tmp = tempfile::tempdir().unwrap();
    for family in FAMILIES {
        let dir = fixture(family);
        let (texts, want) = golden(&dir);
        let corpus = tmp.path().join(format!("{family}.txt"));
        std::fs::write(&corpus, texts.join("\n") + "\n").unwrap();
        let idx = tmp.path().join(format!("{family}.idx"));
        let out = Command::new(BIN)
            .env("BERTFLOW_TUNE", "0")
            .args(["index", "build", "--pooling", "last-avg", "--model"])
            .arg(&dir)
            .arg("--corpus")
            .arg(&corpus)
            .arg("--output")
            .arg(&idx)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{family}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let index = Index::open(&idx, true).unwrap();
        assert_eq!(index.len(), texts.len(), "{family}");
        for (i, w) in want.iter().enumerate() {
            assert_eq!(index.text(i).unwrap(), texts[i], "{family}");
            // The index stores unit vectors.
            let d = max_diff(index.vector(i).unwrap(), &unit(w));
            assert!(d < 1e-5, "{family} sentence {i}: max abs diff {d}");
        }
    }
}

#[test]
fn serve_of_every_family_answers_transformers_vectors() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for family in FAMILIES {
        let dir = fixture(family);
        let (texts, want) = golden(&dir);
        let mut child = Command::new(BIN)
            .env("BERTFLOW_TUNE", "0")
            .args(["serve", "--host", "127.0.0.1", "--port", "0", "--model"])
            .arg(&dir)
            .env_remove("BERTFLOW_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{family}: the server printed no address"));
        let body: Value = rt.block_on(async {
            let client = reqwest::Client::new();
            for _ in 0..100 {
                if client.get(format!("{base}/health")).send().await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            client
                .post(format!("{base}/v1/embeddings"))
                .json(&json!({ "input": texts }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        let _ = child.kill();
        let _ = child.wait();
        let data = body["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{family}: {body}"));
        assert_eq!(data.len(), want.len(), "{family}");
        for (i, (item, w)) in data.iter().zip(&want).enumerate() {
            let got: Vec<f32> = item["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            let d = max_diff(&got, w);
            assert!(d < 1e-5, "{family} sentence {i}: max abs diff {d}");
        }
    }
}
