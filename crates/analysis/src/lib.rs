//! # bertflow-analysis
//!
//! Analyses of a sentence-embedding space, as used to study BERT-flow
//! (Li et al., EMNLP 2020, "On the Sentence Embeddings from Pre-trained
//! Language Models") and other post-hoc calibrations such as whitening:
//!
//! * [`anisotropy()`]: mean cosine of random sentence pairs and to the mean vector;
//! * [`spectrum()`]: normalised singular values, variance shares, effective rank;
//! * [`lexical_bias()`] and [`edit_distance`]: do similarities follow surface overlap?
//! * [`alignment_uniformity`]: Wang & Isola (2020);
//! * [`frequency_geometry`]: word-embedding norm and kNN distance per frequency bucket;
//! * [`plot`]: PNG/SVG figures with plotters and a bundled font (no system libraries);
//! * [`report`]: a self-contained HTML report and a Markdown twin.
//!
//! The crate is pure computation: it receives embeddings as
//! `ndarray::ArrayView2<f32>` (one row per sentence or token) and returns
//! serde-serialisable results. Sampling uses the SplitMix64 generator of
//! `bertflow-numeric` so that results for a seed do not depend on dependency
//! versions. Bad input is
//! reported as an [`AnalysisError`], never a panic.

pub mod align_uniform;
pub mod anisotropy;
pub mod error;
pub mod figures;
pub mod frequency;
pub mod lexical;
mod linalg;
pub mod plot;
pub mod report;
pub mod spectrum;
pub mod stats;

pub use align_uniform::{
    alignment, alignment_uniformity, uniformity, AlignmentUniformity, UniformityMode,
};
pub use anisotropy::{anisotropy, Anisotropy};
pub use error::{AnalysisError, Result};
pub use figures::{
    norm_vs_rank_figure, similarity_vs_edit_figure, similarity_vs_gold_figure, spectrum_figure,
};
pub use frequency::{
    frequency_geometry, FrequencyBucket, FrequencyConfig, FrequencyGeometry, TokenPoint,
};
pub use lexical::{
    char_edit_distance, char_tokens, edit_distance, lexical_bias, word_edit_distance, word_tokens,
    LexicalBias,
};
pub use plot::{render_png, render_svg, Figure, LegendPosition, Series, SeriesKind};
pub use report::{
    figure_file_name, render_html, render_markdown, report_images, AlignmentUniformityEntry,
    AnisotropyEntry, FrequencyEntry, LexicalBiasEntry, ReportData, ReportFigure, SpectrumEntry,
    StsRow, StsTable,
};
pub use spectrum::{spectrum, Spectrum, SpectrumSummary};
