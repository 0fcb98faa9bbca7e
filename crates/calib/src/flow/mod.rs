//! BERT-flow (see [`Flow`]).

pub(crate) mod arch;
mod backward;
mod kernels;
pub(crate) mod net;
pub(crate) mod train;

#[cfg(test)]
mod tests;

use ndarray::{Array1, Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::error::not_loaded;
use crate::error::Result;
use crate::spec::FlowConfig;
use crate::stats::check_transform_input;
use crate::tensors::{TensorReader, TensorWriter};
use crate::{stats, Calibrator, FitProgress};
use arch::Arch;
use net::{Params, Workspace};

/// Rows processed at once by transform/inverse/log-density.
const CHUNK: usize = 256;

/// A fitted BERT-flow: a Glow-style normalising flow on the embedding seen
/// as a 1x1 image with C channels, trained by maximum likelihood.
///
/// Architecture (Li et al. 2020, following Glow): `L` levels of `K` steps;
/// a step is actnorm -> channel reversal (or, with `permutation=lu`, Glow's
/// LU-parameterised invertible 1x1 convolution) -> coupling (additive by
/// default, optionally Glow's affine coupling). The coupling network is a 1x1 conv
/// (dense) `C/2 -> W` without bias, actnorm, ReLU, `W -> W` without bias,
/// actnorm, ReLU, and a zero-initialised `W -> C/2` with bias whose output
/// is scaled by `exp(3 s)` (Glow's `conv2d_zeros`). After every level but
/// the last the second half of the channels is split off under a standard
/// normal prior; the top latent also has a standard normal prior. The
/// objective is the NLL in bits per dimension, optimised with Adam.
///
/// Zero-variance channels: Glow's actnorm initialisation `log(1/(std +
/// 1e-6))` gives such a channel a scale of 1e6, and training then keeps
/// inflating it (the log-likelihood of a constant is unbounded). Here a
/// channel whose variance on the initialisation batch is zero, or at most
/// [`crate::ZERO_VARIANCE_RTOL`] times the largest variance of that actnorm,
/// gets log-scale 0 (scale 1), and in the flow's own actnorms (not those
/// inside the coupling networks) such a channel's bias and scale are frozen
/// during training. All initial log-scales are clamped to +-12.
///
/// Divergence: a non-finite loss, gradient or parameter, or a batch NLL
/// more than 1000 bits/dim above the first batch's (latents of ~40 standard
/// deviations: the model has blown up), stops the fit with
/// [`crate::CalibError::Diverged`] naming the step and the quantity; no model is
/// returned. (`permutation=lu` can blow up this way on strongly correlated
/// data at lr 1e-3; lr 1e-4 is stable there.)
///
/// The transform returns the full latent `z`, same dimension as the input:
/// the split-off parts, level 0 first, then the top latent.
///
/// Channel counts: a level with `c` channels splits off its second half,
/// `c / 2` channels, and passes `c - c / 2` on; a coupling conditions on
/// the first `c / 2` channels. With even sizes (384 -> 192 -> 96) these are
/// the paper's exact halves; odd sizes are handled the same way rather than
/// refused. Only a level left with fewer than 2 channels is an error
/// ([`crate::CalibError::Architecture`]).
///
/// Training is single-threaded and deterministic: the same seed and data
/// give the same parameters bit for bit (the matrix kernels never fuse
/// multiply-adds, so their AVX2 and SSE2 builds agree).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flow {
    /// Hyper-parameters it was trained with.
    pub config: FlowConfig,
    /// Input (= latent) dimension.
    pub dim: usize,
    /// Optimisation steps taken.
    pub train_steps: usize,
    /// NLL (bits/dim) of the first batch right after initialisation.
    pub initial_loss: f64,
    /// Mean batch NLL (bits/dim) over the last epoch.
    pub final_loss: f64,
    #[serde(skip)]
    arch: Arch,
    #[serde(skip)]
    params: Vec<f32>,
}

impl Flow {
    pub(crate) fn fit(
        cfg: &FlowConfig,
        x: ArrayView2<f32>,
        progress: Option<&mut dyn FnMut(FitProgress)>,
    ) -> Result<Self> {
        Self::fit_steps(cfg, x, progress, None)
    }

    pub(crate) fn fit_steps(
        cfg: &FlowConfig,
        x: ArrayView2<f32>,
        progress: Option<&mut dyn FnMut(FitProgress)>,
        max_steps: Option<usize>,
    ) -> Result<Self> {
        stats::check_fit_input("flow", x, 2)?;
        let arch = Arch::new(x.ncols(), cfg)?;
        let out = train::train(&arch, cfg, x, progress, max_steps)?;
        Ok(Flow {
            config: cfg.clone(),
            dim: x.ncols(),
            train_steps: out.steps,
            initial_loss: out.initial_loss,
            final_loss: out.final_loss,
            arch,
            params: out.params,
        })
    }

    fn check_loaded(&self) -> Result<()> {
        if self.arch.dim != self.dim
            || self.arch.n_params == 0
            || self.params.len() != self.arch.n_params
        {
            return Err(not_loaded("flow"));
        }
        Ok(())
    }

    /// Runs `f` on chunks of rows loaded into a workspace; `f` gets the
    /// workspace, the chunk's first row and its length.
    fn chunked(
        &self,
        x: ArrayView2<f32>,
        mut f: impl FnMut(&mut Workspace<f32>, usize, usize),
        load: impl Fn(&mut [f32], ndarray::ArrayView1<f32>, &[usize]),
    ) {
        let n = x.nrows();
        let mut ws = Workspace::<f32>::new(&self.arch, CHUNK.min(n.max(1)));
        let d = self.dim;
        let mut start = 0;
        while start < n {
            let rows = ws.cap().min(n - start);
            for r in 0..rows {
                load(
                    &mut ws.x[r * d..(r + 1) * d],
                    x.row(start + r),
                    &self.arch.out_perm,
                );
            }
            f(&mut ws, start, rows);
            start += rows;
        }
    }

    /// Forward pass: returns the latent (output order) and fills per-row
    /// log-determinant and log prior density (nats).
    fn run_forward(&self, x: ArrayView2<f32>) -> Result<(Array2<f32>, Array1<f64>, Array1<f64>)> {
        self.check_loaded()?;
        check_transform_input(self.dim, x)?;
        let n = x.nrows();
        let d = self.dim;
        let mut z = Array2::<f32>::zeros((n, d));
        let mut logdet = Array1::<f64>::zeros(n);
        let mut logp = Array1::<f64>::zeros(n);
        let perm = &self.arch.out_perm;
        self.chunked(
            x,
            |ws, start, rows| {
                net::forward(&self.arch, Params::Fixed(&self.params), ws, rows);
                for r in 0..rows {
                    let src = &ws.x[r * d..(r + 1) * d];
                    for (o, &p) in z.row_mut(start + r).iter_mut().zip(perm) {
                        *o = src[p];
                    }
                    logdet[start + r] = ws.logdet[r];
                    logp[start + r] = ws.logp[r];
                }
            },
            |dst, row, _| {
                for (dd, &s) in dst.iter_mut().zip(row.iter()) {
                    *dd = s;
                }
            },
        );
        Ok((z, logdet, logp))
    }

    /// The inverse map: latents (output column order) back to embeddings.
    pub fn inverse(&self, z: ArrayView2<f32>) -> Result<Array2<f32>> {
        self.check_loaded()?;
        check_transform_input(self.dim, z)?;
        let n = z.nrows();
        let d = self.dim;
        let mut x = Array2::<f32>::zeros((n, d));
        self.chunked(
            z,
            |ws, start, rows| {
                net::inverse(&self.arch, &self.params, ws, rows);
                for r in 0..rows {
                    for (o, &s) in x
                        .row_mut(start + r)
                        .iter_mut()
                        .zip(&ws.x[r * d..(r + 1) * d])
                    {
                        *o = s;
                    }
                }
            },
            |dst, row, perm| {
                for (&p, &s) in perm.iter().zip(row.iter()) {
                    dst[p] = s;
                }
            },
        );
        Ok(x)
    }

    /// Per-row log |det dz/dx| (nats).
    pub fn log_det(&self, x: ArrayView2<f32>) -> Result<Array1<f64>> {
        Ok(self.run_forward(x)?.1)
    }

    /// Per-row log-density of the model at `x` (nats): log N(z; 0, I) +
    /// log |det dz/dx|.
    pub fn log_prob(&self, x: ArrayView2<f32>) -> Result<Array1<f64>> {
        let (_, logdet, logp) = self.run_forward(x)?;
        Ok(logp + logdet)
    }

    /// Mean negative log-likelihood in bits per dimension (the training
    /// objective) over the rows of `x`.
    pub fn nll_bits_per_dim(&self, x: ArrayView2<f32>) -> Result<f64> {
        let lp = self.log_prob(x)?;
        let n = lp.len().max(1) as f64;
        Ok(-lp.sum() / (n * self.dim as f64 * std::f64::consts::LN_2))
    }

    pub(crate) fn write_tensors(&self, w: &mut TensorWriter) {
        for t in &self.arch.tensors {
            w.f32(
                &t.name,
                &t.shape,
                self.params[t.offset..t.offset + t.len].iter().copied(),
            );
        }
    }

    pub(crate) fn read_tensors(&mut self, r: &mut TensorReader) -> Result<()> {
        crate::CalibSpec::from_flow(&self.config).map_err(|e| r.format_error(e.to_string()))?;
        let arch = Arch::new(self.dim, &self.config).map_err(|e| r.format_error(e.to_string()))?;
        let mut params = vec![0.0f32; arch.n_params];
        for t in &arch.tensors {
            let v = r.f32(&t.name, &t.shape)?;
            params[t.offset..t.offset + t.len].copy_from_slice(&v);
        }
        validate_lu(&arch, &params).map_err(|e| r.format_error(e))?;
        self.arch = arch;
        self.params = params;
        Ok(())
    }

    /// Parameters cast to f64 (for checks in f64).
    #[cfg(test)]
    pub(crate) fn params_f64(&self) -> Vec<f64> {
        self.params.iter().map(|&v| v as f64).collect()
    }

    #[cfg(test)]
    pub(crate) fn arch(&self) -> &Arch {
        &self.arch
    }
}

/// The fixed parts of LU 1x1 convolutions must be a permutation and signs.
fn validate_lu(arch: &Arch, params: &[f32]) -> std::result::Result<(), String> {
    for (k, s) in arch.steps().enumerate() {
        let Some(lu) = s.lu else { continue };
        let mut seen = vec![false; s.c];
        for j in 0..s.c {
            let v = params[lu.perm + j];
            let ok = v >= 0.0 && v.fract() == 0.0 && (v as usize) < s.c && !seen[v as usize];
            if !ok {
                return Err(format!(
                    "step {k}: invconv.perm is not a permutation of 0..{}",
                    s.c
                ));
            }
            seen[v as usize] = true;
            let sign = params[lu.sign_s + j];
            if sign != 1.0 && sign != -1.0 {
                return Err(format!(
                    "step {k}: invconv.sign_s has a value other than +-1"
                ));
            }
        }
    }
    Ok(())
}

impl Calibrator for Flow {
    fn input_dim(&self) -> usize {
        self.dim
    }
    fn output_dim(&self) -> usize {
        self.dim
    }
    fn transform(&self, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        Ok(self.run_forward(x)?.0)
    }
    fn describe(&self) -> String {
        let c = &self.config;
        format!(
            "flow (L={}, K={}, width={}, {} coupling, {} permutation; {} epoch(s), {} steps, \
             batch {}, lr {:e}, seed {}; NLL {:.4} -> {:.4} bits/dim)",
            c.levels,
            c.steps,
            c.width,
            c.coupling,
            c.permutation,
            c.epochs,
            self.train_steps,
            c.batch,
            c.lr,
            c.seed,
            self.initial_loss,
            self.final_loss
        )
    }
}
