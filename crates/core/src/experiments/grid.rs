//! The experiment grid behind `eval`, `compare` and `report`: evaluation sets x
//! poolings x calibrators. Every sentence set is encoded once for all poolings
//! (through the cache); calibrators are fitted per task on that task's own
//! sentences (`--on target`, as the papers do), on a train split, or once on a
//! user's sentence file.
use crate::bail;
use crate::error::{Context, Result};
use crate::runtime::calibration::{self as calib, LoadedCalibrator};
use crate::runtime::embedder::Embedder;
use crate::runtime::weighting::Weighting;
use bertflow_calib::{CalibSpec, Calibrator, Fitted};
use bertflow_encoder::Pooling;
use bertflow_eval::{
    average, dedup_preserving_order, evaluate, fit_sentences, load_pairs_file, load_task,
    unique_sentences, Aggregate, EvalSet, FitCorpus, Task, TaskResult,
};
use ndarray::Array2;
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where per-task calibrators are fitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FitOn {
    /// Every sentence of the task being evaluated (labels unused): all splits of
    /// STS-B, train+trial+test of SICK-R, every scored pair of an STS year.
    Target,
    /// Like `Target`, but STS15/16 also contribute their unscored pairs.
    TargetAll,
    /// The task's train split (STS-B, SICK-R only).
    Train,
    /// One sentence file (one per line, or JSONL), for every task.
    File(PathBuf),
}

impl FromStr for FitOn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "target" => FitOn::Target,
            "target-all" => FitOn::TargetAll,
            "train" => FitOn::Train,
            f if Path::new(f).is_file() => FitOn::File(PathBuf::from(f)),
            f => {
                return Err(format!(
                    "'{f}' is neither target, target-all, train nor an existing sentence file"
                ))
            }
        })
    }
}

impl std::fmt::Display for FitOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FitOn::Target => f.write_str("target"),
            FitOn::TargetAll => f.write_str("target-all"),
            FitOn::Train => f.write_str("train"),
            FitOn::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A column of the table: a benchmark task or a user's pair file.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub task: Option<Task>,
    pub set: EvalSet,
}

/// Load the named tasks (in canonical order) and pair files.
pub fn load_targets(data_dir: &Path, tasks: &[Task], pairs: &[PathBuf]) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    if !tasks.is_empty() {
        bertflow_eval::check_data_dir(data_dir, tasks)?;
    }
    for &t in Task::ALL.iter().filter(|t| tasks.contains(t)) {
        let set = load_task(data_dir, t).with_context(|| format!("loading {}", t.name()))?;
        out.push(Target {
            name: t.name().to_string(),
            task: Some(t),
            set,
        });
    }
    for p in pairs {
        let set = load_pairs_file(p)?;
        out.push(Target {
            name: set.name.clone(),
            task: None,
            set,
        });
    }
    if out.is_empty() {
        return Err(crate::CoreError::setting(
            "tasks",
            "nothing to evaluate: give tasks and/or pair files",
        ));
    }
    Ok(out)
}

/// One row of calibration: a kind fitted per task (`none` for the raw row), or a
/// fitted file.
pub enum Calib {
    /// The spec and its label as the user wrote it (the canonical form of a flow
    /// spec lists every hyper-parameter, too long for a table).
    Spec(CalibSpec, String),
    File(Box<LoadedCalibrator>),
}

impl Calib {
    pub fn spec(spec: CalibSpec) -> Self {
        let label = spec.to_string();
        Calib::Spec(spec, label)
    }

    pub fn label(&self) -> String {
        match self {
            Calib::Spec(_, label) => label.clone(),
            Calib::File(f) => match &f.meta.quantizer {
                Some(q) => format!("{} ({} + {})", f.path.display(), f.fitted.kind(), q.spec),
                None => format!("{} ({})", f.path.display(), f.fitted.kind()),
            },
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Calib::Spec(s, _) if s.is_none())
    }
}

/// One row of results.
#[derive(Debug, Clone)]
pub struct Row {
    pub pooling: Pooling,
    /// The token weighting's spec (`mean`: none).
    pub weighting: String,
    pub calibrator: String,
    /// Per target, in the order of the targets.
    pub results: Vec<TaskResult>,
}

/// Sentences a per-task calibrator is fitted on.
fn fit_corpus(data_dir: &Path, target: &Target, on: &FitOn) -> Result<Vec<String>> {
    let v = match (on, target.task) {
        (FitOn::Target, Some(t)) => fit_sentences(data_dir, t, FitCorpus::TargetScored)?,
        (FitOn::TargetAll, Some(t)) => fit_sentences(data_dir, t, FitCorpus::Target)?,
        (FitOn::Train, Some(t)) => fit_sentences(data_dir, t, FitCorpus::Train)?,
        (FitOn::Target | FitOn::TargetAll, None) => unique_sentences(&target.set),
        (FitOn::Train, None) => bail!(
            "{} is a pair file: it has no train split to fit on",
            target.name
        ),
        (FitOn::File(_), _) => unreachable!("file corpora are shared"),
    };
    Ok(dedup_preserving_order(v))
}

/// Everything the grid needs.
pub struct Grid<'a> {
    pub embedder: &'a Embedder,
    pub data_dir: PathBuf,
    pub targets: &'a [Target],
    pub poolings: &'a [Pooling],
    pub calibs: &'a [Calib],
    pub fit_on: FitOn,
    pub aggregate: Aggregate,
    /// Token weighting of the averaging poolings; word-piece frequencies are
    /// counted per task on the sentences its calibrators are fitted on (or
    /// read from the weighting's frequency file).
    pub weighting: Weighting,
}

/// Embeddings of each target's evaluation sentences and fit corpus, per pooling.
pub struct Encoded {
    pub eval_sentences: Vec<Vec<String>>,
    /// [target][pooling]
    pub eval: Vec<Vec<Array2<f32>>>,
    /// [target][pooling] (one shared entry for a file corpus); empty when nothing is fitted.
    pub fit: Vec<Vec<Array2<f32>>>,
}

impl Grid<'_> {
    fn needs_fit(&self) -> bool {
        self.calibs
            .iter()
            .any(|c| matches!(c, Calib::Spec(s, _) if !s.is_none()))
    }

    /// Encode every sentence set the grid needs in one pass (one pass per
    /// target when a weighting counts its frequencies per target).
    pub fn encode(&self) -> Result<Encoded> {
        let eval_sentences: Vec<Vec<String>> = self
            .targets
            .iter()
            .map(|t| unique_sentences(&t.set))
            .collect();
        let weighted = !self.weighting.is_plain_mean();
        let mut fit_sets: Vec<Vec<String>> = Vec::new();
        if self.needs_fit() || self.weighting.needs_corpus() {
            match &self.fit_on {
                FitOn::File(p) => {
                    let input = crate::runtime::io::read_sentences(
                        p,
                        false,
                        crate::runtime::io::EmptyLines::Skip,
                    )?;
                    fit_sets.push(dedup_preserving_order(input.texts));
                }
                on => {
                    for t in self.targets {
                        fit_sets.push(fit_corpus(&self.data_dir, t, on)?);
                    }
                }
            }
        }
        if weighted {
            for p in self.poolings {
                self.weighting.check_pooling(&self.embedder.encoder, p)?;
            }
            return self.encode_weighted(eval_sentences, fit_sets);
        }
        let all: Vec<&[String]> = eval_sentences
            .iter()
            .chain(&fit_sets)
            .map(|v| v.as_slice())
            .collect();
        let mut mats = self.embedder.embed_sets(&all, self.poolings)?;
        let fit = mats.split_off(eval_sentences.len());
        Ok(Encoded {
            eval_sentences,
            eval: mats,
            fit,
        })
    }

    /// Per target: the weights from its fit corpus (or the frequency file),
    /// then its evaluation sentences and fit corpus embedded with them.
    fn encode_weighted(
        &self,
        eval_sentences: Vec<Vec<String>>,
        fit_sets: Vec<Vec<String>>,
    ) -> Result<Encoded> {
        let (mut eval, mut fit) = (Vec::new(), Vec::new());
        let empty: Vec<String> = Vec::new();
        for (t, sentences) in eval_sentences.iter().enumerate() {
            let corpus = fit_sets.get(t).or(fit_sets.first()).unwrap_or(&empty);
            let w = self.weighting.weights(&self.embedder.encoder, corpus)?;
            let mut sets: Vec<&[String]> = vec![sentences];
            if self.needs_fit() {
                sets.push(corpus);
            }
            let mut m = self
                .embedder
                .embed_sets_weighted(&sets, self.poolings, w.as_ref())?;
            if self.needs_fit() {
                fit.push(m.pop().expect("two sets"));
            }
            eval.push(m.pop().expect("one set"));
        }
        Ok(Encoded {
            eval_sentences,
            eval,
            fit,
        })
    }

    /// Run the whole grid: rows in pooling-major order.
    pub fn run(&self) -> Result<(Vec<Row>, Encoded)> {
        let enc = self.encode()?;
        let mut rows = Vec::new();
        for (p, pooling) in self.poolings.iter().enumerate() {
            for calib in self.calibs {
                let mut shared: Option<Fitted> = None;
                let results = score_targets(
                    self.targets,
                    &enc.eval_sentences,
                    self.aggregate,
                    &format!(" ({pooling}, {})", calib.label()),
                    |t| {
                        let y = self.calibrated(calib, pooling, &enc, t, p, &mut shared)?;
                        Ok(y.map_or(Cow::Borrowed(&enc.eval[t][p]), Cow::Owned))
                    },
                )?;
                rows.push(Row {
                    pooling: pooling.clone(),
                    weighting: self.weighting.label(),
                    calibrator: calib.label(),
                    results,
                });
            }
        }
        Ok((rows, enc))
    }

    /// The calibrated evaluation embeddings of target `t`, or None for no calibration.
    pub fn calibrated(
        &self,
        calib: &Calib,
        pooling: &Pooling,
        enc: &Encoded,
        t: usize,
        p: usize,
        shared: &mut Option<Fitted>,
    ) -> Result<Option<Array2<f32>>> {
        let x = &enc.eval[t][p];
        Ok(match calib {
            Calib::Spec(spec, _) if spec.is_none() => None,
            Calib::Spec(spec, _) => {
                let fitted = match (&self.fit_on, shared.as_ref()) {
                    (FitOn::File(_), Some(f)) => f.clone(),
                    (FitOn::File(_), None) => {
                        let f = calib::fit(
                            spec,
                            enc.fit[0][p].view(),
                            &format!("{pooling}"),
                            &*self.embedder.progress,
                        )?;
                        *shared = Some(f.clone());
                        f
                    }
                    _ => calib::fit(
                        spec,
                        enc.fit[t][p].view(),
                        &format!("{} {pooling}", self.targets[t].name),
                        &*self.embedder.progress,
                    )?,
                };
                Some(fitted.transform(x.view())?)
            }
            Calib::File(f) => {
                f.check(
                    &self.embedder.encoder,
                    pooling,
                    self.embedder.prompt.as_ref(),
                    &*self.embedder.progress,
                )?;
                if !self.weighting.matches_record(f.meta.weighting.as_ref()) {
                    crate::bail!(
                        "calibrator {} was fitted with weighting {}: evaluate it with the file's own weights",
                        f.path.display(),
                        f.meta.weighting.as_ref().map(|w| w.spec.as_str()).unwrap_or("mean")
                    );
                }
                Some(crate::runtime::quantize::apply_for_scoring(f, x.view())?)
            }
        })
    }
}

/// The per-task loop of `eval` (and of every grid row): for each target in
/// order, `vectors(t)` gives the (calibrated) embeddings of its distinct
/// sentences `sentences[t]`, one row each, which are scored against the gold
/// with `aggregate`. Errors name the target, followed by `what`. Python's
/// `bertflow.sts.evaluate` runs the same loop with its own embedding function.
pub fn score_targets<'a>(
    targets: &[Target],
    sentences: &[Vec<String>],
    aggregate: Aggregate,
    what: &str,
    mut vectors: impl FnMut(usize) -> Result<Cow<'a, Array2<f32>>>,
) -> Result<Vec<TaskResult>> {
    crate::ensure!(
        targets.len() == sentences.len(),
        "{} targets but {} sentence lists",
        targets.len(),
        sentences.len()
    );
    let mut results = Vec::with_capacity(targets.len());
    for (t, target) in targets.iter().enumerate() {
        let y = vectors(t)?;
        let r = evaluate(&target.set, &sentences[t], y.view(), aggregate)
            .with_context(|| format!("evaluating {}{what}", target.name))?;
        results.push(r);
    }
    Ok(results)
}

/// Calibrator rows from a list such as "none,whiten:k=5,flow:seed=1,epochs=2" (see
/// [`crate::runtime::parse::spec_list`] for the rule); each label is the spec as written.
pub fn parse_calibs(s: &str) -> Result<Vec<Calib>> {
    Ok(crate::runtime::parse::spec_list::<CalibSpec>("kinds", s)?
        .into_iter()
        .map(|(spec, label)| Calib::Spec(spec, label))
        .collect())
}

/// JSON objects for rows: {"pooling", "calibrator", "tasks": {...}, "average": {...}}.
pub fn rows_json(targets: &[Target], rows: &[Row], per_subset: bool) -> Vec<Value> {
    rows.iter()
        .map(|row| {
            let mut tasks = Map::new();
            for (t, r) in targets.iter().zip(&row.results) {
                let mut o = json!({"spearman": round2(r.spearman), "pearson": round2(r.pearson), "pairs": r.pairs});
                if per_subset && r.subsets.len() > 1 {
                    o["subsets"] = r
                        .subsets
                        .iter()
                        .map(|s| (s.name.clone(), json!({"spearman": round2(s.spearman), "pearson": round2(s.pearson), "pairs": s.pairs})))
                        .collect::<Map<_, _>>()
                        .into();
                }
                tasks.insert(t.name.clone(), o);
            }
            let avg = average(&row.results);
            let calibrator = if row.calibrator == "none" { Value::Null } else { json!(row.calibrator) };
            json!({
                "pooling": row.pooling.to_string(),
                "weighting": row.weighting,
                "calibrator": calibrator,
                "tasks": tasks,
                "average": avg.map(|a| json!({"spearman": round2(a.spearman), "pearson": round2(a.pearson)})),
            })
        })
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
