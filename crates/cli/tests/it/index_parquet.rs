//! `index build|add --vectors X.parquet`: vectors and sentences from the Spark
//! job's Parquet output (a file or a folder of part files), written by pyarrow
//! in crates/core/tests/fixtures/parquet (make.py there: row i's vector is
//! ((7 i + 3 j) % 11 - 5) / 5, its text "sentence i").
use crate::common;

use std::path::{Path, PathBuf};

use bertflow_core::index::Index;
use common::{bertflow, fails, ok};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/parquet")
        .join(name)
}

fn unit(i: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..384)
        .map(|j| (((7 * i + 3 * j) % 11) as f32 - 5.0) / 5.0)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

#[test]
fn build_and_add_from_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let idx = dir.path().join("p.idx");
    let file = fixture("vectors.parquet");
    let out = ok(&bertflow(
        &[
            "index",
            "build",
            "--vectors",
            s(&file),
            "--output",
            s(&idx),
            "--quantize",
            "int8",
        ],
        &cache,
    ));
    assert!(out.contains("wrote 6 sentences"), "{out}");
    let out = ok(&bertflow(
        &[
            "index",
            "add",
            "--vectors",
            s(&fixture("spark_out")),
            "--index",
            s(&idx),
            "--chunk",
            "3",
        ],
        &cache,
    ));
    assert!(
        out.contains("added 6 sentences") && out.contains("12 in all"),
        "{out}"
    );
    let index = Index::open(&idx, true).unwrap();
    assert_eq!(index.len(), 12);
    assert_eq!(index.segments(), 1 + 2);
    for r in 0..12 {
        let i = r % 6;
        assert_eq!(index.text(r).unwrap(), format!("sentence {i}"));
        let got = index.vector(r).unwrap();
        let want = unit(i);
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(err < 1e-6, "row {r}: {err}");
    }
    // The exact match of row 3's vector is row 3 (or its copy, row 9).
    let hits = index.search_exact(&unit(3), 2).unwrap();
    let mut ids: Vec<usize> = hits.iter().map(|h| h.0).collect();
    ids.sort();
    assert_eq!(ids, [3, 9]);
}

#[test]
fn bad_parquet_input_is_an_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let idx = dir.path().join("bad.idx");
    let texts = dir.path().join("t.txt");
    std::fs::write(&texts, "a\nb\n").unwrap();
    let build = |extra: &[&str]| {
        let mut args = vec!["index", "build", "--output", s(&idx)];
        args.extend_from_slice(extra);
        fails(&bertflow(&args, &cache))
    };
    let file = fixture("vectors.parquet");
    let e = build(&["--vectors", s(&file), "--texts", s(&texts)]);
    assert!(e.contains("drop --texts"), "{e}");
    let e = build(&["--vectors", s(&file), "--vector-column", "emb"]);
    assert!(e.contains("no column \"emb\""), "{e}");
    let e = build(&["--vectors", s(&fixture("bad_type.parquet"))]);
    assert!(e.contains("not a list of floats"), "{e}");
    // Vectors of dimension 2 for a model of 384.
    let e = build(&["--vectors", s(&fixture("bad_ragged.parquet"))]);
    assert!(e.contains("dimension 2"), "{e}");
    let cut = dir.path().join("cut.parquet");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = build(&["--vectors", s(&cut)]);
    assert!(e.contains("not a readable Parquet file"), "{e}");
    assert!(!idx.exists());
}
