//! Crash safety of `index add` and `index ann`: a child process appends (or
//! saves a graph) and aborts at each named crash point; the file must then
//! open with the old or the new content, checksums verified, and the next
//! append must work. Also: the bytes of a torn append, the repair of a file
//! damaged the way bertflow 0.1's `index add` damaged them, readers that keep
//! their state while an append runs, and one writer at a time. Plain and
//! quantized (format version 3) indexes alike.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bertflow_index::{repair, Ann, AnnParams, Index, IndexError, IndexWriter, Repaired};
use common::{build, identity, texts, vectors};

const D: usize = 8;

/// Run the child test `test` in a new process of this binary, crashing at `point`.
fn child(test: &str, point: &str, path: &Path) -> std::process::Output {
    // Its full name in this binary: the module path without the crate's name.
    let (_, module) = module_path!().split_once("::").unwrap();
    Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("{module}::{test}"),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("INDEX_CHILD_PATH", path)
        .env(bertflow_durable::CRASH_ENV, point)
        .output()
        .unwrap()
}

fn child_path() -> Option<PathBuf> {
    std::env::var_os("INDEX_CHILD_PATH").map(PathBuf::from)
}

/// Child: append two segments (60 and 40 sentences) to the index.
#[test]
fn child_append() {
    let Some(path) = child_path() else { return };
    let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
    w.add(&vectors(60, D, 21), &texts(60, 100)).unwrap();
    w.add(&vectors(40, D, 22), &texts(40, 160)).unwrap();
    w.finish().unwrap();
}

/// Texts of every sentence of `index`.
fn all_texts(index: &Index) -> Vec<String> {
    (0..index.len())
        .map(|i| index.text(i).unwrap().to_owned())
        .collect()
}

#[test]
fn a_crash_during_append_leaves_the_old_or_the_new_index() {
    let points = [
        ("index:segment-written", 100),
        ("index:footer-synced", 100),
        ("index:trailer-written", 200),
        ("atomic:none", 200),
    ];
    for ((point, want), quantized) in points.into_iter().flat_map(|p| [(p, false), (p, true)]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.idx");
        let old_texts = if quantized {
            build_quantized(&path, &[(70, 1), (30, 2)])
        } else {
            build(&path, D, &[(70, 1), (30, 2)]).1
        };
        let out = child("child_append", point, &path);
        assert_eq!(
            out.status.success(),
            want == 200 && point == "atomic:none",
            "{point}: {out:?}"
        );
        let index = Index::open(&path, true).unwrap_or_else(|e| panic!("{point}: {e}"));
        assert_eq!(index.len(), want, "{point}");
        assert_eq!(index.quantizer().is_some(), quantized, "{point}");
        let got = all_texts(&index);
        assert_eq!(got[..100], old_texts[..], "{point}");
        if want == 200 {
            assert_eq!(got[100..], [texts(60, 100), texts(40, 160)].concat()[..]);
            assert!(index.recovered().is_none());
        } else {
            assert!(index.recovered().is_some(), "{point}: left bytes behind");
        }
        drop(index);
        // The next append cuts off what the crash left and works.
        let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
        w.add(&vectors(5, D, 9), &texts(5, 900)).unwrap();
        assert_eq!(w.finish().unwrap(), want as u64 + 5);
        let index = Index::open(&path, true).unwrap();
        assert_eq!(index.len(), want + 5);
        assert!(index.recovered().is_none());
        assert_eq!(index.text(want).unwrap(), texts(5, 900)[0]);
        // Every sentence is found by its own vector through the codes.
        let v = vectors(5, D, 9);
        assert_eq!(index.search(&v[D..2 * D], 1).unwrap()[0].0, want + 1);
    }
}

/// A quantized (binary) index of `chunks`, the later ones appended; its texts.
fn build_quantized(path: &Path, chunks: &[(usize, u64)]) -> Vec<String> {
    let q = bertflow_index::Quantization::new(
        "binary",
        bertflow_index::CodeKind::Binary,
        D,
        None,
        None,
        "test",
    )
    .unwrap();
    let mut all = Vec::new();
    for (k, &(n, seed)) in chunks.iter().enumerate() {
        let mut w = if k == 0 {
            IndexWriter::create_quantized(path, identity(D), q.clone()).unwrap()
        } else {
            IndexWriter::append(path, &identity(D)).unwrap()
        };
        let t = texts(n, all.len());
        w.add(&vectors(n, D, seed), &t).unwrap();
        w.finish().unwrap();
        all.extend(t);
    }
    all
}

#[test]
fn a_torn_append_is_ignored_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    build(&path, D, &[(50, 3)]);
    let clean = std::fs::read(&path).unwrap();
    // Half a segment and half a trailer after the state, as a crash could leave.
    let mut torn = clean.clone();
    torn.extend(std::iter::repeat_n(0u8, 64 - clean.len() % 64));
    torn.extend(vectors(3, D, 1).iter().flat_map(|x| x.to_le_bytes()));
    torn.extend(&clean[clean.len() - 30..clean.len() - 6]);
    std::fs::write(&path, &torn).unwrap();
    let index = Index::open(&path, true).unwrap();
    assert_eq!(index.len(), 50);
    let note = index.recovered().unwrap();
    assert!(
        note.contains(&format!("{} bytes", torn.len() - clean.len())),
        "{note}"
    );
    drop(index);
    assert_eq!(
        repair(&path, None).unwrap(),
        Repaired::Truncated {
            sentences: 50,
            bytes: (torn.len() - clean.len()) as u64
        }
    );
    assert_eq!(std::fs::read(&path).unwrap(), clean);
    assert_eq!(
        repair(&path, None).unwrap(),
        Repaired::Clean { sentences: 50 }
    );
}

/// A lock that goes an instant later (held by a process forked by another
/// thread while a writer had the file open, until its `exec`) is waited for;
/// a live writer's lock is refused.
#[test]
fn repair_waits_out_a_lock_held_for_an_instant_and_refuses_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    build(&path, D, &[(20, 3)]);
    let held = std::fs::File::open(&path).unwrap();
    held.lock().unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(held);
    });
    assert_eq!(
        repair(&path, None).unwrap(),
        Repaired::Clean { sentences: 20 }
    );
    release.join().unwrap();
    let writer = IndexWriter::append(&path, &identity(D)).unwrap();
    let err = repair(&path, None).unwrap_err();
    assert!(
        err.to_string().contains("another process is writing"),
        "{err}"
    );
    drop(writer);
}

#[test]
fn a_footerless_file_from_an_old_append_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    // Rows 5, 22, 39, ... are zero vectors and every fourth text is empty: the
    // shapes the segment search must not stop at.
    let (_, t) = build(&path, D, &[(40, 4), (35, 5)]);
    let index = Index::open(&path, true).unwrap();
    let before: Vec<Vec<f32>> = (0..75).map(|i| index.vector(i).unwrap().to_vec()).collect();
    let segments_end = {
        let last = 64 + 40 * D * 4 + 41 * 8 + t[..40].iter().map(String::len).sum::<usize>();
        let at = last.div_ceil(64) * 64;
        at + 35 * D * 4 + 36 * 8 + t[40..].iter().map(String::len).sum::<usize>()
    };
    drop(index);
    // bertflow 0.1's append: cut the footer off, then write (part of) a segment.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(segments_end);
    bytes.resize(segments_end.div_ceil(64) * 64, 0);
    let partial: Vec<u8> = vectors(20, D, 6)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    bytes.extend(&partial[..partial.len() - 7]);
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        Index::open(&path, false),
        Err(IndexError::Corrupt(_))
    ));

    let err = repair(&path, None).unwrap_err().to_string();
    assert!(err.contains("settings the index was built with"), "{err}");
    let repaired = repair(&path, Some(&identity(D))).unwrap();
    assert_eq!(
        repaired,
        Repaired::Rebuilt {
            sentences: 75,
            segments: 2,
            bytes: (bytes.len() - segments_end) as u64
        }
    );
    let index = Index::open(&path, true).unwrap();
    assert_eq!(all_texts(&index), t);
    for (i, v) in before.iter().enumerate() {
        assert_eq!(index.vector(i).unwrap(), &v[..], "row {i}");
    }
}

#[test]
fn readers_keep_their_state_while_an_append_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    build(&path, D, &[(80, 7)]);
    let reader = Index::open(&path, false).unwrap();
    let q = vectors(1, D, 77);
    let before = reader.search(&q, 10).unwrap();

    let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
    // One writer at a time.
    let err = IndexWriter::append(&path, &identity(D)).err().unwrap();
    assert!(err.to_string().contains("another `index add`"), "{err}");
    w.add(&vectors(500, D, 8), &texts(500, 80)).unwrap();
    assert_eq!(reader.search(&q, 10).unwrap(), before);
    w.finish().unwrap();
    // The open reader answers from the state it opened; a new one sees the rest.
    assert_eq!(reader.len(), 80);
    assert_eq!(reader.search(&q, 10).unwrap(), before);
    assert_eq!(reader.text(79).unwrap(), texts(80, 0)[79]);
    assert_eq!(Index::open(&path, true).unwrap().len(), 580);
}

/// Child: extend the graph of the index by the rows appended since, and save it.
#[test]
fn child_ann_save() {
    let Some(path) = child_path() else { return };
    let index = Arc::new(Index::open(&path, true).unwrap());
    let mut ann = Ann::load(index, &path).unwrap().unwrap();
    ann.extend(&|_| {}).unwrap();
    ann.save(&path).unwrap();
}

#[test]
fn a_crash_while_saving_the_graph_leaves_the_old_or_the_new_graph() {
    // An hnsw_rs graph (cosine, over the f32 rows) and a compact graph (over
    // the codes of a quantized index: its links file).
    let cases = [("ann:dumped", 300), ("ann:published", 400), ("none", 400)];
    for (quantized, (point, want)) in [false, true]
        .into_iter()
        .flat_map(|q| cases.map(|c| (q, c)))
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.idx");
        if quantized {
            build_quantized(&path, &[(300, 11)]);
        } else {
            build(&path, D, &[(300, 11)]);
        }
        let index = Arc::new(Index::open(&path, true).unwrap());
        let params = AnnParams {
            m: 8,
            ef_construction: 32,
        };
        Ann::build(index, params, &|_| {})
            .unwrap()
            .save(&path)
            .unwrap();
        let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
        w.add(&vectors(100, D, 12), &texts(100, 300)).unwrap();
        w.finish().unwrap();

        let out = child("child_ann_save", point, &path);
        assert_eq!(out.status.success(), point == "none", "{point}: {out:?}");
        let index = Arc::new(Index::open(&path, true).unwrap());
        let ann = Ann::load(Arc::clone(&index), &path)
            .unwrap_or_else(|e| panic!("{point}: {e}"))
            .unwrap();
        assert_eq!((ann.len(), ann.is_compact()), (want, quantized), "{point}");
        let row = index.vector(want - 1).unwrap().to_vec();
        assert_eq!(ann.search(&row, 1, 32).unwrap()[0].0, want - 1, "{point}");
        // A later save cleans up whatever generation the crash left behind.
        let mut ann = ann;
        ann.extend(&|_| {}).unwrap();
        ann.save(&path).unwrap();
        let dumps = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                let ext = if quantized { ".links" } else { ".hnsw.graph" };
                name.to_string_lossy().ends_with(ext)
            })
            .count();
        assert_eq!(dumps, 1, "{point} (quantized: {quantized})");
    }
}
