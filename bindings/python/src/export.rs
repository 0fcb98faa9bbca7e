//! `bertflow.st.export`: delegates to `bertflow_core::export`.

use std::path::PathBuf;

use bertflow_core::encoder::Pooling;
use bertflow_core::export::{export_st, ExportConfig};
use bertflow_core::progress::silent;
use bertflow_core::EmbedderConfig;
use pyo3::prelude::*;

use crate::errors;

/// Write a sentence-transformers directory; returns (module types, dimension,
/// files, whether loading it needs bertflow).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (model, pooling, output, calibrator=None, normalize=false, max_len=None, allow_mismatch=false))]
fn export_st_dir(
    py: Python<'_>,
    model: String,
    pooling: Option<&str>,
    output: PathBuf,
    calibrator: Option<PathBuf>,
    normalize: bool,
    max_len: Option<usize>,
    allow_mismatch: bool,
) -> PyResult<(Vec<String>, usize, usize, bool)> {
    let pooling: Option<Pooling> = pooling
        .map(str::parse)
        .transpose()
        .map_err(errors::encoder)?;
    let config = EmbedderConfig {
        model,
        runtime: bertflow_core::RuntimeConfig {
            max_len,
            ..Default::default()
        },
        no_cache: true,
        ..Default::default()
    };
    let cfg = ExportConfig {
        pooling,
        calibrator,
        allow_mismatch,
        normalize,
        output,
    };
    let exported = py
        .detach(|| {
            let embedder = config.load(silent())?;
            export_st(&embedder.encoder, &cfg)
        })
        .map_err(errors::core)?;
    Ok((
        exported.modules,
        exported.dimension,
        exported.files,
        exported.needs_bertflow,
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(export_st_dir, m)?)?;
    m.add("ST_MODULE", bertflow_core::export::BERTFLOW_MODULE)
}
