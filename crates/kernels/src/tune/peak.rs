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

/// Each instruction kind this CPU has, timed for about `millis` milliseconds
/// (the best of short runs).
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

/// Giga-operations per second of `run(iters)` (`ops_per_iter` per iteration):
/// the best of runs of about half a millisecond for about `millis` ms (short
/// runs, so that on a busy machine some run whole between two preemptions).
#[cfg(target_arch = "x86_64")]
fn rate(millis: u64, ops_per_iter: f64, run: fn(usize) -> u32) -> f64 {
    let calib = 20_000;
    let t = Instant::now();
    std::hint::black_box(run(calib));
    let per = t.elapsed().as_secs_f64().max(1e-9) / calib as f64;
    let iters = ((0.5e-3 / per) as usize).clamp(1_000, 1 << 24);
    let start = Instant::now();
    let mut best = 0f64;
    let mut runs = 0;
    while runs < 3 || start.elapsed().as_secs_f64() * 1e3 < millis as f64 {
        let t = Instant::now();
        std::hint::black_box(run(iters));
        best = best.max(iters as f64 * ops_per_iter / t.elapsed().as_secs_f64() / 1e9);
        runs += 1;
    }
    best
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;

    /// `iters` rounds of `$op(acc, a, b)` on [`CHAINS`] accumulators held in
    /// twelve named registers (an array would be kept in memory, and each
    /// chain would then wait for a store and a load), then every
    /// accumulator's lanes through `$sum`, folded.
    macro_rules! chains {
        ($iters:expr, $zero:expr, $a:expr, $b:expr, $op:ident, $sum:expr) => {{
            let (a, b) = ($a, $b);
            let (mut c0, mut c1, mut c2, mut c3, mut c4, mut c5) =
                ($zero, $zero, $zero, $zero, $zero, $zero);
            let (mut c6, mut c7, mut c8, mut c9, mut c10, mut c11) =
                ($zero, $zero, $zero, $zero, $zero, $zero);
            for _ in 0..$iters {
                c0 = $op(c0, a, b);
                c1 = $op(c1, a, b);
                c2 = $op(c2, a, b);
                c3 = $op(c3, a, b);
                c4 = $op(c4, a, b);
                c5 = $op(c5, a, b);
                c6 = $op(c6, a, b);
                c7 = $op(c7, a, b);
                c8 = $op(c8, a, b);
                c9 = $op(c9, a, b);
                c10 = $op(c10, a, b);
                c11 = $op(c11, a, b);
            }
            let all = [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11];
            debug_assert_eq!(all.len(), CHAINS);
            all.into_iter().map($sum).fold(0u32, u32::wrapping_add)
        }};
    }

    /// Checked by the caller ([`super::peaks`]): each function runs only where
    /// its features were detected.
    pub(super) fn fma_zmm(iters: usize) -> u32 {
        #[target_feature(enable = "avx512f,fma")]
        fn run(iters: usize) -> u32 {
            chains!(
                iters,
                _mm512_set1_ps(0.0),
                _mm512_set1_ps(std::hint::black_box(0.999_999)),
                _mm512_set1_ps(std::hint::black_box(1e-7)),
                _mm512_fmadd_ps,
                |x| _mm512_reduce_add_ps(x).to_bits()
            )
        }
        // SAFETY: `peaks` calls this only where AVX512F and FMA were detected.
        unsafe { run(iters) }
    }

    pub(super) fn fma_ymm(iters: usize) -> u32 {
        #[target_feature(enable = "avx2,fma")]
        fn run(iters: usize) -> u32 {
            chains!(
                iters,
                _mm256_set1_ps(0.0),
                _mm256_set1_ps(std::hint::black_box(0.999_999)),
                _mm256_set1_ps(std::hint::black_box(1e-7)),
                _mm256_fmadd_ps,
                |x| {
                    let mut v = [0f32; 8];
                    // SAFETY: `v` holds the 8 floats an unaligned store writes.
                    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), x) };
                    v.iter().fold(0u32, |s, f| s.wrapping_add(f.to_bits()))
                }
            )
        }
        // SAFETY: `peaks` calls this only where AVX2 and FMA were detected.
        unsafe { run(iters) }
    }

    pub(super) fn vnni_zmm(iters: usize) -> u32 {
        #[target_feature(enable = "avx512f,avx512vnni")]
        fn run(iters: usize) -> u32 {
            chains!(
                iters,
                _mm512_set1_epi32(0),
                _mm512_set1_epi32(std::hint::black_box(0x0102_0304)),
                _mm512_set1_epi32(std::hint::black_box(0x01ff_0201)),
                _mm512_dpbusd_epi32,
                |x| _mm512_reduce_add_epi32(x) as u32
            )
        }
        // SAFETY: `peaks` calls this only where AVX512F and AVX512-VNNI were detected.
        unsafe { run(iters) }
    }

    pub(super) fn vnni_ymm(iters: usize) -> u32 {
        #[target_feature(enable = "avx2,avxvnni")]
        fn run(iters: usize) -> u32 {
            chains!(
                iters,
                _mm256_set1_epi32(0),
                _mm256_set1_epi32(std::hint::black_box(0x0102_0304)),
                _mm256_set1_epi32(std::hint::black_box(0x01ff_0201)),
                _mm256_dpbusd_avx_epi32,
                |x| {
                    let mut v = [0i32; 8];
                    // SAFETY: `v` holds the 8 i32 an unaligned store writes.
                    unsafe { _mm256_storeu_si256(v.as_mut_ptr().cast(), x) };
                    v.iter().fold(0u32, |s, &i| s.wrapping_add(i as u32))
                }
            )
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
