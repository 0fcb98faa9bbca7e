//! Options shared by several subcommands.
use anyhow::Result;
use bertflow_core::{Embedder, EmbedderConfig, Pipeline, PipelineConfig};
use clap::Args;
use std::path::PathBuf;

/// The model options (`--model`, `--max-len`, `--batch-size`, `--threads`,
/// `--cache-dir`, `--no-cache`, `--precision`): core's [`EmbedderConfig`].
pub type ModelArgs = EmbedderConfig;

/// Loads the model of `m`, with progress on the terminal.
pub fn load_model(m: &ModelArgs) -> Result<Embedder> {
    Ok(m.load(crate::progress::handle())?)
}

#[derive(Args, Debug, Clone)]
pub struct DataArgs {
    /// STS data folder [default: $BERTFLOW_DATA, else ../shared/data/sts].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
}

impl DataArgs {
    pub fn dir(&self) -> PathBuf {
        bertflow_core::defaults::data_dir(self.data.as_deref())
    }
}

/// Help text listing the poolings.
pub fn pooling_help() -> String {
    let mut s = String::from("Pooling (hidden state 0 = embedding output, N = last layer):\n");
    for (name, what) in bertflow_core::encoder::POOLINGS {
        s.push_str(&format!("  {name:<16} {what}\n"));
    }
    s
}

pub use bertflow_core::parse::{parse_pooling, parse_precision};

/// Token weighting of the averaging poolings (`--weighting`, `--freq-file`):
/// core's [`bertflow_core::weighting::Weighting`].
pub type WeightingArgs = bertflow_core::weighting::Weighting;

/// The prompt before every text (`--prompt-name`, `--prompt`; `encode`,
/// `eval`, `fit`, `compare`): core's [`bertflow_core::PromptConfig`].
pub type PromptArgs = bertflow_core::PromptConfig;

/// What makes the vectors: the model, the pooling and an optional calibrator
/// (`index build/add/verify`, `export`, `serve`; `encode` and `eval` add the
/// weighting): core's [`PipelineConfig`].
pub type VectorArgs = PipelineConfig;

/// Opens the pipeline of `v` (calibrator, model, identity checks and token
/// weights), with progress on the terminal.
pub fn open_pipeline(v: &VectorArgs) -> Result<Pipeline> {
    Ok(v.open(crate::progress::handle())?)
}
