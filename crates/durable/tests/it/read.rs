//! Reading untrusted files: FIFOs (no writer: must not block), devices and
//! symlinks to them, directories and files over the limit are refused with an
//! error naming the path and the reason; a regular file, directly or through a
//! symlink, is read.

use bertflow_durable::{open_regular, read_regular, read_regular_string, ReadError};
use std::path::Path;

fn refused(path: &Path, limit: u64) -> String {
    match read_regular(path, limit) {
        Err(e) => {
            assert_eq!(e.path(), path);
            e.to_string()
        }
        Ok(b) => panic!("{}: read {} bytes", path.display(), b.len()),
    }
}

#[cfg(unix)]
#[test]
fn fifos_devices_and_symlinks_to_them_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("side.hnsw.json");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let e = refused(&fifo, 1 << 20);
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    let zero = dir.path().join("zero.links");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let e = refused(&zero, u64::MAX);
    assert!(e.contains("not a regular file (a character device)"), "{e}");
    let to_fifo = dir.path().join("to-fifo");
    std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
    assert!(refused(&to_fifo, 10).contains("a FIFO"));
    assert!(refused(dir.path(), 10).contains("a directory"));
    assert!(matches!(
        open_regular(&fifo, 10),
        Err(ReadError::NotRegular { .. })
    ));
}

#[test]
fn a_file_over_the_limit_is_refused_and_one_within_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("kernels.json");
    std::fs::write(&p, b"0123456789").unwrap();
    let e = refused(&p, 9);
    assert!(e.contains("10 bytes, more than the limit of 9"), "{e}");
    assert_eq!(read_regular(&p, 10).unwrap(), b"0123456789");
    assert_eq!(read_regular_string(&p, 10).unwrap(), "0123456789");
    let (_, len) = open_regular(&p, 10).unwrap();
    assert_eq!(len, 10);
    #[cfg(unix)]
    {
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert_eq!(read_regular(&link, 10).unwrap(), b"0123456789");
    }
    let missing = dir.path().join("absent");
    let e = read_regular(&missing, 10).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("absent"), "{e}");
}
