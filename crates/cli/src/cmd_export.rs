//! `bertflow export`: a calibrated model as a sentence-transformers directory.
//! The work is in `bertflow_core::export`.
use crate::args::{parse_pooling, ModelArgs};
use anyhow::Result;
use bertflow_core::export::{export_st, ExportConfig};
use bertflow_encoder::Pooling;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling: last-avg (sentence-transformers' mean pooling) or cls.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// An affine calibrator file (none, sn, whiten, natsv, sn+natsv, softwhiten or auto
    /// without blend), exported as a Dense module.
    #[arg(long, value_name = "FILE")]
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    #[arg(long)]
    pub allow_mismatch: bool,
    /// Add a Normalize module (unit-length embeddings).
    #[arg(long)]
    pub normalize: bool,
    /// The directory to create (it must not exist, or be empty).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: PathBuf,
}

pub fn run(a: ExportArgs) -> Result<()> {
    let embedder = a.model.load()?;
    let exported = export_st(
        &embedder.encoder,
        &ExportConfig {
            pooling: a.pooling,
            calibrator: a.calibrator,
            allow_mismatch: a.allow_mismatch,
            normalize: a.normalize,
            output: a.output.clone(),
        },
    )?;
    println!(
        "wrote {} ({} files; modules: {}; dimension {}): load it with SentenceTransformer({:?})",
        a.output.display(),
        exported.files,
        exported.modules.join(", "),
        exported.dimension,
        a.output.display().to_string()
    );
    Ok(())
}
