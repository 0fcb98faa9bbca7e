//! `eval` as a workflow: one model, pooling, weighting and calibrator (a
//! calibrator file's, a kind fitted per task, or none) scored on STS tasks and
//! pair files. [`Evaluation::run`] returns the report; the CLI prints it as a
//! table ([`Evaluation::render`]) or JSON ([`Evaluation::to_json`]), as
//! [`crate::experiments::compare::Comparison`] does for the grid of several rows.
use crate::calib::CalibSpec;
use crate::error::{CoreError, Result};
use crate::experiments::grid::{rows_json, Calib, FitOn, Grid, Row, Target};
use crate::runtime::pipeline::Pipeline;
use bertflow_eval::{render_table, Aggregate};
use serde_json::{json, Value};
use std::path::PathBuf;

/// What to evaluate besides the pipeline.
#[derive(Debug, Clone)]
pub struct EvalSpec<'a> {
    /// STS data folder.
    pub data_dir: PathBuf,
    /// Tasks and pair files, in column order.
    pub targets: &'a [Target],
    /// A kind fitted per task on `fit_on` (instead of the pipeline's file).
    pub fit: Option<CalibSpec>,
    /// Where per-task calibrators (and corpus-counted weights) are fitted.
    pub fit_on: FitOn,
    /// How STS12-16 subsets are combined.
    pub aggregate: Aggregate,
}

/// The scores of one evaluation.
#[derive(Debug)]
pub struct Evaluation<'a> {
    /// The model's id.
    pub model: String,
    /// The targets scored, in column order.
    pub targets: &'a [Target],
    /// How STS12-16 subsets were combined.
    pub aggregate: Aggregate,
    /// Whether a calibrator was applied (a file's, or one fitted per task).
    pub calibrated: bool,
    /// Where per-task calibrators were fitted (reported when `calibrated`).
    pub fit_on: FitOn,
    /// The row of scores.
    pub row: Row,
    label: String,
}

impl<'a> Evaluation<'a> {
    /// Scores `pipeline` (its pooling, weighting and calibrator file; `spec.fit`
    /// fits a kind per task instead) on `spec.targets`. A fit corpus other than
    /// the targets is a setting error unless something is fitted or counted on it.
    pub fn run(pipeline: Pipeline, spec: &EvalSpec<'a>) -> Result<Self> {
        let pooling = pipeline.pooling().clone();
        let weighting = pipeline.weighting().for_grid();
        let (embedder, calibrator) = pipeline.into_parts();
        let calib = match (&spec.fit, calibrator) {
            (Some(kind), _) => Calib::spec(kind.clone()),
            (None, Some(f)) => Calib::File(Box::new(f)),
            (None, None) => Calib::spec(CalibSpec::none()),
        };
        if spec.fit.is_none() && !weighting.needs_corpus() && spec.fit_on != FitOn::Target {
            return Err(CoreError::setting(
                "on",
                "applies only when a calibrator kind is fitted per task (or a weighting is counted on the fit corpus)",
            ));
        }
        let calibs = [calib];
        let grid = Grid {
            embedder: &embedder,
            data_dir: spec.data_dir.clone(),
            targets: spec.targets,
            poolings: std::slice::from_ref(&pooling),
            calibs: &calibs,
            fit_on: spec.fit_on.clone(),
            aggregate: spec.aggregate,
            weighting,
        };
        let (mut rows, _) = grid.run()?;
        let row = rows.remove(0);
        let pooled = match row.weighting.as_str() {
            "mean" => pooling.to_string(),
            w => format!("{pooling}[{w}]"),
        };
        let calibrated = !calibs[0].is_none();
        let label = if calibrated {
            format!("{pooled} + {}", calibs[0].label())
        } else {
            pooled
        };
        Ok(Evaluation {
            model: embedder.encoder.model_id().to_string(),
            targets: spec.targets,
            aggregate: spec.aggregate,
            calibrated,
            fit_on: spec.fit_on.clone(),
            row,
            label,
        })
    }

    /// One JSON object: the row (`pooling`, `weighting`, `calibrator`, `tasks`,
    /// `average`) with `model`, `aggregate` and, when calibrated, `fit_on`.
    pub fn to_json(&self, per_subset: bool) -> Value {
        let mut v = rows_json(self.targets, std::slice::from_ref(&self.row), per_subset).remove(0);
        if let Some(obj) = v.as_object_mut() {
            obj.insert("model".into(), json!(self.model));
            obj.insert("aggregate".into(), json!(self.aggregate.name()));
            if self.calibrated {
                obj.insert("fit_on".into(), json!(self.fit_on.to_string()));
            } else {
                obj.insert("calibrator".into(), Value::Null);
            }
        }
        v
    }

    /// The table: one row of Spearman x100 per target and the average, then
    /// (with `per_subset`) one table per STS12-16 task of its subsets.
    pub fn render(&self, per_subset: bool) -> String {
        let columns: Vec<String> = self.targets.iter().map(|t| t.name.clone()).collect();
        let cells = self.row.results.iter().map(|r| Some(r.spearman)).collect();
        let mut out = format!(
            "{}, Spearman x100 (aggregate: {})\n{}\n",
            self.model,
            self.aggregate.name(),
            render_table("pooling", &columns, &[(self.label.clone(), cells)], true)
        );
        if per_subset {
            for (t, r) in self.targets.iter().zip(&self.row.results) {
                if r.subsets.len() > 1 {
                    let cols: Vec<String> = r.subsets.iter().map(|s| s.name.clone()).collect();
                    let cells = r.subsets.iter().map(|s| Some(s.spearman)).collect();
                    out.push_str(&format!(
                        "\n{}\n{}\n",
                        t.name,
                        render_table("subset", &cols, &[(t.name.clone(), cells)], false)
                    ));
                }
            }
        }
        out
    }
}
