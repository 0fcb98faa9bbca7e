//! Backward pass of the flow's mean NLL on a mini-batch, written by hand
//! over flat parameter vectors: the gradient through the couplings and their
//! networks, the LU 1x1 convolutions (or reversals) and the actnorms, read
//! from the buffers that the last [`super::net::forward`] left in the
//! [`Workspace`]. Owns the helpers only the backward pass uses.

use super::arch::{ActnormIdx, Arch, LuIdx, NnIdx};
use super::kernels::{matmul, matmul_tn_acc};
use super::net::{LuCache, StepCache, Workspace, LOGSCALE_FACTOR};
use crate::real::Real;
use crate::spec::Coupling;

fn transpose<T: Real>(w: &[T], k: usize, n: usize, wt: &mut [T]) {
    for kk in 0..k {
        for j in 0..n {
            wt[j * k + kk] = w[kk * n + j];
        }
    }
}

/// Backward pass of the mean NLL (bits per dimension) over the `rows` rows
/// of the last `forward` (which must have run on the same parameters).
/// Adds the gradient to `grads` (same layout as the parameters).
pub(crate) fn backward<T: Real>(
    arch: &Arch,
    params: &[T],
    ws: &mut Workspace<T>,
    rows: usize,
    grads: &mut [T],
) {
    let dim = arch.dim;
    // loss = (1/rows) sum_i -(logp_i + logdet_i) / (dim ln 2)
    let kappa = 1.0 / (rows as f64 * dim as f64 * std::f64::consts::LN_2);
    let kappa_t = T::from_f64(kappa);
    // d loss / d z = kappa * z for every latent column.
    for (g, &z) in ws.g[..rows * dim].iter_mut().zip(&ws.x[..rows * dim]) {
        *g = kappa_t * z;
    }
    let Workspace {
        g,
        steps,
        d_o,
        dq,
        dr,
        dh,
        cc,
        lu_db,
        lu_da,
        ..
    } = ws;
    for (s, c) in arch.steps().rev().zip(steps.iter_mut().rev()) {
        let (ch, c1, c2) = (s.c, s.c1, s.c2);
        let nout = s.nn.nout;
        // coupling: gradient w.r.t. the network output, and z2's gradient.
        match arch.coupling {
            Coupling::Additive => {
                for i in 0..rows {
                    d_o[i * nout..(i + 1) * nout].copy_from_slice(&g[i * dim + c1..i * dim + ch]);
                }
            }
            Coupling::Affine => {
                for i in 0..rows {
                    let gz2 = &mut g[i * dim + c1..i * dim + ch];
                    let dor = &mut d_o[i * nout..(i + 1) * nout];
                    for j in 0..c2 {
                        let t = c.aff_t[i * c2 + j];
                        let sc = c.aff_s[i * c2 + j];
                        let gy = gz2[j];
                        // y = t * sc, logdet += ln sc
                        let dsc = gy * t - kappa_t / sc;
                        dor[2 * j] = gy * sc;
                        dor[2 * j + 1] = dsc * sc * (T::ONE - sc);
                        gz2[j] = gy * sc;
                    }
                }
            }
        }
        nn_backward(params, s.nn, ch, rows, c, d_o, dq, dr, dh, g, dim, grads);
        // permutation
        match (s.lu, c.lu.as_mut()) {
            (Some(lu), Some(lc)) => {
                lu_backward(lu, ch, rows, lc, g, dim, cc, lu_db, lu_da, kappa, grads)
            }
            _ => {
                for i in 0..rows {
                    g[i * dim..i * dim + ch].reverse();
                }
            }
        }
        // actnorm: y = (x + b) * e, logdet = sum(3 logs)
        let an = s.an;
        let three = T::from_f64(LOGSCALE_FACTOR);
        let logdet_grad = T::from_f64(-LOGSCALE_FACTOR * kappa * rows as f64);
        for j in 0..ch {
            grads[an.logs + j] += logdet_grad;
        }
        let (gb, gl) = actnorm_grads(grads, an);
        for i in 0..rows {
            let grow = &mut g[i * dim..i * dim + ch];
            let yrow = &c.act_out[i * ch..(i + 1) * ch];
            for ((((gv, &y), &e), gbj), glj) in grow
                .iter_mut()
                .zip(yrow)
                .zip(&c.e)
                .zip(gb.iter_mut())
                .zip(gl.iter_mut())
            {
                *glj += three * *gv * y;
                *gv *= e;
                *gbj += *gv;
            }
        }
    }
}

/// Backward through the coupling network (its input z1 is the first
/// `nin` columns of `c.cin`, row stride `z1_stride`). `d_o` holds d loss / d output
/// (rows x nout); adds d loss / d z1 into `g` (columns `..nin`, stride `dim`).
#[allow(clippy::too_many_arguments)]
fn nn_backward<T: Real>(
    params: &[T],
    nn: NnIdx,
    z1_stride: usize,
    rows: usize,
    c: &mut StepCache<T>,
    d_o: &[T],
    dq: &mut [T],
    dr: &mut [T],
    dh: &mut [T],
    g: &mut [T],
    dim: usize,
    grads: &mut [T],
) {
    let (w, nout, nin) = (nn.width, nn.nout, nn.nin);
    let three = T::from_f64(LOGSCALE_FACTOR);
    // o = (q + b3) * e3, q = r2 . W3
    debug_assert_eq!(nn.logs3, nn.b3 + nout);
    let (gb3, gl3) = grads[nn.b3..nn.b3 + 2 * nout].split_at_mut(nout);
    for i in 0..rows {
        let dorow = &d_o[i * nout..(i + 1) * nout];
        let orow = &c.o[i * nout..(i + 1) * nout];
        let dqrow = &mut dq[i * nout..(i + 1) * nout];
        for (((((dqv, &dov), &ov), &e), gb), gl) in dqrow
            .iter_mut()
            .zip(dorow)
            .zip(orow)
            .zip(&c.e3)
            .zip(gb3.iter_mut())
            .zip(gl3.iter_mut())
        {
            *gl += three * dov * ov;
            *dqv = dov * e;
            *gb += *dqv;
        }
    }
    matmul_tn_acc(
        &c.r2,
        w,
        rows,
        w,
        dq,
        nout,
        nout,
        &mut grads[nn.w3..nn.w3 + w * nout],
    );
    transpose(&params[nn.w3..nn.w3 + w * nout], w, nout, &mut c.w3t);
    matmul(dq, nout, rows, nout, &c.w3t, w, dr, w, false);
    // r2 = relu(u2), u2 = (h2 + b2) * e2
    actnorm_relu_backward(nn.an2, &c.u2, &c.e2, rows, w, dr, dh, grads);
    matmul_tn_acc(
        &c.r1,
        w,
        rows,
        w,
        dh,
        w,
        w,
        &mut grads[nn.w2..nn.w2 + w * w],
    );
    transpose(&params[nn.w2..nn.w2 + w * w], w, w, &mut c.w2t);
    matmul(dh, w, rows, w, &c.w2t, w, dr, w, false);
    actnorm_relu_backward(nn.an1, &c.u1, &c.e1, rows, w, dr, dh, grads);
    matmul_tn_acc(
        &c.cin,
        z1_stride,
        rows,
        nin,
        dh,
        w,
        w,
        &mut grads[nn.w1..nn.w1 + nin * w],
    );
    transpose(&params[nn.w1..nn.w1 + nin * w], nin, w, &mut c.w1t);
    matmul(dh, w, rows, w, &c.w1t, nin, g, dim, true);
}

/// Backward through `y = ((x P) L) U`: `g[.., ..c]` holds d loss / d y on
/// entry and d loss / d x on exit.
#[allow(clippy::too_many_arguments)]
fn lu_backward<T: Real>(
    lu: LuIdx,
    c: usize,
    rows: usize,
    lc: &LuCache<T>,
    g: &mut [T],
    dim: usize,
    cc: &mut [T],
    db: &mut [T],
    da: &mut [T],
    kappa: f64,
    grads: &mut [T],
) {
    let cc = &mut cc[..c * c];
    // dU = b^T dy; the diagonal goes to log_s through U_jj = sign_j exp(log_s_j)
    cc.fill(T::ZERO);
    matmul_tn_acc(&lc.b, c, rows, c, g, dim, c, cc);
    let logdet_grad = T::from_f64(-kappa * rows as f64);
    for i in 0..c {
        for j in i + 1..c {
            grads[lu.upper + i * c + j] += cc[i * c + j];
        }
        grads[lu.log_s + i] += cc[i * c + i] * lc.ufull[i * c + i] + logdet_grad;
    }
    // db = dy U^T
    matmul(g, dim, rows, c, &lc.ut, c, db, c, false);
    // dL = a^T db (strictly lower part)
    cc.fill(T::ZERO);
    matmul_tn_acc(&lc.a, c, rows, c, db, c, c, cc);
    for i in 0..c {
        for j in 0..i {
            grads[lu.lower + i * c + j] += cc[i * c + j];
        }
    }
    // da = db L^T, then undo the gather a_j = x[perm[j]]
    matmul(db, c, rows, c, &lc.lt, c, da, c, false);
    for i in 0..rows {
        let grow = &mut g[i * dim..i * dim + c];
        for (&pj, &d) in lc.perm.iter().zip(&da[i * c..(i + 1) * c]) {
            grow[pj] = d;
        }
    }
}

/// The gradient slices of an actnorm's bias and log-scale (stored one
/// after the other).
fn actnorm_grads<T>(grads: &mut [T], an: ActnormIdx) -> (&mut [T], &mut [T]) {
    debug_assert_eq!(an.logs, an.b + an.n);
    grads[an.b..an.b + 2 * an.n].split_at_mut(an.n)
}

/// Given d loss / d relu-output in `dr`, writes d loss / d (pre-actnorm
/// input) into `dh` and accumulates the actnorm's parameter gradients.
#[allow(clippy::too_many_arguments)]
fn actnorm_relu_backward<T: Real>(
    an: ActnormIdx,
    u: &[T],
    e: &[T],
    rows: usize,
    w: usize,
    dr: &[T],
    dh: &mut [T],
    grads: &mut [T],
) {
    let three = T::from_f64(LOGSCALE_FACTOR);
    let (gb, gl) = actnorm_grads(grads, an);
    for i in 0..rows {
        let urow = &u[i * w..(i + 1) * w];
        let drrow = &dr[i * w..(i + 1) * w];
        let dhrow = &mut dh[i * w..(i + 1) * w];
        for (((((dhv, &uv), &drv), &ev), gbk), glk) in dhrow
            .iter_mut()
            .zip(urow)
            .zip(drrow)
            .zip(e)
            .zip(gb.iter_mut())
            .zip(gl.iter_mut())
        {
            let du = if uv > T::ZERO { drv } else { T::ZERO };
            *glk += three * du * uv;
            *dhv = du * ev;
            *gbk += *dhv;
        }
    }
}
