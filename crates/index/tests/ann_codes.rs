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
    assert_eq!(ann.default_rescore(), bertflow_index::DEFAULT_ANN_RESCORE);
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
    // A compact graph's metadata (version 3) without the metric: damage.
    assert!(json.contains("\"format_version\": 3"), "{json}");
    let no_metric: String = json
        .lines()
        .filter(|l| !l.contains("\"metric\""))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\"generation\": 1,", "\"generation\": 1");
    std::fs::write(&files.meta, &no_metric).unwrap();
    let err = Ann::load(Arc::clone(&index), &path).err();
    assert!(matches!(err, Some(IndexError::Corrupt(_))), "{err:?}");
    std::fs::write(&files.meta, &json).unwrap();

    // A damaged links file is refused (its CRC-32).
    assert!(files.current().is_none());
    let links = files.links().unwrap();
    let good = std::fs::read(&links).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 1;
    std::fs::write(&links, &bad).unwrap();
    assert!(matches!(
        Ann::load(Arc::clone(&index), &path),
        Err(IndexError::Corrupt(_))
    ));
    std::fs::write(&links, &good).unwrap();
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
    // Int8 codes need few candidates rescored; `search` rescores that many.
    assert_eq!(
        ann.default_rescore(),
        bertflow_index::DEFAULT_ANN_RESCORE_INT8
    );
    let q = &clustered(1, D, 97);
    assert_eq!(
        ann.search(q, 10, 64).unwrap(),
        ann.search_rescored(q, 10, 64, bertflow_index::DEFAULT_ANN_RESCORE_INT8)
            .unwrap()
    );
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
    let ann = Ann::build_hnsw_rs(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
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
        let ann = Ann::build_hnsw_rs(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
        let r = recall(&index, &ann, &queries, 10, 64, rescore);
        // Recall@10 of a compact graph, its scores asserted exact.
        let compact_recall = |g: &CompactAnn| {
            let mut found = 0usize;
            for q in queries.chunks_exact(D) {
                let exact = exact_ids(&index, q, 10);
                let got = g.search_rescored(q, 10, 64, rescore).unwrap();
                let mut unit = Vec::new();
                normalise_into(q, &mut unit);
                for &(i, s) in &got {
                    assert_eq!(s, dot(index.vector(i).unwrap(), &unit), "row {i}");
                }
                found += got.iter().filter(|(i, _)| exact.contains(i)).count();
            }
            found as f64 / (queries.len() / D * 10) as f64
        };
        let last = std::sync::atomic::AtomicUsize::new(0);
        let built = CompactAnn::build(Arc::clone(&index), PARAMS, 1, &|i| {
            last.store(i, std::sync::atomic::Ordering::Relaxed)
        })
        .unwrap();
        assert_eq!((built.len(), last.into_inner()), (3000, 3000));
        let c = compact_recall(&built);
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
        // Built in parallel: another graph (the insertions interleave), as
        // good within 0.04 (measured over 7 runs: int8 0.908 to 0.932 against
        // one thread's 0.927; binary 0.967 to 0.973 against 0.973).
        for threads in [2, 4] {
            let last = std::sync::atomic::AtomicUsize::new(0);
            let par = CompactAnn::build(Arc::clone(&index), PARAMS, threads, &|i| {
                last.store(i, std::sync::atomic::Ordering::Relaxed)
            })
            .unwrap();
            assert_eq!((par.len(), last.into_inner()), (3000, 3000));
            let p = compact_recall(&par);
            eprintln!("{name}: {threads} threads: recall@10 {p}");
            assert!(
                p >= c - 0.04,
                "{name}: {threads} threads: recall@10 {p}, one thread's {c}"
            );
            for i in [0usize, 1234, 2999] {
                let row = index.vector(i).unwrap().to_vec();
                assert_eq!(par.search_rescored(&row, 1, 32, 10).unwrap()[0].0, i);
            }
        }
    }
    let bad = AnnParams {
        m: 1,
        ef_construction: 10,
    };
    let path = dir.path().join("b.idx");
    let index = Arc::new(Index::open(&path, true).unwrap());
    assert!(matches!(
        CompactAnn::build(index, bad, 1, &|_| {}),
        Err(IndexError::Invalid(_))
    ));
}

/// The links file of the graph stored next to `path` replaced by `bytes`, its
/// size and CRC-32 written into the metadata (so that the structural checks,
/// not the checksum, meet the damage); what loading it gives.
fn load_links(index: &Arc<Index>, path: &std::path::Path, bytes: &[u8]) -> Result<(), IndexError> {
    let files = AnnFiles::of(path);
    let links = files.links().unwrap();
    std::fs::write(&links, bytes).unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files.meta).unwrap()).unwrap();
    meta["links_bytes"] = bytes.len().into();
    meta["links_crc32"] = crc32fast::hash(bytes).into();
    std::fs::write(&files.meta, serde_json::to_vec(&meta).unwrap()).unwrap();
    Ann::load(Arc::clone(index), path).map(|_| ())
}

#[test]
fn a_damaged_links_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.idx");
    let n = 1500usize;
    write(&path, &binary(), &clustered(n, D, 5));
    let index = Arc::new(Index::open(&path, true).unwrap());
    let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
    assert!(ann.is_compact());
    ann.save(&path).unwrap();
    let good = std::fs::read(AnnFiles::of(&path).links().unwrap()).unwrap();
    // Header: magic, version, M, rows, entry, top, upper rows; then the levels,
    // layer 0 (2 M u32 per point), the upper layers' rows (M u32 each).
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (entry, top) = (u32_at(&good, 24) as usize, u32_at(&good, 28) as u8);
    let levels = &good[40..40 + n];
    assert_eq!(
        good.len(),
        40 + n + 4 * 32 * n + 4 * 16 * u32_at(&good, 32) as usize
    );
    assert!(top >= 1 && levels[entry] == top);
    let layer0 = 40 + n;
    let upper = layer0 + 4 * 32 * n;
    let flat = levels.iter().position(|&l| l == 0).unwrap() as u32;
    let put = |at: usize, v: u32| {
        let mut b = good.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        b
    };
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("a link past the rows", put(layer0 + 4, n as u32)),
        ("a layer-1 link to a point of layer 0", put(upper, flat)),
        ("the entry point off the top layer", put(24, flat)),
        ("the entry point past the rows", put(24, n as u32 + 7)),
        ("another M", put(12, 17)),
        ("another point count", put(16, n as u32 - 1)),
        ("a top layer above 15", put(28, 16)),
        (
            "more upper rows than the levels",
            put(32, u32_at(&good, 32) + 1),
        ),
        ("truncated", good[..good.len() - 4].to_vec()),
        ("a header only", good[..40].to_vec()),
        ("empty", Vec::new()),
    ];
    let mut magic = good.clone();
    magic[0] ^= 1;
    cases.push(("a bad magic", magic));
    let mut level = good.clone();
    level[40 + flat as usize] = top + 1;
    cases.push(("a level above the top layer", level));
    // A link after the end of a list (none, then a row).
    let short = (0..n)
        .find(|&p| u32_at(&good, layer0 + 4 * (32 * p + 30)) == u32::MAX)
        .unwrap();
    cases.push(("a link after none", put(layer0 + 4 * (32 * short + 31), 0)));
    for (what, bytes) in cases {
        let err = load_links(&index, &path, &bytes).err();
        assert!(
            matches!(err, Some(IndexError::Corrupt(_))),
            "{what}: {err:?}"
        );
    }
    // The file as written loads, and answers as the graph saved.
    load_links(&index, &path, &good).unwrap();
    let loaded = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    for q in clustered(20, D, 77).chunks_exact(D) {
        assert_eq!(
            ann.search(q, 10, 64).unwrap(),
            loaded.search(q, 10, 64).unwrap()
        );
    }
    // Saved again: the same bytes (a new generation), the old one removed.
    let files = AnnFiles::of(&path);
    let before = files.links().unwrap();
    loaded.save(&path).unwrap();
    let after = files.links().unwrap();
    assert_ne!(before, after);
    assert!(!before.exists());
    assert_eq!(std::fs::read(&after).unwrap(), good);
}

#[test]
fn a_code_graph_stored_by_hnsw_rs_is_read_into_a_compact_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.idx");
    write(&path, &binary(), &clustered(2000, D, 9));
    let index = Arc::new(Index::open(&path, true).unwrap());
    let old = Ann::build_hnsw_rs(Arc::clone(&index), PARAMS, &|_| {}).unwrap();
    assert!(!old.is_compact());
    old.save(&path).unwrap();
    let files = AnnFiles::of(&path);
    let json = std::fs::read_to_string(&files.meta).unwrap();
    assert!(json.contains("\"format_version\": 2") && json.contains("\"hamming\""));
    let (graph, data) = files.current().unwrap();
    let queries = clustered(30, D, 31);
    let want: Vec<_> = queries
        .chunks_exact(D)
        .map(|q| old.search(q, 10, 64).unwrap())
        .collect();
    let copied = CompactAnn::from_ann(old).unwrap();
    let loaded = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert!(loaded.is_compact());
    assert_eq!((loaded.len(), loaded.metric()), (2000, AnnMetric::Hamming));
    let r = recall(&index, &loaded, &queries, 10, 64, 50);
    let mut same = 0;
    for (q, w) in queries.chunks_exact(D).zip(&want) {
        let got = loaded.search(q, 10, 64).unwrap();
        assert_eq!(got, copied.search_rescored(q, 10, 64, 10).unwrap());
        same += usize::from(&got == w);
    }
    // The same links searched by another beam search: mostly the same answers.
    assert!(
        same >= 20 && r >= 0.93,
        "{same} of 30 answers as hnsw_rs's, recall {r}"
    );
    // Saved again: a links file (version 3), the hnsw_rs files removed.
    loaded.save(&path).unwrap();
    assert!(files.links().unwrap().exists() && !graph.exists() && !data.exists());
    let json3 = std::fs::read_to_string(&files.meta).unwrap();
    assert!(json3.contains("\"format_version\": 3"), "{json3}");
    // Version 2 metadata without the metric (written before codes) is a
    // cosine graph over the f32 rows: exact scores still.
    let plain = dir.path().join("p.idx");
    write(&plain, &binary(), &clustered(2000, D, 9));
    let index = Arc::new(Index::open(&plain, true).unwrap());
    Ann::build_hnsw_rs(Arc::clone(&index), PARAMS, &|_| {})
        .unwrap()
        .save(&plain)
        .unwrap();
    let meta = AnnFiles::of(&plain).meta;
    let v2 = std::fs::read_to_string(&meta).unwrap();
    let no_metric: String = v2
        .lines()
        .filter(|l| !l.contains("\"metric\""))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\"generation\": 1,", "\"generation\": 1");
    std::fs::write(&meta, &no_metric).unwrap();
    let cosine = Ann::load(Arc::clone(&index), &plain).unwrap().unwrap();
    assert_eq!(cosine.metric(), AnnMetric::Cosine);
    assert!(!cosine.is_compact());
    let row = index.vector(7).unwrap().to_vec();
    assert_eq!(cosine.search(&row, 1, 32).unwrap()[0].0, 7);
}

#[test]
fn a_compact_graph_extended_is_the_graph_built_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.idx");
    let all = clustered(2000, D, 17);
    write(&path, &int8(), &all[..1200 * D]);
    let index = Arc::new(Index::open(&path, true).unwrap());
    let mut part = CompactAnn::build(Arc::clone(&index), PARAMS, 1, &|_| {}).unwrap();
    assert_eq!(part.extend(1, &|_| {}).unwrap(), 0);
    Ann::from_compact(part).save(&path).unwrap();
    drop(index);
    append(&path, &all[1200 * D..], 1200);
    let index = Arc::new(Index::open(&path, true).unwrap());
    let loaded = Ann::load(Arc::clone(&index), &path).unwrap().unwrap();
    assert_eq!((loaded.len(), loaded.covers()), (1200, false));
    let mut grown = CompactAnn::from_ann(loaded).unwrap();
    let last = std::sync::atomic::AtomicUsize::new(0);
    let added = grown
        .extend(1, &|i| last.store(i, std::sync::atomic::Ordering::Relaxed))
        .unwrap();
    assert_eq!((added, grown.len(), last.into_inner()), (800, 2000, 2000));
    // One thread, rows in order, levels drawn per row: the same graph.
    let whole = CompactAnn::build(Arc::clone(&index), PARAMS, 1, &|_| {}).unwrap();
    for q in clustered(30, D, 5).chunks_exact(D) {
        assert_eq!(
            grown.search_rescored(q, 10, 32, 2).unwrap(),
            whole.search_rescored(q, 10, 32, 2).unwrap()
        );
    }
    let (a, b) = (dir.path().join("a.idx"), dir.path().join("b.idx"));
    for (p, g) in [(&a, grown), (&b, whole)] {
        std::fs::copy(&path, p).unwrap();
        Ann::from_compact(g).save(p).unwrap();
    }
    let read = |p: &std::path::Path| std::fs::read(AnnFiles::of(p).links().unwrap()).unwrap();
    assert_eq!(read(&a), read(&b));
}

#[test]
fn rows_of_one_code_do_not_trap_the_search() {
    // 40 copies of one vector among 400 rows: before duplicates were kept
    // out of a point's links, the copies (more than 2 M of them) linked only
    // to each other, and a search that reached them found nothing else.
    let dir = tempfile::tempdir().unwrap();
    for (name, q) in [("b.idx", binary()), ("i.idx", int8())] {
        let path = dir.path().join(name);
        let mut v = clustered(400, D, 21);
        let copy = v[..D].to_vec();
        for i in (0..400).filter(|i| i % 10 == 3) {
            v[i * D..(i + 1) * D].copy_from_slice(&copy);
        }
        write(&path, &q, &v);
        let index = Arc::new(Index::open(&path, true).unwrap());
        let small = AnnParams {
            m: 8,
            ef_construction: 32,
        };
        for threads in [1, 2] {
            let g = CompactAnn::build(Arc::clone(&index), small, threads, &|_| {}).unwrap();
            for i in (0..400).filter(|i| i % 10 != 3 && i % 7 == 0) {
                let row = index.vector(i).unwrap().to_vec();
                let hit = g.search_rescored(&row, 1, 32, 10).unwrap()[0];
                assert_eq!(hit.0, i, "{name}, {threads} thread(s): row {i}");
            }
        }
    }
}
