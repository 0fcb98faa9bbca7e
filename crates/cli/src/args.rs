//! Options shared by several subcommands.
use anyhow::{bail, Result};
use bertflow_core::encoder::head::Outputs;
use bertflow_core::Pooling;
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

/// `encode`'s sparse and per-token outputs (`--outputs`, `--multi-vector`, ...):
/// run by `cmd_encode_retrieval` instead of the dense pipeline.
#[derive(Args, Debug, Clone, Default)]
pub struct RetrievalArgs {
    /// Retrieval outputs of one forward pass, comma-separated: dense (the first token,
    /// normalised: BGE-M3's dense), sparse (SPLADE of a *ForMaskedLM checkpoint, or
    /// BGE-M3's sparse_linear.pt), multi (per-token vectors, through colbert_linear.pt
    /// when the model has one, normalised). One output: the file's format follows its
    /// extension (.npz or .jsonl for sparse, .safetensors or .jsonl for multi); several:
    /// a .jsonl with every output per line, or a directory (dense.npy, sparse.npz,
    /// multi.safetensors).
    #[arg(long, value_name = "LIST")]
    pub outputs: Option<String>,
    /// Per-token vectors (ColBERT-style), as --outputs multi.
    #[arg(long, conflicts_with = "outputs")]
    pub multi_vector: bool,
    /// Keep only the K largest entries of each sparse vector.
    #[arg(long, value_name = "K")]
    pub max_active_dims: Option<usize>,
    /// Encode queries: cut to, then pad with the mask token to, this many tokens (ColBERT
    /// query augmentation).
    #[arg(long, value_name = "TOKENS")]
    pub query_length: Option<usize>,
    /// Drop the first token's vector of per-token outputs [default: true with
    /// colbert_linear.pt (BGE-M3), else false].
    #[arg(long, value_name = "BOOL")]
    pub skip_first: Option<bool>,
}

impl RetrievalArgs {
    /// The outputs asked for by these flags and `pooling` (`splade`: sparse),
    /// or `None` for the dense pipeline.
    pub fn outputs(&self, pooling: Option<&Pooling>) -> Result<Option<Outputs>> {
        let splade = pooling.is_some_and(Pooling::is_sparse);
        let mut o = match (&self.outputs, self.multi_vector) {
            (Some(list), _) => Outputs::parse(list).map_err(anyhow::Error::msg)?,
            (None, true) => Outputs {
                multi: true,
                ..Outputs::default()
            },
            (None, false) => Outputs::default(),
        };
        o.sparse |= splade;
        if o == Outputs::default() {
            let sparse_flags = self.max_active_dims.is_some();
            let multi_flags = self.query_length.is_some() || self.skip_first.is_some();
            if sparse_flags || multi_flags {
                bail!(
                    "--max-active-dims, --query-length and --skip-first apply to sparse \
                     or per-token outputs: add --pooling splade, --outputs or --multi-vector"
                );
            }
            return Ok(None);
        }
        if pooling.is_some_and(|p| !p.is_sparse()) {
            bail!("--pooling {} makes dense vectors; --outputs and --multi-vector choose the retrieval outputs instead (drop --pooling, or give --pooling splade)", pooling.map(|p| p.to_string()).unwrap_or_default());
        }
        Ok(Some(o))
    }
}
