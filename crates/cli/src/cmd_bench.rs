//! `bertflow bench`: throughput of the encoder and wall time of a BERT-flow fit,
//! on the same data as the PyTorch references in scripts/reference/ (see
//! scripts/bench.sh and benchmarks/).
//!
//! * `bench encode`: the unique sentences of STS-B test (2,551 after whitespace
//!   normalisation; 2,552 raw strings), encoded without the
//!   cache after a warm-up pass, for each worker-thread count; sentences/s, best and
//!   median of `--repeat` runs.
//! * `bench flow`: the deduplicated union of the fit corpora (`target-scored`) of the
//!   seven tasks (29,511 sentences), encoded through the cache, then one default
//!   flow fit (L=3, K=3, W=32, Adam 1e-3, batch 32, 1 epoch) timed `--repeat` times;
//!   `--save-npy` writes the embedding matrix so the PyTorch flow trains on the
//!   same data.
use crate::args::{parse_pooling, DataArgs, ModelArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_calib::{CalibSpec, FitOptions, Fitted};
use bertflow_core::DEFAULT_MODEL;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling};
use bertflow_eval::{
    dedup_preserving_order, fit_sentences, load_task, unique_sentences, FitCorpus, Task,
};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// Unique sentences of STS-B test after whitespace normalisation (2,552 raw strings:
/// "A  man is dancing." with two spaces is the 2,552nd).
const STSB_TEST_UNIQUE: usize = 2551;
/// Unique sentences of the seven tasks' `target-scored` fit corpora.
const FIT_CORPUS_UNIQUE: usize = 29_511;
/// A 1-minute load average above this means the machine is busy: timings are suspect.
const BUSY_LOAD: f64 = 1.5;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Subcommand, Debug)]
pub enum BenchWhat {
    /// Encoder throughput (sentences/s) on the 2,551 unique sentences of STS-B test,
    /// without the cache, for each worker-thread count.
    Encode(EncodeBenchArgs),
    /// Wall time of one default BERT-flow fit on the 29.5k unique sentences of all
    /// seven tasks.
    Flow(FlowBenchArgs),
}

#[derive(Args, Debug)]
pub struct EncodeBenchArgs {
    /// Model directory or hub id in the local Hugging Face cache.
    #[arg(long, short = 'm', env = "BERTFLOW_MODEL", default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Truncate sentences at this many tokens [default: the model's position limit].
    #[arg(long, value_name = "TOKENS")]
    pub max_len: Option<usize>,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Worker-thread counts to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2",
        value_name = "N,..."
    )]
    pub threads: Vec<usize>,
    /// Sentences per forward pass.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub batch_size: usize,
    /// Timed runs per thread count (after one untimed warm-up run).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: usize,
    #[command(flatten)]
    pub data: DataArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct FlowBenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Calibrator to fit [default: the default flow: L=3, K=3, W=32, Adam lr 1e-3,
    /// batch 32, 1 epoch, seed 42].
    #[arg(long, default_value = "flow", value_name = "KIND")]
    pub spec: CalibSpec,
    /// Write the fit corpus' embedding matrix (rows in corpus order) to this .npy.
    #[arg(long, value_name = "FILE")]
    pub save_npy: Option<PathBuf>,
    /// Timed fits (0: only encode the corpus and write --save-npy).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: usize,
    #[command(flatten)]
    pub data: DataArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.what {
        BenchWhat::Encode(a) => run_encode(a),
        BenchWhat::Flow(a) => run_flow(a),
    }
}

/// The 1-minute load average (Linux), if readable.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn warn_if_busy() -> Option<f64> {
    let load = load_average();
    if let Some(l) = load.filter(|&l| l > BUSY_LOAD) {
        progress::note(format!(
            "warning: the 1-minute load average is {l:.2}: other work may skew the timings"
        ));
    }
    load
}

/// CPU time of the calling thread in seconds (Linux), to tell the cost of the work
/// from time spent waiting for a busy machine.
fn thread_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

/// Best (smallest) and median of `v` (not empty).
fn best_median(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    };
    (s[0], median)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn run_encode(a: EncodeBenchArgs) -> Result<()> {
    anyhow::ensure!(a.repeat >= 1, "--repeat must be at least 1");
    anyhow::ensure!(
        !a.threads.is_empty() && a.threads.iter().all(|&t| t >= 1),
        "--threads: give thread counts of at least 1"
    );
    let dir = a.data.dir();
    let set = load_task(&dir, Task::StsB)
        .with_context(|| format!("loading STS-B from {}", dir.display()))?;
    let texts = unique_sentences(&set);
    if texts.len() != STSB_TEST_UNIQUE {
        progress::note(format!(
            "warning: STS-B test has {} unique sentences here, not the expected {STSB_TEST_UNIQUE}: \
             numbers are not comparable with scripts/reference/st_encode_bench.py",
            texts.len()
        ));
    }
    let enc = Encoder::load(&a.model, a.max_len)
        .with_context(|| format!("cannot load model '{}'", a.model))?;
    let sources = [enc.source(&a.pooling)?];
    let tokens: usize = texts
        .iter()
        .map(|t| enc.tokenize(t).map(|(ids, _)| ids.len()))
        .sum::<Result<usize, _>>()?;
    let intra = std::env::var("RAYON_NUM_THREADS").unwrap_or_default();
    if !a.json {
        println!(
            "bench encode: {} ({}), {} unique STS-B test sentences ({tokens} tokens), batch {}, \
             RAYON_NUM_THREADS={intra}, {} cores ({})",
            enc.model_id(),
            a.pooling,
            texts.len(),
            a.batch_size,
            cores(),
            cpu_model()
        );
    }
    let mut results = Vec::new();
    for &t in &a.threads {
        let opts = EncodeOptions {
            batch_size: a.batch_size.max(1),
            threads: t,
        };
        let load = warn_if_busy();
        enc.encode(&texts, &sources, &opts, &|_| {})?; // warm-up
        let mut secs = Vec::with_capacity(a.repeat);
        for _ in 0..a.repeat {
            let start = Instant::now();
            let out = enc.encode(&texts, &sources, &opts, &|_| {})?;
            secs.push(start.elapsed().as_secs_f64());
            std::hint::black_box(out);
        }
        let (best, median) = best_median(&secs);
        let n = texts.len() as f64;
        if !a.json {
            println!(
                "threads {t}: best {:.1} sentences/s, median {:.1} sentences/s ({} runs: {} s)",
                n / best,
                n / median,
                secs.len(),
                secs.iter()
                    .map(|s| format!("{s:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        results.push(json!({
            "threads": t,
            "seconds": secs,
            "best_sentences_per_s": n / best,
            "median_sentences_per_s": n / median,
            "load_average_before": load,
        }));
    }
    if a.json {
        let v = json!({
            "bench": "encode",
            "model": enc.model_id(),
            "pooling": a.pooling.to_string(),
            "sentences": texts.len(),
            "tokens": tokens,
            "batch_size": a.batch_size,
            "repeat": a.repeat,
            "cores": cores(),
            "cpu": cpu_model(),
            "results": results,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

fn run_flow(a: FlowBenchArgs) -> Result<()> {
    let dir = a.data.dir();
    bertflow_eval::check_data_dir(&dir, &Task::ALL)?;
    let mut all = Vec::new();
    for &t in &Task::ALL {
        all.extend(
            fit_sentences(&dir, t, FitCorpus::TargetScored)
                .with_context(|| format!("loading {}", t.name()))?,
        );
    }
    let corpus = dedup_preserving_order(all);
    if corpus.len() != FIT_CORPUS_UNIQUE {
        progress::note(format!(
            "warning: the fit corpus has {} unique sentences, not the expected {FIT_CORPUS_UNIQUE}",
            corpus.len()
        ));
    }
    let embedder = a.model.load()?;
    let start = Instant::now();
    let x = embedder.embed(&corpus, &a.pooling)?;
    let embed_secs = start.elapsed().as_secs_f64();
    if !a.json {
        println!(
            "bench flow: {} ({}), fit corpus of {} unique sentences of all seven tasks (target-scored): \
             {} x {} (embedded in {embed_secs:.1} s{})",
            embedder.encoder.model_id(),
            a.pooling,
            corpus.len(),
            x.nrows(),
            x.ncols(),
            if embedder.cache.is_some() { ", through the cache" } else { "" }
        );
    }
    if let Some(p) = &a.save_npy {
        std::fs::write(p, bertflow_core::io::npy_bytes(&x))
            .with_context(|| format!("cannot write {}", p.display()))?;
        if !a.json {
            println!("wrote {}", p.display());
        }
    }
    if a.repeat == 0 {
        if a.json {
            let v = json!({"bench": "flow", "sentences": x.nrows(), "dim": x.ncols(), "embed_seconds": embed_secs});
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        return Ok(());
    }
    let mut runs = Vec::new();
    let mut secs = Vec::new();
    for r in 0..a.repeat {
        let load = warn_if_busy();
        let mut steps = 0usize;
        let mut opts = FitOptions::new().with_progress(|p| steps = p.step);
        let cpu0 = thread_cpu_seconds();
        let start = Instant::now();
        let fitted = bertflow_calib::fit(&a.spec, x.view(), &mut opts)
            .with_context(|| format!("fitting {}", a.spec))?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = cpu0.zip(thread_cpu_seconds()).map(|(c0, c1)| c1 - c0);
        drop(opts);
        let (initial, final_) = match &fitted {
            Fitted::Flow(f) => (Some(f.initial_loss), Some(f.final_loss)),
            _ => (None, None),
        };
        if !a.json {
            let losses = match (initial, final_) {
                (Some(i), Some(f)) => {
                    format!(", NLL {i:.4} -> {f:.4} bits/dim (first batch -> epoch mean)")
                }
                _ => String::new(),
            };
            let cpu_s = cpu.map(|c| format!(", CPU {c:.2} s")).unwrap_or_default();
            println!(
                "fit {} #{}: {wall:.3} s wall{cpu_s}, {steps} steps{losses}",
                a.spec,
                r + 1
            );
        }
        secs.push(wall);
        runs.push(json!({
            "seconds": wall,
            "cpu_seconds": cpu,
            "steps": steps,
            "initial_loss": initial,
            "final_loss": final_,
            "load_average_before": load,
        }));
    }
    let (best, median) = best_median(&secs);
    if a.json {
        let v = json!({
            "bench": "flow",
            "model": embedder.encoder.model_id(),
            "pooling": a.pooling.to_string(),
            "spec": a.spec.to_string(),
            "sentences": x.nrows(),
            "dim": x.ncols(),
            "embed_seconds": embed_secs,
            "best_seconds": best,
            "median_seconds": median,
            "runs": runs,
            "cpu": cpu_model(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "fit {}: best {best:.3} s, median {median:.3} s over {} runs",
            a.spec,
            secs.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::best_median;

    #[test]
    fn best_and_median() {
        assert_eq!(best_median(&[3.0, 1.0, 2.0]), (1.0, 2.0));
        assert_eq!(best_median(&[4.0, 1.0, 2.0, 3.0]), (1.0, 2.5));
        assert_eq!(best_median(&[5.0]), (5.0, 5.0));
    }
}
