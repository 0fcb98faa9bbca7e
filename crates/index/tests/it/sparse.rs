//! Sparse vectors in the index (format version 4): a round trip (build in
//! several segments, append, reopen, quantized or not) whose sparse search
//! equals a brute-force scan exactly (scores bit for bit, ties to the lower
//! row); the errors of an index without sparse vectors and of bad sparse
//! rows; damaged postings (every kind a reader must not trust) found by
//! `verify` and never a panic or a wrong row in search; crashes at every
//! point of an append leaving the old or the new state.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use bertflow_index::{
    sparse_dot, Index, IndexError, IndexWriter, Quantization, SparseInfo, SparseRef,
};
use common::{identity, texts, vectors};

const D: usize = 8;
const VOCAB: u64 = 60;

type Sparse = (Vec<u32>, Vec<f32>);

/// Deterministic sparse vectors: token ids drawn with a Zipf-like skew
/// (small ids common), weights from a few values (so that scores tie), every
/// seventh row empty.
fn sparse_rows(n: usize, seed: u64) -> Vec<Sparse> {
    let mut h = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        h
    };
    (0..n)
        .map(|r| {
            if r % 7 == 3 {
                return (Vec::new(), Vec::new());
            }
            let nnz = 1 + (next() % 6) as usize;
            let mut pairs: Vec<(u32, f32)> = (0..nnz)
                .map(|_| {
                    let u = (next() % 10_000) as f64 / 10_000.0;
                    let id = ((VOCAB as f64).powf(u * u) as u32).min(VOCAB as u32 - 1);
                    (id, [0.5f32, 1.0, 1.25, 2.0][(next() % 4) as usize])
                })
                .collect();
            pairs.sort_by_key(|p| p.0);
            pairs.dedup_by_key(|p| p.0);
            pairs.into_iter().unzip()
        })
        .collect()
}

fn refs(rows: &[Sparse]) -> Vec<SparseRef<'_>> {
    rows.iter().map(|(i, w)| (&i[..], &w[..])).collect()
}

fn info() -> SparseInfo {
    SparseInfo {
        source: "test splade".into(),
        dimension: VOCAB,
    }
}

/// A sparse index of `chunks` (rows, seed), the later ones appended when
/// `append`; returns every row's sparse vector.
fn build(path: &Path, chunks: &[(usize, u64)], quantizer: Option<Quantization>) -> Vec<Sparse> {
    let mut w = IndexWriter::create_sparse(path, identity(D), quantizer, info()).unwrap();
    let mut all = Vec::new();
    for &(n, seed) in chunks {
        let s = sparse_rows(n, seed);
        w.add_sparse(&vectors(n, D, seed), &texts(n, all.len()), &refs(&s))
            .unwrap();
        all.extend(s);
    }
    w.finish().unwrap();
    all
}

/// Brute force: every row sharing a token with the query, scored by
/// [`sparse_dot`], sorted best first, ties to the lower row.
fn brute(rows: &[Sparse], q: SparseRef, k: usize) -> Vec<(usize, f32)> {
    let mut scored: Vec<(usize, f32)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.0.iter().any(|id| q.0.contains(id)))
        .map(|(i, r)| (i, sparse_dot((&r.0, &r.1), q)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

fn check_against_brute(index: &Index, rows: &[Sparse]) {
    assert_eq!(index.len(), rows.len());
    for (qi, q) in sparse_rows(25, 777).iter().enumerate() {
        let q = (&q.0[..], &q.1[..]);
        for k in [1, 5, 10, 1000] {
            assert_eq!(
                index.search_sparse(q, k).unwrap(),
                brute(rows, q, k),
                "query {qi}, k {k}"
            );
        }
        for (i, r) in rows.iter().enumerate().step_by(3) {
            let want = sparse_dot((&r.0, &r.1), q);
            assert_eq!(index.sparse_score(i, q).unwrap().to_bits(), want.to_bits());
        }
    }
}

fn binary() -> Quantization {
    Quantization::new(
        "binary",
        bertflow_index::CodeKind::Binary,
        D,
        None,
        None,
        "t",
    )
    .unwrap()
}

#[test]
fn sparse_search_equals_a_brute_force_scan_after_build_reopen_and_append() {
    for quantizer in [None, Some(binary())] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.bfi");
        let mut rows = build(&path, &[(70, 1), (1, 2), (45, 3)], quantizer.clone());
        let index = Index::open(&path, true).unwrap();
        assert_eq!(index.sparse_info(), Some(&info()));
        assert_eq!(index.segments(), 3);
        assert_eq!(index.quantizer().is_some(), quantizer.is_some());
        let nnz: usize = rows.iter().map(|r| r.0.len()).sum();
        assert_eq!(index.sparse_postings(), nnz as u64);
        check_against_brute(&index, &rows);
        // A query sharing no token, an empty query: nothing.
        assert!(index
            .search_sparse((&[59], &[1.0]), 10)
            .unwrap()
            .iter()
            .all(|h| rows[h.0].0.contains(&59)));
        assert!(index.search_sparse((&[], &[]), 10).unwrap().is_empty());
        // The dense side is untouched.
        let v = vectors(70, D, 1);
        assert_eq!(index.search(&v[2 * D..3 * D], 1).unwrap()[0].0, 2);
        drop(index);
        // Append: dense add refused, sparse add written.
        let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
        assert!(w.sparse().is_some());
        let e = w
            .add(&vectors(2, D, 9), &texts(2, 0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sparse vector beside each dense one"), "{e}");
        let more = sparse_rows(30, 4);
        w.add_sparse(&vectors(30, D, 4), &texts(30, 116), &refs(&more))
            .unwrap();
        assert_eq!(w.finish().unwrap(), 146);
        rows.extend(more);
        let index = Index::open(&path, true).unwrap();
        check_against_brute(&index, &rows);
        let raw = std::fs::read(&path).unwrap();
        let v4 = b"{\"format_version\":4";
        assert!(raw.windows(v4.len()).any(|w| w == v4));
    }
}

#[test]
fn an_index_without_sparse_vectors_says_how_to_add_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.bfi");
    common::build(&path, D, &[(20, 1)]);
    let index = Index::open(&path, true).unwrap();
    assert!(index.sparse_info().is_none());
    let e = index
        .search_sparse((&[1], &[1.0]), 3)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("stores no sparse vectors") && e.contains("--with-sparse"),
        "{e}"
    );
    assert!(index.sparse_score(0, (&[1], &[1.0])).is_err());
    drop(index);
    let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
    let s = sparse_rows(2, 1);
    let e = w
        .add_sparse(&vectors(2, D, 1), &texts(2, 0), &refs(&s))
        .unwrap_err();
    assert!(e.to_string().contains("stores no sparse vectors"), "{e}");
}

#[test]
fn bad_sparse_rows_and_queries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.bfi");
    let mut w = IndexWriter::create_sparse(&path, identity(D), None, info()).unwrap();
    let v = vectors(2, D, 1);
    let t = texts(2, 0);
    let ok: (&[u32], &[f32]) = (&[1, 2], &[1.0, 0.0]);
    for (bad, what) in [
        (
            (&[2u32, 1][..], &[1.0f32, 1.0][..]),
            "not strictly ascending",
        ),
        (
            (&[1, 60][..], &[1.0, 1.0][..]),
            "outside the index's sparse dimension 60",
        ),
        ((&[1][..], &[-0.5][..]), "weight -0.5"),
        ((&[1][..], &[f32::NAN][..]), "weight NaN"),
        ((&[1, 2][..], &[1.0][..]), "2 token ids for 1 weights"),
    ] {
        let e = w.add_sparse(&v, &t, &[ok, bad]).unwrap_err().to_string();
        assert!(
            e.contains("sparse vector 1 of this batch") && e.contains(what),
            "{e}"
        );
    }
    assert!(w.add_sparse(&v, &t, &[ok]).is_err());
    w.add_sparse(&v, &t, &[ok, ok]).unwrap();
    w.finish().unwrap();
    let index = Index::open(&path, true).unwrap();
    // The zero weight is not stored: token 2 matches nothing.
    assert!(index.search_sparse((&[2], &[1.0]), 5).unwrap().is_empty());
    assert_eq!(
        index.search_sparse((&[1], &[1.0]), 5).unwrap(),
        [(0, 1.0), (1, 1.0)]
    );
    for (q, what) in [
        ((&[3u32, 1][..], &[1.0f32, 1.0][..]), "strictly ascending"),
        ((&[1][..], &[f32::INFINITY][..]), "not finite"),
        ((&[1, 2][..], &[1.0][..]), "2 token ids and 1 weights"),
    ] {
        let e = index.search_sparse(q, 5).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
    assert!(IndexWriter::create_sparse(
        &path,
        identity(D),
        None,
        SparseInfo {
            source: "x".into(),
            dimension: 0
        }
    )
    .is_err());
}

/// The footer of `bytes` (JSON) and where it starts.
fn footer(bytes: &[u8]) -> (serde_json::Value, usize) {
    let n = bytes.len();
    let len = u64::from_le_bytes(bytes[n - 20..n - 12].try_into().unwrap()) as usize;
    let at = n - 20 - len;
    (serde_json::from_slice(&bytes[at..n - 20]).unwrap(), at)
}

/// `bytes` with the footer replaced by `footer` (checksum rewritten).
fn with_footer(bytes: &[u8], footer: &serde_json::Value, at: usize) -> Vec<u8> {
    let json = serde_json::to_vec(footer).unwrap();
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    out.extend_from_slice(b"BFINDEX1");
    out
}

/// Damage the first segment's block with `edit` (bytes of the block, its
/// token count) and fix its CRC-32 in the footer, as damage that keeps every
/// checksum consistent would.
fn damage_block(pristine: &[u8], edit: impl Fn(&mut [u8], usize)) -> Vec<u8> {
    let (mut f, at) = footer(pristine);
    let b = &mut f["segments"][0]["sparse"];
    let (offset, tokens, postings) = (
        b["offset"].as_u64().unwrap() as usize,
        b["tokens"].as_u64().unwrap() as usize,
        b["postings"].as_u64().unwrap() as usize,
    );
    let len = (tokens + 1) * 8 + tokens * 4 + postings * 8;
    let mut bytes = pristine.to_vec();
    edit(&mut bytes[offset..offset + len], tokens);
    b["crc32"] = crc32fast::hash(&bytes[offset..offset + len]).into();
    with_footer(&bytes, &f, at)
}

#[test]
fn damaged_postings_are_errors_never_panics_or_wrong_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.bfi");
    let rows = build(&path, &[(60, 5), (20, 6)], None);
    let pristine = std::fs::read(&path).unwrap();
    fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes())
    }
    // Where the parts of a block of `t` tokens start.
    fn ids(t: usize) -> usize {
        (t + 1) * 8
    }
    fn rows_at(t: usize) -> usize {
        ids(t) + t * 4
    }
    type Edit = Box<dyn Fn(&mut [u8], usize)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "row out of range",
            Box::new(move |b, t| set_u32(b, rows_at(t), 60)),
        ),
        (
            "rows out of order",
            Box::new(move |b, t| {
                // The first token's first two rows swapped (it has several).
                let (r0, r1) = (rows_at(t), rows_at(t) + 4);
                let (x, y) = (b[r0..r0 + 4].to_vec(), b[r1..r1 + 4].to_vec());
                b[r0..r0 + 4].copy_from_slice(&y);
                b[r1..r1 + 4].copy_from_slice(&x);
            }),
        ),
        (
            "weight NaN",
            Box::new(move |b, _| {
                let n = b.len();
                b[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
            }),
        ),
        (
            "negative weight",
            Box::new(move |b, _| {
                let n = b.len();
                b[n - 4..].copy_from_slice(&(-1.0f32).to_le_bytes());
            }),
        ),
        (
            "offsets out of order",
            Box::new(move |b, _| b[8..16].copy_from_slice(&u64::MAX.to_le_bytes())),
        ),
        (
            "ids out of order",
            Box::new(move |b, t| {
                let (i0, i1) = (ids(t), ids(t) + 4);
                let (x, y) = (b[i0..i0 + 4].to_vec(), b[i1..i1 + 4].to_vec());
                b[i0..i0 + 4].copy_from_slice(&y);
                b[i1..i1 + 4].copy_from_slice(&x);
            }),
        ),
        (
            "id out of range",
            Box::new(move |b, t| set_u32(b, ids(t) + (t - 1) * 4, 1_000)),
        ),
    ];
    for (what, edit) in cases {
        std::fs::write(&path, damage_block(&pristine, edit)).unwrap();
        let e = Index::open(&path, true)
            .err()
            .unwrap_or_else(|| panic!("{what}: verify passed"));
        assert!(matches!(e, IndexError::Corrupt(_)), "{what}: {e}");
        // Served unverified: every query either errors or returns rows of
        // the index with finite scores.
        let index = Index::open(&path, false).unwrap();
        for q in sparse_rows(30, 99) {
            let q = (&q.0[..], &q.1[..]);
            if let Ok(hits) = index.search_sparse(q, 10) {
                assert!(
                    hits.iter().all(|h| h.0 < rows.len() && h.1.is_finite()),
                    "{what}"
                );
            }
            let _ = index.sparse_score(5, q);
        }
    }
    // Footer damage: counts that overflow or run past the file, a block
    // misplaced, sparse segments under a footer without sparse vectors (and
    // the reverse), a version that does not match.
    let (f, at) = footer(&pristine);
    type FooterEdit = Box<dyn Fn(&mut serde_json::Value)>;
    let edits: Vec<(&str, FooterEdit)> = vec![
        (
            "huge tokens",
            Box::new(|f| f["segments"][0]["sparse"]["tokens"] = u64::MAX.into()),
        ),
        (
            "postings past the footer",
            Box::new(|f| f["segments"][1]["sparse"]["postings"] = 1_000_000u64.into()),
        ),
        (
            "more postings",
            Box::new(|f| {
                let p = f["segments"][0]["sparse"]["postings"].as_u64().unwrap();
                f["segments"][0]["sparse"]["postings"] = (p + 1).into();
            }),
        ),
        (
            "misplaced",
            Box::new(|f| f["segments"][0]["sparse"]["offset"] = 8u64.into()),
        ),
        (
            "no sparse info",
            Box::new(|f| {
                f.as_object_mut().unwrap().remove("sparse");
            }),
        ),
        (
            "one segment without",
            Box::new(|f| {
                f["segments"][1].as_object_mut().unwrap().remove("sparse");
            }),
        ),
        ("version 2", Box::new(|f| f["format_version"] = 2.into())),
    ];
    for (what, edit) in edits {
        let mut g = f.clone();
        edit(&mut g);
        std::fs::write(&path, with_footer(&pristine, &g, at)).unwrap();
        for verify in [true, false] {
            let e = Index::open(&path, verify)
                .err()
                .unwrap_or_else(|| panic!("{what}: opened"));
            assert!(matches!(e, IndexError::Corrupt(_)), "{what}: {e}");
        }
    }
}

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

/// Child: append two segments (25 and 15 rows) with sparse vectors.
#[test]
fn child_append_sparse() {
    let Some(path) = std::env::var_os("INDEX_CHILD_PATH").map(PathBuf::from) else {
        return;
    };
    let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
    for (n, seed, from) in [(25, 21, 50), (15, 22, 75)] {
        let s = sparse_rows(n, seed);
        w.add_sparse(&vectors(n, D, seed), &texts(n, from), &refs(&s))
            .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn a_crash_during_a_sparse_append_leaves_the_old_or_the_new_index() {
    let points = [
        ("index:segment-written", 50),
        ("index:footer-synced", 50),
        ("index:trailer-written", 90),
        ("atomic:none", 90),
    ];
    for (point, want) in points {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.bfi");
        let mut rows = build(&path, &[(30, 1), (20, 2)], None);
        let out = child("child_append_sparse", point, &path);
        assert_eq!(
            out.status.success(),
            point == "atomic:none",
            "{point}: {out:?}"
        );
        let index = Index::open(&path, true).unwrap_or_else(|e| panic!("{point}: {e}"));
        assert_eq!(index.len(), want, "{point}");
        if want == 90 {
            rows.extend(sparse_rows(25, 21));
            rows.extend(sparse_rows(15, 22));
        } else {
            assert!(index.recovered().is_some(), "{point}");
        }
        check_against_brute(&index, &rows);
        drop(index);
        // The next append cuts off what the crash left and works.
        let mut w = IndexWriter::append(&path, &identity(D)).unwrap();
        let s = sparse_rows(5, 9);
        w.add_sparse(&vectors(5, D, 9), &texts(5, 900), &refs(&s))
            .unwrap();
        assert_eq!(w.finish().unwrap(), want as u64 + 5);
        rows.extend(s);
        let index = Index::open(&path, true).unwrap();
        assert!(index.recovered().is_none());
        check_against_brute(&index, &rows);
    }
}
