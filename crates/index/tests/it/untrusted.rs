//! Files an index reader never trusts: a FIFO or a `/dev/zero` symlink as the
//! index or one of its sidecars (`.hnsw.json`, `.links`), an oversize
//! `.hnsw.json`, each refused with an error at once (a FIFO would block a
//! plain open, `/dev/zero` would be read until memory runs out); and stored
//! vectors that damage made non-finite or not of unit length, which search
//! never serves and `verify` reports.
use crate::common;

use bertflow_index::{stored_row_ok, stored_score, AnnFiles, AnnParams, Index, IndexError};
use common::{build, identity};
use std::path::Path;

const D: usize = 8;

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    assert!(std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success());
}

#[cfg(unix)]
fn zero_link(path: &Path) {
    let _ = std::fs::remove_file(path);
    std::os::unix::fs::symlink("/dev/zero", path).unwrap();
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_as_the_index_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.bfi");
    mkfifo(&path);
    let e = Index::open(&path, true).err().unwrap().to_string();
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    zero_link(&path);
    let e = Index::open(&path, false).err().unwrap().to_string();
    assert!(e.contains("not a regular file (a character device)"), "{e}");
}

/// An index with a compact graph over int8 codes (a `.hnsw.json` and a
/// `.links` file beside it).
fn with_graph(path: &Path) -> std::sync::Arc<Index> {
    let d = common::codes::D;
    common::codes::write(path, &common::codes::int8(), &common::vectors(300, d, 3));
    let index = std::sync::Arc::new(Index::open(path, true).unwrap());
    let ann = bertflow_index::Ann::build(index.clone(), AnnParams::default(), &|_| {}).unwrap();
    ann.save(path).unwrap();
    assert!(bertflow_index::Ann::load(index.clone(), path)
        .unwrap()
        .is_some());
    index
}

#[cfg(unix)]
#[test]
fn a_fifo_a_device_or_an_oversize_file_as_a_sidecar_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.bfi");
    let index = with_graph(&path);
    let files = AnnFiles::of(&path);
    let links = files.links().unwrap();
    let (meta, saved_links) = (
        std::fs::read(&files.meta).unwrap(),
        std::fs::read(&links).unwrap(),
    );
    let load = || bertflow_index::Ann::load(index.clone(), &path).map(|a| a.is_some());

    mkfifo(&files.meta);
    let e = load().unwrap_err().to_string();
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    zero_link(&files.meta);
    let e = load().unwrap_err().to_string();
    assert!(e.contains("not a regular file (a character device)"), "{e}");
    // 2 MiB of JSON (spaces): over the limit, refused before it is read.
    let mut big = meta.clone();
    big.resize(2 << 20, b' ');
    std::fs::remove_file(&files.meta).unwrap();
    std::fs::write(&files.meta, &big).unwrap();
    let e = load().unwrap_err().to_string();
    assert!(e.contains("more than the limit"), "{e}");
    std::fs::write(&files.meta, &meta).unwrap();

    mkfifo(&links);
    let e = load().unwrap_err().to_string();
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    zero_link(&links);
    let e = load().unwrap_err().to_string();
    assert!(e.contains("not a regular file (a character device)"), "{e}");
    // Longer than the metadata records: refused before reading.
    std::fs::remove_file(&links).unwrap();
    std::fs::write(&links, [saved_links.as_slice(), &[0u8; 64]].concat()).unwrap();
    let e = load().unwrap_err().to_string();
    assert!(e.contains("more than the limit"), "{e}");
    std::fs::write(&links, &saved_links).unwrap();
    assert_eq!(load(), Ok(true));
}

/// Replace the bytes of row `row` of the first segment (vectors start at
/// byte 64 in an unquantized index) and fix the segment's CRC-32 in the
/// footer, as damage that keeps every checksum consistent would.
fn damage_row(path: &Path, row: usize, values: &[f32]) {
    let mut bytes = std::fs::read(path).unwrap();
    let n = bytes.len();
    let len = u64::from_le_bytes(bytes[n - 20..n - 12].try_into().unwrap()) as usize;
    let at = n - 20 - len;
    let mut footer: serde_json::Value = serde_json::from_slice(&bytes[at..n - 20]).unwrap();
    let seg = &mut footer["segments"][0];
    let offset = seg["offset"].as_u64().unwrap() as usize;
    let start = offset + row * D * 4;
    for (k, v) in values.iter().enumerate() {
        bytes[start + k * 4..start + k * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    let count = seg["count"].as_u64().unwrap() as usize;
    let end =
        offset + count * D * 4 + (count + 1) * 8 + seg["text_bytes"].as_u64().unwrap() as usize;
    seg["crc32"] = crc32fast::hash(&bytes[offset..end]).into();
    let json = serde_json::to_vec(&footer).unwrap();
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    out.extend_from_slice(&bytes[n - 8..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn non_finite_or_scaled_stored_vectors_are_never_served_and_verify_reports_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.bfi");
    let (vectors, _) = build(&path, D, &[(40, 7)]);
    let query: Vec<f32> = vectors[3 * D..4 * D].to_vec();
    assert!(Index::open(&path, true).is_ok());
    let pristine = std::fs::read(&path).unwrap();
    // A NaN in row 10; row 3 (the query's own row) scaled by 10.
    let unit3 = {
        let n: f32 = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        query.iter().map(|x| x / n * 10.0).collect::<Vec<_>>()
    };
    let mut nan = vec![0.5f32; D];
    nan[2] = f32::NAN;
    for (row, values, what) in [(10, &nan, "not finite"), (3, &unit3, "not of unit length")] {
        std::fs::write(&path, &pristine).unwrap();
        damage_row(&path, row, values);
        let e = Index::open(&path, true).err().unwrap();
        assert!(
            matches!(&e, IndexError::Corrupt(m) if m.contains(what) && m.contains(&format!("sentence {row}"))),
            "{e}"
        );
        // Served without verification: the row is left out, every score a
        // finite cosine.
        let index = Index::open(&path, false).unwrap();
        for hits in [
            index.search(&query, 40).unwrap(),
            index.search_exact(&query, 40).unwrap(),
        ] {
            assert_eq!(hits.len(), 39, "{hits:?}");
            assert!(hits
                .iter()
                .all(|&(i, s)| i != row && s.is_finite() && s.abs() <= 1.0 + 1e-5));
        }
    }
}

#[test]
fn the_stored_row_rule() {
    let unit = [0.6f32, 0.8];
    assert!(stored_row_ok(&unit) && stored_row_ok(&[0.0, 0.0]));
    assert!(!stored_row_ok(&[6.0, 8.0]));
    assert!(!stored_row_ok(&[f32::NAN, 0.0]) && !stored_row_ok(&[f32::INFINITY, 0.0]));
    assert_eq!(stored_score(&unit, &[1.0, 0.0]), Some(0.6));
    assert_eq!(stored_score(&[6.0, 8.0], &[1.0, 0.0]), None);
    assert_eq!(stored_score(&[f32::NAN, 0.0], &[1.0, 0.0]), None);
}

#[test]
fn non_finite_vectors_are_refused_at_build_and_add() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.bfi");
    let mut writer = bertflow_index::IndexWriter::create(&path, identity(D)).unwrap();
    let texts = common::texts(3, 0);
    let mut v = common::vectors(3, D, 1);
    v[D + 4] = f32::NAN;
    let e = writer.add(&v, &texts).unwrap_err().to_string();
    assert!(e.contains("vector 1 of this batch has a NaN"), "{e}");
    v[D + 4] = f32::INFINITY;
    assert!(writer.add(&v, &texts).is_err());
    v[D + 4] = 0.5;
    writer.add(&v, &texts).unwrap();
    writer.finish().unwrap();
}
