//! Damaged or foreign HNSW dump files with matching sizes and CRC-32s (so
//! that they get past the metadata's checks) are refused with an error:
//! hnsw_rs would abort the process on them (a huge allocation), read past a
//! buffer, or exit. Found by fuzzing (crates/fuzzkit, target `ann`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bertflow_index::{Ann, AnnFiles, AnnParams, Identity, Index, IndexError, IndexWriter};
use serde_json::Value;

const DIM: usize = 8;
const ROWS: usize = 40;

/// An index of 40 rows with a saved graph; the graph's and data's paths.
fn fixture(dir: &Path) -> (PathBuf, Arc<Index>, PathBuf, PathBuf) {
    let path = dir.join("c.idx");
    let identity = Identity {
        model: "m@f".into(),
        pooling: "mean".into(),
        calibrator: None,
        dimension: DIM,
        precision: "fp32".into(),
    };
    let mut w = IndexWriter::create(&path, identity).unwrap();
    let v: Vec<f32> = (0..ROWS * DIM)
        .map(|k| ((k * 7919) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let texts: Vec<String> = (0..ROWS).map(|i| format!("s{i}")).collect();
    w.add(&v, &texts).unwrap();
    w.finish().unwrap();
    let index = Arc::new(Index::open(&path, true).unwrap());
    let params = AnnParams {
        m: 4,
        ef_construction: 16,
    };
    Ann::build(Arc::clone(&index), params, &|_| {})
        .unwrap()
        .save(&path)
        .unwrap();
    let (graph, data) = AnnFiles::of(&path).current().unwrap();
    (path, index, graph, data)
}

/// Rewrites `file` with `edit` applied, and the metadata with its new size and CRC-32.
fn tamper(index_path: &Path, file: &Path, key: &str, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(file).unwrap();
    edit(&mut bytes);
    std::fs::write(file, &bytes).unwrap();
    let meta_path = AnnFiles::of(index_path).meta;
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta[format!("{key}_bytes")] = bytes.len().into();
    meta[format!("{key}_crc32")] = crc32fast::hash(&bytes).into();
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

fn assert_refused(index_path: &Path, index: &Arc<Index>) {
    match Ann::load(Arc::clone(index), index_path) {
        Err(IndexError::Corrupt(m)) => assert!(m.contains("graph"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a damaged dump loaded"),
    }
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

#[test]
fn intact_dump_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (path, index, _, _) = fixture(dir.path());
    let ann = Ann::load(index, &path).unwrap().unwrap();
    assert_eq!(ann.len(), ROWS);
}

/// The fuzzer's crash: a point's serialized length in the data file (after
/// the 12-byte header, the point's magic and row) set to a huge value made
/// hnsw_rs allocate that many bytes: "memory allocation of
/// 9151314442816851200 bytes failed", and the process aborted.
#[test]
fn huge_point_length_in_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, index, _, data) = fixture(dir.path());
    tamper(&path, &data, "data", |b| {
        put_u64(b, 24, 0x7f00_0000_0000_0000)
    });
    assert_refused(&path, &index);
}

/// A dimension in the graph's description larger than the data's points
/// makes hnsw_rs build a slice of that many values over a 4-byte buffer.
#[test]
fn dimension_larger_than_the_points_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, index, graph, data) = fixture(dir.path());
    // Description v4: magic 4, mode 1, M 1, scale 8, layers 1, ef 8, points 8, then the dimension.
    tamper(&path, &graph, "graph", |b| put_u64(b, 31, 1000));
    tamper(&path, &data, "data", |b| put_u64(b, 4, 1000));
    assert_refused(&path, &index);
}

/// A format-2 description makes hnsw_rs call `std::process::exit(1)`.
#[test]
fn old_dump_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, index, graph, _) = fixture(dir.path());
    tamper(&path, &graph, "graph", |b| {
        b[..4].copy_from_slice(&0x002a_677fu32.to_ne_bytes())
    });
    assert_refused(&path, &index);
}

/// Truncated dumps and a point count of 2^64 - 1 are refused too; the
/// intact files load again afterwards.
#[test]
fn truncated_and_inconsistent_dumps_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, index, graph, data) = fixture(dir.path());
    let (g0, d0) = (
        std::fs::read(&graph).unwrap(),
        std::fs::read(&data).unwrap(),
    );
    for cut in [0, 3, 30, g0.len() / 2, g0.len() - 1] {
        tamper(&path, &graph, "graph", |b| b.truncate(cut));
        assert_refused(&path, &index);
        tamper(&path, &graph, "graph", |b| *b = g0.clone());
    }
    for cut in [0, 11, 30, d0.len() - 1] {
        tamper(&path, &data, "data", |b| b.truncate(cut));
        assert_refused(&path, &index);
        tamper(&path, &data, "data", |b| *b = d0.clone());
    }
    tamper(&path, &graph, "graph", |b| put_u64(b, 23, u64::MAX));
    assert_refused(&path, &index);
    tamper(&path, &graph, "graph", |b| *b = g0.clone());
    assert_eq!(
        Ann::load(Arc::clone(&index), &path).unwrap().unwrap().len(),
        ROWS
    );
}
