//! Sentence poolings, named so that nobody can confuse them.
//!
//! Hidden-state indices: 0 is the embedding output, 1..=N the transformer layers
//! (N = `num_hidden_layers`; 12 for bert-base, 6 for all-MiniLM-L6-v2). Every
//! average is a masked mean over the real tokens of the sentence, `[CLS]` and
//! `[SEP]` included (as sentence-transformers' mean pooling), of the element-wise
//! mean of the listed hidden states.
//!
//! | name             | hidden states | also known as |
//! |------------------|---------------|---------------|
//! | `cls`            | [CLS] of N    | |
//! | `last-token`     | the last real token of N | what decoder embedders (Qwen3-Embedding) pool |
//! | `pooler`         | tanh(W [CLS] of N + b), the checkpoint's pooler | BERT "pooled output" |
//! | `last-avg`       | N             | "mean pooling" |
//! | `first-last-avg` | 1 and N       | what the original BERT-flow code calls `last2avg` |
//! | `emb-last-avg`   | 0 and N       | what a PyTorch port of BERT-flow and SimCSE before 2022 call "first-last avg" |
//! | `last2-avg`      | N-1 and N     | the literal last two layers |
//! | `emb-avg`        | 0             | non-contextual baseline, like averaged GloVe |
//! | `layers:i,j,...` | i, j, ...     | any set |
//! | `st`             | the directory's own pipeline | `SentenceTransformer(dir).encode` (see [`crate::st`]) |
//! | `splade`         | the masked-LM head's logits, `max_t log(1 + relu(x))` | a sparse vector: `SparseEncoder.encode`, TEI's `--pooling splade` (see [`crate::head::RetrievalEncoder`]) |
//!
//! `splade` makes sparse vectors, not dense ones: [`Pooling::source`] refuses
//! it (the dense paths, calibrators included, never see it).
use crate::error::{EncoderError, Result};
use crate::st::StHead;
pub use crate::token_mean::masked_mean;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// One pooling. Parse with `FromStr`; `Display` gives the canonical name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pooling {
    Cls,
    /// The last real token of the last layer (decoder models' default).
    LastToken,
    Pooler,
    LastAvg,
    FirstLastAvg,
    EmbLastAvg,
    Last2Avg,
    EmbAvg,
    /// Mean over these hidden states (0 = embedding output), in the order given.
    Layers(Vec<usize>),
    /// A sentence-transformers directory's own pipeline (`modules.json`):
    /// resolved by [`crate::Encoder::source`], not by [`Pooling::source`].
    St,
    /// SPLADE on a `*ForMaskedLM` checkpoint: sparse vectors, computed by
    /// [`crate::head::RetrievalEncoder`]; [`Pooling::source`] refuses it.
    Splade,
}

impl Pooling {
    /// Whether the pooling makes sparse vectors (`splade`).
    pub fn is_sparse(&self) -> bool {
        *self == Pooling::Splade
    }
}

/// What a pooling reads from the forward pass, for a model with `n` layers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PoolSource {
    /// The [CLS] vector of hidden state `n`.
    Cls(usize),
    /// The last real token's vector of hidden state `n` (wherever the padding
    /// is: bertflow's batches are padded on the right, so token `len - 1`).
    LastToken(usize),
    /// The pooler applied to the [CLS] vector of hidden state `n`.
    Pooler(usize),
    /// Masked token mean of the mean of these hidden states (sorted, deduplicated).
    Mean(Vec<usize>),
    /// A sentence-transformers pipeline (pooling, dense layers, normalisation,
    /// bertflow's calibrator module) on the hidden states.
    St(Arc<StHead>),
}

/// Every named pooling with its one-line description, for `--help` and docs.
pub const POOLINGS: &[(&str, &str)] = &[
    ("cls", "last layer's [CLS] vector"),
    (
        "last-token",
        "last layer's vector of each text's last real token (the default of decoder models such as Qwen3)",
    ),
    (
        "pooler",
        "tanh dense pooler on the last [CLS] (checkpoints that have it)",
    ),
    ("last-avg", "mean of the last layer's tokens"),
    (
        "first-last-avg",
        "mean of transformer layer 1 and the last layer (BERT-flow code's 'last2avg')",
    ),
    (
        "emb-last-avg",
        "mean of the embedding output (layer 0) and the last layer (a PyTorch port's 'first-last')",
    ),
    ("last2-avg", "mean of the last two transformer layers"),
    (
        "emb-avg",
        "mean of the embedding output (layer 0): non-contextual baseline",
    ),
    (
        "layers:i,j,...",
        "mean of any hidden states; 0 = embedding output, N = last layer",
    ),
    (
        "st",
        "a sentence-transformers directory's own pipeline (modules.json: Pooling, Dense, Normalize, bertflow's module): SentenceTransformer(dir).encode",
    ),
    (
        "splade",
        "sparse: max over tokens of log(1 + relu(masked-LM logits)) (*ForMaskedLM checkpoints; encode only)",
    ),
];

impl Pooling {
    /// The hidden states this pooling reads, for a model with `n` transformer layers.
    pub fn source(&self, n: usize) -> Result<PoolSource> {
        let check = |mut v: Vec<usize>| -> Result<PoolSource> {
            if let Some(&bad) = v.iter().find(|&&l| l > n) {
                return Err(EncoderError::LayerOutOfRange { layer: bad, max: n });
            }
            v.sort_unstable();
            v.dedup();
            Ok(PoolSource::Mean(v))
        };
        match self {
            Pooling::Cls => Ok(PoolSource::Cls(n)),
            Pooling::LastToken => Ok(PoolSource::LastToken(n)),
            Pooling::Pooler => Ok(PoolSource::Pooler(n)),
            Pooling::LastAvg => check(vec![n]),
            Pooling::FirstLastAvg => check(vec![1.min(n), n]),
            Pooling::EmbLastAvg => check(vec![0, n]),
            Pooling::Last2Avg => check(vec![n.saturating_sub(1).max(1).min(n), n]),
            Pooling::EmbAvg => check(vec![0]),
            Pooling::Layers(v) => check(v.clone()),
            Pooling::St => Err(EncoderError::Unsupported(
                "pooling 'st' is resolved from the model directory (Encoder::source)".into(),
            )),
            Pooling::Splade => Err(EncoderError::Unsupported(
                "pooling 'splade' makes sparse vectors: `bertflow encode` and Python's \
                 encode_sparse compute them; dense vectors, calibrators, evaluation and \
                 the index take a dense pooling"
                    .into(),
            )),
        }
    }
}

impl PoolSource {
    /// The deepest hidden state needed.
    pub fn max_layer(&self) -> usize {
        match self {
            PoolSource::Cls(n) | PoolSource::Pooler(n) | PoolSource::LastToken(n) => *n,
            PoolSource::Mean(v) => v.iter().copied().max().unwrap_or(0),
            PoolSource::St(head) => head.max_layer(),
        }
    }

    /// Width of the vectors it makes, for a model of `hidden` dimensions.
    pub fn dim(&self, hidden: usize) -> usize {
        match self {
            PoolSource::St(head) => head.dim(),
            _ => hidden,
        }
    }

    /// A stable description used in cache keys: equal keys give equal vectors.
    pub fn key(&self) -> String {
        match self {
            PoolSource::Cls(n) => format!("cls@{n}"),
            PoolSource::LastToken(n) => format!("last@{n}"),
            PoolSource::Pooler(n) => format!("pooler@{n}"),
            PoolSource::Mean(v) => format!(
                "mean@{}",
                v.iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            PoolSource::St(head) => format!("st@{}", head.key()),
        }
    }
}

impl FromStr for Pooling {
    type Err = EncoderError;
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "cls" => Pooling::Cls,
            "last-token" => Pooling::LastToken,
            "pooler" => Pooling::Pooler,
            "last-avg" => Pooling::LastAvg,
            "first-last-avg" => Pooling::FirstLastAvg,
            "emb-last-avg" => Pooling::EmbLastAvg,
            "last2-avg" => Pooling::Last2Avg,
            "emb-avg" => Pooling::EmbAvg,
            "st" => Pooling::St,
            "splade" => Pooling::Splade,
            _ => {
                let list = t
                    .strip_prefix("layers:")
                    .ok_or_else(|| EncoderError::UnknownPooling(s.to_string()))?;
                let v = list
                    .split(',')
                    .map(|x| x.trim().parse::<usize>())
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| EncoderError::UnknownPooling(s.to_string()))?;
                if v.is_empty() {
                    return Err(EncoderError::UnknownPooling(s.to_string()));
                }
                Pooling::Layers(v)
            }
        })
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pooling::Cls => f.write_str("cls"),
            Pooling::LastToken => f.write_str("last-token"),
            Pooling::Pooler => f.write_str("pooler"),
            Pooling::LastAvg => f.write_str("last-avg"),
            Pooling::FirstLastAvg => f.write_str("first-last-avg"),
            Pooling::EmbLastAvg => f.write_str("emb-last-avg"),
            Pooling::Last2Avg => f.write_str("last2-avg"),
            Pooling::EmbAvg => f.write_str("emb-avg"),
            Pooling::St => f.write_str("st"),
            Pooling::Splade => f.write_str("splade"),
            Pooling::Layers(v) => write!(
                f,
                "layers:{}",
                v.iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_map_to_documented_layers() {
        let n = 12;
        let cases = [
            ("cls", PoolSource::Cls(12)),
            ("last-token", PoolSource::LastToken(12)),
            ("pooler", PoolSource::Pooler(12)),
            ("last-avg", PoolSource::Mean(vec![12])),
            ("first-last-avg", PoolSource::Mean(vec![1, 12])),
            ("emb-last-avg", PoolSource::Mean(vec![0, 12])),
            ("last2-avg", PoolSource::Mean(vec![11, 12])),
            ("emb-avg", PoolSource::Mean(vec![0])),
            ("layers:3,0,3", PoolSource::Mean(vec![0, 3])),
        ];
        for (name, src) in cases {
            let p: Pooling = name.parse().unwrap();
            assert_eq!(p.source(n).unwrap(), src, "{name}");
            if !name.starts_with("layers") {
                assert_eq!(p.to_string(), name);
            }
        }
        assert_eq!(
            "First-Last-Avg".parse::<Pooling>().unwrap(),
            Pooling::FirstLastAvg
        );
    }

    #[test]
    fn weighted_mean_matches_hand_computed_values() {
        // 2 sentences, t = 3, h = 2, two layers; sentence 1 has 2 real tokens.
        let l0 = [
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, /* s1 */ 7.0, 8.0, 9.0, 10.0, 99.0, 99.0,
        ];
        let l1 = [
            3.0, 2.0, 1.0, 0.0, 1.0, 2.0, /* s1 */ 1.0, 0.0, 3.0, 2.0, 99.0, 99.0,
        ];
        let layers: [&[f32]; 2] = [&l0, &l1];
        // Layer means per token: s0: (2,2), (2,2), (3,4); s1: (4,4), (6,6).
        let plain = masked_mean(&layers, &[3, 2], 3, 2, None);
        let want = [7.0 / 3.0, 8.0 / 3.0, 5.0, 5.0];
        for (a, b) in plain.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{plain:?}");
        }
        let w = vec![vec![0.0, 1.0, 3.0], vec![0.5, 1.5]];
        let weighted = masked_mean(&layers, &[3, 2], 3, 2, Some(&w));
        // s0: (1*(2,2) + 3*(3,4)) / 4 = (2.75, 3.5); s1: (0.5*4 + 1.5*6)/2 = 5.5.
        let want = [2.75, 3.5, 5.5, 5.5];
        for (a, b) in weighted.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{weighted:?}");
        }
        // All-ones weights give the plain mean, bit for bit up to rounding.
        let ones = vec![vec![1.0; 3], vec![1.0; 2]];
        let again = masked_mean(&layers, &[3, 2], 3, 2, Some(&ones));
        for (a, b) in again.iter().zip(&plain) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn bad_poolings_are_errors() {
        for bad in ["last2avg", "mean", "layers:", "layers:a", "layers:1,,2", ""] {
            assert!(
                matches!(bad.parse::<Pooling>(), Err(EncoderError::UnknownPooling(_))),
                "{bad}"
            );
        }
        let p: Pooling = "layers:0,7".parse().unwrap();
        assert!(matches!(
            p.source(6),
            Err(EncoderError::LayerOutOfRange { layer: 7, max: 6 })
        ));
    }
}
