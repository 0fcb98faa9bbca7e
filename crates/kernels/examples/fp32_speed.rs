//! fp32 matrix products on encoder shapes through `gemm` (as the fp32 forward pass
//! calls it), against this core's fp32 FMA peak measured by a register-only loop:
//! `cargo run --release -p bertflow-kernels --example fp32_speed`.
use std::time::Instant;

/// GFLOP/s of 12 independent 8-wide FMA chains (the AVX2 + FMA peak of one core).
#[cfg(target_arch = "x86_64")]
fn fma_peak() -> Option<f64> {
    use std::arch::x86_64::*;
    #[target_feature(enable = "avx2,fma")]
    fn run(iters: usize) -> f32 {
        let mut acc = [_mm256_set1_ps(0.0); 12];
        let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        for _ in 0..iters {
            for x in &mut acc {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        let mut s = 0.0;
        for x in acc {
            let mut v = [0f32; 8];
            // SAFETY: `v` holds 8 f32, the 32 bytes an unaligned store writes.
            unsafe { _mm256_storeu_ps(v.as_mut_ptr(), x) };
            s += v.iter().sum::<f32>();
        }
        s
    }
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
        return None;
    }
    let iters = 50_000_000;
    let t = Instant::now();
    // SAFETY: AVX2 and FMA are present (checked above).
    let s = unsafe { run(iters) };
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(s);
    Some(iters as f64 * 12.0 * 16.0 / secs / 1e9)
}

#[cfg(not(target_arch = "x86_64"))]
fn fma_peak() -> Option<f64> {
    None
}

fn main() {
    if let Some(p) = fma_peak() {
        println!("fp32 FMA peak (register-only loop): {p:6.1} GFLOP/s");
    }
    let m = 448;
    for (k, n) in [(384, 1152), (384, 384), (384, 1536), (1536, 384)] {
        let w: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7919) % 255) as f32 / 255.0 - 0.5)
            .collect();
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104_729) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let mut out = vec![0f32; m * n];
        let run = |out: &mut Vec<f32>| {
            // SAFETY: x is m x k, w is k x n and out is m x n, all row-major and
            // distinct, so every index gemm forms is in bounds and nothing aliases.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    w.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        };
        run(&mut out);
        let reps = 20;
        let t = Instant::now();
        for _ in 0..reps {
            run(&mut out);
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!(
            "m={m} k={k} n={n}: {:8.3} ms  {:6.1} GFLOP/s",
            s * 1e3,
            2.0 * (m * k * n) as f64 / s / 1e9
        );
    }
}
