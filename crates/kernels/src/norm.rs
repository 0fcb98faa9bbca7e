//! LayerNorm over rows (the forward pass's only row epilogue left outside the
//! linear layers' output stages), and the helpers the kernels share: shape
//! errors, lane sums and [`simd_fn`].
//!
//! Every function works on whole matrices (rows of `h` values, row-major) and
//! picks its build once per call: an AVX-512 or AVX2 build where the CPU has it,
//! else the baseline build. All builds compute the same bits (no fused
//! multiply-adds: Rust never contracts `a * b + c`; sums go through [`LANES`]
//! partial sums whatever the register width), so results never depend on the CPU.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{op}: {msg}")]
pub struct ShapeError {
    pub op: &'static str,
    pub msg: String,
}

pub(crate) fn shape_err(op: &'static str, msg: String) -> ShapeError {
    ShapeError { op, msg }
}

/// Lanes of the partial sums (one ymm of f32).
const LANES: usize = 8;

/// Define a private function whose body is compiled three times, as an AVX-512
/// and an AVX2 build (chosen at run time where the CPU has them, each with FMA)
/// and the baseline build. The arguments must already be checked: the body is
/// the plain kernel. Rust never contracts `a * b + c` on its own, so FMA changes
/// only explicit `mul_add`s, which round the same in every build (the baseline
/// calls libm's `fmaf`): the three builds compute the same bits.
macro_rules! simd_fn {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn generic($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,fma")]
                fn avx512($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU supports AVX512F and FMA (checked just
                    // above), the only requirements of this target_feature function.
                    return unsafe { avx512($($arg),*) };
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    generic($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above),
                    // the only requirements of this target_feature function.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}
pub(crate) use simd_fn;

/// Sum of `v` in [`LANES`] partial sums (vectorisable), then pairwise.
#[inline(always)]
pub(crate) fn lane_sum(v: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    for (l, &x) in chunks.remainder().iter().enumerate() {
        acc[l] += x;
    }
    reduce(acc)
}

#[inline(always)]
pub(crate) fn reduce(a: [f32; LANES]) -> f32 {
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
}

/// Sum of `(v - mean)^2` in [`LANES`] partial sums.
#[inline(always)]
fn lane_sq_dev(v: &[f32], mean: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            let d = x - mean;
            *a += d * d;
        }
    }
    for (l, &x) in chunks.remainder().iter().enumerate() {
        let d = x - mean;
        acc[l] += d * d;
    }
    reduce(acc)
}

/// LayerNorm of one row in place: two passes (mean, then the centred variance),
/// then `(x - mean) / sqrt(var + eps) * w + b`.
#[inline(always)]
fn layer_norm_row(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = lane_sum(row) / n;
    let var = lane_sq_dev(row, mean) / n;
    let inv_std = 1.0 / (var + eps).sqrt();
    for ((x, &g), &be) in row.iter_mut().zip(w).zip(b) {
        *x = (*x - mean) * inv_std * g + be;
    }
}

fn check_rows(op: &'static str, len: usize, h: usize, params: &[usize]) -> Result<(), ShapeError> {
    if h == 0 || !len.is_multiple_of(h) {
        return Err(shape_err(
            op,
            format!("{len} values are not rows of width {h}"),
        ));
    }
    if let Some(p) = params.iter().find(|&&p| p != h) {
        return Err(shape_err(
            op,
            format!("a parameter has {p} values, rows have {h}"),
        ));
    }
    Ok(())
}

/// `x` (rows of `w.len()` values) = LayerNorm(x) with weight `w`, bias `b`.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) -> Result<(), ShapeError> {
    let h = w.len();
    check_rows("layer-norm", x.len(), h, &[b.len()])?;
    layer_norm_rows(x, w, b, eps);
    Ok(())
}

simd_fn! {
    fn layer_norm_rows(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
        for row in x.chunks_exact_mut(w.len()) {
            layer_norm_row(row, w, b, eps);
        }
    }
}

/// `x` (rows of `w.len()` values) = RMSNorm(x) with weight `w`:
/// `x / sqrt(mean(x^2) + eps) * w` (transformers' Llama/Qwen `RMSNorm`, in f32;
/// Gemma's `(1 + w)` form is this with `1 + w` as the weight).
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) -> Result<(), ShapeError> {
    check_rows("rms-norm", x.len(), w.len(), &[])?;
    rms_norm_rows(x, w, eps);
    Ok(())
}

simd_fn! {
    fn rms_norm_rows(x: &mut [f32], w: &[f32], eps: f32) {
        for row in x.chunks_exact_mut(w.len()) {
            let mut acc = [0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for c in &mut chunks {
                for (a, &v) in acc.iter_mut().zip(c) {
                    *a += v * v;
                }
            }
            for (l, &v) in chunks.remainder().iter().enumerate() {
                acc[l] += v * v;
            }
            let inv = 1.0 / (reduce(acc) / row.len() as f32 + eps).sqrt();
            for (v, &g) in row.iter_mut().zip(w) {
                *v = *v * inv * g;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in about [-scale, scale].
    pub(crate) fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// LayerNorm in f64, the textbook way.
    fn ln_ref(x: &[f32], w: &[f32], b: &[f32], eps: f64) -> Vec<f32> {
        let h = w.len();
        let mut out = Vec::new();
        for row in x.chunks(h) {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / h as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / h as f64;
            for (i, &v) in row.iter().enumerate() {
                let y = (v as f64 - mean) / (var + eps).sqrt() * w[i] as f64 + b[i] as f64;
                out.push(y as f32);
            }
        }
        out
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn layer_norm_matches_f64_reference_on_odd_widths() {
        for (h, rows) in [(1, 3), (7, 5), (13, 2), (384, 4), (389, 3)] {
            // An offset far from zero: the one-pass E[x^2] - mean^2 form would lose
            // digits here, the two-pass form does not.
            let mut x: Vec<f32> = values(h * rows, h as u64, 3.0)
                .iter()
                .map(|v| v + 40.0)
                .collect();
            let w = values(h, 7, 1.0);
            let b = values(h, 8, 0.5);
            let want = ln_ref(&x, &w, &b, 1e-12);
            layer_norm(&mut x, &w, &b, 1e-12).unwrap();
            assert!(max_diff(&x, &want) < 2e-5, "h {h}: {}", max_diff(&x, &want));
        }
    }

    #[test]
    fn rms_norm_matches_f64_reference() {
        for (h, rows) in [(1, 3), (7, 5), (32, 2), (389, 3)] {
            let mut x = values(h * rows, h as u64, 3.0);
            let w = values(h, 9, 1.0);
            let want: Vec<f32> = x
                .chunks(h)
                .flat_map(|row| {
                    let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / h as f64;
                    let inv = 1.0 / (ms + 1e-6).sqrt();
                    row.iter()
                        .zip(&w)
                        .map(move |(&v, &g)| (v as f64 * inv * g as f64) as f32)
                })
                .collect();
            rms_norm(&mut x, &w, 1e-6).unwrap();
            assert!(max_diff(&x, &want) < 1e-5, "h {h}: {}", max_diff(&x, &want));
        }
        assert!(rms_norm(&mut [0.0; 6], &[1.0; 4], 1e-6).is_err());
    }

    #[test]
    fn bad_shapes_are_errors() {
        let (w, b) = (vec![1.0; 4], vec![0.0; 4]);
        assert!(layer_norm(&mut [0.0; 6], &w, &b, 1e-5).is_err());
        assert!(layer_norm(&mut [0.0; 8], &w, &b[..3], 1e-5).is_err());
    }
}
