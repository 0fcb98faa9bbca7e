//! `bertflow eval`: Spearman/Pearson x100 on the STS benchmarks.
use crate::args::{open_pipeline, DataArgs, VectorArgs, WeightingArgs};
use anyhow::{bail, Result};
use bertflow_core::calib::CalibSpec;
use bertflow_core::eval::{render_table, Aggregate, Task};
use bertflow_core::grid::{load_targets, rows_json, Calib, FitOn, Grid, Target};
use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct TaskArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// Benchmarks, comma-separated: STS12,STS13,STS14,STS15,STS16,STS-B,SICK-R
    /// [default: all seven]. Columns always come in that order.
    #[arg(long, value_delimiter = ',', value_name = "TASKS")]
    pub tasks: Vec<Task>,
    /// Your own scored pairs: `score<TAB>sentence1<TAB>sentence2` per line (a header
    /// line is allowed); reported under the file's stem. Repeatable. With --pairs and
    /// no --tasks only the pair files are evaluated.
    #[arg(long, value_name = "FILE")]
    pub pairs: Vec<PathBuf>,
    /// How STS12-16 subsets are combined: all = one correlation over the
    /// concatenated subsets (SimCSE); wmean = subset correlations weighted by size;
    /// mean = plain mean of subset correlations (BERT-flow, BERT-whitening).
    /// `compare` takes several, comma-separated (e.g. all,wmean), and reports
    /// them side by side; `eval` takes one.
    #[arg(
        long,
        default_value = "all",
        value_name = "all|wmean|mean",
        value_delimiter = ','
    )]
    pub aggregate: Vec<Aggregate>,
    /// Where per-task calibrators are fitted: target (every scored sentence of the
    /// task itself, labels unused: the papers' setting), target-all (also STS15/16's
    /// unscored pairs), train (the train split; STS-B and SICK-R only), or a file of
    /// sentences (one per line) used for every task.
    #[arg(
        long,
        default_value = "target",
        value_name = "target|target-all|train|FILE"
    )]
    pub on: FitOn,
}

impl TaskArgs {
    /// The aggregations asked for, in order, without repeats (at least one).
    pub fn aggregates(&self) -> Vec<Aggregate> {
        let mut v: Vec<Aggregate> = Vec::new();
        for a in &self.aggregate {
            if !v.contains(a) {
                v.push(*a);
            }
        }
        if v.is_empty() {
            v.push(Aggregate::All);
        }
        v
    }

    /// The one aggregation `eval` uses; an error if several were given.
    pub fn single_aggregate(&self) -> Result<Aggregate> {
        let v = self.aggregates();
        if v.len() > 1 {
            bail!("eval takes one --aggregate (compare reports several side by side)");
        }
        Ok(v[0])
    }

    pub fn targets(&self) -> Result<Vec<Target>> {
        let tasks: Vec<Task> = if self.tasks.is_empty() && self.pairs.is_empty() {
            Task::ALL.to_vec()
        } else {
            self.tasks.clone()
        };
        Ok(load_targets(&self.data.dir(), &tasks, &self.pairs)?)
    }
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The model, pooling and calibrator (applied to every task).
    #[command(flatten)]
    pub vectors: VectorArgs,
    #[command(flatten)]
    pub tasks: TaskArgs,
    #[arg(long, value_name = "KIND", conflicts_with = "calibrator",
          help = format!("Fit a calibrator of this kind per task (see --on). {}", crate::cmd_kinds::spec_help()),
          long_help = format!("Fit a calibrator of this kind per task (see --on). {}", crate::cmd_kinds::spec_long_help()))]
    pub fit: Option<CalibSpec>,
    #[command(flatten)]
    pub weighting: WeightingArgs,
    /// Also report each subset of STS12-16.
    #[arg(long)]
    pub per_subset: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: EvalArgs) -> Result<()> {
    let targets = a.tasks.targets()?;
    let aggregate = a.tasks.single_aggregate()?;
    let mut config = a.vectors;
    config.weighting = a.weighting;
    // A calibrator file brings its own weights; otherwise word-piece
    // frequencies are counted per task on the --on sentences.
    let pipeline = open_pipeline(&config)?;
    let pooling = pipeline.pooling().clone();
    let weighting = pipeline.grid_weighting();
    let (embedder, calibrator) = pipeline.into_parts();
    let calib = match (&a.fit, calibrator) {
        (Some(spec), _) => Calib::spec(spec.clone()),
        (None, Some(f)) => Calib::File(Box::new(f)),
        (None, None) => Calib::spec(CalibSpec::none()),
    };
    if a.fit.is_none() && !weighting.needs_corpus() && a.tasks.on != FitOn::Target {
        bail!("--on only applies with --fit (or a --weighting counted on the fit corpus)");
    }
    let poolings = [pooling.clone()];
    let calibs = [calib];
    let grid = Grid {
        embedder: &embedder,
        data_dir: a.tasks.data.dir(),
        targets: &targets,
        poolings: &poolings,
        calibs: &calibs,
        fit_on: a.tasks.on.clone(),
        aggregate,
        weighting,
    };
    let (rows, _) = grid.run()?;
    let row = &rows[0];
    let model = embedder.encoder.model_id().to_string();
    if a.json {
        let mut v = rows_json(&targets, &rows, a.per_subset).remove(0);
        let obj = v.as_object_mut().expect("object");
        obj.insert("model".into(), json!(model));
        obj.insert("aggregate".into(), json!(aggregate.name()));
        if calibs[0].is_none() {
            obj.insert("calibrator".into(), Value::Null);
        } else {
            obj.insert("fit_on".into(), json!(a.tasks.on.to_string()));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let columns: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let pooling = match row.weighting.as_str() {
        "mean" => pooling.to_string(),
        w => format!("{pooling}[{w}]"),
    };
    let label = match &calibs[0] {
        c if c.is_none() => pooling,
        c => format!("{pooling} + {}", c.label()),
    };
    let cells = row.results.iter().map(|r| Some(r.spearman)).collect();
    println!(
        "{model}, Spearman x100 (aggregate: {})\n{}",
        aggregate.name(),
        render_table("pooling", &columns, &[(label, cells)], true)
    );
    if a.per_subset {
        for (t, r) in targets.iter().zip(&row.results) {
            if r.subsets.len() > 1 {
                let cols: Vec<String> = r.subsets.iter().map(|s| s.name.clone()).collect();
                let cells = r.subsets.iter().map(|s| Some(s.spearman)).collect();
                println!(
                    "\n{}\n{}",
                    t.name,
                    render_table("subset", &cols, &[(t.name.clone(), cells)], false)
                );
            }
        }
    }
    Ok(())
}
