//! The HNSW graph over the codes of a quantized index: recall against exact
//! search, exact scores, save/load round trip, the metric recorded and
//! checked, damaged files, and extension after `index add`.

use std::sync::Arc;

mod common;

use bertflow_index::format::normalise_into;
use bertflow_index::{
    dot, Ann, AnnFiles, AnnMetric, AnnParams, CodeKind, CompactAnn, Index, IndexError, IndexWriter,
    Quantization, SearchParams,
};
use common::identity;

const D: usize = 64;

/// The rows of the exact top `k` of `q`.
fn exact_ids(index: &Index, q: &[f32], k: usize) -> Vec<usize> {
    index
        .search_exact(q, k)
        .unwrap()
        .iter()
        .map(|r| r.0)
        .collect()
}

/// Clustered vectors (splitmix64): `n` rows around 20 random centres.
fn clustered(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut rng = bertflow_numeric::rng::SplitMix64::new(seed);
    let mut next = move || 2.0 * rng.next_f64() as f32 - 1.0;
    let centres: Vec<f32> = (0..20 * d).map(|_| next()).collect();
    let mut out = Vec::with_capacity(n * d);
    for i in 0..n {
        let c = &centres[(i % 20) * d..(i % 20 + 1) * d];
        out.extend(c.iter().map(|&x| x + 0.6 * next()));
    }
    out
}

fn binary() -> Quantization {
    Quantization::new("binary", CodeKind::Binary, D, None, None, "test").unwrap()
}

fn int8() -> Quantization {
    Quantization::new("int8", CodeKind::Int8, D, Some(1.0 / 127.0), None, "test").unwrap()
}

/// A new quantized index of the rows `v`.
fn write(path: &std::path::Path, q: &Quantization, v: &[f32]) {
    let mut w = IndexWriter::create_quantized(path, identity(D), q.clone()).unwrap();
    let texts: Vec<String> = (0..v.len() / D).map(|i| format!("s{i}")).collect();
    w.add(v, &texts).unwrap();
    w.finish().unwrap();
}

/// `v` appended to the index (a new segment), its rows numbered from `from`.
fn append(path: &std::path::Path, v: &[f32], from: usize) {
    let mut w = IndexWriter::append(path, &identity(D)).unwrap();
    let texts: Vec<String> = (from..from + v.len() / D)
        .map(|i| format!("s{i}"))
        .collect();
    w.add(v, &texts).unwrap();
    w.finish().unwrap();
}

const PARAMS: AnnParams = AnnParams {
    m: 16,
    ef_construction: 100,
};

/// Recall@k of the graph against exact search over `queries`; every score
/// returned is asserted to be the exact cosine.
fn recall(index: &Index, ann: &Ann, queries: &[f32], k: usize, ef: usize, rescore: usize) -> f64 {
    let mut found = 0usize;
    for q in queries.chunks_exact(D) {
        let exact = exact_ids(index, q, k);
        let approx = ann.search_rescored(q, k, ef, rescore).unwrap();
        assert_eq!(approx.len(), k);
        let mut unit = Vec::new();
        normalise_into(q, &mut unit);
        for w in approx.windows(2) {
            assert!(w[0].1 >= w[1].1, "best first");
        }
        for &(i, s) in &approx {
            assert_eq!(s, dot(index.vector(i).unwrap(), &unit), "row {i}");
        }
        found += approx.iter().filter(|(i, _)| exact.contains(i)).count();
    }
    found as f64 / (queries.len() / D * k) as f64
}

#[test]
fn a_graph_over_bit_codes_finds_the_neighbours_with_exact_scores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.idx");
    write(&path, &binary(), &clustered(3000, D, 1));
    let index = Arc::new(Index::open(&path, true).unwrap());
    let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
    assert_eq!((ann.len(), ann.metric()), (3000, AnnMetric::Hamming));
    let queries = clustered(60, D, 99);
    // 64 plain sign bits rank these clusters' rows coarsely: the best 100 rows
    // by code score (a scan re-ranking every code) hold 0.71 of the true top
    // 10, the best 500 0.97. The graph finds them: measured 0.72 and 0.975.
    let ceiling = |rescore: usize| {
        let p = SearchParams {
            rescore,
            shortlist: 3000,
            threads: 1,
        };
        let mut found = 0usize;
        for q in queries.chunks_exact(D) {
            let exact = exact_ids(&index, q, 10);
            let got = index.search_with(q, 10, &p).unwrap();
            found += got.iter().filter(|(i, _)| exact.contains(i)).count();
        }
        found as f64 / (queries.len() / D * 10) as f64
    };
    let (r10, c10) = (recall(&index, &ann, &queries, 10, 64, 10), ceiling(10));
    assert!(
        r10 >= c10 - 0.05,
        "recall@10 {r10} at rescore 10, the codes' {c10}"
    );
    let (r50, c50) = (recall(&index, &ann, &queries, 10, 64, 50), ceiling(50));
    assert!(
        r50 >= 0.93 && r50 >= c50 - 0.03,
        "recall@10 {r50} at rescore 50, the codes' {c50}"
    );
    // A stored row is found first, at cosine 1.
    let row = index.vector(7).unwrap().to_vec();
    let hit = ann.search(&row, 1, 32).unwrap()[0];
    assert_eq!(hit.0, 7);
    assert!((hit.1 - 1.0).abs() < 1e-5);
    // Bad arguments.
    assert!(matches!(
        ann.search(&[1.0; 3], 5, 32),
        Err(IndexError::Invalid(_))
    ));
    assert!(matches!(
        ann.search_rescored(&row, 5, 32, 0),
        Err(IndexError::Invalid(_))
    ));
    assert!(ann.search(&row, 0, 32).unwrap().is_empty());

    // Save, load: the metric is recorded, the answers are the same.
    ann.save(&path).unwrap();
    let files = AnnFiles::of(&path);
    let json = std::fs::read_to_string(&files.meta).unwrap();
    assert!(json.contains("\"metric\": \"hamming\""), "{json}");
    let stored = Ann::stored(&index, &path).unwrap().unwrap();
    assert_eq!(stored.metric, AnnMetric::Hamming);
    let loaded = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!(loaded.metric(), AnnMetric::Hamming);
    for q in queries.chunks_exact(D) {
        assert_eq!(
            ann.search(q, 10, 64).unwrap(),
            loaded.search(q, 10, 64).unwrap()
        );
    }

    // A graph recorded over another metric than the index's codes: refused.
    std::fs::write(&files.meta, json.replace("\"hamming\"", "\"int8\"")).unwrap();
    let err = Ann::load(Arc::clone(&index), &path).err().unwrap();
    assert!(
        matches!(&err, IndexError::Mismatch(m) if m.contains("--rebuild")),
        "{err}"
    );
    // An unknown metric is damage.
    std::fs::write(&files.meta, json.replace("\"hamming\"", "\"euclid\"")).unwrap();
    assert!(matches!(
        Ann::load(Arc::clone(&index), &path),
        Err(IndexError::Corrupt(_))
    ));
    // Metadata without the field (as before it existed) loads as a cosine
    // graph over the f32 rows: exact scores still.
    let old: String = json
        .lines()
        .filter(|l| !l.contains("\"metric\""))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\"generation\": 1,", "\"generation\": 1");
    std::fs::write(&files.meta, &old).unwrap();
    let cosine = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!(cosine.metric(), AnnMetric::Cosine);
    assert_eq!(cosine.search(&row, 1, 32).unwrap()[0].0, 7);
    std::fs::write(&files.meta, &json).unwrap();

    // A damaged graph file is refused before hnsw_rs reads it.
    let (graph, _) = files.current().unwrap();
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
    assert!(Ann::load(Arc::clone(&index), &path).unwrap().is_some());

    // The graph of a quantized index copied next to an unquantized index of
    // the same rows: the prefix differs (another file), refused as foreign.
    let plain = dir.path().join("plain.idx");
    let mut w = IndexWriter::create(&plain, identity(D)).unwrap();
    let v = clustered(3000, D, 1);
    w.add(&v, &(0..3000).map(|i| format!("s{i}")).collect::<Vec<_>>())
        .unwrap();
    w.finish().unwrap();
    let plain_index = Index::open(&plain, true).unwrap();
    let err = Ann::stored(&plain_index, &path).err();
    assert!(matches!(err, Some(IndexError::Mismatch(_))), "{err:?}");
}

#[test]
fn a_graph_over_int8_codes_finds_the_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.idx");
    write(&path, &int8(), &clustered(2000, D, 3));
    let index = Arc::new(Index::open(&path, true).unwrap());
    let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
    assert_eq!(ann.metric(), AnnMetric::Int8);
    // Measured 1.0 in most builds: int8 codes rank almost as the floats do.
    // hnsw_rs inserts in parallel, so the graph differs from run to run: at
    // ef 64 / rescore 2 about one build in 25 fell below 0.95 (with other
    // tests running beside it); ef 128 / rescore 4 leaves the margin.
    let r = recall(&index, &ann, &clustered(40, D, 98), 10, 128, 4);
    assert!(r >= 0.95, "recall@10 {r}");
    ann.save(&path).unwrap();
    let json = std::fs::read_to_string(AnnFiles::of(&path).meta).unwrap();
    assert!(json.contains("\"metric\": \"int8\""), "{json}");
    std::fs::write(
        AnnFiles::of(&path).meta,
        json.replace("\"int8\"", "\"hamming\""),
    )
    .unwrap();
    assert!(matches!(
        Ann::load(Arc::clone(&index), &path),
        Err(IndexError::Mismatch(_))
    ));
}

#[test]
fn a_graph_over_codes_extends_after_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.idx");
    let all = clustered(2000, D, 7);
    write(&path, &binary(), &all[..1500 * D]);
    let index = Arc::new(Index::open(&path, true).unwrap());
    Ann::build(Arc::clone(&index), PARAMS, &|_| {})
        .unwrap()
        .save(&path)
        .unwrap();
    drop(index);
    append(&path, &all[1500 * D..], 1500);

    let index = Arc::new(Index::open(&path, true).unwrap());
    assert_eq!(index.segments(), 2);
    let mut ann = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!((ann.len(), ann.covers()), (1500, false));
    assert_eq!(ann.extend(&|_| {}).unwrap(), 500);
    assert!(ann.covers());
    ann.save(&path).unwrap();
    let ann = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!((ann.len(), ann.metric()), (2000, AnnMetric::Hamming));
    // The appended rows (the second segment's codes) are found.
    for i in [1500usize, 1777, 1999] {
        let row = index.vector(i).unwrap().to_vec();
        assert_eq!(ann.search(&row, 1, 32).unwrap()[0].0, i);
    }
    let r = recall(&index, &ann, &clustered(40, D, 123), 10, 64, 50);
    assert!(r >= 0.93, "recall@10 after extension {r}");
}

#[test]
fn the_compact_copy_of_a_graph_searches_as_well() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.idx");
    write(&path, &binary(), &clustered(3000, D, 1));
    let index = Arc::new(Index::open(&path, true).unwrap());
    let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
    let queries = clustered(60, D, 99);
    let r = recall(&index, &ann, &queries, 10, 64, 50);
    let compact = CompactAnn::from_ann(ann).unwrap();
    assert_eq!(compact.len(), 3000);
    // Layer 0's links: 2 M per point, 4 bytes each; the upper layers' few.
    assert!(compact.link_bytes() >= 3000 * 32 * 4 && compact.link_bytes() < 3000 * 32 * 5);
    let mut found = 0usize;
    for q in queries.chunks_exact(D) {
        let exact = exact_ids(&index, q, 10);
        let got = compact.search_rescored(q, 10, 64, 50).unwrap();
        let mut unit = Vec::new();
        normalise_into(q, &mut unit);
        assert_eq!(got.len(), 10);
        for &(i, s) in &got {
            assert_eq!(s, dot(index.vector(i).unwrap(), &unit), "row {i}");
        }
        found += got.iter().filter(|(i, _)| exact.contains(i)).count();
    }
    let c = found as f64 / (queries.len() / D * 10) as f64;
    assert!(c >= r - 0.02, "compact recall@10 {c}, the graph's {r}");
    let row = index.vector(7).unwrap().to_vec();
    assert_eq!(compact.search_rescored(&row, 1, 32, 10).unwrap()[0].0, 7);
    assert!(compact.search_rescored(&row, 1, 32, 0).is_err());
    assert!(compact.search_rescored(&[1.0; 3], 1, 32, 1).is_err());
}

#[test]
fn a_compact_graph_built_directly_searches_as_well() {
    let dir = tempfile::tempdir().unwrap();
    // The compact build is deterministic (one thread, fixed seed): 0.973 and
    // 0.927 here; hnsw_rs inserts in parallel and varies from run to run (int8:
    // 0.93 to 0.95 seen), so the comparison with it keeps a wider margin.
    for (name, q, rescore, floor) in [("b.idx", binary(), 50, 0.96), ("i.idx", int8(), 2, 0.91)] {
        let path = dir.path().join(name);
        write(&path, &q, &clustered(3000, D, 1));
        let index = Arc::new(Index::open(&path, true).unwrap());
        let queries = clustered(60, D, 99);
        let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
        let r = recall(&index, &ann, &queries, 10, 64, rescore);
        let last = std::sync::atomic::AtomicUsize::new(0);
        let built = CompactAnn::build(Arc::clone(&index), PARAMS, &|i| {
            last.store(i, std::sync::atomic::Ordering::Relaxed)
        })
        .unwrap();
        assert_eq!((built.len(), last.into_inner()), (3000, 3000));
        let mut found = 0usize;
        for q in queries.chunks_exact(D) {
            let exact = exact_ids(&index, q, 10);
            let got = built.search_rescored(q, 10, 64, rescore).unwrap();
            let mut unit = Vec::new();
            normalise_into(q, &mut unit);
            for &(i, s) in &got {
                assert_eq!(s, dot(index.vector(i).unwrap(), &unit), "row {i}");
            }
            found += got.iter().filter(|(i, _)| exact.contains(i)).count();
        }
        let c = found as f64 / (queries.len() / D * 10) as f64;
        eprintln!("{name}: built compact recall@10 {c}, hnsw_rs {r}");
        assert!(
            c >= floor && c >= r - 0.05,
            "{name}: compact recall@10 {c}, the hnsw_rs graph's {r}"
        );
        // Every stored row finds itself.
        for i in [0usize, 1234, 2999] {
            let row = index.vector(i).unwrap().to_vec();
            assert_eq!(built.search_rescored(&row, 1, 32, 10).unwrap()[0].0, i);
        }
    }
    let bad = AnnParams {
        m: 1,
        ef_construction: 10,
    };
    let path = dir.path().join("b.idx");
    let index = Arc::new(Index::open(&path, true).unwrap());
    assert!(matches!(
        CompactAnn::build(index, bad, &|_| {}),
        Err(IndexError::Invalid(_))
    ));
}
