//! Checks of the hand-written flow against brute force, in f64.

use ndarray::Array2;

use super::arch::Arch;
use super::net::{self, Params, Workspace};
use super::Flow;
use crate::spec::{Coupling, FlowConfig, Permutation};
use bertflow_numeric::Xoshiro256StarStar as Rng;

/// Correlated, anisotropic, non-centred data with values of order 1..10.
fn data(n: usize, d: usize, seed: u64) -> Array2<f32> {
    let mut rng = Rng::new(seed);
    let mix: Vec<f64> = (0..d * d)
        .map(|_| rng.normal() / (d as f64).sqrt())
        .collect();
    let mut x = Array2::<f32>::zeros((n, d));
    for mut row in x.rows_mut() {
        let z: Vec<f64> = (0..d)
            .map(|j| rng.normal() * (0.1 + 2.0 * j as f64 / d as f64))
            .collect();
        for (j, v) in row.iter_mut().enumerate() {
            let m: f64 = (0..d).map(|k| mix[j * d + k] * z[k]).sum();
            *v = (1.0 + j as f64 * 0.3 + m + 0.2 * z[j].powi(2)) as f32;
        }
    }
    x
}

fn small_cfg(coupling: Coupling) -> FlowConfig {
    small_cfg_p(coupling, Permutation::Reverse)
}

fn small_cfg_p(coupling: Coupling, permutation: Permutation) -> FlowConfig {
    FlowConfig {
        permutation,
        levels: 2,
        steps: 2,
        width: 4,
        epochs: 50,
        lr: 1e-2,
        batch: 16,
        seed: 3,
        coupling,
    }
}

const VARIANTS: [(Coupling, Permutation); 4] = [
    (Coupling::Additive, Permutation::Reverse),
    (Coupling::Affine, Permutation::Reverse),
    (Coupling::Additive, Permutation::Lu),
    (Coupling::Affine, Permutation::Lu),
];

/// A flow trained for a while so every network is non-trivial.
fn trained(v: (Coupling, Permutation), d: usize, steps: usize) -> (Flow, Array2<f32>) {
    let x = data(256, d, 11);
    let f = Flow::fit_steps(&small_cfg_p(v.0, v.1), x.view(), None, Some(steps)).unwrap();
    assert_eq!(f.train_steps, steps);
    (f, x)
}

fn load_rows(ws: &mut Workspace<f64>, x: &Array2<f32>, rows: &[usize], d: usize) {
    for (r, &i) in rows.iter().enumerate() {
        for j in 0..d {
            ws.x[r * d + j] = x[[i, j]] as f64;
        }
    }
}

fn nll(arch: &Arch, p: &[f64], x: &Array2<f32>, rows: &[usize]) -> f64 {
    let mut ws = Workspace::<f64>::new(arch, rows.len());
    load_rows(&mut ws, x, rows, arch.dim);
    net::forward(arch, Params::Fixed(p), &mut ws, rows.len());
    ws.nll_bits_per_dim(rows.len())
}

fn gradient_check(v: (Coupling, Permutation)) {
    let (flow, x) = trained(v, 8, 200);
    let arch = flow.arch().clone();
    let p = flow.params_f64();
    // the last layers must have moved away from their zero initialisation
    let w3 = arch
        .tensors
        .iter()
        .find(|t| t.name.ends_with("step0.coupling.w3"))
        .unwrap();
    assert!(p[w3.offset..w3.offset + w3.len]
        .iter()
        .any(|v| v.abs() > 1e-3));

    let rows: Vec<usize> = (0..12).map(|i| i * 7 + 1).collect();
    let mut ws = Workspace::<f64>::new(&arch, rows.len());
    load_rows(&mut ws, &x, &rows, 8);
    net::forward(&arch, Params::Fixed(&p), &mut ws, rows.len());
    let mut grads = vec![0.0f64; p.len()];
    net::backward(&arch, &p, &mut ws, rows.len(), &mut grads);

    let h = 1e-6;
    let mut worst = (0.0f64, String::new());
    for i in 0..p.len() {
        let name = arch.tensor_of(i);
        if name.ends_with("invconv.perm") || name.ends_with("invconv.sign_s") {
            continue; // fixed, not trainable
        }
        let mut q = p.clone();
        q[i] = p[i] + h;
        let up = nll(&arch, &q, &x, &rows);
        q[i] = p[i] - h;
        let down = nll(&arch, &q, &x, &rows);
        let numeric = (up - down) / (2.0 * h);
        let err = (numeric - grads[i]).abs() / (1e-4 + numeric.abs().max(grads[i].abs()));
        if err > worst.0 {
            worst = (
                err,
                format!(
                    "{} [{i}]: analytic {} numeric {numeric}",
                    arch.tensor_of(i),
                    grads[i]
                ),
            );
        }
    }
    assert!(
        worst.0 < 1e-5,
        "worst relative gradient error {}: {}",
        worst.0,
        worst.1
    );
    // the check is not vacuous: gradients are not all zero in any tensor kind
    for suffix in [
        "actnorm.bias",
        "actnorm.logs",
        "w1",
        "w2",
        "w3",
        "b3",
        "logs3",
        "actnorm1.logs",
    ] {
        let t = arch
            .tensors
            .iter()
            .find(|t| t.name.ends_with(suffix))
            .unwrap();
        assert!(
            grads[t.offset..t.offset + t.len]
                .iter()
                .any(|g| g.abs() > 1e-6),
            "zero gradient for {}",
            t.name
        );
    }
}

#[test]
fn gradients_match_finite_differences() {
    for v in VARIANTS {
        gradient_check(v);
    }
}

fn logdet_check(v: (Coupling, Permutation)) {
    let d = 8;
    let (flow, x) = trained(v, d, 300);
    let arch = flow.arch().clone();
    let p = flow.params_f64();
    let mut ws = Workspace::<f64>::new(&arch, 1);
    let f = |ws: &mut Workspace<f64>, v: &[f64]| -> (Vec<f64>, f64) {
        ws.x[..d].copy_from_slice(v);
        net::forward(&arch, Params::Fixed(&p), ws, 1);
        (ws.x[..d].to_vec(), ws.logdet[0])
    };
    let h = 1e-5;
    for row in [0usize, 17, 99] {
        let x0: Vec<f64> = x.row(row).iter().map(|&v| v as f64).collect();
        let (_, logdet) = f(&mut ws, &x0);
        let mut jac = nalgebra::DMatrix::<f64>::zeros(d, d);
        for j in 0..d {
            let mut xp = x0.clone();
            xp[j] += h;
            let (zp, _) = f(&mut ws, &xp);
            xp[j] -= 2.0 * h;
            let (zm, _) = f(&mut ws, &xp);
            for i in 0..d {
                jac[(i, j)] = (zp[i] - zm[i]) / (2.0 * h);
            }
        }
        let brute = jac.determinant().abs().ln();
        assert!(
            (brute - logdet).abs() < 1e-6 * (1.0 + logdet.abs()),
            "{v:?} row {row}: brute-force log|det J| {brute} vs flow {logdet}"
        );
    }
}

#[test]
fn log_determinant_matches_brute_force_jacobian() {
    for v in VARIANTS {
        logdet_check(v);
    }
}

#[test]
fn inverse_in_f64_is_exact() {
    for v in VARIANTS {
        let (flow, x) = trained(v, 8, 300);
        let arch = flow.arch().clone();
        let p = flow.params_f64();
        let rows: Vec<usize> = (0..64).collect();
        let mut ws = Workspace::<f64>::new(&arch, rows.len());
        load_rows(&mut ws, &x, &rows, 8);
        net::forward(&arch, Params::Fixed(&p), &mut ws, rows.len());
        assert!(ws.x.iter().any(|&z| z.abs() > 0.5));
        net::inverse(&arch, &p, &mut ws, rows.len());
        for (r, &i) in rows.iter().enumerate() {
            for j in 0..8 {
                let err = (ws.x[r * 8 + j] - x[[i, j]] as f64).abs();
                assert!(err < 1e-10, "{v:?} row {i} col {j}: {err}");
            }
        }
    }
}

#[test]
fn zero_variance_channels_get_unit_scale_and_are_frozen() {
    let mut x = data(512, 8, 5);
    for i in 0..x.nrows() {
        x[[i, 2]] = 0.25;
    }
    let cfg = FlowConfig {
        epochs: 3,
        ..small_cfg(Coupling::Additive)
    };
    let f = Flow::fit_steps(&cfg, x.view(), None, None).unwrap();
    let arch = f.arch();
    let b = arch
        .tensors
        .iter()
        .find(|t| t.name == "level0.step0.actnorm.bias")
        .unwrap();
    let logs = arch
        .tensors
        .iter()
        .find(|t| t.name == "level0.step0.actnorm.logs")
        .unwrap();
    let p = f.params_f64();
    assert_eq!(
        p[logs.offset + 2],
        0.0,
        "constant channel must keep scale 1"
    );
    assert_eq!(
        p[b.offset + 2],
        -0.25,
        "constant channel is centred, then frozen"
    );
    // other channels were initialised and trained
    assert!(
        p[logs.offset..logs.offset + 8]
            .iter()
            .filter(|v| **v != 0.0)
            .count()
            == 7
    );
    let z = crate::Calibrator::transform(&f, x.view()).unwrap();
    assert!(z.iter().all(|v| v.is_finite()));
}
