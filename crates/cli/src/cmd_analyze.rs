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
//! The functions here are shared with `bertflow report`.
use crate::args::{parse_pooling, DataArgs, ModelArgs};
use crate::embed::Embedder;
use crate::grid::FitOn;
use crate::progress;
use anyhow::{bail, Context, Result};
use bertflow_analysis::{
    alignment_uniformity, anisotropy, char_tokens, edit_distance, frequency_geometry, lexical_bias,
    norm_vs_rank_figure, render_png, render_svg, similarity_vs_edit_figure,
    similarity_vs_gold_figure, spectrum, spectrum_figure, word_tokens, AlignmentUniformity,
    Anisotropy, FrequencyConfig, FrequencyGeometry, LexicalBias, ReportFigure, Spectrum,
    UniformityMode,
};
use bertflow_calib::{CalibSpec, Calibrator};
use bertflow_encoder::Pooling;
use bertflow_eval::{
    dedup_preserving_order, fit_sentences, load_split, FitCorpus, Pair, Split, Task,
};
use clap::{Args, ValueEnum};
use ndarray::{Array2, ArrayView2, Axis};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Gold score from which an STS-B dev pair counts as a positive pair for alignment.
pub const POSITIVE_GOLD: f64 = 4.0;

/// What the edit distance of a sentence pair counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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

/// Parses a comma-separated list of calibrator specs. Options of a spec may follow
/// it with commas too: `none,flow:levels=2,steps=2,whiten` is none, the flow with
/// both options, and whiten (an item `key=value` without `:` continues the previous
/// spec). `none` is added in front when missing; repeated kinds are dropped.
pub fn parse_kinds(s: &str) -> Result<Kinds, String> {
    let mut items: Vec<String> = Vec::new();
    for piece in s.split(',') {
        let p = piece.trim();
        match items.last_mut() {
            Some(last) if p.contains('=') && !p.contains(':') => {
                last.push(',');
                last.push_str(p);
            }
            _ => items.push(p.to_string()),
        }
    }
    let mut specs = vec![CalibSpec::None];
    for item in items {
        if item.is_empty() {
            return Err(format!(
                "empty calibrator kind in '{s}'; give a comma-separated list such as none,flow,whiten"
            ));
        }
        let spec: CalibSpec = item
            .parse()
            .map_err(|e| format!("unknown calibrator kind '{item}': {e}"))?;
        if !specs.contains(&spec) {
            specs.push(spec);
        }
    }
    Ok(Kinds(specs))
}

/// Options shared by `analyze` and `report`.
#[derive(Args, Debug, Clone)]
pub struct AnalysisOpts {
    #[command(flatten)]
    pub data: DataArgs,
    /// Calibrator kinds, comma-separated: none, flow, whiten, whiten:k=N, sn, natsv:k=N,
    /// sn+natsv:k=N (options of a kind may follow it: flow:levels=2,steps=2).
    /// none (the uncalibrated baseline) is always included.
    #[arg(long, default_value = "none,flow,whiten", value_parser = parse_kinds, value_name = "KINDS")]
    pub kinds: Kinds,
    /// Sentences the calibrators are fitted on: target (every STS-B sentence, train +
    /// dev + test, labels unused; for the STS table of `report`, each task's own
    /// sentences), train (the STS-B train split), or a file of sentences (one per line).
    #[arg(long, default_value = "target", value_name = "target|train|FILE")]
    pub on: FitOn,
    /// Unit of the edit distance between the two sentences of a pair.
    #[arg(long, value_enum, default_value_t = EditUnit::Wordpiece, value_name = "UNIT")]
    pub edit_unit: EditUnit,
    /// Pairs with edit distance <= this form the "small edit distance" subset
    /// (the paper uses 4).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub edit_threshold: usize,
    /// Corpus for word-piece frequencies, one sentence per line (or .jsonl with a
    /// "text" field), counted as given [default: every sentence of the seven STS
    /// tasks, all splits, deduplicated].
    #[arg(long, value_name = "FILE")]
    pub freq_corpus: Option<PathBuf>,
    /// Nearest neighbours for the word-embedding distance per frequency bucket.
    #[arg(long, default_value_t = 3, value_name = "K")]
    pub knn: usize,
    /// At most this many (seeded, random) kNN query tokens per frequency bucket.
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub knn_queries: usize,
    /// Random sentence pairs for the mean random-pair cosine.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub random_pairs: usize,
    /// Seed of the random pairs and the kNN query subsets.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    #[command(flatten)]
    pub opts: AnalysisOpts,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Write the figures (PNG and SVG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
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
    pub fn load(embedder: &Embedder, opts: &AnalysisOpts) -> Result<Self> {
        let dir = opts.data.dir();
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
                let input = crate::io::read_sentences(p, false, crate::io::EmptyLines::Skip)?;
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
}

impl PoolingResult {
    pub fn kind(&self, spec: &CalibSpec) -> Option<&KindResult> {
        self.kinds.iter().find(|k| &k.spec == spec)
    }
}

fn cosine(a: ndarray::ArrayView1<f32>, b: ndarray::ArrayView1<f32>) -> f64 {
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// Encodes what the analyses need for every pooling (one pass, through the cache),
/// fits each kind on the fit corpus and runs the analyses.
pub fn analyse(
    embedder: &Embedder,
    data: &StsbData,
    poolings: &[Pooling],
    opts: &AnalysisOpts,
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
    let pb = progress::bar(
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
            let (dev_y, all_y, fitted) = if *spec == CalibSpec::None {
                (None, None, None)
            } else {
                let f = crate::calib::fit(spec, fit_x.view(), &format!("{pooling} {spec}"))?;
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
        out.push(PoolingResult {
            pooling: pooling.clone(),
            kinds: results,
        });
    }
    pb.finish_and_clear();
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
    opts: &AnalysisOpts,
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

/// Word-frequency geometry of the model's static word embeddings.
pub struct FrequencyResult {
    pub geometry: FrequencyGeometry,
    /// What the counts were taken on.
    pub corpus: String,
    pub n_sentences: usize,
    /// Word pieces counted.
    pub n_tokens: u64,
}

/// Counts word pieces on the corpus and measures norms and kNN distances.
pub fn frequency(embedder: &Embedder, opts: &AnalysisOpts) -> Result<FrequencyResult> {
    let (sentences, corpus) = match &opts.freq_corpus {
        Some(p) => {
            let input = crate::io::read_sentences(p, false, crate::io::EmptyLines::Skip)?;
            (input.texts, p.display().to_string())
        }
        None => {
            let dir = opts.data.dir();
            bertflow_eval::check_data_dir(&dir, &Task::ALL)?;
            let mut v = Vec::new();
            for t in Task::ALL {
                v.extend(fit_sentences(&dir, t, FitCorpus::Target)?);
            }
            let v = dedup_preserving_order(v);
            let d = format!(
                "every sentence of the seven STS tasks, all splits ({} distinct)",
                v.len()
            );
            (v, d)
        }
    };
    let words = embedder.encoder.model().word_embeddings();
    let (vocab, hidden) = words.dims2()?;
    let flat: Vec<f32> = words.flatten_all()?.to_vec1::<f32>()?;
    let emb = Array2::from_shape_vec((vocab, hidden), flat)?;
    let counts = count_word_pieces(embedder, &sentences, vocab)?;
    let n_tokens = counts.iter().sum();
    let config = FrequencyConfig {
        k: opts.knn,
        max_queries_per_bucket: Some(opts.knn_queries.max(1)),
        seed: opts.seed,
        ..FrequencyConfig::default()
    };
    let pb = progress::bar(1, "word kNN", "steps");
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    let geometry = frequency_geometry(&counts, emb.view(), &config)?;
    pb.finish_and_clear();
    Ok(FrequencyResult {
        geometry,
        corpus,
        n_sentences: sentences.len(),
        n_tokens,
    })
}

/// Occurrences of each word-piece id (ids beyond the embedding matrix are ignored).
fn count_word_pieces(embedder: &Embedder, sentences: &[String], vocab: usize) -> Result<Vec<u64>> {
    let tok = embedder.encoder.tokenizer();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let chunk = sentences.len().div_ceil(threads).max(1);
    let pb = progress::bar(sentences.len() as u64, "counting", "sentences");
    let parts: Vec<Result<Vec<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = sentences
            .chunks(chunk)
            .map(|part| {
                let pb = pb.clone();
                s.spawn(move || -> Result<Vec<u64>> {
                    let mut counts = vec![0u64; vocab];
                    for (i, text) in part.iter().enumerate() {
                        for id in tok.word_pieces(text)? {
                            if let Some(c) = counts.get_mut(id as usize) {
                                *c += 1;
                            }
                        }
                        if i % 256 == 255 {
                            pb.inc(256);
                        }
                    }
                    Ok(counts)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a counting thread panicked")))
            })
            .collect()
    });
    pb.finish_and_clear();
    let mut total = vec![0u64; vocab];
    for part in parts {
        for (t, c) in total.iter_mut().zip(part?) {
            *t += c;
        }
    }
    Ok(total)
}

/// A file-name-safe version of `s`.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// Short name of a spec: the kind alone when its options are the defaults
/// (`flow`, `whiten`), else the full spec.
pub fn spec_name(spec: &CalibSpec) -> String {
    match spec.kind().parse::<CalibSpec>() {
        Ok(default) if default == *spec => spec.kind().to_string(),
        _ => spec.to_string(),
    }
}

fn kind_label(spec: &CalibSpec) -> String {
    if *spec == CalibSpec::None {
        "uncalibrated".to_string()
    } else {
        spec_name(spec)
    }
}

/// "pooling" or "pooling + kind".
pub fn method_label(pooling: &Pooling, spec: &CalibSpec) -> String {
    if *spec == CalibSpec::None {
        pooling.to_string()
    } else {
        format!("{pooling} + {}", spec_name(spec))
    }
}

/// The figures of one pooling: the spectrum of every kind, and per kind the
/// similarity against gold and against edit distance on STS-B dev.
pub fn pooling_figures(r: &PoolingResult, data: &StsbData) -> Vec<ReportFigure> {
    let pooling = r.pooling.to_string();
    let named: Vec<(String, &Spectrum)> = r
        .kinds
        .iter()
        .map(|k| (kind_label(&k.spec), &k.spectrum))
        .collect();
    let refs: Vec<(&str, &Spectrum)> = named.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut figs = vec![ReportFigure {
        id: format!("spectrum-{}", slug(&pooling)),
        caption: format!(
            "Normalised singular values of the centred embeddings of every STS-B sentence, {pooling}, before and after calibration"
        ),
        figure: spectrum_figure(&format!("Singular spectrum ({pooling})"), &refs),
        width: 800,
        height: 500,
    }];
    for k in &r.kinds {
        let label = kind_label(&k.spec);
        let name = method_label(&r.pooling, &k.spec);
        figs.push(ReportFigure {
            id: format!("sim-vs-gold-{}-{}", slug(&pooling), slug(&label)),
            caption: format!("Cosine similarity against gold score, STS-B dev, {name}"),
            figure: similarity_vs_gold_figure(
                &format!("Similarity vs gold ({name})"),
                &k.sims,
                &data.gold,
            ),
            width: 800,
            height: 500,
        });
        figs.push(ReportFigure {
            id: format!("sim-vs-edit-{}-{}", slug(&pooling), slug(&label)),
            caption: format!(
                "Cosine similarity against edit distance ({}), STS-B dev, {name}",
                data.edit_unit.name()
            ),
            figure: similarity_vs_edit_figure(
                &format!("Similarity vs edit distance ({name})"),
                &k.sims,
                &data.edits,
            ),
            width: 800,
            height: 500,
        });
    }
    figs
}

/// The norm-vs-frequency-rank figure.
pub fn frequency_figure(f: &FrequencyResult) -> ReportFigure {
    ReportFigure {
        id: "norm-vs-rank".into(),
        caption: format!(
            "l2 norm of each word piece's static embedding against its frequency rank (counted on {})",
            f.corpus
        ),
        figure: norm_vs_rank_figure("Word-embedding norm vs frequency rank", &f.geometry),
        width: 800,
        height: 500,
    }
}

/// Writes `<id>.png` and `<id>.svg` for each figure into `dir`; returns the paths.
pub fn write_plots(dir: &Path, figs: &[ReportFigure]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let pb = progress::bar(figs.len() as u64, "plotting", "figures");
    let mut paths = Vec::new();
    for f in figs {
        let png = render_png(&f.figure, f.width, f.height)?;
        let svg = render_svg(&f.figure, f.width, f.height)?;
        for (ext, bytes) in [("png", png.as_slice()), ("svg", svg.as_bytes())] {
            let p = dir.join(format!("{}.{ext}", f.id));
            std::fs::write(&p, bytes).with_context(|| format!("cannot write {}", p.display()))?;
            paths.push(p);
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(paths)
}

fn opt_json(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

/// The JSON form of one pooling's results: {kind: {...}}.
pub fn pooling_json(r: &PoolingResult) -> Value {
    let mut kinds = Map::new();
    for k in &r.kinds {
        let s = &k.spectrum;
        kinds.insert(
            spec_name(&k.spec),
            json!({
                "spec": k.spec.to_string(),
                "calibrator": k.fitted,
                "anisotropy": k.anisotropy,
                "spectrum": {
                    "variance_share_top1": s.variance_share_top1,
                    "variance_share_top5": s.variance_share_top5,
                    "variance_share_top10": s.variance_share_top10,
                    "effective_rank": s.effective_rank,
                    "n_sentences": s.n_sentences,
                    "dim": s.dim,
                    "singular_values_normalised": s.singular_values_normalised,
                },
                "lexical_bias": k.lexical,
                "alignment_uniformity": k.align,
            }),
        );
    }
    Value::Object(kinds)
}

/// The JSON form of the frequency result (without the per-token points).
pub fn frequency_json(f: &FrequencyResult) -> Value {
    json!({
        "corpus": f.corpus,
        "sentences": f.n_sentences,
        "word_pieces": f.n_tokens,
        "k": f.geometry.k,
        "vocab_size": f.geometry.vocab_size,
        "seen_tokens": f.geometry.n_seen_tokens,
        "buckets": f.geometry.buckets,
    })
}

/// The model-free numbers of the data set.
pub fn dataset_json(data: &StsbData) -> Value {
    json!({
        "task": "STS-B dev",
        "edit_unit": data.edit_unit.name(),
        "pairs": data.dev_pairs.len(),
        "spearman_gold_vs_edit": opt_json(data.gold_vs_edit()),
        "mean_edit_distance": data.edits.iter().sum::<usize>() as f64 / data.edits.len().max(1) as f64,
        "threshold": data.edit_threshold,
        "n_small": data.edits.iter().filter(|&&e| e <= data.edit_threshold).count(),
    })
}

fn fmt_opt(v: Option<f64>, d: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.d$}"))
}

/// The readable summary of one pooling.
pub fn summary_text(
    model: &str,
    r: &PoolingResult,
    data: &StsbData,
    freq: Option<&FrequencyResult>,
) -> String {
    let mut s = format!("{model}, pooling {}\n", r.pooling);
    for (what, desc) in data.describe_sets() {
        s.push_str(&format!("  {what}: {desc}\n"));
    }
    s.push_str(&format!(
        "\nData set (no model): Spearman(gold, edit distance) x100 = {} on the {} STS-B dev pairs ({})\n\n",
        fmt_opt(data.gold_vs_edit(), 2),
        data.dev_pairs.len(),
        data.edit_unit.name()
    ));
    let header: Vec<String> = r.kinds.iter().map(|k| spec_name(&k.spec)).collect();
    let t = data.edit_threshold;
    let n_small = r.kinds.first().map_or(0, |k| k.lexical.n_small);
    let rows: Vec<(String, Vec<String>)> = vec![
        (
            "Random-pair cosine".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.anisotropy.mean_random_pair_cosine))
                .collect(),
        ),
        (
            "Cosine to mean vector".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.anisotropy.mean_cosine_to_mean))
                .collect(),
        ),
        (
            "Variance share top-1".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.spectrum.variance_share_top1))
                .collect(),
        ),
        (
            "Variance share top-5".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.spectrum.variance_share_top5))
                .collect(),
        ),
        (
            "Variance share top-10".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.spectrum.variance_share_top10))
                .collect(),
        ),
        (
            "Effective rank".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.1}", k.spectrum.effective_rank))
                .collect(),
        ),
        (
            "Spearman(sim, edit) x100".into(),
            r.kinds
                .iter()
                .map(|k| fmt_opt(k.lexical.spearman_sim_vs_edit, 2))
                .collect(),
        ),
        (
            "Spearman(sim, gold) x100".into(),
            r.kinds
                .iter()
                .map(|k| fmt_opt(k.lexical.spearman_sim_vs_gold, 2))
                .collect(),
        ),
        (
            format!("  same, edit <= {t} ({n_small} pairs)"),
            r.kinds
                .iter()
                .map(|k| fmt_opt(k.lexical.spearman_sim_vs_gold_small, 2))
                .collect(),
        ),
        (
            "Alignment (gold >= 4)".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.align.alignment))
                .collect(),
        ),
        (
            "Uniformity".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.align.uniformity))
                .collect(),
        ),
    ];
    let w0 = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|(_, v)| v[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    s.push_str(&format!("{:w0$}", ""));
    for (h, w) in header.iter().zip(&widths) {
        s.push_str(&format!("  {h:>w$}"));
    }
    s.push('\n');
    for (label, vals) in &rows {
        s.push_str(&format!("{label:w0$}"));
        for (v, w) in vals.iter().zip(&widths) {
            s.push_str(&format!("  {v:>w$}"));
        }
        s.push('\n');
    }
    if let Some(f) = freq {
        s.push_str(&format!(
            "\nWord pieces: frequency rank vs the static word embeddings ({} word pieces counted on {})\n",
            f.n_tokens, f.corpus
        ));
        s.push_str(&format!(
            "{:>16}  {:>7}  {:>10}  {:>12}\n",
            "rank range",
            "tokens",
            "mean norm",
            format!("mean {}-NN dist", f.geometry.k)
        ));
        for b in &f.geometry.buckets {
            let range = match b.rank_end {
                Some(e) => format!("[{}, {})", b.rank_start, e),
                None => format!("[{}, inf)", b.rank_start),
            };
            s.push_str(&format!(
                "{range:>16}  {:>7}  {:>10}  {:>12}\n",
                b.n_tokens,
                fmt_opt(b.mean_norm, 4),
                fmt_opt(b.mean_knn_distance, 4)
            ));
        }
    }
    s
}

pub fn run(a: AnalyzeArgs) -> Result<()> {
    if a.opts.knn == 0 {
        bail!("--knn must be at least 1");
    }
    let embedder = a.model.load()?;
    let data = StsbData::load(&embedder, &a.opts)?;
    let results = analyse(&embedder, &data, std::slice::from_ref(&a.pooling), &a.opts)?;
    let r = &results[0];
    let freq = frequency(&embedder, &a.opts)?;
    let model = embedder.encoder.model_id().to_string();
    let mut written = Vec::new();
    if let Some(dir) = &a.plots {
        let mut figs = pooling_figures(r, &data);
        figs.push(frequency_figure(&freq));
        written = write_plots(dir, &figs)?;
    }
    if a.json {
        let sets: Map<String, Value> = data
            .describe_sets()
            .into_iter()
            .map(|(k, v)| (k.replace(' ', "_"), json!(v)))
            .collect();
        let v = json!({
            "model": model,
            "pooling": a.pooling.to_string(),
            "fit_on": a.opts.on.to_string(),
            "sets": sets,
            "lexical_bias": dataset_json(&data),
            "kinds": pooling_json(r),
            "frequency": frequency_json(&freq),
            "plots": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", summary_text(&model, r, &data, Some(&freq)));
        if !written.is_empty() {
            println!(
                "\nwrote {} figure files to {}",
                written.len(),
                a.plots
                    .as_ref()
                    .map_or(String::new(), |d| d.display().to_string())
            );
        }
    }
    Ok(())
}
