//! `bertflow rerank` on the tiny cross-encoders of
//! crates/encoder/tests/fixtures (transformers' logits in golden.json):
//! ranked output, TEI-shaped JSON lines, raw scores, --top-k, texts from a
//! file, and the errors naming --model.
use crate::common;
use common::{bertflow, ok};
use serde_json::Value;

fn fixture(name: &str) -> String {
    common::repo()
        .join(format!("crates/encoder/tests/fixtures/tiny-{name}"))
        .to_string_lossy()
        .into_owned()
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/golden.json", fixture(name))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn rerank_ranks_texts_as_transformers_scores_them() {
    let cache = tempfile::tempdir().unwrap();
    let g = golden("roberta-cls");
    // Golden case 6: (query, long text), cut by truncation.
    let query = g["cases"][6]["text"].as_str().unwrap();
    let long = g["cases"][6]["pair"].as_str().unwrap();
    let want = g["cases"][6]["logits"][0].as_f64().unwrap();
    let model = fixture("roberta-cls");
    let texts = ["Hi", long, "a dog is running in the park"];
    let mut args = vec!["rerank", "--model", &model, "--query", query];
    args.extend(texts);
    let run = |extra: &[&str]| {
        let mut a = args.clone();
        a.extend(extra);
        lines(&ok(&bertflow(&a, cache.path())))
    };
    let raw = run(&["--json", "--raw-scores"]);
    assert_eq!(raw.len(), 3);
    let mut seen: Vec<u64> = raw.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    seen.sort();
    assert_eq!(seen, [0, 1, 2]);
    for r in &raw {
        let obj = r.as_object().unwrap();
        assert_eq!(obj.len(), 3, "{r}");
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["text"], texts[i]);
    }
    let long_score = raw.iter().find(|r| r["index"] == 1).unwrap()["score"]
        .as_f64()
        .unwrap();
    assert!((long_score - want).abs() < 1e-5, "{long_score} vs {want}");
    let scores: Vec<f64> = raw.iter().map(|r| r["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    // The sigmoid by default, in the same order; --top-k keeps the best.
    let sig = run(&["--json"]);
    for (s, r) in sig.iter().zip(&raw) {
        assert_eq!(s["index"], r["index"]);
        let x = r["score"].as_f64().unwrap();
        assert!((s["score"].as_f64().unwrap() - 1.0 / (1.0 + (-x).exp())).abs() < 1e-6);
    }
    let top = run(&["--json", "--top-k", "1"]);
    assert_eq!(top, sig[..1]);
    // The human format: one line per text, rank, score, index, text.
    let text = ok(&bertflow(&args, cache.path()));
    let first = text.lines().next().unwrap();
    let best = &sig[0];
    assert!(first.starts_with("  1. "), "{first}");
    assert!(
        first.ends_with(&format!(
            "[{}]  {}",
            best["index"],
            best["text"].as_str().unwrap()
        )),
        "{first}"
    );
    assert_eq!(text.lines().count(), 3);
}

#[test]
fn rerank_reads_texts_from_a_file() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("texts.txt");
    std::fs::write(&file, "Hi\nThe cat sleeps!\n").unwrap();
    let model = fixture("mpnet-cls");
    let f = file.to_str().unwrap();
    let from_file = ok(&bertflow(
        &[
            "rerank", "-m", &model, "--query", "cat", "--texts", f, "--json",
        ],
        cache.path(),
    ));
    let inline = ok(&bertflow(
        &[
            "rerank",
            "-m",
            &model,
            "--query",
            "cat",
            "Hi",
            "The cat sleeps!",
            "--json",
        ],
        cache.path(),
    ));
    assert_eq!(from_file, inline);
    assert_eq!(lines(&from_file).len(), 2);
}

fn fails(args: &[&str]) -> String {
    let cache = tempfile::tempdir().unwrap();
    let out = bertflow(args, cache.path());
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn rerank_errors_name_what_to_change() {
    let emb = fixture("roberta");
    let e = fails(&["rerank", "--model", &emb, "--query", "q", "t"]);
    assert!(
        e.contains("--model: ")
            && e.contains("is an embedding model; it has no classification head"),
        "{e}"
    );
    let two = fixture("bert-cls");
    let e = fails(&["rerank", "--model", &two, "--query", "q", "t"]);
    assert!(e.contains("--model: ") && e.contains("2 labels"), "{e}");
    let model = fixture("roberta-cls");
    let long = "the dog runs on the mat ".repeat(20);
    let e = fails(&[
        "rerank",
        "--model",
        &model,
        "--query",
        "q",
        &long,
        "--no-truncate",
    ]);
    assert!(e.contains("too long"), "{e}");
    let e = fails(&["rerank", "--model", &model, "--query", "q"]);
    assert!(e.contains("--texts") || e.contains("TEXT"), "{e}");
    let e = fails(&[
        "rerank", "--model", &model, "--query", "q", "t", "--top-k", "0",
    ]);
    assert!(e.contains("--top-k"), "{e}");
    // A reranker where an embedding model is needed.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "hello\n").unwrap();
    let out = dir.path().join("out.npy");
    let e = fails(&[
        "encode",
        "--model",
        &model,
        "--input",
        input.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(
        e.contains("--model: ") && e.contains("is a reranker (cross-encoder): use bertflow rerank"),
        "{e}"
    );
}
