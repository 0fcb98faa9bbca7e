//! `--pooling st` with bertflow's own module: the encoder runs a
//! sentence-transformers directory's pipeline ([`bertflow_encoder::st`]); the
//! calibrator file of bertflow's module (`bertflow.st.Calibrator`, e.g.
//! `2_Bertflow/calibrator.safetensors`, written by `bertflow export`) is read
//! here, since the encoder crate does not read calibrator files. Every front end
//! resolves a pooling through [`source`], so `st` gets its calibrator wherever
//! it is used, and asks [`dim`] for the width of the vectors a pooling makes.
use std::path::Path;
use std::sync::Arc;

use bertflow_calib::{Calibrator, Fitted};
use bertflow_encoder::st::VectorMap;
use bertflow_encoder::{Encoder, PoolSource, Pooling};
use ndarray::{Array2, ArrayView2};

use crate::error::Result;

/// A calibrator file applied inside the pipeline. The file's model and pooling
/// identity is not checked: the directory itself says where it applies.
struct FileCalibrator(Fitted);

impl VectorMap for FileCalibrator {
    fn input_dim(&self) -> usize {
        self.0.input_dim()
    }
    fn output_dim(&self) -> usize {
        self.0.output_dim()
    }
    fn apply(&self, x: ArrayView2<f32>) -> std::result::Result<Array2<f32>, String> {
        self.0.transform(x).map_err(|e| e.to_string())
    }
}

fn load(path: &Path) -> std::result::Result<Arc<dyn VectorMap>, String> {
    let (fitted, _) = bertflow_calib::load(path).map_err(|e| e.to_string())?;
    Ok(Arc::new(FileCalibrator(fitted)))
}

/// What `pooling` reads from `enc` ([`Encoder::source`]), with bertflow's
/// module's calibrator loaded for `st`.
pub fn source(enc: &Encoder, pooling: &Pooling) -> Result<PoolSource> {
    Ok(enc.source_with(pooling, Some(&load))?)
}

/// The width of the vectors `pooling` makes from `enc` (the hidden size, or
/// for `st` what the directory's pipeline outputs); an error where the pooling
/// does not apply to the model, as [`source`].
pub fn dim(enc: &Encoder, pooling: &Pooling) -> Result<usize> {
    Ok(source(enc, pooling)?.dim(enc.dim()))
}
