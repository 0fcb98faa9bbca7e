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
    /// Pooling: last-avg (sentence-transformers' mean pooling) and cls need nothing
    /// else; other poolings (first-last-avg, layers:...) are computed by bertflow's
    /// module from the hidden states. Not `pooler`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// A calibrator file. An affine one (none, sn, whiten, natsv, sn+natsv, softwhiten or
    /// auto without blend) becomes a Dense module that loads without bertflow; the flow
    /// and blends become bertflow's module (bertflow.st.Calibrator), which needs bertflow
    /// installed where the model is loaded.
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
