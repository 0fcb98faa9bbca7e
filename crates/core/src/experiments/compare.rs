//! The comparison behind `bertflow compare` (the paper-style table): poolings x
//! calibrators x token weightings on the STS tasks, for one or more
//! aggregations, as one serialisable report that every front end prints
//! ([`Comparison::to_json`], [`Comparison::render`]).
use crate::error::Result;
use crate::experiments::grid::{rows_json, Calib, FitOn, Grid, Row, Target};
use crate::runtime::embedder::Embedder;
use crate::runtime::weighting::Weighting;
use bertflow_encoder::{Pooling, WeightingSpec};
use bertflow_eval::{average, render_table, Aggregate};
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// What to compare.
pub struct CompareSpec<'a> {
    pub data_dir: PathBuf,
    pub targets: &'a [Target],
    pub poolings: &'a [Pooling],
    pub calibs: &'a [Calib],
    pub weightings: &'a [Weighting],
    pub fit_on: FitOn,
    pub aggregates: &'a [Aggregate],
}

/// The rows of a comparison, per aggregation.
pub struct Comparison {
    pub model: String,
    pub fit_on: String,
    pub targets: Vec<Target>,
    pub aggregates: Vec<Aggregate>,
    /// `[aggregation][row]`, the rows in the same order for every aggregation.
    pub rows: Vec<Vec<Row>>,
}

/// The weightings of a comma-separated list (`mean,usif,sif:a=1e-4`), each
/// with the same frequency file; a field error when the list is empty.
pub fn parse_weightings(list: &str, freq_file: Option<&std::path::Path>) -> Result<Vec<Weighting>> {
    Ok(
        crate::runtime::parse::spec_list::<WeightingSpec>("weighting", list)?
            .into_iter()
            .map(|(spec, _)| Weighting {
                spec,
                freq_file: freq_file.map(|f| f.to_path_buf()),
                fixed: None,
            })
            .collect(),
    )
}

impl Comparison {
    /// Runs one grid per aggregation and weighting. Embeddings come from the
    /// cache after the first; calibrators are refitted (deterministically, so
    /// the rows agree). A weighting other than the mean leaves out the poolings
    /// that do not average.
    pub fn run(embedder: &Embedder, spec: &CompareSpec<'_>) -> Result<Self> {
        let mut all_rows = Vec::new();
        for &aggregate in spec.aggregates {
            let mut rows = Vec::new();
            for w in spec.weightings {
                let poolings: Vec<Pooling> = spec
                    .poolings
                    .iter()
                    .filter(|p| w.check_pooling(&embedder.encoder, p).is_ok())
                    .cloned()
                    .collect();
                if poolings.is_empty() {
                    continue;
                }
                let grid = Grid {
                    embedder,
                    data_dir: spec.data_dir.clone(),
                    targets: spec.targets,
                    poolings: &poolings,
                    calibs: spec.calibs,
                    fit_on: spec.fit_on.clone(),
                    aggregate,
                    weighting: w.clone(),
                };
                rows.extend(grid.run()?.0);
            }
            all_rows.push(rows);
        }
        Ok(Comparison {
            model: embedder.encoder.model_id().to_string(),
            fit_on: spec.fit_on.to_string(),
            targets: spec.targets.to_vec(),
            aggregates: spec.aggregates.to_vec(),
            rows: all_rows,
        })
    }

    /// The first aggregation's rows as `rows` (with `aggregate` naming it), plus,
    /// per row, `averages` under every aggregation, and `by_aggregate` holding
    /// every aggregation's rows.
    pub fn to_json(&self) -> Value {
        let mut by: Map<String, Value> = Map::new();
        for (g, rows) in self.aggregates.iter().zip(&self.rows) {
            by.insert(
                g.name().into(),
                json!(rows_json(&self.targets, rows, false)),
            );
        }
        let mut rows = rows_json(&self.targets, &self.rows[0], false);
        for (i, row) in rows.iter_mut().enumerate() {
            let avgs: Map<String, Value> = self
                .aggregates
                .iter()
                .zip(&self.rows)
                .map(|(g, r)| {
                    let avg = average(&r[i].results).map(|x| (x.spearman * 100.0).round() / 100.0);
                    (g.name().to_string(), json!(avg))
                })
                .collect();
            row["averages"] = Value::Object(avgs);
        }
        json!({
            "model": self.model,
            "aggregate": self.aggregates[0].name(),
            "aggregates": self.aggregates.iter().map(|g| g.name()).collect::<Vec<_>>(),
            "fit_on": self.fit_on,
            "rows": rows,
            "by_aggregate": by,
        })
    }

    /// The tables as text: one per aggregation, then the averages side by
    /// side when there are several.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let columns: Vec<String> = self.targets.iter().map(|t| t.name.clone()).collect();
        for (aggregate, rows) in self.aggregates.iter().zip(&self.rows) {
            let table: Vec<(String, Vec<Option<f64>>)> = rows
                .iter()
                .map(|r| {
                    let cells = r.results.iter().map(|x| Some(x.spearman)).collect();
                    (row_label(r), cells)
                })
                .collect();
            out.push_str(&format!(
                "{}, Spearman x100 (aggregate: {}; calibrators fitted on: {})\n{}\n",
                self.model,
                aggregate.name(),
                self.fit_on,
                render_table("pooling + calibrator", &columns, &table, true)
            ));
        }
        if self.aggregates.len() > 1 {
            let cols: Vec<String> = self
                .aggregates
                .iter()
                .map(|g| format!("Avg. {}", g.name()))
                .collect();
            let table: Vec<(String, Vec<Option<f64>>)> = (0..self.rows[0].len())
                .map(|i| {
                    let cells = self
                        .rows
                        .iter()
                        .map(|rows| average(&rows[i].results).map(|x| x.spearman))
                        .collect();
                    (row_label(&self.rows[0][i]), cells)
                })
                .collect();
            out.push_str(&format!(
                "Averages over the tasks, side by side\n{}\n",
                render_table("pooling + calibrator", &cols, &table, false)
            ));
        }
        out
    }
}

/// "pooling + calibrator", the pooling tagged with its weighting unless mean.
pub fn row_label(r: &Row) -> String {
    match r.weighting.as_str() {
        "mean" => format!("{} + {}", r.pooling, r.calibrator),
        w => format!("{}[{w}] + {}", r.pooling, r.calibrator),
    }
}
