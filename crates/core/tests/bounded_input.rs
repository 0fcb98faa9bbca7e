//! Readers of input files refuse what is not a regular file (without
//! blocking on a FIFO or reading a device forever) and lines past the limit.
use bertflow_core::io::{read_regular_file, read_sentences, EmptyLines, MAX_LINE_BYTES};
use std::path::Path;

fn refused(path: &Path) -> String {
    match read_sentences(path, false, EmptyLines::Error) {
        Ok(_) => panic!("{} should be refused", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn devices_fifos_and_directories_are_refused() {
    assert!(refused(Path::new("/dev/zero")).contains("not a regular file"));
    let dir = tempfile::tempdir().unwrap();
    assert!(refused(dir.path()).contains("not a regular file"));
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    assert!(refused(&fifo).contains("not a regular file"));
    let e = read_regular_file(Path::new("/dev/zero"), 1 << 20, "API key file").unwrap_err();
    assert!(
        e.to_string().contains("API key file is not a regular file"),
        "{e}"
    );
}

#[test]
fn a_file_over_the_limit_and_a_line_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys");
    std::fs::write(&path, vec![b'k'; 2000]).unwrap();
    let e = read_regular_file(&path, 1000, "API key file").unwrap_err();
    assert!(e.to_string().contains("more than the limit of 1000"), "{e}");
    assert_eq!(read_regular_file(&path, 2000, "x").unwrap().len(), 2000);

    let long = dir.path().join("long.txt");
    let mut text = b"short line\n".to_vec();
    text.extend(std::iter::repeat_n(b'a', MAX_LINE_BYTES + 1));
    text.push(b'\n');
    std::fs::write(&long, &text).unwrap();
    let e = refused(&long);
    assert!(e.contains("long.txt:2") && e.contains("limit"), "{e}");
}
