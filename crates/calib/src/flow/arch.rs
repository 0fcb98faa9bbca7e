//! The flow's architecture: channel counts per level and the layout of all
//! parameters in one flat vector (each tensor a named, shaped slice of it).

use crate::error::{CalibError, Result};
use crate::spec::{Coupling, FlowConfig, Permutation};
use bertflow_numeric::Xoshiro256StarStar as Rng;

/// A named parameter tensor: `shape`, stored at `params[offset..offset + len]`
/// in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TensorSlot {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub len: usize,
}

/// Offsets of an actnorm's bias and log-scale (each `n` long).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct ActnormIdx {
    pub b: usize,
    pub logs: usize,
    pub n: usize,
}

/// Offsets of a coupling network `nin -> width -> width -> nout`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct NnIdx {
    pub nin: usize,
    pub width: usize,
    pub nout: usize,
    /// nin x width
    pub w1: usize,
    pub an1: ActnormIdx,
    /// width x width
    pub w2: usize,
    pub an2: ActnormIdx,
    /// width x nout
    pub w3: usize,
    pub b3: usize,
    pub logs3: usize,
}

/// Offsets of an LU-parameterised invertible 1x1 convolution on `c`
/// channels: `y = x W`, `W = P L (U + diag(sign_s * exp(log_s)))`. `perm`
/// (c, integers stored as floats: `(x P)_j = x[perm[j]]`) and `sign_s` (c,
/// +-1) are fixed; only the strictly lower part of `lower` (c x c), the
/// strictly upper part of `upper` (c x c) and `log_s` (c) are used and trained.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct LuIdx {
    pub perm: usize,
    pub lower: usize,
    pub upper: usize,
    pub log_s: usize,
    pub sign_s: usize,
}

/// One step: actnorm -> permutation (reversal or LU 1x1 conv) -> coupling
/// on the first `c` channels.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct StepArch {
    pub c: usize,
    /// Channels of z1 (conditioning half): `c / 2`.
    pub c1: usize,
    /// Channels of z2 (transformed half): `c - c1`.
    pub c2: usize,
    pub an: ActnormIdx,
    /// `None`: fixed channel reversal.
    pub lu: Option<LuIdx>,
    pub nn: NnIdx,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct LevelArch {
    /// Channels entering the level.
    pub c: usize,
    /// Channels passed on to the next level (`c` for the last level); the
    /// channels `keep..c` are split off under a standard normal prior.
    pub keep: usize,
    pub steps: Vec<StepArch>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Arch {
    pub dim: usize,
    pub width: usize,
    pub coupling: Coupling,
    pub levels: Vec<LevelArch>,
    pub tensors: Vec<TensorSlot>,
    pub n_params: usize,
    /// Output column `j` is internal buffer column `out_perm[j]`: the
    /// split-off parts, level 0 first, then the top latent.
    pub out_perm: Vec<usize>,
}

impl Arch {
    /// Builds the architecture. Channel counts: a level with `c` channels
    /// splits off its second half, `c / 2` channels, and passes `c - c / 2`
    /// on; a coupling conditions on the first `c / 2` channels and
    /// transforms the other `c - c / 2`. With the paper's even sizes (e.g.
    /// 384 -> 192 -> 96) these are exact halves; odd sizes are handled the
    /// same way. Every level needs at least 2 channels, otherwise this is
    /// an error.
    pub fn new(dim: usize, cfg: &FlowConfig) -> Result<Arch> {
        let mut b = Builder {
            tensors: Vec::new(),
            offset: 0,
        };
        let mut levels = Vec::with_capacity(cfg.levels);
        let mut c = dim;
        for l in 0..cfg.levels {
            if c < 2 {
                return Err(CalibError::Architecture {
                    dim,
                    reason: format!(
                        "level {l} would have {c} channel(s), but a coupling needs at least 2; \
                         use fewer levels (at most {} for this dimension)",
                        max_levels(dim)
                    ),
                });
            }
            let c1 = c / 2;
            let c2 = c - c1;
            let nout = match cfg.coupling {
                Coupling::Additive => c2,
                Coupling::Affine => 2 * c2,
            };
            let mut steps = Vec::with_capacity(cfg.steps);
            for k in 0..cfg.steps {
                let p = format!("level{l}.step{k}.");
                let an = b.actnorm(&format!("{p}actnorm"), c);
                let lu = match cfg.permutation {
                    Permutation::Reverse => None,
                    Permutation::Lu => Some(LuIdx {
                        perm: b.tensor(&format!("{p}invconv.perm"), &[c]),
                        lower: b.tensor(&format!("{p}invconv.lower"), &[c, c]),
                        upper: b.tensor(&format!("{p}invconv.upper"), &[c, c]),
                        log_s: b.tensor(&format!("{p}invconv.log_s"), &[c]),
                        sign_s: b.tensor(&format!("{p}invconv.sign_s"), &[c]),
                    }),
                };
                let w = cfg.width;
                let w1 = b.tensor(&format!("{p}coupling.w1"), &[c1, w]);
                let an1 = b.actnorm(&format!("{p}coupling.actnorm1"), w);
                let w2 = b.tensor(&format!("{p}coupling.w2"), &[w, w]);
                let an2 = b.actnorm(&format!("{p}coupling.actnorm2"), w);
                let w3 = b.tensor(&format!("{p}coupling.w3"), &[w, nout]);
                let b3 = b.tensor(&format!("{p}coupling.b3"), &[nout]);
                let logs3 = b.tensor(&format!("{p}coupling.logs3"), &[nout]);
                steps.push(StepArch {
                    c,
                    c1,
                    c2,
                    an,
                    lu,
                    nn: NnIdx {
                        nin: c1,
                        width: w,
                        nout,
                        w1,
                        an1,
                        w2,
                        an2,
                        w3,
                        b3,
                        logs3,
                    },
                });
            }
            let keep = if l + 1 == cfg.levels { c } else { c - c / 2 };
            levels.push(LevelArch { c, keep, steps });
            c = keep;
        }
        let mut out_perm = Vec::with_capacity(dim);
        for lv in &levels {
            out_perm.extend(lv.keep..lv.c);
        }
        out_perm.extend(0..levels.last().map_or(dim, |lv| lv.keep));
        Ok(Arch {
            dim,
            width: cfg.width,
            coupling: cfg.coupling,
            levels,
            tensors: b.tensors,
            n_params: b.offset,
            out_perm,
        })
    }

    /// Glow's initialisation before the data-dependent one: actnorms and the
    /// last layer of each coupling network zero, the first two layers
    /// N(0, 0.05^2), and an LU 1x1 convolution the LU factorisation of a
    /// random orthogonal matrix, all drawn from the seeded generator step by
    /// step.
    pub fn init_params(&self, rng: &mut Rng) -> Vec<f32> {
        let mut p = vec![0.0f32; self.n_params];
        for s in self.steps() {
            if let Some(lu) = s.lu {
                init_lu(&mut p, lu, s.c, rng);
            }
            let w = self.width;
            for off in [s.nn.w1..s.nn.w1 + s.nn.nin * w, s.nn.w2..s.nn.w2 + w * w] {
                for v in &mut p[off] {
                    *v = (0.05 * rng.normal()) as f32;
                }
            }
        }
        p
    }

    pub fn steps(&self) -> impl DoubleEndedIterator<Item = &StepArch> {
        self.levels.iter().flat_map(|l| l.steps.iter())
    }

    /// Name of the tensor holding parameter `index`.
    pub fn tensor_of(&self, index: usize) -> &str {
        self.tensors
            .iter()
            .find(|t| index >= t.offset && index < t.offset + t.len)
            .map_or("?", |t| t.name.as_str())
    }
}

/// A random orthogonal c x c matrix (row-major): modified Gram-Schmidt on
/// the columns of a Gaussian matrix, in f64.
fn random_orthogonal(c: usize, rng: &mut Rng) -> Vec<f64> {
    let mut q: Vec<f64> = (0..c * c).map(|_| rng.normal()).collect();
    for j in 0..c {
        for k in 0..j {
            let dot: f64 = (0..c).map(|i| q[i * c + j] * q[i * c + k]).sum();
            for i in 0..c {
                q[i * c + j] -= dot * q[i * c + k];
            }
        }
        let norm = (0..c).map(|i| q[i * c + j].powi(2)).sum::<f64>().sqrt();
        for i in 0..c {
            q[i * c + j] /= norm;
        }
    }
    q
}

/// In-place LU factorisation with partial pivoting of a c x c row-major
/// matrix: afterwards `A[piv[r]]` (original rows) = `(L U)[r]`, L unit lower
/// (strictly lower part stored), U upper (stored with its diagonal).
pub(crate) fn lu_in_place(a: &mut [f64], c: usize) -> Vec<usize> {
    let mut piv: Vec<usize> = (0..c).collect();
    for k in 0..c {
        let mut p = k;
        for i in k + 1..c {
            if a[i * c + k].abs() > a[p * c + k].abs() {
                p = i;
            }
        }
        if p != k {
            for j in 0..c {
                a.swap(k * c + j, p * c + j);
            }
            piv.swap(k, p);
        }
        let pivot = a[k * c + k];
        if pivot == 0.0 {
            continue;
        }
        for i in k + 1..c {
            let f = a[i * c + k] / pivot;
            a[i * c + k] = f;
            for j in k + 1..c {
                a[i * c + j] -= f * a[k * c + j];
            }
        }
    }
    piv
}

/// W0 = random orthogonal = P L U (Glow's LU initialisation).
fn init_lu(p: &mut [f32], lu: LuIdx, c: usize, rng: &mut Rng) {
    let mut a = random_orthogonal(c, rng);
    let piv = lu_in_place(&mut a, c);
    for j in 0..c {
        p[lu.perm + j] = piv[j] as f32;
        let d = a[j * c + j];
        p[lu.sign_s + j] = if d < 0.0 { -1.0 } else { 1.0 };
        p[lu.log_s + j] = d.abs().ln() as f32;
        for i in 0..c {
            if i > j {
                p[lu.lower + i * c + j] = a[i * c + j] as f32;
            } else if i < j {
                p[lu.upper + i * c + j] = a[i * c + j] as f32;
            }
        }
    }
}

fn max_levels(dim: usize) -> usize {
    let mut c = dim;
    let mut l = 0;
    while c >= 2 {
        l += 1;
        c -= c / 2;
        if c == 1 {
            break;
        }
    }
    l
}

struct Builder {
    tensors: Vec<TensorSlot>,
    offset: usize,
}

impl Builder {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> usize {
        let len = shape.iter().product();
        let offset = self.offset;
        self.tensors.push(TensorSlot {
            name: name.to_string(),
            shape: shape.to_vec(),
            offset,
            len,
        });
        self.offset += len;
        offset
    }

    fn actnorm(&mut self, name: &str, n: usize) -> ActnormIdx {
        let b = self.tensor(&format!("{name}.bias"), &[n]);
        let logs = self.tensor(&format!("{name}.logs"), &[n]);
        ActnormIdx { b, logs, n }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_counts_and_output_order() {
        let a = Arch::new(384, &FlowConfig::default()).unwrap();
        let cs: Vec<(usize, usize)> = a.levels.iter().map(|l| (l.c, l.keep)).collect();
        assert_eq!(cs, vec![(384, 192), (192, 96), (96, 96)]);
        assert_eq!(a.out_perm.len(), 384);
        assert_eq!(a.out_perm[0], 192);
        assert_eq!(a.out_perm[191], 383);
        assert_eq!(a.out_perm[192], 96);
        assert_eq!(a.out_perm[288], 0);
        let mut s = a.out_perm.clone();
        s.sort_unstable();
        assert_eq!(s, (0..384).collect::<Vec<_>>());
        let total: usize = a.tensors.iter().map(|t| t.len).sum();
        assert_eq!(total, a.n_params);

        // odd sizes are handled: 7 -> keep 4 -> keep 2
        let cfg = FlowConfig {
            levels: 3,
            ..FlowConfig::default()
        };
        let a = Arch::new(7, &cfg).unwrap();
        let cs: Vec<(usize, usize)> = a.levels.iter().map(|l| (l.c, l.keep)).collect();
        assert_eq!(cs, vec![(7, 4), (4, 2), (2, 2)]);

        // too many levels for the dimension is a clear error
        let cfg = FlowConfig {
            levels: 4,
            ..FlowConfig::default()
        };
        let e = Arch::new(4, &cfg).unwrap_err().to_string();
        assert!(e.contains("level 2 would have 1 channel"), "{e}");
        assert!(e.contains("at most 2"), "{e}");
        assert!(Arch::new(
            1,
            &FlowConfig {
                levels: 1,
                ..FlowConfig::default()
            }
        )
        .is_err());
    }

    #[test]
    fn lu_factorisation_reconstructs_the_matrix() {
        let mut rng = Rng::new(9);
        let c = 7;
        let w = random_orthogonal(c, &mut rng);
        for i in 0..c {
            for j in 0..c {
                let dot: f64 = (0..c).map(|k| w[k * c + i] * w[k * c + j]).sum();
                let e = if i == j { 1.0 } else { 0.0 };
                assert!((dot - e).abs() < 1e-12, "not orthogonal at ({i},{j})");
            }
        }
        let mut a = w.clone();
        let piv = lu_in_place(&mut a, c);
        assert_ne!(piv, (0..c).collect::<Vec<_>>(), "pivoting expected");
        for r in 0..c {
            for j in 0..c {
                let mut s = 0.0;
                for k in 0..=r.min(j) {
                    let l = if k == r { 1.0 } else { a[r * c + k] };
                    s += l * a[k * c + j];
                }
                assert!((s - w[piv[r] * c + j]).abs() < 1e-12, "({r},{j})");
            }
        }
        let logdet: f64 = (0..c).map(|j| a[j * c + j].abs().ln()).sum();
        assert!(logdet.abs() < 1e-12, "an orthogonal matrix has |det| 1");
    }
}
