//! `bertflow compare`: the paper-style table, poolings x calibrators on the
//! seven STS tasks, each calibrator fitted per task.
use crate::args::{parse_pooling, ModelArgs};
use crate::cmd_eval::TaskArgs;
use anyhow::Result;
use bertflow_core::grid::{parse_calibs, rows_json, Grid};
use bertflow_encoder::Pooling;
use bertflow_eval::render_table;
use clap::Args;
use serde_json::json;

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Poolings, comma-separated; see `bertflow poolings`.
    #[arg(long, value_delimiter = ',', default_value = "last-avg,first-last-avg,emb-avg", value_parser = parse_pooling)]
    pub poolings: Vec<Pooling>,
    /// Calibrator kinds, comma-separated (options after a colon, e.g.
    /// none,sn,whiten,natsv:k=5,flow:seed=1,epochs=2).
    #[arg(long, default_value = "none,sn,natsv:k=5,whiten,flow")]
    pub kinds: String,
    #[command(flatten)]
    pub tasks: TaskArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CompareArgs) -> Result<()> {
    let calibs = parse_calibs(&a.kinds)?;
    let targets = a.tasks.targets()?;
    let embedder = a.model.load()?;
    let grid = Grid {
        embedder: &embedder,
        data_dir: a.tasks.data.dir(),
        targets: &targets,
        poolings: &a.poolings,
        calibs: &calibs,
        fit_on: a.tasks.on.clone(),
        aggregate: a.tasks.aggregate,
    };
    let (rows, _) = grid.run()?;
    let model = embedder.encoder.model_id().to_string();
    if a.json {
        let v = json!({
            "model": model,
            "aggregate": a.tasks.aggregate.name(),
            "fit_on": a.tasks.on.to_string(),
            "rows": rows_json(&targets, &rows, false),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let columns: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let table: Vec<(String, Vec<Option<f64>>)> = rows
        .iter()
        .map(|r| {
            (
                format!("{} + {}", r.pooling, r.calibrator),
                r.results.iter().map(|x| Some(x.spearman)).collect(),
            )
        })
        .collect();
    println!(
        "{model}, Spearman x100 (aggregate: {}; calibrators fitted on: {})\n{}",
        a.tasks.aggregate.name(),
        a.tasks.on,
        render_table("pooling + calibrator", &columns, &table, true)
    );
    Ok(())
}
