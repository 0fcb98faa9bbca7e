//! `bertflow index build|add|ann|info|verify`: a persistent search index for
//! `serve --index`.
//!
//! The corpus is embedded once (with the model, pooling and calibrator given) and written
//! to one checksummed file (bertflow-index) that `serve --index` memory-maps at start-up;
//! `--ann` also stores an HNSW graph next to it. The work is in `bertflow_core::indexing`.
use crate::args::{open_pipeline, VectorArgs};
use crate::progress;
use anyhow::{Context, Result};
use bertflow_core::index::{Ann, AnnFiles, AnnMetric, AnnParams, Index, IndexWriter, SearchParams};
use bertflow_core::indexing::{
    build_ann, build_index, build_index_from_vectors, check_vectors_file, embed_into_index,
    open_rows, write_vectors, QuantizeWith, VectorsInput, DEFAULT_ANN_RESCORE,
    DEFAULT_ANN_RESCORE_INT8, DEFAULT_CHUNK, DEFAULT_EF_SEARCH, DEFAULT_RESCORE, DEFAULT_SHORTLIST,
    PARQUET_TEXT_COLUMN, PARQUET_VECTOR_COLUMN,
};
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_core::quantize::QuantSpec;
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
    /// Embed queries and print the index's best matches (JSON lines), as `serve --index`
    /// answers them.
    Search(SearchArgs),
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
    #[arg(long, value_name = "FILE", required_unless_present = "vectors")]
    pub corpus: Option<PathBuf>,
    /// Vectors made elsewhere (`bertflow encode`, the Spark job): .npy or .safetensors
    /// (one row per line of --texts), or Parquet (a .parquet file or the Spark job's
    /// output folder: sentences and vectors from --text-column and --vector-column),
    /// made with the model, pooling and calibrator given here (a .safetensors file's
    /// declared settings are checked; .npy and Parquet declare none). Stored as they are.
    #[arg(
        long = "vectors",
        id = "vectors",
        value_name = "FILE",
        conflicts_with = "corpus"
    )]
    pub vector_file: Option<PathBuf>,
    /// The sentences of a .npy or .safetensors --vectors, one per line (empty lines
    /// kept: line i is row i).
    #[arg(long, value_name = "FILE", requires = "vectors")]
    pub texts: Option<PathBuf>,
    /// Parquet --vectors: the column of sentences (a string column).
    #[arg(long, default_value = PARQUET_TEXT_COLUMN, value_name = "NAME")]
    pub text_column: String,
    /// Parquet --vectors: the column of vectors (array<float> or array<double>).
    #[arg(long, default_value = PARQUET_VECTOR_COLUMN, value_name = "NAME")]
    pub vector_column: String,
    /// Treat the corpus as JSONL whatever its extension.
    #[arg(long)]
    pub corpus_jsonl: bool,
    /// Sentences embedded and written per segment (bounds the memory used).
    #[arg(long, default_value_t = DEFAULT_CHUNK, value_name = "N")]
    pub chunk: usize,
    #[command(flatten)]
    pub sparse: crate::cmd_index_sparse::SparseArgs,
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
    /// Also store a compact code of every vector, scanned by search from memory (the
    /// vectors stay on disk, read only to rescore the best candidates): int8, binary,
    /// binary:itq=true (or ubinary), fitted on the corpus (not pq: its codes are centroid
    /// indices). A calibrator that ends in
    /// a quantizer (`bertflow fit --quantize`) quantizes without this flag.
    #[arg(long, value_name = "QUANTIZER")]
    pub quantize: Option<QuantSpec>,
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
    /// The quantizer the index was built with, checked (a quantized index codes
    /// the new sentences with its own quantizer whether or not this is given).
    #[arg(long, value_name = "QUANTIZER")]
    pub quantize: Option<QuantSpec>,
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    /// The index file.
    #[arg(long, value_name = "FILE")]
    pub index: PathBuf,
    /// A query (repeat for several).
    #[arg(long, value_name = "TEXT", required = true)]
    pub query: Vec<String>,
    /// Matches per query.
    #[arg(long, short = 'k', default_value_t = 10, value_name = "K")]
    pub top_k: usize,
    /// Quantized index: candidates rescored exactly per match asked (the best rescore x k
    /// codes, of the scan or, with --ann, of the graph).
    #[arg(long, value_name = "N", help = format!(
        "Quantized index: candidates rescored exactly per match asked (the best rescore x k \
         codes, of the scan or, with --ann, of the graph) [default: {DEFAULT_RESCORE}; with \
         --ann {DEFAULT_ANN_RESCORE} over bit codes, {DEFAULT_ANN_RESCORE_INT8} over int8]"
    ))]
    pub rescore: Option<usize>,
    /// Quantized index of bit codes: the scan keeps N times as many candidates as it
    /// rescores and re-ranks them by the query against the codes' signs (1: no
    /// re-ranking; int8 codes ignore it).
    #[arg(long, default_value_t = DEFAULT_SHORTLIST, value_name = "N")]
    pub shortlist: usize,
    /// Threads scanning the codes (0: one per core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    /// Score every vector exactly (ignore the codes).
    #[arg(long, conflicts_with = "ann")]
    pub exact: bool,
    /// Search with the index's HNSW graph (`index build --ann`, `index ann`): over a
    /// quantized index it walks the codes, then rescores its best --rescore x k exactly.
    #[arg(long)]
    pub ann: bool,
    /// With --ann: candidates explored per query (at least k, and at least rescore x k
    /// over codes).
    #[arg(long, default_value_t = DEFAULT_EF_SEARCH, value_name = "N", requires = "ann")]
    pub ef: usize,
    #[command(flatten)]
    pub mode: crate::cmd_index_sparse::ModeArgs,
    /// The settings the index was built with (its pooling and calibrator unless given).
    #[command(flatten)]
    pub vectors: VectorArgs,
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

/// The sentences of `--corpus`.
/// What `cmd_index_sparse` reads of the settings.
fn sparse_settings(s: &EmbedSettings) -> crate::cmd_index_sparse::Settings<'_> {
    crate::cmd_index_sparse::Settings {
        sparse: &s.sparse,
        model: &s.vectors.model,
        vector_file: s.vector_file.as_deref(),
        columns: (&s.text_column, &s.vector_column),
        chunk: s.chunk,
    }
}

fn corpus(s: &EmbedSettings) -> Result<Vec<String>> {
    let Some(corpus) = &s.corpus else {
        anyhow::bail!("give the sentences with --corpus (or --vectors and --texts)");
    };
    let texts = read_sentences(corpus, s.corpus_jsonl, EmptyLines::Skip)
        .context("cannot read the corpus")?
        .texts;
    if texts.is_empty() {
        anyhow::bail!("the corpus {} holds no sentence", corpus.display());
    }
    Ok(texts)
}

/// `index add`: embed the corpus into the index, checking the settings first.
fn embed(s: &EmbedSettings, index: &Path, quantize: Option<&QuantSpec>) -> Result<(usize, u64)> {
    let pipeline = open_pipeline(&s.vectors)?;
    let mut writer = IndexWriter::append(index, &pipeline.identity()?)?;
    let stored = writer.quantizer().map(|q| q.spec.clone());
    match (quantize, stored) {
        (Some(want), Some(have)) if want.to_string() != have => anyhow::bail!(
            "{} stores {have} codes; --quantize {want} differs (the quantizer is fixed at `index build`)",
            index.display()
        ),
        (Some(want), None) => anyhow::bail!(
            "{} stores no codes: rebuild it with `index build --quantize {want}`",
            index.display()
        ),
        _ => {}
    }
    if writer.sparse().is_some() || s.sparse.asked() {
        let added = crate::cmd_index_sparse::add(
            &sparse_settings(s),
            &pipeline,
            &mut writer,
            || corpus(s),
            |v| vector_texts(s, v),
        )?;
        return Ok((added, writer.finish()?));
    }
    let added = match &s.vector_file {
        Some(vectors) => {
            check_vectors_file(&pipeline, vectors)?;
            let texts = vector_texts(s, vectors)?;
            let mut rows = open_rows(vectors, &s.text_column, &s.vector_column)?;
            let mut input = VectorsInput {
                rows: &mut *rows,
                texts: texts.as_deref(),
                what: vectors.display().to_string(),
            };
            write_vectors(&mut input, s.chunk, &mut writer, &*progress::handle())?
        }
        None => embed_into_index(&pipeline, &corpus(s)?, s.chunk, &mut writer)?,
    };
    Ok((added, writer.finish()?))
}

/// `index build`: embed the corpus (or take --vectors) into a new index.
fn build(b: &BuildArgs) -> Result<u64> {
    let s = &b.settings;
    let pipeline = open_pipeline(&s.vectors)?;
    let quantize = QuantizeWith::of(&pipeline, b.quantize.as_ref())?;
    if s.sparse.asked() {
        return crate::cmd_index_sparse::build(
            &sparse_settings(s),
            &b.output,
            &pipeline,
            quantize,
            || {
                Ok(match &s.vector_file {
                    Some(v) => (vector_texts(s, v)?, true),
                    None => (Some(corpus(s)?), false),
                })
            },
        );
    }
    match &s.vector_file {
        Some(vectors) => {
            let texts = vector_texts(s, vectors)?;
            Ok(build_index_from_vectors(
                &pipeline,
                vectors,
                texts.as_deref(),
                (&s.text_column, &s.vector_column),
                s.chunk,
                &b.output,
                quantize,
            )?)
        }
        None => Ok(build_index(
            &pipeline,
            &corpus(s)?,
            s.chunk,
            &b.output,
            quantize,
        )?),
    }
}

/// The sentences of `--vectors`: `--texts` for a matrix file (required),
/// none for Parquet (its text column); notes that a file without declared
/// settings is taken on trust.
fn vector_texts(s: &EmbedSettings, vectors: &Path) -> Result<Option<Vec<String>>> {
    if vectors.extension().is_none_or(|e| e != "safetensors") {
        progress::note(format!(
            "{} declares no model: the index records the settings given, which must be those that made the vectors",
            vectors.display()
        ));
    }
    let parquet = bertflow_core::vector_input::is_parquet(vectors);
    match (&s.texts, parquet) {
        (Some(_), true) => anyhow::bail!(
            "{} is Parquet: its sentences come from its column {:?}; drop --texts",
            vectors.display(),
            s.text_column
        ),
        (None, true) => Ok(None),
        (None, false) => anyhow::bail!(
            "give the sentences of {} with --texts (one per line, line i is row i)",
            vectors.display()
        ),
        (Some(texts), false) => Ok(Some(
            read_sentences(texts, false, EmptyLines::Keep)
                .context("cannot read --texts")?
                .texts,
        )),
    }
}

/// `index search`: embed the queries as the index's vectors were made and print
/// the matches.
fn search(mut a: SearchArgs) -> Result<()> {
    bertflow_core::indexing::adopt_index_settings(&mut a.vectors, &a.index)?;
    let index = std::sync::Arc::new(Index::open(&a.index, false)?);
    note_recovery(&index);
    let graph = if a.ann {
        let graph = Ann::load(std::sync::Arc::clone(&index), &a.index)?.with_context(|| {
            format!(
                "--ann: {} has no HNSW graph; build it with `bertflow index ann --index {}`",
                a.index.display(),
                a.index.display()
            )
        })?;
        if !graph.covers() {
            anyhow::bail!(
                "the HNSW graph of {} covers {} of its {} sentences; extend it with `bertflow index ann --index {}`",
                a.index.display(),
                graph.len(),
                index.len(),
                a.index.display()
            );
        }
        Some(graph)
    } else {
        None
    };
    let pipeline = open_pipeline(&a.vectors)?;
    index.identity().check_matches(&pipeline.identity()?)?;
    let query = pipeline.prompt_texts(a.query.clone(), None)?;
    let raw = pipeline
        .embed_batch(&query, &pipeline.embedder().opts)?
        .vectors;
    let queries = pipeline.calibrate(raw)?;
    let fusion = a.mode.params()?;
    let sparse =
        crate::cmd_index_sparse::sparse_queries(a.mode.mode, &index, &a.vectors.model, &a.query)?;
    let params = SearchParams {
        rescore: a.rescore.unwrap_or(DEFAULT_RESCORE),
        shortlist: a.shortlist,
        threads: a.threads,
    };
    let ann_rescore = a.rescore.unwrap_or_else(|| {
        graph
            .as_ref()
            .map_or(DEFAULT_ANN_RESCORE, Ann::default_rescore)
    });
    for (n, (text, q)) in a.query.iter().zip(queries.rows()).enumerate() {
        let q: Vec<f32> = q.iter().copied().collect();
        let dense = |q: &[f32], k: usize| -> bertflow_core::Result<Vec<(usize, f32)>> {
            Ok(if a.exact {
                index.search_exact(q, k)?
            } else if let Some(graph) = &graph {
                graph.search_rescored(q, k, a.ef, ann_rescore)?
            } else {
                index.search_with(q, k, &params)?
            })
        };
        let hits = bertflow_core::indexing::search_index_with(
            &index,
            Some(&q),
            sparse.as_ref().and_then(|s| s.get(n)),
            a.mode.mode,
            a.top_k,
            &fusion,
            &dense,
        )?;
        let hits = hits
            .into_iter()
            .map(|(i, score)| {
                Ok(serde_json::json!({"index": i, "score": score, "text": index.text(i)?}))
            })
            .collect::<Result<Vec<_>>>()?;
        println!("{}", serde_json::json!({"query": text, "hits": hits}));
    }
    Ok(())
}

fn ann(index: &Path, params: AnnParams, rebuild: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let built = build_ann(index, params, rebuild, &*progress::handle())?;
    println!(
        "{} the HNSW graph of {} ({}): {} points inserted, {} in all ({:.1} s)",
        if built.extended { "extended" } else { "built" },
        index.display(),
        match built.metric {
            AnnMetric::Cosine => "cosine of the vectors".to_owned(),
            m => format!("{} distance of the codes", m.name()),
        },
        built.inserted,
        built.total,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn run(a: IndexArgs) -> Result<()> {
    match a.command {
        IndexCommand::Build(b) => {
            let total = build(&b)?;
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
            let (added, total) = embed(&add.settings, &add.index, add.quantize.as_ref())?;
            println!(
                "added {added} sentences to {} ({total} in all)",
                add.index.display()
            );
            if AnnFiles::of(&add.index).exist() {
                ann(&add.index, AnnParams::default(), false)?;
            }
        }
        IndexCommand::Ann(x) => ann(&x.index, x.hnsw.params(), x.rebuild)?,
        IndexCommand::Search(x) => search(x)?,
        IndexCommand::Info { index } => {
            let opened = Index::open(&index, false)?;
            note_recovery(&opened);
            let id = opened.identity();
            println!(
                "{}: {} sentences in {} segment(s), dimension {}, model {}, pooling {}, calibrator {}, precision {}, codes {}, HNSW graph {}, sparse vectors {}",
                index.display(),
                opened.len(),
                opened.segments(),
                id.dimension,
                id.model,
                id.pooling,
                id.calibrator.as_deref().unwrap_or("none"),
                id.precision,
                opened.quantizer().map_or("none".to_owned(), |q| format!(
                    "{} ({} bytes each, fitted on {})",
                    q.spec,
                    q.width(),
                    q.fitted_on
                )),
                if AnnFiles::of(&index).exist() { "yes" } else { "no" },
                opened.sparse_info().map_or("none".to_owned(), |s| format!(
                    "{} (dimension {}, {} postings)",
                    s.source,
                    s.dimension,
                    opened.sparse_postings()
                ))
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
            let calibrator =
                bertflow_core::indexing::verify_calibrator_copy(&index, opened.identity())?;
            println!(
                "{}: every checksum matches ({} sentences{}{}; {:.1} s)",
                index.display(),
                opened.len(),
                match &graph {
                    Some(g) => format!(", HNSW graph of {} points", g.len()),
                    None => String::new(),
                },
                match &calibrator {
                    Some(c) => format!(", calibrator copy {}", c.display()),
                    None => String::new(),
                },
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
