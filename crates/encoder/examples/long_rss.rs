//! Peak memory of one long input: loads MODEL with a token limit of LEN, encodes
//! the first line of TEXT (cut at LEN tokens) on one thread at fp32 with
//! last-avg pooling, and prints the process's peak resident set (VmHWM) before
//! and after the forward pass. For `benchmarks/long-context.md`:
//!
//! ```sh
//! cargo run --release -p bertflow-encoder --example long_rss -- MODEL TEXT LEN
//! ```
use bertflow_encoder::{EncodeOptions, Encoder, Pooling};

/// The process's peak resident set in KiB (Linux; 0 elsewhere).
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, text, len] = &args[..] else {
        return Err("usage: long_rss MODEL TEXT LEN".into());
    };
    let len: usize = len.parse()?;
    let encoder = Encoder::load(model, Some(len))?;
    let line = std::fs::read_to_string(text)?;
    let line = line.lines().next().unwrap_or_default().to_owned();
    let loaded = peak_kib();
    let source = encoder.source(&"last-avg".parse::<Pooling>()?)?;
    let opts = EncodeOptions {
        batch_size: 1,
        threads: 1,
    };
    let t = std::time::Instant::now();
    let out = encoder.encode(&[line], &[source], &opts, &|_| {})?;
    let secs = t.elapsed().as_secs_f64();
    let peak = peak_kib();
    let tokens = out.tokens[0];
    println!(
        "tokens {tokens} (limit {len}): peak RSS {:.1} MiB after loading, {:.1} MiB after the forward pass ({secs:.2} s); {} truncated",
        loaded as f64 / 1024.0,
        peak as f64 / 1024.0,
        out.num_truncated()
    );
    Ok(())
}
