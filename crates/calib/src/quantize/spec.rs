//! Quantizer specs: `int8[:ranges=global|dim]`, `uint8[:ranges=...]`,
//! `binary[:itq=BOOL,iters=N]`, `ubinary[:...]`, `pq:m=M[,opq=BOOL,iters=N]`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{CalibError, Result};

/// The code a quantizer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantKind {
    /// One signed byte per dimension.
    Int8,
    /// One unsigned byte per dimension (the int8 code plus 128).
    Uint8,
    /// Sign bits packed MSB-first (as `numpy.packbits`), each byte stored
    /// as int8 `byte - 128` (sentence-transformers' `binary`).
    Binary,
    /// Sign bits packed MSB-first, as uint8 (sentence-transformers' `ubinary`).
    Ubinary,
    /// Product quantization: `m` sub-vectors, one byte (a centroid index
    /// out of 256) each.
    Pq {
        /// Sub-vectors (bytes per row).
        m: usize,
    },
}

/// How int8/uint8 ranges are fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ranges {
    /// One symmetric scale for every dimension, `max |x| / 127` over the
    /// fit set: codes compare directly as integers.
    #[default]
    Global,
    /// Per-dimension `[min, max]` of the fit set cut into 256 steps (as
    /// sentence-transformers' calibration embeddings); score with the
    /// scales kept.
    Dim,
}

/// Iterations of ITQ unless `iters` says otherwise (Gong & Lazebnik use 50).
pub const ITQ_ITERS: usize = 50;

/// Rounds of OPQ's alternation (k-means, then the Procrustes rotation)
/// unless `iters` says otherwise: 50, as faiss's `OPQMatrix` runs from a
/// random rotation. Measured on MiniLM last-avg at 64 bytes (benchmarks/
/// compress.md): 20 rounds gave recall@10 0.811, 50 give 0.825 (faiss OPQ64
/// 0.825), at 2.0x the fit time.
pub const OPQ_ITERS: usize = 50;

/// Whether `pq` fits a rotation (OPQ) unless `opq` says otherwise.
pub const PQ_OPQ_DEFAULT: bool = true;

/// What quantizer to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantSpec {
    /// The code.
    pub kind: QuantKind,
    /// int8/uint8: how ranges are fitted.
    #[serde(default)]
    pub ranges: Ranges,
    /// binary/ubinary: ITQ iterations (`None`: no ITQ rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itq: Option<usize>,
    /// pq: OPQ rounds (`None`: no rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opq: Option<usize>,
}

impl QuantKind {
    /// The name in specs (`int8`, `uint8`, `binary`, `ubinary`, `pq`).
    pub fn name(self) -> &'static str {
        match self {
            QuantKind::Int8 => "int8",
            QuantKind::Uint8 => "uint8",
            QuantKind::Binary => "binary",
            QuantKind::Ubinary => "ubinary",
            QuantKind::Pq { .. } => "pq",
        }
    }

    /// Whether the codes are packed sign bits.
    pub fn is_bits(self) -> bool {
        matches!(self, QuantKind::Binary | QuantKind::Ubinary)
    }

    /// Whether the codes are product-quantizer centroid indices.
    pub fn is_pq(self) -> bool {
        matches!(self, QuantKind::Pq { .. })
    }

    /// Bytes per row of codes of `dim` dimensions.
    pub fn bytes_per_row(self, dim: usize) -> usize {
        match self {
            QuantKind::Pq { m } => m,
            _ if self.is_bits() => dim.div_ceil(8),
            _ => dim,
        }
    }
}

impl QuantSpec {
    /// A spec of this kind with the defaults (global ranges, no ITQ; for
    /// `pq`, OPQ with [`OPQ_ITERS`] rounds).
    pub fn of(kind: QuantKind) -> Self {
        QuantSpec {
            kind,
            ranges: Ranges::Global,
            itq: None,
            opq: (kind.is_pq() && PQ_OPQ_DEFAULT).then_some(OPQ_ITERS),
        }
    }
}

/// Every quantizer, one line each: its grammar and what it writes (`bertflow
/// kinds`, help texts).
pub const QUANTIZERS: [(&str, &str); 5] = [
    (
        "int8[:ranges=global|dim]",
        "one signed byte per dimension: one scale for all (global, the default; codes \
         compare as integers) or per-dimension ranges",
    ),
    (
        "uint8[:ranges=global|dim]",
        "the int8 code plus 128, unsigned",
    ),
    (
        "binary[:itq=true|false,iters=N]",
        "sign bits, 8 per byte (int8); itq rotates first (ITQ, the default after pca)",
    ),
    (
        "ubinary[:itq=true|false,iters=N]",
        "the same sign bits as uint8",
    ),
    (
        "pq:m=M[,opq=true|false,iters=N]",
        "product quantizer: M bytes per vector (M dividing the dimension); opq (the \
         default) rotates first",
    ),
];

/// The calibrator kinds after which `binary`/`ubinary` fit an ITQ rotation
/// unless the spec says `itq=false`: `pca`'s output axes are principal axes,
/// where plain sign bits spend most bits on the first, strongest ones.
/// Measured (all-MiniLM-L6-v2 `last-avg`, fit on 13,505 STS12-14 sentences,
/// recall@10 of Hamming ranking against exact cosine on 6,000 unseen STS15-16
/// sentences): `pca` 0.467 with plain signs, 0.622 with ITQ; after `whiten`
/// ITQ costs recall (0.471 plain, 0.446 with ITQ), so it stays off there.
pub const ITQ_AFTER: [&str; 1] = ["pca"];

/// A quantizer spec as given, before the defaults that depend on the
/// calibrator it follows (`bertflow fit --kind K --quantize Q`): `binary`
/// after `pca` is ITQ unless told otherwise ([`ITQ_AFTER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantRequest {
    spec: QuantSpec,
    itq_given: bool,
}

impl QuantRequest {
    /// The spec to fit after a calibrator of kind `kind` (a registry name).
    pub fn after(self, kind: &str) -> QuantSpec {
        let mut spec = self.spec;
        if spec.kind.is_bits() && !self.itq_given && ITQ_AFTER.contains(&kind) {
            spec.itq = Some(ITQ_ITERS);
        }
        spec
    }

    /// The spec as given, with no default from a calibrator.
    pub fn as_given(self) -> QuantSpec {
        self.spec
    }
}

impl FromStr for QuantRequest {
    type Err = CalibError;

    fn from_str(s: &str) -> Result<Self> {
        let spec: QuantSpec = s.parse()?;
        let itq_given = s
            .split_once(':')
            .is_some_and(|(_, opts)| opts.split(',').any(|o| o.trim().starts_with("itq")));
        Ok(QuantRequest { spec, itq_given })
    }
}

impl fmt::Display for QuantRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spec.fmt(f)
    }
}

/// The grammar, for help texts.
pub const QUANT_SYNOPSIS: &str =
    "int8[:ranges=global|dim], uint8[:ranges=global|dim], binary[:itq=false|true,iters=N], \
     ubinary[:itq=false|true,iters=N], pq:m=M[,opq=true|false,iters=N] (M bytes per vector, \
     M dividing the dimension)";

impl FromStr for QuantSpec {
    type Err = CalibError;

    fn from_str(s: &str) -> Result<Self> {
        let err = |reason: String| CalibError::Quantizer {
            spec: s.to_string(),
            reason,
        };
        let (name, opts) = match s.trim().split_once(':') {
            Some((k, o)) => (k.trim(), Some(o)),
            None => (s.trim(), None),
        };
        let kind = match name {
            "int8" => QuantKind::Int8,
            "uint8" => QuantKind::Uint8,
            "binary" => QuantKind::Binary,
            "ubinary" => QuantKind::Ubinary,
            "pq" => return parse_pq(s, opts),
            _ => {
                return Err(err(format!(
                    "unknown quantizer name; the quantizers: {QUANT_SYNOPSIS} \
                     (`bertflow kinds` lists them)"
                )))
            }
        };
        let mut spec = QuantSpec::of(kind);
        let (mut itq, mut iters) = (false, None);
        for (key, value) in options(opts).map_err(err)? {
            match (kind.is_bits(), key) {
                (false, "ranges") => {
                    spec.ranges = match value {
                        "global" => Ranges::Global,
                        "dim" => Ranges::Dim,
                        _ => {
                            return Err(err(format!("ranges={value:?}: valid values: global, dim")))
                        }
                    }
                }
                (true, "itq") => itq = flag(key, value).map_err(err)?,
                (true, "iters") => iters = Some(rounds(value).map_err(err)?),
                _ => {
                    let valid = if kind.is_bits() {
                        "itq, iters"
                    } else {
                        "ranges"
                    };
                    return Err(err(format!(
                        "unknown option {key:?}; valid options for {name}: {valid}"
                    )));
                }
            }
        }
        if iters.is_some() && !itq {
            return Err(err("iters applies with itq=true".into()));
        }
        spec.itq = itq.then(|| iters.unwrap_or(ITQ_ITERS));
        Ok(spec)
    }
}

/// The `key=value` items of a spec's options (comma-separated), trimmed;
/// an item without `=` or a key given twice is an error.
fn options(opts: Option<&str>) -> std::result::Result<Vec<(&str, &str)>, String> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for item in opts.into_iter().flat_map(|o| o.split(',')) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("option {item:?} is not of the form key=value"));
        };
        let (key, value) = (key.trim(), value.trim());
        if out.iter().any(|(k, _)| *k == key) {
            return Err(format!("option {key:?} given twice"));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// A boolean option's value.
fn flag(key: &str, value: &str) -> std::result::Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{key}={value:?}: valid values: false, true")),
    }
}

/// An `iters` option's value: rounds of ITQ or OPQ.
fn rounds(value: &str) -> std::result::Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
        _ => Err(format!(
            "iters must be an integer in 1..=10000, got {value:?}"
        )),
    }
}

/// The options of `pq:m=M[,opq=BOOL,iters=N]`.
fn parse_pq(s: &str, opts: Option<&str>) -> Result<QuantSpec> {
    let err = |reason: String| CalibError::Quantizer {
        spec: s.to_string(),
        reason,
    };
    let (mut m, mut opq, mut iters) = (None, PQ_OPQ_DEFAULT, None);
    for (key, value) in options(opts).map_err(err)? {
        match key {
            "m" => match value.parse::<usize>() {
                Ok(n) if (1..=65_536).contains(&n) => m = Some(n),
                _ => {
                    return Err(err(format!(
                        "m (sub-vectors, bytes per vector) must be an integer in 1..=65536, got \
                         {value:?}"
                    )))
                }
            },
            "opq" => opq = flag(key, value).map_err(err)?,
            "iters" => iters = Some(rounds(value).map_err(err)?),
            _ => {
                return Err(err(format!(
                    "unknown option {key:?}; valid options for pq: m, opq, iters"
                )))
            }
        }
    }
    let Some(m) = m else {
        return Err(err(
            "pq needs m, the number of sub-vectors (bytes per vector): pq:m=64".into(),
        ));
    };
    if iters.is_some() && !opq {
        return Err(err("iters applies with opq=true".into()));
    }
    let mut spec = QuantSpec::of(QuantKind::Pq { m });
    spec.opq = opq.then(|| iters.unwrap_or(OPQ_ITERS));
    Ok(spec)
}

impl fmt::Display for QuantSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let QuantKind::Pq { m } = self.kind {
            write!(f, ":m={m}")?;
            return match self.opq {
                Some(OPQ_ITERS) if PQ_OPQ_DEFAULT => Ok(()),
                Some(n) => write!(f, ",opq=true,iters={n}"),
                None => f.write_str(",opq=false"),
            };
        }
        if !self.kind.is_bits() && self.ranges == Ranges::Dim {
            f.write_str(":ranges=dim")?;
        }
        match self.itq {
            Some(ITQ_ITERS) => f.write_str(":itq=true"),
            Some(n) => write!(f, ":itq=true,iters={n}"),
            None => Ok(()),
        }
    }
}
