//! `bertflow compare`: the paper-style table, poolings x calibrators on the
//! seven STS tasks, each calibrator fitted per task.
use crate::args::{parse_pooling, ModelArgs, PromptArgs};
use crate::cmd_eval::TaskArgs;
use anyhow::Result;
use bertflow_core::compare::{parse_weightings, CompareSpec, Comparison};
use bertflow_core::encoder::Pooling;
use bertflow_core::grid::parse_calibs;
use clap::Args;
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
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CompareArgs) -> Result<()> {
    let calibs = parse_calibs(&a.kinds)?;
    let targets = a.tasks.targets()?;
    let aggregates = a.tasks.aggregates();
    let weightings = parse_weightings(&a.weighting, a.freq_file.as_deref())?;
    let mut model = a.model.clone();
    model.prompt = a.prompt.clone();
    let embedder = crate::args::load_model(&model)?;
    let comparison = Comparison::run(
        &embedder,
        &CompareSpec {
            data_dir: a.tasks.data.dir(),
            targets: &targets,
            poolings: &a.poolings,
            calibs: &calibs,
            weightings: &weightings,
            fit_on: a.tasks.on.clone(),
            aggregates: &aggregates,
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&comparison.to_json())?);
    } else {
        print!("{}", comparison.render());
    }
    Ok(())
}
