//! `bertflow advise`: "should I calibrate?" for any corpus. Embeds the input
//! sentences (raw, uncalibrated), and prints the advice of
//! `bertflow_core::calib::advise`: one sentence to act on, what `auto` would
//! do, and the statistics behind it. No STS data or labels are needed.
use crate::args::{open_pipeline, ModelArgs};
use anyhow::Result;
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_core::parse::parse_pooling;
use bertflow_core::{PipelineConfig, Pooling};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings` [default: as for encode].
    #[arg(long, short = 'p', value_parser = parse_pooling)]
    pub pooling: Option<Pooling>,
    /// Sentences of your corpus: one per line, or JSONL with a "text" field
    /// (.jsonl/.ndjson/.json or --jsonl); `-` reads standard input. Empty lines are
    /// skipped. A few hundred sentences or more give stable statistics.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub input: PathBuf,
    /// Treat the input as JSONL whatever its extension.
    #[arg(long)]
    pub jsonl: bool,
    /// Print the advice as JSON (as Python's `bertflow.advise(X)` returns it).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: AdviseArgs) -> Result<()> {
    let input = read_sentences(&a.input, a.jsonl, EmptyLines::Skip)?;
    let config = PipelineConfig {
        model: a.model,
        pooling: a.pooling,
        ..Default::default()
    };
    let pipeline = open_pipeline(&config)?;
    let x = pipeline.embed(&input.texts)?;
    let advice = bertflow_core::calib::advise(x.view())?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&advice)?);
        return Ok(());
    }
    let info = pipeline.info();
    println!("{}", advice.message);
    println!();
    println!(
        "{} sentences, model {}, pooling {}, dimension {}",
        x.nrows(),
        info.model_id,
        info.pooling,
        x.ncols()
    );
    println!("auto would apply: {}", advice.decision.summary());
    if let serde_json::Value::Object(stats) = serde_json::to_value(&advice.stats)? {
        for (k, v) in stats {
            let v = match v.as_f64() {
                Some(f) if v.is_f64() => format!("{f:.4}"),
                _ => v.to_string(),
            };
            println!("  {k:<28} {v}");
        }
    }
    Ok(())
}
