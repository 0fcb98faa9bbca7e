//! `bertflow rerank`: texts ranked by a reranker (cross-encoder) against a query,
//! or by late interaction (MaxSim) of an embedding model's per-token vectors.
use anyhow::{bail, Result};
use bertflow_core::io::{read_sentences, EmptyLines};
use bertflow_core::rerank::ranked;
use bertflow_core::RerankerConfig;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RerankArgs {
    #[command(flatten)]
    pub reranker: RerankerConfig,
    /// The query every text is scored against.
    #[arg(long, value_name = "TEXT")]
    pub query: String,
    /// The texts: one per line, or JSONL with a "text" field (.jsonl/.ndjson).
    /// `-` reads standard input.
    #[arg(long, value_name = "FILE", conflicts_with = "text")]
    pub texts: Option<PathBuf>,
    /// The texts, on the command line.
    #[arg(value_name = "TEXT", required_unless_present = "texts")]
    pub text: Vec<String>,
    /// Scores are the model's raw logits, not their sigmoid (0 to 1).
    #[arg(long)]
    pub raw_scores: bool,
    /// Refuse a query and text longer than --max-len tokens together instead of
    /// cutting the longer of the two.
    #[arg(long)]
    pub no_truncate: bool,
    /// Print only the best N texts.
    #[arg(long, value_name = "N")]
    pub top_k: Option<usize>,
    /// One JSON object per line, best first, as text-embeddings-inference's
    /// /rerank answers: {"index", "score", "text"} (index: the text's position
    /// in the input, from 0).
    #[arg(long)]
    pub json: bool,
    /// Score by late interaction (ColBERT's MaxSim of per-token vectors) with an
    /// embedding model instead of a cross-encoder: BGE-M3's colbert_linear.pt when
    /// the model has one, else its normalised last hidden states.
    #[arg(long)]
    pub late_interaction: bool,
    /// With --late-interaction: pad the query with the mask token to this many tokens.
    #[arg(long, value_name = "TOKENS", requires = "late_interaction")]
    pub query_length: Option<usize>,
}

/// One line of `--json`: TEI's `/rerank` object (the score as f32 prints).
#[derive(serde::Serialize)]
struct Line<'a> {
    index: usize,
    score: f32,
    text: &'a str,
}

pub fn run(a: RerankArgs) -> Result<()> {
    let texts = match &a.texts {
        Some(path) => read_sentences(path, false, EmptyLines::Error)?.texts,
        None => a.text.clone(),
    };
    if texts.is_empty() {
        bail!("no texts to rerank");
    }
    if a.top_k == Some(0) {
        bail!("--top-k must be at least 1");
    }
    let scores = if a.late_interaction {
        late_interaction(&a, &texts)?
    } else {
        let reranker = a.reranker.open(crate::progress::handle())?;
        let truncate = bertflow_core::defaults::RERANK_TRUNCATE && !a.no_truncate;
        reranker.rerank(&a.query, &texts, a.raw_scores, truncate)?
    };
    let ranks = ranked(&scores);
    let shown = &ranks[..a.top_k.unwrap_or(ranks.len()).min(ranks.len())];
    let mut out = std::io::stdout().lock();
    for (i, r) in shown.iter().enumerate() {
        let text = &texts[r.index];
        if a.json {
            let line = Line {
                index: r.index,
                score: r.score,
                text,
            };
            writeln!(out, "{}", serde_json::to_string(&line)?)?;
        } else {
            writeln!(
                out,
                "{:>3}. {:>10.6}  [{}]  {text}",
                i + 1,
                r.score,
                r.index
            )?;
        }
    }
    Ok(())
}

/// MaxSim scores of `texts` against the query by an embedding model's
/// per-token vectors (core's [`bertflow_core::retrieval`]).
fn late_interaction(a: &RerankArgs, texts: &[String]) -> Result<Vec<f32>> {
    if a.raw_scores || a.no_truncate {
        bail!("--raw-scores and --no-truncate apply to cross-encoders, not --late-interaction");
    }
    let r = &a.reranker;
    let cfg = bertflow_core::EmbedderConfig {
        model: r.model.clone(),
        runtime: r.runtime.clone(),
        ..bertflow_core::EmbedderConfig::default()
    };
    let retriever = bertflow_core::Retriever::open(&cfg, crate::progress::handle())?;
    Ok(retriever.late_interaction(&a.query, texts, a.query_length, None)?)
}
