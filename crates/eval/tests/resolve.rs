//! `resolve_data_dir`. The only test in this binary, since it changes the environment.

use std::path::{Path, PathBuf};

use bertflow_eval::resolve_data_dir;

#[test]
fn flag_then_env_then_default() {
    let saved = std::env::var_os("BERTFLOW_DATA");
    std::env::set_var("BERTFLOW_DATA", "/from/env");
    assert_eq!(
        resolve_data_dir(Some(Path::new("/flag"))),
        PathBuf::from("/flag")
    );
    assert_eq!(resolve_data_dir(None), PathBuf::from("/from/env"));
    std::env::set_var("BERTFLOW_DATA", "");
    assert_eq!(resolve_data_dir(None), PathBuf::from("../shared/data/sts"));
    std::env::remove_var("BERTFLOW_DATA");
    assert_eq!(resolve_data_dir(None), PathBuf::from("../shared/data/sts"));
    if let Some(v) = saved {
        std::env::set_var("BERTFLOW_DATA", v);
    }
}
