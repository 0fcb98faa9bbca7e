//! Persistent search indexes (`bertflow index build|add|ann`): a corpus embedded
//! once with a model, pooling and optional calibrator, written to one
//! checksummed file ([`bertflow_index`]) that `serve --index` memory-maps, and an
//! optional HNSW graph next to it.
use crate::error::{Context, Result};
use crate::pipeline::Pipeline;
use crate::progress::Progress;
use bertflow_index::{Ann, AnnParams, Index, IndexWriter};
use std::path::Path;
use std::sync::Arc;

/// Embed `texts` `chunk` sentences at a time through `pipeline` (its pooling,
/// token weights and calibrator) and write each chunk as a segment of
/// `writer`. Memory is bounded by the chunk, whatever the corpus size.
/// Returns the number of sentences written.
pub fn embed_into_index(
    pipeline: &Pipeline,
    texts: &[String],
    chunk: usize,
    writer: &mut IndexWriter,
) -> Result<usize> {
    let embedder = pipeline.embedder();
    let bar = embedder
        .progress
        .bar(texts.len() as u64, "embedding the corpus", "sentences");
    let mut done = 0;
    for part in texts.chunks(chunk.max(1)) {
        let raw = pipeline
            .embed_batch(part, &embedder.opts)
            .context("encoding the corpus failed")?
            .vectors;
        let vectors = pipeline.calibrate(raw)?;
        let vectors = vectors.as_standard_layout();
        let flat = vectors
            .as_slice()
            .ok_or_else(|| crate::CoreError::Input("the embeddings are not contiguous".into()))?;
        writer.add(flat, part)?;
        done += part.len();
        bar.set_position(done as u64);
    }
    bar.finish();
    Ok(done)
}

/// What [`build_ann`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnBuilt {
    /// Points inserted now.
    pub inserted: usize,
    /// Points in the graph.
    pub total: usize,
    /// Whether an existing graph was extended (after `index add`) rather than built.
    pub extended: bool,
}

/// Build the HNSW graph of the index at `path` and store it next to it; a
/// graph already there that covers the index's first segments is extended
/// with the rows added since (unless `rebuild`).
pub fn build_ann(
    path: &Path,
    params: AnnParams,
    rebuild: bool,
    progress: &dyn Progress,
) -> Result<AnnBuilt> {
    let index = Arc::new(
        Index::open(path, false).with_context(|| format!("cannot open {}", path.display()))?,
    );
    let n = index.len();
    let bar = progress.bar(n as u64, "building the HNSW graph", "points");
    let tick = |i: usize| bar.set_position(i as u64);
    let existing = if rebuild {
        None
    } else {
        Ann::load(Arc::clone(&index), path)?
    };
    let built = match existing {
        Some(mut ann) => {
            let inserted = ann.extend(&tick)?;
            if inserted > 0 {
                ann.save(path)?;
            }
            AnnBuilt {
                inserted,
                total: ann.len(),
                extended: true,
            }
        }
        None => {
            let ann = Ann::build(index, params, &tick)?;
            ann.save(path)?;
            AnnBuilt {
                inserted: ann.len(),
                total: ann.len(),
                extended: false,
            }
        }
    };
    bar.finish();
    Ok(built)
}

/// Where `index build --calibrator` keeps a copy of its calibrator file, so
/// that the index carries everything that made its vectors:
/// `NAME.bfi` -> `NAME.bfi.calibrator.safetensors`.
pub fn calibrator_sidecar(index: &Path) -> std::path::PathBuf {
    let mut name = index.file_name().unwrap_or_default().to_os_string();
    name.push(".calibrator.safetensors");
    index.with_file_name(name)
}

/// Copies `calibrator` beside `index` (atomically); without one, removes a
/// stale copy of an earlier build.
pub fn keep_calibrator(index: &Path, calibrator: Option<&Path>) -> Result<()> {
    let side = calibrator_sidecar(index);
    match calibrator {
        Some(c) => {
            let bytes = std::fs::read(c).map_err(crate::CoreError::io("read calibrator", c))?;
            crate::write_file(&side, bytes)
        }
        None => match std::fs::remove_file(&side) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(crate::CoreError::io("remove", &side)(e))
            }
            _ => Ok(()),
        },
    }
}

/// Fills what `config` leaves unset from what `index` records (files carry
/// their settings): its pooling, and its calibrator (the copy `index build`
/// kept beside it, when its digest is the one recorded). A calibrator the
/// index records but cannot give back is an error naming the setting.
pub fn adopt_index_settings(config: &mut crate::PipelineConfig, index: &Path) -> Result<()> {
    let opened =
        Index::open(index, false).with_context(|| format!("cannot open {}", index.display()))?;
    let id = opened.identity();
    if config.pooling.is_none() {
        config.pooling = id.pooling.parse().ok();
    }
    if let (None, Some(recorded)) = (&config.calibrator, &id.calibrator) {
        let side = calibrator_sidecar(index);
        let same = side.is_file() && recorded.ends_with(&bertflow_index::file_digest(&side)?);
        if !same {
            return Err(crate::CoreError::setting(
                "calibrator",
                format!(
                    "the index {} was built with calibrator {recorded}: give that file \
                     (its copy {} is missing or another file)",
                    index.display(),
                    side.display()
                ),
            ));
        }
        config.calibrator = Some(side);
    }
    Ok(())
}
