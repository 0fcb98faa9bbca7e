//! Rotary position embeddings (RoPE) applied in place to the query and key
//! parts of the fused QKV rows, and the GeGLU epilogue of gated feed-forward
//! layers (ModernBERT).
//!
//! RoPE follows transformers' `rotate_half` form (GPT-NeoX / Llama / ModernBERT):
//! within each head of `head_dim` values, element `d < head_dim / 2` pairs with
//! element `d + head_dim / 2`, and at position `p` with the angle
//! `a = p * inv_freq[d]`, `inv_freq[d] = 1 / theta^(2d / head_dim)`:
//!
//! ```text
//! x1' = x1 * cos a - x2 * sin a
//! x2' = x2 * cos a + x1 * sin a
//! ```
//!
//! The angles are computed as transformers does, in f32 (`inv_freq` from
//! `theta ** (arange(0, dim, 2) / dim)`, then `position * inv_freq`), and their
//! cosines and sines once, in a [`RopeTable`] of every position the model
//! accepts; the kernel only reads it.
use crate::act::gelu_erf;
use crate::norm::{shape_err, simd_fn, ShapeError};
use crate::Act;

/// Cosines and sines of the rotary angles of positions `0..positions`, for one
/// `theta` and `head_dim`.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeTable {
    head_dim: usize,
    positions: usize,
    /// `[positions, head_dim / 2]`
    cos: Vec<f32>,
    /// `[positions, head_dim / 2]`
    sin: Vec<f32>,
}

impl RopeTable {
    /// The table of `positions` positions for `theta` (the RoPE base) and an even
    /// `head_dim`.
    pub fn new(theta: f64, head_dim: usize, positions: usize) -> Result<Self, ShapeError> {
        const OP: &str = "rope-table";
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(shape_err(
                OP,
                format!("head_dim {head_dim} is not a positive even number"),
            ));
        }
        if !(theta.is_finite() && theta > 0.0) {
            return Err(shape_err(OP, format!("theta {theta} is not positive")));
        }
        let half = head_dim / 2;
        // torch: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=float) / dim)), all f32.
        let inv_freq: Vec<f32> = (0..half)
            .map(|d| 1.0 / (theta as f32).powf((2 * d) as f32 / head_dim as f32))
            .collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for &f in &inv_freq {
                // position_ids.float() * inv_freq in f32; cos and sin of that f32.
                let a = p as f32 * f;
                cos.push((a as f64).cos() as f32);
                sin.push((a as f64).sin() as f32);
            }
        }
        Ok(Self {
            head_dim,
            positions,
            cos,
            sin,
        })
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// How many positions the table covers.
    pub fn positions(&self) -> usize {
        self.positions
    }
}

/// Rotate the query and key parts of `qkv` in place: `batch * seq` rows of
/// `[q | k | v]` (each part `heads` blocks of `table.head_dim()` values, as
/// [`crate::attention`] reads them); row `r` is at position `r % seq` (every
/// sentence starts at position 0, padding included, as transformers' default
/// `position_ids`).
pub fn rope_qk(
    qkv: &mut [f32],
    batch: usize,
    seq: usize,
    heads: usize,
    table: &RopeTable,
) -> Result<(), ShapeError> {
    const OP: &str = "rope";
    let h = heads * table.head_dim;
    if h == 0 || qkv.len() != batch * seq * 3 * h {
        return Err(shape_err(
            OP,
            format!(
                "{batch} x {seq} rows of 3 x {heads} heads of {} need {} values, got {}",
                table.head_dim,
                batch * seq * 3 * h,
                qkv.len()
            ),
        ));
    }
    if seq > table.positions {
        return Err(shape_err(
            OP,
            format!("{seq} positions exceed the table's {}", table.positions),
        ));
    }
    rope_rows(qkv, seq, 2 * heads, table);
    Ok(())
}

simd_fn! {
    /// Rotate the first `blocks` head blocks of every row of `qkv` (rows of
    /// `3 * blocks / 2` blocks) at position `row % seq`.
    fn rope_rows(qkv: &mut [f32], seq: usize, blocks: usize, table: &RopeTable) {
        let dh = table.head_dim;
        let half = dh / 2;
        let width = blocks / 2 * 3 * dh;
        for (r, row) in qkv.chunks_exact_mut(width).enumerate() {
            let p = r % seq;
            let cos = &table.cos[p * half..(p + 1) * half];
            let sin = &table.sin[p * half..(p + 1) * half];
            for head in row[..blocks * dh].chunks_exact_mut(dh) {
                let (x1, x2) = head.split_at_mut(half);
                for (((a, b), &c), &s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
                    let (u, v) = (*a, *b);
                    // torch: (x * cos) + (rotate_half(x) * sin), two roundings.
                    *a = u * c + -v * s;
                    *b = v * c + u * s;
                }
            }
        }
    }
}

/// GeGLU (or another gated activation): `x` holds rows of `2 * n` values, the
/// input half then the gate half (transformers' `chunk(2, dim=-1)`); row `r` of
/// `out` (rows of `n`) = `act(input) * gate`. `act` is [`Act::GeluErf`] for
/// ModernBERT's "gelu".
pub fn gated_act(x: &[f32], n: usize, act: Act, out: &mut [f32]) -> Result<(), ShapeError> {
    const OP: &str = "gated-act";
    if n == 0 || !x.len().is_multiple_of(2 * n) || out.len() != x.len() / 2 {
        return Err(shape_err(
            OP,
            format!(
                "{} values are not rows of 2 x {n} for an output of {}",
                x.len(),
                out.len()
            ),
        ));
    }
    gated_rows(x, n, act, out);
    Ok(())
}

simd_fn! {
    fn gated_rows(x: &[f32], n: usize, act: Act, out: &mut [f32]) {
        for (row, o) in x.chunks_exact(2 * n).zip(out.chunks_exact_mut(n)) {
            let (input, gate) = row.split_at(n);
            match act {
                Act::None => {
                    for ((y, &a), &g) in o.iter_mut().zip(input).zip(gate) {
                        *y = a * g;
                    }
                }
                Act::Relu => {
                    for ((y, &a), &g) in o.iter_mut().zip(input).zip(gate) {
                        *y = a.max(0.0) * g;
                    }
                }
                Act::GeluErf => {
                    for ((y, &a), &g) in o.iter_mut().zip(input).zip(gate) {
                        *y = gelu_erf(a) * g;
                    }
                }
                Act::GeluPoly => {
                    for ((y, &a), &g) in o.iter_mut().zip(input).zip(gate) {
                        *y = crate::act::gelu_poly(a) * g;
                    }
                }
            }
        }
    }
}

/// The activation of a decoder-style gated feed-forward layer ([`glu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// SwiGLU: `silu(gate) * up`, `silu(x) = x / (1 + e^-x)` (Llama, Qwen, EuroBERT).
    Silu,
    /// `gelu_tanh(gate) * up` (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// A decoder's gated activation: `x` holds rows of `2 * n` values, the gate
/// projection then the up projection (`gate_proj` and `up_proj` fused); row
/// `r` of `out` (rows of `n`) = `act(gate) * up`.
pub fn glu(x: &[f32], n: usize, act: Glu, out: &mut [f32]) -> Result<(), ShapeError> {
    if n == 0 || !x.len().is_multiple_of(2 * n) || out.len() != x.len() / 2 {
        return Err(shape_err(
            "glu",
            format!(
                "{} values are not rows of 2 x {n} for an output of {}",
                x.len(),
                out.len()
            ),
        ));
    }
    for (row, o) in x.chunks_exact(2 * n).zip(out.chunks_exact_mut(n)) {
        let (gate, up) = row.split_at(n);
        match act {
            Glu::Silu => {
                for ((y, &g), &u) in o.iter_mut().zip(gate).zip(up) {
                    *y = g / (1.0 + (-g).exp()) * u;
                }
            }
            Glu::GeluTanh => {
                const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
                for ((y, &g), &u) in o.iter_mut().zip(gate).zip(up) {
                    let t = (SQRT_TWO_OVER_PI * (g + 0.044715 * g * g * g)).tanh();
                    *y = 0.5 * g * (1.0 + t) * u;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// RoPE in f64 from the definition: each head's pairs (d, d + half) rotated
    /// by the angle p * theta^(-2d / head_dim); v untouched.
    fn rope_ref(qkv: &[f32], seq: usize, heads: usize, dh: usize, theta: f64) -> Vec<f32> {
        let h = heads * dh;
        let half = dh / 2;
        let mut out = qkv.to_vec();
        for (r, row) in out.chunks_exact_mut(3 * h).enumerate() {
            let p = (r % seq) as f64;
            for block in 0..2 * heads {
                let x = &mut row[block * dh..(block + 1) * dh];
                for d in 0..half {
                    let a = p * theta.powf(-((2 * d) as f64) / dh as f64);
                    let (u, v) = (x[d] as f64, x[d + half] as f64);
                    x[d] = (u * a.cos() - v * a.sin()) as f32;
                    x[d + half] = (v * a.cos() + u * a.sin()) as f32;
                }
            }
        }
        out
    }

    #[test]
    fn rope_matches_the_f64_definition_and_leaves_v_alone() {
        for (batch, seq, heads, dh, theta) in [
            (2, 5, 3, 8, 10_000.0),
            (1, 37, 2, 16, 160_000.0),
            (3, 4, 1, 2, 10.0),
        ] {
            let qkv = values(batch * seq * 3 * heads * dh, seq as u64);
            let table = RopeTable::new(theta, dh, 64).unwrap();
            let mut got = qkv.clone();
            rope_qk(&mut got, batch, seq, heads, &table).unwrap();
            let want = rope_ref(&qkv, seq, heads, dh, theta);
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            // The angle is rounded to f32 as transformers rounds it: p * inv_freq
            // for p < 64 is off by at most a few ulps of 64.
            assert!(err < 2e-5, "{batch}x{seq}x{heads}x{dh}: {err}");
            let h = heads * dh;
            for (g, q) in got.chunks_exact(3 * h).zip(qkv.chunks_exact(3 * h)) {
                assert_eq!(&g[2 * h..], &q[2 * h..], "v is not rotated");
            }
            // position 0 is the identity
            assert_eq!(&got[..2 * h], &qkv[..2 * h]);
        }
    }

    #[test]
    fn rope_table_holds_transformers_f32_angles() {
        let t = RopeTable::new(10_000.0, 4, 3).unwrap();
        // inv_freq = [1, 10000^-0.5 = 0.01]
        assert_eq!(t.cos[..2], [1.0, 1.0]);
        assert_eq!(t.sin[2], (1f64).sin() as f32);
        assert_eq!(t.sin[5], ((2.0f32 * 0.01f32) as f64).sin() as f32);
        assert_eq!(t.positions(), 3);
    }

    #[test]
    fn rope_bad_shapes_are_errors() {
        assert!(RopeTable::new(10_000.0, 3, 8).is_err());
        assert!(RopeTable::new(0.0, 4, 8).is_err());
        assert!(RopeTable::new(f64::NAN, 4, 8).is_err());
        let t = RopeTable::new(10_000.0, 4, 8).unwrap();
        assert!(rope_qk(&mut [0.0; 23], 1, 2, 1, &t).is_err());
        // 9 positions for a table of 8
        assert!(rope_qk(&mut vec![0.0; 9 * 12], 1, 9, 1, &t).is_err());
        rope_qk(&mut vec![0.0; 8 * 12], 1, 8, 1, &t).unwrap();
    }

    #[test]
    fn gated_act_is_act_of_input_times_gate() {
        let n = 13;
        let x = values(3 * 2 * n, 4);
        for act in [Act::GeluErf, Act::Relu, Act::None] {
            let mut out = vec![0.0; 3 * n];
            gated_act(&x, n, act, &mut out).unwrap();
            for (r, row) in x.chunks_exact(2 * n).enumerate() {
                for j in 0..n {
                    let mut a = [row[j]];
                    act.apply(&mut a);
                    assert_eq!(out[r * n + j], a[0] * row[n + j], "{act:?}");
                }
            }
        }
        // GELU by erf in f64, gated
        let mut out = vec![0.0; 3 * n];
        gated_act(&x, n, Act::GeluErf, &mut out).unwrap();
        let erf_ref = |v: f64| {
            // erf by its Taylor series (|v| < 1 here)
            let mut sum = 0.0;
            let mut term = v;
            for k in 0..30 {
                sum += term / (2 * k + 1) as f64;
                term *= -v * v / (k + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        };
        for (r, row) in x.chunks_exact(2 * n).enumerate() {
            for j in 0..n {
                let a = row[j] as f64;
                let want = 0.5 * a * (1.0 + erf_ref(a / 2f64.sqrt())) * row[n + j] as f64;
                assert!((out[r * n + j] as f64 - want).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn glu_is_act_of_gate_times_up() {
        let n = 5;
        let x = values(2 * 2 * n, 9);
        for act in [Glu::Silu, Glu::GeluTanh] {
            let mut out = vec![0.0; 2 * n];
            glu(&x, n, act, &mut out).unwrap();
            for (r, row) in x.chunks_exact(2 * n).enumerate() {
                for j in 0..n {
                    let g = row[j] as f64;
                    let a = match act {
                        Glu::Silu => g / (1.0 + (-g).exp()),
                        Glu::GeluTanh => {
                            let c = (2.0 / std::f64::consts::PI).sqrt();
                            0.5 * g * (1.0 + (c * (g + 0.044715 * g.powi(3))).tanh())
                        }
                    };
                    let want = a * row[n + j] as f64;
                    assert!((out[r * n + j] as f64 - want).abs() < 1e-6, "{act:?}");
                }
            }
        }
        assert!(glu(&[0.0; 8], 2, Glu::Silu, &mut [0.0; 3]).is_err());
    }

    #[test]
    fn gated_act_bad_shapes_are_errors() {
        assert!(gated_act(&[0.0; 8], 0, Act::None, &mut []).is_err());
        assert!(gated_act(&[0.0; 7], 2, Act::None, &mut [0.0; 3]).is_err());
        assert!(gated_act(&[0.0; 8], 2, Act::None, &mut [0.0; 3]).is_err());
        gated_act(&[0.0; 8], 2, Act::None, &mut [0.0; 4]).unwrap();
    }
}
