//! Values on the command line and in JSON configs: parsers for clap and serde
//! (poolings, precisions, weighting specs) and the one parser of spec lists.
//! A leaf module: it depends on no other module of this crate.
use bertflow_encoder::{Pooling, Precision, WeightingSpec};

/// A value as its `Display` string and back through `FromStr` (poolings,
/// precisions, weighting specs in JSON configs).
pub mod as_str {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

/// An optional value as its `Display` string (`null` when unset) and back.
pub mod opt_str {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        match Option::<String>::deserialize(d)? {
            Some(s) => s.parse().map(Some).map_err(D::Error::custom),
            None => Ok(None),
        }
    }
}

/// Parses a pooling for the command line.
pub fn parse_pooling(s: &str) -> Result<Pooling, String> {
    s.parse::<Pooling>().map_err(|e| e.to_string())
}

/// Parses a precision for the command line.
pub fn parse_precision(s: &str) -> Result<Precision, String> {
    s.parse::<Precision>().map_err(|e| e.to_string())
}

/// Parses a weighting spec for the command line.
pub fn parse_weighting(s: &str) -> Result<WeightingSpec, String> {
    s.parse::<WeightingSpec>().map_err(|e| e.to_string())
}

/// Splits a comma-separated list of calibrator specs, where the options of a spec
/// may follow it with commas too: `none,flow:levels=2,steps=2,whiten` is none, the
/// flow with both options, and whiten (an item `key=value` without `:` continues
/// the previous spec). Empty items are kept (as empty strings) for the caller to
/// reject.
pub fn split_spec_list(s: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for piece in s.split(',') {
        let p = piece.trim();
        match items.last_mut() {
            Some(last) if p.contains('=') && !p.contains(':') => {
                last.push(',');
                last.push_str(p);
            }
            _ => items.push(p.to_string()),
        }
    }
    items
}
