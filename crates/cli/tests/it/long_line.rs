//! One 20 MB line to `encode` costs little: the text is cut by characters
//! before tokenising (max_len x 32), so memory stays far below what
//! tokenising the whole line takes (2 GB before the cut): the child's own peak
//! (`common::peak_mb`).
use crate::common;
use common::peak_mb;

#[test]
fn a_20_mb_line_encodes_within_a_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("long.txt");
    let words = [
        "a", "man", "is", "playing", "the", "guitar", "while", "singing",
    ];
    let mut line = String::with_capacity(21 << 20);
    let mut i = 0;
    while line.len() < 20 << 20 {
        line.push_str(words[i % words.len()]);
        line.push(' ');
        i += 1;
    }
    std::fs::write(&input, format!("{line}\nA short sentence.\n")).unwrap();
    let out = dir.path().join("out.jsonl");
    let peak_mb = peak_mb(
        &[
            "encode",
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--no-cache",
        ],
        dir.path(),
    );
    let rows = std::fs::read_to_string(&out).unwrap();
    assert_eq!(rows.lines().count(), 2);
    // The model (90 MB), the line held a few times over (the input, its row
    // in the JSONL output): far below the 2 GB of tokenising it whole.
    assert!(
        peak_mb < 400.0,
        "peak resident memory of encode was {peak_mb:.1} MB for a 20 MB line"
    );
}
