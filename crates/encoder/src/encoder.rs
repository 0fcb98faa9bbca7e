//! Batched encoding: tokenise, sort by length, run batches on worker threads,
//! pool, restore the input order.
use crate::config::ModelConfig;
use crate::engine::{Model, Workspace};
use crate::error::{io_err, EncoderError, Result};
use crate::files::{ModelFiles, TokenizerFile, WeightsFile};
use crate::pooling::{masked_mean, PoolSource, Pooling};
use crate::precision::Precision;
use crate::st::{CalibratorLoader, StSpec};
use crate::tokenize::TextTokenizer;
use crate::tuning::{self, KernelChoice, TuneOptions};
use crate::weighting::TokenWeights;
use crate::weights::Weights;
use crate::EmbeddingCache;
use ndarray::Array2;
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

mod pass;

/// How to run the encoder.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Sentences per forward pass (after sorting by length).
    pub batch_size: usize,
    /// Worker threads, each running whole batches (every product of a batch on
    /// its worker's thread).
    pub threads: usize,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            batch_size: 32,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }
}

/// Result of encoding: one matrix per requested pooling, rows in input order.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub embeddings: Vec<Array2<f32>>,
    /// Tokens per sentence after truncation, special tokens included.
    pub tokens: Vec<usize>,
    /// Whether each sentence was longer than `max_len` tokens (and was truncated).
    pub truncated: Vec<bool>,
}

impl Encoded {
    /// How many sentences were truncated.
    pub fn num_truncated(&self) -> usize {
        self.truncated.iter().filter(|&&t| t).count()
    }
}

/// A loaded model of any supported architecture with its tokenizer.
pub struct Encoder {
    files: ModelFiles,
    tokenizer: TextTokenizer,
    model: Model,
    max_len: usize,
    /// Hash of the files, with `-<precision>` appended unless fp32.
    fingerprint: String,
    files_fingerprint: String,
    /// The process's kernels when this model was loaded.
    kernels: KernelChoice,
}

impl Encoder {
    /// Load `spec` (a directory or a hub id in the local cache). `max_len` defaults to
    /// the model's token limit (512 for BERT and RoBERTa: `max_position_embeddings`,
    /// less `padding_idx + 1` where positions start after the padding index).
    pub fn load(spec: &str, max_len: Option<usize>) -> Result<Self> {
        Self::load_with_precision(spec, max_len, Precision::Fp32)
    }

    /// [`Encoder::load`] with the linear layers in `precision`; the kernels as
    /// [`TuneOptions::from_env`] says, with `kernels.json` in
    /// [`EmbeddingCache::default_dir`] (see [`crate::tuning`]).
    pub fn load_with_precision(
        spec: &str,
        max_len: Option<usize>,
        precision: Precision,
    ) -> Result<Self> {
        let tune = TuneOptions::from_env(Some(EmbeddingCache::default_dir()))?;
        Self::load_with_kernels(spec, max_len, precision, &tune)
    }

    /// [`Encoder::load_with_precision`] with the kernels chosen by `tune` (the
    /// first load of a process chooses, later ones reuse the choice:
    /// [`tuning::process_choice`]).
    pub fn load_with_kernels(
        spec: &str,
        max_len: Option<usize>,
        precision: Precision,
        tune: &TuneOptions,
    ) -> Result<Self> {
        Self::load_with_weights(spec, max_len, precision, tune).map(|(e, _)| e)
    }

    /// [`Encoder::load_with_kernels`], and the checkpoint's tensors (a task head
    /// reads its own from them: [`crate::head`]).
    pub(crate) fn load_with_weights(
        spec: &str,
        max_len: Option<usize>,
        precision: Precision,
        tune: &TuneOptions,
    ) -> Result<(Self, Weights)> {
        let files = ModelFiles::resolve(spec)?;
        let text = std::fs::read_to_string(&files.config).map_err(io_err(&files.config))?;
        let config = ModelConfig::parse(&text).map_err(|msg| {
            if msg.starts_with("model_type") {
                EncoderError::Unsupported(msg)
            } else {
                EncoderError::BadFile {
                    path: files.config.clone(),
                    msg,
                }
            }
        })?;
        let limit = config.max_tokens;
        let max_len = max_len.unwrap_or(limit);
        if max_len < 2 || max_len > limit {
            return Err(EncoderError::BadMaxLen(max_len, limit));
        }
        let tokenizer = TextTokenizer::load(&files.tokenizer)?;
        tokenizer.check_ids_within(config.vocab_size)?;
        let kernels = tuning::process_choice(&config, tune)?;
        let weights = Weights::load(&files.weights, config.architecture)?;
        let model = Model::load(&weights, config, precision)?;
        let files_fingerprint = fingerprint(&files)?;
        let fingerprint = match model.numerics() {
            None => files_fingerprint.clone(),
            Some(n) => format!("{files_fingerprint}-{n}"),
        };
        let encoder = Self {
            files,
            tokenizer,
            model,
            max_len,
            fingerprint,
            files_fingerprint,
            kernels,
        };
        Ok((encoder, weights))
    }

    pub fn files(&self) -> &ModelFiles {
        &self.files
    }
    pub fn model_id(&self) -> &str {
        &self.files.id
    }
    pub fn config(&self) -> &ModelConfig {
        &self.model.config
    }
    pub fn model(&self) -> &Model {
        &self.model
    }
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }
    pub fn max_len(&self) -> usize {
        self.max_len
    }
    pub fn dim(&self) -> usize {
        self.model.config.hidden_size
    }
    pub fn num_layers(&self) -> usize {
        self.model.num_layers()
    }
    /// A short hash of the model's files and, unless fp32, what decides the int8
    /// numbers ([`Model::numerics`], e.g. `-int8-8bit-v2`): equal fingerprints give
    /// equal vectors, so cache keys built from it keep fp32 and int8 vectors (and
    /// int8 passes of different code widths or versions) apart (the fp32
    /// fingerprint is the files' hash alone, as before precisions existed).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
    /// [`Encoder::fingerprint`] and the arithmetic of the fp32 kernel
    /// ([`bertflow_kernels::fp32::Path::numerics`]: `fma`, `pair` or `plain`,
    /// which differ in the last bits), e.g. `0123456789abcdef-fp32-pair` or
    /// `0123456789abcdef-int8-8bit-v2-fp32-fma` (the pooler's product stays
    /// fp32): the key of cached vectors, so that vectors computed by one kernel
    /// are never served as another's.
    pub fn vectors_fingerprint(&self) -> String {
        format!(
            "{}-fp32-{}",
            self.fingerprint,
            self.model.fp32_kernel().numerics()
        )
    }
    /// The kernels chosen for this process (and the notes of choosing them, on
    /// the process's first load).
    pub fn kernels(&self) -> &KernelChoice {
        &self.kernels
    }
    /// The hash of the model's files alone, whatever the precision: the same model
    /// (e.g. for a calibrator fitted on fp32 vectors and applied to int8 ones).
    pub fn files_fingerprint(&self) -> &str {
        &self.files_fingerprint
    }
    pub fn precision(&self) -> Precision {
        self.model.precision()
    }

    /// What `pooling` reads from this model; errors for out-of-range layers and for
    /// `pooler` on a checkpoint without pooler weights.
    pub fn source(&self, pooling: &Pooling) -> Result<PoolSource> {
        self.source_with(pooling, None)
    }

    /// [`Encoder::source`]; for `st`, `loader` reads the calibrator file of
    /// bertflow's module (without one such a directory is an error).
    pub fn source_with(
        &self,
        pooling: &Pooling,
        loader: Option<CalibratorLoader>,
    ) -> Result<PoolSource> {
        if *pooling == Pooling::St {
            let head = self
                .st_spec()?
                .head(self.dim(), self.num_layers(), self.max_len, loader)?;
            return Ok(PoolSource::St(Arc::new(head)));
        }
        let src = pooling.source(self.num_layers())?;
        if matches!(src, PoolSource::Pooler(_)) && !self.model.has_pooler() {
            return Err(EncoderError::NoPooler);
        }
        Ok(src)
    }

    /// The sentence-transformers pipeline of the model directory (`modules.json`).
    pub fn st_spec(&self) -> Result<StSpec> {
        let root = self.files.st_root.as_ref().ok_or_else(|| {
            EncoderError::Unsupported(format!(
                "pooling 'st' needs a sentence-transformers directory, and {} has no modules.json",
                self.files.dir.display()
            ))
        })?;
        StSpec::read(
            root,
            self.dim(),
            self.num_layers(),
            self.config().max_tokens,
        )
    }

    /// The static word-piece embedding matrix (vocab x hidden), a copy.
    pub fn word_embedding_matrix(&self) -> Result<Array2<f32>> {
        let words = self.model.word_embeddings().to_vec();
        let hidden = self.dim();
        Array2::from_shape_vec((words.len() / hidden, hidden), words)
            .map_err(|e| EncoderError::Unsupported(format!("word embeddings: {e}")))
    }

    /// Token ids with special tokens, truncated at `max_len`; the flag says whether
    /// the sentence was cut.
    pub fn tokenize(&self, text: &str) -> Result<(Vec<u32>, bool)> {
        self.tokenize_for(text, None)
    }

    /// [`Encoder::tokenize`] as `source` reads its input: an `st` pipeline has its
    /// own truncation and may lowercase.
    pub fn tokenize_for(
        &self,
        text: &str,
        source: Option<&PoolSource>,
    ) -> Result<(Vec<u32>, bool)> {
        let (max_len, lower) = tokenization(source, self.max_len);
        let mut ids = self.tokenizer.encode_prefix(text, max_len, lower)?;
        let cut = self.tokenizer.truncate(&mut ids, max_len);
        Ok((ids, cut))
    }
}

/// The truncation and lowercasing `source` tokenises with (`max_len`, as is,
/// for every pooling but `st`).
fn tokenization(source: Option<&PoolSource>, max_len: usize) -> (usize, bool) {
    match source {
        Some(PoolSource::St(head)) => (head.max_len, head.lowercase),
        _ => (max_len, false),
    }
}

/// Hash of config, tokenizer and (size, head and tail of) the weights file.
fn fingerprint(files: &ModelFiles) -> Result<String> {
    let mut h = Sha256::new();
    let mut add_file = |path: &std::path::Path| -> Result<()> {
        h.update(std::fs::read(path).map_err(io_err(path))?);
        Ok(())
    };
    add_file(&files.config)?;
    match &files.tokenizer {
        TokenizerFile::Json(p) => add_file(p)?,
        TokenizerFile::Vocab { vocab, lowercase } => {
            add_file(vocab)?;
            h.update([*lowercase as u8]);
        }
    }
    let w = match &files.weights {
        WeightsFile::Safetensors(p) | WeightsFile::Pytorch(p) => p,
    };
    let mut f = std::fs::File::open(w).map_err(io_err(w))?;
    let len = f.metadata().map_err(io_err(w))?.len();
    h.update(len.to_le_bytes());
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    f.read_exact(&mut buf).map_err(io_err(w))?;
    h.update(&buf);
    f.seek(SeekFrom::Start(len.saturating_sub(CHUNK)))
        .map_err(io_err(w))?;
    f.read_exact(&mut buf).map_err(io_err(w))?;
    h.update(&buf);
    Ok(h.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect())
}
