//! Wall and CPU time of a calibrator fit (by default one epoch of the default
//! flow) on the deduplicated fit corpus of all seven tasks.
use super::{best_median, cpu_model, thread_cpu_seconds, warn_if_busy, FIT_CORPUS_UNIQUE};
use crate::error::{Context, Result};
use crate::runtime::progress::Progress;
use crate::Embedder;
use bertflow_calib::{CalibSpec, FitOptions, Fitted};
use bertflow_encoder::Pooling;
use bertflow_eval::{dedup_preserving_order, fit_sentences, FitCorpus, Task};
use ndarray::Array2;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// A fit benchmark.
#[derive(Debug, Clone)]
pub struct FlowBench {
    pub pooling: Pooling,
    pub spec: CalibSpec,
    pub repeat: usize,
    pub data_dir: PathBuf,
}

/// One timed fit.
#[derive(Debug, Clone, Serialize)]
pub struct FlowRun {
    pub seconds: f64,
    pub cpu_seconds: Option<f64>,
    pub steps: usize,
    pub initial_loss: Option<f64>,
    pub final_loss: Option<f64>,
    pub load_average_before: Option<f64>,
}

/// The whole benchmark (`bertflow bench flow --json` prints this).
#[derive(Debug, Clone, Serialize)]
pub struct FlowBenchReport {
    pub bench: &'static str,
    pub model: String,
    pub pooling: String,
    pub spec: String,
    pub sentences: usize,
    pub dim: usize,
    pub embed_seconds: f64,
    pub best_seconds: Option<f64>,
    pub median_seconds: Option<f64>,
    pub runs: Vec<FlowRun>,
    pub cpu: String,
}

impl FlowBench {
    /// The deduplicated `target-scored` fit corpus of the seven tasks (a note
    /// when it is not the expected 29,511 sentences).
    pub fn corpus(&self, progress: &dyn Progress) -> Result<Vec<String>> {
        bertflow_eval::check_data_dir(&self.data_dir, &Task::ALL)?;
        let mut all = Vec::new();
        for &t in &Task::ALL {
            all.extend(
                fit_sentences(&self.data_dir, t, FitCorpus::TargetScored)
                    .with_context(|| format!("loading {}", t.name()))?,
            );
        }
        let corpus = dedup_preserving_order(all);
        if corpus.len() != FIT_CORPUS_UNIQUE {
            progress.note(&format!(
                "warning: the fit corpus has {} unique sentences, not the expected {FIT_CORPUS_UNIQUE}",
                corpus.len()
            ));
        }
        Ok(corpus)
    }
}

/// Embeds the corpus (through the embedder's cache), hands the matrix to
/// `on_embedded` (e.g. to save it), then fits `repeat` times; `on_run` sees
/// each fit as it ends.
pub fn bench_flow(
    cfg: &FlowBench,
    embedder: &Embedder,
    progress: &dyn Progress,
    on_embedded: &mut dyn FnMut(&Array2<f32>, f64) -> Result<()>,
    on_run: &mut dyn FnMut(usize, &FlowRun),
) -> Result<FlowBenchReport> {
    let corpus = cfg.corpus(progress)?;
    let start = Instant::now();
    let x = embedder.embed(&corpus, &cfg.pooling)?;
    let embed_seconds = start.elapsed().as_secs_f64();
    on_embedded(&x, embed_seconds)?;
    let mut runs = Vec::new();
    for r in 0..cfg.repeat {
        let load = warn_if_busy(progress);
        let mut steps = 0usize;
        let mut opts = FitOptions::new().with_progress(|p| steps = p.step);
        let cpu0 = thread_cpu_seconds();
        let start = Instant::now();
        let fitted = bertflow_calib::fit(&cfg.spec, x.view(), &mut opts)
            .with_context(|| format!("fitting {}", cfg.spec))?;
        let seconds = start.elapsed().as_secs_f64();
        let cpu_seconds = cpu0.zip(thread_cpu_seconds()).map(|(c0, c1)| c1 - c0);
        drop(opts);
        let (initial_loss, final_loss) = match &fitted {
            Fitted::Flow(f) => (Some(f.initial_loss), Some(f.final_loss)),
            _ => (None, None),
        };
        let run = FlowRun {
            seconds,
            cpu_seconds,
            steps,
            initial_loss,
            final_loss,
            load_average_before: load,
        };
        on_run(r, &run);
        runs.push(run);
    }
    let secs: Vec<f64> = runs.iter().map(|r| r.seconds).collect();
    let (best, median) = best_median(&secs);
    Ok(FlowBenchReport {
        bench: "flow",
        model: embedder.encoder.model_id().to_string(),
        pooling: cfg.pooling.to_string(),
        spec: cfg.spec.to_string(),
        sentences: x.nrows(),
        dim: x.ncols(),
        embed_seconds,
        best_seconds: (!secs.is_empty()).then_some(best),
        median_seconds: (!secs.is_empty()).then_some(median),
        runs,
        cpu: cpu_model(),
    })
}
