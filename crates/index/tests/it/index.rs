//! Round trips, appends, corruption, identity checks and exact search against
//! an independent brute-force ranking in f64.

use crate::common;

use bertflow_index::{Identity, Index, IndexError, IndexWriter};
use common::{build, identity, texts, vectors};

/// Brute force in f64 on the raw (unnormalised) vectors: cosine, best first,
/// ties by lower index.
fn brute_force(all: &[f32], d: usize, q: &[f32], k: usize) -> Vec<(usize, f64)> {
    let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nq = norm(q);
    let mut scored: Vec<(usize, f64)> = all
        .chunks_exact(d)
        .enumerate()
        .map(|(i, v)| {
            let nv = norm(v);
            let dot: f64 = v
                .iter()
                .zip(q)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            (
                i,
                if nv == 0.0 || nq == 0.0 {
                    0.0
                } else {
                    dot / (nv * nq)
                },
            )
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

#[test]
fn round_trip_keeps_texts_vectors_and_identity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.idx");
    let d = 12;
    let (v, t) = build(&path, d, &[(50, 1), (7, 2)]);
    assert!(!dir.path().join("corpus.idx.partial").exists());
    let index = Index::open(&path, true).unwrap();
    assert_eq!(index.len(), 57);
    assert_eq!(index.segments(), 2);
    assert_eq!(index.identity(), &identity(d));
    for (i, text) in t.iter().enumerate() {
        assert_eq!(index.text(i).unwrap(), text);
        let stored = index.vector(i).unwrap();
        let raw = &v[i * d..(i + 1) * d];
        let norm = raw
            .iter()
            .map(|&x| f64::from(x).powi(2))
            .sum::<f64>()
            .sqrt();
        for (s, r) in stored.iter().zip(raw) {
            let want = if norm == 0.0 {
                0.0
            } else {
                f64::from(*r) / norm
            };
            assert!((f64::from(*s) - want).abs() < 1e-6, "row {i}");
        }
    }
    assert!(index.text(57).is_err());
    assert!(index.vector(57).is_none());
}

#[test]
fn exact_search_equals_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.idx");
    let d = 16;
    let (v, _) = build(&path, d, &[(300, 11), (1, 12), (199, 13)]);
    let index = Index::open(&path, true).unwrap();
    for (qi, k) in [(0u64, 1usize), (1, 10), (2, 37), (3, 500), (4, 1000)] {
        let q = vectors(1, d, 1000 + qi);
        let got = index.search(&q, k).unwrap();
        let want = brute_force(&v, d, &q, k);
        assert_eq!(got.len(), want.len().min(500));
        for ((gi, gs), (wi, ws)) in got.iter().zip(&want) {
            assert!(
                (f64::from(*gs) - ws).abs() < 1e-5,
                "query {qi}: {gs} vs {ws}"
            );
            // Same ranking, except where two scores are within rounding of each other.
            if gi != wi {
                assert!(
                    (f64::from(*gs) - ws).abs() < 1e-5
                        && want.iter().any(|(i, s)| i == gi && (s - ws).abs() < 1e-5)
                );
            }
        }
    }
    // The zero rows all score 0 and tie: lower index first. (Each chunk has its
    // own zero rows, so they are read from the data, not from a formula.)
    let zero_rows: Vec<usize> = v
        .chunks_exact(d)
        .enumerate()
        .filter(|(_, row)| row.iter().all(|&x| x == 0.0))
        .map(|(i, _)| i)
        .collect();
    assert!(zero_rows.len() > 20);
    let all = index.search(&vectors(1, d, 7), 500).unwrap();
    let zeros: Vec<usize> = all
        .iter()
        .filter(|(_, s)| *s == 0.0)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(zeros, zero_rows);
    assert!(matches!(
        index.search(&[1.0; 3], 5),
        Err(IndexError::Invalid(_))
    ));
    assert!(index.search(&vectors(1, d, 8), 0).unwrap().is_empty());
}

#[test]
fn append_adds_segments_without_rewriting_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.idx");
    let d = 8;
    let (mut v, mut t) = build(&path, d, &[(40, 3)]);
    let before = std::fs::read(&path).unwrap();
    let first_segment_end = 64 + 40 * d * 4 + 41 * 8 + t.iter().map(String::len).sum::<usize>();

    let mut writer = IndexWriter::append(&path, &identity(d)).unwrap();
    assert_eq!(writer.count(), 40);
    let more_v = vectors(25, d, 4);
    let more_t = texts(25, 40);
    writer.add(&more_v, &more_t).unwrap();
    assert_eq!(writer.finish().unwrap(), 65);
    v.extend(more_v);
    t.extend(more_t);

    let after = std::fs::read(&path).unwrap();
    assert_eq!(
        after[..first_segment_end],
        before[..first_segment_end],
        "old segment rewritten"
    );
    let index = Index::open(&path, true).unwrap();
    assert_eq!(index.len(), 65);
    assert_eq!(index.segments(), 2);
    for (i, text) in t.iter().enumerate() {
        assert_eq!(index.text(i).unwrap(), text);
    }
    let q = vectors(1, d, 99);
    let got: Vec<usize> = index.search(&q, 65).unwrap().iter().map(|r| r.0).collect();
    let want: Vec<usize> = brute_force(&v, d, &q, 65).iter().map(|r| r.0).collect();
    assert_eq!(got, want);

    // Appending with other settings is refused and leaves the file as it was.
    let mut other = identity(d);
    other.pooling = "cls".into();
    let err = IndexWriter::append(&path, &other).err().unwrap();
    assert!(
        matches!(&err, IndexError::Mismatch(m) if m.contains("pooling: index last-avg vs now cls")),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), after);
}

#[test]
fn corruption_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.idx");
    let d = 8;
    build(&path, d, &[(30, 5), (30, 6)]);
    let good = std::fs::read(&path).unwrap();
    let bad_path = dir.path().join("bad.idx");
    let corrupt = |bytes: &[u8]| {
        std::fs::write(&bad_path, bytes).unwrap();
        Index::open(&bad_path, true).err()
    };
    // One flipped bit anywhere in a segment's vectors or texts, in the footer, or
    // in the magic; a truncated file; an empty file.
    for at in [
        8usize,
        64 + 100,
        64 + 30 * d * 4 + 3,
        good.len() / 2,
        good.len() - 40,
        good.len() - 1,
        0,
    ] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        let err = corrupt(&bytes).unwrap_or_else(|| panic!("flip at {at} not detected"));
        assert!(matches!(err, IndexError::Corrupt(_)), "{at}: {err}");
    }
    assert!(matches!(
        corrupt(&good[..good.len() - 5]),
        Some(IndexError::Corrupt(_))
    ));
    assert!(matches!(corrupt(&[]), Some(IndexError::Corrupt(_))));
    assert!(matches!(
        corrupt(b"hello world, not an index at all"),
        Some(IndexError::Corrupt(_))
    ));
    // Without verification the layout is still checked, and a flipped vector bit passes.
    let mut bytes = good.clone();
    bytes[64 + 100] ^= 0x10;
    std::fs::write(&bad_path, &bytes).unwrap();
    assert!(Index::open(&bad_path, false).is_ok());
    assert!(Index::open(&bad_path, true).is_err());
    // A damaged text offset in the middle of a segment: the cheap open does not read
    // it, but the text it bounds is an error (not a panic), and verification fails.
    let mut bytes = good.clone();
    let offsets = 64 + 30 * d * 4;
    bytes[offsets + 5 * 8..offsets + 6 * 8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&bad_path, &bytes).unwrap();
    let index = Index::open(&bad_path, false).unwrap();
    assert!(matches!(index.text(4), Err(IndexError::Corrupt(_))));
    assert!(matches!(index.text(5), Err(IndexError::Corrupt(_))));
    assert!(index.text(6).is_ok());
    assert!(matches!(index.verify(), Err(IndexError::Corrupt(_))));
}

#[test]
fn identity_mismatch_is_refused_with_every_difference() {
    let mine = identity(8);
    assert!(mine.check_matches(&mine.clone()).is_ok());
    // The same model files in another directory: same fingerprint, accepted.
    let moved = Identity {
        model: "copy-of-minilm@abc123".into(),
        ..mine.clone()
    };
    assert!(mine.check_matches(&moved).is_ok());
    let other = Identity {
        model: "bert-base@def456".into(),
        pooling: "cls".into(),
        calibrator: None,
        dimension: 768,
        precision: "int8".into(),
    };
    let message = mine.check_matches(&other).unwrap_err().to_string();
    for part in [
        "model: index all-MiniLM-L6-v2@abc123 vs now bert-base@def456",
        "pooling",
        "calibrator: index whiten(k=32) sha256:00ff vs now none",
        "dimension: index 8 vs now 768",
        "bertflow index build",
    ] {
        assert!(message.contains(part), "{part} missing in: {message}");
    }
    assert!(
        !message.contains("int8"),
        "precision is a note, not a mismatch"
    );
    assert_eq!(mine.notes(&mine), Vec::<String>::new());
    assert!(mine.notes(&other)[0].contains("fp32 vectors and queries are embedded in int8"));
}

#[test]
fn bad_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.idx");
    assert!(IndexWriter::create(&path, identity(0)).is_err());
    let mut w = IndexWriter::create(&path, identity(4)).unwrap();
    assert!(w.add(&[0.0; 7], &["a".into(), "b".into()]).is_err());
    assert!(w.add(&[f32::NAN, 0.0, 0.0, 0.0], &["a".into()]).is_err());
    assert!(matches!(
        Index::open(&dir.path().join("missing.idx"), true),
        Err(IndexError::Io(_))
    ));
}
