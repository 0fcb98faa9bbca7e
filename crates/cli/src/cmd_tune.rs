//! `bertflow tune`: time every fp32 and int8 kernel of this CPU on the model's
//! layer shapes, print the table beside one core's FMA / VNNI peak, and
//! rewrite this CPU's choice in `kernels.json` in the cache directory (what
//! the encoder otherwise measures once, at first use). The work lives in
//! `bertflow_core::bench::bench_tune`; this file parses arguments and prints.
use anyhow::Result;
use bertflow_core::bench::{bench_tune, TuneBench, TuneReport};
use bertflow_core::encoder::EmbeddingCache;
use bertflow_core::DEFAULT_MODEL;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Model whose layer shapes are timed (directory or hub id in the local
    /// Hugging Face cache).
    #[arg(long, short = 'm', env = "BERTFLOW_MODEL", default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Token rows of each timed product (a batch of tokens).
    #[arg(long, default_value_t = bertflow_core::encoder::kernels::tune::TUNE_ROWS, value_name = "N")]
    pub rows: usize,
    /// Milliseconds of timing rounds per precision (at least 3 rounds).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub budget_ms: u64,
    /// Where kernels.json is kept [default: $BERTFLOW_CACHE, else
    /// $XDG_CACHE_HOME/bertflow, else ~/.cache/bertflow].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Measure and print only; leave kernels.json as it is.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: TuneArgs) -> Result<()> {
    let dir = a.cache_dir.unwrap_or_else(EmbeddingCache::default_dir);
    let report = bench_tune(&TuneBench {
        model: a.model,
        rows: a.rows,
        budget: Duration::from_millis(a.budget_ms),
        dir: (!a.dry_run).then_some(dir),
        peak_ms: 100,
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

fn print_text(r: &TuneReport) {
    println!(
        "bertflow tune: {} on {} ({}), one thread, kernels version {}",
        r.model, r.cpu, r.cpu_key, r.kernels_version
    );
    let peaks: Vec<String> = r
        .peaks
        .iter()
        .map(|p| {
            let unit = if p.name.starts_with("int8") {
                "GOP/s"
            } else {
                "GFLOP/s"
            };
            format!("{} {:.1} {unit}", p.name, p.giga_ops)
        })
        .collect();
    println!("peak of one core: {}", peaks.join(", "));
    println!(
        "{:<5} {:<11} {:>20} {:>9} {:>9} {:>7}",
        "", "kernel", "shape m x k x n", "ms", "G(FL)OP/s", "% peak"
    );
    let pct = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.0}"));
    for row in &r.rows {
        let [m, k, n] = row.shape;
        println!(
            "{:<5} {:<11} {:>20} {:>9.3} {:>9.1} {:>7}",
            row.precision,
            row.kernel,
            format!("{m} x {k} x {n}"),
            row.ms,
            row.gflops,
            pct(row.peak_percent)
        );
    }
    println!("per layer (the four products):");
    for t in &r.totals {
        let mark = match (t.chosen, t.eligible) {
            (true, _) => "chosen",
            (false, true) => "eligible",
            (false, false) => "not eligible",
        };
        println!(
            "{:<5} {:<11} {:>20} {:>9.3} {:>9.1} {:>7}  {mark}",
            t.precision,
            t.kernel,
            "layer",
            t.ms,
            t.gflops,
            pct(t.peak_percent)
        );
    }
    println!("chosen: fp32 {}, int8 {}", r.fp32, r.int8);
    match &r.file {
        Some(f) => println!("kept in {f}"),
        None => println!("not kept (--dry-run)"),
    }
    for (var, v) in [
        ("BERTFLOW_FP32_KERNEL", r.env_fp32),
        ("BERTFLOW_INT8_KERNEL", r.env_int8),
    ] {
        if let Some(v) = v {
            println!("note: {var}={v} is set and wins over this choice");
        }
    }
}
