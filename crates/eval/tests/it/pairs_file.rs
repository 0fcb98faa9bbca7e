//! User pair files: `score<TAB>sentence1<TAB>sentence2`.

use std::fs;
use std::path::PathBuf;

use bertflow_eval::{load_pairs_file, DataError, Pair};
use tempfile::TempDir;

fn write(dir: &TempDir, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    fs::write(&p, content).unwrap();
    p
}

#[test]
fn good_file_with_header_blank_lines_and_crlf() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "my-pairs.tsv",
        b"score\tsentence1\tsentence2\r\n4.5\tA cat  sits.\tA cat is sitting. \r\n\n  \n0\t\"Quoted\" text\tOther\n",
    );
    let set = load_pairs_file(&p).unwrap();
    assert_eq!(set.name, "my-pairs");
    assert_eq!(set.subsets.len(), 1);
    assert_eq!(set.subsets[0].name, "my-pairs");
    assert_eq!(
        set.subsets[0].pairs,
        [
            Pair {
                s1: "A cat sits.".into(),
                s2: "A cat is sitting.".into(),
                score: 4.5
            },
            Pair {
                s1: "\"Quoted\" text".into(),
                s2: "Other".into(),
                score: 0.0
            },
        ]
    );
}

#[test]
fn header_is_optional() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "noheader.txt", b"1\ta\tb\n2e0\tc\td");
    let set = load_pairs_file(&p).unwrap();
    assert_eq!(set.num_pairs(), 2);
    assert_eq!(set.subsets[0].pairs[1].score, 2.0);
}

#[test]
fn malformed_lines_name_file_and_line() {
    let cases: [(&str, &str); 7] = [
        ("too-few", "1\ta\n"),
        ("too-many", "1\ta\tb\tc\n"),
        ("bad-score", "1\ta\tb\nhigh\tc\td\n"),
        ("nan-score", "NaN\ta\tb\n"),
        ("inf-score", "1\ta\tb\ninf\tc\td\n"),
        ("empty-s1", "1\t \tb\n"),
        ("empty-s2", "1\ta\t\n"),
    ];
    // Each file has a header and a blank line first, so the bad line is line 3 or 4.
    for (name, body) in cases {
        let dir = tempfile::tempdir().unwrap();
        let content = format!("score\ts1\ts2\n\n{body}");
        let p = write(&dir, &format!("{name}.tsv"), content.as_bytes());
        let err = load_pairs_file(&p).unwrap_err();
        let line = 2 + body.lines().count();
        assert!(
            matches!(err, DataError::Malformed { line: l, .. } if l == line),
            "{name}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("{name}.tsv:{line}:")),
            "{name}: {msg}"
        );
    }
}

#[test]
fn invalid_utf8_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "latin1.tsv", b"1\ta\tb\n2\tcaf\xe9\td\n");
    let err = load_pairs_file(&p).unwrap_err();
    assert!(
        matches!(err, DataError::InvalidUtf8 { line: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("latin1.tsv:2:"), "{err}");
}

#[test]
fn empty_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [
        ("empty.tsv", &b""[..]),
        ("blank.tsv", b"\n \n\r\n"),
        ("header-only.tsv", b"score\ts1\ts2\n"),
    ] {
        let p = write(&dir, name, content);
        let err = load_pairs_file(&p).unwrap_err();
        assert!(matches!(err, DataError::Empty { .. }), "{name}: {err}");
        assert!(err.to_string().contains(name), "{err}");
    }
    let err = load_pairs_file(&dir.path().join("missing.tsv")).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }) && err.to_string().contains("missing.tsv"));
}
