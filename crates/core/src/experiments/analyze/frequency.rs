//! Word-piece frequency against the model's static word embeddings.
use super::AnalysisOptions;
use crate::error::{CoreError, Result};
use crate::runtime::embedder::Embedder;
use bertflow_analysis::{frequency_geometry, FrequencyConfig, FrequencyGeometry};
use bertflow_eval::{dedup_preserving_order, fit_sentences, FitCorpus, Task};

/// Word-frequency geometry of the model's static word embeddings.
pub struct FrequencyResult {
    pub geometry: FrequencyGeometry,
    /// What the counts were taken on.
    pub corpus: String,
    pub n_sentences: usize,
    /// Word pieces counted.
    pub n_tokens: u64,
}

/// Counts word pieces on the corpus and measures norms and kNN distances.
pub fn frequency(embedder: &Embedder, opts: &AnalysisOptions) -> Result<FrequencyResult> {
    let (sentences, corpus) = match &opts.freq_corpus {
        Some(p) => {
            let input =
                crate::runtime::io::read_sentences(p, false, crate::runtime::io::EmptyLines::Skip)?;
            (input.texts, p.display().to_string())
        }
        None => {
            let dir = opts.data_dir.clone();
            bertflow_eval::check_data_dir(&dir, &Task::ALL)?;
            let mut v = Vec::new();
            for t in Task::ALL {
                v.extend(fit_sentences(&dir, t, FitCorpus::Target)?);
            }
            let v = dedup_preserving_order(v);
            let d = format!(
                "every sentence of the seven STS tasks, all splits ({} distinct)",
                v.len()
            );
            (v, d)
        }
    };
    let emb = embedder.encoder.word_embedding_matrix()?;
    let vocab = emb.nrows();
    let counts = count_word_pieces(embedder, &sentences, vocab)?;
    let n_tokens = counts.iter().sum();
    let config = FrequencyConfig {
        k: opts.knn,
        max_queries_per_bucket: Some(opts.knn_queries.max(1)),
        seed: opts.seed,
        ..FrequencyConfig::default()
    };
    let pb = embedder.progress.bar(1, "word kNN", "steps");
    let geometry = frequency_geometry(&counts, emb.view(), &config)?;
    pb.finish();
    Ok(FrequencyResult {
        geometry,
        corpus,
        n_sentences: sentences.len(),
        n_tokens,
    })
}

/// Occurrences of each word-piece id (ids beyond the embedding matrix are ignored).
fn count_word_pieces(embedder: &Embedder, sentences: &[String], vocab: usize) -> Result<Vec<u64>> {
    let tok = embedder.encoder.tokenizer();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let chunk = sentences.len().div_ceil(threads).max(1);
    let pb = embedder
        .progress
        .bar(sentences.len() as u64, "counting", "sentences");
    let parts: Vec<Result<Vec<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = sentences
            .chunks(chunk)
            .map(|part| {
                let pb = &pb;
                s.spawn(move || -> Result<Vec<u64>> {
                    let mut counts = vec![0u64; vocab];
                    for (i, text) in part.iter().enumerate() {
                        for id in tok.word_pieces(text)? {
                            if let Some(c) = counts.get_mut(id as usize) {
                                *c += 1;
                            }
                        }
                        if i % 256 == 255 {
                            pb.inc(256);
                        }
                    }
                    Ok(counts)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(CoreError::Input("a counting thread panicked".into())))
            })
            .collect()
    });
    pb.finish();
    let mut total = vec![0u64; vocab];
    for part in parts {
        for (t, c) in total.iter_mut().zip(part?) {
            *t += c;
        }
    }
    Ok(total)
}
