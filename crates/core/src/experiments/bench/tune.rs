//! `bertflow tune`: time every fp32 and int8 kernel this CPU runs on a model's
//! layer shapes, choose among the eligible ones as the encoder does at first
//! use ([`bertflow_encoder::tuning`]), rewrite this CPU's entry in
//! `kernels.json`, and measure one core's FMA / VNNI peak so that each
//! kernel's GFLOP/s reads against the hardware's limit.
use super::{cores, cpu_model};
use crate::error::{Context, Result};
use bertflow_encoder::config::ModelConfig;
use bertflow_encoder::kernels::fp32::Path;
use bertflow_encoder::kernels::tune::{self, peak, Measurement, Shape};
use bertflow_encoder::kernels::Isa;
use bertflow_encoder::tuning::{self, KernelFile, FILE_NAME};
use bertflow_encoder::ModelFiles;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// What to tune.
#[derive(Debug, Clone)]
pub struct TuneBench {
    pub model: String,
    /// Token rows of each product.
    pub rows: usize,
    /// Time for each precision's rounds.
    pub budget: Duration,
    /// The directory of `kernels.json`; `None`: measure and print only.
    pub dir: Option<PathBuf>,
    /// Milliseconds of each peak loop (0: no peak).
    pub peak_ms: u64,
}

/// One kernel on one shape.
#[derive(Debug, Clone, Serialize)]
pub struct TuneRow {
    pub precision: &'static str,
    pub kernel: &'static str,
    /// `[m, k, n]`.
    pub shape: [usize; 3],
    pub ms: f64,
    /// Nominal: `2 m k n` per product (int8: operations on codes).
    pub gflops: f64,
    /// Percent of this core's peak for the kernel's instructions (see [`peak`]).
    pub peak_percent: Option<f64>,
}

/// One kernel over the layer's products.
#[derive(Debug, Clone, Serialize)]
pub struct TuneTotal {
    pub precision: &'static str,
    pub kernel: &'static str,
    /// Milliseconds per layer (the products' best times summed).
    pub ms: f64,
    pub gflops: f64,
    pub peak_percent: Option<f64>,
    /// Among the kernels a choice considers here.
    pub eligible: bool,
    pub chosen: bool,
}

/// One core's peak (see [`peak`]).
#[derive(Debug, Clone, Serialize)]
pub struct PeakRow {
    pub name: &'static str,
    pub giga_ops: f64,
}

/// The whole run (`bertflow tune --json` prints this).
#[derive(Debug, Clone, Serialize)]
pub struct TuneReport {
    pub bench: &'static str,
    pub model: String,
    pub cpu: String,
    pub cpu_key: String,
    pub cores: usize,
    pub kernels_version: u32,
    pub peaks: Vec<PeakRow>,
    pub rows: Vec<TuneRow>,
    pub totals: Vec<TuneTotal>,
    pub fp32: &'static str,
    pub int8: &'static str,
    /// `kernels.json` rewritten, if a directory was given.
    pub file: Option<String>,
    /// `BERTFLOW_FP32_KERNEL` / `BERTFLOW_INT8_KERNEL`, which still win at run time.
    pub env_fp32: Option<&'static str>,
    pub env_int8: Option<&'static str>,
}

/// The peak a kernel's instructions can reach, by name in [`peak::peaks`].
fn peak_of(precision: &str, kernel: &str) -> Option<&'static str> {
    match (precision, kernel) {
        ("fp32", "avx512" | "avx512pair") => Some("fp32 fma zmm"),
        ("fp32", "avx2") => Some("fp32 fma ymm"),
        ("int8", "avx512vnni") => Some("int8 vnni zmm"),
        ("int8", "avxvnni") => Some("int8 vnni ymm"),
        _ => None,
    }
}

/// Runs it: every kernel, the choice among the eligible ones, the file.
pub fn bench_tune(cfg: &TuneBench) -> Result<TuneReport> {
    if cfg.rows == 0 {
        return Err(crate::CoreError::setting("rows", "must be at least 1"));
    }
    let files = ModelFiles::resolve(&cfg.model)?;
    let text = std::fs::read_to_string(&files.config)
        .map_err(crate::CoreError::io("read", &files.config))?;
    let config = ModelConfig::parse(&text).map_err(crate::CoreError::Input)?;
    let shapes: Vec<Shape> = tuning::shapes(&config)
        .into_iter()
        .map(|s| Shape { m: cfg.rows, ..s })
        .collect();
    let peaks: Vec<PeakRow> = if cfg.peak_ms > 0 {
        peak::peaks(cfg.peak_ms)
            .into_iter()
            .map(|p| PeakRow {
                name: p.name,
                giga_ops: p.giga_ops,
            })
            .collect()
    } else {
        Vec::new()
    };
    let fm = tune::measure_fp32(&Path::available_all(), &shapes, cfg.budget)
        .map_err(|e| crate::CoreError::Input(e.to_string()))?;
    let im = tune::measure_int8(&Isa::available_all(), &shapes, cfg.budget)
        .map_err(bertflow_encoder::EncoderError::from)?;
    let (entry, choice) = tuning::decide(&shapes, Some(fm.clone()), Some(im.clone()));
    let percent = |p: &str, k: &str, g: f64| {
        let name = peak_of(p, k)?;
        let pk = peaks.iter().find(|x| x.name == name)?;
        Some(100.0 * g / pk.giga_ops)
    };
    let mut rows = Vec::new();
    let mut totals = Vec::new();
    let flops: f64 = shapes.iter().map(|s| s.flops()).sum();
    let eligible_f = tune::fp32_candidates();
    let eligible_i = tune::int8_candidates();
    let mut add = |precision: &'static str,
                   m: &Measurement,
                   eligible: &dyn Fn(&str) -> bool,
                   chosen: &str| {
        let mut kernels: Vec<&'static str> = m.timings.iter().map(|t| t.kernel).collect();
        kernels.dedup();
        for t in &m.timings {
            rows.push(TuneRow {
                precision,
                kernel: t.kernel,
                shape: [t.shape.m, t.shape.k, t.shape.n],
                ms: t.seconds * 1e3,
                gflops: t.gflops(),
                peak_percent: percent(precision, t.kernel, t.gflops()),
            });
        }
        for k in kernels {
            let secs = m.total(k).unwrap_or(f64::NAN);
            let g = flops / secs / 1e9;
            totals.push(TuneTotal {
                precision,
                kernel: k,
                ms: secs * 1e3,
                gflops: g,
                peak_percent: percent(precision, k, g),
                eligible: eligible(k),
                chosen: k == chosen,
            });
        }
    };
    add(
        "fp32",
        &fm,
        &|k| eligible_f.iter().any(|p| p.name() == k),
        choice.fp32.name(),
    );
    add(
        "int8",
        &im,
        &|k| eligible_i.iter().any(|i| i.name() == k),
        choice.int8.name(),
    );
    let file = match &cfg.dir {
        Some(dir) => {
            let path = dir.join(FILE_NAME);
            let mut ignored = Vec::new();
            KernelFile::read(&path, &mut ignored)
                .write_with(&path, &entry)
                .with_context(|| format!("cannot keep the choice in {}", path.display()))?;
            Some(path.display().to_string())
        }
        None => None,
    };
    Ok(TuneReport {
        bench: "tune",
        model: files.id.clone(),
        cpu: cpu_model(),
        cpu_key: entry.cpu.clone(),
        cores: cores(),
        kernels_version: tune::KERNELS_VERSION,
        peaks,
        rows,
        totals,
        fp32: choice.fp32.name(),
        int8: choice.int8.name(),
        file,
        env_fp32: Path::env_override().ok().flatten().map(|p| p.name()),
        env_int8: Isa::env_override().ok().flatten().map(|i| i.name()),
    })
}

#[cfg(test)]
mod tests {
    use super::peak_of;

    #[test]
    fn each_simd_kernel_reads_against_its_own_instructions() {
        assert_eq!(peak_of("fp32", "avx512pair"), Some("fp32 fma zmm"));
        assert_eq!(peak_of("fp32", "avx2"), Some("fp32 fma ymm"));
        assert_eq!(peak_of("int8", "avx512vnni"), Some("int8 vnni zmm"));
        assert_eq!(peak_of("int8", "avx2"), None);
        assert_eq!(peak_of("fp32", "scalar"), None);
    }
}
