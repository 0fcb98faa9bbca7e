//! Encoder throughput (sorted batches, the natural file-order stream) and
//! batch-1 latency on STS-B test.
use super::{best_median, cores, cpu_model, quantile, warn_if_busy, STSB_TEST_UNIQUE};
use crate::error::{Context, Result};
use crate::runtime::progress::Progress;
use crate::CoreError;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling, Precision};
use bertflow_eval::{load_task, unique_sentences, Task};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// What an encode benchmark feeds the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EncodeMode {
    /// The unique sentences, sorted by length: batches of one length.
    Sorted,
    /// Every sentence in file order, consecutive padded batches.
    Stream,
    /// The unique sentences one at a time (batch 1): p50/p99 milliseconds.
    Latency,
}

/// An encode benchmark: the model, what to feed it and how often.
#[derive(Debug, Clone)]
pub struct EncodeBench {
    pub model: String,
    pub max_len: Option<usize>,
    pub pooling: Pooling,
    pub threads: Vec<usize>,
    pub batch_size: usize,
    pub repeat: usize,
    pub precisions: Vec<Precision>,
    pub mode: EncodeMode,
    pub data_dir: PathBuf,
}

/// One precision at one thread count.
#[derive(Debug, Clone, Serialize)]
pub struct EncodeRun {
    pub precision: String,
    /// The kernel of the transformer layers' products (e.g. `avx512pair`).
    pub kernel: String,
    /// The linear layers' floating-point (int8: integer) operations on the
    /// real tokens per second of the best run, the whole pass's time: read
    /// beside `bertflow tune`'s per-product GFLOP/s and peak.
    pub linear_gflops: f64,
    pub threads: usize,
    pub seconds: Vec<f64>,
    pub best_sentences_per_s: f64,
    pub median_sentences_per_s: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub load_average_before: Option<f64>,
}

/// The whole benchmark (`bertflow bench encode --json` prints this).
#[derive(Debug, Clone, Serialize)]
pub struct EncodeBenchReport {
    pub bench: &'static str,
    pub mode: EncodeMode,
    pub model: String,
    pub pooling: String,
    pub sentences: usize,
    pub tokens: usize,
    pub batch_size: usize,
    pub repeat: usize,
    pub cores: usize,
    pub cpu: String,
    /// The process's kernels and where they came from (env, cache, measured, rule).
    pub kernels: String,
    /// Linear-layer operations per token (`2 k n` per product, every layer).
    pub linear_flop_per_token: f64,
    pub results: Vec<EncodeRun>,
}

impl EncodeBench {
    /// The sentences the mode feeds the encoder (a note when STS-B test is not
    /// the expected 2,551 unique sentences).
    pub fn sentences(&self, progress: &dyn Progress) -> Result<Vec<String>> {
        let set = load_task(&self.data_dir, Task::StsB)
            .with_context(|| format!("loading STS-B from {}", self.data_dir.display()))?;
        if self.mode == EncodeMode::Stream {
            return Ok(set
                .subsets
                .iter()
                .flat_map(|s| &s.pairs)
                .flat_map(|p| [p.s1.clone(), p.s2.clone()])
                .collect());
        }
        let texts = unique_sentences(&set);
        if texts.len() != STSB_TEST_UNIQUE {
            progress.note(&format!(
                "warning: STS-B test has {} unique sentences here, not the expected {STSB_TEST_UNIQUE}: \
                 numbers are not comparable with scripts/reference/st_encode_bench.py",
                texts.len()
            ));
        }
        Ok(texts)
    }
}

/// Runs the benchmark: for each precision, loads the model; for each thread
/// count, one untimed warm-up run and `repeat` timed runs. `on_run` sees each
/// result as it comes (front ends print it), `on_model` each loaded model.
pub fn bench_encode(
    cfg: &EncodeBench,
    progress: &dyn Progress,
    on_model: &mut dyn FnMut(&Encoder, Precision, usize, usize),
    on_run: &mut dyn FnMut(&EncodeRun),
) -> Result<EncodeBenchReport> {
    if cfg.repeat == 0 {
        return Err(CoreError::setting("repeat", "must be at least 1"));
    }
    if cfg.threads.is_empty() || cfg.threads.contains(&0) {
        return Err(CoreError::setting(
            "threads",
            "give thread counts of at least 1",
        ));
    }
    if cfg.precisions.is_empty() {
        return Err(CoreError::setting(
            "precision",
            "give at least one precision",
        ));
    }
    let texts = cfg.sentences(progress)?;
    let mut results = Vec::new();
    let (mut tokens, mut model_id, mut kernels, mut flop_per_token) =
        (0, String::new(), String::new(), 0.0);
    for &precision in &cfg.precisions {
        let enc = Encoder::load_with_precision(&cfg.model, cfg.max_len, precision)
            .with_context(|| format!("cannot load model '{}' ({precision})", cfg.model))?;
        for note in &enc.kernels().notes {
            progress.note(note);
        }
        model_id = enc.model_id().to_string();
        kernels = enc.kernels().describe();
        flop_per_token = linear_flop_per_token(&enc);
        let sources = [crate::runtime::st_pipeline::source(&enc, &cfg.pooling)?];
        tokens = texts
            .iter()
            .map(|t| enc.tokenize(t).map(|(ids, _)| ids.len()))
            .sum::<std::result::Result<usize, _>>()?;
        on_model(&enc, precision, texts.len(), tokens);
        for &t in &cfg.threads {
            let batch_size = match cfg.mode {
                EncodeMode::Latency => 1,
                _ => cfg.batch_size.max(1),
            };
            let opts = EncodeOptions {
                batch_size,
                threads: t,
            };
            let load = warn_if_busy(progress);
            let run = |lat: &mut Vec<f64>| -> Result<()> {
                match cfg.mode {
                    EncodeMode::Stream => {
                        std::hint::black_box(enc.encode_in_order(
                            &texts,
                            &sources,
                            &opts,
                            &|_| {},
                        )?);
                    }
                    EncodeMode::Latency => {
                        for text in &texts {
                            let start = Instant::now();
                            let one = std::slice::from_ref(text);
                            std::hint::black_box(enc.encode(one, &sources, &opts, &|_| {})?);
                            lat.push(start.elapsed().as_secs_f64());
                        }
                    }
                    EncodeMode::Sorted => {
                        std::hint::black_box(enc.encode(&texts, &sources, &opts, &|_| {})?);
                    }
                }
                Ok(())
            };
            run(&mut Vec::new())?; // warm-up
            let (mut secs, mut lat) = (Vec::with_capacity(cfg.repeat), Vec::new());
            for _ in 0..cfg.repeat {
                let start = Instant::now();
                run(&mut lat)?;
                secs.push(start.elapsed().as_secs_f64());
            }
            let (best, median) = best_median(&secs);
            let n = texts.len() as f64;
            lat.sort_by(f64::total_cmp);
            let r = EncodeRun {
                precision: precision.to_string(),
                kernel: enc.model().kernel_name().to_string(),
                linear_gflops: tokens as f64 * flop_per_token / best / 1e9,
                threads: t,
                seconds: secs,
                best_sentences_per_s: n / best,
                median_sentences_per_s: n / median,
                p50_ms: quantile(&lat, 0.5).map(|s| 1e3 * s),
                p99_ms: quantile(&lat, 0.99).map(|s| 1e3 * s),
                load_average_before: load,
            };
            on_run(&r);
            results.push(r);
        }
    }
    Ok(EncodeBenchReport {
        bench: "encode",
        mode: cfg.mode,
        model: model_id,
        pooling: cfg.pooling.to_string(),
        sentences: texts.len(),
        tokens,
        batch_size: cfg.batch_size,
        repeat: cfg.repeat,
        cores: cores(),
        cpu: cpu_model(),
        kernels,
        linear_flop_per_token: flop_per_token,
        results,
    })
}

/// The linear layers' operations per token: `2 k n` for each product of a
/// layer ([`bertflow_encoder::tuning::shapes`]), times the layers.
pub fn linear_flop_per_token(enc: &Encoder) -> f64 {
    let per_layer: f64 = bertflow_encoder::tuning::shapes(enc.config())
        .iter()
        .map(|s| 2.0 * s.k as f64 * s.n as f64)
        .sum();
    per_layer * enc.num_layers() as f64
}
