//! Small deterministic PRNGs, so that every sampled result depends only on
//! its seed and never on a crate's version.
//!
//! * [`SplitMix64`] (Steele, Lea & Flood 2014): the analyses' sampler
//!   (random pairs, query subsets);
//! * [`Xoshiro256StarStar`] (Blackman & Vigna), seeded with SplitMix64: the
//!   flow's weight initialisation, permutations and batch order.
//!
//! The two have their own `below` reductions (multiply-shift for
//! SplitMix64, rejection for xoshiro); both are kept as they are because
//! published numbers and saved calibrators depend on the exact streams.

/// Uniform in [0, 1) from the top 53 bits of `u`.
fn unit_f64(u: u64) -> f64 {
    (u >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal by Box-Muller from two uniforms in [0, 1) (one value per
/// call; simple and exact enough for weight initialisation and test data).
fn box_muller(u1: f64, u2: f64) -> f64 {
    // 1 - u1 is in (0, 1], so the logarithm is finite.
    (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (multiply-shift reduction; the bias is below
    /// `n / 2^64`, irrelevant here). Returns 0 when `n == 0`.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        unit_f64(self.next_u64())
    }

    /// Standard normal (Box-Muller on two [`next_f64`](Self::next_f64) draws).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64();
        box_muller(u1, self.next_f64())
    }

    /// An ordered pair `(i, j)` with `i != j`, both in `0..n`, uniform over
    /// all such pairs. `n` must be at least 2.
    pub fn distinct_pair(&mut self, n: usize) -> (usize, usize) {
        debug_assert!(n >= 2);
        let i = self.below(n);
        let mut j = self.below(n - 1);
        if j >= i {
            j += 1;
        }
        (i, j)
    }
}

/// xoshiro256** (Blackman & Vigna), its state seeded from a `u64` by four
/// SplitMix64 outputs.
#[derive(Debug, Clone)]
pub struct Xoshiro256StarStar {
    s: [u64; 4],
}

impl Xoshiro256StarStar {
    /// A generator seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        Self { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        unit_f64(self.next_u64())
    }

    /// Uniform integer in [0, n), without modulo bias (rejection). `n` must
    /// be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let r = self.next_u64();
            if r < zone {
                return r % n;
            }
        }
    }

    /// Standard normal (Box-Muller on two [`next_f64`](Self::next_f64) draws).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64();
        box_muller(u1, self.next_f64())
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // Reference outputs of SplitMix64 seeded with 0 (as in the public
        // reference implementation by Vigna).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn xoshiro_reference_values() {
        // scripts/reference/xoshiro.py: an independent Python transcription of
        // Vigna's splitmix64.c and xoshiro256starstar.c, seed 42.
        let mut r = Xoshiro256StarStar::new(42);
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(got, XOSHIRO_SEED_42.to_vec());
    }

    /// Printed by scripts/reference/xoshiro.py.
    const XOSHIRO_SEED_42: [u64; 4] = [
        0x1578_0B2E_0C2E_C716,
        0x6104_D986_6D11_3A7E,
        0xAE17_5332_39E4_99A1,
        0xECB8_AD47_03B3_60A1,
    ];

    #[test]
    fn below_and_pairs_stay_in_range() {
        let mut r = SplitMix64::new(42);
        for _ in 0..10_000 {
            assert!(r.below(7) < 7);
            let (i, j) = r.distinct_pair(3);
            assert!(i < 3 && j < 3 && i != j);
        }
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn distinct_pair_covers_all_pairs() {
        let mut r = SplitMix64::new(1);
        let mut seen = [[0usize; 3]; 3];
        for _ in 0..6000 {
            let (i, j) = r.distinct_pair(3);
            seen[i][j] += 1;
        }
        for (i, row) in seen.iter().enumerate() {
            for (j, &c) in row.iter().enumerate() {
                if i == j {
                    assert_eq!(c, 0);
                } else {
                    // 1000 expected per ordered pair.
                    assert!((800..1200).contains(&c), "pair ({i},{j}) seen {c} times");
                }
            }
        }
    }

    #[test]
    fn same_seed_same_stream_different_seed_different_stream() {
        let draw = |seed| {
            let mut r = Xoshiro256StarStar::new(seed);
            (0..8).map(|_| r.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn normal_has_unit_moments_and_shuffle_is_a_permutation() {
        let mut r = Xoshiro256StarStar::new(1);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");

        let mut v: Vec<usize> = (0..100).collect();
        r.shuffle(&mut v);
        assert_ne!(v, (0..100).collect::<Vec<_>>());
        let mut s = v.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        for _ in 0..1000 {
            assert!(r.below(3) < 3);
        }
    }
}
