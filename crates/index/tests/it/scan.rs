//! The scan of bit codes and what it reads: codes are read into memory on
//! the first quantized search (not by `open`), rescored rows by positioned
//! reads (a file cut under the reader is an error, not a crash); shortlist 1
//! is the Hamming order alone, a wider shortlist re-ranks by the float query
//! against the codes' signs, both checked against computations made here.

use crate::common;

use bertflow_index::format::normalise_into;
use bertflow_index::{CodeKind, Index, IndexError, IndexWriter, Quantization, SearchParams};
use common::{identity, texts, vectors};

const D: usize = 24;

fn unit(v: &[f32]) -> Vec<f32> {
    let mut out = Vec::new();
    normalise_into(v, &mut out);
    out
}

/// Sign-bit quantizers: plain `binary`, and `ubinary` centred and rotated.
fn quantizers() -> Vec<Quantization> {
    let plain = Quantization::new("binary", CodeKind::Binary, D, None, None, "t").unwrap();
    // A rotation mixing neighbouring axes (orthogonal: 2x2 blocks).
    let mut r = vec![0.0; D * D];
    for b in (0..D).step_by(2) {
        let (c, s) = ((0.3 * b as f64).cos(), (0.3 * b as f64).sin());
        r[b * D + b] = c;
        r[b * D + b + 1] = s;
        r[(b + 1) * D + b] = -s;
        r[(b + 1) * D + b + 1] = c;
    }
    let centre: Vec<f64> = (0..D).map(|i| 0.02 * (i as f64 - 12.0)).collect();
    let rotated = Quantization::new("ubinary:itq", CodeKind::Ubinary, D, None, Some(r), "t")
        .unwrap()
        .centred(centre)
        .unwrap();
    vec![plain, rotated]
}

/// An index of `rows` in segments of `per`, and its vectors.
fn build(path: &std::path::Path, q: &Quantization, rows: usize, per: usize) -> Vec<f32> {
    let mut w = IndexWriter::create_quantized(path, identity(D), q.clone()).unwrap();
    let mut all = Vec::new();
    while all.len() < rows * D {
        let n = per.min(rows - all.len() / D);
        let v = vectors(n, D, 1 + all.len() as u64);
        w.add(&v, &texts(n, all.len() / D)).unwrap();
        all.extend(v);
    }
    w.finish().unwrap();
    all
}

/// `z` of `unit_query` as the quantizer's fields define it, here in f64.
fn projected(q: &Quantization, x: &[f32]) -> Vec<f64> {
    let c: Vec<f64> = (0..D)
        .map(|i| f64::from(x[i]) - q.centre.as_ref().map_or(0.0, |c| c[i]))
        .collect();
    match &q.rotation {
        Some(r) => (0..D)
            .map(|j| (0..D).map(|i| c[i] * r[i * D + j]).sum())
            .collect(),
        None => c,
    }
}

/// The expected answer, computed here: the `shortlist x rescore x k` best
/// codes by Hamming distance (ties: lower row), re-ranked (if the shortlist
/// is wider) by `sum_j z_j (2 b_j - 1)`, the best `rescore x k` rescored by
/// exact cosine.
fn expected(
    q: &Quantization,
    all: &[f32],
    query: &[f32],
    k: usize,
    rescore: usize,
    shortlist: usize,
) -> Vec<usize> {
    let n = all.len() / D;
    let uq = unit(query);
    let qc = q.code(&uq);
    let codes: Vec<Vec<u8>> = (0..n)
        .map(|i| q.code(&unit(&all[i * D..(i + 1) * D])))
        .collect();
    let hamming = |c: &[u8]| -> u32 { qc.iter().zip(c).map(|(a, b)| (a ^ b).count_ones()).sum() };
    let mut rows: Vec<usize> = (0..n).collect();
    rows.sort_by_key(|&i| (hamming(&codes[i]), i));
    let rescored = (k * rescore).min(n);
    rows.truncate((rescored * shortlist).min(n));
    if rows.len() > rescored {
        let z = projected(q, &uq);
        let flip = if q.kind == CodeKind::Binary { 0x80 } else { 0 };
        let signs = |c: &[u8]| -> f64 {
            (0..D)
                .map(|j| {
                    let bit = (c[j / 8] ^ flip) & (0x80 >> (j % 8)) != 0;
                    if bit {
                        z[j]
                    } else {
                        -z[j]
                    }
                })
                .sum()
        };
        rows.sort_by(|&a, &b| {
            signs(&codes[b])
                .total_cmp(&signs(&codes[a]))
                .then(a.cmp(&b))
        });
        rows.truncate(rescored);
    }
    let cos = |i: usize| bertflow_index::dot(&unit(&all[i * D..(i + 1) * D]), &uq);
    rows.sort_by(|&a, &b| cos(b).total_cmp(&cos(a)).then(a.cmp(&b)));
    rows.truncate(k);
    rows
}

#[test]
fn shortlist_one_is_the_hamming_order_and_wider_ones_rerank_by_the_signs() {
    for q in quantizers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.idx");
        let all = build(&path, &q, 700, 256);
        let index = Index::open(&path, false).unwrap();
        let mut differs = 0;
        for probe in 0..8u64 {
            let query = vectors(1, D, 5000 + probe);
            for (k, rescore) in [(1, 1), (5, 2), (10, 3)] {
                let mut answers = Vec::new();
                for shortlist in [1, 2, 4, 16] {
                    for threads in [1, 2] {
                        let params = SearchParams {
                            rescore,
                            shortlist,
                            threads,
                        };
                        let got: Vec<usize> = index
                            .search_with(&query, k, &params)
                            .unwrap()
                            .iter()
                            .map(|h| h.0)
                            .collect();
                        let want = expected(&q, &all, &query, k, rescore, shortlist);
                        assert_eq!(
                            got, want,
                            "{} k {k} rescore {rescore} shortlist {shortlist}",
                            q.spec
                        );
                    }
                    answers.push(expected(&q, &all, &query, k, rescore, shortlist));
                }
                differs += usize::from(answers.iter().any(|a| *a != answers[0]));
            }
        }
        // The re-ranking changes answers (else the comparison above proves little).
        assert!(differs > 0, "{}", q.spec);
        // A huge shortlist re-ranks every row (and allocates nothing huge).
        let query = vectors(1, D, 77);
        let huge = SearchParams {
            rescore: 2,
            shortlist: usize::MAX / 2,
            threads: 2,
        };
        let got: Vec<usize> = index
            .search_with(&query, 10, &huge)
            .unwrap()
            .iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(got, expected(&q, &all, &query, 10, 2, 700));
        let zero = SearchParams {
            shortlist: 0,
            ..SearchParams::default()
        };
        assert!(matches!(
            index.search_with(&query, 3, &zero),
            Err(IndexError::Invalid(m)) if m.contains("shortlist")
        ));
    }
}

#[test]
fn codes_are_read_on_the_first_search_not_by_open() {
    let q = &quantizers()[0];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.idx");
    build(&path, q, 1000, 300);
    let index = Index::open(&path, true).unwrap();
    assert_eq!(index.segments(), 4);
    assert_eq!(index.resident_code_bytes(), 0);
    // Exact search and texts read no codes either.
    let query = vectors(1, D, 3);
    index.search_exact(&query, 3).unwrap();
    index.text(999).unwrap();
    assert_eq!(index.resident_code_bytes(), 0);
    let first = index.search(&query, 3).unwrap();
    assert_eq!(index.resident_code_bytes(), 1000 * q.width());
    // Read once: the next search reads no more, and answers the same.
    assert_eq!(index.search(&query, 3).unwrap(), first);
    assert_eq!(index.resident_code_bytes(), 1000 * q.width());
}

#[test]
fn a_file_cut_under_a_reader_is_an_error_not_a_crash() {
    let q = &quantizers()[1];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.idx");
    build(&path, q, 600, 300);
    let query = vectors(1, D, 8);
    let whole = std::fs::metadata(&path).unwrap().len();
    // Cut in the second segment's vectors, then in the first's: the codes
    // are read, rows to rescore are not there any more.
    for cut in [whole / 2 + whole / 8, 64 + 300 * q.width() as u64 + 100] {
        std::fs::remove_file(&path).unwrap();
        build(&path, q, 600, 300);
        let index = Index::open(&path, false).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(cut).unwrap();
        let params = SearchParams {
            rescore: 600,
            shortlist: 1,
            threads: 1,
        };
        match index.search_with(&query, 1, &params) {
            Err(IndexError::Changed(m)) => assert!(m.contains("cut"), "{m}"),
            other => panic!("cut at {cut}: {other:?}"),
        }
        assert!(index.unchanged(&path).is_err());
    }
    // Cut before the codes: the first search cannot read them.
    std::fs::remove_file(&path).unwrap();
    build(&path, q, 600, 300);
    let index = Index::open(&path, false).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(70)
        .unwrap();
    assert!(matches!(
        index.search(&query, 2),
        Err(IndexError::Changed(m)) if m.contains("codes of segment 0")
    ));
    assert_eq!(index.resident_code_bytes(), 0);
}
