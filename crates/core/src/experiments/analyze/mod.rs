//! `bertflow analyze`: the geometry of one pooling's embedding space before and
//! after each calibrator kind: anisotropy, singular spectrum, lexical bias (Li et
//! al. 2020, Table 6), alignment and uniformity (Wang & Isola 2020), and word
//! frequency against the model's static word embeddings (Li et al. 2020, section 2).
//!
//! Which sentences each analysis uses (also stated in the output):
//! * calibrators are fitted on `--on`: by default `target`, every STS-B sentence
//!   (train + dev + test, deduplicated, labels unused) — the very fit
//!   `bertflow eval --fit KIND --on target` makes for the STS-B column;
//! * anisotropy and spectrum: every STS-B sentence (train + dev + test, deduplicated);
//! * lexical bias: the 1500 STS-B dev pairs (the paper's Table 6 uses STS-B dev);
//! * alignment: the STS-B dev pairs with gold score >= 4; uniformity: every distinct
//!   STS-B dev sentence, over all pairs (exact);
//! * word frequency: word pieces counted on `--freq-corpus` (default: every sentence of
//!   the seven STS tasks, all splits, deduplicated); the model's word-embedding matrix.
//!
//! The functions here are shared by `bertflow analyze` and `bertflow report`.
use crate::error::{Context, Result};
use crate::experiments::grid::FitOn;
use crate::runtime::calibration;
use crate::runtime::embedder::Embedder;
use bertflow_analysis::{
    alignment_uniformity, anisotropy, char_tokens, edit_distance, lexical_bias, spectrum,
    word_tokens, AlignmentUniformity, Anisotropy, LexicalBias, Spectrum, UniformityMode,
};
use bertflow_calib::{CalibSpec, Calibrator};
use bertflow_encoder::Pooling;
use bertflow_eval::{
    dedup_preserving_order, fit_sentences, load_split, FitCorpus, Pair, Split, Task,
};
use ndarray::{ArrayView2, Axis};
use std::collections::HashMap;
use std::path::PathBuf;

mod frequency;
mod render;

pub use frequency::{frequency, FrequencyResult};
pub use render::{
    dataset_json, frequency_figure, frequency_json, method_label, pooling_figures, pooling_json,
    slug, spec_name, summary_text, write_plots,
};

/// Gold score from which an STS-B dev pair counts as a positive pair for alignment.
pub const POSITIVE_GOLD: f64 = 4.0;

/// What the edit distance of a sentence pair counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EditUnit {
    /// Word pieces of the model's tokenizer, without [CLS]/[SEP] (the paper's unit).
    Wordpiece,
    /// Unicode characters of the (whitespace-normalised) sentence.
    Char,
    /// Whitespace-separated words.
    Word,
}

impl EditUnit {
    pub fn name(self) -> &'static str {
        match self {
            EditUnit::Wordpiece => "wordpiece",
            EditUnit::Char => "char",
            EditUnit::Word => "word",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            EditUnit::Wordpiece => "word pieces of the model's tokenizer",
            EditUnit::Char => "characters",
            EditUnit::Word => "whitespace-separated words",
        }
    }
}

/// Calibrator kinds to compare; `none` (the uncalibrated baseline) always comes first.
#[derive(Debug, Clone, PartialEq)]
pub struct Kinds(pub Vec<CalibSpec>);

/// Parses a list of calibrator specs by the rule of every list
/// ([`crate::runtime::parse::spec_list`], the same as compare's `--kinds`), then puts
/// `none`, the baseline every analysis compares against, in front when it is
/// not listed.
pub fn parse_kinds(s: &str) -> Result<Kinds, String> {
    let listed =
        crate::runtime::parse::spec_list::<CalibSpec>("kinds", s).map_err(|e| match e {
            crate::CoreError::Setting { message, .. } => message,
            e => e.to_string(),
        })?;
    let mut specs: Vec<CalibSpec> = listed.into_iter().map(|(spec, _)| spec).collect();
    if let Some(i) = specs.iter().position(|s| s.is_none()) {
        let none = specs.remove(i);
        specs.insert(0, none);
    } else {
        specs.insert(0, CalibSpec::none());
    }
    Ok(Kinds(specs))
}

/// Options shared by `analyze` and `report`.
#[derive(Debug, Clone)]
pub struct AnalysisOptions {
    /// STS data folder.
    pub data_dir: PathBuf,
    /// Calibrator kinds; `none` (the uncalibrated baseline) comes first.
    pub kinds: Kinds,
    /// Sentences the calibrators are fitted on (target: every STS-B sentence).
    pub on: FitOn,
    /// Unit of the edit distance between the two sentences of a pair.
    pub edit_unit: EditUnit,
    /// Pairs with edit distance <= this form the "small edit distance" subset.
    pub edit_threshold: usize,
    /// Corpus for word-piece frequencies (default: every STS sentence).
    pub freq_corpus: Option<PathBuf>,
    /// Nearest neighbours for the word-embedding distance per frequency bucket.
    pub knn: usize,
    /// At most this many kNN query tokens per frequency bucket.
    pub knn_queries: usize,
    /// Random sentence pairs for the mean random-pair cosine.
    pub random_pairs: usize,
    /// Seed of the random pairs and the kNN query subsets.
    pub seed: u64,
}

impl AnalysisOptions {
    /// The ranges of the options (core's one check; every front end calls it
    /// through [`StsbData::load`]).
    pub fn check(&self) -> Result<()> {
        if self.knn == 0 {
            return Err(crate::CoreError::setting("knn", "must be at least 1"));
        }
        Ok(())
    }
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        Self {
            data_dir: crate::runtime::defaults::data_dir(None),
            kinds: parse_kinds("none,flow,whiten").expect("valid default kinds"),
            on: FitOn::Target,
            edit_unit: EditUnit::Wordpiece,
            edit_threshold: 4,
            freq_corpus: None,
            knn: 3,
            knn_queries: 2000,
            random_pairs: 100_000,
            seed: 0,
        }
    }
}

/// The STS-B sentences and pairs the analyses run on.
pub struct StsbData {
    /// STS-B dev pairs.
    pub dev_pairs: Vec<Pair>,
    /// Distinct dev sentences, in order of appearance.
    pub dev_sentences: Vec<String>,
    /// Rows of `dev_sentences` of each pair's two sentences.
    pub pair_rows: Vec<(usize, usize)>,
    /// Gold score of each dev pair.
    pub gold: Vec<f64>,
    /// Edit distance of each dev pair.
    pub edits: Vec<usize>,
    pub edit_unit: EditUnit,
    pub edit_threshold: usize,
    /// Every STS-B sentence (train + dev + test), deduplicated.
    pub all_sentences: Vec<String>,
    /// The calibrators' fit corpus; `None` when it is `all_sentences`.
    pub fit_sentences: Option<Vec<String>>,
    /// What the fit corpus is, in words.
    pub fit_description: String,
}

impl StsbData {
    /// Loads STS-B and computes the dev pairs' edit distances.
    pub fn load(embedder: &Embedder, opts: &AnalysisOptions) -> Result<Self> {
        opts.check()?;
        let dir = opts.data_dir.clone();
        let dev = load_split(&dir, Task::StsB, Split::Dev).context("loading STS-B dev")?;
        let dev_pairs: Vec<Pair> = dev.subsets.into_iter().flat_map(|s| s.pairs).collect();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut dev_sentences = Vec::new();
        let mut row = |s: &str| -> usize {
            if let Some(&i) = index.get(s) {
                return i;
            }
            dev_sentences.push(s.to_string());
            index.insert(s.to_string(), dev_sentences.len() - 1);
            dev_sentences.len() - 1
        };
        let pair_rows: Vec<(usize, usize)> =
            dev_pairs.iter().map(|p| (row(&p.s1), row(&p.s2))).collect();
        let gold = dev_pairs.iter().map(|p| p.score).collect();
        let edits = edit_distances(embedder, &dev_pairs, opts.edit_unit)?;
        let all_sentences = dedup_preserving_order(
            fit_sentences(&dir, Task::StsB, FitCorpus::Target).context("loading STS-B")?,
        );
        let n_all = all_sentences.len();
        let (fit_sentences, fit_description) = match &opts.on {
            FitOn::Target | FitOn::TargetAll => (
                None,
                format!("every STS-B sentence (train+dev+test, {n_all} distinct; labels unused)"),
            ),
            FitOn::Train => {
                let v = dedup_preserving_order(fit_sentences(&dir, Task::StsB, FitCorpus::Train)?);
                let d = format!("the STS-B train split ({} distinct sentences)", v.len());
                (Some(v), d)
            }
            FitOn::File(p) => {
                let input = crate::runtime::io::read_sentences(
                    p,
                    false,
                    crate::runtime::io::EmptyLines::Skip,
                )?;
                let v = dedup_preserving_order(input.texts);
                let d = format!("{} ({} distinct sentences)", p.display(), v.len());
                (Some(v), d)
            }
        };
        Ok(Self {
            dev_pairs,
            dev_sentences,
            pair_rows,
            gold,
            edits,
            edit_unit: opts.edit_unit,
            edit_threshold: opts.edit_threshold,
            all_sentences,
            fit_sentences,
            fit_description,
        })
    }

    /// Spearman x100 of the gold scores with the edit distances (no model involved
    /// beyond the tokenizer).
    pub fn gold_vs_edit(&self) -> Option<f64> {
        let e: Vec<f64> = self.edits.iter().map(|&v| v as f64).collect();
        bertflow_analysis::stats::spearman(&self.gold, &e).map(|r| r * 100.0)
    }

    /// Number of dev pairs with gold >= [`POSITIVE_GOLD`].
    pub fn n_positive(&self) -> usize {
        self.gold.iter().filter(|&&g| g >= POSITIVE_GOLD).count()
    }

    /// The sets the analyses use, in words (for the summary, JSON and report).
    pub fn describe_sets(&self) -> Vec<(&'static str, String)> {
        vec![
            ("calibrators fitted on", self.fit_description.clone()),
            (
                "anisotropy and spectrum on",
                format!(
                    "every STS-B sentence (train+dev+test, {} distinct)",
                    self.all_sentences.len()
                ),
            ),
            (
                "lexical bias on",
                format!(
                    "the {} STS-B dev pairs; edit distance over {}",
                    self.dev_pairs.len(),
                    self.edit_unit.describe()
                ),
            ),
            (
                "alignment and uniformity on",
                format!(
                    "STS-B dev: alignment over the {} pairs with gold >= {POSITIVE_GOLD}, uniformity over all {} distinct dev sentences (every pair)",
                    self.n_positive(),
                    self.dev_sentences.len()
                ),
            ),
        ]
    }
}

/// Edit distance of each pair, in `unit`s.
fn edit_distances(embedder: &Embedder, pairs: &[Pair], unit: EditUnit) -> Result<Vec<usize>> {
    let tok = embedder.encoder.tokenizer();
    pairs
        .iter()
        .map(|p| {
            Ok(match unit {
                EditUnit::Wordpiece => {
                    edit_distance(&tok.word_pieces(&p.s1)?, &tok.word_pieces(&p.s2)?)
                }
                EditUnit::Char => edit_distance(&char_tokens(&p.s1), &char_tokens(&p.s2)),
                EditUnit::Word => edit_distance(&word_tokens(&p.s1), &word_tokens(&p.s2)),
            })
        })
        .collect()
}

/// The analyses of one pooling after one calibrator kind.
pub struct KindResult {
    pub spec: CalibSpec,
    /// `describe()` of the fitted calibrator (None for `none`).
    pub fitted: Option<String>,
    pub anisotropy: Anisotropy,
    pub spectrum: Spectrum,
    pub lexical: LexicalBias,
    /// Cosine similarity of each STS-B dev pair.
    pub sims: Vec<f64>,
    pub align: AlignmentUniformity,
}

/// Every kind's analyses for one pooling (the first kind is `none`).
pub struct PoolingResult {
    pub pooling: Pooling,
    pub kinds: Vec<KindResult>,
    /// "Should I calibrate?": the statistics that drive `auto` on the fit
    /// embeddings, its decision and a sentence to act on.
    pub advice: bertflow_calib::Advice,
}

impl PoolingResult {
    pub fn kind(&self, spec: &CalibSpec) -> Option<&KindResult> {
        self.kinds.iter().find(|k| &k.spec == spec)
    }
}

fn cosine(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f64 {
    bertflow_numeric::cosine(a.iter().copied(), b.iter().copied())
}

/// Encodes what the analyses need for every pooling (one pass, through the cache),
/// fits each kind on the fit corpus and runs the analyses.
pub fn analyse(
    embedder: &Embedder,
    data: &StsbData,
    poolings: &[Pooling],
    opts: &AnalysisOptions,
) -> Result<Vec<PoolingResult>> {
    let mut sets: Vec<&[String]> = vec![&data.dev_sentences, &data.all_sentences];
    if let Some(f) = &data.fit_sentences {
        sets.push(f);
    }
    let mut mats = embedder.embed_sets(&sets, poolings)?;
    let fit = if data.fit_sentences.is_some() {
        mats.pop()
    } else {
        None
    };
    let kinds = &opts.kinds.0;
    let pb = embedder.progress.bar(
        (poolings.len() * kinds.len()) as u64,
        "analysing",
        "calibrators",
    );
    let mut out = Vec::new();
    for (p, pooling) in poolings.iter().enumerate() {
        let dev = &mats[0][p];
        let all = &mats[1][p];
        let fit_x = fit.as_ref().map_or(all, |f| &f[p]);
        let mut results = Vec::new();
        for spec in kinds {
            let (dev_y, all_y, fitted) = if spec.is_none() {
                (None, None, None)
            } else {
                let f = calibration::fit(
                    spec,
                    fit_x.view(),
                    &format!("{pooling} {spec}"),
                    &*embedder.progress,
                )?;
                let dev_y = f.transform(dev.view())?;
                let all_y = f.transform(all.view())?;
                (Some(dev_y), Some(all_y), Some(f.describe()))
            };
            let dev_v = dev_y.as_ref().unwrap_or(dev).view();
            let all_v = all_y.as_ref().unwrap_or(all).view();
            let r = analyse_one(data, dev_v, all_v, opts)
                .with_context(|| format!("analysing {pooling} + {spec}"))?;
            results.push(KindResult {
                spec: spec.clone(),
                fitted,
                anisotropy: r.0,
                spectrum: r.1,
                lexical: r.2,
                sims: r.3,
                align: r.4,
            });
            pb.inc(1);
        }
        let advice = bertflow_calib::advise(fit_x.view())
            .with_context(|| format!("advice for {pooling}"))?;
        out.push(PoolingResult {
            pooling: pooling.clone(),
            kinds: results,
            advice,
        });
    }
    pb.finish();
    Ok(out)
}

type OneResult = (
    Anisotropy,
    Spectrum,
    LexicalBias,
    Vec<f64>,
    AlignmentUniformity,
);

fn analyse_one(
    data: &StsbData,
    dev: ArrayView2<f32>,
    all: ArrayView2<f32>,
    opts: &AnalysisOptions,
) -> Result<OneResult> {
    let aniso = anisotropy(all, opts.random_pairs.max(1), opts.seed)?;
    let spec = spectrum(all)?;
    let sims: Vec<f64> = data
        .pair_rows
        .iter()
        .map(|&(a, b)| cosine(dev.row(a), dev.row(b)))
        .collect();
    let lex = lexical_bias(&sims, &data.gold, &data.edits, data.edit_threshold)?;
    let (ia, ib): (Vec<usize>, Vec<usize>) = data
        .pair_rows
        .iter()
        .zip(&data.gold)
        .filter(|(_, &g)| g >= POSITIVE_GOLD)
        .map(|(&r, _)| r)
        .unzip();
    let pos_a = dev.select(Axis(0), &ia);
    let pos_b = dev.select(Axis(0), &ib);
    let au = alignment_uniformity(pos_a.view(), pos_b.view(), dev, UniformityMode::Exact)?;
    Ok((aniso, spec, lex, sims, au))
}
