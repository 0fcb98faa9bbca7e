//! `bertflow fit`: fit one calibrator and save it as a file.
use crate::args::{parse_pooling, DataArgs, ModelArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_calib::{CalibSpec, Calibrator, CalibratorMeta};
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_core::model_identity;
use bertflow_encoder::Pooling;
use bertflow_eval::{dedup_preserving_order, fit_sentences, FitCorpus, Task};
use clap::Args;
use std::path::PathBuf;
use std::str::FromStr;

/// The sentences a calibrator is fitted on.
#[derive(Debug, Clone)]
pub enum Corpus {
    Task(FitCorpus, Task),
    File(PathBuf),
}

impl FromStr for Corpus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some((kind, task)) = s.split_once(':') {
            let corpus = match kind {
                // `target` means the scored sentences, as everywhere in bertflow.
                "target" => Some(FitCorpus::TargetScored),
                "target-all" => Some(FitCorpus::Target),
                "train" => Some(FitCorpus::Train),
                _ => None,
            };
            if let Some(c) = corpus {
                return Ok(Corpus::Task(
                    c,
                    task.parse::<Task>().map_err(|e| e.to_string())?,
                ));
            }
        }
        let p = PathBuf::from(s);
        if p.is_file() || s == "-" {
            Ok(Corpus::File(p))
        } else {
            Err(format!(
                "'{s}' is neither target:TASK, target-all:TASK, train:TASK nor an existing sentence file"
            ))
        }
    }
}

#[derive(Args, Debug)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Calibrator: flow[:levels=3,steps=3,width=32,epochs=1,lr=1e-3,batch=32,seed=42,
    /// coupling=additive|affine,permutation=reverse|lu], whiten[:k=N], sn, natsv:k=N,
    /// sn+natsv:k=N, none.
    #[arg(long, short = 'k', value_name = "KIND")]
    pub kind: CalibSpec,
    /// Fit corpus: target:TASK (every scored sentence of a benchmark, labels unused),
    /// target-all:TASK (also unscored STS15/16 pairs), train:TASK (STS-B, SICK-R), or a
    /// file with one sentence per line (or JSONL with "text"; empty lines skipped).
    #[arg(long, default_value = "target:STS-B", value_name = "CORPUS")]
    pub on: Corpus,
    #[command(flatten)]
    pub data: DataArgs,
    /// Where to write the calibrator (.safetensors).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(a: FitArgs) -> Result<()> {
    let sentences = match &a.on {
        Corpus::Task(c, t) => fit_sentences(&a.data.dir(), *t, *c)?,
        Corpus::File(p) => read_sentences(p, false, EmptyLines::Skip)?.texts,
    };
    let sentences = dedup_preserving_order(sentences);
    let emb = a.model.load()?;
    let x = emb.embed(&sentences, &a.pooling)?;
    let fitted =
        bertflow_core::calibration::fit(&a.kind, x.view(), &a.kind.to_string(), &*emb.progress)?;
    let mut meta = CalibratorMeta::new(
        model_identity(&emb.encoder),
        a.pooling.to_string(),
        x.ncols(),
        x.nrows(),
    );
    if let CalibSpec::Flow(cfg) = &a.kind {
        meta = meta.with_seed(cfg.seed);
    }
    fitted
        .save(&a.output, &meta)
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    progress::note(format!(
        "fitted {} on {} sentences ({} -> {} dims); wrote {}",
        fitted.describe(),
        x.nrows(),
        fitted.input_dim(),
        fitted.output_dim(),
        a.output.display()
    ));
    Ok(())
}
