//! `bertflow fit`: fit one calibrator and save it as a file.
use crate::args::{parse_pooling, DataArgs, ModelArgs, PromptArgs, WeightingArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_core::calib::{CalibSpec, Calibrator};
use bertflow_core::encoder::Pooling;
use bertflow_core::eval::{dedup_preserving_order, fit_sentences, FitCorpus, Task};
use bertflow_core::fitting::{self, fit_embeddings, ExternalFit, FitOutcome};
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_core::quantize::{self, QuantRequest};
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

const AFTER_HELP: &str =
    "Memory: whiten, sn, natsv and sn+natsv stream their statistics (count, mean, \
co-moment matrix in f64), so a corpus or an embedding file of any size fits in memory bounded by \
one chunk plus a d x d matrix. A flow and auto need their whole sample in memory: use --sample N \
for large inputs (N rows drawn with the flow's seed, 42 for auto).

Embeddings from anywhere: --embeddings X.npy (float32/float64, n x d, C order) or \
X.safetensors (one 2-D tensor, 'embeddings' if several) fits on vectors from any model or API; \
the file then records 'external embeddings' (dimension, a fingerprint of the input, --label) \
instead of a model. Apply it with `bertflow transform`.";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct FitArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value_t = bertflow_core::pipeline::DEFAULT_POOLING, value_parser = parse_pooling)]
    pub pooling: Pooling,
    #[arg(long, short = 'k', value_name = "KIND", help = crate::cmd_kinds::spec_help(),
          long_help = crate::cmd_kinds::spec_long_help())]
    pub kind: CalibSpec,
    /// Fit corpus: target:TASK (every scored sentence of a benchmark, labels unused),
    /// target-all:TASK (also unscored STS15/16 pairs), train:TASK (STS-B, SICK-R), or a
    /// file with one sentence per line (or JSONL with "text"; empty lines skipped).
    #[arg(long, default_value = "target:STS-B", value_name = "CORPUS")]
    pub on: Corpus,
    /// Fit on these embeddings instead of encoding sentences: a .npy (float32 or
    /// float64, n x d) or .safetensors file from any source, or Parquet (a file or
    /// Spark's output folder) with an `embedding` column. --model, --pooling and
    /// --on are then not used.
    #[arg(long, value_name = "FILE")]
    pub embeddings: Option<PathBuf>,
    /// With --embeddings: a label for where the vectors came from (e.g. the model or
    /// API name), stored in the calibrator file.
    #[arg(long, requires = "embeddings", value_name = "TEXT")]
    pub label: Option<String>,
    /// Fit a flow (or auto) on N rows (sentences or embedding rows) drawn without
    /// replacement with the flow's seed (42 for auto) [default: all]. The other kinds
    /// stream their statistics and always use every row.
    #[arg(long, value_name = "N")]
    pub sample: Option<usize>,
    /// End the file in a quantizer fitted on the calibrated fit rows:
    /// int8[:ranges=global|dim], uint8[:...], binary[:itq=true|false,iters=N],
    /// ubinary[:...], pq:m=M[,opq=true|false,iters=N] (product quantizer with an OPQ
    /// rotation: M bytes per vector); `bertflow kinds` lists them. After pca, binary and
    /// ubinary fit an ITQ rotation unless itq=false (plain sign bits of principal axes
    /// lose much of the recall). `bertflow encode --calibrator
    /// FILE` then writes codes. The fit rows are kept in memory.
    #[arg(long, value_name = "QUANTIZER")]
    pub quantize: Option<QuantRequest>,
    #[command(flatten)]
    pub weighting: WeightingArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub data: DataArgs,
    /// Where to write the calibrator (.safetensors).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run(a: FitArgs) -> Result<()> {
    bertflow_core::fitting::check_sample(a.sample)?;
    // The quantizer's defaults that depend on the calibrator (ITQ after a rotation).
    let quantizer = a.quantize.map(|q| q.after(a.kind.kind()));
    let weighting = a.weighting.clone();
    let (outcome, what) = match &a.embeddings {
        Some(_) if !a.prompt.is_default() => {
            anyhow::bail!("--prompt-name and --prompt apply when bertflow encodes sentences, not to --embeddings")
        }
        Some(_) if !weighting.is_plain_mean() => {
            anyhow::bail!(
                "--weighting applies when bertflow encodes sentences, not to --embeddings"
            )
        }
        Some(path) => {
            let cfg = ExternalFit {
                input: path.clone(),
                spec: a.kind.clone(),
                label: a.label.clone(),
                sample: a.sample,
            };
            let out = match &quantizer {
                Some(q) => quantize::fit_embeddings_quantized(&cfg, q, &*progress::handle())?,
                None => fit_embeddings(&cfg, &*progress::handle())?,
            };
            (out, "embedding rows")
        }
        None => {
            let sentences = match &a.on {
                Corpus::Task(c, t) => fit_sentences(&a.data.dir(), *t, *c)?,
                Corpus::File(p) => read_sentences(p, false, EmptyLines::Skip)?.texts,
            };
            let sentences = dedup_preserving_order(sentences);
            let mut model = a.model.clone();
            model.prompt = a.prompt.clone();
            let emb = crate::args::load_model(&model)?;
            let out = match &quantizer {
                Some(q) => quantize::fit_sentences_quantized(
                    &emb, &sentences, &a.pooling, &a.kind, a.sample, &weighting, q,
                )?,
                None => fitting::fit_sentences(
                    &emb, &sentences, &a.pooling, &a.kind, a.sample, &weighting,
                )?,
            };
            (out, "sentences")
        }
    };
    let FitOutcome { fitted, meta } = outcome;
    fitted
        .save(&a.output, &meta)
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    // Descriptions that state the dimensions already (whiten's) are not repeated.
    let described = fitted.describe();
    let dims = format!("{} -> {} dims", fitted.input_dim(), fitted.output_dim());
    let dims = if described.contains(&dims) {
        String::new()
    } else {
        format!(" ({dims})")
    };
    let stage = meta
        .quantizer
        .as_ref()
        .map(|q| format!(", then {}", q.describe()))
        .unwrap_or_default();
    progress::note(format!(
        "fitted {described} on {} {what}{dims}{stage}; wrote {}",
        meta.fit_corpus_size,
        a.output.display()
    ));
    Ok(())
}
