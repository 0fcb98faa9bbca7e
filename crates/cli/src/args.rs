//! Options shared by several subcommands.
use anyhow::Result;
use bertflow_core::weighting::Weighting;
use bertflow_core::{Embedder, EmbedderConfig, DEFAULT_MODEL};
use bertflow_encoder::{Pooling, Precision, WeightingSpec};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model: a directory in Hugging Face layout (config.json, model.safetensors or
    /// pytorch_model.bin, tokenizer.json or vocab.txt), a sentence-transformers
    /// directory, or a hub id (e.g. bert-base-uncased) found in the local Hugging Face
    /// cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub). config.json's
    /// model_type: bert, roberta, xlm-roberta, camembert, distilbert, mpnet or
    /// modernbert.
    #[arg(long, short = 'm', env = "BERTFLOW_MODEL", default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Truncate sentences at this many tokens, [CLS] and [SEP] (<s> and </s>)
    /// included [default: the model's position limit, 512 for BERT and RoBERTa].
    /// Padding and truncation stored in tokenizer.json are ignored.
    #[arg(long, value_name = "TOKENS")]
    pub max_len: Option<usize>,
    /// Sentences per forward pass (sentences are sorted by length first).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub batch_size: usize,
    /// Worker threads; each runs whole batches on one core [default: all cores].
    #[arg(long, env = "BERTFLOW_THREADS", value_name = "N")]
    pub threads: Option<usize>,
    /// Where encoded embeddings are cached [default: $BERTFLOW_CACHE, else
    /// $XDG_CACHE_HOME/bertflow, else ~/.cache/bertflow].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Neither read nor write the embedding cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Precision of the transformer layers' linear products: fp32, or int8 (s8
    /// weights per output channel, u8 activations per row; AVX512-VNNI, AVX2 or
    /// portable kernel chosen at run time, or forced with BERTFLOW_INT8_KERNEL).
    #[arg(long, env = "BERTFLOW_PRECISION", default_value = "fp32", value_parser = parse_precision)]
    pub precision: Precision,
}

impl ModelArgs {
    pub fn config(&self) -> EmbedderConfig {
        EmbedderConfig {
            model: self.model.clone(),
            max_len: self.max_len,
            batch_size: self.batch_size,
            threads: self.threads,
            cache_dir: self.cache_dir.clone(),
            no_cache: self.no_cache,
            precision: self.precision,
        }
    }

    pub fn load(&self) -> Result<Embedder> {
        if self.threads == Some(0) {
            anyhow::bail!("--threads must be at least 1");
        }
        Ok(self.config().load(crate::progress::handle())?)
    }
}

#[derive(Args, Debug, Clone)]
pub struct DataArgs {
    /// STS data folder [default: $BERTFLOW_DATA, else ../shared/data/sts].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
}

impl DataArgs {
    pub fn dir(&self) -> PathBuf {
        bertflow_eval::resolve_data_dir(self.data.as_deref())
    }
}

/// Help text listing the poolings.
pub fn pooling_help() -> String {
    let mut s = String::from("Pooling (hidden state 0 = embedding output, N = last layer):\n");
    for (name, what) in bertflow_encoder::POOLINGS {
        s.push_str(&format!("  {name:<16} {what}\n"));
    }
    s
}

pub fn parse_pooling(s: &str) -> Result<Pooling, String> {
    s.parse::<Pooling>().map_err(|e| e.to_string())
}

pub fn parse_precision(s: &str) -> Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

/// Token weighting of the averaging poolings.
#[derive(Args, Debug, Clone)]
pub struct WeightingArgs {
    /// Token weighting of the averaging poolings: mean (plain average), sif
    /// (a/(a+p(w)), a=1e-3) or usif (Ethayarajh 2018's a from the counts), with
    /// options after a colon: a=NUMBER (sif), special=keep|drop, punct=keep|drop
    /// (default keep for mean, drop for sif/usif). Word-piece frequencies p(w) are
    /// counted on the fit corpus (encode without a calibrator: on the input)
    /// unless --freq-file is given. A calibrator fitted with a weighting records
    /// it (weights included), and encode, eval and serve apply it.
    #[arg(long, default_value = "mean", value_name = "SPEC", value_parser = parse_weighting)]
    pub weighting: WeightingSpec,
    /// Word-piece frequencies for --weighting: one `piece<TAB>count` line per word
    /// piece of the model's vocabulary (pieces it lacks are skipped), and
    /// optionally `#sentences<TAB>N` (the number of sentences counted, for usif).
    #[arg(long, value_name = "FILE")]
    pub freq_file: Option<PathBuf>,
}

impl WeightingArgs {
    pub fn weighting(&self) -> Weighting {
        Weighting {
            spec: self.weighting.clone(),
            freq_file: self.freq_file.clone(),
            fixed: None,
        }
    }
}

pub fn parse_weighting(s: &str) -> Result<WeightingSpec, String> {
    s.parse::<WeightingSpec>().map_err(|e| e.to_string())
}

/// What makes the vectors: the model, the pooling and an optional calibrator
/// (shared by `index build/add/verify` and `export`).
#[derive(Args, Debug)]
pub struct VectorArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Calibrator file (from `bertflow fit`) applied to every vector.
    #[arg(long, value_name = "FILE")]
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    #[arg(long)]
    pub allow_mismatch: bool,
}

impl VectorArgs {
    /// Load the model and the calibrator, and check that they fit together.
    pub fn load(&self) -> Result<(Embedder, Option<bertflow_core::LoadedCalibrator>)> {
        let calibrator = self
            .calibrator
            .as_deref()
            .map(|p| bertflow_core::LoadedCalibrator::open(p, self.allow_mismatch))
            .transpose()?;
        let embedder = self.model.load()?;
        if let Some(c) = &calibrator {
            c.check(
                &embedder.encoder,
                &self.pooling,
                &*crate::progress::handle(),
            )?;
        }
        Ok((embedder, calibrator))
    }
}
