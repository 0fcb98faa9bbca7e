//! Prompts through the binary on a tiny sentence-transformers directory with
//! prompts (crates/encoder/tests/fixtures/tiny-st/prompts, vectors from
//! sentence-transformers' own `encode(..., prompt_name=...)` in its
//! golden.json): `encode`, `eval`, `fit`, `compare` with `--prompt-name` and
//! `--prompt`, and `serve` with `--default-prompt-name`/`--default-prompt`
//! and `prompt_name` on every text route over real HTTP.
use crate::common;

use common::serve::{reply_of, runtime, Reply, Server};
use common::{bertflow, fails, ok, read_npy, repo};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    repo().join("crates/encoder/tests/fixtures/tiny-st/prompts")
}

fn golden() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("golden.json")).unwrap()).unwrap()
}

fn texts() -> Vec<String> {
    golden()["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

fn case(name: &str) -> Vec<Vec<f32>> {
    golden()["cases"][name]["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn worst(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .flat_map(|(a, b)| {
            assert_eq!(a.len(), b.len());
            a.iter().zip(b).map(|(x, y)| (x - y).abs())
        })
        .fold(0.0, f32::max)
}

fn input(tmp: &Path) -> String {
    let path = tmp.join("texts.txt");
    std::fs::write(&path, texts().join("\n") + "\n").unwrap();
    path.to_str().unwrap().to_string()
}

fn encode(tmp: &Path, name: &str, extra: &[&str]) -> std::process::Output {
    let out = tmp.join(format!("{name}.npy"));
    let input = input(tmp);
    let model = dir();
    let mut args = vec![
        "encode",
        "--model",
        model.to_str().unwrap(),
        "--input",
        &input,
        "--output",
        out.to_str().unwrap(),
    ];
    // `st` unless the case names its own pooling.
    if !extra.contains(&"--pooling") {
        args.extend(["--pooling", "st"]);
    }
    args.extend_from_slice(extra);
    bertflow(&args, &tmp.join("cache"))
}

fn encoded(tmp: &Path, name: &str, extra: &[&str]) -> Vec<Vec<f32>> {
    ok(&encode(tmp, name, extra));
    read_npy(&tmp.join(format!("{name}.npy")))
        .rows()
        .into_iter()
        .map(|r| r.to_vec())
        .collect()
}

#[test]
fn encode_with_each_prompt_equals_sentence_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for (name, args) in [
        ("default", vec![]),
        ("name_query", vec!["--prompt-name", "query"]),
        ("name_document", vec!["--prompt-name", "document"]),
        ("name_search", vec!["--prompt-name", "search"]),
        ("name_empty", vec!["--prompt-name", "empty"]),
        ("text", vec!["--prompt", "a cat "]),
        ("text_empty", vec!["--prompt", ""]),
    ] {
        let w = worst(&encoded(t, name, &args), &case(name));
        assert!(w < 1e-5, "{name}: {w}");
    }
}

#[test]
fn encode_refuses_an_unknown_name_and_a_name_with_a_text() {
    let tmp = tempfile::tempdir().unwrap();
    let e = fails(&encode(tmp.path(), "x", &["--prompt-name", "passage"]));
    assert!(
        e.contains("\"passage\" is not a prompt of model")
            && e.contains("\"query\", \"document\", \"search\", \"empty\""),
        "{e}"
    );
    let e = fails(&encode(
        tmp.path(),
        "x",
        &["--prompt-name", "query", "--prompt", "x"],
    ));
    assert!(e.contains("cannot be used with"), "{e}");
}

#[test]
fn fit_records_the_prompt_and_encode_refuses_another_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let corpus = t.join("corpus.txt");
    let mut lines = texts();
    for s in texts() {
        for w in ["the dog", "a cat", "a man", "someone"] {
            lines.push(format!("{w} and {s}"));
        }
    }
    std::fs::write(&corpus, lines.join("\n")).unwrap();
    let file = t.join("sn.safetensors");
    let model = dir();
    ok(&bertflow(
        &[
            "fit",
            "--model",
            model.to_str().unwrap(),
            "--pooling",
            "last-avg",
            "--kind",
            "sn",
            "--on",
            corpus.to_str().unwrap(),
            "--prompt-name",
            "document",
            "--output",
            file.to_str().unwrap(),
        ],
        &t.join("cache"),
    ));
    let meta = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
    assert!(
        meta.contains(r#"\"prompt\":\"the big red \""#),
        "{}",
        &meta[..400]
    );
    let cal = [
        "--pooling",
        "last-avg",
        "--calibrator",
        file.to_str().unwrap(),
    ];
    fn join<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
        [a, b].concat()
    }
    let with = |extra: &[&'static str]| join(&cal, extra);
    // Its own prompt: fine. The default prompt (query) is another one.
    ok(&encode(t, "a", &with(&["--prompt-name", "document"])));
    let e = fails(&encode(t, "b", &with(&[])));
    assert!(
        e.contains("fitted on sentences with prompt \"the big red \", these have prompt \"someone is playing \""),
        "{e}"
    );
    ok(&encode(t, "c", &with(&["--allow-mismatch"])));
    // With --embeddings no sentence is encoded: a prompt is refused.
    let npy = t.join("a.npy");
    let e = fails(&bertflow(
        &[
            "fit",
            "--embeddings",
            npy.to_str().unwrap(),
            "--kind",
            "sn",
            "--prompt",
            "q: ",
            "--output",
            t.join("e.safetensors").to_str().unwrap(),
        ],
        &t.join("cache"),
    ));
    assert!(e.contains("--embeddings"), "{e}");
}

/// A pair file of the fixture's vocabulary, for `eval` and `compare`.
fn pairs(t: &Path) -> PathBuf {
    let path = t.join("mine.tsv");
    let rows = [
        "5\ta man plays guitar.\ta man is playing music",
        "1\tthe dog runs in the park\ta cat sleeps on the mat",
        "3\tthe cat sleeps on the mat, the dog runs.\ta cat sleeps",
        "0\ta big red car\tsomeone is playing music",
        "4\tthe dog runs\ta dog runs in the park",
        "2\tthe sun\tthe big red sun and a car",
    ];
    std::fs::write(&path, rows.join("\n") + "\n").unwrap();
    path
}

fn scores(t: &Path, command: &str, extra: &[&str]) -> Value {
    let model = dir();
    let pairs = pairs(t);
    let mut args = vec![
        command,
        "--model",
        model.to_str().unwrap(),
        "--pairs",
        pairs.to_str().unwrap(),
        "--json",
    ];
    if command == "eval" {
        args.extend(["--pooling", "st"]);
    } else {
        args.extend([
            "--poolings",
            "last-avg",
            "--kinds",
            "none",
            "--on",
            "target",
        ]);
    }
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&bertflow(&args, &t.join("cache")))).unwrap()
}

#[test]
fn eval_and_compare_take_the_prompt() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    for command in ["eval", "compare"] {
        let default = scores(t, command, &[]);
        let query = scores(t, command, &["--prompt-name", "query"]);
        let none = scores(t, command, &["--prompt", ""]);
        let other = scores(t, command, &["--prompt", "a big red car and "]);
        assert_eq!(default, query, "{command}: the default prompt is query");
        assert_ne!(query, none, "{command}");
        assert_ne!(none, other, "{command}");
        let model = dir();
        let pairs = pairs(t);
        let e = fails(&bertflow(
            &[
                command,
                "--model",
                model.to_str().unwrap(),
                "--pairs",
                pairs.to_str().unwrap(),
                "--prompt-name",
                "nope",
            ],
            &t.join("cache"),
        ));
        assert!(e.contains("\"nope\" is not a prompt"), "{command}: {e}");
    }
}

// ---------------------------------------------------------------------------
// serve

fn serve(extra: &[&str]) -> Server {
    let model = dir();
    let mut args = vec![
        "--model",
        model.to_str().unwrap(),
        "--pooling",
        "st",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--workers",
        "1",
    ];
    args.extend_from_slice(extra);
    Server::start_raw(&args)
}

async fn post(c: &reqwest::Client, url: String, body: Value) -> Reply {
    reply_of(c.post(url).json(&body).send().await).await
}

fn ok_body(r: &Reply) -> &Value {
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    &r.body
}

#[test]
fn every_route_takes_prompt_name_and_the_default_prompt() {
    let server = serve(&[]);
    let texts = texts();
    runtime().block_on(async {
        let c = reqwest::Client::new();
        let rows = |v: &Value| -> Vec<Vec<f32>> { v.as_array().unwrap().iter().map(floats).collect() };
        let url = |p: &str| server.url(p);
        // /embed: vectors as they are (normalize false).
        for (name, prompt_name) in [
            ("default", Value::Null),
            ("name_document", json!("document")),
            ("name_search", json!("search")),
            ("name_empty", json!("empty")),
        ] {
            let r = post(&c, url("/embed"), json!({"inputs": texts, "normalize": false, "truncate": true, "prompt_name": prompt_name})).await;
            let w = worst(&rows(ok_body(&r)), &case(name));
            assert!(w < 1e-5, "/embed {name}: {w}");
            // POST / routes TEI's embed shape the same way.
            let r = post(&c, url("/"), json!({"inputs": texts, "normalize": false, "truncate": true, "prompt_name": prompt_name})).await;
            let w = worst(&rows(ok_body(&r)), &case(name));
            assert!(w < 1e-5, "POST / {name}: {w}");
            // /v1/embeddings.
            let r = post(&c, url("/v1/embeddings"), json!({"input": texts, "prompt_name": prompt_name})).await;
            let got: Vec<Vec<f32>> = ok_body(&r)["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| floats(&d["embedding"]))
                .collect();
            let w = worst(&got, &case(name));
            assert!(w < 1e-5, "/v1/embeddings {name}: {w}");
        }
        // The prompt's tokens are counted.
        let r = post(&c, url("/v1/embeddings"), json!({"input": "cat", "prompt_name": "empty"})).await;
        assert_eq!(ok_body(&r)["usage"]["prompt_tokens"], 3);
        let r = post(&c, url("/v1/embeddings"), json!({"input": "cat"})).await;
        assert_eq!(ok_body(&r)["usage"]["prompt_tokens"], 6);
        // /tokenize (TEI's shape and bertflow's): the prompt's tokens come first.
        let r = post(&c, url("/tokenize"), json!({"inputs": "cat", "prompt_name": "document"})).await;
        let tokens: Vec<&str> = ok_body(&r)[0].as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap()).collect();
        // The tiny vocabulary has none of the prompt's words: three [UNK] before "cat".
        assert_eq!(tokens.len(), 6, "{tokens:?}");
        assert_eq!((tokens[0], tokens[5]), ("[CLS]", "[SEP]"));
        let r = post(&c, url("/tokenize"), json!({"input": "cat"})).await;
        assert_eq!(ok_body(&r)["data"][0]["tokens"].as_array().unwrap().len(), 6, "{}", r.body);
        // /embed_all: one row per token of the prompted text.
        let r = post(&c, url("/embed_all"), json!({"inputs": ["cat"], "prompt_name": "search"})).await;
        assert_eq!(ok_body(&r)[0].as_array().unwrap().len(), 5);
        let r = post(&c, url("/embed_all"), json!({"inputs": ["cat"]})).await;
        assert_eq!(ok_body(&r)[0].as_array().unwrap().len(), 6);
        // /similarity (TEI's shape): the cosine of the prompted vectors.
        let r = post(&c, url("/similarity"), json!({"inputs": {"source_sentence": texts[0], "sentences": [texts[1]]}, "parameters": {"prompt_name": "document"}})).await;
        let want = case("name_document");
        let cos = cosine(&want[0], &want[1]);
        let got = ok_body(&r)[0].as_f64().unwrap() as f32;
        assert!((got - cos).abs() < 1e-5, "{got} vs {cos}");
        // bertflow's own /similarity: the default prompt.
        let r = post(&c, url("/similarity"), json!({"source": texts[0], "targets": [texts[1]]})).await;
        let want = case("default");
        let got = ok_body(&r)["scores"][0].as_f64().unwrap() as f32;
        assert!((got - cosine(&want[0], &want[1])).abs() < 1e-5, "{}", r.body);
        // An unknown name: 422 naming the known ones, on every route.
        for (route, body) in [
            ("/embed", json!({"inputs": "cat", "prompt_name": "nope"})),
            ("/", json!({"inputs": "cat", "prompt_name": "nope"})),
            ("/embed_all", json!({"inputs": "cat", "prompt_name": "nope"})),
            ("/tokenize", json!({"inputs": "cat", "prompt_name": "nope"})),
            ("/similarity", json!({"inputs": {"source_sentence": "a", "sentences": ["b"]}, "parameters": {"prompt_name": "nope"}})),
            ("/v1/embeddings", json!({"input": "cat", "prompt_name": "nope"})),
        ] {
            let r = post(&c, url(route), body).await;
            assert_eq!(r.status.as_u16(), 422, "{route}: {}", r.body);
            let text = r.body.to_string();
            assert!(text.contains("nope") && text.contains("\\\"query\\\", \\\"document\\\""), "{route}: {text}");
        }
        // Token ids are used as they are: no prompt_name with them.
        let r = post(&c, url("/embed"), json!({"inputs": [[2, 5, 3]], "prompt_name": "query"})).await;
        assert_eq!(r.status.as_u16(), 422, "{}", r.body);
    });
    server.stop();
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

#[test]
fn serve_takes_teis_default_prompt_flags() {
    let texts = texts();
    for (flags, name) in [
        (vec!["--default-prompt-name", "document"], "name_document"),
        (vec!["--default-prompt", "a cat "], "text"),
        (vec!["--default-prompt", ""], "text_empty"),
    ] {
        let server = serve(&flags);
        runtime().block_on(async {
            let c = reqwest::Client::new();
            let r = post(&c, server.url("/embed"), json!({"inputs": texts, "normalize": false, "truncate": true})).await;
            let got: Vec<Vec<f32>> = ok_body(&r).as_array().unwrap().iter().map(floats).collect();
            let w = worst(&got, &case(name));
            assert!(w < 1e-5, "{flags:?}: {w}");
            // A request's prompt_name still wins.
            let r = post(&c, server.url("/embed"), json!({"inputs": texts, "normalize": false, "truncate": true, "prompt_name": "search"})).await;
            let got: Vec<Vec<f32>> = ok_body(&r).as_array().unwrap().iter().map(floats).collect();
            assert!(worst(&got, &case("name_search")) < 1e-5, "{flags:?}");
        });
        server.stop();
    }
    let model = dir();
    let tmp = tempfile::tempdir().unwrap();
    let e = fails(&bertflow(
        &[
            "serve",
            "--model",
            model.to_str().unwrap(),
            "--port",
            "0",
            "--default-prompt-name",
            "nope",
        ],
        tmp.path(),
    ));
    assert!(e.contains("\"nope\" is not a prompt"), "{e}");
}
