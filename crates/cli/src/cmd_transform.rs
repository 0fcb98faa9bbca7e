//! `bertflow transform`: apply a calibrator file to embeddings from anywhere.
use crate::progress;
use anyhow::Result;
use bertflow_core::quantize::transform_file_output;
use bertflow_core::LoadedCalibrator;
use clap::Args;
use std::path::PathBuf;

const AFTER_HELP: &str = "The input is read and written in chunks of rows, so a file larger than \
memory works with bounded memory. The calibrator's input dimension must equal the rows' dimension. \
A calibrator fitted on a bertflow model also applies to vectors made elsewhere by that model and \
pooling (bertflow cannot check where external vectors came from, and says so).";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct TransformArgs {
    /// The calibrator (.safetensors from `bertflow fit` or Python `save`).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub calibrator: PathBuf,
    /// Embeddings: .npy (float32 or float64, n x d, C order), .safetensors (one 2-D
    /// tensor, `embeddings` if several), or Parquet (a file or Spark's output folder)
    /// with an `embedding` column (array<float> or array<double>).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub input: PathBuf,
    /// Where to write the calibrated embeddings (float32 .npy, same row order; int8 or
    /// uint8 codes when the calibrator ends in a quantizer).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(a: TransformArgs) -> Result<()> {
    let calibrator = LoadedCalibrator::open(&a.calibrator, true)?;
    if !calibrator.meta.is_external() {
        progress::note(format!(
            "note: {} was fitted on {} ({}); the input's origin cannot be checked",
            a.calibrator.display(),
            calibrator.meta.model,
            calibrator.meta.pooling
        ));
    }
    let (rows, dim, what) =
        transform_file_output(&calibrator, &a.input, &a.output, &*progress::handle())?;
    let what = match what {
        "float32" => "calibrated embeddings".to_string(),
        codes => format!("{codes} codes"),
    };
    progress::note(format!(
        "wrote {rows} x {dim} {what} to {}",
        a.output.display()
    ));
    Ok(())
}
