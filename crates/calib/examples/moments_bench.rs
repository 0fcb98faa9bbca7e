//! Streams `n x d` float32 rows through [`MomentStats::update`] in chunks,
//! then fits whitening from the statistics; prints the time, the CPU time,
//! the rows per second and the peak resident memory.
//!
//! `cargo run --release -p bertflow-calib --example moments_bench [n] [d] [chunk] [threads]`
//! (defaults: 1000000, 768, 4096, 0 = all cores). The rows come from 8
//! seeded random chunks used in turn, so generating them costs little.

use std::time::Instant;

use bertflow_calib::{CalibSpec, Calibrator, MomentStats};
use bertflow_numeric::SplitMix64;
use ndarray::{s, Array2};

/// CPU time of the whole process in seconds (Linux: utime + stime).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Peak resident memory in MiB (VmHWM).
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    let d: usize = args.next().map_or(Ok(768), |s| s.parse())?;
    let chunk: usize = args.next().map_or(Ok(4096), |s| s.parse())?;
    let threads: usize = args.next().map_or(Ok(0), |s| s.parse())?;
    let mut g = SplitMix64::new(7);
    let scales: Vec<f64> = (0..d)
        .map(|j| 10f64.powf(-1.0 + 2.0 * j as f64 / d as f64))
        .collect();
    let pool: Vec<Array2<f32>> = (0..8)
        .map(|_| Array2::from_shape_fn((chunk, d), |(_, j)| (1.0 + scales[j] * g.normal()) as f32))
        .collect();

    let mut stats = MomentStats::new(d).with_threads(threads);
    let cpu0 = process_cpu_seconds();
    let start = Instant::now();
    let mut done = 0;
    let mut i = 0;
    while done < n {
        let rows = chunk.min(n - done);
        stats.update(pool[i % pool.len()].slice(s![..rows, ..]))?;
        done += rows;
        i += 1;
    }
    let update_s = start.elapsed().as_secs_f64();
    let cpu = cpu0.zip(process_cpu_seconds()).map(|(a, b)| b - a);
    let t = Instant::now();
    let whiten = stats.fit(&"whiten".parse::<CalibSpec>()?)?;
    let fit_s = t.elapsed().as_secs_f64();
    println!(
        "rows {n} dim {d} chunk {chunk} threads {}: update {update_s:.2} s ({:.0} rows/s, \
         cpu {}), whiten fit from moments {fit_s:.2} s -> {}, peak RSS {} MiB",
        if threads == 0 {
            "auto".into()
        } else {
            threads.to_string()
        },
        n as f64 / update_s,
        cpu.map_or("?".into(), |c| format!("{c:.1} s")),
        whiten.output_dim(),
        peak_rss_mib().map_or("?".into(), |m| format!("{m:.0}")),
    );
    Ok(())
}
