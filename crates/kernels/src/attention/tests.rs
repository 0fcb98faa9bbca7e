//! Attention against a textbook f64 reference.
use super::*;
use std::cell::Cell;

thread_local! {
    /// Makes [`wide_registers`] say no: the portable block on any CPU.
    pub(super) static PORTABLE: Cell<bool> = const { Cell::new(false) };
}

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

/// Textbook attention in f64 on explicitly gathered Q, K, V per head, with an
/// additive mask of -1e30 on padded keys, on keys outside the window and (causal)
/// on keys after the query, the
/// bias added to the scores; a row with every key masked gives 0.
fn reference(qkv: &[f32], lens: &[usize], s: AttnShape, opts: AttnOpts) -> Vec<f32> {
    let h = s.hidden();
    let at = |r: usize, i: usize, part: usize, head: usize, d: usize| {
        qkv[(r * s.seq + i) * 3 * h + part * h + head * s.head_dim + d] as f64
    };
    let mut ctx = vec![0f32; s.batch * s.seq * h];
    for (r, &len) in lens.iter().enumerate() {
        for head in 0..s.heads {
            for i in 0..s.seq {
                let scores: Vec<f64> = (0..s.seq)
                    .map(|j| {
                        let dot: f64 = (0..s.head_dim)
                            .map(|d| at(r, i, 0, head, d) * at(r, j, 1, head, d))
                            .sum();
                        let bias = opts
                            .bias
                            .map_or(0.0, |b| b[(head * s.seq + i) * s.seq + j] as f64);
                        let seen = j < len
                            && opts.window.is_none_or(|w| i.abs_diff(j) <= w / 2)
                            && (!opts.causal || j <= i);
                        dot + bias + if seen { 0.0 } else { -1e30 }
                    })
                    .collect();
                if scores.iter().all(|&x| x < -1e29) {
                    continue;
                }
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..s.head_dim {
                    let v: f64 = (0..s.seq).map(|j| e[j] / sum * at(r, j, 2, head, d)).sum();
                    ctx[(r * s.seq + i) * h + head * s.head_dim + d] = v as f32;
                }
            }
        }
    }
    ctx
}

/// `attention` against [`reference`] on each shape `(batch, seq, heads,
/// head_dim, lens)`, with no option, a bias, windows (`windows`), the causal
/// mask, and their combinations.
fn check_against_reference(shapes: &[(usize, usize, usize, usize, Vec<usize>)], windows: &[usize]) {
    for (batch, seq, heads, head_dim, lens) in shapes.iter().cloned() {
        let s = AttnShape {
            batch,
            seq,
            heads,
            head_dim,
        };
        let qkv: Vec<f32> = values(batch * seq * 3 * s.hidden(), seq as u64)
            .iter()
            .map(|v| v * 3.0)
            .collect();
        let bias = values(heads * seq * seq, 7 + seq as u64)
            .iter()
            .map(|v| v * 4.0)
            .collect::<Vec<_>>();
        // Scores rising with the key: later key blocks raise each row's
        // maximum, so the online softmax rescales its partial context.
        let ramp: Vec<f32> = (0..heads * seq * seq)
            .map(|x| (x % seq) as f32 * 0.05)
            .collect();
        let opt = |bias, window, causal| AttnOpts {
            bias,
            window,
            causal,
        };
        let mut all = vec![
            AttnOpts::default(),
            opt(Some(&bias[..]), None, false),
            opt(Some(&ramp[..]), None, false),
            opt(None, None, true),
            opt(Some(&bias[..]), None, true),
            opt(None, Some(0), false),
        ];
        for &w in windows {
            all.push(opt(None, Some(w), false));
            all.push(opt(Some(&bias[..]), Some(w), false));
            all.push(opt(None, Some(w), true));
        }
        for opts in all {
            let want = reference(&qkv, &lens, s, opts);
            let mut ctx = vec![f32::NAN; want.len()];
            let mut scores = Vec::new();
            attention(&qkv, &lens, s, opts, &mut ctx, &mut scores).unwrap();
            let diff = ctx
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            // f32 scores of up to ~100 carry ~1e-5 rounding into the exponent
            // (the tiled path divides by the sum after P V, not before).
            let what = (opts.bias.is_some(), opts.window, opts.causal);
            assert!(
                diff < 3e-5,
                "{s:?} (bias, window, causal) {what:?}: max abs diff {diff}"
            );
            // Never more than one tile of scores, whatever the length.
            assert!(scores.len() <= 128 * 512, "{s:?}: {} scores", scores.len());
        }
    }
}

#[test]
fn strided_attention_matches_reference_on_odd_shapes() {
    check_against_reference(
        &[
            (3, 7, 2, 5, vec![7, 3, 1]),
            (2, 9, 3, 11, vec![9, 9]),
            (1, 1, 1, 1, vec![1]),
            (2, 13, 12, 32, vec![13, 6]),
            // more than one key chunk and query group; head dims of 64, 32 + 16
            // and 64 + 16 + 3 columns
            (2, 40, 2, 64, vec![40, 33]),
            (1, 21, 3, 48, vec![17]),
            (1, 18, 1, 83, vec![18]),
            // past LONG: the tiled path, with padding and odd widths
            (2, 70, 2, 32, vec![70, 41]),
            (1, 67, 1, 19, vec![3]),
        ],
        &[3, 4],
    );
}

#[test]
fn tiled_attention_matches_reference_over_many_key_blocks() {
    // Several query tiles (128) and key blocks (512), partial last ones,
    // padding that ends inside a block and one that leaves a whole block of
    // padded keys; windows narrower than a tile, wider than a block, and one
    // whose band crosses block edges.
    check_against_reference(
        &[
            (1, 1100, 2, 16, vec![1100]),
            (2, 1300, 1, 8, vec![1300, 517]),
            (1, 700, 1, 19, vec![640]),
        ],
        &[6, 128, 1200],
    );
}

#[test]
fn long_input_with_window_and_padding_matches_reference() {
    // 2,600 tokens (5+ key blocks, 21 query tiles), 2,000 real, ModernBERT's
    // local window of 128, with and without the causal mask.
    check_against_reference(&[(1, 2600, 1, 8, vec![2000])], &[128]);
}

#[test]
fn causal_attention_sees_only_earlier_keys() {
    // head_dim 1, q = 0: uniform weights over the keys seen, v_j = j, so
    // query i's context is the mean of 0..=i; on both paths (short and tiled).
    for seq in [5, 600] {
        let s = AttnShape {
            batch: 1,
            seq,
            heads: 1,
            head_dim: 1,
        };
        let mut qkv = vec![0f32; 3 * seq];
        for j in 0..seq {
            qkv[j * 3 + 2] = j as f32;
        }
        let mut ctx = vec![f32::NAN; seq];
        let opts = AttnOpts {
            causal: true,
            ..AttnOpts::default()
        };
        let len = seq - 2;
        attention(&qkv, &[len], s, opts, &mut ctx, &mut Vec::new()).unwrap();
        for (i, &c) in ctx.iter().enumerate() {
            // padded queries see every real key
            let want = i.min(len - 1) as f32 / 2.0;
            assert!(
                (c - want).abs() < 1e-3 * (1.0 + want),
                "{seq} {i}: {c} vs {want}"
            );
        }
    }
}

#[test]
fn window_masks_far_keys_and_bias_shifts_scores() {
    // One head, head_dim 1, q = 0: every score is 0 before the bias, so the
    // probabilities are the softmax of the bias over the visible keys and the
    // context is their mean of v (v_j = j).
    let s = AttnShape {
        batch: 1,
        seq: 5,
        heads: 1,
        head_dim: 1,
    };
    let mut qkv = vec![0f32; 15];
    for j in 0..5 {
        qkv[j * 3 + 2] = j as f32;
    }
    let mut ctx = vec![0f32; 5];
    let mut p = Vec::new();
    let close = |a: &[f32], b: &[f32]| {
        assert!(
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6),
            "{a:?} vs {b:?}"
        )
    };
    let w = AttnOpts {
        bias: None,
        window: Some(2),
        causal: false,
    };
    attention(&qkv, &[5], s, w, &mut ctx, &mut p).unwrap();
    // keys within 1: {0,1} -> 0.5, {0,1,2} -> 1, {1,2,3} -> 2, {2,3,4} -> 3, {3,4} -> 3.5
    close(&ctx, &[0.5, 1.0, 2.0, 3.0, 3.5]);
    // Padding: len 2 and window 2, row 4 sees no real key: zero context.
    attention(&qkv, &[2], s, w, &mut ctx, &mut p).unwrap();
    close(&ctx, &[0.5, 0.5, 1.0, 0.0, 0.0]);
    // A bias of -inf on every key but j = 3 selects v_3.
    let mut bias = vec![f32::NEG_INFINITY; 25];
    for i in 0..5 {
        bias[i * 5 + 3] = 0.0;
    }
    let b = AttnOpts {
        bias: Some(&bias),
        window: None,
        causal: false,
    };
    attention(&qkv, &[5], s, b, &mut ctx, &mut p).unwrap();
    close(&ctx, &[3.0; 5]);
    assert!(attention(
        &qkv,
        &[5],
        s,
        AttnOpts {
            bias: Some(&bias[1..]),
            window: None,
            causal: false,
        },
        &mut ctx,
        &mut p
    )
    .is_err());
}

#[test]
fn padded_keys_do_not_matter() {
    let s = AttnShape {
        batch: 1,
        seq: 6,
        heads: 2,
        head_dim: 4,
    };
    let qkv = values(6 * 3 * 8, 3);
    let mut changed = qkv.clone();
    // keys and values of positions 4 and 5 (padding for len 4)
    for i in 4..6 {
        for x in &mut changed[i * 24 + 8..i * 24 + 24] {
            *x += 100.0;
        }
    }
    let (mut a, mut b) = (vec![0f32; 48], vec![0f32; 48]);
    let mut p = Vec::new();
    attention(&qkv, &[4], s, AttnOpts::default(), &mut a, &mut p).unwrap();
    attention(&changed, &[4], s, AttnOpts::default(), &mut b, &mut p).unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_shapes_are_errors() {
    let s = AttnShape {
        batch: 2,
        seq: 3,
        heads: 1,
        head_dim: 2,
    };
    let (qkv, mut ctx, mut p) = (vec![0f32; 36], vec![0f32; 12], Vec::new());
    let o = AttnOpts::default();
    assert!(attention(&qkv, &[3, 3], s, o, &mut ctx, &mut p).is_ok());
    assert!(attention(&qkv, &[3, 0], s, o, &mut ctx, &mut p).is_err());
    assert!(attention(&qkv, &[3, 4], s, o, &mut ctx, &mut p).is_err());
    assert!(attention(&qkv, &[3], s, o, &mut ctx, &mut p).is_err());
    assert!(attention(&qkv[1..], &[3, 3], s, o, &mut ctx, &mut p).is_err());
    assert!(attention(&qkv, &[3, 3], s, o, &mut ctx[1..], &mut p).is_err());
}

#[test]
fn avx512_block_equals_the_portable_block_bit_for_bit() {
    // The AVX-512 block (where the CPU has it) and the portable one do the same
    // multiply-adds in the same order: the same bits, for every shape of the
    // register path (odd head dims, partial query blocks, bias and window).
    for (batch, seq, heads, head_dim, lens) in [
        (2, 13, 12, 32, vec![13, 6]),
        (2, 40, 2, 64, vec![40, 33]),
        (1, 21, 3, 48, vec![17]),
        (1, 18, 1, 83, vec![18]),
        (3, 7, 2, 5, vec![7, 3, 1]),
    ] {
        let s = AttnShape {
            batch,
            seq,
            heads,
            head_dim,
        };
        let qkv: Vec<f32> = values(batch * seq * 3 * s.hidden(), 11 + seq as u64);
        let bias = values(heads * seq * seq, 5);
        for opts in [
            AttnOpts::default(),
            AttnOpts {
                bias: Some(&bias),
                window: Some(5),
                causal: false,
            },
            AttnOpts {
                bias: None,
                window: Some(7),
                causal: true,
            },
        ] {
            let run = |portable: bool| {
                PORTABLE.with(|p| p.set(portable));
                let mut ctx = vec![f32::NAN; batch * seq * s.hidden()];
                attention(&qkv, &lens, s, opts, &mut ctx, &mut Vec::new()).unwrap();
                PORTABLE.with(|p| p.set(false));
                ctx.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            };
            assert_eq!(run(false), run(true), "{s:?} {opts:?}");
        }
    }
}
