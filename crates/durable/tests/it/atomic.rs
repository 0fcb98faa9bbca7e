//! The atomic writer: new files, replacements, failures that leave the old
//! bytes, crashes at each named point (in a child process), and a real full
//! disk (a 64 KiB tmpfs, where this machine lets the test mount one).

use std::io::Write;
use std::path::Path;
use std::process::Command;

use bertflow_durable::testing::Tmpfs;
use bertflow_durable::{write, AtomicFile, CRASH_ENV, FAIL_ENV};

/// Files in `dir` other than `keep`: temporary leftovers.
fn others(dir: &Path, keep: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != keep)
        .collect()
}

#[test]
fn writes_and_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.bin");
    write(&p, b"first").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"first");
    write(&p, b"second, longer").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
    assert!(others(dir.path(), "out.bin").is_empty());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_ne!(
            mode & 0o044,
            0,
            "readable by others as File::create makes it: {mode:o}"
        );
    }
}

#[test]
fn dropped_without_commit_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("keep.txt");
    std::fs::write(&p, b"old").unwrap();
    let mut f = AtomicFile::create(&p).unwrap();
    f.write_all(b"new bytes that are never committed").unwrap();
    f.flush().unwrap();
    assert_eq!(
        others(dir.path(), "keep.txt").len(),
        1,
        "the temporary file exists"
    );
    drop(f);
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert!(others(dir.path(), "keep.txt").is_empty());
}

#[test]
fn missing_directory_and_permissions_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("gone").join("x.npy");
    let e = write(&p, b"x").unwrap_err().to_string();
    assert!(
        e.contains("x.npy") && e.contains("the directory does not exist"),
        "{e}"
    );
    #[cfg(unix)]
    if !is_root() {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let e = write(&ro.join("y"), b"x").unwrap_err().to_string();
        assert!(e.contains("permission denied"), "{e}");
    }
}

#[cfg(unix)]
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

/// Run the child half of `test` (a test of this module) in a new process of this
/// test binary.
fn child(test: &str, env: &[(&str, &str)], dir: &Path) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    let exact = format!("atomic::{test}");
    cmd.args([exact.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env("DURABLE_CHILD_DIR", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Child: replace `target.bin` (holding "old") by 3 MiB of new bytes.
#[test]
fn child_replace() {
    let Ok(dir) = std::env::var("DURABLE_CHILD_DIR") else {
        return;
    };
    let p = Path::new(&dir).join("target.bin");
    let written = AtomicFile::create(&p).and_then(|mut f| {
        for _ in 0..3 {
            f.write_all(&vec![7u8; 1 << 20])
                .map_err(bertflow_durable::write_error(&p))?;
        }
        f.commit()
    });
    if let Err(e) = written {
        eprintln!("{e}");
        std::process::exit(3);
    }
}

#[test]
fn a_crash_at_any_point_leaves_old_or_new() {
    for (point, new) in [
        ("atomic:mid-write", false),
        ("atomic:before-rename", false),
        ("atomic:after-rename", true),
        ("none", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("target.bin");
        std::fs::write(&p, b"old").unwrap();
        let out = child("child_replace", &[(CRASH_ENV, point)], dir.path());
        assert_eq!(out.status.success(), point == "none", "{point}: {out:?}");
        let bytes = std::fs::read(&p).unwrap();
        if new {
            assert_eq!(bytes.len(), 3 << 20, "{point}");
            assert!(bytes.iter().all(|&b| b == 7), "{point}");
        } else {
            assert_eq!(bytes, b"old", "{point}");
        }
    }
}

#[test]
fn an_injected_full_disk_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("target.bin");
    std::fs::write(&p, b"old").unwrap();
    let out = child(
        "child_replace",
        &[(FAIL_ENV, "target.bin@100000")],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("the disk is full") && msg.contains("target.bin"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert!(
        others(dir.path(), "target.bin").is_empty(),
        "no temporary file left"
    );
}

#[test]
fn a_real_full_disk_keeps_the_old_file() {
    let Some(fs) = Tmpfs::mount("1m") else {
        return;
    };
    let p = fs.path().join("target.bin");
    std::fs::write(&p, b"old").unwrap();
    let out = child("child_replace", &[], fs.path());
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("the disk is full"), "{msg}");
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert!(
        others(fs.path(), "target.bin").is_empty(),
        "no temporary file left"
    );
}
