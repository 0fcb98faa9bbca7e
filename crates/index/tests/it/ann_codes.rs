//! The HNSW graph over the codes of a quantized index: recall against exact
//! search, exact scores, save/load round trip, the metric recorded and
//! checked, and extension after `index add` (the links file: `ann_links.rs`).

use std::sync::Arc;

use crate::common;

use bertflow_index::format::normalise_into;
use bertflow_index::{
    dot, Ann, AnnFiles, AnnMetric, AnnParams, CompactAnn, Index, IndexError, IndexWriter,
    SearchParams,
};
use common::codes::{append, binary, clustered, exact_ids, int8, recall, write, D, PARAMS};
use common::identity;

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
                // The row itself, or a row its code scores as high (the
                // exact scan over the codes is the judge).
                let exact = index.search(&row, 1).unwrap()[0];
                assert!(
                    hit.0 == i || hit.1 >= exact.1 - 1e-6,
                    "{name}, {threads} thread(s): row {i} found row {} ({}), the scan {exact:?}",
                    hit.0,
                    hit.1
                );
            }
        }
    }
}
