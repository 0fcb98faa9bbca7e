//! Calibrator specs: what to fit, parsed from a short string such as
//! `whiten:k=256` or `flow:levels=3,steps=3`.
//!
//! Grammar (whitespace around tokens is ignored):
//!
//! ```text
//! spec    := kind [ ":" option { "," option } ]
//! kind    := "none" | "sn" | "whiten" | "natsv" | "sn+natsv" | "flow"
//!          | "softwhiten" | "auto"
//! option  := key "=" value
//! ```
//!
//! | kind       | options (default)                                                          |
//! |------------|----------------------------------------------------------------------------|
//! | `none`     | none                                                                       |
//! | `sn`       | none                                                                       |
//! | `whiten`   | `k` (all directions of non-zero variance)                                  |
//! | `natsv`    | `k` (required, >= 1)                                                       |
//! | `sn+natsv` | `k` (required, >= 1)                                                       |
//! | `flow`     | `levels` (3), `steps` (3), `width` (32), `epochs` (1), `lr` (1e-3),        |
//! |            | `batch` (32), `seed` (42), `coupling` (`additive`\|`affine`),              |
//! |            | `permutation` (`reverse`\|`lu`)                                           |
//! | `softwhiten` | `alpha` (0.5), `shrink` (0), `drop` (0), `blend` (0): see [`crate::SoftWhitening`] |
//! | `auto`     | none: decides from the fit data, see [`crate::Auto`]                       |

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{CalibError, Result};
use crate::softwhiten::SoftParams;

/// What to fit. Parse it from a string with [`str::parse`]; its `Display`
/// gives back a canonical string that parses to the same spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum CalibSpec {
    /// Identity.
    #[serde(rename = "none")]
    None,
    /// Per-dimension standardisation.
    #[serde(rename = "sn")]
    Sn,
    /// BERT-whitening, keeping at most `k` directions.
    #[serde(rename = "whiten")]
    Whiten {
        /// Number of leading directions to keep; `None` keeps the numerical rank.
        k: Option<usize>,
    },
    /// All-but-the-top: centre, then remove the top-`k` principal directions.
    #[serde(rename = "natsv")]
    Natsv {
        /// Number of principal directions to remove.
        k: usize,
    },
    /// `sn` followed by `natsv`.
    #[serde(rename = "sn+natsv")]
    SnNatsv {
        /// Number of principal directions to remove after standardisation.
        k: usize,
    },
    /// BERT-flow (Glow on the embedding seen as a 1x1 image).
    #[serde(rename = "flow")]
    Flow(FlowConfig),
    /// Soft whitening `U diag(s'^(-alpha/2))` with shrunk eigenvalues `s'`.
    #[serde(rename = "softwhiten")]
    SoftWhiten(SoftParams),
    /// Decides from the fit data how far to go, from identity to whitening.
    #[serde(rename = "auto")]
    Auto,
}

/// Coupling layer of a flow step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Coupling {
    /// `z2 += NN(z1)` (BERT-flow's choice; log-determinant 0).
    #[default]
    Additive,
    /// Glow's affine coupling: `z2 = (z2 + shift) * sigmoid(raw + 2)`.
    Affine,
}

/// Channel permutation of a flow step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permutation {
    /// Fixed channel reversal (BERT-flow's choice).
    #[default]
    Reverse,
    /// Glow's invertible 1x1 convolution, LU-parameterised (`W = P L (U +
    /// diag(sign(s) exp(log s)))`, orthogonal at initialisation). About ten
    /// times slower to train than `reverse` at d = 384.
    Lu,
}

/// Hyper-parameters of a flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowConfig {
    /// Number of levels L (>= 1).
    pub levels: usize,
    /// Steps K per level (>= 1).
    pub steps: usize,
    /// Hidden width of the coupling networks (>= 1).
    pub width: usize,
    /// Passes over the fit data (>= 1).
    pub epochs: usize,
    /// Adam learning rate (finite, > 0).
    pub lr: f64,
    /// Mini-batch size (>= 2; the first batch initialises the actnorms).
    pub batch: usize,
    /// Seed for weight initialisation and shuffling.
    pub seed: u64,
    /// Coupling layer.
    pub coupling: Coupling,
    /// Channel permutation.
    pub permutation: Permutation,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            levels: 3,
            steps: 3,
            width: 32,
            epochs: 1,
            lr: 1e-3,
            batch: 32,
            seed: 42,
            coupling: Coupling::Additive,
            permutation: Permutation::Reverse,
        }
    }
}

const VALID_KINDS: &str = "none, sn, whiten[:k=N], natsv:k=N, sn+natsv:k=N, softwhiten[:alpha=A,shrink=L,drop=K,blend=B], auto, \
     flow[:levels=L,steps=K,width=W,epochs=E,lr=X,batch=B,seed=S,coupling=additive|affine,permutation=reverse|lu]";
const FLOW_KEYS: &[&str] = &[
    "levels",
    "steps",
    "width",
    "epochs",
    "lr",
    "batch",
    "seed",
    "coupling",
    "permutation",
];

impl CalibSpec {
    /// The kind's name as used in specs and files.
    pub fn kind(&self) -> &'static str {
        match self {
            CalibSpec::None => "none",
            CalibSpec::Sn => "sn",
            CalibSpec::Whiten { .. } => "whiten",
            CalibSpec::Natsv { .. } => "natsv",
            CalibSpec::SnNatsv { .. } => "sn+natsv",
            CalibSpec::Flow(_) => "flow",
            CalibSpec::SoftWhiten { .. } => "softwhiten",
            CalibSpec::Auto => "auto",
        }
    }

    /// Checks the values (also done by the parser; useful for specs built
    /// in code or deserialized).
    pub fn validate(&self) -> Result<()> {
        let err = |reason: String| CalibError::Spec {
            spec: self.to_string(),
            reason,
        };
        match self {
            CalibSpec::None | CalibSpec::Sn | CalibSpec::Auto => Ok(()),
            CalibSpec::SoftWhiten(p) => p.check().map_err(err),
            CalibSpec::Whiten { k: Some(0) } => Err(err("k must be >= 1".into())),
            CalibSpec::Whiten { .. } => Ok(()),
            CalibSpec::Natsv { k } | CalibSpec::SnNatsv { k } => {
                if *k == 0 {
                    Err(err("k must be >= 1".into()))
                } else {
                    Ok(())
                }
            }
            CalibSpec::Flow(c) => {
                let checks: [(&str, bool, &str); 6] = [
                    (
                        "levels",
                        (1..=16).contains(&c.levels),
                        "an integer in 1..=16",
                    ),
                    ("steps", (1..=64).contains(&c.steps), "an integer in 1..=64"),
                    (
                        "width",
                        (1..=4096).contains(&c.width),
                        "an integer in 1..=4096",
                    ),
                    ("epochs", c.epochs >= 1, "an integer >= 1"),
                    ("lr", c.lr.is_finite() && c.lr > 0.0, "a finite number > 0"),
                    ("batch", c.batch >= 2, "an integer >= 2"),
                ];
                for (key, ok, what) in checks {
                    if !ok {
                        return Err(err(format!("{key} must be {what}")));
                    }
                }
                Ok(())
            }
        }
    }
}

fn parse_usize(spec: &str, key: &str, v: &str) -> Result<usize> {
    v.parse::<usize>().map_err(|_| CalibError::Spec {
        spec: spec.to_string(),
        reason: format!("{key}={v:?}: expected a non-negative integer"),
    })
}

impl FromStr for CalibSpec {
    type Err = CalibError;

    fn from_str(s: &str) -> Result<Self> {
        let spec_str = s.trim();
        let err = |reason: String| CalibError::Spec {
            spec: s.to_string(),
            reason,
        };
        if spec_str.is_empty() {
            return Err(err(format!("empty spec; valid kinds: {VALID_KINDS}")));
        }
        let (kind, opts) = match spec_str.split_once(':') {
            Some((k, o)) => (k.trim(), Some(o)),
            None => (spec_str, None),
        };
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        if let Some(opts) = opts {
            for item in opts.split(',') {
                let item = item.trim();
                if item.is_empty() {
                    return Err(err("empty option (stray ',' or ':')".into()));
                }
                let Some((key, value)) = item.split_once('=') else {
                    return Err(err(format!("option {item:?} is not of the form key=value")));
                };
                let (key, value) = (key.trim(), value.trim());
                if key.is_empty() || value.is_empty() {
                    return Err(err(format!("option {item:?} has an empty key or value")));
                }
                if pairs.iter().any(|(k, _)| *k == key) {
                    return Err(err(format!("option {key:?} given twice")));
                }
                pairs.push((key, value));
            }
        }
        let allowed: &[&str] = match kind {
            "none" | "sn" | "auto" => &[],
            "softwhiten" => &["alpha", "shrink", "drop", "blend"],
            "whiten" | "natsv" | "sn+natsv" => &["k"],
            "flow" => FLOW_KEYS,
            other => {
                return Err(err(format!(
                    "unknown kind {other:?}; valid kinds: {VALID_KINDS}"
                )))
            }
        };
        for (key, _) in &pairs {
            if !allowed.contains(key) {
                let valid = if allowed.is_empty() {
                    format!("{kind} takes no options")
                } else {
                    format!("valid options for {kind}: {}", allowed.join(", "))
                };
                return Err(err(format!("unknown option {key:?}; {valid}")));
            }
        }
        let get = |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);

        let spec = match kind {
            "none" => CalibSpec::None,
            "sn" => CalibSpec::Sn,
            "auto" => CalibSpec::Auto,
            "softwhiten" => {
                let num = |key: &str, default: f64| -> Result<f64> {
                    get(key).map_or(Ok(default), |v| {
                        v.parse::<f64>()
                            .map_err(|_| err(format!("{key}={v:?}: expected a number")))
                    })
                };
                CalibSpec::SoftWhiten(SoftParams {
                    alpha: num("alpha", 0.5)?,
                    shrink: num("shrink", 0.0)?,
                    drop: get("drop").map_or(Ok(0), |v| parse_usize(s, "drop", v))?,
                    blend: num("blend", 0.0)?,
                })
            }
            "whiten" => CalibSpec::Whiten {
                k: get("k").map(|v| parse_usize(s, "k", v)).transpose()?,
            },
            "natsv" | "sn+natsv" => {
                let Some(v) = get("k") else {
                    return Err(err(format!(
                        "{kind} needs the number of directions to remove, e.g. {kind}:k=5"
                    )));
                };
                let k = parse_usize(s, "k", v)?;
                if kind == "natsv" {
                    CalibSpec::Natsv { k }
                } else {
                    CalibSpec::SnNatsv { k }
                }
            }
            _ => {
                let mut c = FlowConfig::default();
                for (key, v) in &pairs {
                    match *key {
                        "levels" => c.levels = parse_usize(s, key, v)?,
                        "steps" => c.steps = parse_usize(s, key, v)?,
                        "width" => c.width = parse_usize(s, key, v)?,
                        "epochs" => c.epochs = parse_usize(s, key, v)?,
                        "batch" => c.batch = parse_usize(s, key, v)?,
                        "seed" => {
                            c.seed = v.parse::<u64>().map_err(|_| {
                                err(format!("seed={v:?}: expected an unsigned 64-bit integer"))
                            })?
                        }
                        "lr" => {
                            c.lr = v
                                .parse::<f64>()
                                .map_err(|_| err(format!("lr={v:?}: expected a number")))?
                        }
                        "coupling" => {
                            c.coupling = match *v {
                                "additive" => Coupling::Additive,
                                "affine" => Coupling::Affine,
                                _ => {
                                    return Err(err(format!(
                                        "coupling={v:?}: valid values: additive, affine"
                                    )))
                                }
                            }
                        }
                        "permutation" => {
                            c.permutation = match *v {
                                "reverse" => Permutation::Reverse,
                                "lu" => Permutation::Lu,
                                _ => {
                                    return Err(err(format!(
                                        "permutation={v:?}: valid values: reverse, lu"
                                    )))
                                }
                            }
                        }
                        _ => unreachable!("keys were checked against FLOW_KEYS"),
                    }
                }
                CalibSpec::Flow(c)
            }
        };
        spec.validate().map_err(|e| match e {
            CalibError::Spec { reason, .. } => err(reason),
            other => other,
        })?;
        Ok(spec)
    }
}

impl fmt::Display for Coupling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Coupling::Additive => "additive",
            Coupling::Affine => "affine",
        })
    }
}

impl fmt::Display for Permutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Permutation::Reverse => "reverse",
            Permutation::Lu => "lu",
        })
    }
}

impl fmt::Display for CalibSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CalibSpec::None | CalibSpec::Sn | CalibSpec::Auto | CalibSpec::Whiten { k: None } => {
                f.write_str(self.kind())
            }
            CalibSpec::Whiten { k: Some(k) } => write!(f, "whiten:k={k}"),
            CalibSpec::Natsv { k } => write!(f, "natsv:k={k}"),
            CalibSpec::SnNatsv { k } => write!(f, "sn+natsv:k={k}"),
            CalibSpec::SoftWhiten(p) => {
                write!(f, "softwhiten:alpha={},shrink={}", p.alpha, p.shrink)?;
                if p.drop > 0 {
                    write!(f, ",drop={}", p.drop)?;
                }
                if p.blend > 0.0 {
                    write!(f, ",blend={}", p.blend)?;
                }
                Ok(())
            }
            CalibSpec::Flow(c) => write!(
                f,
                "flow:levels={},steps={},width={},epochs={},lr={:e},batch={},seed={},coupling={},permutation={}",
                c.levels, c.steps, c.width, c.epochs, c.lr, c.batch, c.seed, c.coupling, c.permutation
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<CalibSpec> {
        s.parse()
    }

    fn reason(s: &str) -> String {
        match parse(s) {
            Err(CalibError::Spec { reason, .. }) => reason,
            other => panic!("{s:?} should be a spec error, got {other:?}"),
        }
    }

    #[test]
    fn valid_specs_parse() {
        assert_eq!(parse("none").unwrap(), CalibSpec::None);
        assert_eq!(parse(" sn ").unwrap(), CalibSpec::Sn);
        assert_eq!(parse("whiten").unwrap(), CalibSpec::Whiten { k: None });
        assert_eq!(
            parse("whiten:k=256").unwrap(),
            CalibSpec::Whiten { k: Some(256) }
        );
        assert_eq!(parse("natsv:k=5").unwrap(), CalibSpec::Natsv { k: 5 });
        assert_eq!(parse("sn+natsv:k=5").unwrap(), CalibSpec::SnNatsv { k: 5 });
        assert_eq!(
            parse("flow").unwrap(),
            CalibSpec::Flow(FlowConfig::default())
        );
        let f = parse(
            "flow:levels=2, steps=4,width=16,epochs=3,lr=5e-4,batch=64,seed=7,coupling=affine,permutation=reverse",
        )
        .unwrap();
        assert_eq!(
            f,
            CalibSpec::Flow(FlowConfig {
                levels: 2,
                steps: 4,
                width: 16,
                epochs: 3,
                lr: 5e-4,
                batch: 64,
                seed: 7,
                coupling: Coupling::Affine,
                permutation: Permutation::Reverse,
            })
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "none",
            "sn",
            "whiten",
            "whiten:k=3",
            "natsv:k=5",
            "sn+natsv:k=1",
            "flow",
            "flow:lr=0.0003,coupling=affine,seed=18446744073709551615",
            "flow:permutation=lu,levels=2",
        ] {
            let spec = parse(s).unwrap();
            let again = parse(&spec.to_string()).unwrap();
            assert_eq!(spec, again, "{s} -> {spec}");
            let json = serde_json::to_string(&spec).unwrap();
            let back: CalibSpec = serde_json::from_str(&json).unwrap();
            assert_eq!(spec, back, "{json}");
        }
        let json = serde_json::to_string(&parse("sn+natsv:k=2").unwrap()).unwrap();
        assert_eq!(json, r#"{"kind":"sn+natsv","k":2}"#);
    }

    #[test]
    fn invalid_specs_explain_what_is_valid() {
        assert!(reason("").contains("valid kinds"));
        assert!(reason("pca").contains("unknown kind \"pca\""));
        assert!(reason("pca").contains("whiten"));
        assert!(reason("sn:k=3").contains("sn takes no options"));
        assert!(reason("none:x=1").contains("takes no options"));
        assert!(reason("whiten:q=3").contains("valid options for whiten: k"));
        assert!(reason("whiten:k=0").contains("k must be >= 1"));
        assert!(reason("whiten:k=-1").contains("non-negative integer"));
        assert!(reason("whiten:k=abc").contains("non-negative integer"));
        assert!(reason("whiten:k").contains("key=value"));
        assert!(reason("whiten:k=").contains("empty"));
        assert!(reason("whiten:").contains("empty option"));
        assert!(reason("whiten:k=2,").contains("empty option"));
        assert!(reason("whiten:k=2,k=3").contains("twice"));
        assert!(reason("natsv").contains("natsv:k=5"));
        assert!(reason("natsv:k=0").contains("k must be >= 1"));
        assert!(reason("sn+natsv").contains("sn+natsv:k=5"));
        assert!(reason("flow:depth=3").contains("valid options for flow: levels, steps"));
        assert!(reason("flow:levels=0").contains("levels must be"));
        assert!(reason("flow:steps=0").contains("steps must be"));
        assert!(reason("flow:width=0").contains("width must be"));
        assert!(reason("flow:epochs=0").contains("epochs must be"));
        assert!(reason("flow:batch=1").contains("batch must be"));
        assert!(reason("flow:lr=0").contains("lr must be"));
        assert!(reason("flow:lr=nan").contains("lr must be"));
        assert!(reason("flow:lr=fast").contains("expected a number"));
        assert!(reason("flow:seed=-3").contains("unsigned"));
        assert!(reason("flow:coupling=spline").contains("valid values: additive, affine"));
        assert!(reason("flow:permutation=shuffle").contains("valid values: reverse, lu"));
    }
}
