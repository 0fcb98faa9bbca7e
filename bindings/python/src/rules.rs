//! Core's rules that the pure-Python parts of the package (the Spark job)
//! apply to their own data: they call these instead of restating them.

use crate::errors;
use bertflow_core::io::{keep_rows as core_keep_rows, EmptyLines};
use pyo3::prelude::*;

/// Which of `texts` to keep under the empty-text rule `empty` (`error`,
/// `skip`, `keep`): core's `io::keep_rows`. `None` (a null row) is kept. With
/// `error`, the first empty text raises a `ValueError` naming it as
/// `describe(i)` returns.
#[pyfunction]
fn keep_rows(
    texts: Vec<Option<String>>,
    empty: &str,
    describe: &Bound<'_, PyAny>,
) -> PyResult<Vec<bool>> {
    let rule: EmptyLines = empty.parse().map_err(errors::core)?;
    let refs: Vec<Option<&str>> = texts.iter().map(|t| t.as_deref()).collect();
    let label = |i: usize| -> String {
        describe
            .call1((i,))
            .and_then(|v| v.extract::<String>())
            .unwrap_or_else(|_| format!("row {i}"))
    };
    core_keep_rows(&refs, rule, label).map_err(errors::core)
}

/// Whether `path` names JSON lines by its extension (core's `io::is_jsonl_path`).
#[pyfunction]
fn is_jsonl_path(path: std::path::PathBuf) -> bool {
    bertflow_core::io::is_jsonl_path(&path)
}

/// Core's check of a sample size (`fitting::check_sample`).
#[pyfunction]
fn check_sample(n: usize) -> PyResult<()> {
    bertflow_core::fitting::check_sample(Some(n)).map_err(errors::core)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(keep_rows, m)?)?;
    m.add_function(wrap_pyfunction!(check_sample, m)?)?;
    m.add_function(wrap_pyfunction!(is_jsonl_path, m)?)?;
    m.add("EMPTY_RULES", EmptyLines::NAMES.to_vec())?;
    Ok(())
}
