//! The `auto` calibrator: decides from the fit embeddings alone (no labels,
//! no model or pooling names) how far to go, from the identity through
//! soft whitening (optionally without the leading directions, or blended
//! with the raw direction) to full whitening, and records the decision and
//! the statistics behind it in its file header. Files of an earlier rule
//! (`auto-v1`, `auto-v2`) load and apply as they were fitted: the header
//! keeps the rule's version and decision, the tensors the transform.

use ndarray::{Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::advise::{decide, stats_from, AutoStats, Decision};
use crate::error::Result;
use crate::softwhiten::{Eigen, SoftWhitening};
use crate::stats::check_transform_input;
use crate::tensors::{TensorReader, TensorWriter};
use crate::Calibrator;

/// Version of the decision rule, stored in every `auto` file.
pub const AUTO_RULE: &str = "auto-v4";

/// A fitted `auto` calibrator: the decision, the statistics it was taken
/// from, and the soft whitening it chose (none for the identity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Auto {
    /// Input dimension.
    pub dim: usize,
    /// The rule's version ([`AUTO_RULE`] when fitted by this build).
    pub rule: String,
    /// Statistics of the fit data.
    pub stats: AutoStats,
    /// What was decided, and why.
    pub decision: Decision,
    /// The transform (`None`: identity).
    pub transform: Option<SoftWhitening>,
}

impl Auto {
    pub(crate) fn fit(x: ArrayView2<f32>) -> Result<Self> {
        let e = Eigen::of("auto", x)?;
        let stats = stats_from(x, &e);
        let decision = decide(&stats);
        let transform = match decision.params() {
            None => None,
            Some(p) => Some(SoftWhitening::from_eigen(&e, p)?),
        };
        Ok(Auto {
            dim: x.ncols(),
            rule: AUTO_RULE.to_string(),
            stats,
            decision,
            transform,
        })
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter) {
        if let Some(t) = &self.transform {
            t.write_tensors(w, "soft.");
        }
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader) -> Result<()> {
        match &mut self.transform {
            Some(t) if t.dim != self.dim => Err(r.format_error(format!(
                "inconsistent header: auto has {} dims, its transform {}",
                self.dim, t.dim
            ))),
            Some(t) => t.read_tensors(r, "soft."),
            None => Ok(()),
        }
    }
}

impl Calibrator for Auto {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.transform.as_ref().map_or(self.dim, |t| t.output_dim())
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        match &self.transform {
            Some(t) => t.transform(x),
            None => {
                check_transform_input(self.dim, x)?;
                Ok(x.to_owned())
            }
        }
    }
    fn describe(&self) -> String {
        format!(
            "auto ({}: {}; mean cosine {:.3}, mean-vector share top-10 {:.3}, row-norm variation {:.3}, \
             top-10 variance share {:.3}, effective rank ratio {:.3})",
            self.rule,
            self.decision.summary(),
            self.stats.mean_cosine,
            self.stats.mean_top10_align,
            self.stats.norm_cv,
            self.stats.top10_share,
            self.stats.eff_rank_ratio
        )
    }
}
