//! Times one epoch of a default BERT-flow fit on seeded random anisotropic
//! data of the size of the STS fit corpus (29,500 x 384).
//!
//! `cargo run --release -p bertflow-calib --example flow_fit_bench [n] [d] [spec]`
//! (defaults: 29500, 384, `flow`).

use std::time::Instant;

use bertflow_calib::{fit, CalibSpec, Calibrator, FitOptions};
use bertflow_numeric::SplitMix64;
use ndarray::Array2;

/// CPU time of this thread in seconds (Linux), to tell the cost of the fit
/// from time spent waiting for a busy machine.
fn thread_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(29_500), |s| s.parse())?;
    let d: usize = args.next().map_or(Ok(384), |s| s.parse())?;
    let mut g = SplitMix64::new(2020);
    // Anisotropic: per-dimension scales spanning three orders of magnitude,
    // a common offset, and a few shared factors (a dominant direction, as in
    // BERT embeddings).
    let scales: Vec<f64> = (0..d)
        .map(|j| 10f64.powf(-2.0 + 3.0 * j as f64 / d as f64))
        .collect();
    let offsets: Vec<f64> = (0..d).map(|_| g.normal()).collect();
    let factors: Vec<Vec<f64>> = (0..4)
        .map(|_| (0..d).map(|_| g.normal()).collect())
        .collect();
    let mut x = Array2::<f32>::zeros((n, d));
    for mut row in x.rows_mut() {
        let f: Vec<f64> = (0..factors.len()).map(|_| g.normal()).collect();
        for (j, v) in row.iter_mut().enumerate() {
            let shared: f64 = f.iter().zip(&factors).map(|(a, u)| a * u[j]).sum();
            *v = (offsets[j] + scales[j] * g.normal() + 0.5 * shared) as f32;
        }
    }
    let spec: CalibSpec = args.next().as_deref().unwrap_or("flow").parse()?;
    let mut last = None;
    let mut opts = FitOptions::new().with_progress(|p| last = Some(p));
    let cpu0 = thread_cpu_seconds();
    let start = Instant::now();
    let fitted = fit(&spec, x.view(), &mut opts)?;
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu0.zip(thread_cpu_seconds()).map(|(a, b)| b - a);
    drop(opts);
    let p = last.ok_or("no progress reported")?;
    println!(
        "fitted {} on {n} x {d} in {secs:.3} s ({} steps, {:.1} ms/step)",
        spec,
        p.total_steps,
        1e3 * secs / p.total_steps as f64
    );
    if let Some(cpu) = cpu {
        println!("fit CPU time {cpu:.3} s (wall {secs:.3} s)");
    }
    println!("{}", fitted.describe());
    let start = Instant::now();
    let z = fitted.transform(x.view())?;
    println!(
        "transform of {} rows in {:.3} s",
        z.nrows(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
