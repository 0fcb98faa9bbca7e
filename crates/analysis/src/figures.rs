//! Ready-made figures for the analyses of this crate.

use crate::frequency::FrequencyGeometry;
use crate::plot::{Figure, LegendPosition, Series};
use crate::spectrum::Spectrum;

/// Normalised singular values against their index (1-based), one line per
/// named spectrum (e.g. "BERT", "BERT-flow", "whitening"), log-y axis.
/// Exact zeros cannot be shown on the log axis and are skipped.
pub fn spectrum_figure(title: &str, spectra: &[(&str, &Spectrum)]) -> Figure {
    spectra.iter().fold(
        Figure::new(title, "index of singular value", "singular value / largest")
            .with_log_axes(false, true)
            .with_legend(LegendPosition::LowerLeft),
        |fig, (name, s)| {
            let pts = s
                .singular_values_normalised
                .iter()
                .enumerate()
                .map(|(i, &v)| ((i + 1) as f64, v))
                .collect();
            fig.with_series(Series::line(*name, pts))
        },
    )
}

/// Scatter of gold score (x) against model cosine similarity (y).
/// Extra elements of the longer slice are ignored.
pub fn similarity_vs_gold_figure(title: &str, sims: &[f64], gold: &[f64]) -> Figure {
    let pts = gold.iter().copied().zip(sims.iter().copied()).collect();
    Figure::new(title, "gold similarity score", "cosine similarity")
        .with_series(Series::points("", pts))
}

/// Scatter of edit distance (x) against model cosine similarity (y).
/// Extra elements of the longer slice are ignored.
pub fn similarity_vs_edit_figure(title: &str, sims: &[f64], edit_dist: &[usize]) -> Figure {
    let pts = edit_dist
        .iter()
        .map(|&e| e as f64)
        .zip(sims.iter().copied())
        .collect();
    Figure::new(title, "edit distance", "cosine similarity").with_series(Series::points("", pts))
}

/// Word-embedding l2 norm against frequency rank + 1 (log-x), one point per
/// token with a non-zero count.
pub fn norm_vs_rank_figure(title: &str, geometry: &FrequencyGeometry) -> Figure {
    let pts = geometry
        .tokens
        .iter()
        .map(|t| ((t.rank + 1) as f64, t.norm))
        .collect();
    Figure::new(title, "frequency rank + 1", "l2 norm of word embedding")
        .with_log_axes(true, false)
        .with_series(Series::points("", pts))
}
