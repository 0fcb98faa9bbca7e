//! Token weighting for the averaging poolings as a workflow: where the
//! word-piece frequencies come from (the fit corpus, or a frequency file),
//! and how the weights travel in calibrator files so that every front end
//! applies the weighting a calibrator was fitted with.
use crate::error::{Context, Result};
use bertflow_calib::WeightingMeta;
use bertflow_encoder::{Encoder, PoolSource, Pooling, TokenCounts, TokenWeights, WeightingSpec};
use std::path::PathBuf;

/// A weighting and where its frequencies come from. With core's `clap`
/// feature it is also the command line's `--weighting` / `--freq-file`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Weighting {
    /// Token weighting of the averaging poolings: mean (plain average), sif
    /// (a/(a+p(w)), a=1e-3) or usif (Ethayarajh 2018's a from the counts), with
    /// options after a colon: a=NUMBER (sif), special=keep|drop, punct=keep|drop
    /// (default keep for mean, drop for sif/usif). Word-piece frequencies p(w) are
    /// counted on the fit corpus (encode without a calibrator: on the input)
    /// unless --freq-file is given. A calibrator fitted with a weighting records
    /// it (weights included), and encode, eval and serve apply it.
    #[cfg_attr(
        feature = "clap",
        arg(id = "weighting", long = "weighting", default_value = "mean", value_name = "SPEC", value_parser = crate::runtime::parse::parse_weighting)
    )]
    #[serde(rename = "weighting", with = "crate::runtime::parse::as_str")]
    pub spec: WeightingSpec,
    /// Word-piece frequencies for --weighting: one `piece<TAB>count` line per word
    /// piece of the model's vocabulary (pieces it lacks are skipped), and
    /// optionally `#sentences<TAB>N` (the number of sentences counted, for usif).
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub freq_file: Option<PathBuf>,
    /// These exact weights (a calibrator file's), whatever the corpus.
    #[cfg_attr(feature = "clap", arg(skip))]
    #[serde(skip)]
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

    /// The one rule for a calibrator's token weights (`own`, `None`: the plain
    /// mean): vectors it calibrates are pooled with exactly the weights it was
    /// fitted with, so those are the weights to use, and asking for another
    /// weighting is an error. [`Adopt::Unless`] (the CLI, whose `--weighting`
    /// defaults to `mean`): the plain mean asks for nothing, any other spec must
    /// be the file's. [`Adopt::Same`] (an encoder that was given its weighting,
    /// as in Python): the file's weighting must be this one, the plain mean too.
    pub fn adopt(
        &self,
        own: Option<TokenWeights>,
        rule: Adopt<'_>,
    ) -> Result<Option<TokenWeights>> {
        let own_label = own
            .as_ref()
            .map(|w| Weighting::new(w.spec.clone()).label())
            .unwrap_or_else(|| "mean".into());
        match rule {
            Adopt::Unless(path) => {
                if !self.is_plain_mean() && self.spec.to_string() != own_label {
                    return Err(crate::CoreError::setting(
                        "weighting",
                        format!(
                            "calibrator {} was fitted with weighting {own_label}, not {} (leave the weighting unset to use the file's)",
                            path.display(),
                            self.spec
                        ),
                    ));
                }
            }
            Adopt::Same => {
                if own_label != self.label() {
                    crate::bail!(
                        "the calibrator was fitted with weighting {own_label}, this encoder has {}",
                        self.label()
                    );
                }
            }
        }
        Ok(own)
    }

    /// A weighting other than the plain mean needs an averaging pooling.
    pub fn check_pooling(&self, enc: &Encoder, pooling: &Pooling) -> Result<()> {
        if !self.is_plain_mean()
            && !matches!(
                crate::runtime::st_pipeline::source(enc, pooling)?,
                PoolSource::Mean(_)
            )
        {
            crate::bail!(
                "weighting {} applies to the averaging poolings (last-avg, first-last-avg, emb-avg, ...), not {pooling}",
                self.spec
            );
        }
        Ok(())
    }

    /// Whether the weights are known without a corpus: the plain mean, fixed
    /// weights, a frequency file, or a scheme that needs no counts.
    pub fn needs_corpus(&self) -> bool {
        !self.is_plain_mean()
            && self.fixed.is_none()
            && self.freq_file.is_none()
            && self.spec.needs_counts()
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

/// How [`Weighting::adopt`] treats the weighting asked for.
#[derive(Debug, Clone, Copy)]
pub enum Adopt<'a> {
    /// The plain mean means "whatever the calibrator (this file) has".
    Unless(&'a std::path::Path),
    /// The weighting asked for must be the calibrator's, the plain mean included.
    Same,
}

impl Weighting {
    /// The calibrator-file record of `weights` (this weighting's, counted as
    /// [`Weighting::counts_from`] says).
    pub fn record(&self, weights: &TokenWeights) -> WeightingMeta {
        WeightingMeta {
            spec: weights.spec.to_string(),
            counts_from: self.counts_from(),
            key: weights.key().to_string(),
            unseen: weights.unseen(),
            usif_a: weights.usif_a,
            weights: weights.weights().to_vec(),
        }
    }

    /// The weights a calibrator file records.
    pub fn from_record(meta: &WeightingMeta) -> Result<TokenWeights> {
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

    /// Whether vectors pooled with this weighting are those a calibrator
    /// whose file records `record` (`None`: the plain mean) was fitted on:
    /// the same weights exactly, or the plain mean on both sides.
    pub fn matches_record(&self, record: Option<&WeightingMeta>) -> bool {
        match record {
            Some(r) => self.fixed_key() == Some(r.key.as_str()),
            None => self.is_plain_mean(),
        }
    }
}

/// A pipeline's token weighting: the weighting asked for and the weights in
/// use once known. The one owner of the rules: a calibrator's weights win
/// (another weighting asked for is refused, [`Weighting::adopt`]); a
/// weighting that counts its frequencies on a corpus waits for one
/// ([`ResolvedWeighting::count`]); the file record of the weights in use.
#[derive(Debug, Clone)]
pub struct ResolvedWeighting {
    /// The weighting asked for (as given: spec and frequency file).
    asked: Weighting,
    /// The weights in use, once known (`None`: the plain mean, or counts
    /// still to be taken on a corpus).
    weights: Option<TokenWeights>,
    /// Whether `weights` are a calibrator's (then nothing is counted).
    from_calibrator: bool,
}

impl ResolvedWeighting {
    /// The weights of a calibrator (`own`, `None`: the plain mean) fitted
    /// with them, recorded in the file at `path`; asking for another
    /// weighting than the plain mean or the file's is an error.
    pub fn of_calibrator(
        asked: Weighting,
        own: Option<TokenWeights>,
        path: &std::path::Path,
    ) -> Result<Self> {
        let weights = asked.adopt(own, Adopt::Unless(path))?;
        Ok(Self {
            asked,
            weights,
            from_calibrator: true,
        })
    }

    /// The weighting asked for, on `pooling` (an averaging one, unless the
    /// plain mean): its weights now, unless it counts them on a corpus.
    pub fn asked(asked: Weighting, encoder: &Encoder, pooling: &Pooling) -> Result<Self> {
        asked.check_pooling(encoder, pooling)?;
        let weights = if asked.needs_corpus() {
            None
        } else {
            asked.weights(encoder, &[])?
        };
        Ok(Self {
            asked,
            weights,
            from_calibrator: false,
        })
    }

    /// Whether the weights are known (false only while a weighting waits for
    /// [`ResolvedWeighting::count`]).
    pub fn ready(&self) -> bool {
        self.from_calibrator || self.weights.is_some() || !self.asked.needs_corpus()
    }

    /// The weights in use (`None`: the plain mean, or not counted yet).
    pub fn weights(&self) -> Option<&TokenWeights> {
        self.weights.as_ref()
    }

    /// The weighting's label (`mean`: none), of the weights in use when known.
    pub fn label(&self) -> String {
        match &self.weights {
            Some(w) => Weighting::new(w.spec.clone()).label(),
            None => self.asked.label(),
        }
    }

    /// The weights, or the error saying they still need a corpus.
    pub fn require(&self) -> Result<Option<&TokenWeights>> {
        if !self.ready() {
            return Err(crate::CoreError::setting(
                "weighting",
                format!(
                    "{} needs word-piece frequencies: count them on a corpus first \
                     (Python: fit_weighting(corpus)), or give a frequency file",
                    self.asked.label()
                ),
            ));
        }
        Ok(self.weights.as_ref())
    }

    /// Counts the frequencies on `corpus` when the weights are still unknown
    /// (a calibrator's or a frequency file's weights stay).
    pub fn count(&mut self, encoder: &Encoder, corpus: &[String]) -> Result<()> {
        if !self.ready() {
            self.weights = self.asked.weights(encoder, corpus)?;
        }
        Ok(())
    }

    /// Counts the frequencies on `corpus` whatever they were before (Python's
    /// `Encoder.fit_weighting`; nothing for the plain mean).
    pub fn recount(&mut self, encoder: &Encoder, corpus: &[String]) -> Result<()> {
        let counted = Weighting {
            freq_file: None,
            fixed: None,
            ..self.asked.clone()
        };
        self.weights = counted.weights(encoder, corpus)?;
        Ok(())
    }

    /// Takes the weights a calibrator file records (`None`: the plain mean)
    /// for a pipeline without calibrator that was given its weighting
    /// ([`Adopt::Same`]: the file's weighting must be this one).
    pub fn adopt_record(&mut self, record: Option<&WeightingMeta>) -> Result<()> {
        let own = record.map(Weighting::from_record).transpose()?;
        self.weights = self.asked.adopt(own, Adopt::Same)?;
        Ok(())
    }

    /// The calibrator-file record of the weights in use (`None`: the plain
    /// mean); an error while they are not counted yet.
    pub fn record(&self) -> Result<Option<WeightingMeta>> {
        if self.asked.is_plain_mean() && !self.from_calibrator {
            return Ok(None);
        }
        Ok(self.require()?.map(|w| self.asked.record(w)))
    }

    /// The weighting to hand to workflows that count per corpus (the STS
    /// grid): a calibrator's exact weights when it has some, else the
    /// weighting asked for.
    pub fn for_grid(&self) -> Weighting {
        match (&self.weights, self.from_calibrator) {
            (Some(w), true) => Weighting::fixed(w.clone()),
            _ => self.asked.clone(),
        }
    }
}
