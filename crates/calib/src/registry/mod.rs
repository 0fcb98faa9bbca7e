//! The registry of calibrator kinds: for each kind its name, a one-line doc
//! and its parameters (type, default, range, doc). It is the one place these
//! are written: the spec parser ([`crate::CalibSpec`]) checks every value
//! against it, the `bertflow` command prints its help and `bertflow kinds`
//! from it, and the Python package builds its scikit-learn classes from
//! [`to_json`].
//!
//! # Adding a kind
//!
//! 1. One entry in [`KINDS`] (`registry/kinds.rs`): name, doc, whether it fits from moment
//!    statistics, and its parameters, e.g.
//!
//!    ```text
//!    Kind {
//!        name: "shrinkwhiten",
//!        doc: "whitening of a covariance shrunk towards its mean eigenvalue",
//!        moments: true,
//!        params: &[Param {
//!            name: "shrink",
//!            ty: ParamType::Float { min: 0.0, max: 1.0, min_open: false, max_open: false },
//!            default: Default::Value(Value::Float(0.1)),
//!            show: Show::Always,
//!            doc: "shrinkage towards the mean eigenvalue",
//!        }],
//!    },
//!    ```
//!
//! 2. Its fit: an arm in `fit.rs` (`fit_rows`, and `fit_moments` when
//!    `moments` is true) building a [`crate::Fitted`] variant from the spec's
//!    values (`spec.float("shrink")`), and that variant's transform and file
//!    tensors.
//!
//! The parser, `Display`, serde form, `bertflow kinds`, the CLI's help and
//! the Python class (a subclass of `bertflow.Calibrator` with `_kind` set)
//! follow from the entry.

use serde_json::{json, Value as Json};

/// A parameter's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// An integer parameter.
    Int(u64),
    /// A real-valued parameter.
    Float(f64),
    /// One of a parameter's named choices.
    Choice(&'static str),
}

/// A parameter's type and range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamType {
    /// An integer in `min..=max`.
    Int {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
    },
    /// A finite number between `min` and `max` (each bound open or closed;
    /// an infinite bound means unbounded on that side).
    Float {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
        /// `min` itself is excluded.
        min_open: bool,
        /// `max` itself is excluded.
        max_open: bool,
    },
    /// One of these names.
    Choice(&'static [&'static str]),
}

/// A parameter's default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Default {
    /// This value.
    Value(Value),
    /// Optional: no value, meaning what the string says.
    Absent(&'static str),
    /// The spec must give it; `example` is a typical value (the Python
    /// class's constructor default).
    Required {
        /// A typical value.
        example: Value,
    },
}

/// How a spec's canonical string (`Display`) writes a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// Always.
    Always,
    /// Only when it differs from the default.
    UnlessDefault,
    /// Always, a number in scientific notation (`1e-3`).
    Exp,
}

/// One parameter of a kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    /// Its key in a spec (`k` in `whiten:k=256`).
    pub name: &'static str,
    /// Type and range.
    pub ty: ParamType,
    /// Default.
    pub default: Default,
    /// How the canonical spec string writes it.
    pub show: Show,
    /// One line.
    pub doc: &'static str,
}

/// One calibrator kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kind {
    /// Its name in specs and files.
    pub name: &'static str,
    /// One line.
    pub doc: &'static str,
    /// Fitted from moment statistics alone (streamed, mergeable); the others
    /// need the rows themselves.
    pub moments: bool,
    /// Its parameters, in canonical order.
    pub params: &'static [Param],
}

mod kinds;

pub use kinds::KINDS;

/// The kind named `name`.
pub fn kind(name: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.name == name)
}

/// The kinds' names, comma-separated.
pub fn names() -> String {
    KINDS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

impl Kind {
    /// The parameter named `name`.
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The kind's grammar: `whiten[:k=N]`, `natsv:k=N`, `flow[:levels=N,...]`.
    pub fn synopsis(&self) -> String {
        if self.params.is_empty() {
            return self.name.to_string();
        }
        let opts: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("{}={}", p.name, p.placeholder()))
            .collect();
        let required = self
            .params
            .iter()
            .any(|p| matches!(p.default, Default::Required { .. }));
        if required {
            format!("{}:{}", self.name, opts.join(","))
        } else {
            format!("{}[:{}]", self.name, opts.join(","))
        }
    }
}

impl Param {
    /// Checks a value's type and range: `Err` says what the value must be
    /// (the range included).
    pub fn check(&self, v: Value) -> Result<(), String> {
        let ok = match (self.ty, v) {
            (ParamType::Int { min, max }, Value::Int(i)) => (min..=max).contains(&i),
            (
                ParamType::Float {
                    min,
                    max,
                    min_open,
                    max_open,
                },
                Value::Float(x),
            ) => {
                x.is_finite()
                    && if min_open { x > min } else { x >= min }
                    && if max_open { x < max } else { x <= max }
            }
            (ParamType::Choice(names), Value::Choice(c)) => names.contains(&c),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{} must be {}, got {}",
                self.name,
                self.range(),
                display_value(v)
            ))
        }
    }

    /// Parses a value written in a spec (type only; see [`Param::check`]).
    pub fn parse(&self, s: &str) -> Result<Value, String> {
        let name = self.name;
        match self.ty {
            ParamType::Int { .. } => s.parse::<u64>().map(Value::Int).map_err(|_| {
                format!("{name}={s:?}: expected a non-negative integer (unsigned 64-bit)")
            }),
            ParamType::Float { .. } => s
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| format!("{name}={s:?}: expected a number")),
            ParamType::Choice(names) => names
                .iter()
                .find(|n| **n == s)
                .map(|n| Value::Choice(n))
                .ok_or_else(|| format!("{name}={s:?}: valid values: {}", names.join(", "))),
        }
    }

    /// What a value must be, e.g. `>= 1`, `an integer in 1..=16`, `a number
    /// in [0, 1)`, `a finite number > 0`, `one of additive, affine`.
    pub fn range(&self) -> String {
        match self.ty {
            ParamType::Int { min, max } if max == u64::MAX => {
                if min == 0 {
                    "a non-negative integer".into()
                } else {
                    format!(">= {min}")
                }
            }
            ParamType::Int { min, max } => format!("an integer in {min}..={max}"),
            ParamType::Float {
                min,
                max,
                min_open,
                max_open,
            } => match (min.is_finite(), max.is_finite()) {
                (true, true) => format!(
                    "a number in {}{min}, {max}{}",
                    if min_open { '(' } else { '[' },
                    if max_open { ')' } else { ']' }
                ),
                (true, false) => format!(
                    "a finite number {} {min}",
                    if min_open { ">" } else { ">=" }
                ),
                (false, true) => format!(
                    "a finite number {} {max}",
                    if max_open { "<" } else { "<=" }
                ),
                (false, false) => "a finite number".into(),
            },
            ParamType::Choice(names) => format!("one of {}", names.join(", ")),
        }
    }

    /// Its default value, if it has one.
    pub fn default_value(&self) -> Option<Value> {
        match self.default {
            Default::Value(v) => Some(v),
            _ => None,
        }
    }

    fn placeholder(&self) -> String {
        match self.ty {
            ParamType::Int { .. } => "N".into(),
            ParamType::Float { .. } => "X".into(),
            ParamType::Choice(names) => names.join("|"),
        }
    }

    /// The value as the canonical spec string writes it.
    pub(crate) fn format(&self, v: Value) -> String {
        match (self.show, v) {
            (Show::Exp, Value::Float(x)) => format!("{x:e}"),
            _ => display_value(v),
        }
    }

    fn to_json(self) -> Json {
        let (ty, range) = match self.ty {
            ParamType::Int { min, max } => ("int", json!({"min": min, "max": max})),
            ParamType::Float {
                min,
                max,
                min_open,
                max_open,
            } => (
                "float",
                json!({
                    "min": finite(min), "max": finite(max),
                    "min_open": min_open, "max_open": max_open,
                }),
            ),
            ParamType::Choice(names) => ("choice", json!({"values": names})),
        };
        let (default, required, absent, example) = match self.default {
            Default::Value(v) => (value_json(v), false, Json::Null, Json::Null),
            Default::Absent(means) => (Json::Null, false, json!(means), Json::Null),
            Default::Required { example } => (Json::Null, true, Json::Null, value_json(example)),
        };
        let mut o = json!({
            "name": self.name,
            "type": ty,
            "default": default,
            "required": required,
            "range": self.range(),
            "doc": self.doc,
        });
        let m = o.as_object_mut().expect("an object");
        if let Json::Object(r) = range {
            m.extend(r);
        }
        if !absent.is_null() {
            m.insert("absent".into(), absent);
        }
        if !example.is_null() {
            m.insert("example".into(), example);
        }
        o
    }
}

fn finite(x: f64) -> Json {
    if x.is_finite() {
        json!(x)
    } else {
        Json::Null
    }
}

/// A value as JSON (ints as integers, floats as numbers, choices as strings).
pub fn value_json(v: Value) -> Json {
    match v {
        Value::Int(i) => json!(i),
        Value::Float(x) => json!(x),
        Value::Choice(c) => json!(c),
    }
}

pub(crate) fn display_value(v: Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(x) => x.to_string(),
        Value::Choice(c) => c.to_string(),
    }
}

/// Every kind as JSON (what `bertflow kinds --json` prints and Python's
/// `bertflow.kinds()` returns): a list of `{"name", "doc", "moments",
/// "synopsis", "params": [{"name", "type" (int, float, choice), "default"
/// (null when absent or required), "required", "range" (words), "doc", and
/// "min"/"max" (ints; floats with "min_open"/"max_open", null when
/// unbounded), "values" (choices), "absent" (what no value means),
/// "example" (of a required value)}]}`.
pub fn to_json() -> Json {
    Json::Array(
        KINDS
            .iter()
            .map(|k| {
                json!({
                    "name": k.name,
                    "doc": k.doc,
                    "moments": k.moments,
                    "synopsis": k.synopsis(),
                    "params": k.params.iter().map(|p| p.to_json()).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The kinds' grammar in one line: `none, sn, whiten[:k=N], natsv:k=N, ...`.
pub fn synopsis() -> String {
    KINDS
        .iter()
        .map(Kind::synopsis)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Help text for a flag that takes a spec (or a list of them): one line per
/// kind with its synopsis and doc, then each parameter's default and range.
pub fn help() -> String {
    let mut out = String::new();
    for k in KINDS {
        out.push_str(&format!("  {}: {}\n", k.synopsis(), k.doc));
        for p in k.params {
            let default = match p.default {
                Default::Value(v) => format!("default {}", p.format(v)),
                Default::Absent(means) => format!("default: {means}"),
                Default::Required { example } => {
                    format!("required, e.g. {}", display_value(example))
                }
            };
            out.push_str(&format!(
                "      {}: {} ({default}; {})\n",
                p.name,
                p.doc,
                p.range()
            ));
        }
    }
    out
}

/// Plain-text table of the kinds (`bertflow kinds`).
pub fn table() -> String {
    let mut out = String::from("Calibrator kinds (a spec is KIND[:KEY=VALUE,...]):\n\n");
    out.push_str(&help());
    out
}
