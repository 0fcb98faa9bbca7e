//! `bertflow encode`: sentences in, embeddings out.
use crate::args::{open_pipeline, PromptArgs, VectorArgs, WeightingArgs};
use crate::progress;
use anyhow::Result;
use bertflow_core::io::{check_embeddings_output, read_sentences, write_embeddings, EmptyLines};
use bertflow_core::quantize::{self, Output, QuantSpec};
use clap::Args;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct EncodeArgs {
    /// The model, pooling and calibrator (applied to the embeddings).
    #[command(flatten)]
    pub vectors: VectorArgs,
    /// Input: one sentence per line, or JSONL with a "text" field (.jsonl/.ndjson or
    /// --jsonl). `-` reads standard input.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub input: PathBuf,
    /// Treat the input as JSONL whatever its extension.
    #[arg(long)]
    pub jsonl: bool,
    /// Output file; the format follows the extension: .npy (float32, one row per
    /// input sentence in input order), .jsonl, .safetensors (tensor "embeddings");
    /// `-` writes JSONL to standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Scale every vector to unit length (after the calibrator), so that a dot
    /// product is the cosine.
    #[arg(long)]
    pub normalize: bool,
    /// Write codes of a quantizer fitted on these vectors (after the calibrator):
    /// int8[:ranges=global|dim], uint8[:...], binary[:itq=true,iters=N], ubinary[:...],
    /// pq:m=M[,opq=true|false,iters=N] (product quantizer with an OPQ rotation: M bytes
    /// per vector, M dividing the dimension); the output is then a .npy of int8 or uint8. A calibrator file that ends in a
    /// quantizer (`bertflow fit --quantize`) writes its codes without this flag.
    #[arg(long, value_name = "QUANTIZER")]
    pub quantize: Option<QuantSpec>,
    /// What to do with empty lines.
    #[arg(long, value_enum, default_value_t = EmptyLines::Error)]
    pub empty: EmptyLines,
    #[command(flatten)]
    pub weighting: WeightingArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Sparse and per-token outputs (`--outputs`, `--multi-vector`, ...).
    #[command(flatten)]
    pub retrieval: crate::args::RetrievalArgs,
    /// Name the K largest entries of each sparse vector (a "tokens" field of .jsonl
    /// output: [token, weight] pairs, largest first, as SparseEncoder.decode).
    #[arg(long, value_name = "K")]
    pub decode: Option<usize>,
}

pub fn run(a: EncodeArgs) -> Result<()> {
    // The output's format first: a wrong extension costs nothing.
    match &a.quantize {
        Some(q) => quantize::check_codes_output(&a.output, q.kind.name())?,
        None => check_embeddings_output(&a.output)?,
    }
    let input = read_sentences(&a.input, a.jsonl, a.empty)?;
    let mut config = a.vectors;
    config.weighting = a.weighting;
    config.model.prompt = a.prompt;
    let mut pipeline = open_pipeline(&config)?;
    if let Some(q) = pipeline.calibrator().and_then(quantize::stage_of) {
        quantize::check_codes_output(&a.output, q.spec.kind.name())?;
    }
    // Without a calibrator (which brings its weights) or a frequency file, the
    // word-piece frequencies are counted on the input.
    pipeline.count_weights(&input.texts, false)?;
    let m = pipeline.encode(&input.texts)?;
    let m = match quantize::encode_output(&pipeline, m, a.quantize.as_ref(), a.normalize)? {
        Output::F32(m) => m,
        codes => {
            quantize::write_codes(&a.output, &codes)?;
            progress::note(format!(
                "wrote {} x {} {} codes ({} bytes each) to {}",
                codes.rows(),
                codes.dim(),
                codes.kind(),
                codes.bytes_per_row(),
                a.output.display()
            ));
            return Ok(());
        }
    };
    let info = pipeline.info();
    let mut meta = HashMap::new();
    meta.insert("model".to_string(), info.model_id);
    meta.insert("pooling".to_string(), info.pooling);
    meta.insert("max_len".to_string(), info.max_len.to_string());
    if let Some(c) = info.calibrator {
        meta.insert("calibrator".to_string(), c);
    }
    if let Some(w) = pipeline.weighting().weights() {
        meta.insert("weighting".to_string(), w.spec.to_string());
    }
    if a.normalize {
        meta.insert("normalized".to_string(), "true".to_string());
    }
    if let Some(p) = pipeline.prompt() {
        meta.insert("prompt".to_string(), p.text.clone());
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
