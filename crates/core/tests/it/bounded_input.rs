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

#[cfg(unix)]
#[test]
fn vector_files_that_are_fifos_or_devices_are_refused_without_blocking() {
    use bertflow_core::matrix_file::MatrixReader;
    let dir = tempfile::tempdir().unwrap();
    for name in ["v.npy", "v.safetensors"] {
        let fifo = dir.path().join(name);
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = MatrixReader::open(&fifo).err().unwrap().to_string();
        assert!(
            e.contains("vector file is not a regular file (a FIFO)"),
            "{e}"
        );
        let e = bertflow_core::indexing::declared_settings(&fifo)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(name == "v.npy" || e.contains("a FIFO"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &fifo).unwrap();
        let e = MatrixReader::open(&fifo).err().unwrap().to_string();
        assert!(e.contains("not a regular file (a character device)"), "{e}");
    }
    // A JSONL input is read through the same check.
    let fifo = dir.path().join("v.jsonl");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let e = read_regular_file(&fifo, 1 << 20, "input file").unwrap_err();
    assert!(e.to_string().contains("a FIFO"), "{e}");
}
