//! `bertflow index build|add|info`: a persistent search index for `serve --index`.
//!
//! The corpus is embedded once (with the model, pooling and calibrator given) and written
//! to one checksummed file (bertflow-index) that `serve --index` memory-maps at start-up.
use crate::args::{parse_pooling, ModelArgs};
use crate::calib::{model_identity, LoadedCalibrator};
use crate::io::{read_sentences, EmptyLines};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_calib::Calibrator;
use bertflow_encoder::{EncodeOptions, Encoder, Pooling};
use bertflow_index::{Identity, Index, IndexWriter};
use bertflow_server::{Hit, SearchIndex};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct IndexArgs {
    #[command(subcommand)]
    pub command: IndexCommand,
}

#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Embed a corpus once and write it to a new index file.
    Build(BuildArgs),
    /// Embed more sentences and append them to an existing index (made with the same
    /// model, pooling and calibrator), without re-embedding what is there.
    Add(AddArgs),
    /// Print an index's identity and size, after checking every checksum.
    Info {
        /// The index file.
        #[arg(long, value_name = "FILE")]
        index: PathBuf,
    },
}

/// How the vectors are made (must match at `serve --index`).
#[derive(Args, Debug)]
pub struct EmbedSettings {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value = "last-avg", value_parser = parse_pooling)]
    pub pooling: Pooling,
    /// Calibrator file (from `bertflow fit`) applied to every vector.
    #[arg(long, value_name = "FILE")]
    pub calibrator: Option<PathBuf>,
    /// Allow a calibrator fitted on another model or pooling (never another dimension).
    #[arg(long)]
    pub allow_mismatch: bool,
    /// Sentences: one per line, or JSONL with a "text" field (.jsonl/.ndjson or
    /// --corpus-jsonl). Empty lines are skipped.
    #[arg(long, value_name = "FILE")]
    pub corpus: PathBuf,
    /// Treat the corpus as JSONL whatever its extension.
    #[arg(long)]
    pub corpus_jsonl: bool,
    /// Sentences embedded and written per segment.
    #[arg(long, default_value_t = 8192, value_name = "N")]
    pub chunk: usize,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    #[command(flatten)]
    pub settings: EmbedSettings,
    /// The index file to write (replaced once complete).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    #[command(flatten)]
    pub settings: EmbedSettings,
    /// The index file to append to.
    #[arg(long, value_name = "FILE")]
    pub index: PathBuf,
}

/// The identity of the vectors made by this encoder, pooling and calibrator.
pub fn identity(
    encoder: &Encoder,
    pooling: &Pooling,
    calibrator: Option<&LoadedCalibrator>,
) -> Result<Identity> {
    let dimension = calibrator.map_or(encoder.dim(), |c| c.fitted.output_dim());
    let calibrator = match calibrator {
        Some(c) => Some(format!(
            "{} {}",
            c.describe(),
            bertflow_index::file_digest(&c.path)?
        )),
        None => None,
    };
    Ok(Identity {
        model: model_identity(encoder),
        pooling: pooling.to_string(),
        calibrator,
        dimension,
    })
}

struct Loaded {
    encoder: Encoder,
    calibrator: Option<LoadedCalibrator>,
    identity: Identity,
}

fn load(s: &EmbedSettings) -> Result<Loaded> {
    let calibrator = s
        .calibrator
        .as_deref()
        .map(|p| LoadedCalibrator::open(p, s.allow_mismatch))
        .transpose()?;
    let encoder = Encoder::load(&s.model.model, s.model.max_len)
        .with_context(|| format!("cannot load model '{}'", s.model.model))?;
    if let Some(c) = &calibrator {
        c.check(&encoder, &s.pooling)?;
    }
    let identity = identity(&encoder, &s.pooling, calibrator.as_ref())?;
    Ok(Loaded {
        encoder,
        calibrator,
        identity,
    })
}

/// Embed the corpus chunk by chunk and write each chunk as a segment.
fn embed_into(s: &EmbedSettings, loaded: &Loaded, writer: &mut IndexWriter) -> Result<usize> {
    let texts = read_sentences(&s.corpus, s.corpus_jsonl, EmptyLines::Skip)
        .context("cannot read the corpus")?
        .texts;
    if texts.is_empty() {
        anyhow::bail!("the corpus {} holds no sentence", s.corpus.display());
    }
    let source = loaded.encoder.source(&s.pooling)?;
    let threads = s.model.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let opts = EncodeOptions {
        batch_size: s.model.batch_size.max(1),
        threads,
    };
    let mut done = 0;
    for chunk in texts.chunks(s.chunk.max(1)) {
        let out = loaded
            .encoder
            .encode(chunk, std::slice::from_ref(&source), &opts, &|_| {})
            .context("encoding failed")?;
        let raw = out
            .embeddings
            .into_iter()
            .next()
            .context("the encoder returned no embeddings")?;
        let vectors = match &loaded.calibrator {
            Some(c) => c.apply(raw.view())?,
            None => raw,
        };
        let vectors = vectors.as_standard_layout();
        let flat = vectors.as_slice().context("vectors are not contiguous")?;
        writer.add(flat, chunk)?;
        done += chunk.len();
        progress::note(format!("embedded {done} / {} sentences", texts.len()));
    }
    Ok(done)
}

pub fn run(a: IndexArgs) -> Result<()> {
    match a.command {
        IndexCommand::Build(b) => {
            let loaded = load(&b.settings)?;
            let mut writer = IndexWriter::create(&b.output, loaded.identity.clone())?;
            embed_into(&b.settings, &loaded, &mut writer)?;
            let total = writer.finish()?;
            println!("wrote {} sentences to {}", total, b.output.display());
        }
        IndexCommand::Add(add) => {
            let loaded = load(&add.settings)?;
            let mut writer = IndexWriter::append(&add.index, &loaded.identity)?;
            let added = embed_into(&add.settings, &loaded, &mut writer)?;
            let total = writer.finish()?;
            println!(
                "added {added} sentences to {} ({total} in all)",
                add.index.display()
            );
        }
        IndexCommand::Info { index } => {
            let opened = Index::open(&index, true)?;
            let id = opened.identity();
            println!(
                "{}: {} sentences in {} segment(s), dimension {}, model {}, pooling {}, calibrator {}",
                index.display(),
                opened.len(),
                opened.segments(),
                id.dimension,
                id.model,
                id.pooling,
                id.calibrator.as_deref().unwrap_or("none")
            );
        }
    }
    Ok(())
}

/// A memory-mapped index as the server's search index.
pub struct MappedIndex(pub Index);

impl MappedIndex {
    /// Open `path` (checking every checksum unless `verify` is false) and refuse it unless
    /// it was built with `wanted`.
    pub fn open(path: &Path, verify: bool, wanted: &Identity) -> Result<Self> {
        let index = Index::open(path, verify)
            .with_context(|| format!("cannot open the index {}", path.display()))?;
        index
            .identity()
            .check_matches(wanted)
            .with_context(|| format!("refusing the index {}", path.display()))?;
        Ok(Self(index))
    }
}

impl SearchIndex for MappedIndex {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn dimension(&self) -> usize {
        self.0.identity().dimension
    }

    fn search(&self, query: &[f32], top_k: usize) -> std::result::Result<Vec<Hit>, String> {
        let ranked = self.0.search(query, top_k).map_err(|e| e.to_string())?;
        ranked
            .into_iter()
            .map(|(index, score)| {
                Ok(Hit {
                    index,
                    text: self.0.text(index).map_err(|e| e.to_string())?.to_owned(),
                    score: f64::from(score),
                })
            })
            .collect()
    }
}
