//! The HNSW graph: recall against exact search, save/load round trip, checks
//! on load, and extension after `index add`.

use std::sync::Arc;

use crate::common;

use bertflow_index::{Ann, AnnFiles, AnnParams, Index, IndexError, IndexWriter};
use common::identity;

/// Clustered vectors (splitmix64): `n` rows around 20 random centres.
fn clustered(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut h = seed;
    let mut next = move || {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let centres: Vec<f32> = (0..20 * d).map(|_| next()).collect();
    let mut out = Vec::with_capacity(n * d);
    for i in 0..n {
        let c = &centres[(i % 20) * d..(i % 20 + 1) * d];
        out.extend(c.iter().map(|&x| x + 0.6 * next()));
    }
    out
}

fn write(path: &std::path::Path, v: &[f32], d: usize) {
    let mut w = IndexWriter::create(path, identity(d)).unwrap();
    let n = v.len() / d;
    let texts: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
    w.add(v, &texts).unwrap();
    w.finish().unwrap();
}

fn recall(index: &Index, ann: &Ann, queries: &[f32], d: usize, k: usize) -> f64 {
    let mut found = 0usize;
    for q in queries.chunks_exact(d) {
        let exact: Vec<usize> = index.search(q, k).unwrap().iter().map(|r| r.0).collect();
        let approx = ann.search(q, k, 64).unwrap();
        // Scores are the exact ones.
        for &(i, s) in &approx {
            let v = index.vector(i).unwrap();
            let mut unit = Vec::new();
            bertflow_index::format::normalise_into(q, &mut unit);
            assert!((bertflow_index::dot(v, &unit) - s).abs() < 1e-6);
        }
        found += approx.iter().filter(|(i, _)| exact.contains(i)).count();
    }
    found as f64 / (queries.len() / d * k) as f64
}

#[test]
fn hnsw_recall_round_trip_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    let d = 32;
    write(&path, &clustered(3000, d, 1), d);
    let index = Arc::new(Index::open(&path, true).unwrap());
    let params = AnnParams {
        m: 16,
        ef_construction: 100,
    };
    let ann = Ann::build(Arc::clone(&index), params, &|_| {}).unwrap();
    assert_eq!(ann.len(), 3000);
    assert!(ann.covers());
    let queries = clustered(50, d, 99);
    let r = recall(&index, &ann, &queries, d, 10);
    assert!(r >= 0.9, "recall@10 {r}");
    // A query equal to a stored row finds that row first.
    let row5 = index.vector(5).unwrap().to_vec();
    assert_eq!(ann.search(&row5, 1, 32).unwrap()[0].0, 5);
    assert!(matches!(
        ann.search(&[1.0; 3], 5, 32),
        Err(IndexError::Invalid(_))
    ));

    // Nothing stored yet; then save and load: same answers.
    assert!(Ann::load(Arc::clone(&index), &path).unwrap().is_none());
    ann.save(&path).unwrap();
    let files = AnnFiles::of(&path);
    let (graph, data) = files.current().unwrap();
    assert!(files.exist() && graph.exists() && data.exists());
    // Saving again replaces the files (hnsw_rs itself never overwrites): a new
    // generation, and the old one is removed once the metadata names the new.
    ann.save(&path).unwrap();
    let (old_graph, old_data) = (graph, data);
    let (graph, data) = files.current().unwrap();
    assert!(graph != old_graph && graph.exists() && data.exists());
    assert!(!old_graph.exists() && !old_data.exists());
    let loaded = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!(loaded.len(), 3000);
    assert_eq!(loaded.params(), params);
    for q in queries.chunks_exact(d) {
        assert_eq!(
            ann.search(q, 10, 64).unwrap(),
            loaded.search(q, 10, 64).unwrap()
        );
    }

    // A damaged graph file is refused before hnsw_rs reads it.
    let good = std::fs::read(&graph).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 1;
    std::fs::write(&graph, &bad).unwrap();
    assert!(matches!(
        Ann::load(Arc::clone(&index), &path),
        Err(IndexError::Corrupt(_))
    ));
    std::fs::write(&graph, &good).unwrap();

    // The graph of another index is refused.
    let other = dir.path().join("other.idx");
    write(&other, &clustered(3000, d, 2), d);
    let other_files = AnnFiles::of(&other);
    std::fs::copy(&files.meta, &other_files.meta).unwrap();
    let (other_graph, other_data) = other_files.current().unwrap();
    std::fs::copy(&graph, other_graph).unwrap();
    std::fs::copy(&data, other_data).unwrap();
    let other_index = Arc::new(Index::open(&other, true).unwrap());
    let err = Ann::load(other_index, &other).err().unwrap();
    assert!(
        matches!(&err, IndexError::Mismatch(m) if m.contains("bertflow index ann")),
        "{err}"
    );
}

#[test]
fn hnsw_extends_after_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    let d = 16;
    let all = clustered(2000, d, 7);
    write(&path, &all[..1500 * d], d);
    let index = Arc::new(Index::open(&path, true).unwrap());
    let params = AnnParams {
        m: 12,
        ef_construction: 64,
    };
    Ann::build(Arc::clone(&index), params, &|_| {})
        .unwrap()
        .save(&path)
        .unwrap();
    drop(index);

    let mut w = IndexWriter::append(&path, &identity(d)).unwrap();
    let texts: Vec<String> = (1500..2000).map(|i| format!("s{i}")).collect();
    w.add(&all[1500 * d..], &texts).unwrap();
    w.finish().unwrap();

    let index = Arc::new(Index::open(&path, true).unwrap());
    let mut ann = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!(ann.len(), 1500);
    assert!(!ann.covers());
    assert_eq!(ann.extend(&|_| {}).unwrap(), 500);
    assert!(ann.covers());
    ann.save(&path).unwrap();
    let ann = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!(ann.len(), 2000);
    // The appended rows are found.
    for i in [1500usize, 1777, 1999] {
        let row = index.vector(i).unwrap().to_vec();
        assert_eq!(ann.search(&row, 1, 32).unwrap()[0].0, i);
    }
    let r = recall(&index, &ann, &clustered(40, d, 123), d, 10);
    assert!(r >= 0.9, "recall@10 after extension {r}");
}
