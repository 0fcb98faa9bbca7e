//! Token weighting for the averaging poolings: plain mean, SIF (Arora et al.
//! 2017) and uSIF (Ethayarajh 2018), from word-piece frequencies counted on a
//! corpus or read from a frequency file, optionally leaving out special
//! tokens (`[CLS]`, `[SEP]`, ...) and punctuation-only pieces.
//!
//! A weighting is written as a spec string, like the calibrators:
//!
//! ```text
//! spec    := scheme [ ":" option { "," option } ]
//! scheme  := "mean" | "sif" | "usif"
//! option  := "a=" number          (sif only; default 1e-3)
//!          | "special=" keep|drop (default: keep for mean, drop for sif/usif)
//!          | "punct=" keep|drop   (default: keep for mean, drop for sif/usif)
//! ```
//!
//! With `p(w)` the relative frequency of piece `w` in the counted corpus
//! (special tokens included in the counts):
//! - `mean`: weight 1;
//! - `sif`: `a / (a + p(w))`;
//! - `usif`: `a / (a/2 + p(w))` with `a = (1 - alpha) / (alpha Z)`, `Z = v/2`,
//!   `alpha` the share of the `v` counted pieces whose `p(w)` exceeds
//!   `1 - (1 - 1/v)^n`, `n` the mean number of word pieces per sentence
//!   (special tokens excluded), as in Ethayarajh's reference code. A piece
//!   never seen in the corpus gets the largest weight (p = 0).
//!
//! Dropped tokens get weight 0; a sentence whose weights are all 0 (only
//! special tokens and punctuation) falls back to the plain mean over its tokens.

use crate::error::{io_err, EncoderError, Result};
use crate::tokenize::TextTokenizer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The weighting formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Every token weighs 1.
    Mean,
    /// `a / (a + p(w))`.
    Sif,
    /// Ethayarajh's unsupervised SIF: `a / (a/2 + p(w))`, `a` from the counts.
    Usif,
}

/// A weighting: formula and which tokens take part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightingSpec {
    pub scheme: Scheme,
    /// SIF's `a` (ignored by mean and usif).
    pub a: f64,
    /// Whether the tokenizer's special tokens (`[CLS]`, `[SEP]`, `<s>`, `</s>`,
    /// ...) take part.
    pub keep_special: bool,
    /// Whether pieces made only of punctuation take part.
    pub keep_punct: bool,
}

impl WeightingSpec {
    /// The plain mean over every token (the default pooling).
    pub fn mean() -> Self {
        WeightingSpec {
            scheme: Scheme::Mean,
            a: 1e-3,
            keep_special: true,
            keep_punct: true,
        }
    }

    /// Whether this is the plain mean over every token (no weights needed).
    pub fn is_plain_mean(&self) -> bool {
        self.scheme == Scheme::Mean && self.keep_special && self.keep_punct
    }

    /// Whether the weights depend on corpus frequencies.
    pub fn needs_counts(&self) -> bool {
        self.scheme != Scheme::Mean
    }
}

impl Default for WeightingSpec {
    fn default() -> Self {
        Self::mean()
    }
}

fn spec_err(s: &str, reason: impl Into<String>) -> EncoderError {
    EncoderError::Weighting(format!("invalid weighting {s:?}: {}", reason.into()))
}

impl FromStr for WeightingSpec {
    type Err = EncoderError;
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        let (scheme, opts) = match t.split_once(':') {
            Some((k, o)) => (k.trim(), Some(o)),
            None => (t, None),
        };
        let scheme = match scheme {
            "mean" => Scheme::Mean,
            "sif" => Scheme::Sif,
            "usif" => Scheme::Usif,
            other => {
                return Err(spec_err(
                    s,
                    format!("unknown scheme {other:?}; valid: mean, sif, usif"),
                ))
            }
        };
        let drop_default = scheme != Scheme::Mean;
        let mut spec = WeightingSpec {
            scheme,
            a: 1e-3,
            keep_special: !drop_default,
            keep_punct: !drop_default,
        };
        let mut seen: Vec<&str> = Vec::new();
        for item in opts.into_iter().flat_map(|o| o.split(',')) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(spec_err(s, format!("option {item:?} is not key=value")));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(spec_err(s, format!("option {key:?} given twice")));
            }
            seen.push(key);
            let keep = |v: &str| match v {
                "keep" => Ok(true),
                "drop" => Ok(false),
                _ => Err(spec_err(
                    s,
                    format!("{key}={v:?}: valid values: keep, drop"),
                )),
            };
            match key {
                "special" => spec.keep_special = keep(value)?,
                "punct" => spec.keep_punct = keep(value)?,
                "a" if scheme == Scheme::Sif => {
                    spec.a = value
                        .parse::<f64>()
                        .ok()
                        .filter(|a| a.is_finite() && *a > 0.0)
                        .ok_or_else(|| spec_err(s, format!("a={value:?}: expected a number > 0")))?
                }
                _ => {
                    let valid = if scheme == Scheme::Sif {
                        "a, special, punct"
                    } else {
                        "special, punct"
                    };
                    return Err(spec_err(
                        s,
                        format!("unknown option {key:?}; valid: {valid}"),
                    ));
                }
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for WeightingSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.scheme {
            Scheme::Mean => "mean",
            Scheme::Sif => "sif",
            Scheme::Usif => "usif",
        };
        let kd = |k: bool| if k { "keep" } else { "drop" };
        f.write_str(name)?;
        if self.scheme == Scheme::Sif {
            write!(f, ":a={:e},", self.a)?;
        } else {
            f.write_str(":")?;
        }
        write!(
            f,
            "special={},punct={}",
            kd(self.keep_special),
            kd(self.keep_punct)
        )
    }
}

/// Word-piece counts of a corpus, indexed by token id.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenCounts {
    /// Occurrences per token id (special tokens included: one `[CLS]` and
    /// one `[SEP]` per sentence).
    pub counts: Vec<u64>,
    /// Sentences counted.
    pub sentences: u64,
    /// Word pieces counted, special tokens excluded.
    pub pieces: u64,
}

pub use crate::tokenize::{is_special, SPECIAL_NAMES};

/// Whether a word piece is punctuation only (a `##` continuation prefix, a
/// byte-level BPE `Ġ` or a SentencePiece `▁` space marker ignored): every
/// character is a Unicode punctuation or symbol character as BERT's
/// pre-tokenizer defines it (ASCII punctuation, or neither alphanumeric nor
/// whitespace).
pub fn is_punct(token: &str) -> bool {
    let t = token
        .strip_prefix("##")
        .or_else(|| token.strip_prefix('\u{120}'))
        .or_else(|| token.strip_prefix('\u{2581}'))
        .unwrap_or(token);
    !t.is_empty()
        && !is_special(token)
        && t.chars()
            .all(|c| !c.is_alphanumeric() && !c.is_whitespace())
}

impl TokenCounts {
    /// Counts the pieces of `texts` (special tokens included, no truncation).
    pub fn count<S: AsRef<str>>(tok: &TextTokenizer, texts: &[S]) -> Result<Self> {
        let mut counts = vec![0u64; tok.vocab_size()];
        let mut pieces = 0u64;
        for t in texts {
            for id in tok.encode(t.as_ref())? {
                let id = id as usize;
                if id >= counts.len() {
                    counts.resize(id + 1, 0);
                }
                counts[id] += 1;
                if !tok.is_special_id(id as u32) {
                    pieces += 1;
                }
            }
        }
        Ok(TokenCounts {
            counts,
            sentences: texts.len() as u64,
            pieces,
        })
    }

    /// Total occurrences (special tokens included).
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Reads a frequency file: `piece<TAB>count` per line, and one
    /// `#sentences<TAB>N` line (the number of sentences counted, needed by
    /// uSIF). Blank lines are skipped; pieces not in the vocabulary are
    /// ignored; anything else malformed is an error naming the line.
    pub fn read(path: &Path, tok: &TextTokenizer) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        let bad = |line: usize, msg: String| EncoderError::BadFile {
            path: path.to_path_buf(),
            msg: format!("line {line}: {msg}"),
        };
        let mut counts = vec![0u64; tok.vocab_size()];
        let mut sentences = None;
        let mut pieces = 0u64;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let Some((piece, n)) = line.rsplit_once('\t') else {
                return Err(bad(i + 1, "expected piece<TAB>count".into()));
            };
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|_| bad(i + 1, format!("count {n:?} is not a non-negative integer")))?;
            if piece == "#sentences" {
                sentences = Some(n);
                continue;
            }
            if let Some(id) = tok.token_to_id(piece) {
                let special = tok.is_special_id(id);
                let id = id as usize;
                if id >= counts.len() {
                    counts.resize(id + 1, 0);
                }
                counts[id] += n;
                if !special {
                    pieces += n;
                }
            }
        }
        let sentences = sentences.ok_or_else(|| EncoderError::BadFile {
            path: path.to_path_buf(),
            msg: "no #sentences<TAB>N line (the number of sentences counted)".into(),
        })?;
        if sentences == 0 {
            return Err(EncoderError::BadFile {
                path: path.to_path_buf(),
                msg: "#sentences must be at least 1".into(),
            });
        }
        Ok(TokenCounts {
            counts,
            sentences,
            pieces,
        })
    }

    /// Writes the counts in the format [`TokenCounts::read`] reads, pieces
    /// by decreasing count (ties by id).
    pub fn write(&self, path: &Path, tok: &TextTokenizer) -> Result<()> {
        let mut ids: Vec<usize> = (0..self.counts.len())
            .filter(|&i| self.counts[i] > 0)
            .collect();
        ids.sort_by_key(|&i| (std::cmp::Reverse(self.counts[i]), i));
        let mut out = format!("#sentences\t{}\n", self.sentences);
        for i in ids {
            if let Some(t) = tok.id_to_token(i as u32) {
                out.push_str(&format!("{t}\t{}\n", self.counts[i]));
            }
        }
        bertflow_durable::write(path, out).map_err(|e| io_err(path)(e.source))
    }
}

/// Per-token-id weights for one weighting and one set of counts.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenWeights {
    pub spec: WeightingSpec,
    /// Weight per token id; ids beyond the end weigh `unseen`.
    weights: Vec<f32>,
    /// Weight of a piece with p(w) = 0.
    unseen: f32,
    /// uSIF's `a`, when the scheme is usif.
    pub usif_a: Option<f64>,
    key: String,
}

impl TokenWeights {
    /// Weights from counts. `counts` may be `None` for `mean` only (an error otherwise).
    pub fn new(
        spec: &WeightingSpec,
        counts: Option<&TokenCounts>,
        tok: &TextTokenizer,
    ) -> Result<Self> {
        let vocab = tok.vocab_size();
        let (p, total): (Vec<f64>, u64) = match (spec.needs_counts(), counts) {
            (false, _) => (vec![0.0; vocab], 0),
            (true, None) => {
                return Err(EncoderError::Weighting(format!(
                    "{spec} needs word-piece counts (a fit corpus or a frequency file)"
                )))
            }
            (true, Some(c)) => {
                let total = c.total();
                if total == 0 {
                    return Err(EncoderError::Weighting(
                        "the word-piece counts are empty".into(),
                    ));
                }
                let mut p: Vec<f64> = c.counts.iter().map(|&n| n as f64 / total as f64).collect();
                p.resize(p.len().max(vocab), 0.0);
                (p, total)
            }
        };
        let mut usif_a = None;
        let f: Box<dyn Fn(f64) -> f64> = match spec.scheme {
            Scheme::Mean => Box::new(|_| 1.0),
            Scheme::Sif => {
                let a = spec.a;
                Box::new(move |pw| a / (a + pw))
            }
            Scheme::Usif => {
                let c = counts.expect("checked above");
                let v = p.iter().filter(|&&x| x > 0.0).count() as f64;
                let n = c.pieces as f64 / c.sentences.max(1) as f64;
                let threshold = 1.0 - (1.0 - 1.0 / v).powf(n);
                let alpha = p.iter().filter(|&&x| x > threshold).count() as f64 / v;
                if alpha <= 0.0 || alpha >= 1.0 {
                    // No piece (or every piece) above the threshold: a is 0 or
                    // infinite and every weight is equal; use the plain mean.
                    Box::new(|_| 1.0)
                } else {
                    let a = (1.0 - alpha) / (alpha * 0.5 * v);
                    usif_a = Some(a);
                    Box::new(move |pw| a / (0.5 * a + pw))
                }
            }
        };
        let unseen = f(0.0) as f32;
        let weights: Vec<f32> = p
            .iter()
            .enumerate()
            .map(|(id, &pw)| {
                let token = tok.id_to_token(id as u32).unwrap_or_default();
                if (!spec.keep_special && tok.is_special_id(id as u32))
                    || (!spec.keep_punct && is_punct(&token))
                {
                    0.0
                } else {
                    f(pw) as f32
                }
            })
            .collect();
        let mut h = Sha256::new();
        h.update(format!("{spec}\n{total}\n"));
        for w in &weights {
            h.update(w.to_le_bytes());
        }
        let key = h
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(TokenWeights {
            spec: spec.clone(),
            weights,
            unseen,
            usif_a,
            key,
        })
    }

    /// Weights saved earlier (a calibrator file): the spec, the weight per
    /// token id, the weight of ids beyond the end, uSIF's `a` and the key they
    /// were saved with.
    pub fn from_parts(
        spec: WeightingSpec,
        weights: Vec<f32>,
        unseen: f32,
        usif_a: Option<f64>,
        key: String,
    ) -> Result<Self> {
        if weights.is_empty()
            || weights
                .iter()
                .chain([&unseen])
                .any(|w| !w.is_finite() || *w < 0.0)
        {
            return Err(EncoderError::Weighting(
                "saved token weights must be finite and non-negative".into(),
            ));
        }
        Ok(TokenWeights {
            spec,
            weights,
            unseen,
            usif_a,
            key,
        })
    }

    /// The weight per token id (ids beyond the end weigh [`Self::unseen`]).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// The weight of a piece never seen in the counted corpus.
    pub fn unseen(&self) -> f32 {
        self.unseen
    }

    /// The weight of one token id.
    pub fn weight(&self, id: u32) -> f32 {
        self.weights
            .get(id as usize)
            .copied()
            .unwrap_or(self.unseen)
    }

    /// The weights of a sentence's tokens; all ones when they would all be 0.
    pub fn sentence(&self, ids: &[u32]) -> Vec<f32> {
        let w: Vec<f32> = ids.iter().map(|&id| self.weight(id)).collect();
        if w.iter().all(|&x| x <= 0.0) {
            vec![1.0; ids.len()]
        } else {
            w
        }
    }

    /// A short hash of the spec and every weight: equal keys give equal
    /// poolings (for embedding caches).
    pub fn key(&self) -> &str {
        &self.key
    }
}

#[cfg(test)]
mod tests;
