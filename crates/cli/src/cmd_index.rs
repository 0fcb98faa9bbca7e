//! `bertflow index build|add|ann|info|verify`: a persistent search index for
//! `serve --index`.
//!
//! The corpus is embedded once (with the model, pooling and calibrator given) and written
//! to one checksummed file (bertflow-index) that `serve --index` memory-maps at start-up;
//! `--ann` also stores an HNSW graph next to it. The work is in `bertflow_core::indexing`.
use crate::args::{open_pipeline, VectorArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_core::index::{AnnFiles, AnnParams, Index, IndexWriter};
use bertflow_core::indexing::{build_ann, embed_into_index};
use bertflow_core::io::{read_sentences, EmptyLines};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct IndexArgs {
    #[command(subcommand)]
    pub command: IndexCommand,
}

#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Embed a corpus once and write it to a new index file (and, with --ann, its HNSW graph).
    Build(BuildArgs),
    /// Embed more sentences and append them to an existing index (made with the same
    /// model, pooling and calibrator), without re-embedding or rewriting what is there.
    /// An HNSW graph next to it is extended with the new sentences.
    Add(AddArgs),
    /// Build (or extend, after `index add`) the HNSW graph of an index for `serve --ann`.
    Ann(AnnArgs),
    /// Print an index's identity and size (checks the footer and layout, not every page).
    Info {
        /// The index file.
        #[arg(long, value_name = "FILE")]
        index: PathBuf,
    },
    /// Check every checksum of an index (reads the whole file) and of its HNSW graph;
    /// with --repair, bring a damaged index back to its last complete state.
    Verify(VerifyArgs),
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The index file.
    #[arg(long, value_name = "FILE")]
    pub index: PathBuf,
    /// Cut off the bytes of an interrupted `index add` (the index keeps the sentences
    /// of its last complete state). An index left without a footer by an interrupted
    /// `index add` of bertflow 0.1 gets a new footer for its complete segments, made
    /// with the model, pooling and calibrator given here (those it was built with).
    #[arg(long)]
    pub repair: bool,
    /// The settings the index was built with (read only to rebuild a footer).
    #[command(flatten)]
    pub vectors: VectorArgs,
}

impl VerifyArgs {
    /// The identity these settings give (loads the model).
    fn identity(&self) -> Result<bertflow_core::index::Identity> {
        Ok(open_pipeline(&self.vectors)?.identity()?)
    }
}

fn repair(v: &VerifyArgs) -> Result<()> {
    use bertflow_core::index::Repaired;
    let repaired = match bertflow_core::index::repair(&v.index, None) {
        Err(bertflow_core::index::IndexError::Corrupt(reason)) => {
            let id = v.identity()?;
            eprintln!(
                "{reason}\nrebuilding the footer with the settings given (model {}, pooling {})",
                v.vectors.model.model, id.pooling
            );
            bertflow_core::index::repair(&v.index, Some(&id))?
        }
        other => other?,
    };
    match repaired {
        Repaired::Clean { sentences } => {
            println!("{}: nothing to repair ({sentences} sentences)", v.index.display())
        }
        Repaired::Truncated { sentences, bytes } => println!(
            "{}: removed {bytes} bytes of an interrupted `index add`; {sentences} sentences",
            v.index.display()
        ),
        Repaired::Trailer {
            sentences,
            recovered,
        } => println!(
            "{}: rewrote the damaged trailer of the last `index add` ({recovered} sentences, every checksum matches); {sentences} sentences",
            v.index.display()
        ),
        Repaired::Rebuilt {
            sentences,
            segments,
            bytes,
        } => println!(
            "{}: rebuilt the footer: {sentences} sentences in {segments} complete segment(s); removed {bytes} bytes of an unfinished segment",
            v.index.display()
        ),
    }
    Ok(())
}

/// Tell the user when an index opened in the state before an interrupted append.
fn note_recovery(index: &Index) {
    if let Some(note) = index.recovered() {
        eprintln!("note: {note}");
    }
}

/// How the vectors are made (must match at `serve --index`).
#[derive(Args, Debug)]
pub struct EmbedSettings {
    #[command(flatten)]
    pub vectors: VectorArgs,
    /// Sentences: one per line, or JSONL with a "text" field (.jsonl/.ndjson or
    /// --corpus-jsonl). Empty lines are skipped.
    #[arg(long, value_name = "FILE")]
    pub corpus: PathBuf,
    /// Treat the corpus as JSONL whatever its extension.
    #[arg(long)]
    pub corpus_jsonl: bool,
    /// Sentences embedded and written per segment (bounds the memory used).
    #[arg(long, default_value_t = 8192, value_name = "N")]
    pub chunk: usize,
}

/// HNSW parameters.
#[derive(Args, Debug)]
pub struct HnswArgs {
    /// Neighbours per point and layer (M): more is slower to build, bigger, and finds more.
    #[arg(long = "hnsw-m", default_value_t = AnnParams::default().m, value_name = "M")]
    pub m: usize,
    /// Candidates explored while inserting (efConstruction).
    #[arg(long, default_value_t = AnnParams::default().ef_construction, value_name = "N")]
    pub ef_construction: usize,
}

impl HnswArgs {
    fn params(&self) -> AnnParams {
        AnnParams {
            m: self.m,
            ef_construction: self.ef_construction,
        }
    }
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    #[command(flatten)]
    pub settings: EmbedSettings,
    /// The index file to write (replaced once complete).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Also build the HNSW graph for approximate search (`serve --ann`).
    #[arg(long)]
    pub ann: bool,
    #[command(flatten)]
    pub hnsw: HnswArgs,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    #[command(flatten)]
    pub settings: EmbedSettings,
    /// The index file to append to.
    #[arg(long, value_name = "FILE")]
    pub index: PathBuf,
}

#[derive(Args, Debug)]
pub struct AnnArgs {
    /// The index file.
    #[arg(long, value_name = "FILE")]
    pub index: PathBuf,
    /// Build a new graph even if one covering part of the index exists.
    #[arg(long)]
    pub rebuild: bool,
    #[command(flatten)]
    pub hnsw: HnswArgs,
}

/// Embed the corpus into `writer`, checking the settings first.
fn embed(
    s: &EmbedSettings,
    writer: impl FnOnce(&bertflow_core::index::Identity) -> Result<IndexWriter>,
) -> Result<(usize, u64)> {
    let texts = read_sentences(&s.corpus, s.corpus_jsonl, EmptyLines::Skip)
        .context("cannot read the corpus")?
        .texts;
    if texts.is_empty() {
        anyhow::bail!("the corpus {} holds no sentence", s.corpus.display());
    }
    let pipeline = open_pipeline(&s.vectors)?;
    let mut writer = writer(&pipeline.identity()?)?;
    let added = embed_into_index(&pipeline, &texts, s.chunk, &mut writer)?;
    Ok((added, writer.finish()?))
}

fn ann(index: &Path, params: AnnParams, rebuild: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let built = build_ann(index, params, rebuild, &*progress::handle())?;
    println!(
        "{} the HNSW graph of {}: {} points inserted, {} in all ({:.1} s)",
        if built.extended { "extended" } else { "built" },
        index.display(),
        built.inserted,
        built.total,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn run(a: IndexArgs) -> Result<()> {
    match a.command {
        IndexCommand::Build(b) => {
            let (_, total) = embed(&b.settings, |id| {
                Ok(IndexWriter::create(&b.output, id.clone())?)
            })?;
            bertflow_core::indexing::keep_calibrator(
                &b.output,
                b.settings.vectors.calibrator.as_deref(),
            )?;
            println!("wrote {total} sentences to {}", b.output.display());
            if b.ann {
                ann(&b.output, b.hnsw.params(), true)?;
            } else {
                // A graph of the file this one replaced would be refused anyway.
                AnnFiles::of(&b.output).remove()?;
            }
        }
        IndexCommand::Add(mut add) => {
            // The pooling and calibrator the index was built with, unless given.
            bertflow_core::indexing::adopt_index_settings(&mut add.settings.vectors, &add.index)?;
            let (added, total) =
                embed(&add.settings, |id| Ok(IndexWriter::append(&add.index, id)?))?;
            println!(
                "added {added} sentences to {} ({total} in all)",
                add.index.display()
            );
            if AnnFiles::of(&add.index).exist() {
                ann(&add.index, AnnParams::default(), false)?;
            }
        }
        IndexCommand::Ann(x) => ann(&x.index, x.hnsw.params(), x.rebuild)?,
        IndexCommand::Info { index } => {
            let opened = Index::open(&index, false)?;
            note_recovery(&opened);
            let id = opened.identity();
            println!(
                "{}: {} sentences in {} segment(s), dimension {}, model {}, pooling {}, calibrator {}, precision {}, HNSW graph {}",
                index.display(),
                opened.len(),
                opened.segments(),
                id.dimension,
                id.model,
                id.pooling,
                id.calibrator.as_deref().unwrap_or("none"),
                id.precision,
                if AnnFiles::of(&index).exist() { "yes" } else { "no" }
            );
        }
        IndexCommand::Verify(v) => {
            if v.repair {
                repair(&v)?;
            }
            let index = v.index;
            let started = std::time::Instant::now();
            let opened = std::sync::Arc::new(Index::open(&index, true)?);
            if let Some(note) = opened.recovered() {
                anyhow::bail!(
                    "{}: every checksum of the last complete state matches ({} sentences), but {note}; run `bertflow index verify --repair --index {}`",
                    index.display(),
                    opened.len(),
                    index.display()
                );
            }
            let graph = bertflow_core::index::Ann::load(std::sync::Arc::clone(&opened), &index)?;
            println!(
                "{}: every checksum matches ({} sentences{}; {:.1} s)",
                index.display(),
                opened.len(),
                match &graph {
                    Some(g) => format!(", HNSW graph of {} points", g.len()),
                    None => String::new(),
                },
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
