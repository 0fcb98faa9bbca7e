//! `bertflow export`: a calibrated model as a sentence-transformers directory.
//! The work is in `bertflow_core::export`.
use crate::args::VectorArgs;
use anyhow::Result;
use bertflow_core::export::{export_st, ExportConfig};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ExportArgs {
    // What the poolings and calibrators become: see the command's help (main.rs).
    #[command(flatten)]
    pub vectors: VectorArgs,
    /// Add a Normalize module (unit-length embeddings).
    #[arg(long)]
    pub normalize: bool,
    /// The directory to create (it must not exist, or be empty).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: PathBuf,
}

pub fn run(a: ExportArgs) -> Result<()> {
    let v = a.vectors;
    let embedder = crate::args::load_model(&v.model)?;
    let exported = export_st(
        &embedder.encoder,
        &ExportConfig {
            pooling: v.pooling,
            calibrator: v.calibrator,
            allow_mismatch: v.allow_mismatch,
            normalize: a.normalize,
            output: a.output.clone(),
        },
    )?;
    println!(
        "wrote {} ({} files; modules: {}; dimension {}): load it with SentenceTransformer({:?}){}",
        a.output.display(),
        exported.files,
        exported.modules.join(", "),
        exported.dimension,
        a.output.display().to_string(),
        if exported.needs_bertflow {
            " where bertflow is installed (its module applies the calibrator)"
        } else {
            ", no bertflow needed"
        }
    );
    Ok(())
}
