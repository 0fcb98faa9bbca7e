//! Calibrator specs: what to fit, parsed from a short string such as
//! `whiten:k=256` or `flow:levels=3,steps=3`.
//!
//! Grammar (whitespace around tokens is ignored):
//!
//! ```text
//! spec    := kind [ ":" option { "," option } ]
//! option  := key "=" value
//! ```
//!
//! The kinds, their options, defaults and ranges are those of the
//! [registry](crate::registry) (`bertflow kinds` lists them). A
//! [`CalibSpec`] is checked against it once, when it is built (parsed,
//! deserialized or made with [`CalibSpec::new`]): every value a spec holds is
//! in range, and its fields are read through accessors.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::error::{CalibError, Result};
use crate::registry::{self, Default as ParamDefault, Kind, Param, Show, Value};

/// What to fit: a kind of the [registry](crate::registry) and a value for
/// each of its parameters, all checked when the spec is built. Parse it from
/// a string with [`str::parse`]; its `Display` gives back a canonical string
/// that parses to the same spec, its serde form is
/// `{"kind": "whiten", "k": null}`.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibSpec {
    kind: &'static Kind,
    /// One per parameter of `kind`, in its order; `None`: absent.
    values: Vec<Option<Value>>,
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

/// Hyper-parameters of a flow (the `flow` spec's values; its file header).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowConfig {
    pub(crate) levels: usize,
    pub(crate) steps: usize,
    pub(crate) width: usize,
    pub(crate) epochs: usize,
    pub(crate) lr: f64,
    pub(crate) batch: usize,
    pub(crate) seed: u64,
    pub(crate) coupling: Coupling,
    pub(crate) permutation: Permutation,
}

impl Default for FlowConfig {
    /// The registry's defaults.
    fn default() -> Self {
        CalibSpec::of("flow")
            .ok()
            .and_then(|s| s.flow_config())
            .expect("the flow's defaults are valid")
    }
}

impl FlowConfig {
    /// Number of levels L.
    pub fn levels(&self) -> usize {
        self.levels
    }
    /// Steps K per level.
    pub fn steps(&self) -> usize {
        self.steps
    }
    /// Hidden width of the coupling networks.
    pub fn width(&self) -> usize {
        self.width
    }
    /// Passes over the fit data.
    pub fn epochs(&self) -> usize {
        self.epochs
    }
    /// Adam learning rate.
    pub fn lr(&self) -> f64 {
        self.lr
    }
    /// Mini-batch size.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// Seed of the weight initialisation and the shuffling.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Coupling layer.
    pub fn coupling(&self) -> Coupling {
        self.coupling
    }
    /// Channel permutation.
    pub fn permutation(&self) -> Permutation {
        self.permutation
    }

    /// The values as a `flow` spec would hold them.
    pub(crate) fn values(&self) -> [(&'static str, Value); 9] {
        let int = |v: usize| Value::Int(v as u64);
        [
            ("levels", int(self.levels)),
            ("steps", int(self.steps)),
            ("width", int(self.width)),
            ("epochs", int(self.epochs)),
            ("lr", Value::Float(self.lr)),
            ("batch", int(self.batch)),
            ("seed", Value::Int(self.seed)),
            ("coupling", Value::Choice(self.coupling.name())),
            ("permutation", Value::Choice(self.permutation.name())),
        ]
    }
}

/// The options of a soft whitening (see [`crate::SoftWhitening`]): what
/// `softwhiten:alpha=A,shrink=L,drop=K,blend=B` holds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SoftParams {
    pub(crate) alpha: f64,
    pub(crate) shrink: f64,
    #[serde(default)]
    pub(crate) drop: usize,
    #[serde(default)]
    pub(crate) blend: f64,
}

impl SoftParams {
    /// Whitening strength in [0, 1] (0 centres, 1 whitens).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
    /// Shrinkage of the covariance towards its mean eigenvalue, in [0, 1].
    pub fn shrink(&self) -> f64 {
        self.shrink
    }
    /// Leading principal directions removed first (all-but-the-top).
    pub fn drop(&self) -> usize {
        self.drop
    }
    /// Weight of the raw unit direction mixed into the output, in [0, 1).
    pub fn blend(&self) -> f64 {
        self.blend
    }

    pub(crate) fn values(&self) -> [(&'static str, Value); 4] {
        [
            ("alpha", Value::Float(self.alpha)),
            ("shrink", Value::Float(self.shrink)),
            ("drop", Value::Int(self.drop as u64)),
            ("blend", Value::Float(self.blend)),
        ]
    }
}

impl Coupling {
    fn name(self) -> &'static str {
        match self {
            Coupling::Additive => "additive",
            Coupling::Affine => "affine",
        }
    }
}

impl Permutation {
    fn name(self) -> &'static str {
        match self {
            Permutation::Reverse => "reverse",
            Permutation::Lu => "lu",
        }
    }
}

fn unknown_option(kind: &Kind, key: &str) -> String {
    let valid = if kind.params.is_empty() {
        format!("{} takes no options", kind.name)
    } else {
        let names: Vec<&str> = kind.params.iter().map(|p| p.name).collect();
        format!("valid options for {}: {}", kind.name, names.join(", "))
    };
    format!("unknown option {key:?}; {valid}")
}

/// `kind:key=value,...` of raw values (for messages about values that are
/// not a valid spec).
fn render(kind: &Kind, values: &[(&str, Value)]) -> String {
    let opts: Vec<String> = values
        .iter()
        .map(|(k, v)| match kind.param(k) {
            Some(p) => format!("{k}={}", p.format(*v)),
            None => format!("{k}={}", registry::display_value(*v)),
        })
        .collect();
    if opts.is_empty() {
        kind.name.to_string()
    } else {
        format!("{}:{}", kind.name, opts.join(","))
    }
}

impl CalibSpec {
    /// The spec of kind `kind` with the `given` values (the others at their
    /// defaults), checked against the registry: an unknown kind or key, a
    /// value of the wrong type or out of range, or a required value missing
    /// is an error naming what is valid.
    pub fn new(kind: &str, given: &[(&str, Value)]) -> Result<Self> {
        let Some(k) = registry::kind(kind) else {
            return Err(CalibError::Spec {
                spec: kind.to_string(),
                reason: format!(
                    "unknown kind {kind:?}; valid kinds: {}",
                    registry::synopsis()
                ),
            });
        };
        Self::build(k, given).map_err(|reason| CalibError::Spec {
            spec: render(k, given),
            reason,
        })
    }

    /// The spec of kind `kind` with every value at its default (an error for
    /// a kind with a required value).
    pub fn of(kind: &str) -> Result<Self> {
        Self::new(kind, &[])
    }

    /// `none`: the identity.
    pub fn none() -> Self {
        Self::of("none").expect("none is registered")
    }

    /// `auto`.
    pub fn auto() -> Self {
        Self::of("auto").expect("auto is registered")
    }

    /// The spec of a flow with these hyper-parameters (checked).
    pub fn from_flow(cfg: &FlowConfig) -> Result<Self> {
        Self::new("flow", &cfg.values())
    }

    /// The spec of a soft whitening with these options (checked).
    pub fn from_soft(p: &SoftParams) -> Result<Self> {
        Self::new("softwhiten", &p.values())
    }

    /// The one place values are checked: keys known, each value in range,
    /// required ones given, the others at their defaults.
    fn build(kind: &'static Kind, given: &[(&str, Value)]) -> std::result::Result<Self, String> {
        for (i, (key, _)) in given.iter().enumerate() {
            if kind.param(key).is_none() {
                return Err(unknown_option(kind, key));
            }
            if given[..i].iter().any(|(k, _)| k == key) {
                return Err(format!("option {key:?} given twice"));
            }
        }
        let mut values = Vec::with_capacity(kind.params.len());
        for p in kind.params {
            let v = match given.iter().find(|(k, _)| *k == p.name) {
                Some((_, v)) => Some(*v),
                None => match p.default {
                    ParamDefault::Value(v) => Some(v),
                    ParamDefault::Absent(_) => None,
                    ParamDefault::Required { example } => {
                        return Err(format!(
                            "{kind} needs {key} ({doc}), e.g. {kind}:{key}={ex}",
                            kind = kind.name,
                            key = p.name,
                            doc = p.doc,
                            ex = p.format(example)
                        ))
                    }
                },
            };
            if let Some(v) = v {
                p.check(v)?;
            }
            values.push(v);
        }
        Ok(CalibSpec { kind, values })
    }

    /// The spec a fitted calibrator records, as its header holds it. Loading
    /// checks the values a transform depends on; this one does not fail.
    pub(crate) fn fitted(kind: &'static str, given: &[(&str, Value)]) -> Self {
        let kind = registry::kind(kind).expect("a registered kind");
        let values = kind
            .params
            .iter()
            .map(|p| {
                given
                    .iter()
                    .find(|(k, _)| *k == p.name)
                    .map(|(_, v)| *v)
                    .or_else(|| p.default_value())
            })
            .collect();
        CalibSpec { kind, values }
    }

    /// The kind's name as used in specs and files.
    pub fn kind(&self) -> &'static str {
        self.kind.name
    }

    /// The kind's registry entry.
    pub fn info(&self) -> &'static Kind {
        self.kind
    }

    /// Whether this is `none`, the identity.
    pub fn is_none(&self) -> bool {
        self.kind.name == "none"
    }

    /// Whether the kind is fitted from moment statistics alone (everything
    /// but `flow` and `auto`).
    pub fn from_moments(&self) -> bool {
        self.kind.moments
    }

    /// Every parameter with its value (`None`: absent), in canonical order.
    pub fn values(&self) -> impl Iterator<Item = (&'static Param, Option<Value>)> + '_ {
        self.kind.params.iter().zip(self.values.iter().copied())
    }

    /// The value of parameter `name` (`None`: no such parameter, or absent).
    pub fn get(&self, name: &str) -> Option<Value> {
        self.values()
            .find(|(p, _)| p.name == name)
            .and_then(|(_, v)| v)
    }

    /// An integer parameter's value.
    pub fn int(&self, name: &str) -> Option<u64> {
        match self.get(name) {
            Some(Value::Int(i)) => Some(i),
            _ => None,
        }
    }

    /// A real parameter's value.
    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(Value::Float(x)) => Some(x),
            _ => None,
        }
    }

    /// A choice parameter's value.
    pub fn choice(&self, name: &str) -> Option<&'static str> {
        match self.get(name) {
            Some(Value::Choice(c)) => Some(c),
            _ => None,
        }
    }

    /// `k` (whiten's directions kept; natsv's and sn+natsv's removed).
    pub fn k(&self) -> Option<usize> {
        self.usize("k")
    }

    fn usize(&self, name: &str) -> Option<usize> {
        self.int(name)
            .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
    }

    /// The seed of a kind that has one (the flow's).
    pub fn seed(&self) -> Option<u64> {
        self.int("seed")
    }

    /// A flow's hyper-parameters (`None` for other kinds).
    pub fn flow_config(&self) -> Option<FlowConfig> {
        if self.kind.name != "flow" {
            return None;
        }
        let n = |name| self.usize(name).unwrap_or_default();
        Some(FlowConfig {
            levels: n("levels"),
            steps: n("steps"),
            width: n("width"),
            epochs: n("epochs"),
            lr: self.float("lr").unwrap_or_default(),
            batch: n("batch"),
            seed: self.seed().unwrap_or_default(),
            coupling: match self.choice("coupling") {
                Some("affine") => Coupling::Affine,
                _ => Coupling::Additive,
            },
            permutation: match self.choice("permutation") {
                Some("lu") => Permutation::Lu,
                _ => Permutation::Reverse,
            },
        })
    }

    /// A soft whitening's options (`None` for other kinds).
    pub fn soft_params(&self) -> Option<SoftParams> {
        if self.kind.name != "softwhiten" {
            return None;
        }
        Some(SoftParams {
            alpha: self.float("alpha").unwrap_or_default(),
            shrink: self.float("shrink").unwrap_or_default(),
            drop: self.usize("drop").unwrap_or_default(),
            blend: self.float("blend").unwrap_or_default(),
        })
    }
}

impl FromStr for CalibSpec {
    type Err = CalibError;

    fn from_str(s: &str) -> Result<Self> {
        let spec_str = s.trim();
        let err = |reason: String| CalibError::Spec {
            spec: s.to_string(),
            reason,
        };
        let valid_kinds = || registry::synopsis();
        if spec_str.is_empty() {
            return Err(err(format!("empty spec; valid kinds: {}", valid_kinds())));
        }
        let (name, opts) = match spec_str.split_once(':') {
            Some((k, o)) => (k.trim(), Some(o)),
            None => (spec_str, None),
        };
        let Some(kind) = registry::kind(name) else {
            return Err(err(format!(
                "unknown kind {name:?}; valid kinds: {}",
                valid_kinds()
            )));
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
        let mut params = Vec::with_capacity(pairs.len());
        for (key, value) in &pairs {
            match kind.param(key) {
                Some(p) => params.push((p, *value)),
                None => return Err(err(unknown_option(kind, key))),
            }
        }
        let given = params
            .into_iter()
            .map(|(p, v)| p.parse(v).map(|v| (p.name, v)))
            .collect::<std::result::Result<Vec<_>, String>>()
            .map_err(err)?;
        Self::build(kind, &given).map_err(err)
    }
}

impl fmt::Display for Coupling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Permutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for CalibSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name)?;
        let mut sep = ':';
        for (p, v) in self.values() {
            let Some(v) = v else { continue };
            if p.show == Show::UnlessDefault && p.default_value() == Some(v) {
                continue;
            }
            write!(f, "{sep}{}={}", p.name, p.format(v))?;
            sep = ',';
        }
        Ok(())
    }
}

impl Serialize for CalibSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1 + self.values.len()))?;
        m.serialize_entry("kind", self.kind.name)?;
        for (p, v) in self.values() {
            m.serialize_entry(p.name, &v.map(registry::value_json))?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for CalibSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        let map = Map::<String, Json>::deserialize(d)?;
        let kind = map
            .get("kind")
            .and_then(Json::as_str)
            .ok_or_else(|| D::Error::custom("a calibrator spec needs a \"kind\" string"))?;
        let info = registry::kind(kind).ok_or_else(|| {
            D::Error::custom(format!(
                "unknown kind {kind:?}; valid kinds: {}",
                registry::names()
            ))
        })?;
        let mut given: Vec<(&str, Value)> = Vec::new();
        for (key, v) in map.iter().filter(|(k, _)| *k != "kind") {
            let Some(p) = info.param(key) else {
                return Err(D::Error::custom(unknown_option(info, key)));
            };
            let value = match (p.ty, v) {
                (_, Json::Null) => continue,
                (registry::ParamType::Int { .. }, v) => v.as_u64().map(Value::Int),
                (registry::ParamType::Float { .. }, v) => v.as_f64().map(Value::Float),
                (registry::ParamType::Choice(_), Json::String(s)) => p.parse(s).ok(),
                _ => None,
            };
            let value = value.ok_or_else(|| {
                D::Error::custom(format!("{key}: expected {}, got {v}", p.range()))
            })?;
            given.push((key, value));
        }
        CalibSpec::new(kind, &given).map_err(D::Error::custom)
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
