//! Fitting: from a [`CalibSpec`] (already checked against the registry) and
//! the rows, or their moment statistics, to a [`Fitted`] calibrator. Each
//! kind of the [registry](crate::registry) has its arm here: `fit_rows` for
//! kinds fitted on the rows, `fit_moments` for those fitted from moment
//! statistics (the registry's `moments: true`).

use ndarray::ArrayView2;

use crate::auto::Auto;
use crate::error::{CalibError, Result};
use crate::flow::Flow;
use crate::linear::{Identity, Natsv, SnNatsv, StandardNorm, Whitening};
use crate::moments::{check_moments, MomentStats};
use crate::pca::Pca;
use crate::softwhiten::{Eigen, SoftWhitening};
use crate::spec::CalibSpec;
use crate::{stats, FitOptions, FitProgress, Fitted};

/// Fits a calibrator of the kind `spec` on `x` (one embedding per row).
/// Errors (never panics) on empty or non-finite data, or a flow architecture
/// that does not fit the dimension or diverges.
///
/// The closed-form kinds are fitted from the moment statistics of `x`
/// ([`MomentStats::from_data`], then [`fit_from_moments`]), so a fit on the
/// rows and a fit on merged statistics of the same rows agree.
pub fn fit(spec: &CalibSpec, x: ArrayView2<f32>, opts: &mut FitOptions<'_>) -> Result<Fitted> {
    match spec.kind() {
        "flow" => {
            let cfg = spec.flow_config().expect("a flow spec");
            let progress = opts
                .progress
                .as_mut()
                .map(|b| &mut **b as &mut dyn FnMut(FitProgress));
            Ok(Fitted::Flow(Flow::fit(&cfg, x, progress)?))
        }
        "softwhiten" => {
            let p = spec.soft_params().expect("a softwhiten spec");
            Ok(Fitted::SoftWhiten(SoftWhitening::fit(x, p)?))
        }
        "auto" => Ok(Fitted::Auto(Auto::fit(x)?)),
        "none" => {
            stats::check_fit_input("none", x, 1)?;
            Ok(Fitted::None(Identity { dim: x.ncols() }))
        }
        kind => {
            stats::check_fit_input(kind, x, 2)?;
            fit_from_moments(spec, &MomentStats::from_data(x)?)
        }
    }
}

/// Fits the moment-based kinds (`none`, `sn`, `whiten[:k]`, `natsv:k`,
/// `sn+natsv:k`, `softwhiten`) from moment statistics alone; it gives the
/// calibrator [`fit`] gives on the rows themselves (which goes through this
/// function). `flow` and `auto` need the rows and are an error: fit them on
/// a (sub)sample.
pub fn fit_from_moments(spec: &CalibSpec, stats: &MomentStats) -> Result<Fitted> {
    let k = spec.k();
    Ok(match spec.kind() {
        "none" => {
            check_moments("none", stats, 1)?;
            Fitted::None(Identity { dim: stats.dim() })
        }
        "sn" => Fitted::Sn(StandardNorm::from_moments(stats)?),
        "whiten" => Fitted::Whiten(Whitening::from_moments(stats, k)?),
        "natsv" => Fitted::Natsv(Natsv::from_moments(stats, k.expect("natsv has k"))?),
        "sn+natsv" => Fitted::SnNatsv(SnNatsv::from_moments(stats, k.expect("natsv has k"))?),
        "pca" => Fitted::Pca(Pca::from_moments(
            stats,
            k,
            spec.choice("centre") == Some("true"),
        )?),
        "softwhiten" => {
            let e = Eigen::from_moments("softwhiten", stats)?;
            let p = spec.soft_params().expect("a softwhiten spec");
            Fitted::SoftWhiten(SoftWhitening::from_eigen(&e, p)?)
        }
        "auto" => {
            return Err(CalibError::BadData {
                kind: "auto",
                reason: "auto measures pair cosines on the rows themselves, not only their \
                         moment statistics; fit it on the rows (or a sample of them)"
                    .into(),
            })
        }
        "flow" => {
            return Err(CalibError::BadData {
                kind: "flow",
                reason: "flow needs the sample itself, not its moment statistics; \
                         fit it on a sample of the rows"
                    .into(),
            })
        }
        other => unreachable!("kind {other:?} is registered without a fit"),
    })
}

impl MomentStats {
    /// Fits the calibrator `spec` from these statistics; see [`fit_from_moments`].
    pub fn fit(&self, spec: &CalibSpec) -> Result<Fitted> {
        fit_from_moments(spec, self)
    }
}
