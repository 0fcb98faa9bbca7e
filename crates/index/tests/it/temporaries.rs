//! `index build` removes the temporary files of earlier builds that were
//! killed, and only those: one locked by a live writer stays.

use crate::common;

use common::build;

#[test]
fn a_build_removes_stale_temporaries_but_not_a_live_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.bfi");
    let stale = dir.path().join(".c.bfi.AbC123.tmp");
    let live = dir.path().join(".c.bfi.XyZ789.tmp");
    let other = dir.path().join(".other.bfi.AbC123.tmp");
    for p in [&stale, &live, &other] {
        std::fs::write(p, vec![7u8; 3_000_000]).unwrap();
    }
    let held = std::fs::File::open(&live).unwrap();
    held.lock().unwrap();

    build(&path, 8, &[(50, 1)]);
    assert!(!stale.exists(), "the killed build's temporary file is left");
    assert!(live.exists(), "a live writer's temporary file was removed");
    assert!(other.exists(), "another index's temporary file was removed");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    drop(held);
}
