//! `bertflow index build|add --with-sparse | --sparse FILE` and `index search
//! --mode dense|sparse|hybrid` on the tiny SPLADE checkpoint of
//! crates/encoder/tests/fixtures: sparse search equals a brute-force scan of
//! the sparse vectors `bertflow encode --pooling splade` writes (same rows,
//! same order, scores within 1e-6), hybrid equals reciprocal-rank fusion of
//! the dense and sparse lists computed here, a build from precomputed
//! vectors (.npy + CSR .npz) equals the model's, `index add` keeps the
//! postings, and the errors (an index without sparse vectors, a model
//! without a sparse head, fusion parameters out of range) say what to do.
use crate::common;
use common::{bertflow, fails, ok};
use serde_json::Value;
use std::path::Path;

fn model() -> String {
    common::repo()
        .join("crates/encoder/tests/fixtures/tiny-bert-splade")
        .to_string_lossy()
        .into_owned()
}

/// `n` short texts over a small vocabulary (so that tokens are shared).
fn corpus(n: usize, seed: usize) -> Vec<String> {
    let words = [
        "the", "cat", "dog", "runs", "sleeps", "in", "a", "park", "man", "plays", "guitar",
        "music", "house", "red", "blue", "car", "fast", "slow", "tree", "water",
    ];
    (0..n)
        .map(|i| {
            let k = 3 + (i * 7 + seed) % 5;
            (0..k)
                .map(|j| words[(i * 13 + j * 5 + seed * 3 + j * j) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) -> String {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
    path.to_string_lossy().into_owned()
}

/// The sparse vectors of `texts` as `encode --pooling splade` writes them.
fn encode_sparse(texts: &str, dir: &Path, name: &str) -> Vec<(Vec<u32>, Vec<f32>)> {
    let out = dir.join(name);
    let m = model();
    ok(&bertflow(
        &[
            "encode",
            "-m",
            &m,
            "--pooling",
            "splade",
            "-i",
            texts,
            "-o",
            out.to_str().unwrap(),
        ],
        dir,
    ));
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let ids = v["indices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32);
            let ws = v["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32);
            (ids.collect(), ws.collect())
        })
        .collect()
}

fn dot(a: &(Vec<u32>, Vec<f32>), b: &(Vec<u32>, Vec<f32>)) -> f32 {
    bertflow_core::index::sparse_dot((&a.0, &a.1), (&b.0, &b.1))
}

/// Brute force: rows sharing a token with `q`, best first, ties to the lower row.
fn brute(docs: &[(Vec<u32>, Vec<f32>)], q: &(Vec<u32>, Vec<f32>), k: usize) -> Vec<(usize, f32)> {
    let mut s: Vec<(usize, f32)> = docs
        .iter()
        .enumerate()
        .filter(|(_, d)| d.0.iter().any(|i| q.0.contains(i)))
        .map(|(i, d)| (i, dot(d, q)))
        .collect();
    s.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    s.truncate(k);
    s
}

/// `index search` hits per query: (row, score).
fn search(index: &str, queries: &[String], extra: &[&str], dir: &Path) -> Vec<Vec<(usize, f32)>> {
    let m = model();
    let mut args = vec!["index", "search", "-m", &m, "--index", index];
    for q in queries {
        args.extend(["--query", q]);
    }
    args.extend(extra);
    ok(&bertflow(&args, dir))
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["hits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    (
                        h["index"].as_u64().unwrap() as usize,
                        h["score"].as_f64().unwrap() as f32,
                    )
                })
                .collect()
        })
        .collect()
}

pub(crate) fn assert_same(got: &[(usize, f32)], want: &[(usize, f32)], what: &str) {
    assert_eq!(
        got.iter().map(|h| h.0).collect::<Vec<_>>(),
        want.iter().map(|h| h.0).collect::<Vec<_>>(),
        "{what}: {got:?} vs {want:?}"
    );
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.1 - w.1).abs() <= 1e-6 * w.1.abs().max(1.0),
            "{what}: {g:?} vs {w:?}"
        );
    }
}

#[test]
fn sparse_and_hybrid_search_equal_a_brute_force_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let texts = corpus(40, 1);
    let file = write_lines(&dir.join("corpus.txt"), &texts);
    let queries: Vec<String> = vec![
        "the cat runs".into(),
        "blue car in a park".into(),
        "music".into(),
    ];
    let qfile = write_lines(&dir.join("queries.txt"), &queries);
    let docs = encode_sparse(&file, dir, "docs.jsonl");
    let qs = encode_sparse(&qfile, dir, "queries.jsonl");
    let m = model();
    let idx = dir.join("s.bfi");
    let idx_s = idx.to_str().unwrap();
    let args = [
        "index",
        "build",
        "-m",
        &m,
        "--corpus",
        &file,
        "-o",
        idx_s,
        "--chunk",
        "15",
        "--with-sparse",
    ];
    ok(&bertflow(&args, dir));
    let info = ok(&bertflow(&["index", "info", "--index", idx_s], dir));
    assert!(
        info.contains("3 segment(s)") && info.contains("sparse vectors splade tiny-bert-splade@"),
        "{info}"
    );
    let postings: usize = docs.iter().map(|d| d.0.len()).sum();
    assert!(info.contains(&format!("{postings} postings")), "{info}");
    ok(&bertflow(&["index", "verify", "--index", idx_s], dir));

    let sparse = search(idx_s, &queries, &["--mode", "sparse", "-k", "7"], dir);
    for (qi, q) in qs.iter().enumerate() {
        assert_same(&sparse[qi], &brute(&docs, q, 7), &format!("sparse q{qi}"));
    }
    // Hybrid (RRF, k = 60, depth max(10 x 5, 100) = 100: every row) from the
    // dense list of `--mode dense` and the brute-force sparse list.
    let dense = search(idx_s, &queries, &["--mode", "dense", "-k", "100"], dir);
    let hybrid = search(idx_s, &queries, &["--mode", "hybrid", "-k", "5"], dir);
    let hybrid_k10 = search(
        idx_s,
        &queries,
        &[
            "--mode", "hybrid", "-k", "5", "--rrf-k", "10", "--depth", "8",
        ],
        dir,
    );
    for (qi, q) in qs.iter().enumerate() {
        let sl = brute(&docs, q, 100);
        let want = bertflow_core::indexing::fuse_rrf(&dense[qi], &sl, 60.0, 5);
        assert_same(&hybrid[qi], &want, &format!("hybrid q{qi}"));
        let want = bertflow_core::indexing::fuse_rrf(&dense[qi][..8], &brute(&docs, q, 8), 10.0, 5);
        assert_same(&hybrid_k10[qi], &want, &format!("hybrid rrf-k 10 q{qi}"));
    }
    // Weighted with alpha 1 ranks by the cosine alone: the dense order.
    let weighted = search(
        idx_s,
        &queries,
        &[
            "--mode", "hybrid", "--fusion", "weighted", "--alpha", "1", "-k", "5",
        ],
        dir,
    );
    for qi in 0..queries.len() {
        assert_same(&weighted[qi], &dense[qi][..5], &format!("weighted q{qi}"));
    }

    // The same index from precomputed vectors: dense .npy + CSR .npz.
    let npz = dir.join("docs.npz");
    let npy = dir.join("docs.npy");
    ok(&bertflow(
        &[
            "encode",
            "-m",
            &m,
            "--pooling",
            "splade",
            "-i",
            &file,
            "-o",
            npz.to_str().unwrap(),
        ],
        dir,
    ));
    ok(&bertflow(
        &["encode", "-m", &m, "-i", &file, "-o", npy.to_str().unwrap()],
        dir,
    ));
    let pre = dir.join("pre.bfi");
    let pre_s = pre.to_str().unwrap();
    ok(&bertflow(
        &[
            "index",
            "build",
            "-m",
            &m,
            "--vectors",
            npy.to_str().unwrap(),
            "--texts",
            &file,
            "--sparse",
            npz.to_str().unwrap(),
            "-o",
            pre_s,
        ],
        dir,
    ));
    let info = ok(&bertflow(&["index", "info", "--index", pre_s], dir));
    assert!(info.contains("sparse vectors file docs.npz"), "{info}");
    assert_eq!(
        search(pre_s, &queries, &["--mode", "sparse", "-k", "7"], dir),
        sparse
    );
    assert_eq!(
        search(pre_s, &queries, &["--mode", "hybrid", "-k", "5"], dir),
        hybrid
    );

    // `index add` to a sparse index stores the new sentences' sparse vectors.
    let more = corpus(12, 5);
    let more_file = write_lines(&dir.join("more.txt"), &more);
    ok(&bertflow(
        &[
            "index", "add", "-m", &m, "--corpus", &more_file, "--index", idx_s,
        ],
        dir,
    ));
    let mut all = docs.clone();
    all.extend(encode_sparse(&more_file, dir, "more.jsonl"));
    let after = search(idx_s, &queries, &["--mode", "sparse", "-k", "60"], dir);
    for (qi, q) in qs.iter().enumerate() {
        assert_same(&after[qi], &brute(&all, q, 60), &format!("after add q{qi}"));
    }
    ok(&bertflow(&["index", "verify", "--index", idx_s], dir));
}

#[test]
fn errors_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let file = write_lines(&dir.join("corpus.txt"), &corpus(6, 2));
    let m = model();
    let dense = dir.join("d.bfi");
    let dense_s = dense.to_str().unwrap();
    ok(&bertflow(
        &["index", "build", "-m", &m, "--corpus", &file, "-o", dense_s],
        dir,
    ));
    for mode in ["sparse", "hybrid"] {
        let e = fails(&bertflow(
            &[
                "index", "search", "-m", &m, "--index", dense_s, "--query", "cat", "--mode", mode,
            ],
            dir,
        ));
        assert!(
            e.contains("stores no sparse vectors") && e.contains("--with-sparse"),
            "{e}"
        );
    }
    let e = fails(&bertflow(
        &[
            "index",
            "add",
            "-m",
            &m,
            "--corpus",
            &file,
            "--index",
            dense_s,
            "--with-sparse",
        ],
        dir,
    ));
    assert!(e.contains("stores no sparse vectors"), "{e}");
    // A model without a sparse head.
    let plain = common::repo().join("crates/encoder/tests/fixtures/tiny-bert");
    let e = fails(&bertflow(
        &[
            "index",
            "build",
            "-m",
            plain.to_str().unwrap(),
            "--corpus",
            &file,
            "-o",
            dense_s,
            "--with-sparse",
        ],
        dir,
    ));
    assert!(e.contains("has no sparse head"), "{e}");
    for (flags, what) in [
        (&["--mode", "both"][..], "dense, sparse, hybrid"),
        (&["--fusion", "sum"][..], "rrf, weighted"),
        (&["--alpha", "1.5"][..], "alpha"),
        (&["--rrf-k", "0"][..], "rrf-k"),
        (&["--depth", "0"][..], "depth"),
    ] {
        let mut args = vec![
            "index", "search", "-m", &m, "--index", dense_s, "--query", "cat",
        ];
        args.extend(flags);
        let e = fails(&bertflow(&args, dir));
        assert!(e.contains(what), "{flags:?}: {e}");
    }
    // -h: one line per option.
    for cmd in [["index", "search"], ["index", "add"]] {
        let h = ok(&bertflow(&[cmd[0], cmd[1], "-h"], dir));
        let lines: Vec<&str> = h.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.trim_start().starts_with('-') {
                if let Some(next) = lines.get(i + 1) {
                    assert!(
                        !next.starts_with("          ") || next.trim_start().starts_with('-'),
                        "{cmd:?} -h wraps:\n{l}\n{next}"
                    );
                }
            }
        }
        assert!(h.contains("--mode") || cmd[1] == "add", "{h}");
    }
}
