//! `bertflow report`: one self-contained HTML file with the STS comparison table,
//! the analyses of `bertflow analyze` for each pooling x kind and the figures, plus
//! a Markdown twin; the work is `bertflow_core::report::write_report`.
use crate::args::{parse_pooling, ModelArgs};
use crate::cmd_analyze::AnalysisOpts;
use anyhow::Result;
use bertflow_core::encoder::Pooling;
use bertflow_core::eval::Aggregate;
use bertflow_core::report::{write_report, ReportOptions};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Poolings, comma-separated; see `bertflow poolings`.
    #[arg(long, value_delimiter = ',', default_values_t = [bertflow_core::pipeline::DEFAULT_POOLING], value_parser = parse_pooling, value_name = "POOLINGS")]
    pub poolings: Vec<Pooling>,
    #[command(flatten)]
    pub opts: AnalysisOpts,
    /// How STS12-16 subsets are combined in the STS table (see `bertflow eval --help`).
    #[arg(long, default_value = "all", value_name = "all|wmean|mean")]
    pub aggregate: Aggregate,
    /// The HTML file to write; the Markdown twin goes next to it (same stem, .md) with
    /// its PNG figures in `<stem>-figures/`.
    #[arg(long, short = 'o', default_value = "report.html", value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(a: ReportArgs) -> Result<()> {
    let embedder = crate::args::load_model(&a.model)?;
    let files = write_report(
        &embedder,
        &ReportOptions {
            poolings: a.poolings,
            analysis: a.opts.options(),
            aggregate: a.aggregate,
            output: a.output,
        },
    )?;
    println!(
        "wrote {}, {} and {} figures in {}",
        files.html.display(),
        files.markdown.display(),
        files.figures,
        files.figure_dir.display()
    );
    Ok(())
}
