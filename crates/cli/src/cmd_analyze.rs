//! `bertflow analyze`: the geometry of one pooling's embedding space before and
//! after each calibrator kind (anisotropy, singular spectrum, lexical bias,
//! alignment and uniformity, word frequency). The analyses live in
//! `bertflow_core::analyze`; this module is the command line over them.
use crate::args::{parse_pooling, DataArgs, ModelArgs};
use anyhow::Result;
use bertflow_core::analyze::{
    analyse, dataset_json, frequency, frequency_figure, frequency_json, parse_kinds,
    pooling_figures, pooling_json, summary_text, write_plots, AnalysisOptions, EditUnit, Kinds,
    StsbData,
};
use bertflow_core::encoder::Pooling;
use bertflow_core::grid::FitOn;
use clap::Args;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

/// Options shared by `analyze` and `report`.
#[derive(Args, Debug, Clone)]
pub struct AnalysisOpts {
    #[command(flatten)]
    pub data: DataArgs,
    #[arg(long, default_value = "none,flow,whiten", value_parser = parse_kinds, value_name = "KINDS",
          help = format!("{} (none, the uncalibrated baseline, is always included)", crate::cmd_kinds::list_help()),
          long_help = format!("none (the uncalibrated baseline) is always included. {}", crate::cmd_kinds::list_long_help()))]
    pub kinds: Kinds,
    /// Sentences the calibrators are fitted on: target (every STS-B sentence, train +
    /// dev + test, labels unused; for the STS table of `report`, each task's own
    /// sentences), train (the STS-B train split), or a file of sentences (one per line).
    #[arg(long, default_value = "target", value_name = "target|train|FILE")]
    pub on: FitOn,
    /// Unit of the edit distance between the two sentences of a pair.
    #[arg(long, value_enum, default_value_t = EditUnit::Wordpiece, value_name = "UNIT")]
    pub edit_unit: EditUnit,
    /// Pairs with edit distance <= this form the "small edit distance" subset
    /// (the paper uses 4).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub edit_threshold: usize,
    /// Corpus for word-piece frequencies, one sentence per line (or .jsonl with a
    /// "text" field), counted as given [default: every sentence of the seven STS
    /// tasks, all splits, deduplicated].
    #[arg(long, value_name = "FILE")]
    pub freq_corpus: Option<PathBuf>,
    /// Nearest neighbours for the word-embedding distance per frequency bucket.
    #[arg(long, default_value_t = 3, value_name = "K")]
    pub knn: usize,
    /// At most this many (seeded, random) kNN query tokens per frequency bucket.
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub knn_queries: usize,
    /// Random sentence pairs for the mean random-pair cosine.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub random_pairs: usize,
    /// Seed of the random pairs and the kNN query subsets.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pooling; see `bertflow poolings`.
    #[arg(long, short = 'p', default_value_t = bertflow_core::pipeline::DEFAULT_POOLING, value_parser = parse_pooling)]
    pub pooling: Pooling,
    #[command(flatten)]
    pub opts: AnalysisOpts,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Write the figures (PNG and SVG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
}

impl AnalysisOpts {
    /// The library's options.
    pub fn options(&self) -> AnalysisOptions {
        AnalysisOptions {
            data_dir: self.data.dir(),
            kinds: self.kinds.clone(),
            on: self.on.clone(),
            edit_unit: self.edit_unit,
            edit_threshold: self.edit_threshold,
            freq_corpus: self.freq_corpus.clone(),
            knn: self.knn,
            knn_queries: self.knn_queries,
            random_pairs: self.random_pairs,
            seed: self.seed,
        }
    }
}

pub fn run(a: AnalyzeArgs) -> Result<()> {
    let opts = a.opts.options();
    let embedder = crate::args::load_model(&a.model)?;
    let data = StsbData::load(&embedder, &opts)?;
    let results = analyse(&embedder, &data, std::slice::from_ref(&a.pooling), &opts)?;
    let r = &results[0];
    let freq = frequency(&embedder, &opts)?;
    let model = embedder.encoder.model_id().to_string();
    let mut written = Vec::new();
    if let Some(dir) = &a.plots {
        let mut figs = pooling_figures(r, &data);
        figs.push(frequency_figure(&freq));
        written = write_plots(dir, &figs, &*embedder.progress)?;
    }
    if a.json {
        let sets: Map<String, Value> = data
            .describe_sets()
            .into_iter()
            .map(|(k, v)| (k.replace(' ', "_"), json!(v)))
            .collect();
        let v = json!({
            "model": model,
            "pooling": a.pooling.to_string(),
            "fit_on": a.opts.on.to_string(),
            "sets": sets,
            "lexical_bias": dataset_json(&data),
            "kinds": pooling_json(r),
            "advice": r.advice,
            "frequency": frequency_json(&freq),
            "plots": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", summary_text(&model, r, &data, Some(&freq)));
        if !written.is_empty() {
            println!(
                "\nwrote {} figure files to {}",
                written.len(),
                a.plots
                    .as_ref()
                    .map_or(String::new(), |d| d.display().to_string())
            );
        }
    }
    Ok(())
}
