//! Tokenisation: `tokenizer.json` (WordPiece, byte-level BPE as RoBERTa's,
//! SentencePiece Unigram as XLM-R's and CamemBERT's, with the post-processor it
//! names: `[CLS] ... [SEP]` or `<s> ... </s>`), or a plain BERT WordPiece
//! tokenizer built from `vocab.txt`. Padding and truncation stored in
//! tokenizer.json are ignored: bertflow pads to the longest sentence of a batch
//! and truncates at `max_len`.
use crate::error::{EncoderError, Result};
use crate::files::TokenizerFile;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::Tokenizer;

/// Characters kept per token of `max_len` before tokenising
/// ([`TextTokenizer::encode_prefix`]): English text averages 4 to 5
/// characters per WordPiece token, so 32 leaves a wide margin.
pub const CHARS_PER_TOKEN: usize = 32;
/// Tokens beyond `max_len` a cut text must give for the cut to be used.
pub const CUT_SLACK: usize = 16;

/// A tokenizer that yields `[CLS] ... [SEP]` (or `<s> ... </s>`) id sequences.
pub struct TextTokenizer {
    inner: Tokenizer,
    /// The id that ends every sentence (kept by truncation), if the
    /// post-processor closes sentences with one.
    sep_id: Option<u32>,
    /// The tokenizer's special tokens (`added_tokens` with `special: true`, and
    /// the bracketed names of [`is_special`]), the unknown
    /// token excepted: it stands for a real word.
    special: std::collections::HashSet<u32>,
}

fn tok_err(e: impl std::fmt::Display) -> EncoderError {
    EncoderError::Tokenizer(e.to_string())
}

impl TextTokenizer {
    pub fn load(file: &TokenizerFile) -> Result<Self> {
        let mut inner = match file {
            TokenizerFile::Json(path) => {
                Tokenizer::from_file(path).map_err(|e| EncoderError::BadFile {
                    path: path.clone(),
                    msg: e.to_string(),
                })?
            }
            TokenizerFile::Vocab { vocab, lowercase } => {
                let path = vocab
                    .to_str()
                    .ok_or_else(|| tok_err("vocab path is not UTF-8"))?;
                let wp = WordPiece::from_file(path)
                    .unk_token("[UNK]".into())
                    .build()
                    .map_err(|e| EncoderError::BadFile {
                        path: vocab.clone(),
                        msg: e.to_string(),
                    })?;
                let mut t = Tokenizer::new(wp);
                t.with_normalizer(Some(BertNormalizer::new(true, true, None, *lowercase)))
                    .map_err(tok_err)?;
                t.with_pre_tokenizer(Some(BertPreTokenizer));
                let id = |s: &str| {
                    t.token_to_id(s)
                        .ok_or_else(|| tok_err(format!("{} has no {s} token", vocab.display())))
                };
                let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
                t.with_post_processor(Some(BertProcessing::new(
                    ("[SEP]".into(), sep),
                    ("[CLS]".into(), cls),
                )));
                t
            }
        };
        inner.with_padding(None);
        inner.with_truncation(None).map_err(tok_err)?;
        // The post-processor's closing token: the last of the (at least two) it
        // puts around an empty text.
        let framed = inner.encode_fast("", true).map_err(tok_err)?;
        let sep_id = match framed.get_ids() {
            [_, .., last] => Some(*last),
            // One special token: the closing one if it follows the text (Qwen's
            // `$A <|endoftext|>`); none if it opens it (`<bos> $A`).
            [only] => {
                let a = inner.encode_fast("a", true).map_err(tok_err)?;
                let ids = a.get_ids();
                (ids.last() == Some(only) && ids.first() != Some(only)).then_some(*only)
            }
            [] => Some(
                inner
                    .token_to_id("[SEP]")
                    .or_else(|| inner.token_to_id("</s>"))
                    .ok_or_else(|| tok_err("the tokenizer has no [SEP] or </s> token"))?,
            ),
        };
        let unknown = |t: &str| matches!(t, "[UNK]" | "<unk>");
        let mut special: std::collections::HashSet<u32> = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special && !unknown(&t.content))
            .map(|(id, _)| id)
            .collect();
        for name in SPECIAL_NAMES {
            special.extend(inner.token_to_id(name));
        }
        Ok(Self {
            inner,
            sep_id,
            special,
        })
    }

    /// Whether `id` is one of the tokenizer's special tokens (`[CLS]`, `<s>`,
    /// `</s>`, `<pad>`, ...; not the unknown token).
    pub fn is_special_id(&self, id: u32) -> bool {
        self.special.contains(&id)
    }

    /// Ids with special tokens (`[CLS] ... [SEP]`), not truncated.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, true).map_err(tok_err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids with special tokens of at least the first `max_len` tokens of
    /// `text` (lowercased first when `lowercase`), without tokenising all of
    /// a long text: the text is cut after `max_len` x [`CHARS_PER_TOKEN`]
    /// characters, back to the last whitespace before that point (so that
    /// every word kept is whole and tokenises as in the full text). When the
    /// cut text gives fewer than `max_len` + [`CUT_SLACK`] tokens (e.g. a text
    /// of mostly spaces), the whole text is tokenised instead: the first
    /// `max_len` ids are always those of the full text. A 20 MB line costs
    /// the tokenisation of 16,384 characters at `max_len` 512.
    pub fn encode_prefix(&self, text: &str, max_len: usize, lowercase: bool) -> Result<Vec<u32>> {
        let encode = |t: &str| {
            if lowercase {
                self.encode(&t.to_lowercase())
            } else {
                self.encode(t)
            }
        };
        let limit = max_len.saturating_mul(CHARS_PER_TOKEN);
        if text.len() > limit {
            if let Some((cut, _)) = text.char_indices().nth(limit) {
                let head = &text[..cut];
                let head = match head.rfind(char::is_whitespace) {
                    Some(p) if p > 0 => &head[..p],
                    _ => head,
                };
                let ids = encode(head)?;
                if ids.len() >= max_len.saturating_add(CUT_SLACK) {
                    return Ok(ids);
                }
            }
        }
        encode(text)
    }

    /// Word pieces without special tokens (for edit distances and frequencies).
    pub fn word_pieces(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(tok_err)?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Error unless every id the tokenizer can produce (its vocabulary and
    /// added tokens) is a row of the model's embedding table of `vocab_size`
    /// rows: a larger id would fail every request containing its token.
    pub fn check_ids_within(&self, vocab_size: usize) -> Result<()> {
        let past = self
            .inner
            .get_vocab(true)
            .into_iter()
            .filter(|&(_, id)| id as usize >= vocab_size)
            .max_by_key(|&(_, id)| id);
        match past {
            None => Ok(()),
            Some((token, id)) => Err(tok_err(format!(
                "token {token:?} has id {id}, past the model's vocabulary of {vocab_size} (config.json vocab_size)"
            ))),
        }
    }

    /// The `tokenizers` tokenizer (padding and truncation off), for pairs
    /// ([`crate::head`]).
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Truncate to `max_len` keeping the final `[SEP]` (`</s>`); returns whether
    /// anything was cut.
    pub fn truncate(&self, ids: &mut Vec<u32>, max_len: usize) -> bool {
        if ids.len() <= max_len {
            return false;
        }
        match self.sep_id {
            Some(sep) => {
                ids.truncate(max_len - 1);
                ids.push(sep);
            }
            None => ids.truncate(max_len),
        }
        true
    }
}

/// Token names always taken as special, whatever the tokenizer declares.
pub const SPECIAL_NAMES: [&str; 8] = [
    "[CLS]", "[SEP]", "[PAD]", "[MASK]", "<s>", "</s>", "<pad>", "<mask>",
];

/// Whether a token string is a special token by name (`[CLS]`, `[SEP]`,
/// `[PAD]`, `[MASK]`, `<s>`, `</s>`, `<pad>`, `<mask>`). `[UNK]` stands for a
/// real word and is not. The weights use the tokenizer's own list
/// ([`TextTokenizer::is_special_id`]), which includes these.
pub fn is_special(token: &str) -> bool {
    SPECIAL_NAMES.contains(&token)
}
