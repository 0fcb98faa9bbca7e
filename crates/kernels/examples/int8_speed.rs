//! Throughput of the int8 linear layer on encoder shapes, per available kernel:
//! `cargo run --release -p bertflow-kernels --example int8_speed`.
use bertflow_kernels::{Act, Isa, QuantLinear};
use std::time::Instant;

fn main() {
    let m = 448;
    for (k, n) in [(384, 1152), (384, 384), (384, 1536), (1536, 384)] {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 255) as f32 / 255.0 - 0.5)
            .collect();
        let b = vec![0.1f32; n];
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104_729) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let lin = QuantLinear::new(&w, &b, n, k).unwrap();
        let mut out = vec![0f32; m * n];
        for isa in Isa::available_all() {
            lin.forward(isa, &x, m, None, Act::None, &mut out).unwrap();
            let reps = 20;
            let t = Instant::now();
            for _ in 0..reps {
                lin.forward(isa, &x, m, None, Act::None, &mut out).unwrap();
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "m={m} k={k} n={n} {:<10} {:8.3} ms  {:6.1} G int8 ops/s",
                isa.name(),
                s * 1e3,
                2.0 * (m * k * n) as f64 / s / 1e9
            );
        }
    }
}
