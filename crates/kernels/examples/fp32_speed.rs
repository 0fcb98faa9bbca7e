//! fp32 matrix products on encoder shapes (MiniLM's, 448 token rows) on one thread:
//! bertflow's packed layer ([`PackedLinear`], with and without its fused GELU)
//! against a `gemm` call on the transposed weights (the fp32 pass before it), beside
//! this core's fp32 FMA peak measured by a register-only loop; best of 5 runs each:
//! `nice cargo run --release -p bertflow-kernels --example fp32_speed`.
use bertflow_kernels::fp32::Path;
use bertflow_kernels::{Act, PackedLinear};
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

/// Seconds per call of `f`, the best of 5 runs of `reps` calls (after one warm-up).
fn best_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    if let Some(p) = fma_peak() {
        println!("fp32 FMA peak (register-only loop): {p:6.1} GFLOP/s");
    }
    let m = 448;
    for (k, n) in [(384, 1152), (384, 384), (384, 1536), (1536, 384)] {
        // PyTorch's layout [n, k] for the packed layer, transposed [k, n] for gemm.
        let w: Vec<f32> = (0..k * n)
            .map(|i| ((i * 7919) % 255) as f32 / 255.0 - 0.5)
            .collect();
        let mut w_t = vec![0f32; k * n];
        for (o, row) in w.chunks_exact(k).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                w_t[i * n + o] = v;
            }
        }
        let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.01).collect();
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104_729) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let lin = PackedLinear::new(&w, &b, n, k).expect("layer shape");
        let mut out = vec![0f32; m * n];
        let reps = 20;
        let gemm_s = best_secs(reps, || {
            // SAFETY: x is m x k, w_t is k x n and out is m x n, all row-major and
            // distinct, so every index gemm forms is in bounds and nothing aliases.
            unsafe {
                gemm_f32::gemm::f32::get_gemm_fn()(
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
                    w_t.as_ptr(),
                    1,
                    n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm_common::Parallelism::None,
                )
            }
        });
        let mut packed = |path, act| {
            best_secs(reps, || {
                lin.forward_with(path, &x, m, None, act, &mut out)
                    .expect("shapes");
            })
        };
        let best = lin.path();
        let (packed_s, gelu_s) = (packed(best, Act::None), packed(best, Act::GeluErf));
        // The other vector kernels too (not the portable one).
        let others: String = Path::available_all()
            .into_iter()
            .filter(|&p| p != best && p != Path::Scalar)
            .map(|p| {
                let s = packed(p, Act::None);
                format!(
                    " | packed ({}) {:6.1}",
                    p.name(),
                    2.0 * (m * k * n) as f64 / s / 1e9
                )
            })
            .collect();
        let gf = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
        println!(
            "m={m} k={k:4} n={n:4}: gemm {:6.1} GFLOP/s ({:6.3} ms) | packed ({}) {:6.1} \
             ({:6.3} ms) | packed+GELU {:6.1} ({:6.3} ms){others}",
            gf(gemm_s),
            gemm_s * 1e3,
            best.name(),
            gf(packed_s),
            packed_s * 1e3,
            gf(gelu_s),
            gelu_s * 1e3
        );
    }
}
