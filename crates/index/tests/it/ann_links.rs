//! The compact graph's links file: damaged files are errors, a graph over codes
//! stored by hnsw_rs (metadata version 2) is read into a compact one, and a graph
//! extended after `index add` is the graph built at once.

use std::sync::Arc;

use crate::common;

use bertflow_index::{Ann, AnnFiles, AnnMetric, CompactAnn, Index, IndexError};
use common::codes::{append, binary, clustered, int8, recall, write, D, PARAMS};

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
