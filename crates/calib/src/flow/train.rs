//! Maximum-likelihood training of the flow: Adam on mini-batches, the data
//! shuffled every epoch with the seeded generator. Single-threaded and
//! allocation-free inside the loop, so a seed gives the same parameters bit
//! for bit.

use ndarray::ArrayView2;

use super::arch::Arch;
use super::net::{self, Params, Workspace};
use crate::error::{CalibError, Result};
use crate::spec::FlowConfig;
use crate::FitProgress;
use bertflow_numeric::Xoshiro256StarStar as Rng;

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const ADAM_EPS: f64 = 1e-8;
/// A batch NLL this many bits/dim above the first batch's counts as a
/// divergence (latents of ~40 standard deviations).
pub(crate) const LOSS_EXPLOSION_BITS: f64 = 1000.0;

pub(crate) struct TrainOutcome {
    pub params: Vec<f32>,
    /// NLL (bits/dim) of the first batch right after the data-dependent
    /// initialisation, before any update.
    pub initial_loss: f64,
    /// Mean batch NLL (bits/dim) over the last epoch.
    pub final_loss: f64,
    pub steps: usize,
}

/// Copies rows `idx` of `x` into the workspace.
fn gather(x: ArrayView2<f32>, idx: &[usize], ws: &mut Workspace<f32>, dim: usize) {
    for (r, &i) in idx.iter().enumerate() {
        let dst = &mut ws.x[r * dim..(r + 1) * dim];
        for (d, &s) in dst.iter_mut().zip(x.row(i).iter()) {
            *d = s;
        }
    }
}

fn first_non_finite(v: &[f32]) -> Option<usize> {
    // A branch-free scan first (it vectorises); the position only on failure.
    if v.iter().fold(false, |bad, x| bad | !x.is_finite()) {
        v.iter().position(|x| !x.is_finite())
    } else {
        None
    }
}

/// Trains a flow. `max_steps` (tests only) stops early.
pub(crate) fn train(
    arch: &Arch,
    cfg: &FlowConfig,
    x: ArrayView2<f32>,
    mut progress: Option<&mut dyn FnMut(FitProgress)>,
    max_steps: Option<usize>,
) -> Result<TrainOutcome> {
    let n = x.nrows();
    let dim = arch.dim;
    let mut rng = Rng::new(cfg.seed);
    let mut params = arch.init_params(&mut rng);
    let np = params.len();
    let mut grads = vec![0.0f32; np];
    let mut m = vec![0.0f32; np];
    let mut v = vec![0.0f32; np];
    let mut frozen: Vec<usize> = Vec::new();
    let batch = cfg.batch.min(n);
    let mut ws = Workspace::<f32>::new(arch, batch);
    let mut order: Vec<usize> = (0..n).collect();
    let steps_per_epoch = n.div_ceil(batch);
    let total = cfg.epochs * steps_per_epoch;
    let total = max_steps.map_or(total, |s| s.min(total));
    let (b1, b2) = (BETA1 as f32, BETA2 as f32);
    let (one_m_b1, one_m_b2) = ((1.0 - BETA1) as f32, (1.0 - BETA2) as f32);
    let eps = ADAM_EPS as f32;

    let mut step = 0usize;
    let mut initial_loss = f64::NAN;
    let mut final_loss = f64::NAN;
    'epochs: for epoch in 1..=cfg.epochs {
        rng.shuffle(&mut order);
        let mut epoch_sum = 0.0;
        let mut epoch_batches = 0usize;
        for idx in order.chunks(batch) {
            if step >= total {
                break 'epochs;
            }
            step += 1;
            let rows = idx.len();
            gather(x, idx, &mut ws, dim);
            let diverged = |reason: String| CalibError::Diverged {
                step,
                epoch,
                reason,
            };
            if step == 1 {
                net::forward(
                    arch,
                    Params::Init {
                        params: &mut params,
                        frozen: &mut frozen,
                    },
                    &mut ws,
                    rows,
                );
                if let Some(i) = first_non_finite(&params) {
                    return Err(diverged(format!(
                        "parameter {} is not finite after the data-dependent initialisation",
                        arch.tensor_of(i)
                    )));
                }
            } else {
                net::forward(arch, Params::Fixed(&params), &mut ws, rows);
            }
            let loss = ws.nll_bits_per_dim(rows);
            if !loss.is_finite() {
                return Err(diverged(format!("the loss (NLL = {loss}) is not finite")));
            }
            if step == 1 {
                initial_loss = loss;
            } else if loss > initial_loss + LOSS_EXPLOSION_BITS {
                return Err(diverged(format!(
                    "the loss exploded to {loss:.4e} bits/dim (first batch: {initial_loss:.4}); \
                     try a lower lr"
                )));
            }
            grads.fill(0.0);
            net::backward(arch, &params, &mut ws, rows, &mut grads);
            // Degenerate (zero-variance) channels of the flow's actnorms stay
            // at their initial values: with a zero gradient their Adam
            // moments stay zero and so do their updates.
            for &i in &frozen {
                grads[i] = 0.0;
            }
            if let Some(i) = first_non_finite(&grads) {
                return Err(diverged(format!(
                    "the gradient of {} is not finite",
                    arch.tensor_of(i)
                )));
            }
            // Adam (bias-corrected, as in PyTorch).
            let t = step as i32;
            let bc1 = 1.0 - BETA1.powi(t);
            let bc2 = 1.0 - BETA2.powi(t);
            let step_size = (cfg.lr / bc1) as f32;
            let inv_sqrt_bc2 = (1.0 / bc2.sqrt()) as f32;
            for (((p, &g), mm), vv) in params
                .iter_mut()
                .zip(&grads)
                .zip(m.iter_mut())
                .zip(v.iter_mut())
            {
                *mm = b1 * *mm + one_m_b1 * g;
                *vv = b2 * *vv + one_m_b2 * g * g;
                let denom = vv.sqrt() * inv_sqrt_bc2 + eps;
                *p -= step_size * *mm / denom;
            }
            if let Some(i) = first_non_finite(&params) {
                return Err(diverged(format!(
                    "parameter {} is not finite",
                    arch.tensor_of(i)
                )));
            }
            epoch_sum += loss;
            epoch_batches += 1;
            final_loss = epoch_sum / epoch_batches as f64;
            if let Some(cb) = progress.as_mut() {
                cb(FitProgress {
                    step,
                    total_steps: total,
                    epoch,
                    epochs: cfg.epochs,
                    loss,
                    running_loss: final_loss,
                });
            }
        }
    }
    Ok(TrainOutcome {
        params,
        initial_loss,
        final_loss,
        steps: step,
    })
}
