//! `bertflow encode` of sparse and per-token outputs and `bertflow rerank
//! --late-interaction` on the tiny SPLADE and BGE-M3-shaped checkpoints of
//! crates/encoder/tests/fixtures (references in their golden.json, from
//! scripts/reference/make_tiny_sparse.py): JSONL and CSR `.npz` (read back by
//! core's reader), `--decode`, `--max-active-dims`, `--outputs
//! dense,sparse,multi` from one pass, `--multi-vector` `.safetensors` with
//! offsets; and calibrators refusing sparse and per-token vectors.
use crate::common;
use bertflow_core::retrieval::{maxsim, SparseVector};
use bertflow_core::sparse_io::read_csr_npz;
use common::{bertflow, fails, ok};
use ndarray::Array2;
use serde_json::Value;
use std::path::Path;

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

/// The golden texts written one a line to `dir/in.txt`.
fn input(g: &Value, dir: &Path) -> String {
    let texts: Vec<&str> = g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    let p = dir.join("in.txt");
    std::fs::write(&p, texts.join("\n") + "\n").unwrap();
    p.to_string_lossy().into_owned()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sparse(v: &Value) -> SparseVector {
    let f = |k: &str| v[k].as_array().unwrap().clone();
    SparseVector {
        indices: f("indices")
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect(),
        values: f("values")
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect(),
    }
}

fn close(a: &SparseVector, b: &SparseVector) -> bool {
    a.indices == b.indices
        && a.values
            .iter()
            .zip(&b.values)
            .all(|(x, y)| (x - y).abs() < 1e-5)
}

fn matrix(v: &Value) -> Array2<f32> {
    let rows: Vec<Vec<f32>> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    let d = rows[0].len();
    Array2::from_shape_vec((rows.len(), d), rows.concat()).unwrap()
}

#[test]
fn splade_writes_jsonl_and_csr_npz_as_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let g = golden("bert-splade");
    let model = fixture("bert-splade");
    let inp = input(&g, tmp.path());
    let out = tmp.path().join("s.jsonl");
    let o = out.to_str().unwrap();
    let base = ["encode", "-m", &model, "--pooling", "splade", "-i", &inp];
    let mut args = base.to_vec();
    args.extend(["-o", o, "--decode", "3"]);
    ok(&bertflow(&args, tmp.path()));
    let rows = lines(&out);
    let cases = g["cases"].as_array().unwrap();
    assert_eq!(rows.len(), cases.len());
    for (r, c) in rows.iter().zip(cases) {
        assert!(close(&sparse(r), &sparse(&c["sparse"])), "{}", c["text"]);
        let named: Vec<&Value> = r["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p[0])
            .collect();
        let want: Vec<&Value> = c["decode3"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p[0])
            .collect();
        assert_eq!(named, want);
    }
    let npz = tmp.path().join("s.npz");
    let mut args = base.to_vec();
    args.extend(["-o", npz.to_str().unwrap(), "--max-active-dims", "3"]);
    ok(&bertflow(&args, tmp.path()));
    let (vecs, dim) = read_csr_npz(&std::fs::read(&npz).unwrap()).unwrap();
    assert_eq!(dim, g["vocab_size"].as_u64().unwrap() as usize);
    for (v, c) in vecs.iter().zip(cases) {
        assert!(close(v, &sparse(&c["top3"])), "{}", c["text"]);
    }
    // --decode needs JSONL; a dense pooling with --outputs is refused.
    let mut args = base.to_vec();
    args.extend(["-o", npz.to_str().unwrap(), "--decode", "2"]);
    assert!(fails(&bertflow(&args, tmp.path())).contains("--decode"));
    let e = fails(&bertflow(
        &[
            "encode",
            "-m",
            &model,
            "--pooling",
            "cls",
            "--outputs",
            "sparse",
            "-i",
            &inp,
            "-o",
            o,
        ],
        tmp.path(),
    ));
    assert!(e.contains("dense vectors"), "{e}");
}

#[test]
fn bge_m3_writes_three_outputs_from_one_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let g = golden("bge-m3");
    let model = fixture("bge-m3");
    let inp = input(&g, tmp.path());
    let out = tmp.path().join("all.jsonl");
    let base = [
        "encode",
        "-m",
        &model,
        "-i",
        &inp,
        "--outputs",
        "dense,sparse,multi",
    ];
    let mut args = base.to_vec();
    args.extend(["-o", out.to_str().unwrap()]);
    ok(&bertflow(&args, tmp.path()));
    let cases = g["cases"].as_array().unwrap();
    for (r, c) in lines(&out).iter().zip(cases) {
        assert!(close(&sparse(r), &sparse(&c["sparse"])), "{}", c["text"]);
        let d = matrix(&Value::Array(vec![r["embedding"].clone()]));
        let w = matrix(&Value::Array(vec![c["dense"].clone()]));
        assert!((d - w).iter().all(|x| x.abs() < 1e-5));
        let m = matrix(&r["vectors"]) - matrix(&c["colbert"]);
        assert!(m.iter().all(|x| x.abs() < 1e-5), "{}", c["text"]);
    }
    // A directory: dense.npy, sparse.npz, multi.safetensors.
    let dir = tmp.path().join("out");
    let mut args = base.to_vec();
    args.extend(["-o", dir.to_str().unwrap()]);
    ok(&bertflow(&args, tmp.path()));
    let dense = common::read_npy(&dir.join("dense.npy"));
    assert_eq!(dense.nrows(), cases.len());
    let (vecs, _) = read_csr_npz(&std::fs::read(dir.join("sparse.npz")).unwrap()).unwrap();
    assert!(close(&vecs[0], &sparse(&cases[0]["sparse"])));
    let bytes = std::fs::read(dir.join("multi.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let off: Vec<i64> = st
        .tensor("offsets")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let counts: Vec<i64> = cases
        .iter()
        .map(|c| c["colbert"].as_array().unwrap().len() as i64)
        .collect();
    assert_eq!(
        off.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
        counts
    );
    // --multi-vector alone: a .safetensors; a .npz for it is refused.
    let mv = tmp.path().join("mv.safetensors");
    ok(&bertflow(
        &[
            "encode",
            "-m",
            &model,
            "-i",
            &inp,
            "--multi-vector",
            "-o",
            mv.to_str().unwrap(),
        ],
        tmp.path(),
    ));
    let e = fails(&bertflow(
        &[
            "encode",
            "-m",
            &model,
            "-i",
            &inp,
            "--multi-vector",
            "-o",
            "x.npz",
        ],
        tmp.path(),
    ));
    assert!(e.contains(".safetensors"), "{e}");
    // A calibrator refuses per-token and sparse files.
    for file in [mv, dir.join("sparse.npz")] {
        let e = fails(&bertflow(
            &[
                "fit",
                "--embeddings",
                file.to_str().unwrap(),
                "--kind",
                "whiten",
                "-o",
                "c.safetensors",
            ],
            tmp.path(),
        ));
        assert!(e.contains("dense sentence vectors only"), "{e}");
    }
}

#[test]
fn late_interaction_reranks_by_maxsim() {
    let tmp = tempfile::tempdir().unwrap();
    let g = golden("bge-m3");
    let model = fixture("bge-m3");
    let cases = g["cases"].as_array().unwrap();
    let query = cases[1]["text"].as_str().unwrap();
    let texts: Vec<&str> = [0, 3, 4]
        .iter()
        .map(|&i| cases[i]["text"].as_str().unwrap())
        .collect();
    let mut args = vec![
        "rerank",
        "--late-interaction",
        "-m",
        &model,
        "--query",
        query,
        "--json",
    ];
    args.extend(&texts);
    let out = ok(&bertflow(&args, tmp.path()));
    let q = matrix(&cases[1]["colbert"]);
    for line in out.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let i = [0, 3, 4][r["index"].as_u64().unwrap() as usize];
        let want = maxsim(q.view(), matrix(&cases[i]["colbert"]).view()).unwrap();
        let got = r["score"].as_f64().unwrap() as f32;
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
}

#[test]
fn calibrators_refuse_the_splade_pooling() {
    let tmp = tempfile::tempdir().unwrap();
    let g = golden("bert-splade");
    let model = fixture("bert-splade");
    let inp = input(&g, tmp.path());
    let e = fails(&bertflow(
        &[
            "fit",
            "-m",
            &model,
            "--pooling",
            "splade",
            "--kind",
            "whiten",
            "--on",
            &inp,
            "-o",
            "c.safetensors",
        ],
        tmp.path(),
    ));
    assert!(e.contains("dense vectors only"), "{e}");
    let e = fails(&bertflow(
        &[
            "encode",
            "-m",
            &model,
            "--pooling",
            "splade",
            "--calibrator",
            "c.safetensors",
            "-i",
            &inp,
            "-o",
            "x.npz",
        ],
        tmp.path(),
    ));
    assert!(
        e.contains("dense vectors only") || e.contains("dense pooling"),
        "{e}"
    );
}

fn served(model: &str, extra: &[&str]) -> common::serve::Server {
    let mut args = vec!["--model", model, "--host", "127.0.0.1", "--port", "0"];
    args.extend(extra);
    common::serve::Server::start_raw(&args)
}

#[test]
fn serve_answers_embed_sparse_embed_multi_and_late_interaction_rerank() {
    let _serial = common::serve::serial();
    let g = golden("bge-m3");
    let cases = g["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let q = &g["query"];
    let query_len = q["length"].as_u64().unwrap().to_string();
    let server = served(
        &fixture("bge-m3"),
        &[
            "--outputs",
            "dense,sparse,multi",
            "--query-length",
            &query_len,
        ],
    );
    // /embed_sparse in TEI's shape: [{index, value}] per input, ids ascending
    // (the reference cut the long case at the model's 38 tokens: truncate).
    let (status, body) = common::serve::post_json(
        &server,
        "/embed_sparse",
        serde_json::json!({"inputs": texts, "truncate": true}),
    );
    assert_eq!(status, 200, "{body}");
    for (got, c) in body.as_array().unwrap().iter().zip(cases) {
        let got = SparseVector {
            indices: got
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["index"].as_u64().unwrap() as u32)
                .collect(),
            values: got
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["value"].as_f64().unwrap() as f32)
                .collect(),
        };
        assert!(close(&got, &sparse(&c["sparse"])), "{}", c["text"]);
    }
    // /embed_multi: the reference's per-token vectors; a query padded to its length.
    let (status, body) = common::serve::post_json(
        &server,
        "/embed_multi",
        serde_json::json!({"inputs": texts, "truncate": true}),
    );
    assert_eq!(status, 200, "{body}");
    for (got, c) in body.as_array().unwrap().iter().zip(cases) {
        let d = matrix(got) - matrix(&c["colbert"]);
        assert!(d.iter().all(|x| x.abs() < 1e-5), "{}", c["text"]);
    }
    let (status, body) = common::serve::post_json(
        &server,
        "/embed_multi",
        serde_json::json!({"inputs": q["text"], "is_query": true}),
    );
    assert_eq!(status, 200, "{body}");
    let d = matrix(&body[0]) - matrix(&q["colbert"]);
    assert!(d.iter().all(|x| x.abs() < 1e-5), "{body}");
    // /embed: BGE-M3's dense output (unit length already).
    let (status, body) =
        common::serve::post_json(&server, "/embed", serde_json::json!({"inputs": texts[0]}));
    assert_eq!(status, 200, "{body}");
    let d = matrix(&body) - matrix(&Value::Array(vec![cases[0]["dense"].clone()]));
    assert!(d.iter().all(|x| x.abs() < 1e-5), "{body}");
    // /rerank by MaxSim of the padded query against each text, best first.
    let (status, body) = common::serve::post_json(
        &server,
        "/rerank",
        serde_json::json!({"query": q["text"], "texts": texts, "truncate": true}),
    );
    assert_eq!(status, 200, "{body}");
    let qm = matrix(&q["colbert"]);
    let ranks = body.as_array().unwrap();
    assert_eq!(ranks.len(), texts.len());
    for pair in ranks.windows(2) {
        assert!(
            pair[0]["score"].as_f64() >= pair[1]["score"].as_f64(),
            "{body}"
        );
    }
    for r in ranks {
        let i = r["index"].as_u64().unwrap() as usize;
        let want = maxsim(qm.view(), matrix(&cases[i]["colbert"]).view()).unwrap();
        let got = r["score"].as_f64().unwrap() as f32;
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
    server.stop();

    // A SPLADE model: /embed_sparse as the reference; /embed is refused (424).
    let g = golden("bert-splade");
    let server = served(&fixture("bert-splade"), &["--pooling", "splade"]);
    let case = &g["cases"][0];
    let (status, body) = common::serve::post_json(
        &server,
        "/embed_sparse",
        serde_json::json!({"inputs": case["text"]}),
    );
    assert_eq!(status, 200, "{body}");
    let got = SparseVector {
        indices: body[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["index"].as_u64().unwrap() as u32)
            .collect(),
        values: body[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["value"].as_f64().unwrap() as f32)
            .collect(),
    };
    assert!(close(&got, &sparse(&case["sparse"])), "{body}");
    let (status, body) =
        common::serve::post_json(&server, "/embed", serde_json::json!({"inputs": "a"}));
    assert_eq!(status, 424, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("--outputs"),
        "{body}"
    );
    server.stop();

    // A dense model served as usual has no sparse head: TEI's 424.
    let server = served(&fixture("bert"), &[]);
    let (status, body) =
        common::serve::post_json(&server, "/embed_sparse", serde_json::json!({"inputs": "a"}));
    assert_eq!(status, 424, "{body}");
    assert_eq!(body["error_type"], "Backend", "{body}");
    server.stop();
}
