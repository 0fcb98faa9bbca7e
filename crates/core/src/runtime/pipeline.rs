//! The pipeline every front end runs: a model, one pooling, the token
//! weighting, the precision of the forward pass and an optional calibrator,
//! opened from one [`PipelineConfig`] and checked together once.
//!
//! The rule for token weights is [`ResolvedWeighting`]'s (`crate::runtime::weighting`,
//! the one owner of weighting): a calibrator brings the weights it was fitted
//! with (asking for another weighting is an error); without one, the
//! weighting asked for is used, its word-piece frequencies read from its
//! frequency file or counted on a corpus ([`Pipeline::count_weights`]: the
//! input of `encode`, the fit corpus).
use crate::error::Result;
use crate::runtime::calibration::{model_identity, LoadedCalibrator};
use crate::runtime::embedder::{Embedder, EmbedderConfig};
use crate::runtime::progress::SharedProgress;
use crate::runtime::prompt::{Prompt, PromptConfig};
use crate::runtime::weighting::{ResolvedWeighting, Weighting};
use bertflow_calib::{Calibrator, WeightingMeta};
use bertflow_encoder::{EncodeOptions, Encoder, PoolSource, Pooling};
use ndarray::Array2;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What makes the vectors: the model (and how to run it), the pooling, an
/// optional calibrator file and the token weighting. With core's `clap`
/// feature it is the command line's options (the weighting is flattened
/// separately by the commands that offer `--weighting`); it reads and writes
/// as JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PipelineConfig {
    #[cfg_attr(feature = "clap", command(flatten))]
    #[serde(flatten)]
    pub model: EmbedderConfig,
    /// Pooling; see `bertflow poolings` [default: the calibrator file's pooling; else
    /// `st` for a sentence-transformers directory whose modules change the vectors
    /// beyond mean pooling (a Dense module, bertflow's calibrator, another pooling
    /// mode: an exported directory); else last-avg].
    #[cfg_attr(
        feature = "clap",
        arg(long, short = 'p', value_parser = crate::runtime::parse::parse_pooling)
    )]
    #[serde(with = "crate::runtime::parse::opt_str")]
    pub pooling: Option<Pooling>,
    /// Calibrator file (from `bertflow fit`) applied to every vector.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    #[cfg_attr(feature = "clap", arg(long))]
    pub allow_mismatch: bool,
    /// The token weighting asked for (see the module's rule).
    #[cfg_attr(feature = "clap", arg(skip))]
    #[serde(flatten)]
    pub weighting: Weighting,
}

impl PipelineConfig {
    /// Opens the calibrator (first: a bad file fails before the model loads),
    /// loads the model and checks them together (see [`Pipeline::new`]).
    pub fn open(&self, progress: SharedProgress) -> Result<Pipeline> {
        let calibrator = self
            .calibrator
            .as_deref()
            .map(|p| LoadedCalibrator::open(p, self.allow_mismatch))
            .transpose()?;
        self.open_with(calibrator, progress)
    }

    /// [`PipelineConfig::open`] with a calibrator already loaded (Python's
    /// `Calibrator` object, bytes shipped to a Spark worker) in place of the
    /// `calibrator` file; the same resolution and checks.
    pub fn open_with(
        &self,
        calibrator: Option<LoadedCalibrator>,
        progress: SharedProgress,
    ) -> Result<Pipeline> {
        crate::runtime::rerank::refuse_reranker(&self.model.model)?;
        if let (Some(p), Some(_)) = (&self.pooling, &calibrator) {
            crate::runtime::retrieval::refuse_sparse_pooling(p)?;
        }
        let embedder = self.model.load(progress)?;
        let pooling = resolve_pooling(
            &embedder.encoder,
            self.pooling.as_ref(),
            calibrator.as_ref(),
            self.allow_mismatch,
            &*embedder.progress,
        )?;
        Pipeline::new(embedder, pooling, calibrator, self.weighting.clone())
    }
}

/// The pooling used when none is asked for and nothing else decides.
pub use crate::runtime::defaults::POOLING as DEFAULT_POOLING;

/// The pooling a pipeline runs (files carry their settings):
/// - the one asked for, which must be the calibrator file's (unless
///   `allow_mismatch`);
/// - else the calibrator file's;
/// - else `st` when the model is a sentence-transformers directory whose modules
///   change the vectors beyond mean pooling (see [`st_changes_vectors`]), with
///   a note: its plain mean would silently skip them;
/// - else [`DEFAULT_POOLING`].
pub fn resolve_pooling(
    enc: &Encoder,
    given: Option<&Pooling>,
    calibrator: Option<&LoadedCalibrator>,
    allow_mismatch: bool,
    progress: &dyn crate::Progress,
) -> Result<Pooling> {
    let recorded = calibrator.and_then(|c| {
        c.meta
            .pooling
            .parse::<Pooling>()
            .ok()
            .map(|p| (p, c.path.display().to_string()))
    });
    match (given, recorded) {
        (Some(p), Some((file, path))) if *p != file && !allow_mismatch => {
            Err(crate::CoreError::setting(
                "pooling",
                format!(
                    "the calibrator {path} was fitted with pooling {file}, not {p} (leave \
                     the pooling unset to use the file's, or allow the mismatch)"
                ),
            ))
        }
        (Some(p), _) => Ok(p.clone()),
        (None, Some((file, _))) => Ok(file),
        (None, None) => {
            if let Some(why) = st_changes_vectors(enc) {
                progress.note(&format!(
                    "note: model {} is a sentence-transformers directory with {why}: using pooling \
                     st (its own pipeline); set pooling to last-avg for the plain mean",
                    enc.model_id()
                ));
                Ok(Pooling::St)
            } else if enc.config().architecture.is_causal() {
                // A decoder's last token is the only one that has read the text.
                Ok(Pooling::LastToken)
            } else {
                Ok(DEFAULT_POOLING)
            }
        }
    }
}

/// What in `enc`'s sentence-transformers pipeline (`modules.json`) changes the
/// vectors beyond the plain mean of the last layer (normalising excepted, which
/// keeps every cosine): `None` when there is no such pipeline or it is mean
/// pooling (and `Normalize`) only, as in all-MiniLM-L6-v2's own directory.
pub fn st_changes_vectors(enc: &Encoder) -> Option<String> {
    use bertflow_encoder::st::{Mode, Step};
    let spec = enc.st_spec().ok()?;
    spec.steps.iter().find_map(|step| match step {
        Step::Pool(modes) if modes.as_slice() == [Mode::Mean] => None,
        Step::Normalize => None,
        Step::Pool(modes) => Some(format!("pooling modes {modes:?}")),
        Step::Source(s) => Some(format!("bertflow's pooling {}", s.key())),
        Step::Dense(d) => Some(format!(
            "a Dense module ({} -> {})",
            d.in_features, d.out_features
        )),
        Step::Calibrator(_) | Step::Map(_) => Some("bertflow's calibrator module".to_string()),
    })
}

/// A loaded model with its pooling, token weights and calibrator, checked
/// together.
pub struct Pipeline {
    embedder: Embedder,
    pooling: Pooling,
    source: PoolSource,
    calibrator: Option<LoadedCalibrator>,
    weighting: ResolvedWeighting,
}

/// What a pipeline makes, for `GET /info`, logs and output metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineInfo {
    /// The model as given (directory or hub id).
    pub model_id: String,
    /// The model identity recorded in calibrator files (`name@fingerprint`).
    pub model: String,
    /// Canonical name of the pooling.
    pub pooling: String,
    /// The token weighting in use (`mean`: none).
    pub weighting: String,
    /// The calibrator's description, if any.
    pub calibrator: Option<String>,
    /// Length of the vectors made (the calibrator's output dimension).
    pub dimension: usize,
    /// Token limit per sentence, [CLS] and [SEP] included.
    pub max_len: usize,
    /// Arithmetic of the forward pass.
    pub precision: String,
    /// The prompt before every text by default (`query ("query: ")`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// One batch encoded without the cache: the vectors (one row per text) and
/// what the tokenizer did.
#[derive(Debug, Clone)]
pub struct Batch {
    pub vectors: Array2<f32>,
    /// Tokens per sentence after truncation, special tokens included.
    pub tokens: Vec<usize>,
    /// Whether each sentence was longer than `max_len` tokens.
    pub truncated: Vec<bool>,
}

impl Batch {
    /// The batch of an encoder pass with one pooling source.
    pub(crate) fn of_one_pooling(out: bertflow_encoder::Encoded) -> Result<Batch> {
        let vectors =
            out.embeddings.into_iter().next().ok_or_else(|| {
                crate::CoreError::Input("the encoder returned no embeddings".into())
            })?;
        Ok(Batch {
            vectors,
            tokens: out.tokens,
            truncated: out.truncated,
        })
    }
}

impl Pipeline {
    /// Checks `pooling` against the model, `calibrator` (if any) against the
    /// model, pooling and dimension (warnings for an allowed mismatch go to the
    /// embedder's progress), and resolves the token weights by the module's
    /// rule: the calibrator's (refusing another `weighting` than `mean` or its
    /// own); else `weighting`, which needs an averaging pooling, read now unless
    /// it counts its frequencies on a corpus.
    pub fn new(
        embedder: Embedder,
        pooling: Pooling,
        calibrator: Option<LoadedCalibrator>,
        weighting: Weighting,
    ) -> Result<Self> {
        let weighting = match &calibrator {
            Some(c) => {
                c.check(
                    &embedder.encoder,
                    &pooling,
                    embedder.prompt.as_ref(),
                    &*embedder.progress,
                )?;
                ResolvedWeighting::of_calibrator(weighting, c.weights()?, &c.path)?
            }
            None => ResolvedWeighting::asked(weighting, &embedder.encoder, &pooling)?,
        };
        let source = crate::runtime::st_pipeline::source(&embedder.encoder, &pooling)?;
        crate::runtime::prompt::check_source(embedder.prompt.as_ref(), &source)?;
        Ok(Self {
            embedder,
            pooling,
            source,
            calibrator,
            weighting,
        })
    }

    /// The token weighting and the weights in use.
    pub fn weighting(&self) -> &ResolvedWeighting {
        &self.weighting
    }

    /// Takes the weights a calibrator file records (see
    /// [`ResolvedWeighting::adopt_record`]).
    pub fn use_weights_of(&mut self, record: Option<&WeightingMeta>) -> Result<()> {
        self.weighting.adopt_record(record)
    }

    /// Counts the weighting's word-piece frequencies on `corpus` when they
    /// are still unknown; with `again`, whatever they were
    /// ([`ResolvedWeighting::count`], [`ResolvedWeighting::recount`]).
    pub fn count_weights(&mut self, corpus: &[String], again: bool) -> Result<()> {
        let encoder = &self.embedder.encoder;
        if again {
            self.weighting.recount(encoder, corpus)
        } else {
            self.weighting.count(encoder, corpus)
        }
    }

    /// The raw (uncalibrated) embeddings of `texts`, through the cache.
    pub fn embed(&self, texts: &[String]) -> Result<Array2<f32>> {
        let weights = self.weighting.require()?;
        self.embedder.embed_weighted(texts, &self.pooling, weights)
    }

    /// The calibrated embeddings of `texts` (through the cache).
    pub fn encode(&self, texts: &[String]) -> Result<Array2<f32>> {
        let raw = self.embed(texts)?;
        self.calibrate(raw)
    }

    /// The prompt before every text by default (see [`crate::runtime::prompt`]).
    pub fn prompt(&self) -> Option<&Prompt> {
        self.embedder.prompt.as_ref()
    }

    /// The prompt `asked` resolves to ([`crate::runtime::prompt::resolve`]; asking
    /// for nothing is the pipeline's own), checked against the pooling and
    /// the calibrator's recorded prompt like the pipeline's own.
    pub fn resolve_prompt(&self, asked: &PromptConfig) -> Result<Option<Prompt>> {
        if asked.is_default() {
            return Ok(self.embedder.prompt.clone());
        }
        let prompt = self.embedder.resolve_prompt(asked)?;
        crate::runtime::prompt::check_source(prompt.as_ref(), &self.source)?;
        if let Some(c) = &self.calibrator {
            c.check(
                &self.embedder.encoder,
                &self.pooling,
                prompt.as_ref(),
                &*self.embedder.progress,
            )?;
        }
        Ok(prompt)
    }

    /// `texts` with the prompt of `prompt_name` before each (`None`: the
    /// pipeline's own prompt), ready for [`Pipeline::embed_batch`] or
    /// [`Pipeline::tokenize`]: the one call the server makes per request. An
    /// unknown name is a [`crate::CoreError::Setting`] naming the known ones.
    pub fn prompt_texts(
        &self,
        texts: Vec<String>,
        prompt_name: Option<&str>,
    ) -> Result<Vec<String>> {
        let asked = PromptConfig {
            prompt_name: prompt_name.map(str::to_string),
            prompt: None,
        };
        Ok(match self.resolve_prompt(&asked)? {
            Some(p) => crate::runtime::prompt::apply(Some(&p), &texts),
            None => texts,
        })
    }

    /// The calibrated embeddings of `texts` with `asked`'s prompt in place
    /// of the pipeline's own (through the cache).
    pub fn encode_prompted(&self, texts: &[String], asked: &PromptConfig) -> Result<Array2<f32>> {
        let prompt = self.resolve_prompt(asked)?;
        let weights = self.weighting.require()?;
        let raw = self
            .embedder
            .embed_prompted(texts, &self.pooling, weights, prompt.as_ref())?;
        self.calibrate(raw)
    }

    /// The raw embeddings of one batch without the cache or progress, with
    /// `opts` (the server: one thread per call). The texts are used as they
    /// are: no prompt is added (see [`Pipeline::prompt_texts`]).
    pub fn embed_batch<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        opts: &EncodeOptions,
    ) -> Result<Batch> {
        let weights = self.weighting.require()?;
        let out = self.embedder.encoder.encode_weighted(
            texts,
            std::slice::from_ref(&self.source),
            opts,
            weights,
            &|_| {},
        )?;
        Batch::of_one_pooling(out)
    }

    /// Scales every row to unit length (after the calibrator: cosine becomes
    /// a dot product); a zero row stays zero (torch's `F.normalize`).
    pub fn normalize(m: &mut Array2<f32>) {
        for mut row in m.rows_mut() {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            row.iter_mut().for_each(|v| *v /= norm);
        }
    }

    /// Applies the calibrator (if any) to raw embeddings.
    pub fn calibrate(&self, raw: Array2<f32>) -> Result<Array2<f32>> {
        match &self.calibrator {
            Some(c) => c.apply(raw.view()),
            None => Ok(raw),
        }
    }

    /// Length of the vectors made.
    pub fn dimension(&self) -> usize {
        self.calibrator.as_ref().map_or_else(
            || self.source.dim(self.embedder.encoder.dim()),
            |c| c.fitted.output_dim(),
        )
    }

    /// Where inputs are truncated, in tokens: the encoder's `--max-len`, or for
    /// `st` what the sentence-transformers directory says (capped by it).
    pub fn max_len(&self) -> usize {
        match &self.source {
            PoolSource::St(head) => head.max_len,
            _ => self.embedder.encoder.max_len(),
        }
    }

    /// `text`'s token ids exactly as this pipeline feeds them to the model
    /// (`st` lowercases and truncates as its directory says), and whether it
    /// was truncated.
    pub fn tokenize(&self, text: &str) -> Result<(Vec<u32>, bool)> {
        Ok(self
            .embedder
            .encoder
            .tokenize_for(text, Some(&self.source))?)
    }

    /// What it makes.
    pub fn info(&self) -> PipelineInfo {
        let enc = &self.embedder.encoder;
        PipelineInfo {
            model_id: enc.model_id().to_string(),
            model: model_identity(enc),
            pooling: self.pooling.to_string(),
            weighting: self.weighting.label(),
            calibrator: self.calibrator.as_ref().map(LoadedCalibrator::describe),
            dimension: self.dimension(),
            max_len: self.max_len(),
            precision: enc.precision().to_string(),
            prompt: self.prompt().map(Prompt::describe),
        }
    }

    /// The identity of the vectors it makes, as a `bertflow index` records it.
    #[cfg(feature = "index")]
    pub fn identity(&self) -> Result<bertflow_index::Identity> {
        let calibrator = match &self.calibrator {
            Some(c) => Some(format!(
                "{} {}",
                c.describe(),
                bertflow_index::file_digest(&c.path)?
            )),
            None => None,
        };
        Ok(bertflow_index::Identity {
            model: model_identity(&self.embedder.encoder),
            pooling: self.pooling.to_string(),
            calibrator,
            dimension: self.dimension(),
            precision: self.embedder.encoder.precision().to_string(),
        })
    }

    pub fn encoder(&self) -> &Encoder {
        &self.embedder.encoder
    }

    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    /// The embedder, to change how it runs (batch size, progress).
    pub fn embedder_mut(&mut self) -> &mut Embedder {
        &mut self.embedder
    }

    pub fn pooling(&self) -> &Pooling {
        &self.pooling
    }

    pub fn calibrator(&self) -> Option<&LoadedCalibrator> {
        self.calibrator.as_ref()
    }

    /// The embedder and the calibrator, for workflows that take them apart
    /// (the STS grid).
    pub fn into_parts(self) -> (Embedder, Option<LoadedCalibrator>) {
        (self.embedder, self.calibrator)
    }
}
