//! Choosing kernels by measurement: time each eligible fp32 [`Path`] and int8
//! [`Isa`] on a model's layer shapes and keep the fastest.
//!
//! * [`cpu_key`]: what identifies a CPU for a cached choice (vendor, family,
//!   model and the instruction-set flags the kernels use).
//! * [`fp32_candidates`] / [`int8_candidates`]: the kernels a measurement
//!   chooses among. Not the portable ones (unless nothing else runs), and for
//!   int8 only those with the widest activation codes: AVX2's 7-bit codes are
//!   less accurate, so speed never trades them in for 8-bit ones.
//! * [`measure_fp32`] / [`measure_int8`]: every kernel on every shape, in
//!   interleaved rounds (a busy spell hits all kernels alike), after one untimed
//!   call each; the best time per (kernel, shape) is kept.
//! * [`Measurement::fastest`]: the kernel with the least total time over the
//!   shapes; the rule's kernel ([`Path::best`], [`Isa::best`]) stays unless
//!   another one beats it by more than [`MARGIN`], so that noise does not make
//!   the choice flip between two kernels of equal speed.
//! * [`peak`]: one core's FMA and VNNI throughput (register-only loops), the
//!   limit the measured GFLOP/s are read against.
//!
//! The kernels compared give bit for bit the results of their scalar models;
//! the fp32 classes ([`Path::numerics`]) differ from each other in the last
//! bits, so whoever caches vectors keys them by the kernel's class.
use crate::act::Act;
use crate::fp32::{Fp32Error, PackedLinear, Path};
use crate::int8::{Isa, KernelError, QuantInput, QuantLinear};
use std::time::{Duration, Instant};

pub mod peak;

/// A cached choice made by an older set of kernels is measured again: bump this
/// when a kernel is added or its speed changes.
pub const KERNELS_VERSION: u32 = 1;

/// How much faster (relative total time) another kernel must be to replace
/// the rule's kernel.
pub const MARGIN: f64 = 0.03;

/// Rounds of a measurement: at least this many, whatever the budget.
const MIN_ROUNDS: usize = 3;
/// Rounds of a measurement: at most this many.
const MAX_ROUNDS: usize = 40;

/// One product `[m, k] x [k, n]` of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Token rows.
    pub m: usize,
    /// Input features.
    pub k: usize,
    /// Output features.
    pub n: usize,
}

impl Shape {
    /// Floating-point operations (one multiply and one add per product term).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.k as f64 * self.n as f64
    }
}

/// Rows of a measured product: a batch of 32 sentences of 8 tokens, the middle
/// of STS-B's lengths (the layers' weights, not the rows, decide the speed).
pub const TUNE_ROWS: usize = 256;

/// The products of one encoder layer with `hidden` features and an FFN of
/// `intermediate` (gated FFNs: twice that up): fused Q/K/V, attention output,
/// FFN up and down, each on `m` rows.
pub fn layer_shapes(m: usize, hidden: usize, intermediate: usize, gated: bool) -> Vec<Shape> {
    let up = if gated {
        2 * intermediate
    } else {
        intermediate
    };
    vec![
        Shape {
            m,
            k: hidden,
            n: 3 * hidden,
        },
        Shape {
            m,
            k: hidden,
            n: hidden,
        },
        Shape {
            m,
            k: hidden,
            n: up,
        },
        Shape {
            m,
            k: intermediate,
            n: hidden,
        },
    ]
}

/// This CPU for a cached choice: vendor, family, model and the flags the
/// kernels test, e.g. `AuthenticAMD family 25 model 17 [avx2 fma avx512f
/// avx512bw avx512vl avx512vnni]`.
pub fn cpu_key() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        #[allow(unused_unsafe)]
        // SAFETY: CPUID leaves 0 and 1 exist on every x86-64 CPU.
        let (v, f) = unsafe { (__cpuid(0), __cpuid(1)) };
        let vendor: Vec<u8> = [v.ebx, v.edx, v.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        let vendor: String = String::from_utf8_lossy(&vendor)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let base = (f.eax >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((f.eax >> 20) & 0xff)
        } else {
            base
        };
        let model = if base == 0x6 || base == 0xf {
            ((f.eax >> 12) & 0xf0) | ((f.eax >> 4) & 0xf)
        } else {
            (f.eax >> 4) & 0xf
        };
        use std::arch::is_x86_feature_detected as has;
        let flags = [
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vl", has!("avx512vl")),
            ("avx512vnni", has!("avx512vnni")),
            ("avxvnni", has!("avxvnni")),
        ];
        let flags: Vec<&str> = flags.iter().filter(|f| f.1).map(|f| f.0).collect();
        format!(
            "{vendor} family {family} model {model} [{}]",
            flags.join(" ")
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        format!("{} (no CPUID)", std::env::consts::ARCH)
    }
}

/// The fp32 kernels a measurement chooses among: every one this CPU runs but
/// the portable one, unless it is the only one.
pub fn fp32_candidates() -> Vec<Path> {
    let v: Vec<Path> = Path::available_all()
        .into_iter()
        .filter(|&p| p != Path::Scalar)
        .collect();
    if v.is_empty() {
        vec![Path::Scalar]
    } else {
        v
    }
}

/// The int8 kernels a measurement chooses among: of those this CPU runs (not
/// the portable one, unless it is the only one), the ones with the widest
/// activation codes.
pub fn int8_candidates() -> Vec<Isa> {
    let fast: Vec<Isa> = Isa::available_all()
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .collect();
    let Some(widest) = fast.iter().map(|i| i.act_max()).max() else {
        return vec![Isa::Scalar];
    };
    fast.into_iter().filter(|i| i.act_max() == widest).collect()
}

/// The best time of one kernel on one shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub kernel: &'static str,
    pub shape: Shape,
    /// Seconds of the fastest call.
    pub seconds: f64,
}

impl Timing {
    /// Nominal GFLOP/s (`2 m k n` per call; int8: operations on codes).
    pub fn gflops(&self) -> f64 {
        self.shape.flops() / self.seconds / 1e9
    }
}

/// The timings of some kernels on some shapes.
#[derive(Clone, Debug, Default)]
pub struct Measurement {
    /// Kernel by kernel, shape by shape.
    pub timings: Vec<Timing>,
    /// Interleaved rounds run.
    pub rounds: usize,
    /// Wall seconds, warm-up and packing included.
    pub seconds: f64,
}

impl Measurement {
    /// The sum over the shapes of `kernel`'s best times (`None` if not measured).
    pub fn total(&self, kernel: &str) -> Option<f64> {
        let t: Vec<f64> = self
            .timings
            .iter()
            .filter(|t| t.kernel == kernel)
            .map(|t| t.seconds)
            .collect();
        (!t.is_empty()).then(|| t.iter().sum())
    }

    /// Of `candidates`, the one with the least total time; `rule` (if among
    /// them) unless another beats it by more than [`MARGIN`]. `None` when none
    /// was measured.
    pub fn fastest(&self, candidates: &[&'static str], rule: &str) -> Option<&'static str> {
        let mut best: Option<(&'static str, f64)> = None;
        for &c in candidates {
            if let Some(t) = self.total(c) {
                if best.is_none_or(|(_, b)| t < b) {
                    best = Some((c, t));
                }
            }
        }
        let (fastest, t) = best?;
        match candidates.iter().find(|&&c| c == rule) {
            Some(&r) if self.total(r).is_some_and(|tr| t >= tr * (1.0 - MARGIN)) => Some(r),
            _ => Some(fastest),
        }
    }
}

/// Deterministic pseudo-random values in [-scale, scale) (xorshift).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Weights `[n, k]` of the size a trained layer has, a bias and `m` inputs.
fn layer_data(s: &Shape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let w = values(s.n * s.k, seed, 1.0 / (s.k as f32).sqrt());
    let b = values(s.n, seed + 1, 0.1);
    let x = values(s.m * s.k, seed + 2, 1.0);
    (w, b, x)
}

/// Every kernel `0..kernels` on every shape `0..shapes` by `run(kernel, shape)`:
/// one untimed call each, then rounds (kernels in a rotating order) until both
/// [`MIN_ROUNDS`] and `budget` are reached, or [`MAX_ROUNDS`]; the best second
/// per (kernel, shape), kernel-major.
fn interleaved<E>(
    kernels: usize,
    shapes: usize,
    budget: Duration,
    mut run: impl FnMut(usize, usize) -> Result<(), E>,
) -> Result<(Vec<f64>, usize), E> {
    let start = Instant::now();
    let mut best = vec![f64::INFINITY; kernels * shapes];
    for k in 0..kernels {
        for s in 0..shapes {
            run(k, s)?;
        }
    }
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && (rounds < MIN_ROUNDS || start.elapsed() < budget) {
        for i in 0..kernels {
            let k = (i + rounds) % kernels;
            for s in 0..shapes {
                let t = Instant::now();
                run(k, s)?;
                let e = t.elapsed().as_secs_f64();
                let b = &mut best[k * shapes + s];
                *b = b.min(e);
            }
        }
        rounds += 1;
    }
    Ok((best, rounds))
}

/// Times the fp32 kernels `paths` on `shapes` (about `budget` of rounds after
/// packing and one warm-up call each); an error if this CPU lacks one.
pub fn measure_fp32(
    paths: &[Path],
    shapes: &[Shape],
    budget: Duration,
) -> Result<Measurement, Fp32Error> {
    let start = Instant::now();
    let mut layers = Vec::with_capacity(shapes.len());
    for (i, s) in shapes.iter().enumerate() {
        let (w, b, x) = layer_data(s, 17 + 3 * i as u64);
        let lin = PackedLinear::new(&w, &b, s.n, s.k)?;
        layers.push((lin, x, vec![0f32; s.m * s.n]));
    }
    let (best, rounds) = interleaved(paths.len(), shapes.len(), budget, |k, s| {
        let (lin, x, out) = &mut layers[s];
        let m = shapes[s].m;
        lin.forward_with(paths[k], x, m, None, Act::None, out)?;
        std::hint::black_box(&out);
        Ok(())
    })?;
    Ok(collect(
        paths.iter().map(|p| p.name()),
        shapes,
        best,
        rounds,
        start,
    ))
}

/// Times the int8 kernels `isas` on `shapes` (inputs quantised beforehand, as
/// the encoder quantises a layer input once); an error if this CPU lacks one.
pub fn measure_int8(
    isas: &[Isa],
    shapes: &[Shape],
    budget: Duration,
) -> Result<Measurement, KernelError> {
    let start = Instant::now();
    let mut layers = Vec::with_capacity(shapes.len());
    for (i, s) in shapes.iter().enumerate() {
        let (w, b, x) = layer_data(s, 17 + 3 * i as u64);
        let lin = QuantLinear::new(&w, &b, s.n, s.k)?;
        let mut inputs = Vec::with_capacity(isas.len());
        for &isa in isas {
            isa.check()?;
            let mut q = QuantInput::new();
            q.quantize(isa, &x, s.m, s.k)?;
            inputs.push(q);
        }
        layers.push((lin, inputs, vec![0f32; s.m * s.n]));
    }
    let (best, rounds) = interleaved(isas.len(), shapes.len(), budget, |k, s| {
        let (lin, inputs, out) = &mut layers[s];
        lin.forward_quantized(isas[k], &inputs[k], None, Act::None, out)?;
        std::hint::black_box(&out);
        Ok(())
    })?;
    Ok(collect(
        isas.iter().map(|i| i.name()),
        shapes,
        best,
        rounds,
        start,
    ))
}

fn collect(
    names: impl Iterator<Item = &'static str>,
    shapes: &[Shape],
    best: Vec<f64>,
    rounds: usize,
    start: Instant,
) -> Measurement {
    let names: Vec<&'static str> = names.collect();
    let timings = names
        .iter()
        .flat_map(|&kernel| shapes.iter().map(move |&shape| (kernel, shape)))
        .zip(best)
        .map(|((kernel, shape), seconds)| Timing {
            kernel,
            shape,
            seconds,
        })
        .collect();
    Measurement {
        timings,
        rounds,
        seconds: start.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(kernel: &'static str, seconds: f64) -> Timing {
        Timing {
            kernel,
            shape: Shape { m: 1, k: 2, n: 3 },
            seconds,
        }
    }

    #[test]
    fn fastest_keeps_the_rule_within_the_margin() {
        let m = Measurement {
            timings: vec![
                timing("a", 1.0),
                timing("a", 1.0),
                timing("b", 0.99),
                timing("b", 0.99),
                timing("c", 3.0),
            ],
            rounds: 3,
            seconds: 0.1,
        };
        assert_eq!(m.total("a"), Some(2.0));
        assert_eq!(m.total("z"), None);
        // b is 1% faster than the rule's a: a stays.
        assert_eq!(m.fastest(&["a", "b", "c"], "a"), Some("a"));
        // Without a rule among them, the fastest.
        assert_eq!(m.fastest(&["a", "b", "c"], "x"), Some("b"));
        // c (3.0) is 50% slower than its rival a: a wins over the rule c.
        assert_eq!(m.fastest(&["a", "c"], "c"), Some("a"));
        assert_eq!(m.fastest(&["z"], "z"), None);
    }

    #[test]
    fn candidates_are_available_and_int8_ones_share_the_widest_codes() {
        let f = fp32_candidates();
        assert!(!f.is_empty() && f.iter().all(|p| p.available()));
        assert!(f.contains(&Path::best()), "{f:?}");
        let i = int8_candidates();
        assert!(!i.is_empty() && i.iter().all(|x| x.available()));
        assert!(i.contains(&Isa::best()), "{i:?}");
        assert!(i.iter().all(|x| x.act_max() == i[0].act_max()));
    }

    #[test]
    fn layer_shapes_follow_the_config() {
        let s = layer_shapes(8, 384, 1536, false);
        let kn: Vec<(usize, usize)> = s.iter().map(|s| (s.k, s.n)).collect();
        assert_eq!(kn, [(384, 1152), (384, 384), (384, 1536), (1536, 384)]);
        assert_eq!(layer_shapes(8, 4, 6, true)[2].n, 12);
        assert_eq!(s[0].flops(), 2.0 * 8.0 * 384.0 * 1152.0);
    }

    #[test]
    fn measurements_cover_every_kernel_and_shape() {
        let shapes = layer_shapes(7, 16, 40, false);
        let paths = Path::available_all();
        let m = measure_fp32(&paths, &shapes, Duration::ZERO).unwrap();
        assert_eq!(m.timings.len(), paths.len() * shapes.len());
        assert_eq!(m.rounds, MIN_ROUNDS);
        assert!(m.timings.iter().all(|t| t.seconds.is_finite()));
        let isas = Isa::available_all();
        let m = measure_int8(&isas, &shapes, Duration::ZERO).unwrap();
        assert_eq!(m.timings.len(), isas.len() * shapes.len());
        let names: Vec<&str> = isas.iter().map(|i| i.name()).collect();
        let chosen = m.fastest(&names, Isa::best().name()).unwrap();
        assert!(names.contains(&chosen));
    }

    #[test]
    fn the_cpu_key_names_vendor_family_model_and_flags() {
        let k = cpu_key();
        #[cfg(target_arch = "x86_64")]
        {
            assert!(k.contains(" family ") && k.contains(" model "), "{k}");
            assert_eq!(
                k.contains("avx512f"),
                std::arch::is_x86_feature_detected!("avx512f"),
                "{k}"
            );
        }
        assert_eq!(k, cpu_key());
    }
}
