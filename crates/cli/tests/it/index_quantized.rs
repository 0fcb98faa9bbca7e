//! Quantized indexes through the binary: `index build --quantize` (and a
//! calibrator's quantizer stage), `index add` codes the new sentences with the
//! index's quantizer, `index search` answers as the exact search does for
//! sentences of the corpus, `index build --vectors --texts` takes vectors made
//! elsewhere and checks the settings a .safetensors file declares.
use crate::common;

use std::path::{Path, PathBuf};

use common::{bertflow, fails, ok};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `n` distinct sentences numbered from `from`.
fn corpus(dir: &Path, name: &str, n: usize, from: usize) -> PathBuf {
    let animals = ["cat", "dog", "horse", "bird", "fish", "lion", "cow"];
    let verbs = ["runs", "sleeps", "eats", "jumps", "swims"];
    let text: String = (from..from + n)
        .map(|i| {
            format!(
                "The {} {} near house number {i}.\n",
                animals[i % 7],
                verbs[i % 5]
            )
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The hits of `index search` for one query: (index, text).
fn hits(out: &str) -> Vec<(u64, String)> {
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["index"].as_u64().unwrap(),
                h["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn build_add_and_search_a_quantized_index() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let idx = dir.path().join("q.idx");
    let first = corpus(dir.path(), "first.txt", 120, 0);
    let more = corpus(dir.path(), "more.txt", 40, 120);
    let build = [
        "index",
        "build",
        "--corpus",
        s(&first),
        "--output",
        s(&idx),
        "--quantize",
        "binary:itq=true",
        "--chunk",
        "50",
    ];
    assert!(ok(&bertflow(&build, &cache)).contains("wrote 120 sentences"));
    let info = ok(&bertflow(&["index", "info", "--index", s(&idx)], &cache));
    assert!(
        info.contains("codes binary:itq=true (48 bytes each, fitted on 50 vectors"),
        "{info}"
    );
    // Another quantizer at `index add` is refused; the same one, or none, codes
    // the new sentences with the index's.
    let add = |q: Option<&str>| {
        let mut a = vec!["index", "add", "--corpus", s(&more), "--index", s(&idx)];
        if let Some(q) = q {
            a.extend(["--quantize", q]);
        }
        bertflow(&a, &cache)
    };
    assert!(fails(&add(Some("int8"))).contains("stores binary:itq=true codes"));
    assert!(ok(&add(Some("binary:itq=true"))).contains("160 in all"));
    assert!(
        ok(&bertflow(&["index", "verify", "--index", s(&idx)], &cache)).contains("160 sentences")
    );

    // A sentence of the corpus (one added) is its own best match, exactly as
    // the exact search ranks it.
    let query = "The dog sleeps near house number 141.";
    let search = |extra: &[&str]| {
        let mut a = vec![
            "index",
            "search",
            "--index",
            s(&idx),
            "--query",
            query,
            "-k",
            "3",
        ];
        a.extend(extra);
        hits(&ok(&bertflow(&a, &cache)))
    };
    let exact = search(&["--exact"]);
    assert_eq!(exact[0], (141, query.to_owned()));
    assert_eq!(search(&[]), exact);
    assert_eq!(search(&["--rescore", "1", "--threads", "1"])[0], exact[0]);
    assert!(fails(&bertflow(
        &[
            "index",
            "search",
            "--index",
            s(&idx),
            "--query",
            query,
            "--rescore",
            "0"
        ],
        &cache
    ))
    .contains("rescore must be at least 1"));
}

#[test]
fn an_unsupported_quantizer_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let first = corpus(dir.path(), "first.txt", 20, 0);
    let idx = dir.path().join("u.idx");
    // pq is refused before any fit (20 rows could not fit its 256 centroids).
    for (q, why) in [
        ("int8:ranges=dim", "scored as integers"),
        ("pq:m=8", "centroid indices"),
    ] {
        let err = fails(&bertflow(
            &[
                "index",
                "build",
                "--corpus",
                s(&first),
                "--output",
                s(&idx),
                "--quantize",
                q,
            ],
            &cache,
        ));
        assert!(
            err.contains("int8 (global ranges), binary or ubinary") && err.contains(why),
            "{err}"
        );
        assert!(!idx.exists());
    }
}

#[test]
fn build_from_vectors_made_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let texts = corpus(dir.path(), "t.txt", 60, 0);
    let st = dir.path().join("v.safetensors");
    let npy = dir.path().join("v.npy");
    for out in [&st, &npy] {
        ok(&bertflow(
            &["encode", "--input", s(&texts), "--output", s(out)],
            &cache,
        ));
    }
    let from_corpus = dir.path().join("c.idx");
    ok(&bertflow(
        &[
            "index",
            "build",
            "--corpus",
            s(&texts),
            "--output",
            s(&from_corpus),
            "--quantize",
            "int8",
        ],
        &cache,
    ));
    for v in [&st, &npy] {
        let idx = dir.path().join("v.idx");
        let out = ok(&bertflow(
            &[
                "index",
                "build",
                "--vectors",
                s(v),
                "--texts",
                s(&texts),
                "--output",
                s(&idx),
                "--quantize",
                "int8",
            ],
            &cache,
        ));
        assert!(out.contains("wrote 60 sentences"), "{out}");
        let query = "The horse eats near house number 37.";
        let search = |i: &Path| {
            hits(&ok(&bertflow(
                &[
                    "index",
                    "search",
                    "--index",
                    s(i),
                    "--query",
                    query,
                    "-k",
                    "5",
                ],
                &cache,
            )))
        };
        assert_eq!(search(&idx)[0], (37, query.to_owned()));
        assert_eq!(search(&idx), search(&from_corpus));
    }
    // Vectors declared as made with another pooling, rows that do not match
    // the texts: clear errors, no index.
    let idx = dir.path().join("bad.idx");
    let err = fails(&bertflow(
        &[
            "index",
            "build",
            "--vectors",
            s(&st),
            "--texts",
            s(&texts),
            "--output",
            s(&idx),
            "--pooling",
            "first-last-avg",
        ],
        &cache,
    ));
    assert!(
        err.contains("was not made with the settings given") && err.contains("pooling"),
        "{err}"
    );
    let short = corpus(dir.path(), "short.txt", 59, 0);
    let err = fails(&bertflow(
        &[
            "index",
            "build",
            "--vectors",
            s(&npy),
            "--texts",
            s(&short),
            "--output",
            s(&idx),
        ],
        &cache,
    ));
    assert!(err.contains("60 vectors for 59 sentences"), "{err}");
    assert!(!idx.exists());
}

#[test]
fn add_vectors_made_elsewhere_to_a_quantized_index() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let all = corpus(dir.path(), "all.txt", 60, 0);
    let head = corpus(dir.path(), "head.txt", 40, 0);
    let tail = corpus(dir.path(), "tail.txt", 20, 40);
    let (vh, vt) = (dir.path().join("h.npy"), dir.path().join("t.npy"));
    for (t, v) in [(&head, &vh), (&tail, &vt)] {
        ok(&bertflow(
            &["encode", "--input", s(t), "--output", s(v)],
            &cache,
        ));
    }
    let whole = dir.path().join("whole.idx");
    let parts = dir.path().join("parts.idx");
    ok(&bertflow(
        &[
            "index",
            "build",
            "--corpus",
            s(&all),
            "--output",
            s(&whole),
            "--quantize",
            "binary",
        ],
        &cache,
    ));
    ok(&bertflow(
        &[
            "index",
            "build",
            "--vectors",
            s(&vh),
            "--texts",
            s(&head),
            "--output",
            s(&parts),
            "--quantize",
            "binary",
        ],
        &cache,
    ));
    let out = ok(&bertflow(
        &[
            "index",
            "add",
            "--index",
            s(&parts),
            "--vectors",
            s(&vt),
            "--texts",
            s(&tail),
        ],
        &cache,
    ));
    assert!(
        out.contains("added 20 sentences") && out.contains("(60 in all)"),
        "{out}"
    );
    // The added rows are found as the same rows of an index built in one go
    // (exact rescoring of the binary candidates: the same top hit).
    for (i, query) in [
        (45, "The bird runs near house number 45."),
        (7, "The cat eats near house number 7."),
    ] {
        let search = |idx: &Path| {
            hits(&ok(&bertflow(
                &[
                    "index",
                    "search",
                    "--index",
                    s(idx),
                    "--query",
                    query,
                    "-k",
                    "3",
                ],
                &cache,
            )))
        };
        assert_eq!(search(&parts)[0], (i, query.to_owned()));
        assert_eq!(search(&parts)[0], search(&whole)[0]);
    }
    // Rows that do not match the texts: an error, and the index keeps its 60 rows.
    let err = fails(&bertflow(
        &[
            "index",
            "add",
            "--index",
            s(&parts),
            "--vectors",
            s(&vt),
            "--texts",
            s(&head),
        ],
        &cache,
    ));
    assert!(err.contains("20 vectors for 40 sentences"), "{err}");
    let info = ok(&bertflow(&["index", "info", "--index", s(&parts)], &cache));
    assert!(info.contains("60 sentences"), "{info}");
}
