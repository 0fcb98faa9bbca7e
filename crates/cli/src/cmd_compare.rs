//! `bertflow compare`: the paper-style table, poolings x calibrators on the
//! seven STS tasks, each calibrator fitted per task.
use crate::args::{parse_pooling, ModelArgs};
use crate::cmd_eval::TaskArgs;
use anyhow::Result;
use bertflow_core::encoder::{Pooling, WeightingSpec};
use bertflow_core::eval::{average, render_table, Aggregate};
use bertflow_core::grid::{parse_calibs, rows_json, Grid, Row, Target};
use bertflow_core::weighting::Weighting;
use clap::Args;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Poolings, comma-separated; see `bertflow poolings`.
    #[arg(long, value_delimiter = ',', default_value = "last-avg,first-last-avg,emb-avg", value_parser = parse_pooling)]
    pub poolings: Vec<Pooling>,
    #[arg(long, default_value = "none,sn,natsv:k=5,whiten,flow",
          help = crate::cmd_kinds::list_help(), long_help = crate::cmd_kinds::list_long_help())]
    pub kinds: String,
    /// Token weightings of the averaging poolings, comma-separated (each a spec as
    /// in `eval --weighting`, e.g. mean,usif,sif:a=1e-4); frequencies are counted
    /// per task on the --on sentences unless --freq-file is given. Rows repeat
    /// per weighting; cls and pooler rows are left out for weightings other
    /// than mean (they do not average).
    #[arg(long, default_value = "mean", value_name = "SPEC,...")]
    pub weighting: String,
    /// Word-piece frequencies for every weighting (see `eval --freq-file`).
    #[arg(long, value_name = "FILE")]
    pub freq_file: Option<PathBuf>,
    #[command(flatten)]
    pub tasks: TaskArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CompareArgs) -> Result<()> {
    let calibs = parse_calibs(&a.kinds)?;
    let targets = a.tasks.targets()?;
    let aggregates = a.tasks.aggregates();
    let embedder = crate::args::load_model(&a.model)?;
    // One grid per aggregation. Embeddings come from the cache after the
    // first; calibrators are refitted (deterministically, so the rows agree).
    // TODO(core): evaluate every aggregation from one fit.
    let weightings = parse_weightings(&a.weighting, &a.freq_file)?;
    let mut all_rows: Vec<Vec<Row>> = Vec::new();
    for &aggregate in &aggregates {
        let mut rows = Vec::new();
        for w in &weightings {
            // A weighting other than mean only changes the averaging poolings.
            let poolings: Vec<Pooling> = a
                .poolings
                .iter()
                .filter(|p| w.check_pooling(&embedder.encoder, p).is_ok())
                .cloned()
                .collect();
            if poolings.is_empty() {
                continue;
            }
            let grid = Grid {
                embedder: &embedder,
                data_dir: a.tasks.data.dir(),
                targets: &targets,
                poolings: &poolings,
                calibs: &calibs,
                fit_on: a.tasks.on.clone(),
                aggregate,
                weighting: w.clone(),
            };
            rows.extend(grid.run()?.0);
        }
        all_rows.push(rows);
    }
    let model = embedder.encoder.model_id().to_string();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&compare_json(
                &model,
                &a.tasks.on.to_string(),
                &targets,
                &aggregates,
                &all_rows
            ))?
        );
        return Ok(());
    }
    let columns: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    for (aggregate, rows) in aggregates.iter().zip(&all_rows) {
        let table: Vec<(String, Vec<Option<f64>>)> = rows
            .iter()
            .map(|r| {
                (
                    row_label(r),
                    r.results.iter().map(|x| Some(x.spearman)).collect(),
                )
            })
            .collect();
        println!(
            "{model}, Spearman x100 (aggregate: {}; calibrators fitted on: {})\n{}",
            aggregate.name(),
            a.tasks.on,
            render_table("pooling + calibrator", &columns, &table, true)
        );
    }
    if aggregates.len() > 1 {
        let cols: Vec<String> = aggregates
            .iter()
            .map(|g| format!("Avg. {}", g.name()))
            .collect();
        let table: Vec<(String, Vec<Option<f64>>)> = (0..all_rows[0].len())
            .map(|i| {
                let r = &all_rows[0][i];
                (
                    row_label(r),
                    all_rows
                        .iter()
                        .map(|rows| average(&rows[i].results).map(|x| x.spearman))
                        .collect(),
                )
            })
            .collect();
        println!(
            "Averages over the tasks, side by side\n{}",
            render_table("pooling + calibrator", &cols, &table, false)
        );
    }
    Ok(())
}

/// "pooling + calibrator", the pooling tagged with its weighting unless mean.
fn row_label(r: &Row) -> String {
    match r.weighting.as_str() {
        "mean" => format!("{} + {}", r.pooling, r.calibrator),
        w => format!("{}[{w}] + {}", r.pooling, r.calibrator),
    }
}

/// The --weighting list, each with the shared --freq-file.
fn parse_weightings(list: &str, freq_file: &Option<PathBuf>) -> Result<Vec<Weighting>> {
    let v: Vec<Weighting> = bertflow_core::split_spec_list(list)
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| {
            let spec: WeightingSpec = p.parse()?;
            Ok(Weighting {
                spec,
                freq_file: freq_file.clone(),
                fixed: None,
            })
        })
        .collect::<Result<_>>()?;
    anyhow::ensure!(!v.is_empty(), "--weighting is empty");
    Ok(v)
}

/// `compare --json`: the first aggregation's rows as `rows` (with
/// `aggregate` naming it, as before), plus, per row, `averages` under every
/// aggregation asked for, and `by_aggregate` holding every aggregation's rows.
fn compare_json(
    model: &str,
    fit_on: &str,
    targets: &[Target],
    aggregates: &[Aggregate],
    all_rows: &[Vec<Row>],
) -> Value {
    let mut by: Map<String, Value> = Map::new();
    for (g, rows) in aggregates.iter().zip(all_rows) {
        by.insert(g.name().into(), json!(rows_json(targets, rows, false)));
    }
    let mut rows = rows_json(targets, &all_rows[0], false);
    for (i, row) in rows.iter_mut().enumerate() {
        let avgs: Map<String, Value> = aggregates
            .iter()
            .zip(all_rows)
            .map(|(g, r)| {
                let avg = average(&r[i].results).map(|x| (x.spearman * 100.0).round() / 100.0);
                (g.name().to_string(), json!(avg))
            })
            .collect();
        row["averages"] = Value::Object(avgs);
    }
    json!({
        "model": model,
        "aggregate": aggregates[0].name(),
        "aggregates": aggregates.iter().map(|g| g.name()).collect::<Vec<_>>(),
        "fit_on": fit_on,
        "rows": rows,
        "by_aggregate": by,
    })
}
