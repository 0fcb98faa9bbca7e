//! `bertflow bench`: throughput of the encoder and wall time of a BERT-flow fit,
//! on the same data as the PyTorch references in scripts/reference/ (see
//! scripts/bench.sh and benchmarks/).
//!
//! * `bench encode`: which kernels ran (and where the choice came from: env,
//!   cache, measured, rule), and the linear layers' GFLOP/s over the whole pass;
//!   the unique sentences of STS-B test (2,551 after whitespace
//!   normalisation; 2,552 raw strings), encoded without the
//!   cache after a warm-up pass, for each precision and worker-thread count;
//!   sentences/s, best and median of `--repeat` runs. `--mode stream`: every STS-B
//!   test sentence in file order, consecutive padded batches; `--mode latency`: the
//!   unique sentences one at a time (batch 1), p50/p99 milliseconds.
//! * `bench flow`: the deduplicated union of the fit corpora (`target-scored`) of the
//!   seven tasks (29,511 sentences), encoded through the cache, then one default
//!   flow fit (L=3, K=3, W=32, Adam 1e-3, batch 32, 1 epoch) timed `--repeat` times;
//!   `--save-npy` writes the embedding matrix so the PyTorch flow trains on the
//!   same data.
//!
//! The benchmarks themselves live in `bertflow_core::bench`; this file parses
//! arguments and prints.
use crate::args::{parse_pooling, parse_precision, DataArgs, ModelArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_core::bench::{
    bench_encode, bench_flow, cores, cpu_model, EncodeBench, EncodeMode, FlowBench,
};
use bertflow_core::calib::CalibSpec;
use bertflow_core::encoder::{Pooling, Precision};
use clap::{Args, Subcommand};
use std::path::PathBuf;

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
    #[arg(long, short = 'm', default_value_t = bertflow_core::defaults::model())]
    pub model: String,
    /// Truncate sentences at this many tokens [default: the model's position limit].
    #[arg(long, value_name = "TOKENS")]
    pub max_len: Option<usize>,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value_t = bertflow_core::pipeline::DEFAULT_POOLING, value_parser = parse_pooling)]
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
    /// Precisions to measure, comma-separated (fp32, int8; see `--precision` of
    /// encode).
    #[arg(long, value_delimiter = ',', default_value = "fp32", value_parser = parse_precision, value_name = "P,...")]
    pub precision: Vec<Precision>,
    /// sorted: the unique sentences sorted by length, batches of one length;
    /// stream: every sentence in file order, consecutive padded batches;
    /// latency: the unique sentences one at a time (p50/p99 ms).
    #[arg(long, value_enum, default_value = "sorted")]
    pub mode: EncodeMode,
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
    #[arg(long, short = 'p', default_value_t = bertflow_core::pipeline::DEFAULT_POOLING, value_parser = parse_pooling)]
    pub pooling: Pooling,
    #[arg(long, default_value = "flow", value_name = "KIND",
          help = format!("Calibrator to fit [default: the default flow]. {}", crate::cmd_kinds::spec_help()),
          long_help = format!("Calibrator to fit [default: the default flow]. {}", crate::cmd_kinds::spec_long_help()))]
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

fn run_encode(a: EncodeBenchArgs) -> Result<()> {
    let cfg = EncodeBench {
        model: a.model.clone(),
        max_len: a.max_len,
        pooling: a.pooling.clone(),
        threads: a.threads.clone(),
        batch_size: a.batch_size,
        repeat: a.repeat,
        precisions: a.precision.clone(),
        mode: a.mode,
        data_dir: a.data.dir(),
    };
    let text = !a.json;
    let mode = format!("{:?}", a.mode).to_lowercase();
    let report = bench_encode(
        &cfg,
        &*progress::handle(),
        &mut |enc, precision, sentences, tokens| {
            if text {
                println!(
                    "bench encode ({mode}, {precision}): {} ({}), {sentences} STS-B test sentences \
                     ({tokens} tokens), batch {}, {} cores ({}), \
                     kernel {} (kernels: {})",
                    enc.model_id(),
                    a.pooling,
                    a.batch_size,
                    cores(),
                    cpu_model(),
                    enc.model().kernel_name(),
                    enc.kernels().describe()
                );
            }
        },
        &mut |r| {
            if text {
                let l = r
                    .p50_ms
                    .zip(r.p99_ms)
                    .map(|(a, b)| format!(", p50 {a:.2} ms, p99 {b:.2} ms"))
                    .unwrap_or_default();
                let secs: Vec<String> = r.seconds.iter().map(|s| format!("{s:.3}")).collect();
                let unit = if r.precision == "int8" {
                    "GOP/s"
                } else {
                    "GFLOP/s"
                };
                println!(
                    "{} threads {}: best {:.1} sentences/s, median {:.1} sentences/s ({} runs: {} s){l}; \
                     {} linear layers {:.1} {unit} over the whole pass",
                    r.precision,
                    r.threads,
                    r.best_sentences_per_s,
                    r.median_sentences_per_s,
                    secs.len(),
                    secs.join(", "),
                    r.kernel,
                    r.linear_gflops
                );
            }
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

fn run_flow(a: FlowBenchArgs) -> Result<()> {
    let cfg = FlowBench {
        pooling: a.pooling.clone(),
        spec: a.spec.clone(),
        repeat: a.repeat,
        data_dir: a.data.dir(),
    };
    let embedder = crate::args::load_model(&a.model)?;
    let text = !a.json;
    let report =
        bench_flow(
            &cfg,
            &embedder,
            &*progress::handle(),
            &mut |x, secs| {
                if text {
                    println!(
                    "bench flow: {} ({}), fit corpus of the seven tasks (target-scored, unique): \
                     {} x {} (embedded in {secs:.1} s{})",
                    embedder.encoder.model_id(),
                    a.pooling,
                    x.nrows(),
                    x.ncols(),
                    if embedder.cache.is_some() { ", through the cache" } else { "" }
                );
                }
                if let Some(p) = &a.save_npy {
                    bertflow_core::write_file(p, bertflow_core::io::npy_bytes(x))?;
                    if text {
                        println!("wrote {}", p.display());
                    }
                }
                Ok(())
            },
            &mut |i, r| {
                if text {
                    let losses = match (r.initial_loss, r.final_loss) {
                        (Some(i), Some(f)) => {
                            format!(", NLL {i:.4} -> {f:.4} bits/dim (first batch -> epoch mean)")
                        }
                        _ => String::new(),
                    };
                    let cpu = r
                        .cpu_seconds
                        .map(|c| format!(", CPU {c:.2} s"))
                        .unwrap_or_default();
                    println!(
                        "fit {} #{}: {:.3} s wall{cpu}, {} steps{losses}",
                        a.spec,
                        i + 1,
                        r.seconds,
                        r.steps
                    );
                }
            },
        )
        .with_context(|| format!("bench flow ({})", a.spec))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if let (Some(best), Some(median)) = (report.best_seconds, report.median_seconds) {
        println!(
            "fit {}: best {best:.3} s, median {median:.3} s over {} runs",
            a.spec,
            report.runs.len()
        );
    }
    Ok(())
}
