//! # bertflow-calib
//!
//! Unsupervised calibrators for sentence embeddings: fitted on an `n x d`
//! matrix of embeddings (one row per sentence), they map each embedding to
//! a space where cosine similarity follows meaning better.
//!
//! | spec           | calibrator                                                        |
//! |----------------|-------------------------------------------------------------------|
//! | `none`         | identity                                                          |
//! | `sn`           | per-dimension standardisation                                     |
//! | `whiten[:k=N]` | BERT-whitening (Su et al. 2021)                                   |
//! | `natsv:k=N`    | all-but-the-top (Mu & Viswanath 2018)                             |
//! | `sn+natsv:k=N` | standardisation, then all-but-the-top                             |
//! | `flow[:...]`   | BERT-flow (Li et al. 2020), see [`FlowConfig`] and [`spec`]       |
//! | `softwhiten[:alpha=A,shrink=L,drop=K,blend=B]` | soft whitening with shrinkage, see [`SoftWhitening`] |
//! | `pca[:k=N,centre=BOOL]` | rotation onto the principal axes, see [`Pca`]          |
//! | `auto`         | decides from the fit data alone, see [`Auto`] and [`advise()`]    |
//!
//! The kinds, their parameters, defaults and ranges are written once, in
//! the [`registry`] (its docs say how to add a kind); `bertflow kinds`
//! prints it.
//!
//! ```no_run
//! use bertflow_calib::{check_compatible, fit, load, CalibSpec, Calibrator, CalibratorMeta, FitOptions};
//! # fn demo(x: ndarray::Array2<f32>) -> Result<(), Box<dyn std::error::Error>> {
//! let spec: CalibSpec = "flow:epochs=1,seed=42".parse()?;
//! let mut opts = FitOptions::new().with_progress(|p| {
//!     eprintln!("{}/{} loss {:.3}", p.step, p.total_steps, p.running_loss)
//! });
//! let fitted = fit(&spec, x.view(), &mut opts)?;
//! let meta = CalibratorMeta::new("all-MiniLM-L6-v2", "mean", x.ncols(), x.nrows()).with_seed(42);
//! fitted.save("flow.safetensors", &meta)?;
//! let (again, meta) = load("flow.safetensors")?;
//! check_compatible(&meta, "all-MiniLM-L6-v2", "mean", x.ncols(), false)?;
//! let y = again.transform(x.view())?;
//! # Ok(()) }
//! ```
//!
//! Zero variance and rank deficiency are handled without inf/NaN: see
//! [`StandardNorm`], [`Whitening`], [`Natsv`] and [`Flow`]. All statistics
//! are computed in f64.
//!
//! Every kind but the flow depends on the data only through its count, mean
//! and co-moment matrix: [`MomentStats`] accumulates them over a stream of
//! batches with bounded memory, merges statistics computed apart (Chan,
//! Golub & LeVeque) and serialises them; [`fit_from_moments`] fits from them
//! what [`fit`] fits on the rows.

#![warn(missing_docs)]

mod advise;
mod affine;
mod auto;
mod compat;
pub mod error;
mod fit;
mod flow;
mod io;
mod linear;
mod moments;
mod pca;
mod projection;
pub mod quantize;
mod real;
pub mod registry;
mod softwhiten;
pub mod spec;
mod stats;
mod tensors;

use std::fmt;
use std::path::Path;

use ndarray::{Array2, ArrayView2};
use serde::{Deserialize, Serialize};

pub use advise::{advise, decide, rule, stats, Advice, AutoStats, Decision};
pub use affine::Affine;
pub use auto::{Auto, AUTO_RULE};
pub use compat::{check_compatible, check_compatible_prompted};
pub use error::{CalibError, Result};
pub use fit::{fit, fit_from_moments};
pub use flow::Flow;
pub use io::{
    CalibratorMeta, ExternalInput, WeightingMeta, EXTERNAL_POOLING, FORMAT_VERSION, METADATA_KEY,
    QUANTIZED_FORMAT_VERSION, WEIGHTING_TENSOR,
};
pub use linear::{Identity, Natsv, SnNatsv, StandardNorm, Whitening};
pub use moments::{MomentStats, MOMENT_BLOCK};
pub use pca::Pca;
pub use projection::Projection;
pub use quantize::{Codes, QuantKind, QuantSpec, Quantizer, Ranges};
pub use registry::{Kind, Param, ParamType, Value, KINDS};
pub use softwhiten::SoftWhitening;
pub use spec::{CalibSpec, Coupling, FlowConfig, Permutation, SoftParams};
pub use stats::ZERO_VARIANCE_RTOL;

/// A fitted calibrator.
pub trait Calibrator {
    /// Number of columns `transform` expects.
    fn input_dim(&self) -> usize;
    /// Number of columns `transform` returns.
    fn output_dim(&self) -> usize;
    /// Maps each row (an embedding) to its calibrated version. Errors on a
    /// wrong column count or a non-finite input value.
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>>;
    /// One line for tables and logs.
    fn describe(&self) -> String;
}

/// Every fitted kind, as data: its serde form (internally tagged by `kind`)
/// holds the kind, hyper-parameters and dimensions; the numeric parameters
/// travel as tensors in the file written by [`Fitted::save`]. A value
/// deserialized from the JSON alone has no parameters and its `transform`
/// returns an error; use [`load`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Fitted {
    /// `none`
    #[serde(rename = "none")]
    None(Identity),
    /// `sn`
    #[serde(rename = "sn")]
    Sn(StandardNorm),
    /// `whiten`
    #[serde(rename = "whiten")]
    Whiten(Whitening),
    /// `natsv`
    #[serde(rename = "natsv")]
    Natsv(Natsv),
    /// `sn+natsv`
    #[serde(rename = "sn+natsv")]
    SnNatsv(SnNatsv),
    /// `flow`
    #[serde(rename = "flow")]
    Flow(Flow),
    /// `softwhiten`
    #[serde(rename = "softwhiten")]
    SoftWhiten(SoftWhitening),
    /// `auto`
    #[serde(rename = "auto")]
    Auto(Auto),
    /// `pca`
    #[serde(rename = "pca")]
    Pca(Pca),
}

impl Fitted {
    fn inner(&self) -> &dyn Calibrator {
        match self {
            Fitted::None(c) => c,
            Fitted::Sn(c) => c,
            Fitted::Whiten(c) => c,
            Fitted::Natsv(c) => c,
            Fitted::SnNatsv(c) => c,
            Fitted::Flow(c) => c,
            Fitted::SoftWhiten(c) => c,
            Fitted::Auto(c) => c,
            Fitted::Pca(c) => c,
        }
    }

    /// The kind's name (a [registry](crate::registry) name: `"none"`,
    /// `"sn"`, `"whiten"`, ...).
    pub fn kind(&self) -> &'static str {
        self.spec().kind()
    }

    /// The spec this calibrator was fitted from.
    pub fn spec(&self) -> CalibSpec {
        let k = |k: usize| [("k", Value::Int(k as u64))];
        match self {
            Fitted::None(_) => CalibSpec::fitted("none", &[]),
            Fitted::Sn(_) => CalibSpec::fitted("sn", &[]),
            Fitted::Whiten(w) => match w.k {
                Some(n) => CalibSpec::fitted("whiten", &k(n)),
                None => CalibSpec::fitted("whiten", &[]),
            },
            Fitted::Natsv(n) => CalibSpec::fitted("natsv", &k(n.k)),
            Fitted::SnNatsv(s) => CalibSpec::fitted("sn+natsv", &k(s.natsv.k)),
            Fitted::Flow(f) => CalibSpec::fitted("flow", &f.config.values()),
            Fitted::SoftWhiten(s) => CalibSpec::fitted("softwhiten", &s.params.values()),
            Fitted::Auto(_) => CalibSpec::fitted("auto", &[]),
            Fitted::Pca(p) => {
                let centre = (
                    "centre",
                    Value::Choice(if p.centre { "true" } else { "false" }),
                );
                match p.k {
                    Some(n) => CalibSpec::fitted("pca", &[k(n)[0], centre]),
                    None => CalibSpec::fitted("pca", &[centre]),
                }
            }
        }
    }

    /// The flow, if this is one (for `inverse`, `log_prob`, ...).
    pub fn as_flow(&self) -> Option<&Flow> {
        match self {
            Fitted::Flow(f) => Some(f),
            _ => None,
        }
    }

    /// Writes one `.safetensors` file: parameters as tensors, kind,
    /// hyper-parameters and `meta` as a JSON header in `__metadata__`.
    /// `meta.input_dim` must match the calibrator.
    pub fn save(&self, path: impl AsRef<Path>, meta: &CalibratorMeta) -> Result<()> {
        io::save(self, path, meta)
    }

    /// The bytes [`Fitted::save`] writes.
    pub fn to_bytes(&self, meta: &CalibratorMeta) -> Result<Vec<u8>> {
        io::to_bytes(self, meta)
    }

    /// Parses the bytes [`Fitted::to_bytes`] writes (a calibrator file's
    /// content), with the same checks as [`Fitted::load`].
    pub fn from_bytes(bytes: &[u8]) -> Result<(Fitted, CalibratorMeta)> {
        io::from_bytes(bytes, Path::new("<bytes>"))
    }

    /// Reads a file written by [`Fitted::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<(Fitted, CalibratorMeta)> {
        io::load(path)
    }

    pub(crate) fn write_tensors(&self, w: &mut tensors::TensorWriter) {
        match self {
            Fitted::None(_) => {}
            Fitted::Sn(s) => s.write_tensors(w, ""),
            Fitted::Whiten(s) => s.write_tensors(w),
            Fitted::Natsv(s) => s.write_tensors(w, ""),
            Fitted::SnNatsv(s) => {
                s.sn.write_tensors(w, "sn.");
                s.natsv.write_tensors(w, "natsv.");
            }
            Fitted::Flow(f) => f.write_tensors(w),
            Fitted::SoftWhiten(s) => s.write_tensors(w, ""),
            Fitted::Auto(a) => a.write_tensors(w),
            Fitted::Pca(p) => p.write_tensors(w),
        }
    }

    pub(crate) fn read_tensors(&mut self, r: &mut tensors::TensorReader) -> Result<()> {
        match self {
            Fitted::None(_) => Ok(()),
            Fitted::Sn(s) => s.read_tensors(r, ""),
            Fitted::Whiten(s) => s.read_tensors(r),
            Fitted::Natsv(s) => s.read_tensors(r, ""),
            Fitted::SnNatsv(s) => {
                if s.sn.dim != s.natsv.dim {
                    return Err(r.format_error(format!(
                        "inconsistent header: sn has {} dims, natsv {}",
                        s.sn.dim, s.natsv.dim
                    )));
                }
                s.sn.read_tensors(r, "sn.")?;
                s.natsv.read_tensors(r, "natsv.")
            }
            Fitted::Flow(f) => f.read_tensors(r),
            Fitted::SoftWhiten(s) => s.read_tensors(r, ""),
            Fitted::Auto(a) => a.read_tensors(r),
            Fitted::Pca(p) => p.read_tensors(r),
        }
    }
}

impl Calibrator for Fitted {
    fn input_dim(&self) -> usize {
        self.inner().input_dim()
    }
    fn output_dim(&self) -> usize {
        self.inner().output_dim()
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        self.inner().transform(x)
    }
    fn describe(&self) -> String {
        self.inner().describe()
    }
}

/// Progress of an iterative fit (the flow), reported after every
/// optimisation step. Closed-form kinds report nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitProgress {
    /// Steps done (1-based).
    pub step: usize,
    /// Steps in the whole fit.
    pub total_steps: usize,
    /// Current epoch (1-based).
    pub epoch: usize,
    /// Number of epochs.
    pub epochs: usize,
    /// NLL (bits/dim) of this step's batch, before its update.
    pub loss: f64,
    /// Mean batch NLL (bits/dim) so far in this epoch.
    pub running_loss: f64,
}

/// Options of [`fit`]. The crate never prints: progress goes to the
/// optional callback.
#[derive(Default)]
pub struct FitOptions<'a> {
    /// Called after every optimisation step of an iterative fit.
    pub progress: Option<Box<dyn FnMut(FitProgress) + 'a>>,
}

impl<'a> FitOptions<'a> {
    /// No callback.
    pub fn new() -> Self {
        FitOptions { progress: None }
    }

    /// Sets the progress callback.
    pub fn with_progress(mut self, f: impl FnMut(FitProgress) + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }
}

impl fmt::Debug for FitOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FitOptions")
            .field("progress", &self.progress.as_ref().map(|_| "callback"))
            .finish()
    }
}

/// Writes `fitted` to `path`; see [`Fitted::save`].
pub fn save(fitted: &Fitted, path: impl AsRef<Path>, meta: &CalibratorMeta) -> Result<()> {
    io::save(fitted, path, meta)
}

/// Reads a calibrator file; see [`Fitted::load`].
pub fn load(path: impl AsRef<Path>) -> Result<(Fitted, CalibratorMeta)> {
    io::load(path)
}
