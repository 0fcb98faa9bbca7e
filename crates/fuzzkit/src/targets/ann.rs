//! HNSW graphs stored next to an index: `Ann::load` on a valid small index
//! whose `.hnsw.json`, `.hnsw.graph` or `.hnsw.data` is replaced by the
//! input, then a search on what loaded.
//!
//! Mode byte (the first, modulo 5): 0 the rest is the metadata JSON (the
//! dump files stay valid); 1 the rest is the graph file, 2 the data file,
//! and the metadata is rewritten with their true sizes and CRC-32s, so that
//! the bytes reach hnsw_rs (which the loader guards: a panic inside it
//! becomes an error). 3 and 4: the compact graph of a quantized (binary)
//! index: 3 the rest is its links file (the metadata rewritten with its size
//! and CRC-32, so that the bytes reach the links reader), 4 its metadata.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;

use bertflow_index::{
    Ann, AnnFiles, AnnParams, CodeKind, Identity, Index, IndexWriter, Quantization,
};
use serde_json::Value;

const DIM: usize = 8;
const ROWS: usize = 40;

/// A valid index with a saved graph, and the graph's three files.
struct Fixture {
    path: PathBuf,
    index: Arc<Index>,
    meta: Value,
    meta_path: PathBuf,
    graph_path: PathBuf,
    data_path: PathBuf,
    graph: Vec<u8>,
    data: Vec<u8>,
    /// The quantized index with a compact graph.
    codes: Compact,
}

/// A quantized index, its compact graph's metadata and links file.
struct Compact {
    path: PathBuf,
    index: Arc<Index>,
    meta: Value,
    meta_path: PathBuf,
    links_path: PathBuf,
    links: Vec<u8>,
}

fn identity() -> Identity {
    Identity {
        model: "fuzz-model@0123456789abcdef".into(),
        pooling: "mean".into(),
        calibrator: None,
        dimension: DIM,
        precision: "fp32".into(),
    }
}

const PARAMS: AnnParams = AnnParams {
    m: 4,
    ef_construction: 16,
};

fn compact() -> Compact {
    let path = super::scratch("annq.idx");
    let q = Quantization::new("binary", CodeKind::Binary, DIM, None, None, "fuzz")
        .expect("a binary quantizer");
    let mut w = IndexWriter::create_quantized(&path, identity(), q).expect("creating annq.idx");
    let v = super::matrix(ROWS, DIM, 5);
    let texts: Vec<String> = (0..ROWS).map(|i| format!("sentence {i}")).collect();
    w.add(v.as_slice().expect("contiguous"), &texts)
        .expect("adding to annq.idx");
    w.finish().expect("finishing annq.idx");
    let index = Arc::new(Index::open(&path, true).expect("opening annq.idx"));
    let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).expect("building the compact graph");
    assert!(ann.is_compact(), "a graph over codes is compact");
    ann.save(&path).expect("saving the compact graph");
    let files = AnnFiles::of(&path);
    let links_path = files.links().expect("a links file");
    Compact {
        meta: serde_json::from_slice(&std::fs::read(&files.meta).expect("reading the metadata"))
            .expect("the metadata is JSON"),
        meta_path: files.meta,
        links: std::fs::read(&links_path).expect("reading the links"),
        links_path,
        path,
        index,
    }
}

fn fixture() -> Fixture {
    let path = super::scratch("ann.idx");
    let mut w = IndexWriter::create(&path, identity()).expect("creating the fixture index");
    let v = super::matrix(ROWS, DIM, 3);
    let texts: Vec<String> = (0..ROWS).map(|i| format!("sentence {i}")).collect();
    w.add(v.as_slice().expect("contiguous"), &texts)
        .expect("adding to the fixture index");
    w.finish().expect("finishing the fixture index");
    let index = Arc::new(Index::open(&path, true).expect("opening the fixture index"));
    let ann = Ann::build(Arc::clone(&index), PARAMS, &|_| {}).expect("building the graph");
    ann.save(&path).expect("saving the graph");
    let meta_path = super::scratch("ann.idx.hnsw.json");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(&meta_path).expect("reading the metadata"))
            .expect("the metadata is JSON");
    let generation = meta["generation"].as_u64().unwrap_or(0);
    let base = if generation == 0 {
        "ann.idx".to_string()
    } else {
        format!("ann.idx.g{generation}")
    };
    let loaded = Ann::load(Arc::clone(&index), &path).expect("loading the fixture graph");
    assert_eq!(
        loaded.map(|a| a.len()),
        Some(ROWS),
        "the fixture graph loads"
    );
    let graph_path = super::scratch(&format!("{base}.hnsw.graph"));
    let data_path = super::scratch(&format!("{base}.hnsw.data"));
    Fixture {
        graph: std::fs::read(&graph_path).expect("reading the graph"),
        data: std::fs::read(&data_path).expect("reading the data"),
        path,
        index,
        meta,
        meta_path,
        graph_path,
        data_path,
        codes: compact(),
    }
}

thread_local! {
    static FIXTURE: RefCell<Option<Fixture>> = const { RefCell::new(None) };
}

fn with_fixture<T>(f: impl FnOnce(&Fixture) -> T) -> T {
    FIXTURE.with(|cell| {
        let mut cell = cell.borrow_mut();
        f(cell.get_or_insert_with(fixture))
    })
}

/// The valid metadata, graph and data files, each under its mode.
pub fn seeds() -> Vec<Vec<u8>> {
    with_fixture(|fx| {
        let meta = serde_json::to_vec_pretty(&fx.meta).expect("metadata as JSON");
        let codes_meta = serde_json::to_vec_pretty(&fx.codes.meta).expect("metadata as JSON");
        [
            (0u8, meta),
            (1, fx.graph.clone()),
            (2, fx.data.clone()),
            (3, fx.codes.links.clone()),
            (4, codes_meta),
        ]
        .into_iter()
        .map(|(mode, bytes)| {
            let mut out = vec![mode];
            out.extend(bytes);
            out
        })
        .collect()
    })
}

/// Loads the fixture's graph with one file replaced by `data` (after the
/// mode byte) and, if it loads, searches it.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    with_fixture(|fx| {
        if mode % 5 >= 3 {
            return run_compact(&fx.codes, mode % 5 == 3, rest);
        }
        let (graph, dump) = match mode % 5 {
            1 => (rest, &fx.data[..]),
            2 => (&fx.graph[..], rest),
            _ => (&fx.graph[..], &fx.data[..]),
        };
        std::fs::write(&fx.graph_path, graph).expect("writing the graph");
        std::fs::write(&fx.data_path, dump).expect("writing the data");
        let meta = if mode % 5 == 0 {
            rest.to_vec()
        } else {
            let mut meta = fx.meta.clone();
            meta["graph_bytes"] = graph.len().into();
            meta["graph_crc32"] = crc32fast::hash(graph).into();
            meta["data_bytes"] = dump.len().into();
            meta["data_crc32"] = crc32fast::hash(dump).into();
            serde_json::to_vec(&meta).expect("metadata as JSON")
        };
        std::fs::write(&fx.meta_path, meta).expect("writing the metadata");
        search(&fx.index, &fx.path);
    });
}

/// The compact graph loaded with its links file (`links`) or its metadata
/// replaced by `rest`.
fn run_compact(fx: &Compact, links: bool, rest: &[u8]) {
    let meta = if links {
        std::fs::write(&fx.links_path, rest).expect("writing the links");
        let mut meta = fx.meta.clone();
        meta["links_bytes"] = rest.len().into();
        meta["links_crc32"] = crc32fast::hash(rest).into();
        serde_json::to_vec(&meta).expect("metadata as JSON")
    } else {
        std::fs::write(&fx.links_path, &fx.links).expect("writing the links");
        rest.to_vec()
    };
    std::fs::write(&fx.meta_path, meta).expect("writing the metadata");
    search(&fx.index, &fx.path);
}

/// Load the graph of the index at `path`; if it loads, search it.
fn search(index: &Arc<Index>, path: &std::path::Path) {
    let Ok(Some(ann)) = Ann::load(Arc::clone(index), path) else {
        return;
    };
    let _ = (ann.len(), ann.is_empty(), ann.covers(), ann.params());
    let q = super::probe(1, DIM);
    for (k, ef) in [(1, 1), (5, 16), (ROWS + 3, 4)] {
        if let Ok(hits) = ann.search(q.as_slice().expect("contiguous"), k, ef) {
            assert!(hits.len() <= k);
            assert!(hits.iter().all(|&(i, _)| i < ROWS));
        }
    }
}
