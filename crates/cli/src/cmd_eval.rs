//! `bertflow eval`: Spearman/Pearson x100 on the STS benchmarks.
use crate::args::{open_pipeline, DataArgs, PromptArgs, VectorArgs, WeightingArgs};
use anyhow::{bail, Result};
use bertflow_core::calib::CalibSpec;
use bertflow_core::eval::{Aggregate, Task};
use bertflow_core::evaluate::{EvalSpec, Evaluation};
use bertflow_core::grid::{load_targets, FitOn, Target};
use clap::Args;
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
    #[command(flatten)]
    pub prompt: PromptArgs,
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
    config.model.prompt = a.prompt;
    // A calibrator file brings its own weights; otherwise word-piece
    // frequencies are counted per task on the --on sentences.
    let pipeline = open_pipeline(&config)?;
    let spec = EvalSpec {
        data_dir: a.tasks.data.dir(),
        targets: &targets,
        fit: a.fit,
        fit_on: a.tasks.on.clone(),
        aggregate,
    };
    let evaluation = Evaluation::run(pipeline, &spec)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&evaluation.to_json(a.per_subset))?
        );
    } else {
        print!("{}", evaluation.render(a.per_subset));
    }
    Ok(())
}
