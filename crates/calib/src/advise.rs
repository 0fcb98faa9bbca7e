//! "Should I calibrate?": label-free statistics of an embedding matrix, the
//! decision the `auto` calibrator takes from them, and a sentence a user can
//! act on.

use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::softwhiten::Eigen;

/// Statistics of a fit matrix (one embedding per row) that drive
/// [`decide`]. All are invariant to a global scale of the embeddings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoStats {
    /// Rows.
    pub n: usize,
    /// Columns.
    pub dim: usize,
    /// Numerical rank of the covariance.
    pub rank: usize,
    /// Mean cosine over all pairs of distinct rows (exact, not sampled):
    /// about 0 for isotropic embeddings, near 1 for a narrow cone.
    pub mean_cosine: f64,
    /// The same after subtracting the mean.
    pub mean_cosine_centred: f64,
    /// `|mean|^2 / mean(|x|^2)`: the share of the raw second moment that
    /// is the common mean vector.
    pub mean_share: f64,
    /// Share of the variance in the top principal direction.
    pub top1_share: f64,
    /// Share of the variance in the top 10 principal directions.
    pub top10_share: f64,
    /// Effective rank: `exp(entropy)` of the normalised covariance
    /// eigenvalues, divided by the numerical rank (1 for a flat spectrum).
    pub eff_rank_ratio: f64,
    /// Share of the variance in the top 1% of coordinates (at least one):
    /// high when a few "rogue" dimensions dominate.
    pub rogue_share: f64,
    /// Share of the (squared) mean vector inside the span of the top 10
    /// principal directions of the centred data: high when the common
    /// direction is also the main axis of variation (static, frequency-driven
    /// embeddings), low when it is a constant offset.
    pub mean_top10_align: f64,
    /// Coefficient of variation (standard deviation / mean) of the row
    /// norms; 0 for normalised rows. Among wide cones whose common direction
    /// follows the main axes it separates static averages (>= 0.155 in the
    /// protocol) from a fine-tuned model's layers (<= 0.121); elsewhere it
    /// is not read (MiniLM last-avg has 0.198). Absent (0) in files of rules
    /// before `auto-v3`.
    #[serde(default)]
    pub norm_cv: f64,
}

/// Statistics of `x` (fit data: at least 2 rows, finite values).
pub fn stats(x: ArrayView2<f32>) -> Result<AutoStats> {
    let e = Eigen::of("auto", x)?;
    Ok(stats_from(x, &e))
}

pub(crate) fn stats_from(x: ArrayView2<f32>, e: &Eigen) -> AutoStats {
    let (n, d) = x.dim();
    let mean_cosine = mean_pair_cosine(x, None);
    let mean_cosine_centred = mean_pair_cosine(x, Some(e.mean.as_slice().unwrap_or(&[])));
    let second: f64 = x
        .rows()
        .into_iter()
        .map(|r| r.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>())
        .sum::<f64>()
        / n as f64;
    let mu2: f64 = e.mean.iter().map(|m| m * m).sum();
    let vals = &e.values[..e.rank];
    let total: f64 = vals.iter().sum();
    let top = |k: usize| vals.iter().take(k).sum::<f64>() / total;
    let entropy: f64 = vals
        .iter()
        .map(|&s| s / total)
        .filter(|&p| p > 0.0)
        .map(|p| -p * p.ln())
        .sum();
    // Per-coordinate variances are the covariance diagonal: sum_j U_ij^2 s_j.
    let mut coord_var: Vec<f64> = (0..d)
        .map(|i| {
            (0..e.rank)
                .map(|j| e.vectors[[i, j]].powi(2) * vals[j])
                .sum()
        })
        .collect();
    coord_var.sort_by(|a, b| b.total_cmp(a));
    let k = (d / 100).max(1);
    let mu_norm2: f64 = e.mean.iter().map(|m| m * m).sum();
    let mean_top10_align = if mu_norm2 > 0.0 {
        (0..e.rank.min(10))
            .map(|j| {
                let dot: f64 = (0..d).map(|i| e.vectors[[i, j]] * e.mean[i]).sum();
                dot * dot
            })
            .sum::<f64>()
            / mu_norm2
    } else {
        0.0
    };
    let rogue_share = coord_var[..k].iter().sum::<f64>() / coord_var.iter().sum::<f64>();
    let norms: Vec<f64> = x
        .rows()
        .into_iter()
        .map(|r| {
            r.iter()
                .map(|&v| (v as f64) * (v as f64))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let norm_mean = norms.iter().sum::<f64>() / n as f64;
    let norm_sd = (norms.iter().map(|v| (v - norm_mean).powi(2)).sum::<f64>() / n as f64).sqrt();
    AutoStats {
        n,
        dim: d,
        rank: e.rank,
        mean_cosine,
        mean_cosine_centred,
        mean_share: if second > 0.0 { mu2 / second } else { 0.0 },
        top1_share: top(1),
        top10_share: top(10),
        eff_rank_ratio: entropy.exp() / e.rank as f64,
        rogue_share,
        mean_top10_align,
        norm_cv: if norm_mean > 0.0 {
            norm_sd / norm_mean
        } else {
            0.0
        },
    }
}

/// Mean cosine over the n(n-1)/2 pairs of distinct rows of `x` (minus
/// `centre`, if given), exactly: with `u_i` the unit rows,
/// `(|sum u_i|^2 - m) / (m (m - 1))` over the m rows of non-zero norm.
fn mean_pair_cosine(x: ArrayView2<f32>, centre: Option<&[f64]>) -> f64 {
    let d = x.ncols();
    let mut sum = vec![0f64; d];
    let mut row = vec![0f64; d];
    let mut m = 0usize;
    for r in x.rows() {
        for (j, &v) in r.iter().enumerate() {
            row[j] = v as f64 - centre.map_or(0.0, |c| c[j]);
        }
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            m += 1;
            for (s, v) in sum.iter_mut().zip(&row) {
                *s += v / norm;
            }
        }
    }
    if m < 2 {
        return 0.0;
    }
    let m = m as f64;
    (sum.iter().map(|s| s * s).sum::<f64>() - m) / (m * (m - 1.0))
}

/// What `auto` does with a fit matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `identity` or `soft-whiten` (with its parameters below; a `blend`
    /// above 0 mixes the raw direction back in).
    pub action: String,
    /// Whitening strength of the soft whitening (`None`: identity).
    pub alpha: Option<f64>,
    /// Shrinkage of the covariance towards its mean eigenvalue.
    pub shrink: f64,
    /// Leading principal directions removed before whitening.
    #[serde(default)]
    pub drop: usize,
    /// Weight of the raw unit direction in the output (0: none).
    #[serde(default)]
    pub blend: f64,
    /// Which statistics led here, in words.
    pub reason: String,
}

impl Decision {
    /// `identity`, or e.g. `soft-whiten alpha=0.5 shrink=0.25 drop=2`.
    pub fn summary(&self) -> String {
        let Some(a) = self.alpha else {
            return self.action.clone();
        };
        let mut s = format!("{} alpha={a} shrink={}", self.action, self.shrink);
        if self.drop > 0 {
            s.push_str(&format!(" drop={}", self.drop));
        }
        if self.blend > 0.0 {
            s.push_str(&format!(" blend={}", self.blend));
        }
        s
    }

    /// The soft whitening it applies (`None`: the identity).
    pub fn params(&self) -> Option<crate::SoftParams> {
        self.alpha.map(|alpha| crate::SoftParams {
            alpha,
            shrink: self.shrink,
            drop: self.drop,
            blend: self.blend,
        })
    }

    /// The `softwhiten` spec that applies the same transform (`none` for
    /// the identity), for users who want to fix the choice.
    pub fn spec(&self) -> crate::CalibSpec {
        self.params().map_or_else(crate::CalibSpec::none, |p| {
            crate::CalibSpec::fitted("softwhiten", &p.values())
        })
    }
}

/// The constants of the `auto` rule `auto-v3` (see [`decide`]). The four
/// thresholds are midpoints of the gaps between the statistics of the fit
/// matrices that want different treatments, over two fine-tuned models
/// (all-MiniLM-L6-v2 and all-mpnet-base-v2; poolings last-avg,
/// first-last-avg, cls, the sentence-transformers pipeline and emb-avg with
/// mean weighting, last-avg, first-last-avg and emb-avg with uSIF weights;
/// the seven STS fit corpora: 112 matrices); the transforms were chosen on
/// STS scores. Both were validated leave-one-model-out: chosen on one
/// model's matrices, scored on the other's (README, "auto";
/// `scripts/reference/auto_rule.py`).
pub mod rule {
    /// Below this mean pair cosine the embeddings are already isotropic (a
    /// model trained for cosine similarity): identity.
    pub const ISOTROPIC_COSINE: f64 = 0.10;
    /// Share of the mean vector inside the top-10 principal subspace at or
    /// above which the anisotropy is "spectral": the common direction is also
    /// the main axis of variation (static, frequency-driven embeddings).
    pub const ALIGN_SPECTRAL: f64 = 0.20;
    /// The spectral branch also needs a cone at least this narrow (mean pair
    /// cosine): a fine-tuned model's contextual layers can have their common
    /// direction along the main axes too (all-mpnet-base-v2 first-last-avg,
    /// STS15: share 0.283 at mean cosine 0.136), and whitening them costs.
    pub const SPECTRAL_COSINE: f64 = 0.20;
    /// ... or row norms at least this unequal ([`AutoStats::norm_cv`]):
    /// uSIF-weighted static averages are a wide cone (mean pair cosine
    /// about 0.15) whose norms still vary as a static average's do.
    pub const SPECTRAL_NORM_CV: f64 = 0.14;
    /// Soft whitening strength for spectral anisotropy.
    pub const ALPHA_SPECTRAL: f64 = 0.5;
    /// Shrinkage used with [`ALPHA_SPECTRAL`].
    pub const SHRINK_SPECTRAL: f64 = 0.25;
    /// Leading directions removed with [`ALPHA_SPECTRAL`] (the frequency
    /// directions, as all-but-the-top removes them).
    pub const DROP_SPECTRAL: usize = 2;
    /// For an offset-type cone (common direction outside the main axes):
    /// calibrate only when it is this narrow (mean pair cosine); a milder
    /// offset cone is left alone (centring alone costs on fine-tuned models).
    pub const NARROW_COSINE: f64 = 0.43;
    /// Soft whitening strength for a narrow offset-type cone.
    pub const ALPHA_NARROW: f64 = 0.7;
    /// Shrinkage used with [`ALPHA_NARROW`].
    pub const SHRINK_NARROW: f64 = 0.0;
    /// Weight of the raw direction blended into the whitened one for a
    /// narrow offset-type cone: the raw cosine of such embeddings (CLS) still
    /// carries what whitening loses.
    pub const BLEND_NARROW: f64 = 0.5;
}

fn identity(reason: String) -> Decision {
    Decision {
        action: "identity".into(),
        alpha: None,
        shrink: 0.0,
        drop: 0,
        blend: 0.0,
        reason,
    }
}

/// The `auto` rule, from the statistics alone:
/// 1. mean pair cosine < [`rule::ISOTROPIC_COSINE`]: identity;
/// 2. else, mean vector share in the top-10 principal subspace >=
///    [`rule::ALIGN_SPECTRAL`]: if the mean pair cosine is also >=
///    [`rule::SPECTRAL_COSINE`] or the row-norm variation >=
///    [`rule::SPECTRAL_NORM_CV`], drop [`rule::DROP_SPECTRAL`] leading
///    directions and soft-whiten the rest ([`rule::ALPHA_SPECTRAL`],
///    [`rule::SHRINK_SPECTRAL`]); else identity (a wide cone of even norms
///    whose common direction follows the main axes: a fine-tuned model's
///    layers);
/// 3. else, mean pair cosine >= [`rule::NARROW_COSINE`]: soft-whiten with
///    [`rule::ALPHA_NARROW`] and blend the raw direction back in with weight
///    [`rule::BLEND_NARROW`];
/// 4. else identity.
pub fn decide(s: &AutoStats) -> Decision {
    let cos = s.mean_cosine;
    if cos < rule::ISOTROPIC_COSINE {
        return identity(format!(
            "mean pair cosine {cos:.3} < {}: already isotropic; calibrating would mostly amplify noise",
            rule::ISOTROPIC_COSINE
        ));
    }
    let static_like = cos >= rule::SPECTRAL_COSINE || s.norm_cv >= rule::SPECTRAL_NORM_CV;
    if s.mean_top10_align >= rule::ALIGN_SPECTRAL && !static_like {
        return identity(format!(
            "mean pair cosine {cos:.3} in [{}, {}) and row-norm variation {:.3} < {} with the common \
             direction in the top principal directions (share {:.3} >= {}): a wide cone of \
             even norms, as a fine-tuned model's layers make; whitening would most likely cost",
            rule::ISOTROPIC_COSINE,
            rule::SPECTRAL_COSINE,
            s.norm_cv,
            rule::SPECTRAL_NORM_CV,
            s.mean_top10_align,
            rule::ALIGN_SPECTRAL
        ));
    }
    let (action, alpha, shrink, drop, blend, why) = if s.mean_top10_align >= rule::ALIGN_SPECTRAL {
        (
            "soft-whiten",
            rule::ALPHA_SPECTRAL,
            rule::SHRINK_SPECTRAL,
            rule::DROP_SPECTRAL,
            0.0,
            format!(
                "the common direction lies in the top principal directions (share {:.3} >= {}) \
                 of {}: static, frequency-driven embeddings; remove the leading directions and \
                 whiten the rest",
                s.mean_top10_align,
                rule::ALIGN_SPECTRAL,
                if cos >= rule::SPECTRAL_COSINE {
                    format!("a narrow cone ({cos:.3} >= {})", rule::SPECTRAL_COSINE)
                } else {
                    format!(
                        "a wide cone of uneven norms (row-norm variation {:.3} >= {})",
                        s.norm_cv,
                        rule::SPECTRAL_NORM_CV
                    )
                }
            ),
        )
    } else if cos >= rule::NARROW_COSINE {
        (
            "soft-whiten",
            rule::ALPHA_NARROW,
            rule::SHRINK_NARROW,
            0,
            rule::BLEND_NARROW,
            format!(
                "the common direction is an offset outside the top principal directions (share {:.3} < {}) \
                 and the cone is narrow ({cos:.3} >= {}): whiten softly and keep half of the raw direction",
                s.mean_top10_align,
                rule::ALIGN_SPECTRAL,
                rule::NARROW_COSINE
            ),
        )
    } else {
        return identity(format!(
            "mean pair cosine {cos:.3} in [{}, {}) with the common direction outside the top principal \
             directions (share {:.3} < {}): a mild offset; whitening would most likely cost",
            rule::ISOTROPIC_COSINE,
            rule::NARROW_COSINE,
            s.mean_top10_align,
            rule::ALIGN_SPECTRAL
        ));
    };
    Decision {
        action: action.into(),
        alpha: Some(alpha),
        shrink,
        drop,
        blend,
        reason: format!(
            "mean pair cosine {cos:.3} >= {}: anisotropic; {why}",
            rule::ISOTROPIC_COSINE
        ),
    }
}

/// "Should I calibrate?": the statistics, the decision `auto` would take,
/// the expected direction and a sentence a user can act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// Statistics of the matrix.
    pub stats: AutoStats,
    /// What `auto` would do.
    pub decision: Decision,
    /// `none` (leave as is) or `improves` (calibration expected to help).
    pub expected: String,
    /// One sentence to act on.
    pub message: String,
}

/// Statistics, decision and advice for an embedding matrix (one row per
/// sentence; at least 2 rows, finite values). Labels are never needed.
pub fn advise(x: ArrayView2<f32>) -> Result<Advice> {
    let e = Eigen::of("auto", x)?;
    let stats = stats_from(x, &e);
    let decision = decide(&stats);
    let (expected, message) = match decision.alpha {
        None => (
            "none",
            format!(
                "Do not calibrate: {}. Whitening or a flow would most likely lower similarity \
                 quality; `auto` keeps these embeddings as they are.",
                decision.reason
            ),
        ),
        Some(_) => (
            "improves",
            format!(
                "Calibrate: {}. Use `auto` (it applies {}; `--kind {}` fixes that choice), or \
                 compare it with whiten and flow on scored pairs of your own.",
                decision.reason,
                decision.summary(),
                decision.spec()
            ),
        ),
    };
    Ok(Advice {
        stats,
        decision,
        expected: expected.into(),
        message,
    })
}
