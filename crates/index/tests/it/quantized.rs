//! Quantized indexes (format version 3): the codes written are the
//! quantizer's, the scan ranks candidates by an independent computation of
//! the code scores, rescoring gives exact cosines, threads change nothing,
//! appends keep the quantizer, and damage to the codes or the footer is an
//! error.

use crate::common;

use bertflow_index::format::normalise_into;
use bertflow_index::{CodeKind, Index, IndexError, IndexWriter, Quantization, SearchParams};
use common::{identity, texts, vectors};

const D: usize = 24;

fn int8(d: usize) -> Quantization {
    Quantization::new("int8", CodeKind::Int8, d, Some(1.0 / 127.0), None, "test").unwrap()
}

fn binary(d: usize) -> Quantization {
    Quantization::new("binary", CodeKind::Binary, d, None, None, "test").unwrap()
}

/// A rotation of the first two axes by 30 degrees (orthogonal).
fn rotated(d: usize) -> Quantization {
    let mut r = vec![0.0; d * d];
    (0..d).for_each(|i| r[i * d + i] = 1.0);
    let (s, c) = (0.5f64, 0.75f64.sqrt());
    r[0] = c;
    r[1] = s;
    r[d] = -s;
    r[d + 1] = c;
    Quantization::new(
        "ubinary:itq=true",
        CodeKind::Ubinary,
        d,
        None,
        Some(r),
        "test",
    )
    .unwrap()
}

/// Build a quantized index of `chunks` (rows, seed), the later ones appended.
fn build(path: &std::path::Path, q: &Quantization, chunks: &[(usize, u64)]) -> Vec<f32> {
    let mut all = Vec::new();
    for (k, &(n, seed)) in chunks.iter().enumerate() {
        let mut w = if k == 0 {
            IndexWriter::create_quantized(path, identity(D), q.clone()).unwrap()
        } else {
            IndexWriter::append(path, &identity(D)).unwrap()
        };
        assert_eq!(w.quantizer(), Some(q));
        let v = vectors(n, D, seed);
        w.add(&v, &texts(n, all.len() / D)).unwrap();
        w.finish().unwrap();
        all.extend(v);
    }
    all
}

fn unit(v: &[f32]) -> Vec<f32> {
    let mut out = Vec::new();
    normalise_into(v, &mut out);
    out
}

/// Code score computed here, independently of the kernels.
fn code_score(q: &Quantization, a: &[u8], b: &[u8]) -> i64 {
    match q.kind {
        CodeKind::Int8 => a
            .iter()
            .zip(b)
            .map(|(&x, &y)| i64::from(x as i8) * i64::from(y as i8))
            .sum(),
        _ => -a
            .iter()
            .zip(b)
            .map(|(x, y)| i64::from((x ^ y).count_ones()))
            .sum::<i64>(),
    }
}

#[test]
fn the_scan_keeps_the_best_codes_and_rescoring_is_exact() {
    for q in [int8(D), binary(D), rotated(D)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.idx");
        let all = build(&path, &q, &[(300, 1), (200, 2)]);
        let index = Index::open(&path, true).unwrap();
        assert_eq!(index.quantizer(), Some(&q));
        assert_eq!((index.len(), index.segments()), (500, 2));
        let bytes = std::fs::read(&path).unwrap();
        let needle = b"{\"format_version\":3";
        assert!(bytes.windows(needle.len()).any(|w| w == needle));

        for probe in 0..5u64 {
            let query = vectors(1, D, 1000 + probe);
            let qc = q.code(&unit(&query));
            // With rescore 1 and k 1, the answer is the best code (ties: lower index).
            let best = (0..500)
                .map(|i| {
                    (
                        i,
                        code_score(&q, &qc, &q.code(&unit(&all[i * D..(i + 1) * D]))),
                    )
                })
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .unwrap()
                .0;
            let one = SearchParams {
                rescore: 1,
                shortlist: 1,
                threads: 1,
            };
            let hit = index.search_with(&query, 1, &one).unwrap();
            assert_eq!(hit[0].0, best, "{} probe {probe}", q.spec);
            // The score returned is the exact cosine.
            let v = index.vector(best).unwrap();
            let exact: f32 = bertflow_index::dot(v, &unit(&query));
            assert_eq!(hit[0].1, exact);
            // Rescoring every row is the exact search, bit for bit.
            let all_rows = SearchParams {
                rescore: 500,
                shortlist: 1,
                threads: 2,
            };
            assert_eq!(
                index.search_with(&query, 10, &all_rows).unwrap(),
                index.search_exact(&query, 10).unwrap()
            );
            // A rescore far beyond the rows is the same search (it used to
            // abort the process: the top-k reserved rescore x k slots).
            let huge = SearchParams {
                rescore: usize::MAX / 4,
                shortlist: 1,
                threads: 2,
            };
            assert_eq!(
                index.search_with(&query, 10, &huge).unwrap(),
                index.search_exact(&query, 10).unwrap()
            );
        }
        // k over the count, k = 0, a wrong dimension, rescore 0.
        let query = vectors(1, D, 7);
        assert_eq!(index.search(&query, 900).unwrap().len(), 500);
        assert!(index.search(&query, 0).unwrap().is_empty());
        assert!(matches!(
            index.search(&query[..3], 2),
            Err(IndexError::Invalid(_))
        ));
        let zero = SearchParams {
            rescore: 0,
            shortlist: 1,
            threads: 1,
        };
        assert!(matches!(
            index.search_with(&query, 2, &zero),
            Err(IndexError::Invalid(_))
        ));
    }
}

#[test]
fn threads_do_not_change_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.idx");
    let d = 8;
    let q = Quantization::new("binary", CodeKind::Binary, d, None, None, "t").unwrap();
    let mut w = IndexWriter::create_quantized(&path, identity(d), q).unwrap();
    // Enough rows for several scanning threads, in segments they cut across.
    for (n, seed) in [(40_000, 1), (35_000, 2), (25_000, 3)] {
        w.add(&vectors(n, d, seed), &vec![String::new(); n])
            .unwrap();
    }
    w.finish().unwrap();
    let index = Index::open(&path, false).unwrap();
    for probe in 0..3 {
        let query = vectors(1, d, 50 + probe);
        let with = |threads| {
            index
                .search_with(
                    &query,
                    10,
                    &SearchParams {
                        rescore: 4,
                        shortlist: 3,
                        threads,
                    },
                )
                .unwrap()
        };
        let one = with(1);
        assert_eq!(one.len(), 10);
        assert_eq!(with(2), one);
        assert_eq!(with(3), one);
        assert_eq!(with(0), one);
    }
}

#[test]
fn appends_keep_the_quantizer_and_plain_indexes_stay_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.idx");
    build(&path, &int8(D), &[(50, 1), (30, 2), (20, 3)]);
    let index = Index::open(&path, true).unwrap();
    assert_eq!((index.len(), index.segments()), (100, 3));
    assert_eq!(index.quantizer(), Some(&int8(D)));
    assert_eq!(index.text(60).unwrap(), texts(1, 60)[0]);

    let plain = dir.path().join("p.idx");
    common::build(&plain, D, &[(10, 1)]);
    let mut w = IndexWriter::append(&plain, &identity(D)).unwrap();
    w.add(&vectors(5, D, 2), &texts(5, 10)).unwrap();
    w.finish().unwrap();
    let bytes = std::fs::read(&plain).unwrap();
    let v2 = b"{\"format_version\":2";
    assert!(bytes.windows(v2.len()).any(|w| w == v2));
    let index = Index::open(&plain, true).unwrap();
    assert!(index.quantizer().is_none());
    // Without a quantizer, search is the exact search.
    let query = vectors(1, D, 9);
    assert_eq!(
        index.search(&query, 5).unwrap(),
        index.search_exact(&query, 5).unwrap()
    );
}

#[test]
fn a_quantizer_of_another_dimension_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.idx");
    assert!(matches!(
        IndexWriter::create_quantized(&path, identity(D), int8(D + 1)),
        Err(IndexError::Invalid(_))
    ));
}

/// Replace `from` by `to` (same length) in the last footer and fix its CRC.
fn patch_footer(path: &std::path::Path, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(path).unwrap();
    let n = bytes.len();
    let len = u64::from_le_bytes(bytes[n - 20..n - 12].try_into().unwrap()) as usize;
    let at = n - 20 - len;
    let json = &mut bytes[at..n - 20];
    let p = json.windows(from.len()).position(|w| w == from).unwrap();
    json[p..p + to.len()].copy_from_slice(to);
    let crc = crc32fast::hash(&bytes[at..n - 20]);
    bytes[n - 12..n - 8].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn damaged_codes_or_footers_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.idx");
    build(&path, &binary(D), &[(40, 1)]);
    let pristine = std::fs::read(&path).unwrap();
    // A flipped bit in the codes (they start the first segment, at byte 64).
    let mut bytes = pristine.clone();
    bytes[64 + 5] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    assert!(Index::open(&path, false).is_ok());
    assert!(matches!(
        Index::open(&path, true),
        Err(IndexError::Corrupt(m)) if m.contains("checksum")
    ));
    // Version 3 claimed without codes, and codes in a version 2 footer.
    for (from, to) in [
        (&b"\"format_version\":3"[..], &b"\"format_version\":2"[..]),
        (b"\"quantizer\":{", b"\"quantizes\":{"),
        (b"\"kind\":\"binary\"", b"\"kind\":\"int8\"  "),
        (b"\"dimension\":24,\"fitted", b"\"dimension\":25,\"fitted"),
    ] {
        std::fs::write(&path, &pristine).unwrap();
        patch_footer(&path, from, to);
        assert!(
            matches!(Index::open(&path, false), Err(IndexError::Corrupt(_))),
            "{}",
            String::from_utf8_lossy(to)
        );
    }
}

#[test]
fn repair_restores_a_damaged_trailer_and_cuts_a_torn_append() {
    use bertflow_index::{repair, Repaired};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.idx");
    build(&path, &rotated(D), &[(30, 1), (20, 2)]);
    let clean = std::fs::read(&path).unwrap();
    // A flipped byte in the last trailer's CRC: the old state opens, repair
    // proves the later one complete (codes included) and rewrites the trailer.
    let mut bytes = clean.clone();
    let n = bytes.len();
    bytes[n - 10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(Index::open(&path, true).unwrap().len(), 30);
    assert!(matches!(
        repair(&path, None).unwrap(),
        Repaired::Trailer { sentences: 50, .. }
    ));
    assert_eq!(std::fs::read(&path).unwrap(), clean);
    // Bytes of an unfinished append are cut.
    let mut torn = clean.clone();
    torn.extend([7u8; 100]);
    std::fs::write(&path, &torn).unwrap();
    assert!(matches!(
        repair(&path, None).unwrap(),
        Repaired::Truncated {
            sentences: 50,
            bytes: 100
        }
    ));
    let index = Index::open(&path, true).unwrap();
    assert_eq!(index.quantizer(), Some(&rotated(D)));
    assert_eq!(index.len(), 50);
}
