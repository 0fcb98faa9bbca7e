//! Activations applied in the output stage of the matrix products.

/// Activation fused into a linear layer's output stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    None,
    /// GELU, exact (erf) form: [`gelu_erf`].
    GeluErf,
    /// The same GELU by a polynomial ([`gelu_poly`], |error| < 6e-5 for |x| <= 8):
    /// for int8 layers, whose outputs are quantised to 8 bits next.
    GeluPoly,
    Relu,
}

impl Act {
    /// Apply in place.
    pub fn apply(self, v: &mut [f32]) {
        match self {
            Act::None => {}
            Act::Relu => v.iter_mut().for_each(|x| *x = x.max(0.0)),
            Act::GeluErf => gelu_erf_inplace(v),
            Act::GeluPoly => v.iter_mut().for_each(|x| *x = gelu_poly(*x)),
        }
    }
}

/// GELU with the exact (erf) form, x * (1 + erf(x / sqrt 2)) / 2, in place.
///
/// erf is Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7, the approximation
/// PyTorch's vectorised CPU erf uses) with a branch-free exp, so the loop vectorises;
/// libm's scalar erf was about a fifth of the whole forward pass. The polynomials
/// are Horner chains of fused multiply-adds (`mul_add`: one rounding each, so the
/// AVX-512 and AVX2 builds, which have FMA, and the baseline build, which calls
/// libm's `fmaf`, compute the same values); FMA takes a third of the instructions
/// out of the loop.
pub fn gelu_erf_inplace(v: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let fma = std::arch::is_x86_feature_detected!("fma");
        if fma && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX512F and FMA (checked just above), the
            // only requirements of this target_feature function.
            unsafe { gelu_erf_avx512(v) };
            return;
        }
        if fma && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above), the only
            // requirements of this target_feature function.
            unsafe { gelu_erf_avx2(v) };
            return;
        }
    }
    gelu_erf_slice(v);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_erf_avx2(v: &mut [f32]) {
    gelu_erf_slice(v);
}

/// 16 lanes: half the instructions of the AVX2 build for the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn gelu_erf_avx512(v: &mut [f32]) {
    gelu_erf_slice(v);
}

/// The baseline build of [`gelu_erf_inplace`] (for tests).
#[inline(always)]
pub fn gelu_erf_slice(v: &mut [f32]) {
    for x in v.iter_mut() {
        *x = gelu_erf(*x);
    }
}

/// x * (1 + erf(x / sqrt 2)) / 2.
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU by a polynomial, for int8 layers: `x (1/2 + c q(c^2 / L^2))` with `c = x`
/// clamped to `[-L, L]`, `L = 4.5`, and `q` of degree 9 fitted to
/// `(Phi(c) - 1/2) / c` (weighted least squares on Chebyshev nodes, reweighted
/// toward the minimax GELU error). |error| < 6e-5 for |x| <= 8 and < 1.3e-5 |x|
/// beyond (past the clamp, 1 - Phi(4.5) = 3.4e-6). Eleven multiply-adds and
/// no division or exponential: about a third of [`gelu_erf`]'s instructions.
/// The int8 feed-forward quantises this output to 8 bits right after (steps of
/// about 1e-2), where the difference from the exact form vanishes; fp32 keeps
/// [`gelu_erf`].
#[inline(always)]
pub fn gelu_poly(x: f32) -> f32 {
    let c = x.clamp(-GELU_L, GELU_L);
    let t = (c * c) * GELU_INV_L2;
    let q = GELU_Q[..9]
        .iter()
        .rev()
        .fold(GELU_Q[9], |q, &k| q.mul_add(t, k));
    x * c.mul_add(q, 0.5)
}

/// [`gelu_poly`]'s clamp `L`.
pub(crate) const GELU_L: f32 = 4.5;
/// `1 / L^2`.
pub(crate) const GELU_INV_L2: f32 = 1.0 / (GELU_L * GELU_L);
/// [`gelu_poly`]'s `q`, lowest degree first.
pub(crate) const GELU_Q: [f32; 10] = [
    0.398_883_8,
    -1.343_325_3,
    4.032_218_5,
    -9.322_442,
    16.457_12,
    -21.673_918,
    20.402_08,
    -12.836_882,
    4.798_979_3,
    -0.801_605_3,
];

/// erf by Abramowitz & Stegun 7.1.26, |error| < 1.5e-7.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_6;
    const A2: f32 = -0.284_496_74;
    const A3: f32 = 1.421_413_7;
    const A4: f32 = -1.453_152_1;
    const A5: f32 = 1.061_405_4;
    let a = x.abs();
    let t = 1.0 / P.mul_add(a, 1.0);
    let poly = A5
        .mul_add(t, A4)
        .mul_add(t, A3)
        .mul_add(t, A2)
        .mul_add(t, A1)
        * t;
    let y = (-poly).mul_add(exp_neg(a * a), 1.0);
    // copysign, branch-free
    f32::from_bits(y.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// exp(-z) for z >= 0 (exp(-z) underflows to about 0 past z = 87): Cephes' expf
/// polynomial with a branch-free range reduction.
#[inline(always)]
pub(crate) fn exp_neg(z: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = (-z).max(-87.0);
    let n = x.mul_add(LOG2E, ROUND) - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let r2 = r * r;
    let p = 1.987_569_1e-4_f32
        .mul_add(r, 1.398_199_9e-3)
        .mul_add(r, 8.333_452e-3)
        .mul_add(r, 4.166_579_6e-2)
        .mul_add(r, 1.666_666_5e-1)
        .mul_add(r, 0.5);
    let e = p.mul_add(r2, r) + 1.0;
    e * pow2(n)
}

/// 2^n for an integer-valued n in [-126, 0], without a float-to-int conversion
/// (Rust's saturating `as i32` does not vectorise): n + 127 is an integer in
/// [1, 127]; adding 2^23 stores it exactly in the low mantissa bits, and shifting
/// by 23 moves those bits into the exponent field (the rest shifts out). The same
/// bits as `f32::from_bits(((n as i32 + 127) as u32) << 23)`.
#[inline(always)]
fn pow2(n: f32) -> f32 {
    const BIAS: f32 = 8_388_608.0 + 127.0;
    f32::from_bits((n + BIAS).to_bits() << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_equals_the_integer_form() {
        for n in -126..=0 {
            let want = f32::from_bits(((n + 127) as u32) << 23);
            assert_eq!(pow2(n as f32).to_bits(), want.to_bits(), "2^{n}");
            assert_eq!(want, 2f32.powi(n), "2^{n}");
        }
    }

    /// GELU in f64, erf by Abramowitz & Stegun 7.1.26: 1.5e-7 accurate, far
    /// below the 6e-5 tested, and in f64 it adds no f32 rounding.
    fn gelu_f64(x: f64) -> f64 {
        let a = x.abs() / std::f64::consts::SQRT_2;
        let t = 1.0 / (1.0 + 0.327_591_1 * a);
        let poly = t
            * (0.254_829_592
                + t * (-0.284_496_736
                    + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
        let erf = (1.0 - poly * (-a * a).exp()).copysign(x);
        0.5 * x * (1.0 + erf)
    }

    #[test]
    fn gelu_poly_is_within_its_bound() {
        let mut worst = (0f64, 0f32);
        for i in -1_600_000..=1_600_000 {
            let x = i as f32 * 5e-5; // every 5e-5 over [-80, 80]
            let err = (gelu_poly(x) as f64 - gelu_f64(x as f64)).abs();
            let bound = if x.abs() <= 8.0 {
                6e-5
            } else {
                1.3e-5 * x.abs() as f64
            };
            assert!(err < bound, "gelu_poly({x}): error {err}");
            if err > worst.0 {
                worst = (err, x);
            }
        }
        // And it is not the exact form by accident: the two differ.
        assert!(worst.0 > 1e-6, "{worst:?}");
        assert!(gelu_poly(f32::NAN).is_nan());
        assert_eq!(gelu_poly(0.0), 0.0);
        // Past the clamp: x times Phi(4.5) (about 1 - 3.4e-6), and about 0 below.
        assert!((gelu_poly(1e6) / 1e6 - 1.0).abs() < 1e-5);
        assert!(gelu_poly(-1e6).abs() < 1e6 * 1e-5);
    }

    #[test]
    fn exp_neg_is_close_to_libm() {
        for i in 0..=100_000 {
            let z = i as f32 * 1e-3;
            let (got, want) = (exp_neg(z), (-z as f64).exp());
            let err = (got as f64 - want).abs() / want.max(1e-300);
            assert!(err < 4e-7 || z > 87.0, "exp(-{z}) = {got}, want {want}");
        }
    }
}
