//! `bertflow`: calibrated sentence embeddings from BERT-family models.
mod args;
mod cmd_advise;
mod cmd_analyze;
mod cmd_bench;
mod cmd_compare;
mod cmd_encode;
mod cmd_encode_retrieval;
mod cmd_eval;
mod cmd_export;
mod cmd_fit;
mod cmd_index;
mod cmd_index_sparse;
mod cmd_kinds;
mod cmd_report;
mod cmd_rerank;
mod cmd_serve;
mod cmd_transform;
mod cmd_tune;
mod help;
mod progress;

use bertflow_core::io::EMPTY_RULES_HINT;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

const ABOUT: &str =
    "Calibrated sentence embeddings from BERT-family models: BERT-flow, whitening and friends, \
evaluated on the STS benchmarks.";

const LONG_ABOUT: &str = "Calibrated sentence embeddings from BERT-family models.

Sentence embeddings taken straight from a pre-trained model are anisotropic, so cosine
similarity tracks surface overlap more than meaning. bertflow keeps the encoder frozen and
fits an unsupervised calibrator on unlabelled sentences: BERT-flow (a Glow normalizing flow
to a standard Gaussian), whitening, standard normalization or removing the top principal
directions; then compares sentences by cosine in the calibrated space.

Typical use:
  bertflow eval --model models/all-MiniLM-L6-v2 --pooling last-avg
  bertflow eval --pooling first-last-avg --fit flow --on target
  bertflow compare --poolings last-avg,first-last-avg --kinds none,flow,whiten
  bertflow encode --input sentences.txt --output emb.npy";

#[derive(Parser, Debug)]
#[command(name = "bertflow", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// No progress bars or notes on stderr. Without it, progress bars are hidden when stderr
    /// is not a terminal, and notes are still written (they belong in logs).
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Encode sentences to a .npy, .jsonl or .safetensors file.
    Encode(cmd_encode::EncodeArgs),
    /// Evaluate one pooling (optionally calibrated) on the STS benchmarks.
    Eval(cmd_eval::EvalArgs),
    /// Fit a calibrator (flow, whiten, sn, natsv, ...) on sentences or on embeddings
    /// from anywhere (.npy, .safetensors) and save it to a file.
    Fit(cmd_fit::FitArgs),
    /// Apply a calibrator file to embeddings from anywhere (.npy or .safetensors in,
    /// .npy out), chunk by chunk.
    Transform(cmd_transform::TransformArgs),
    /// Compare poolings x calibrators on the STS benchmarks (the paper-style table).
    Compare(cmd_compare::CompareArgs),
    /// "Should I calibrate?" for any corpus: its statistics, what `auto` would do,
    /// and one sentence to act on (no STS data or labels needed).
    Advise(cmd_advise::AdviseArgs),
    /// Analyse the embedding space: anisotropy, singular spectrum, lexical bias,
    /// alignment/uniformity, word frequency.
    Analyze(cmd_analyze::AnalyzeArgs),
    /// Write a self-contained HTML report (and a Markdown twin) with the STS table,
    /// the analyses and figures.
    Report(cmd_report::ReportArgs),
    /// Write a calibrated model as a sentence-transformers directory
    /// (SentenceTransformer(dir).encode gives the calibrated vectors).
    ///
    /// last-avg and cls become sentence-transformers' Pooling; other poolings (not
    /// `pooler`) are computed by bertflow's module from the hidden states. An affine
    /// calibrator (none, sn, whiten, natsv, sn+natsv, softwhiten or auto without blend)
    /// becomes a Dense module: the directory then loads without bertflow. The flow and
    /// blends become bertflow's module (bertflow.st.Calibrator), which needs bertflow
    /// where the model is loaded (and trust_remote_code=True in sentence-transformers 5+).
    /// Token weighting is not exported.
    Export(cmd_export::ExportArgs),
    /// Serve embeddings, similarity and search over HTTP (OpenAI-compatible).
    Serve(cmd_serve::ServeArgs),
    /// Rank texts against a query with a reranker (a cross-encoder: a
    /// *ForSequenceClassification checkpoint), best first.
    Rerank(cmd_rerank::RerankArgs),
    /// Build, extend, inspect or verify a persistent search index for `serve --index`.
    Index(cmd_index::IndexArgs),
    /// Benchmarks: encoder throughput on STS-B test, BERT-flow fit time on the
    /// 29.5k-sentence fit corpus (compare with scripts/reference/).
    Bench(cmd_bench::BenchArgs),
    /// Time the fp32 and int8 kernels on the model's layer shapes beside one core's
    /// peak, and keep the fastest for this CPU (done once at first use otherwise).
    Tune(cmd_tune::TuneArgs),
    /// List the poolings and the hidden states each one reads.
    Poolings,
    /// List the calibrator kinds (their options, defaults and ranges; --json: as data)
    /// and the quantizers.
    Kinds(cmd_kinds::KindsArgs),
}

/// The error chain on one line, a core setting named by its flag
/// (`--max-len: ...` where core says `max_len: ...`).
fn describe(e: &anyhow::Error) -> String {
    e.chain()
        .map(|cause| {
            match cause
                .downcast_ref::<bertflow_core::CoreError>()
                .and_then(|e| e.setting_parts())
            {
                // The default rule for empty lines refused one: the user never
                // gave --empty, so the message spells the flag to give.
                Some(("empty", message)) => match message.strip_suffix(EMPTY_RULES_HINT) {
                    Some(what) => format!(
                        "{what}give `--empty skip` to drop empty lines, or `--empty keep` to \
                         embed them"
                    ),
                    None => format!("--empty: {message}"),
                },
                Some((field, message)) => format!("--{}: {message}", field.replace('_', "-")),
                None => cause.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(": ")
}

fn main() {
    // A closed standard output (`bertflow eval | head`) ends the program
    // quietly, as for other Unix tools, instead of a panic in `println!`.
    // SAFETY: restoring the default disposition of one signal at start-up,
    // before any thread exists.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let matches = help::shape(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    progress::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Encode(a) => match a.retrieval.outputs(a.vectors.pooling.as_ref()) {
            Ok(Some(outputs)) => cmd_encode_retrieval::run(a, outputs),
            Ok(None) if a.decode.is_some() => Err(anyhow::anyhow!(
                "--decode names the entries of sparse vectors: add --pooling splade or \
                 --outputs sparse"
            )),
            Ok(None) => cmd_encode::run(a),
            Err(e) => Err(e),
        },
        Command::Eval(a) => cmd_eval::run(a),
        Command::Fit(a) => cmd_fit::run(a),
        Command::Transform(a) => cmd_transform::run(a),
        Command::Compare(a) => cmd_compare::run(a),
        Command::Advise(a) => cmd_advise::run(a),
        Command::Analyze(a) => cmd_analyze::run(a),
        Command::Report(a) => cmd_report::run(a),
        Command::Export(a) => cmd_export::run(a),
        Command::Rerank(a) => cmd_rerank::run(a),
        Command::Serve(a) => cmd_serve::run(a),
        Command::Index(a) => cmd_index::run(a),
        Command::Bench(a) => cmd_bench::run(a),
        Command::Kinds(a) => cmd_kinds::run(a),
        Command::Tune(a) => cmd_tune::run(a),
        Command::Poolings => {
            print!("{}", args::pooling_help());
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {}", describe(&e));
        std::process::exit(1);
    }
}
