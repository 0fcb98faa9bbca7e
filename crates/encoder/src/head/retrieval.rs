//! [`RetrievalEncoder`]: the retrieval outputs of one forward pass — a dense
//! vector, a sparse vector and per-token vectors — of a SPLADE (`*ForMaskedLM`)
//! checkpoint, a BGE-M3-shaped directory (`sparse_linear.pt`,
//! `colbert_linear.pt`) or any encoder (per-token vectors only, plus the dense
//! first-token vector).
//!
//! - dense: the first token's last hidden state, L2-normalised (BGE-M3's dense).
//! - sparse: SPLADE on the masked-LM logits ([`super::mlm`]), or BGE-M3's
//!   token weights ([`super::bgem3`]); `max_active_dims` keeps the largest.
//! - multi: each real token's last hidden state, through the checkpoint's
//!   projection (`colbert_linear.pt`) when it has one, L2-normalised; the first
//!   token dropped when asked (by default for a model with `colbert_linear.pt`,
//!   as BGE-M3 does); a query may be padded with the mask token to a fixed
//!   length, every position attended (ColBERT's / PyLate's query augmentation).
//!
//! Texts run in batches of equal token counts (nothing padded), so a text's
//! outputs do not depend on the others.
use super::bgem3::{self, TokenWeights};
use super::mlm::{MlmHead, SpladeConfig};
use super::sparse::SparseVector;
use crate::encoder::{EncodeOptions, Encoder};
use crate::engine::Workspace;
use crate::error::{EncoderError, Result};
use crate::precision::Precision;
use crate::st::normalize_rows;
use crate::tuning::TuneOptions;
use crate::workers::run_batches;
use crate::EmbeddingCache;
use bertflow_kernels::{Act, PackedLinear};
use ndarray::Array2;
use serde_json::Value;
use std::sync::Mutex;

/// Which outputs to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outputs {
    pub dense: bool,
    pub sparse: bool,
    pub multi: bool,
}

impl Outputs {
    /// From a comma-separated list of `dense`, `sparse`, `multi`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut o = Self::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "dense" => o.dense = true,
                "sparse" => o.sparse = true,
                "multi" | "multi-vector" | "colbert" => o.multi = true,
                other => return Err(format!("unknown output '{other}' (dense, sparse, multi)")),
            }
        }
        if o == Self::default() {
            return Err("no output asked for (dense, sparse, multi)".into());
        }
        Ok(o)
    }
}

/// How to compute the outputs.
#[derive(Debug, Clone, Default)]
pub struct RetrievalOptions {
    pub outputs: Outputs,
    /// Keep only this many sparse entries (largest first).
    pub max_active_dims: Option<usize>,
    /// Drop the first token's vector; `None`: the model's default (dropped
    /// with `colbert_linear.pt`, kept otherwise).
    pub skip_first: Option<bool>,
    /// Queries: truncate to, then pad with the mask token to, this many tokens.
    pub query_length: Option<usize>,
}

/// The outputs of a list of texts, in input order (`None`: not asked for).
#[derive(Debug, Clone, Default)]
pub struct Retrieved {
    /// One row per text.
    pub dense: Option<Array2<f32>>,
    pub sparse: Option<Vec<SparseVector>>,
    /// One `[tokens, dim]` matrix per text.
    pub multi: Option<Vec<Array2<f32>>>,
    /// Tokens per text (after truncation or query padding).
    pub tokens: Vec<usize>,
}

enum SparseHead {
    Splade(Box<MlmHead>, SpladeConfig),
    TokenWeights(TokenWeights),
}

/// An encoder with its retrieval heads.
pub struct RetrievalEncoder {
    encoder: Encoder,
    sparse: Option<SparseHead>,
    projection: Option<PackedLinear>,
    /// Ids BGE-M3's sparse output drops (cls, eos, pad, unk).
    unused: Vec<u32>,
    mask_id: Option<u32>,
}

/// One text's outputs.
type Row = (Option<Vec<f32>>, Option<SparseVector>, Option<Vec<f32>>);

impl RetrievalEncoder {
    /// Load `spec` (as [`Encoder::load`]); the kernels as [`TuneOptions::from_env`].
    pub fn load(spec: &str, max_len: Option<usize>, precision: Precision) -> Result<Self> {
        let tune = TuneOptions::from_env(Some(EmbeddingCache::default_dir()))?;
        Self::load_with_kernels(spec, max_len, precision, &tune)
    }

    /// [`RetrievalEncoder::load`] with the kernels chosen by `tune`.
    pub fn load_with_kernels(
        spec: &str,
        max_len: Option<usize>,
        precision: Precision,
        tune: &TuneOptions,
    ) -> Result<Self> {
        let (encoder, weights) = Encoder::load_with_weights(spec, max_len, precision, tune)?;
        let dir = encoder.files().dir.clone();
        let h = encoder.dim();
        let sparse = if super::mlm::mlm_class(&encoder.config().raw).is_some() {
            let head = MlmHead::load(&weights, encoder.model())?;
            Some(SparseHead::Splade(Box::new(head), splade_config(&encoder)?))
        } else if dir.join(bgem3::SPARSE_FILE).is_file() {
            Some(SparseHead::TokenWeights(TokenWeights::load(
                &dir.join(bgem3::SPARSE_FILE),
                h,
            )?))
        } else {
            None
        };
        let colbert = dir.join(bgem3::COLBERT_FILE);
        let projection = if colbert.is_file() {
            Some(bgem3::projection(&colbert, h)?)
        } else {
            None
        };
        let tok = encoder.tokenizer();
        let mut unused: Vec<u32> = ["<s>", "</s>", "<pad>", "<unk>", "[CLS]", "[PAD]", "[UNK]"]
            .iter()
            .filter_map(|t| tok.token_to_id(t))
            .collect();
        unused.push(encoder.config().pad_token_id as u32);
        unused.sort_unstable();
        unused.dedup();
        let mask_id = ["[MASK]", "<mask>"].iter().find_map(|t| tok.token_to_id(t));
        Ok(Self {
            encoder,
            sparse,
            projection,
            unused,
            mask_id,
        })
    }

    /// The encoder under the heads.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Whether the model has a sparse head (SPLADE or BGE-M3's).
    pub fn has_sparse(&self) -> bool {
        self.sparse.is_some()
    }

    /// `splade` (a masked-LM head), `bge-m3` (token weights) or `None`.
    pub fn sparse_kind(&self) -> Option<&'static str> {
        match self.sparse {
            Some(SparseHead::Splade(..)) => Some("splade"),
            Some(SparseHead::TokenWeights(_)) => Some("bge-m3"),
            None => None,
        }
    }

    /// The `*ForMaskedLM` class of a SPLADE model.
    pub fn mlm_class(&self) -> Option<&str> {
        match &self.sparse {
            Some(SparseHead::Splade(head, _)) => Some(head.class()),
            _ => None,
        }
    }

    /// The sparse vectors' dimension (the vocabulary size).
    pub fn sparse_dim(&self) -> usize {
        self.encoder.config().vocab_size
    }

    /// The per-token vectors' dimension (the projection's, else hidden).
    pub fn multi_dim(&self) -> usize {
        self.projection
            .as_ref()
            .map_or(self.encoder.dim(), |p| p.out_dim())
    }

    /// Whether the model has a per-token projection (`colbert_linear.pt`).
    pub fn has_projection(&self) -> bool {
        self.projection.is_some()
    }

    /// The token of `id` (for naming sparse entries).
    pub fn token(&self, id: u32) -> String {
        self.encoder
            .tokenizer()
            .id_to_token(id)
            .unwrap_or_else(|| format!("[{id}]"))
    }

    /// The ids of `text` as the outputs read it (truncated; a query padded).
    pub fn tokenize(&self, text: &str, query_length: Option<usize>) -> Result<Vec<u32>> {
        let Some(q) = query_length else {
            return Ok(self.encoder.tokenize(text)?.0);
        };
        let max = self.encoder.max_len();
        if q < 2 || q > max {
            return Err(EncoderError::BadMaxLen(q, max));
        }
        let mask = self.mask_id.ok_or_else(|| {
            EncoderError::Unsupported(
                "query padding needs a mask token ([MASK] or <mask>), which this tokenizer lacks"
                    .into(),
            )
        })?;
        let mut ids = self.encoder.tokenizer().encode_prefix(text, q, false)?;
        self.encoder.tokenizer().truncate(&mut ids, q);
        ids.resize(q, mask);
        Ok(ids)
    }

    /// The outputs `opts` asks for of each text.
    pub fn encode<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        opts: &RetrievalOptions,
        run: &EncodeOptions,
    ) -> Result<Retrieved> {
        self.check(opts)?;
        let toks = texts
            .iter()
            .map(|t| self.tokenize(t.as_ref(), opts.query_length))
            .collect::<Result<Vec<_>>>()?;
        self.encode_ids(&toks, opts, run)
    }

    /// The outputs `opts` asks for of inputs already tokenised by
    /// [`RetrievalEncoder::tokenize`] (each 1 to `max_len` ids; a query
    /// already padded: `opts.query_length` is not applied again).
    pub fn encode_ids(
        &self,
        toks: &[Vec<u32>],
        opts: &RetrievalOptions,
        run: &EncodeOptions,
    ) -> Result<Retrieved> {
        self.check(opts)?;
        let max_len = self.encoder.max_len();
        let vocab = self.encoder.config().vocab_size;
        if let Some(bad) = toks.iter().find(|t| t.is_empty() || t.len() > max_len) {
            return Err(EncoderError::Unsupported(format!(
                "an input of {} token ids, outside 1..={max_len}",
                bad.len()
            )));
        }
        if let Some(&id) = toks.iter().flatten().find(|&&id| id as usize >= vocab) {
            return Err(EncoderError::Unsupported(format!(
                "token id {id} is outside the vocabulary (0..{vocab})"
            )));
        }
        let mut order: Vec<usize> = (0..toks.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(toks[i].len()));
        let bs = run.batch_size.max(1);
        let batches: Vec<&[usize]> = order
            .chunk_by(|&a, &b| toks[a].len() == toks[b].len())
            .flat_map(|r| r.chunks(bs))
            .collect();
        let out: Mutex<Vec<Option<Row>>> = Mutex::new(vec![None; toks.len()]);
        run_batches(
            batches.len(),
            run.threads,
            |b, ws| self.run_batch(batches[b], toks, opts, ws),
            |b, rows| {
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                for (&i, row) in batches[b].iter().zip(rows) {
                    out[i] = Some(row);
                }
            },
        )?;
        let rows = out.into_inner().unwrap_or_else(|e| e.into_inner());
        self.collect(rows, toks, opts)
    }

    /// The options' own checks: a sparse output needs a sparse head.
    fn check(&self, opts: &RetrievalOptions) -> Result<()> {
        if opts.outputs.sparse && self.sparse.is_none() {
            return Err(EncoderError::Unsupported(format!(
                "{} has no sparse head: a sparse output needs a *ForMaskedLM checkpoint (SPLADE) \
                 or a {} beside the weights (BGE-M3)",
                self.encoder.model_id(),
                bgem3::SPARSE_FILE
            )));
        }
        if opts.max_active_dims == Some(0) {
            return Err(EncoderError::Unsupported(
                "max_active_dims must be a positive integer".into(),
            ));
        }
        Ok(())
    }

    fn collect(
        &self,
        rows: Vec<Option<Row>>,
        toks: &[Vec<u32>],
        opts: &RetrievalOptions,
    ) -> Result<Retrieved> {
        let h = self.encoder.dim();
        let d = self.multi_dim();
        let mut dense = Vec::new();
        let mut sparse = Vec::new();
        let mut multi = Vec::new();
        for row in rows {
            let (de, sp, mu) = row.ok_or_else(|| {
                EncoderError::Unsupported("a text was left out of every batch".into())
            })?;
            dense.extend(de.unwrap_or_default());
            sparse.extend(sp);
            if let Some(m) = mu {
                let n = m.len() / d;
                multi.push(
                    Array2::from_shape_vec((n, d), m)
                        .map_err(|e| EncoderError::Unsupported(e.to_string()))?,
                );
            }
        }
        let n = toks.len();
        let o = opts.outputs;
        Ok(Retrieved {
            dense: if o.dense {
                Some(
                    Array2::from_shape_vec((n, h), dense)
                        .map_err(|e| EncoderError::Unsupported(e.to_string()))?,
                )
            } else {
                None
            },
            sparse: o.sparse.then_some(sparse),
            multi: o.multi.then_some(multi),
            tokens: toks.iter().map(Vec::len).collect(),
        })
    }

    /// One forward pass of texts of equal length and their outputs.
    fn run_batch(
        &self,
        batch: &[usize],
        toks: &[Vec<u32>],
        opts: &RetrievalOptions,
        ws: &mut Workspace,
    ) -> Result<Vec<Row>> {
        let t = toks[batch[0]].len();
        let lens = vec![t; batch.len()];
        let ids: Vec<u32> = batch
            .iter()
            .flat_map(|&i| toks[i].iter().copied())
            .collect();
        let model = self.encoder.model();
        let upto = model.num_layers();
        model.forward_into(&ids, &lens, t, upto, ws)?;
        let h = self.encoder.dim();
        let last = &ws.states()[upto];
        let skip = usize::from(opts.skip_first.unwrap_or(self.projection.is_some()));
        let mut logits = Vec::new();
        let mut rows = Vec::with_capacity(batch.len());
        for (r, &i) in batch.iter().enumerate() {
            let x = &last[r * t * h..(r + 1) * t * h];
            let dense = opts.outputs.dense.then(|| {
                let mut v = x[..h].to_vec();
                normalize_rows(&mut v, h);
                v
            });
            let sparse = if opts.outputs.sparse {
                let mut v = match &self.sparse {
                    Some(SparseHead::Splade(head, cfg)) => {
                        SparseVector::from_dense(&head.splade(x, *cfg, &mut logits)?)
                    }
                    Some(SparseHead::TokenWeights(tw)) => SparseVector::from_pairs(
                        toks[i]
                            .iter()
                            .zip(tw.weights(x))
                            .filter(|(id, _)| self.unused.binary_search(id).is_err())
                            .map(|(&id, w)| (id, w))
                            .collect(),
                    ),
                    None => unreachable!("checked before the pass"),
                };
                if let Some(k) = opts.max_active_dims {
                    v.top_k(k);
                }
                Some(v)
            } else {
                None
            };
            let multi = if opts.outputs.multi {
                let x = &x[skip.min(t) * h..];
                let rows = x.len() / h;
                let mut v = match &self.projection {
                    Some(p) => {
                        let mut out = vec![0f32; rows * p.out_dim()];
                        p.forward(x, rows, None, Act::None, &mut out)
                            .map_err(|e| EncoderError::Unsupported(format!("projection: {e}")))?;
                        out
                    }
                    None => x.to_vec(),
                };
                normalize_rows(&mut v, self.multi_dim());
                Some(v)
            } else {
                None
            };
            rows.push((dense, sparse, multi));
        }
        Ok(rows)
    }
}

/// The `SpladePooling` settings of a sentence-transformers directory
/// (`modules.json` naming a `SpladePooling` module), else the defaults.
fn splade_config(encoder: &Encoder) -> Result<SpladeConfig> {
    let Some(root) = &encoder.files().st_root else {
        return Ok(SpladeConfig::default());
    };
    let read = |p: &std::path::Path| -> Result<Value> {
        let text = std::fs::read_to_string(p).map_err(crate::error::io_err(p))?;
        serde_json::from_str(&text).map_err(|e| EncoderError::BadFile {
            path: p.to_path_buf(),
            msg: e.to_string(),
        })
    };
    let modules = read(&root.join("modules.json"))?;
    let splade = modules.as_array().and_then(|m| {
        m.iter().find(|m| {
            m.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("SpladePooling"))
        })
    });
    let Some(path) = splade.and_then(|m| m.get("path")).and_then(Value::as_str) else {
        return Ok(SpladeConfig::default());
    };
    let cfg = root.join(path).join("config.json");
    if !cfg.is_file() {
        return Ok(SpladeConfig::default());
    }
    SpladeConfig::from_json(&read(&cfg)?).map_err(|msg| EncoderError::BadFile { path: cfg, msg })
}
