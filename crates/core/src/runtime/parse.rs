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

/// The items of a spec list ([`split_spec_list`]), each parsed, with its text
/// as written: the one rule of every list option (`kinds` of compare, eval's
/// grid and analyze; `weighting` of compare): no empty item, no item twice,
/// at least one item. Errors are [`crate::CoreError::Setting`] on `field`.
pub fn spec_list<T>(field: &'static str, s: &str) -> crate::error::Result<Vec<(T, String)>>
where
    T: std::str::FromStr + PartialEq,
    T::Err: std::fmt::Display,
{
    let bad = |message: String| crate::error::CoreError::setting(field, message);
    let mut out: Vec<(T, String)> = Vec::new();
    for item in split_spec_list(s) {
        if item.is_empty() {
            return Err(bad(format!(
                "empty item in {s:?}; give a comma-separated list such as none,whiten,flow"
            )));
        }
        let value: T = item.parse().map_err(|e| bad(format!("{item:?}: {e}")))?;
        if let Some((_, first)) = out.iter().find(|(v, _)| *v == value) {
            return Err(bad(format!(
                "{item:?} is listed twice (as {first:?} before)"
            )));
        }
        out.push((value, item));
    }
    if out.is_empty() {
        return Err(bad("is empty".to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_lists_keep_options_and_reject_empty_and_repeated_items() {
        let v: Vec<(WeightingSpec, String)> =
            spec_list("weighting", "mean, sif:a=1e-4,punct=keep ,usif").unwrap();
        let labels: Vec<&str> = v.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(labels, ["mean", "sif:a=1e-4,punct=keep", "usif"]);
        let err = |s: &str| {
            spec_list::<WeightingSpec>("weighting", s)
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("mean,,usif").starts_with("weighting: empty item"),
            "{}",
            err("mean,,usif")
        );
        assert!(err("").starts_with("weighting: empty item"), "{}", err(""));
        assert!(
            err("usif,usif").contains("\"usif\" is listed twice"),
            "{}",
            err("usif,usif")
        );
        assert!(
            err("mean,bogus").starts_with("weighting: \"bogus\": "),
            "{}",
            err("mean,bogus")
        );
    }
}
