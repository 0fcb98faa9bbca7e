//! A damaged trailer never drops committed sentences: 2000 sentences built,
//! 52 added, then every byte of the last trailer flipped in turn. The index
//! opens in the state before (and says so), `index add` refuses the file,
//! and `repair` rewrites the trailer, giving back the exact file. A damaged
//! footer under an intact trailer is refused, not cut; an interrupted append
//! (no trailer) is cut. And a file changed under a reader is noticed.

use crate::common;

use bertflow_index::format::TRAILER_LEN;
use bertflow_index::{repair, Index, IndexError, IndexWriter, Repaired};
use common::{build, identity, texts, vectors};

const D: usize = 8;

/// An index of 2000 sentences plus an `index add` of 52; returns the file's
/// bytes before and after the add.
fn built(path: &std::path::Path) -> (Vec<u8>, Vec<u8>) {
    build(path, D, &[(1000, 1), (1000, 2)]);
    let before = std::fs::read(path).unwrap();
    let mut writer = IndexWriter::append(path, &identity(D)).unwrap();
    writer.add(&vectors(52, D, 3), &texts(52, 2000)).unwrap();
    assert_eq!(writer.finish().unwrap(), 2052);
    (before, std::fs::read(path).unwrap())
}

#[test]
fn every_flipped_trailer_byte_is_reported_and_repaired_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bfi");
    let (_, good) = built(&path);
    let len = good.len();
    for k in 0..TRAILER_LEN {
        let mut bad = good.clone();
        bad[len - TRAILER_LEN + k] ^= 0x5a;
        std::fs::write(&path, &bad).unwrap();

        let opened = Index::open(&path, true).unwrap();
        assert_eq!(opened.len(), 2000, "byte {k}");
        let note = opened.recovered().expect("the ignored bytes are reported");
        assert!(note.contains("damaged trailer"), "{note}");
        drop(opened);

        let add = IndexWriter::append(&path, &identity(D)).err();
        assert!(
            matches!(&add, Some(IndexError::Corrupt(m)) if m.contains("--repair")),
            "byte {k}: {add:?}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bad,
            "byte {k}: add changed the file"
        );

        assert_eq!(
            repair(&path, None).unwrap(),
            Repaired::Trailer {
                sentences: 2052,
                recovered: 52
            },
            "byte {k}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), good, "byte {k}");
        let opened = Index::open(&path, true).unwrap();
        assert_eq!((opened.len(), opened.recovered()), (2052, None));
        assert_eq!(opened.text(2051).unwrap(), texts(52, 2000)[51]);
    }
}

#[test]
fn a_damaged_footer_under_an_intact_trailer_is_refused_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bfi");
    let (_, good) = built(&path);
    let mut bad = good.clone();
    // A byte of the last footer's JSON (just before the trailer).
    bad[good.len() - TRAILER_LEN - 3] ^= 0x01;
    std::fs::write(&path, &bad).unwrap();
    assert_eq!(Index::open(&path, false).unwrap().len(), 2000);
    let refused = repair(&path, None);
    assert!(
        matches!(&refused, Err(IndexError::Corrupt(m)) if m.contains("not removed")),
        "{refused:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bad);
    assert!(IndexWriter::append(&path, &identity(D)).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), bad);
}

#[test]
fn an_interrupted_append_without_a_trailer_is_cut_back_to_the_old_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bfi");
    let (before, good) = built(&path);
    // Every cut between the old state's end and the new trailer: the new
    // segment partly or wholly written, the footer partly or wholly written.
    let step = (good.len() - TRAILER_LEN - before.len()) / 7;
    for cut in (before.len() + 1..good.len() - TRAILER_LEN + 1).step_by(step.max(1)) {
        std::fs::write(&path, &good[..cut]).unwrap();
        assert_eq!(
            repair(&path, None).unwrap(),
            Repaired::Truncated {
                sentences: 2000,
                bytes: (cut - before.len()) as u64
            },
            "cut at {cut}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "cut at {cut}");
    }
}

#[test]
fn a_file_cut_rewritten_or_replaced_under_a_reader_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bfi");
    let (_, good) = built(&path);
    let opened = Index::open(&path, false).unwrap();
    opened.unchanged(&path).unwrap();

    // Cut in place.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(100_000)
        .unwrap();
    let changed = opened.unchanged(&path);
    assert!(
        matches!(&changed, Err(IndexError::Changed(m)) if m.contains("cut to 100000 bytes")),
        "{changed:?}"
    );
    drop(opened);

    // Replaced by another file (rename over it).
    std::fs::write(&path, &good).unwrap();
    let opened = Index::open(&path, false).unwrap();
    let other = dir.path().join("other.bfi");
    std::fs::write(&other, &good).unwrap();
    std::fs::rename(&other, &path).unwrap();
    assert!(
        matches!(opened.unchanged(&path), Err(IndexError::Changed(m)) if m.contains("another file"))
    );
    drop(opened);

    // Appended to by `index add`: modified.
    let opened = Index::open(&path, false).unwrap();
    let mut writer = IndexWriter::append(&path, &identity(D)).unwrap();
    writer.add(&vectors(3, D, 9), &texts(3, 2052)).unwrap();
    writer.finish().unwrap();
    assert!(
        matches!(opened.unchanged(&path), Err(IndexError::Changed(m)) if m.contains("modified"))
    );
}
