//! One core's arithmetic peak: register-only loops of independent multiply-adds,
//! the limit that the kernels' GFLOP/s are read against.
//!
//! * `fp32 fma zmm` / `fp32 fma ymm`: `vfmadd` on 16 / 8 floats, 12 independent
//!   chains (more than latency x pipes on current cores): 2 FLOP per lane.
//! * `int8 vnni zmm` / `int8 vnni ymm`: `vpdpbusd` (AVX512-VNNI on 512 bits;
//!   AVX-VNNI on 256), 4 u8 x s8 products summed into each i32 lane: 8
//!   operations per lane, the count the int8 kernels' GOP/s use.
//!
//! [`Path::Avx512Pair`](crate::fp32::Path::Avx512Pair) does one multiply-add
//! and two additions per two products, so its nominal GFLOP/s (2 per product)
//! can exceed the FMA peak.
use std::time::Instant;

/// The throughput of one instruction kind on one core.
#[derive(Clone, Debug, PartialEq)]
pub struct Peak {
    /// e.g. `fp32 fma zmm`.
    pub name: &'static str,
    /// Giga-operations per second (GFLOP/s for fp32, GOP/s for int8).
    pub giga_ops: f64,
}

/// Independent accumulator chains of the loops.
#[cfg(target_arch = "x86_64")]
const CHAINS: usize = 12;

/// Each instruction kind this CPU has, best of three runs of about `millis`
/// milliseconds each.
pub fn peaks(millis: u64) -> Vec<Peak> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let mut out = Vec::new();
        // (name, present, ops per instruction, loop)
        type Kernel = fn(usize) -> u32;
        let kinds: [(&str, bool, f64, Kernel); 4] = [
            (
                "fp32 fma zmm",
                has!("avx512f") && has!("fma"),
                32.0,
                x86::fma_zmm,
            ),
            (
                "fp32 fma ymm",
                has!("avx2") && has!("fma"),
                16.0,
                x86::fma_ymm,
            ),
            (
                "int8 vnni zmm",
                has!("avx512f") && has!("avx512vnni"),
                128.0,
                x86::vnni_zmm,
            ),
            (
                "int8 vnni ymm",
                has!("avx2") && has!("avxvnni"),
                64.0,
                x86::vnni_ymm,
            ),
        ];
        for (name, present, ops, run) in kinds {
            if present {
                out.push(Peak {
                    name,
                    giga_ops: rate(millis, ops * CHAINS as f64, run),
                });
            }
        }
        out
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = millis;
        Vec::new()
    }
}

/// Giga-operations per second of `run(iters)` (`ops_per_iter` per iteration),
/// best of three runs of about `millis` ms after a calibration run.
#[cfg(target_arch = "x86_64")]
fn rate(millis: u64, ops_per_iter: f64, run: fn(usize) -> u32) -> f64 {
    let mut iters = 10_000;
    let t = Instant::now();
    std::hint::black_box(run(iters));
    let per = t.elapsed().as_secs_f64().max(1e-9) / iters as f64;
    iters = ((millis as f64 * 1e-3 / per) as usize).clamp(10_000, 1 << 30);
    (0..3)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(run(iters));
            iters as f64 * ops_per_iter / t.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;

    /// Checked by the caller ([`super::peaks`]): each function runs only where
    /// its features were detected.
    pub(super) fn fma_zmm(iters: usize) -> u32 {
        #[target_feature(enable = "avx512f,fma")]
        fn run(iters: usize) -> u32 {
            let mut acc = [_mm512_set1_ps(0.0); CHAINS];
            let a = _mm512_set1_ps(std::hint::black_box(0.999_999));
            let b = _mm512_set1_ps(std::hint::black_box(1e-7));
            for _ in 0..iters {
                for x in &mut acc {
                    *x = _mm512_fmadd_ps(*x, a, b);
                }
            }
            acc.iter()
                .map(|&x| _mm512_reduce_add_ps(x).to_bits())
                .fold(0, u32::wrapping_add)
        }
        // SAFETY: `peaks` calls this only where AVX512F and FMA were detected.
        unsafe { run(iters) }
    }

    pub(super) fn fma_ymm(iters: usize) -> u32 {
        #[target_feature(enable = "avx2,fma")]
        fn run(iters: usize) -> u32 {
            let mut acc = [_mm256_set1_ps(0.0); CHAINS];
            let a = _mm256_set1_ps(std::hint::black_box(0.999_999));
            let b = _mm256_set1_ps(std::hint::black_box(1e-7));
            for _ in 0..iters {
                for x in &mut acc {
                    *x = _mm256_fmadd_ps(*x, a, b);
                }
            }
            let mut s = 0u32;
            for x in acc {
                let mut v = [0f32; 8];
                // SAFETY: `v` holds the 8 floats an unaligned store writes.
                unsafe { _mm256_storeu_ps(v.as_mut_ptr(), x) };
                s = v.iter().fold(s, |s, f| s.wrapping_add(f.to_bits()));
            }
            s
        }
        // SAFETY: `peaks` calls this only where AVX2 and FMA were detected.
        unsafe { run(iters) }
    }

    pub(super) fn vnni_zmm(iters: usize) -> u32 {
        #[target_feature(enable = "avx512f,avx512vnni")]
        fn run(iters: usize) -> u32 {
            let mut acc = [_mm512_set1_epi32(0); CHAINS];
            let a = _mm512_set1_epi32(std::hint::black_box(0x0102_0304));
            let b = _mm512_set1_epi32(std::hint::black_box(0x01ff_0201));
            for _ in 0..iters {
                for x in &mut acc {
                    *x = _mm512_dpbusd_epi32(*x, a, b);
                }
            }
            acc.iter()
                .map(|&x| _mm512_reduce_add_epi32(x) as u32)
                .fold(0, u32::wrapping_add)
        }
        // SAFETY: `peaks` calls this only where AVX512F and AVX512-VNNI were detected.
        unsafe { run(iters) }
    }

    pub(super) fn vnni_ymm(iters: usize) -> u32 {
        #[target_feature(enable = "avx2,avxvnni")]
        fn run(iters: usize) -> u32 {
            let mut acc = [_mm256_set1_epi32(0); CHAINS];
            let a = _mm256_set1_epi32(std::hint::black_box(0x0102_0304));
            let b = _mm256_set1_epi32(std::hint::black_box(0x01ff_0201));
            for _ in 0..iters {
                for x in &mut acc {
                    *x = _mm256_dpbusd_avx_epi32(*x, a, b);
                }
            }
            let mut s = 0u32;
            for x in acc {
                let mut v = [0i32; 8];
                // SAFETY: `v` holds the 8 i32 an unaligned store writes.
                unsafe { _mm256_storeu_si256(v.as_mut_ptr().cast(), x) };
                s = v.iter().fold(s, |s, &i| s.wrapping_add(i as u32));
            }
            s
        }
        // SAFETY: `peaks` calls this only where AVX2 and AVX-VNNI were detected.
        unsafe { run(iters) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_present_kind_has_a_positive_finite_rate() {
        let p = peaks(1);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            p.iter().any(|p| p.name == "fp32 fma ymm"),
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
        );
        assert!(
            p.iter().all(|p| p.giga_ops.is_finite() && p.giga_ops > 0.0),
            "{p:?}"
        );
    }
}
