//! The analysis report: serialisable [`ReportData`], rendered as one
//! self-contained HTML5 file ([`render_html`]) or as Markdown that refers to
//! PNG files ([`render_markdown`] + [`report_images`]).
//!
//! Both renderers show the same content: the metadata lines and the tabular
//! sections are built once in `sections`; this module owns the data model, the
//! HTML and Markdown assembly, the figure files and the escaping helpers.

use std::fmt::Write as _;

use base64::Engine as _;

use serde::{Deserialize, Serialize};

use crate::align_uniform::AlignmentUniformity;
use crate::anisotropy::Anisotropy;
use crate::error::Result;
use crate::frequency::FrequencyGeometry;
use crate::lexical::LexicalBias;
use crate::plot::{render_png, Figure};
use crate::spectrum::SpectrumSummary;

mod sections;

use sections::{meta_lines, sections};

/// The STS comparison table: one row per method, one column per task plus
/// (typically) a final "Avg." column.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StsTable {
    /// Text above the table, e.g. "Spearman's rank correlation x 100".
    #[serde(default)]
    pub caption: String,
    /// Column headers (task names and "Avg.").
    pub columns: Vec<String>,
    /// The rows.
    pub rows: Vec<StsRow>,
}

/// One row of the [`StsTable`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StsRow {
    /// Method label, e.g. "BERT-base first-last-avg + flow".
    pub label: String,
    /// One value per column; `None` is shown as a dash. Missing trailing
    /// values are treated as `None`, extra values are ignored.
    pub values: Vec<Option<f64>>,
}

/// Anisotropy before and after one calibrator for one pooling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnisotropyEntry {
    /// Pooling name.
    pub pooling: String,
    /// Calibrator kind (flow, whitening, ...).
    pub calibrator: String,
    /// Of the raw embeddings.
    pub before: Anisotropy,
    /// Of the calibrated embeddings.
    pub after: Anisotropy,
}

/// Spectrum summary before and after one calibrator for one pooling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpectrumEntry {
    /// Pooling name.
    pub pooling: String,
    /// Calibrator kind.
    pub calibrator: String,
    /// Of the raw embeddings.
    pub before: SpectrumSummary,
    /// Of the calibrated embeddings.
    pub after: SpectrumSummary,
}

/// Lexical bias of one method on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LexicalBiasEntry {
    /// Method label.
    pub label: String,
    /// Task name.
    pub task: String,
    /// The correlations.
    pub result: LexicalBias,
}

/// Alignment and uniformity of one method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlignmentUniformityEntry {
    /// Method label.
    pub label: String,
    /// The values.
    pub result: AlignmentUniformity,
}

/// Word-frequency geometry of one model's word embeddings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrequencyEntry {
    /// Label (model / corpus).
    pub label: String,
    /// The buckets (and per-token points).
    pub geometry: FrequencyGeometry,
}

/// A figure of the report with its caption and pixel size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportFigure {
    /// Short identifier, used (slugified) in the PNG file name.
    pub id: String,
    /// Caption shown under the image and used as alt text.
    pub caption: String,
    /// The data.
    pub figure: Figure,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// Everything the report shows. Empty sections are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportData {
    /// Document title.
    pub title: String,
    /// Model name.
    pub model: String,
    /// Pooling strategies evaluated.
    #[serde(default)]
    pub poolings: Vec<String>,
    /// Calibrator kinds evaluated.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// STS comparison table.
    #[serde(default)]
    pub sts: Option<StsTable>,
    /// Anisotropy before/after, per pooling x calibrator.
    #[serde(default)]
    pub anisotropy: Vec<AnisotropyEntry>,
    /// Spectrum summaries before/after, per pooling x calibrator.
    #[serde(default)]
    pub spectra: Vec<SpectrumEntry>,
    /// Lexical-bias rows.
    #[serde(default)]
    pub lexical_bias: Vec<LexicalBiasEntry>,
    /// Alignment/uniformity rows.
    #[serde(default)]
    pub alignment_uniformity: Vec<AlignmentUniformityEntry>,
    /// Word-frequency geometry.
    #[serde(default)]
    pub frequency: Vec<FrequencyEntry>,
    /// Figures, in display order.
    #[serde(default)]
    pub figures: Vec<ReportFigure>,
    /// Free-text notes shown at the end, one paragraph each.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Escapes text for HTML element content and attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Escapes text for a Markdown table cell or paragraph: HTML-special
/// characters become entities (so no raw HTML gets through) and Markdown
/// punctuation is backslash-escaped; line breaks become spaces.
pub fn escape_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The file name used for figure `index` (0-based) of the report.
pub fn figure_file_name(index: usize, figure: &ReportFigure) -> String {
    let mut slug = String::new();
    for c in figure.id.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug: String = slug.trim_matches('-').chars().take(60).collect();
    let slug = slug.trim_end_matches('-');
    let slug = if slug.is_empty() { "figure" } else { slug };
    format!("fig{:02}-{slug}.png", index + 1)
}

/// Renders every figure of `data` to PNG: `(file name, bytes)` in figure
/// order, for the caller to write next to the Markdown file (into the
/// directory passed to [`render_markdown`]).
pub fn report_images(data: &ReportData) -> Result<Vec<(String, Vec<u8>)>> {
    data.figures
        .iter()
        .enumerate()
        .map(|(i, f)| {
            Ok((
                figure_file_name(i, f),
                render_png(&f.figure, f.width, f.height)?,
            ))
        })
        .collect()
}

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;background:#fafafa;color:#222}\
main{max-width:1100px;margin:0 auto;padding:1.5rem 2rem 3rem;background:#fff}\
h1{font-size:1.7rem;margin-bottom:.3rem}h2{font-size:1.3rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}\
h3{font-size:1.05rem}.meta{color:#555}table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}\
caption{caption-side:top;text-align:left;color:#555;padding-bottom:.3rem}\
th,td{border:1px solid #ddd;padding:.3rem .55rem}td{text-align:right;font-variant-numeric:tabular-nums}\
thead th{background:#f0f0f0}tbody th{text-align:left;font-weight:normal}\
figure{margin:1.2rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}\
figcaption{color:#555;font-size:.9rem}.error{color:#a00}";

/// Renders the report as one self-contained HTML5 document: inline CSS,
/// figures as `data:image/png;base64,` images, no external references.
/// All text from `data` is HTML-escaped. A figure that fails to render is
/// replaced by an (escaped) error message.
pub fn render_html(data: &ReportData) -> String {
    let mut h = String::new();
    let title = if data.title.is_empty() {
        "bertflow analysis report"
    } else {
        &data.title
    };
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(h, "<title>{}</title>", escape_html(title));
    let _ = writeln!(h, "<style>{CSS}</style>\n</head>\n<body>\n<main>");
    let _ = writeln!(h, "<h1>{}</h1>", escape_html(title));
    for (k, v) in meta_lines(data) {
        let _ = writeln!(
            h,
            "<p class=\"meta\"><strong>{}:</strong> {}</p>",
            escape_html(k),
            escape_html(&v)
        );
    }
    for (heading, intro, tables) in sections(data) {
        let _ = writeln!(h, "<section>\n<h2>{}</h2>", escape_html(heading));
        if !intro.is_empty() {
            let _ = writeln!(h, "<p>{}</p>", escape_html(&intro));
        }
        for (sub, caption, table) in tables {
            if !sub.is_empty() {
                let _ = writeln!(h, "<h3>{}</h3>", escape_html(&sub));
            }
            h.push_str(&table.html(&caption));
        }
        h.push_str("</section>\n");
    }
    if !data.figures.is_empty() {
        h.push_str("<section>\n<h2>Figures</h2>\n");
        for f in &data.figures {
            let cap = escape_html(&f.caption);
            match render_png(&f.figure, f.width, f.height) {
                Ok(png) => {
                    let _ = writeln!(
                        h,
                        "<figure><img src=\"data:image/png;base64,{}\" width=\"{}\" height=\"{}\" alt=\"{cap}\"><figcaption>{cap}</figcaption></figure>",
                        base64::engine::general_purpose::STANDARD.encode(&png),
                        f.width,
                        f.height
                    );
                }
                Err(e) => {
                    let _ = writeln!(
                        h,
                        "<figure><p class=\"error\">Figure could not be rendered: {}</p><figcaption>{cap}</figcaption></figure>",
                        escape_html(&e.to_string())
                    );
                }
            }
        }
        h.push_str("</section>\n");
    }
    if !data.notes.is_empty() {
        h.push_str("<section>\n<h2>Notes</h2>\n");
        for n in &data.notes {
            let _ = writeln!(h, "<p>{}</p>", escape_html(n));
        }
        h.push_str("</section>\n");
    }
    h.push_str("</main>\n</body>\n</html>\n");
    h
}

/// Renders the report as Markdown. Figures are referenced as
/// `image_dir_relative/<file name>` with the names of [`report_images`]
/// (an empty `image_dir_relative` means the Markdown file's directory).
/// Text is escaped so that no raw HTML gets through.
pub fn render_markdown(data: &ReportData, image_dir_relative: &str) -> String {
    let mut m = String::new();
    let title = if data.title.is_empty() {
        "bertflow analysis report"
    } else {
        &data.title
    };
    let _ = writeln!(m, "# {}\n", escape_markdown(title));
    for (k, v) in meta_lines(data) {
        let _ = writeln!(m, "**{}:** {}  ", escape_markdown(k), escape_markdown(&v));
    }
    m.push('\n');
    for (heading, intro, tables) in sections(data) {
        let _ = writeln!(m, "## {}\n", escape_markdown(heading));
        if !intro.is_empty() {
            let _ = writeln!(m, "{}\n", escape_markdown(&intro));
        }
        for (sub, caption, table) in tables {
            if !sub.is_empty() {
                let _ = writeln!(m, "### {}\n", escape_markdown(&sub));
            }
            let _ = writeln!(m, "{}", table.markdown(&caption));
        }
    }
    if !data.figures.is_empty() {
        m.push_str("## Figures\n\n");
        let dir = image_dir_relative.trim_end_matches('/');
        for (i, f) in data.figures.iter().enumerate() {
            let file = figure_file_name(i, f);
            let path = if dir.is_empty() {
                file
            } else {
                format!("{}/{file}", encode_path(dir))
            };
            let cap = escape_markdown(&f.caption);
            let _ = writeln!(m, "![{cap}]({path})\n\n*{cap}*\n");
        }
    }
    if !data.notes.is_empty() {
        m.push_str("## Notes\n\n");
        for n in &data.notes {
            let _ = writeln!(m, "{}\n", escape_markdown(n));
        }
    }
    m
}

/// Percent-encodes the characters of a relative path that would break a
/// Markdown link target.
fn encode_path(p: &str) -> String {
    let mut out = String::new();
    for c in p.chars() {
        match c {
            ' ' => out.push_str("%20"),
            '(' => out.push_str("%28"),
            ')' => out.push_str("%29"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '"' => out.push_str("%22"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}
