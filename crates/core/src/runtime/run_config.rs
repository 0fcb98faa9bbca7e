//! [`RuntimeConfig`]: how any model is run — its maximum length, batch size,
//! threads, cache directory and precision — shared by the embedder
//! ([`crate::EmbedderConfig`]), the reranker ([`crate::RerankerConfig`]) and
//! the retrieval heads ([`crate::retrieval::Retriever`]), with the one
//! preamble every load runs (kernels, encode options).
use crate::error::Result;
use bertflow_encoder::{EmbeddingCache, EncodeOptions, Precision, TuneOptions};
use std::path::PathBuf;

/// How to run a model. With core's `clap` feature it is part of the command
/// line's model options (flattened); it reads and writes as JSON (serde),
/// flattened into the config that holds it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RuntimeConfig {
    /// Cut inputs at this many tokens, special tokens included (a reranker's query
    /// and text together, taking tokens from the longer) [default: the model's
    /// position limit, 512 for BERT and RoBERTa]. Padding and truncation stored in
    /// tokenizer.json are ignored.
    #[cfg_attr(feature = "clap", arg(long, value_name = "TOKENS"))]
    pub max_len: Option<usize>,
    /// Inputs per forward pass (sorted by length first).
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value_t = crate::runtime::defaults::BATCH_SIZE, value_name = "N")
    )]
    pub batch_size: usize,
    /// Worker threads; each runs whole batches on one core [default:
    /// $BERTFLOW_THREADS, else all cores].
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub threads: Option<usize>,
    /// Where encoded embeddings are cached and kernels.json (the kernels chosen for
    /// this CPU) is kept [default: $BERTFLOW_CACHE, else $XDG_CACHE_HOME/bertflow,
    /// else ~/.cache/bertflow].
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub cache_dir: Option<PathBuf>,
    /// Precision of the transformer layers' linear products: fp32 (kernel chosen
    /// by measurement once per CPU, kept in kernels.json in the cache directory,
    /// or forced with BERTFLOW_FP32_KERNEL=avx512pair|avx512|avx2|scalar), or int8 (s8
    /// weights per output channel, u8 activations per row; AVX512-VNNI, AVX-VNNI,
    /// AVX2 or portable kernel chosen likewise, or forced with
    /// BERTFLOW_INT8_KERNEL=avx512vnni|avxvnni|avx2|scalar); heads stay fp32.
    /// BERTFLOW_TUNE=0: no measuring, the rule by CPU family. Default:
    /// $BERTFLOW_PRECISION, else fp32.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value_t = crate::runtime::defaults::precision().unwrap_or_default(), value_parser = crate::runtime::parse::parse_precision)
    )]
    #[serde(with = "crate::runtime::parse::as_str")]
    pub precision: Precision,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            max_len: None,
            batch_size: crate::runtime::defaults::BATCH_SIZE,
            threads: None,
            cache_dir: None,
            precision: crate::runtime::defaults::precision().unwrap_or_default(),
        }
    }
}

impl RuntimeConfig {
    /// The cache directory: as given, else [`EmbeddingCache::default_dir`].
    pub fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(EmbeddingCache::default_dir)
    }

    /// How the kernels are chosen ([`TuneOptions::from_env`] with kernels.json
    /// in the cache directory); `write`: whether a new choice is saved there.
    pub fn tune(&self, write: bool) -> bertflow_encoder::Result<TuneOptions> {
        let mut tune = TuneOptions::from_env(Some(self.cache_dir()))?;
        tune.write = write;
        Ok(tune)
    }

    /// The batch size (at least 1) and threads (as given, else
    /// $BERTFLOW_THREADS, else all cores); a bad $BERTFLOW_PRECISION is an
    /// error here too (where a front end gave the precision, the default
    /// above fell back to fp32 silently).
    pub fn options(&self) -> Result<EncodeOptions> {
        crate::runtime::defaults::precision()?;
        let mut opts = EncodeOptions::default();
        set_batch_size(&mut opts, self.batch_size)?;
        if let Some(t) = crate::runtime::defaults::threads(self.threads)? {
            opts.threads = t;
        }
        Ok(opts)
    }
}

/// The one rule for a batch size: at least 1 sentence per forward pass.
pub(crate) fn set_batch_size(opts: &mut EncodeOptions, n: usize) -> Result<()> {
    if n == 0 {
        return Err(crate::CoreError::setting(
            "batch_size",
            "must be at least 1, got 0",
        ));
    }
    opts.batch_size = n;
    Ok(())
}
