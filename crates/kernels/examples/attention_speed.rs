//! Self-attention throughput on encoder shapes (all-MiniLM-L6-v2: 12 heads of 32;
//! all-mpnet-base-v2: 12 heads of 64), batch 32, for several sentence lengths:
//! `cargo run --release -p bertflow-kernels --example attention_speed`.
use bertflow_kernels::{attention, AttnOpts, AttnShape};
use std::time::Instant;

fn main() {
    for (heads, head_dim) in [(12, 32), (12, 64)] {
        for seq in seqs() {
            let batch = 32;
            let shape = AttnShape {
                batch,
                seq,
                heads,
                head_dim,
            };
            let h = shape.hidden();
            let qkv: Vec<f32> = (0..batch * seq * 3 * h)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let lens = vec![seq; batch];
            let mut ctx = vec![0f32; batch * seq * h];
            let mut scratch = Vec::new();
            let mut run = || {
                attention(
                    &qkv,
                    &lens,
                    shape,
                    AttnOpts::default(),
                    &mut ctx,
                    &mut scratch,
                )
                .unwrap()
            };
            run();
            let reps = (20_000 / seq).max(20);
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..reps {
                    run();
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            let tokens = (batch * seq) as f64;
            println!(
                "heads {heads} x {head_dim}, seq {seq:3}: {:8.1} us per batch of 32, {:6.1} ns per token and head",
                best * 1e6,
                best * 1e9 / tokens / heads as f64
            );
        }
    }
}

/// Sentence lengths: `ATTN_SEQ` (comma-separated) or 8, 14, 24, 48, 128.
fn seqs() -> Vec<usize> {
    std::env::var("ATTN_SEQ")
        .ok()
        .and_then(|s| s.split(',').map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 14, 24, 48, 128])
}
