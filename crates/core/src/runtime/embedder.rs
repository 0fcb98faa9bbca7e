//! Turning sentence sets into embedding matrices through the cache: each
//! (sentence set, pooling) pair is one cache entry; whatever is missing is
//! encoded in a single pass over the model for all poolings at once.
use crate::error::{Context, Result};
use crate::runtime::progress::{silent, SharedProgress};
use crate::runtime::prompt::{Prompt, PromptConfig};
use crate::runtime::run_config::RuntimeConfig;
use bertflow_encoder::st::StPrompts;
use bertflow_encoder::{
    CachedEntry, EmbeddingCache, EncodeOptions, Encoder, PoolSource, Pooling, Precision,
    TokenWeights,
};
use ndarray::Array2;
use std::collections::HashMap;

/// The default model directory (see [`crate::runtime::defaults::model`] for where it is found).
pub const DEFAULT_MODEL: &str = crate::runtime::defaults::MODEL_DIR;

/// How to load and run the encoder: what every front end asks for. With
/// core's `clap` feature it is also the command line's model options (the
/// CLI flattens it); it reads and writes as JSON (serde) for the server.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct EmbedderConfig {
    /// Model: a directory in Hugging Face layout (config.json, model.safetensors or
    /// pytorch_model.bin, tokenizer.json or vocab.txt), a sentence-transformers
    /// directory, or a hub id (e.g. bert-base-uncased) found in the local Hugging Face
    /// cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub). config.json's
    /// model_type: bert, roberta, xlm-roberta, camembert, distilbert, mpnet,
    /// modernbert, deberta-v2, nomic_bert, gte, jina_embeddings_v3, qwen3, qwen2,
    /// gemma3(_text) or eurobert (docs/models-and-poolings.md). Default:
    /// $BERTFLOW_MODEL, else models/all-MiniLM-L6-v2 in the working directory or
    /// in the checkout bertflow was built in.
    #[cfg_attr(
        feature = "clap",
        arg(long, short = 'm', default_value_t = crate::runtime::defaults::model())
    )]
    pub model: String,
    /// Maximum length, batch size, threads, cache directory and precision.
    #[cfg_attr(feature = "clap", command(flatten))]
    #[serde(flatten)]
    pub runtime: RuntimeConfig,
    /// Neither read nor write the embedding cache (the kernels chosen for this
    /// CPU are still read from kernels.json there, never written).
    #[cfg_attr(feature = "clap", arg(long))]
    pub no_cache: bool,
    /// The prompt before every text (`crate::runtime::prompt`'s rule; the commands
    /// that offer `--prompt-name`/`--prompt` flatten them separately).
    #[cfg_attr(feature = "clap", arg(skip))]
    #[serde(flatten)]
    pub prompt: PromptConfig,
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        Self {
            model: crate::runtime::defaults::model(),
            runtime: RuntimeConfig::default(),
            no_cache: false,
            prompt: PromptConfig::default(),
        }
    }
}

impl EmbedderConfig {
    /// Loads the model. The kernels are chosen as [`bertflow_encoder::TuneOptions::from_env`]
    /// says, with `kernels.json` in the cache directory (read only with
    /// `no_cache`: nothing is written there); the notes of choosing go to
    /// `progress`.
    pub fn load(&self, progress: SharedProgress) -> Result<Embedder> {
        let run = &self.runtime;
        let opts = run.options()?;
        let load = || -> bertflow_encoder::Result<Encoder> {
            let tune = run.tune(!self.no_cache)?;
            Encoder::load_with_kernels(&self.model, run.max_len, run.precision, &tune)
                .map_err(crate::defaults::explain_missing_model)
        };
        let encoder = load().with_context(|| match run.precision {
            Precision::Fp32 => format!("cannot load model '{}'", self.model),
            p => format!("cannot load model '{}' ({p} precision)", self.model),
        })?;
        for note in &encoder.kernels().notes {
            progress.note(note);
        }
        let prompts = StPrompts::of_model(encoder.files())
            .with_context(|| format!("cannot load model '{}'", self.model))?;
        let prompt = crate::runtime::prompt::resolve(&prompts, &self.prompt, encoder.model_id())?;
        let cache = (!self.no_cache).then(|| EmbeddingCache::new(run.cache_dir()));
        Ok(Embedder {
            encoder,
            opts,
            cache,
            progress,
            prompts,
            prompt,
        })
    }
}

/// The encoder plus how to run it, where to cache, and where to report progress.
pub struct Embedder {
    pub encoder: Encoder,
    pub opts: EncodeOptions,
    pub cache: Option<EmbeddingCache>,
    pub progress: SharedProgress,
    /// The prompts the model defines (`config_sentence_transformers.json`).
    pub prompts: StPrompts,
    /// The prompt before every text it embeds (see [`crate::runtime::prompt`]).
    pub prompt: Option<Prompt>,
}

impl Embedder {
    /// An embedder without cache that reports nothing.
    pub fn new(encoder: Encoder, opts: EncodeOptions) -> Self {
        Self {
            encoder,
            opts,
            cache: None,
            progress: silent(),
            prompts: StPrompts::default(),
            prompt: None,
        }
    }

    /// The prompt `asked` resolves to for this model ([`crate::runtime::prompt::resolve`]).
    pub fn resolve_prompt(&self, asked: &PromptConfig) -> Result<Option<Prompt>> {
        crate::runtime::prompt::resolve(&self.prompts, asked, self.encoder.model_id())
    }

    /// Sentences per forward pass from now on (at least 1).
    pub fn set_batch_size(&mut self, n: usize) -> Result<()> {
        crate::runtime::run_config::set_batch_size(&mut self.opts, n)
    }

    /// Embeddings of each set for each pooling: result[set][pooling].
    pub fn embed_sets(
        &self,
        sets: &[&[String]],
        poolings: &[Pooling],
    ) -> Result<Vec<Vec<Array2<f32>>>> {
        self.embed_sets_weighted(sets, poolings, None)
    }

    /// [`Embedder::embed_sets`] with token weights for the averaging poolings
    /// (`None`: the plain mean). The cache keeps weighted and plain entries apart.
    pub fn embed_sets_weighted(
        &self,
        sets: &[&[String]],
        poolings: &[Pooling],
        weights: Option<&TokenWeights>,
    ) -> Result<Vec<Vec<Array2<f32>>>> {
        self.embed_sets_prompted(sets, poolings, weights, self.prompt.as_ref())
    }

    /// [`Embedder::embed_sets_weighted`] with `prompt` before every text in
    /// place of the embedder's own (the cache keys the prompted texts).
    pub fn embed_sets_prompted(
        &self,
        sets: &[&[String]],
        poolings: &[Pooling],
        weights: Option<&TokenWeights>,
        prompt: Option<&Prompt>,
    ) -> Result<Vec<Vec<Array2<f32>>>> {
        let prompted: Vec<Vec<String>>;
        let sets: Vec<&[String]> = match prompt {
            Some(p) => {
                prompted = sets
                    .iter()
                    .map(|set| crate::runtime::prompt::apply(Some(p), set))
                    .collect();
                prompted.iter().map(Vec::as_slice).collect()
            }
            None => sets.to_vec(),
        };
        let sets = sets.as_slice();
        let enc = &self.encoder;
        let weights = weights.filter(|w| !w.spec.is_plain_mean());
        let wkey = weights
            .map(|w| format!("|w={}", w.key()))
            .unwrap_or_default();
        let sources: Vec<PoolSource> = poolings
            .iter()
            .map(|p| crate::runtime::st_pipeline::source(enc, p))
            .collect::<Result<_, _>>()?;
        for src in &sources {
            crate::runtime::prompt::check_source(prompt, src)?;
        }
        let mut result: Vec<Vec<Option<Array2<f32>>>> =
            vec![vec![None; poolings.len()]; sets.len()];
        let mut truncated = 0usize;
        let mut total = 0usize;
        let mut hits = 0usize;
        let vectors_fp = enc.vectors_fingerprint();
        let key = |set: &[String], src: &PoolSource| {
            // Only the averaging poolings depend on the weights.
            let w = if matches!(src, PoolSource::Mean(_)) {
                wkey.as_str()
            } else {
                ""
            };
            // The fp32 kernel's arithmetic too: vectors of one kernel are never
            // served as another's.
            EmbeddingCache::key(&vectors_fp, &(src.key() + w), enc.max_len(), set)
        };
        if let Some(cache) = &self.cache {
            for (s, set) in sets.iter().enumerate() {
                for (p, src) in sources.iter().enumerate() {
                    if let Some(e) = cache.get(&key(set, src), set.len()) {
                        if e.embeddings.ncols() == src.dim(enc.dim()) {
                            if p == 0 {
                                truncated += e.truncated;
                                total += set.len();
                            }
                            result[s][p] = Some(e.embeddings);
                            hits += 1;
                        }
                    }
                }
            }
        }
        // Sentences of every set that misses any pooling, deduplicated.
        let missing_sets: Vec<usize> = (0..sets.len())
            .filter(|&s| result[s].iter().any(|r| r.is_none()))
            .collect();
        let missing_pool: Vec<usize> = (0..sources.len())
            .filter(|&p| missing_sets.iter().any(|&s| result[s][p].is_none()))
            .collect();
        if !missing_sets.is_empty() {
            let mut index: HashMap<&str, usize> = HashMap::new();
            let mut texts: Vec<&str> = Vec::new();
            for &s in &missing_sets {
                for t in sets[s] {
                    index.entry(t.as_str()).or_insert_with(|| {
                        texts.push(t);
                        texts.len() - 1
                    });
                }
            }
            let srcs: Vec<PoolSource> = missing_pool.iter().map(|&p| sources[p].clone()).collect();
            let pb = self
                .progress
                .bar(texts.len() as u64, "encoding", "sentences");
            let out = enc.encode_weighted(&texts, &srcs, &self.opts, weights, &|done| {
                pb.set_position(done as u64)
            })?;
            pb.finish();
            for &s in &missing_sets {
                let rows: Vec<usize> = sets[s].iter().map(|t| index[t.as_str()]).collect();
                let set_trunc = rows.iter().filter(|&&r| out.truncated[r]).count();
                for (k, &p) in missing_pool.iter().enumerate() {
                    if result[s][p].is_some() {
                        continue;
                    }
                    let m = out.embeddings[k].select(ndarray::Axis(0), &rows);
                    if let Some(cache) = &self.cache {
                        let entry = CachedEntry {
                            embeddings: m,
                            truncated: set_trunc,
                        };
                        if let Err(e) = cache.put(&key(sets[s], &sources[p]), &entry) {
                            self.progress.note(&format!(
                                "warning: cannot write the embedding cache in {}: {e}",
                                cache.dir().display()
                            ));
                        }
                        result[s][p] = Some(entry.embeddings);
                    } else {
                        result[s][p] = Some(m);
                    }
                }
            }
            truncated += out.num_truncated();
            total += texts.len();
        }
        if let (Some(cache), true) = (&self.cache, hits > 0) {
            self.progress.note(&format!(
                "note: reused {hits} of {} embedding matrices from the cache in {}",
                sets.len() * sources.len(),
                cache.dir().display()
            ));
        }
        if truncated > 0 {
            self.progress.note(&format!(
                "note: {truncated} of {total} sentences were longer than {} tokens and were truncated",
                enc.max_len()
            ));
        }
        Ok(result
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|m| m.expect("every entry filled"))
                    .collect()
            })
            .collect())
    }

    /// Embeddings of one list of sentences for one pooling.
    pub fn embed(&self, texts: &[String], pooling: &Pooling) -> Result<Array2<f32>> {
        self.embed_weighted(texts, pooling, None)
    }

    /// [`Embedder::embed`] with token weights (see [`Embedder::embed_sets_weighted`]).
    pub fn embed_weighted(
        &self,
        texts: &[String],
        pooling: &Pooling,
        weights: Option<&TokenWeights>,
    ) -> Result<Array2<f32>> {
        let mut r = self.embed_sets_weighted(&[texts], std::slice::from_ref(pooling), weights)?;
        Ok(r.remove(0).remove(0))
    }

    /// [`Embedder::embed_weighted`] with `prompt` in place of the embedder's own.
    pub fn embed_prompted(
        &self,
        texts: &[String],
        pooling: &Pooling,
        weights: Option<&TokenWeights>,
        prompt: Option<&Prompt>,
    ) -> Result<Array2<f32>> {
        let mut r =
            self.embed_sets_prompted(&[texts], std::slice::from_ref(pooling), weights, prompt)?;
        Ok(r.remove(0).remove(0))
    }
}
