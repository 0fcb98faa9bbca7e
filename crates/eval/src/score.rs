//! Scoring an [`EvalSet`] from sentence embeddings.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use ndarray::ArrayView2;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::data::EvalSet;
use crate::metrics::{pearson, spearman, MetricError};

/// How per-subset correlations of a multi-subset task (STS12–16) are combined.
/// For one-subset tasks all three give the same number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// One correlation over all subsets concatenated (SimCSE's convention).
    All,
    /// Mean of the per-subset correlations weighted by subset size (number of pairs).
    WMean,
    /// Plain mean of the per-subset correlations.
    Mean,
}

impl Aggregate {
    /// "all", "wmean" or "mean".
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::All => "all",
            Aggregate::WMean => "wmean",
            Aggregate::Mean => "mean",
        }
    }
}

impl fmt::Display for Aggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Aggregate::from_str`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown aggregation '{input}'; valid names: all, wmean, mean")]
pub struct ParseAggregateError {
    pub input: String,
}

impl FromStr for Aggregate {
    type Err = ParseAggregateError;

    /// "all", "wmean", "mean", case-insensitive.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Ok(Aggregate::All),
            "wmean" => Ok(Aggregate::WMean),
            "mean" => Ok(Aggregate::Mean),
            _ => Err(ParseAggregateError {
                input: s.to_string(),
            }),
        }
    }
}

/// Correlations of one subset, x100.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubsetResult {
    pub name: String,
    pub spearman: f64,
    pub pearson: f64,
    pub pairs: usize,
}

/// Correlations of a task, x100, aggregated over its subsets as asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub spearman: f64,
    pub pearson: f64,
    pub pairs: usize,
    pub subsets: Vec<SubsetResult>,
}

/// Mean over tasks of [`TaskResult::spearman`] and [`TaskResult::pearson`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Average {
    pub spearman: f64,
    pub pearson: f64,
    pub tasks: usize,
}

/// Errors of [`evaluate`].
#[derive(Debug, Error)]
pub enum EvalError {
    #[error("{sentences} sentences but {rows} embedding rows")]
    RowCountMismatch { sentences: usize, rows: usize },
    #[error("evaluation set '{0}' has no pairs")]
    Empty(String),
    #[error("no embedding for sentence \"{0}\"")]
    MissingSentence(String),
    #[error("embedding of sentence \"{0}\" has a non-finite value")]
    NonFiniteEmbedding(String),
    #[error("{set}/{subset}: {source}")]
    Metric {
        set: String,
        subset: String,
        #[source]
        source: MetricError,
    },
}

/// The distinct sentences of `set` (`s1` then `s2` of each pair, subsets in order), in
/// order of first appearance: the list to embed for [`evaluate`].
pub fn unique_sentences(set: &EvalSet) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::new();
    for subset in &set.subsets {
        for p in &subset.pairs {
            for s in [&p.s1, &p.s2] {
                if seen.insert(s.as_str()) {
                    out.push(s.clone());
                }
            }
        }
    }
    out
}

/// Scores `set`: row `i` of `embeddings` is the embedding of `sentences[i]` (extra
/// sentences are allowed; if a sentence is listed twice its first row is used).
///
/// Each pair's system score is the cosine similarity of its two embeddings, computed in
/// f64; a pair with a zero-norm embedding gets cosine 0. Spearman and Pearson against the
/// gold scores are computed per subset and aggregated by `agg`; all results are x100.
///
/// Errors (never panics) when the row count differs from `sentences.len()`, the set has
/// no pairs, a sentence of the set is not in `sentences`, a needed embedding has a
/// non-finite value, or a correlation is undefined (a subset with fewer than 2 pairs, or
/// constant gold scores or cosines).
pub fn evaluate(
    set: &EvalSet,
    sentences: &[String],
    embeddings: ArrayView2<f32>,
    agg: Aggregate,
) -> Result<TaskResult, EvalError> {
    if embeddings.nrows() != sentences.len() {
        return Err(EvalError::RowCountMismatch {
            sentences: sentences.len(),
            rows: embeddings.nrows(),
        });
    }
    if set.num_pairs() == 0 {
        return Err(EvalError::Empty(set.name.clone()));
    }
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(sentences.len());
    for (i, s) in sentences.iter().enumerate() {
        index.entry(s.as_str()).or_insert(i);
    }
    // Norms are computed once per needed row.
    let mut norms: HashMap<usize, f64> = HashMap::new();
    let mut row_of = |s: &str| -> Result<(usize, f64), EvalError> {
        let &i = index
            .get(s)
            .ok_or_else(|| EvalError::MissingSentence(s.to_string()))?;
        if let Some(&n) = norms.get(&i) {
            return Ok((i, n));
        }
        let row = embeddings.row(i);
        if row.iter().any(|x| !x.is_finite()) {
            return Err(EvalError::NonFiniteEmbedding(s.to_string()));
        }
        let n = row
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt();
        norms.insert(i, n);
        Ok((i, n))
    };

    let metric_err = |subset: &str, source| EvalError::Metric {
        set: set.name.clone(),
        subset: subset.to_string(),
        source,
    };
    let mut all_gold = Vec::with_capacity(set.num_pairs());
    let mut all_sys = Vec::with_capacity(set.num_pairs());
    let mut subsets = Vec::with_capacity(set.subsets.len());
    for subset in &set.subsets {
        let mut gold = Vec::with_capacity(subset.pairs.len());
        let mut sys = Vec::with_capacity(subset.pairs.len());
        for p in &subset.pairs {
            let (i, ni) = row_of(&p.s1)?;
            let (j, nj) = row_of(&p.s2)?;
            let cos = if ni == 0.0 || nj == 0.0 {
                0.0
            } else {
                let dot: f64 = embeddings
                    .row(i)
                    .iter()
                    .zip(embeddings.row(j).iter())
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                dot / (ni * nj)
            };
            gold.push(p.score);
            sys.push(cos);
        }
        let sp = spearman(&sys, &gold).map_err(|e| metric_err(&subset.name, e))?;
        let pe = pearson(&sys, &gold).map_err(|e| metric_err(&subset.name, e))?;
        subsets.push(SubsetResult {
            name: subset.name.clone(),
            spearman: sp * 100.0,
            pearson: pe * 100.0,
            pairs: subset.pairs.len(),
        });
        all_gold.extend(gold);
        all_sys.extend(sys);
    }
    let pairs = all_gold.len();
    let (sp, pe) = match agg {
        Aggregate::All => {
            let sp = spearman(&all_sys, &all_gold).map_err(|e| metric_err("all", e))?;
            let pe = pearson(&all_sys, &all_gold).map_err(|e| metric_err("all", e))?;
            (sp * 100.0, pe * 100.0)
        }
        Aggregate::WMean => {
            let w = |f: fn(&SubsetResult) -> f64| {
                subsets.iter().map(|s| f(s) * s.pairs as f64).sum::<f64>() / pairs as f64
            };
            (w(|s| s.spearman), w(|s| s.pearson))
        }
        Aggregate::Mean => {
            let m = |f: fn(&SubsetResult) -> f64| {
                subsets.iter().map(f).sum::<f64>() / subsets.len() as f64
            };
            (m(|s| s.spearman), m(|s| s.pearson))
        }
    };
    Ok(TaskResult {
        spearman: sp,
        pearson: pe,
        pairs,
        subsets,
    })
}

/// The average row: mean of `spearman` and of `pearson` over `results` (each task counts
/// once, whatever its size). `None` for an empty slice.
pub fn average(results: &[TaskResult]) -> Option<Average> {
    if results.is_empty() {
        return None;
    }
    let n = results.len() as f64;
    Some(Average {
        spearman: results.iter().map(|r| r.spearman).sum::<f64>() / n,
        pearson: results.iter().map(|r| r.pearson).sum::<f64>() / n,
        tasks: results.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_aggregate() {
        for a in [Aggregate::All, Aggregate::WMean, Aggregate::Mean] {
            assert_eq!(a.name().parse::<Aggregate>(), Ok(a));
            assert_eq!(
                serde_json::to_string(&a).unwrap(),
                format!("\"{}\"", a.name())
            );
        }
        assert_eq!("WMean".parse::<Aggregate>(), Ok(Aggregate::WMean));
        let msg = "median".parse::<Aggregate>().unwrap_err().to_string();
        assert!(msg.contains("'median'") && msg.contains("wmean"), "{msg}");
        let a: Aggregate = serde_json::from_str("\"wmean\"").unwrap();
        assert_eq!(a, Aggregate::WMean);
    }
}
