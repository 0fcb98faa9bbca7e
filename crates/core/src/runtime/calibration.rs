//! Glue between the encoder and the calibrators: fitting with a progress bar,
//! loading a calibrator file and checking it against the model and pooling.
use crate::error::{Context, Result};
use crate::runtime::progress::Progress;
use bertflow_calib::{CalibSpec, Calibrator, CalibratorMeta, FitOptions, Fitted};
use bertflow_encoder::{Encoder, Pooling, TokenWeights};
use ndarray::{Array2, ArrayView2};
use std::path::{Path, PathBuf};

/// The model identity stored in calibrator files: directory name and fingerprint.
/// Two copies of the same model (equal fingerprints) are the same model.
pub fn model_identity(enc: &Encoder) -> String {
    let name = enc
        .files()
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| enc.model_id().to_string());
    format!("{name}@{}", enc.files_fingerprint())
}

/// Fit `spec` on `x`, showing a progress bar with the running loss for flows.
pub fn fit(
    spec: &CalibSpec,
    x: ArrayView2<f32>,
    label: &str,
    progress: &dyn Progress,
) -> Result<Fitted> {
    Ok(fit_checked(spec, x, label, progress)?.0)
}

/// [`fit`], with the warnings of a fit on too little data
/// ([`small_fit_warnings`], and a flow whose training NLL got worse: its last
/// epoch's mean above its first batch's), each also given to `progress`.
pub fn fit_checked(
    spec: &CalibSpec,
    x: ArrayView2<f32>,
    label: &str,
    progress: &dyn Progress,
) -> Result<(Fitted, Vec<String>)> {
    let pb = progress.bar(0, label, "steps");
    let losses = std::sync::Mutex::new((None::<f64>, None::<f64>));
    let mut opts = FitOptions::new().with_progress(|p| {
        let mut l = losses.lock().unwrap_or_else(|e| e.into_inner());
        if p.step == 1 {
            pb.set_length(p.total_steps as u64);
            l.0 = Some(p.loss);
        }
        l.1 = Some(p.running_loss);
        pb.set_position(p.step as u64);
        pb.set_message(format!("{label} nll {:.3}", p.running_loss));
    });
    let fitted = bertflow_calib::fit(spec, x, &mut opts)
        .with_context(|| format!("fitting {spec} ({label})"))?;
    drop(opts);
    pb.finish();
    let mut warnings = small_fit_warnings(spec, x.nrows(), x.ncols());
    if let (Some(a), Some(b)) = losses.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if b > a {
            warnings.push(format!(
                "the flow's NLL got worse while training ({a:.3} bits/dim on its first batch, \
                 {b:.3} on average over its last epoch): {} rows are too few for it; fit on \
                 more sentences (thousands), or use whiten",
                x.nrows()
            ));
        }
    }
    for w in &warnings {
        progress.note(&format!("warning: {w}"));
    }
    Ok((fitted, warnings))
}

/// Warnings for a fit of `spec` on `rows` rows of `dim` dimensions: fewer rows
/// than dimensions leave the covariance rank-deficient (whitening then keeps
/// fewer dimensions than it was given, and every data-fitted kind is
/// unreliable).
pub fn small_fit_warnings(spec: &CalibSpec, rows: usize, dim: usize) -> Vec<String> {
    // The identity needs no data; standardisation estimates each dimension
    // alone, and all-but-the-top only its few top directions.
    if matches!(spec.kind(), "none" | "sn" | "natsv" | "sn+natsv") || rows >= dim {
        return Vec::new();
    }
    vec![format!(
        "fitted on {rows} rows, fewer than their {dim} dimensions: the covariance has rank \
         below {dim}, so the calibrator is unreliable (whitening keeps at most {} \
         dimensions); fit on at least {dim} sentences, better several times that",
        rows.saturating_sub(1)
    )]
}

/// A calibrator read from a file, with its metadata.
pub struct LoadedCalibrator {
    pub fitted: Fitted,
    pub meta: CalibratorMeta,
    pub path: PathBuf,
    pub allow_mismatch: bool,
    /// Warnings already given (a check repeated for another front-end step
    /// does not repeat them).
    warned: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl LoadedCalibrator {
    pub fn open(path: &Path, allow_mismatch: bool) -> Result<Self> {
        let (fitted, meta) = bertflow_calib::load(path)
            .with_context(|| format!("cannot load calibrator {}", path.display()))?;
        Ok(Self {
            fitted,
            meta,
            path: path.to_path_buf(),
            allow_mismatch,
            warned: Default::default(),
        })
    }

    /// A calibrator already in memory (Python's `Calibrator`, bytes shipped to
    /// a Spark worker), checked like a file; `label` names it in messages.
    pub fn from_parts(
        fitted: Fitted,
        meta: CalibratorMeta,
        label: &str,
        allow_mismatch: bool,
    ) -> Self {
        Self {
            fitted,
            meta,
            path: PathBuf::from(label),
            allow_mismatch,
            warned: Default::default(),
        }
    }

    /// Error unless the file was fitted on this model, pooling, prompt and
    /// dimension (model, pooling and prompt may be overridden by
    /// --allow-mismatch; dimension never).
    pub fn check(
        &self,
        enc: &Encoder,
        pooling: &Pooling,
        prompt: Option<&crate::runtime::prompt::Prompt>,
        progress: &dyn Progress,
    ) -> Result<()> {
        let identity = model_identity(enc);
        // Equal fingerprints are the same model, wherever it lives.
        let model = if self.meta.model.rsplit('@').next() == Some(enc.files_fingerprint()) {
            self.meta.model.clone()
        } else {
            identity
        };
        let warnings = bertflow_calib::check_compatible_prompted(
            &self.meta,
            &model,
            &pooling.to_string(),
            prompt.map(|p| p.text.as_str()),
            crate::runtime::st_pipeline::dim(enc, pooling)?,
            self.allow_mismatch,
        )
        .with_context(|| {
            format!(
                "calibrator {} does not fit these embeddings",
                self.path.display()
            )
        })?;
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        for w in warnings {
            if warned.insert(w.clone()) {
                progress.note(&format!("warning: {w}"));
            }
        }
        Ok(())
    }

    /// The token weights the calibrator was fitted with (`None`: the plain
    /// mean): embeddings it calibrates must be pooled with the same weights.
    pub fn weights(&self) -> Result<Option<TokenWeights>> {
        self.meta
            .weighting
            .as_ref()
            .map(crate::runtime::weighting::Weighting::from_record)
            .transpose()
            .with_context(|| format!("calibrator {}", self.path.display()))
    }

    /// The weights to embed with for this calibrator when the user asked for
    /// `requested`: the file's own weights; an error when the user asked for
    /// another weighting than the file records.
    pub fn weights_for(
        &self,
        requested: &crate::runtime::weighting::Weighting,
    ) -> Result<Option<TokenWeights>> {
        requested.adopt(
            self.weights()?,
            crate::runtime::weighting::Adopt::Unless(&self.path),
        )
    }

    pub fn apply(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.fitted.transform(x)?)
    }

    pub fn describe(&self) -> String {
        match &self.meta.quantizer {
            Some(q) => format!("{}, then {}", self.fitted.describe(), q.describe()),
            None => self.fitted.describe(),
        }
    }
}
