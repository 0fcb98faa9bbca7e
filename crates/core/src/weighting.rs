//! Token weighting for the averaging poolings as a workflow: where the
//! word-piece frequencies come from (the fit corpus, or a frequency file),
//! and how the weights travel in calibrator files so that every front end
//! applies the weighting a calibrator was fitted with.
use crate::error::{Context, Result};
use bertflow_calib::WeightingMeta;
use bertflow_encoder::{Encoder, TokenCounts, TokenWeights, WeightingSpec};
use std::path::PathBuf;

/// A weighting and where its frequencies come from.
#[derive(Debug, Clone, Default)]
pub struct Weighting {
    pub spec: WeightingSpec,
    /// Word-piece counts from this file (`token<TAB>count` lines) instead of
    /// counting the fit corpus.
    pub freq_file: Option<PathBuf>,
    /// These exact weights (a calibrator file's), whatever the corpus.
    pub fixed: Option<TokenWeights>,
}

impl Weighting {
    /// A weighting whose counts (if it needs any) come from the corpus given
    /// to [`Weighting::weights`].
    pub fn new(spec: WeightingSpec) -> Self {
        Self {
            spec,
            freq_file: None,
            fixed: None,
        }
    }

    /// Exactly `weights` (a calibrator file's), whatever the corpus.
    pub fn fixed(weights: TokenWeights) -> Self {
        Self {
            spec: weights.spec.clone(),
            freq_file: None,
            fixed: Some(weights),
        }
    }

    /// The plain mean: no weights at all.
    pub fn is_plain_mean(&self) -> bool {
        self.spec.is_plain_mean()
    }

    /// The key of the weights every corpus gets, when they do not depend on
    /// the corpus (fixed weights; `None` also for the plain mean).
    pub fn fixed_key(&self) -> Option<&str> {
        self.fixed.as_ref().map(|w| w.key())
    }

    /// The spec as rows and files name it: `mean` for the plain mean.
    pub fn label(&self) -> String {
        if self.is_plain_mean() {
            "mean".to_string()
        } else {
            self.spec.to_string()
        }
    }

    /// Where the counts come from, as recorded in calibrator files.
    pub fn counts_from(&self) -> String {
        match &self.freq_file {
            Some(p) => p
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            None => "fit corpus".to_string(),
        }
    }

    /// The per-token weights for `encoder` (`None` for the plain mean), the
    /// frequencies counted on `corpus` unless a frequency file is given.
    pub fn weights(&self, encoder: &Encoder, corpus: &[String]) -> Result<Option<TokenWeights>> {
        if self.is_plain_mean() {
            return Ok(None);
        }
        if let Some(w) = &self.fixed {
            return Ok(Some(w.clone()));
        }
        let tok = encoder.tokenizer();
        let counts = if !self.spec.needs_counts() {
            None
        } else if let Some(p) = &self.freq_file {
            Some(TokenCounts::read(p, tok).with_context(|| format!("reading {}", p.display()))?)
        } else {
            Some(TokenCounts::count(tok, corpus)?)
        };
        Ok(Some(TokenWeights::new(&self.spec, counts.as_ref(), tok)?))
    }
}

/// The record of `weights` for a calibrator file.
pub fn to_meta(weights: &TokenWeights, counts_from: String) -> WeightingMeta {
    WeightingMeta {
        spec: weights.spec.to_string(),
        counts_from,
        key: weights.key().to_string(),
        unseen: weights.unseen(),
        usif_a: weights.usif_a,
        weights: weights.weights().to_vec(),
    }
}

/// The weights recorded in a calibrator file.
pub fn from_meta(meta: &WeightingMeta) -> Result<TokenWeights> {
    let spec: WeightingSpec = meta.spec.parse().map_err(|e| {
        crate::CoreError::Input(format!("calibrator file: weighting {:?}: {e}", meta.spec))
    })?;
    Ok(TokenWeights::from_parts(
        spec,
        meta.weights.clone(),
        meta.unseen,
        meta.usif_a,
        meta.key.clone(),
    )?)
}
