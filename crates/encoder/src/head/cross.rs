//! [`CrossEncoder`]: a sequence-classification checkpoint scoring texts and
//! text pairs.
//!
//! A pair is tokenised as the checkpoint's Hugging Face tokenizer does: the
//! post-processor's pair template (`[CLS] A [SEP] B [SEP]`, `<s> A </s></s> B
//! </s>`), with BERT's token types (1 for the second text), and, when
//! truncating, transformers' `truncation=True` for pairs (`longest_first`:
//! tokens are taken from the longer text until the pair fits `max_len`).
use super::Head;
use crate::arch::Architecture;
use crate::encoder::{EncodeOptions, Encoder};
use crate::engine::Workspace;
use crate::error::{EncoderError, Result};
use crate::precision::Precision;
use crate::tokenize::{CHARS_PER_TOKEN, CUT_SLACK};
use crate::tuning::TuneOptions;
use crate::workers::run_batches;
use crate::EmbeddingCache;
use std::sync::Mutex;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// A loaded cross-encoder: the encoder, its classification head and a
/// tokenizer for pairs.
pub struct CrossEncoder {
    encoder: Encoder,
    head: Head,
    /// The encoder's tokenizer with `longest_first` truncation at `max_len`,
    /// keeping the first tokens ([`Truncation::Right`]) and the last ([`Truncation::Left`]).
    right: Tokenizer,
    left: Tokenizer,
    /// Whether the model reads token types (BERT, DeBERTa-v2 with a token-type table).
    types: bool,
}

/// What to do with an input longer than `max_len` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Truncation {
    /// Refuse it ([`EncoderError::TooLong`]).
    Error,
    /// Cut the end of the longer text (transformers' `truncation=True`).
    #[default]
    Right,
    /// Cut the start of the longer text (`truncation_side="left"`).
    Left,
}

/// One tokenised input: ids with the special tokens, and their token types
/// (0 but for the second text of a BERT pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairTokens {
    pub ids: Vec<u32>,
    pub types: Vec<u32>,
}

impl CrossEncoder {
    /// Load `spec` (a directory or a hub id in the local cache) whose
    /// `config.json` names a supported `*ForSequenceClassification` class;
    /// `max_len` as [`Encoder::load`]; the kernels as [`TuneOptions::from_env`].
    pub fn load(spec: &str, max_len: Option<usize>, precision: Precision) -> Result<Self> {
        let tune = TuneOptions::from_env(Some(EmbeddingCache::default_dir()))?;
        Self::load_with_kernels(spec, max_len, precision, &tune)
    }

    /// [`CrossEncoder::load`] with the kernels chosen by `tune` (as
    /// [`Encoder::load_with_kernels`]).
    pub fn load_with_kernels(
        spec: &str,
        max_len: Option<usize>,
        precision: Precision,
        tune: &TuneOptions,
    ) -> Result<Self> {
        let (encoder, weights) = Encoder::load_with_weights(spec, max_len, precision, tune)?;
        let head = Head::load(&weights, encoder.config())?;
        if head.needs_pooler() && !encoder.model().has_pooler() {
            return Err(EncoderError::Weights(format!(
                "{} needs the pooler (pooler.dense.*), which this checkpoint does not have",
                head.class()
            )));
        }
        let truncating = |direction| -> Result<Tokenizer> {
            let mut t = encoder.tokenizer().inner().clone();
            t.with_truncation(Some(TruncationParams {
                direction,
                max_length: encoder.max_len(),
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| EncoderError::Tokenizer(e.to_string()))?;
            Ok(t)
        };
        let right = truncating(TruncationDirection::Right)?;
        let left = truncating(TruncationDirection::Left)?;
        let cfg = encoder.config();
        let types = cfg.architecture == Architecture::Bert
            || (cfg.architecture == Architecture::DebertaV2 && cfg.type_vocab_size > 0);
        Ok(Self {
            encoder,
            head,
            right,
            left,
            types,
        })
    }

    /// The encoder under the head (model id, kernels, fingerprint, ...).
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// The labels, one per logit, in `id2label` order.
    pub fn labels(&self) -> &[String] {
        self.head.labels()
    }

    /// The `*ForSequenceClassification` class of the checkpoint.
    pub fn class(&self) -> &str {
        self.head.class()
    }

    pub fn max_len(&self) -> usize {
        self.encoder.max_len()
    }

    /// `text` cut after `max_len` x [`CHARS_PER_TOKEN`] characters, back to the
    /// last whitespace (with `from_end`, the last as many characters, on to the
    /// first whitespace), when that still leaves `max_len` + [`CUT_SLACK`]
    /// tokens (so that truncation keeps the same tokens as from the whole
    /// text), else `text`; with whether it was cut.
    fn cut<'a>(&self, text: &'a str, from_end: bool) -> Result<(&'a str, bool)> {
        let max_len = self.max_len();
        let limit = max_len.saturating_mul(CHARS_PER_TOKEN);
        if text.len() <= limit {
            return Ok((text, false));
        }
        let part = if from_end {
            let Some((start, _)) = text.char_indices().rev().nth(limit) else {
                return Ok((text, false));
            };
            let tail = &text[start..];
            match tail.find(char::is_whitespace) {
                Some(p) if p + 1 < tail.len() => &tail[p..],
                _ => tail,
            }
        } else {
            let Some((end, _)) = text.char_indices().nth(limit) else {
                return Ok((text, false));
            };
            let head = &text[..end];
            match head.rfind(char::is_whitespace) {
                Some(p) if p > 0 => &head[..p],
                _ => head,
            }
        };
        let pieces = self.encoder.tokenizer().word_pieces(part)?;
        if pieces.len() >= max_len.saturating_add(CUT_SLACK) {
            Ok((part, true))
        } else {
            Ok((text, false))
        }
    }

    /// Ids and token types of `text` (and `pair`), truncated to `max_len` as
    /// `truncation` says (transformers' `longest_first`).
    pub fn tokenize(
        &self,
        text: &str,
        pair: Option<&str>,
        truncation: Truncation,
    ) -> Result<PairTokens> {
        let from_end = truncation == Truncation::Left;
        let (a, cut_a) = self.cut(text, from_end)?;
        let (b, cut_b) = match pair {
            Some(p) => {
                let (b, cut) = self.cut(p, from_end)?;
                (Some(b), cut)
            }
            None => (None, false),
        };
        let tok = match truncation {
            Truncation::Error => self.encoder.tokenizer().inner(),
            Truncation::Right => &self.right,
            Truncation::Left => &self.left,
        };
        let tk = |e: tokenizers::Error| EncoderError::Tokenizer(e.to_string());
        let enc = match b {
            Some(b) => tok.encode_fast((a, b), true).map_err(tk)?,
            None => tok.encode_fast(a, true).map_err(tk)?,
        };
        let max_len = self.max_len();
        if truncation == Truncation::Error && (cut_a || cut_b || enc.get_ids().len() > max_len) {
            let given = if cut_a || cut_b {
                format!("more than {}", max_len + CUT_SLACK)
            } else {
                enc.get_ids().len().to_string()
            };
            return Err(EncoderError::TooLong {
                given,
                max: max_len,
            });
        }
        let types = if self.types {
            enc.get_type_ids().to_vec()
        } else {
            vec![0; enc.get_ids().len()]
        };
        Ok(PairTokens {
            ids: enc.get_ids().to_vec(),
            types,
        })
    }

    /// The raw logits (one per label) of each input: a text, or a pair of texts
    /// read as one sequence; `truncation` says what becomes of inputs longer
    /// than `max_len` tokens. Inputs run in batches of equal token
    /// counts (nothing padded), so an input's logits do not depend on the others.
    pub fn predict<S: AsRef<str> + Sync>(
        &self,
        inputs: &[(S, Option<S>)],
        truncation: Truncation,
        opts: &EncodeOptions,
    ) -> Result<Vec<Vec<f32>>> {
        let toks = inputs
            .iter()
            .map(|(a, b)| self.tokenize(a.as_ref(), b.as_ref().map(|b| b.as_ref()), truncation))
            .collect::<Result<Vec<_>>>()?;
        self.predict_tokens(&toks, opts)
    }

    /// The raw logits (one per label) of inputs already tokenised by
    /// [`CrossEncoder::tokenize`] (each 1 to `max_len` ids), as
    /// [`CrossEncoder::predict`] runs them.
    pub fn predict_tokens(
        &self,
        toks: &[PairTokens],
        opts: &EncodeOptions,
    ) -> Result<Vec<Vec<f32>>> {
        let max_len = self.max_len();
        if let Some(bad) = toks
            .iter()
            .find(|t| t.ids.is_empty() || t.ids.len() > max_len || t.types.len() != t.ids.len())
        {
            return Err(EncoderError::Unsupported(format!(
                "an input of {} token ids and {} types, outside 1..={max_len} or unequal",
                bad.ids.len(),
                bad.types.len()
            )));
        }
        let mut order: Vec<usize> = (0..toks.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(toks[i].ids.len()));
        let bs = opts.batch_size.max(1);
        let batches: Vec<&[usize]> = order
            .chunk_by(|&a, &b| toks[a].ids.len() == toks[b].ids.len())
            .flat_map(|run| run.chunks(bs))
            .collect();
        let n_labels = self.labels().len();
        let out = Mutex::new(vec![Vec::new(); toks.len()]);
        run_batches(
            batches.len(),
            opts.threads,
            |b, ws| self.run_batch(batches[b], toks, ws),
            |b, logits| {
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                for (&i, row) in batches[b].iter().zip(logits.chunks_exact(n_labels)) {
                    out[i] = row.to_vec();
                }
            },
        )?;
        Ok(out.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// One padded forward pass and the head: `batch.len()` rows of logits.
    fn run_batch(
        &self,
        batch: &[usize],
        toks: &[PairTokens],
        ws: &mut Workspace,
    ) -> Result<Vec<f32>> {
        let lens: Vec<usize> = batch.iter().map(|&i| toks[i].ids.len()).collect();
        let t = lens.iter().copied().max().unwrap_or(0);
        let model = self.encoder.model();
        let pad = model.config.pad_token_id as u32;
        let mut ids = vec![pad; batch.len() * t];
        let mut types = vec![0u32; batch.len() * t];
        for (row, &i) in batch.iter().enumerate() {
            let n = toks[i].ids.len();
            ids[row * t..row * t + n].copy_from_slice(&toks[i].ids);
            types[row * t..row * t + n].copy_from_slice(&toks[i].types);
        }
        let upto = model.num_layers();
        if self.types {
            model.forward_typed_into(&ids, &types, &lens, t, upto, ws)?;
        } else {
            model.forward_into(&ids, &lens, t, upto, ws)?;
        }
        let last = &ws.states()[upto];
        self.head
            .logits(last, &lens, t, self.encoder.dim(), |cls| model.pool(cls))
    }
}
