//! `bertflow encode`: sentences in, embeddings out.
use crate::args::{parse_pooling, ModelArgs, WeightingArgs};
use crate::progress;
use anyhow::Result;
use bertflow_core::fitting::check_weighting;
use bertflow_core::io::{read_sentences, write_embeddings, EmptyLines};
use bertflow_encoder::Pooling;
use clap::Args;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct EncodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Input: one sentence per line, or JSONL with a "text" field (.jsonl/.ndjson or
    /// --jsonl). `-` reads standard input.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub input: PathBuf,
    /// Treat the input as JSONL whatever its extension.
    #[arg(long)]
    pub jsonl: bool,
    /// Output file; the format follows the extension: .npy (float32, one row per
    /// input sentence in input order), .jsonl, .safetensors (tensor "embeddings").
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// What to do with empty lines.
    #[arg(long, value_enum, default_value_t = EmptyLines::Error)]
    pub empty: EmptyLines,
    /// Apply a fitted calibrator (from `bertflow fit`) to the embeddings.
    #[arg(long, value_name = "FILE")]
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    #[arg(long)]
    pub allow_mismatch: bool,
    #[command(flatten)]
    pub weighting: WeightingArgs,
}

pub fn run(a: EncodeArgs) -> Result<()> {
    let input = read_sentences(&a.input, a.jsonl, a.empty)?;
    let calibrator = a
        .calibrator
        .as_deref()
        .map(|p| bertflow_core::LoadedCalibrator::open(p, a.allow_mismatch))
        .transpose()?;
    let emb = a.model.load()?;
    if let Some(c) = &calibrator {
        c.check(&emb.encoder, &a.pooling, &*emb.progress)?;
    }
    // A calibrator brings the weights it was fitted with; otherwise the
    // frequencies are counted on the input (or read from --freq-file).
    let weighting = a.weighting.weighting();
    let weights = match &calibrator {
        Some(c) => c.weights_for(&weighting)?,
        None => {
            check_weighting(&emb.encoder, &a.pooling, &weighting)?;
            weighting.weights(&emb.encoder, &input.texts)?
        }
    };
    let m = emb.embed_weighted(&input.texts, &a.pooling, weights.as_ref())?;
    let m = match &calibrator {
        Some(c) => c.apply(m.view())?,
        None => m,
    };
    let mut meta = HashMap::new();
    meta.insert("model".to_string(), emb.encoder.model_id().to_string());
    meta.insert("pooling".to_string(), a.pooling.to_string());
    meta.insert("max_len".to_string(), emb.encoder.max_len().to_string());
    if let Some(c) = &calibrator {
        meta.insert("calibrator".to_string(), c.describe());
    }
    if let Some(w) = &weights {
        meta.insert("weighting".to_string(), w.spec.to_string());
    }
    write_embeddings(&a.output, &m, &input, &meta)?;
    progress::note(format!(
        "wrote {} x {} embeddings to {}",
        m.nrows(),
        m.ncols(),
        a.output.display()
    ));
    Ok(())
}
