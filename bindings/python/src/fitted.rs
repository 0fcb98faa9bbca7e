//! `Fitted`, a fitted calibrator with its file metadata: the type the
//! calibrator functions (`calib`), the moment statistics (`moments`) and the
//! encoder (`use_weights_of`) share, in a module of its own so that none of
//! them imports another for it.

use bertflow_core::calib::{CalibSpec, CalibratorMeta, Fitted};
use pyo3::prelude::*;

/// A fitted calibrator with its file metadata (see `bertflow.Calibrator`).
#[pyclass(module = "bertflow._bertflow", name = "Fitted", frozen)]
pub struct PyFitted {
    pub(crate) fitted: Fitted,
    pub(crate) meta: CalibratorMeta,
}

impl PyFitted {
    /// The token weighting recorded in the file, if any.
    pub(crate) fn weighting_meta(&self) -> Option<&bertflow_core::calib::WeightingMeta> {
        self.meta.weighting.as_ref()
    }

    /// A fitted calibrator of external embeddings (`n` rows of `dim`
    /// columns, input `fingerprint`), as `fit` records it.
    pub(crate) fn external(
        fitted: Fitted,
        spec: &CalibSpec,
        (n, dim): (usize, usize),
        fingerprint: String,
        label: Option<String>,
    ) -> Self {
        let mut meta = CalibratorMeta::external(label, fingerprint, dim, n);
        if let Some(seed) = spec.seed() {
            meta = meta.with_seed(seed);
        }
        PyFitted { fitted, meta }
    }
}
