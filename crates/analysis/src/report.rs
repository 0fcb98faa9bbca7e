//! The analysis report: serialisable [`ReportData`], rendered as one
//! self-contained HTML5 file ([`render_html`]) or as Markdown that refers to
//! PNG files ([`render_markdown`] + [`report_images`]).

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

const DASH: &str = "–";

fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        DASH.to_string()
    }
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| DASH.to_string(), |v| num(v, decimals))
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

/// A table as header cells and body rows of (already formatted, unescaped)
/// cells; `bold[r][c]` marks cells to emphasise.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    bold: Vec<Vec<bool>>,
}

impl Table {
    fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            bold: Vec::new(),
        }
    }

    fn push(&mut self, row: Vec<String>) {
        self.bold.push(vec![false; row.len()]);
        self.rows.push(row);
    }

    fn html(&self, caption: &str) -> String {
        let mut s = String::from("<table>\n");
        if !caption.is_empty() {
            let _ = writeln!(s, "<caption>{}</caption>", escape_html(caption));
        }
        s.push_str("<thead><tr>");
        for h in &self.header {
            let _ = write!(s, "<th>{}</th>", escape_html(h));
        }
        s.push_str("</tr></thead>\n<tbody>\n");
        for (row, bold) in self.rows.iter().zip(&self.bold) {
            s.push_str("<tr>");
            for (c, (cell, &b)) in row.iter().zip(bold).enumerate() {
                let tag = if c == 0 { "th" } else { "td" };
                let text = escape_html(cell);
                if b {
                    let _ = write!(s, "<{tag}><strong>{text}</strong></{tag}>");
                } else {
                    let _ = write!(s, "<{tag}>{text}</{tag}>");
                }
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</tbody>\n</table>\n");
        s
    }

    fn markdown(&self, caption: &str) -> String {
        let mut s = String::new();
        if !caption.is_empty() {
            let _ = writeln!(s, "{}\n", escape_markdown(caption));
        }
        let cells = |cells: &[String], bold: Option<&[bool]>| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let e = escape_markdown(c);
                    if bold.is_some_and(|b| b[i]) {
                        format!("**{e}**")
                    } else {
                        e
                    }
                })
                .collect();
            format!("| {} |\n", parts.join(" | "))
        };
        s.push_str(&cells(&self.header, None));
        let _ = writeln!(s, "|{}", "---|".repeat(self.header.len()));
        for (row, bold) in self.rows.iter().zip(&self.bold) {
            s.push_str(&cells(row, Some(bold)));
        }
        s
    }
}

fn sts_table(t: &StsTable) -> Table {
    let mut header: Vec<&str> = vec![""];
    header.extend(t.columns.iter().map(String::as_str));
    let mut table = Table::new(&header);
    for r in &t.rows {
        let mut row = vec![r.label.clone()];
        row.extend((0..t.columns.len()).map(|c| opt(r.values.get(c).copied().flatten(), 2)));
        table.push(row);
    }
    // Bold the best value of each column (all tied best values).
    for c in 0..t.columns.len() {
        let best = t
            .rows
            .iter()
            .filter_map(|r| r.values.get(c).copied().flatten())
            .filter(|v| v.is_finite())
            .fold(f64::NEG_INFINITY, f64::max);
        for (ri, r) in t.rows.iter().enumerate() {
            if r.values.get(c).copied().flatten() == Some(best) {
                table.bold[ri][c + 1] = true;
            }
        }
    }
    table
}

fn anisotropy_table(entries: &[AnisotropyEntry]) -> Table {
    let mut t = Table::new(&[
        "Pooling",
        "Calibrator",
        "Random-pair cos (before)",
        "Random-pair cos (after)",
        "Std (before)",
        "Std (after)",
        "Cos to mean (before)",
        "Cos to mean (after)",
    ]);
    for e in entries {
        t.push(vec![
            e.pooling.clone(),
            e.calibrator.clone(),
            num(e.before.mean_random_pair_cosine, 4),
            num(e.after.mean_random_pair_cosine, 4),
            num(e.before.std_random_pair_cosine, 4),
            num(e.after.std_random_pair_cosine, 4),
            num(e.before.mean_cosine_to_mean, 4),
            num(e.after.mean_cosine_to_mean, 4),
        ]);
    }
    t
}

fn spectrum_table(entries: &[SpectrumEntry]) -> Table {
    let mut t = Table::new(&[
        "Pooling",
        "Calibrator",
        "Top-1 var. share (before)",
        "Top-1 (after)",
        "Top-5 (before)",
        "Top-5 (after)",
        "Top-10 (before)",
        "Top-10 (after)",
        "Eff. rank (before)",
        "Eff. rank (after)",
    ]);
    for e in entries {
        t.push(vec![
            e.pooling.clone(),
            e.calibrator.clone(),
            num(e.before.variance_share_top1, 4),
            num(e.after.variance_share_top1, 4),
            num(e.before.variance_share_top5, 4),
            num(e.after.variance_share_top5, 4),
            num(e.before.variance_share_top10, 4),
            num(e.after.variance_share_top10, 4),
            num(e.before.effective_rank, 1),
            num(e.after.effective_rank, 1),
        ]);
    }
    t
}

fn lexical_table(entries: &[LexicalBiasEntry]) -> Table {
    let mut t = Table::new(&[
        "Method",
        "Task",
        "Pairs",
        "ρ(sim, edit)",
        "ρ(sim, gold)",
        "ρ(gold, edit)",
        "Threshold",
        "Pairs (edit ≤ threshold)",
        "ρ(sim, gold | edit ≤ threshold)",
    ]);
    for e in entries {
        let r = &e.result;
        t.push(vec![
            e.label.clone(),
            e.task.clone(),
            r.n_pairs.to_string(),
            opt(r.spearman_sim_vs_edit, 2),
            opt(r.spearman_sim_vs_gold, 2),
            opt(r.spearman_gold_vs_edit, 2),
            r.threshold.to_string(),
            r.n_small.to_string(),
            opt(r.spearman_sim_vs_gold_small, 2),
        ]);
    }
    t
}

fn align_table(entries: &[AlignmentUniformityEntry]) -> Table {
    let mut t = Table::new(&[
        "Method",
        "Alignment",
        "Uniformity",
        "Positive pairs",
        "Sentences",
        "Uniformity pairs",
    ]);
    for e in entries {
        let r = &e.result;
        t.push(vec![
            e.label.clone(),
            num(r.alignment, 4),
            num(r.uniformity, 4),
            r.n_positive_pairs.to_string(),
            r.n_sentences.to_string(),
            format!(
                "{} ({})",
                r.uniformity_pairs,
                if r.uniformity_exact { "all" } else { "sampled" }
            ),
        ]);
    }
    t
}

fn frequency_table(g: &FrequencyGeometry) -> Table {
    let knn = format!("Mean {}-NN l2 distance", g.k);
    let mut t = Table::new(&["Rank range", "Tokens", "Mean l2 norm", &knn, "k-NN queries"]);
    for b in &g.buckets {
        let range = match b.rank_end {
            Some(e) => format!("[{}, {})", b.rank_start, e),
            None => format!("[{}, ∞)", b.rank_start),
        };
        t.push(vec![
            range,
            b.n_tokens.to_string(),
            opt(b.mean_norm, 4),
            opt(b.mean_knn_distance, 4),
            b.n_knn_queries.to_string(),
        ]);
    }
    t
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

fn meta_lines(data: &ReportData) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    if !data.model.is_empty() {
        v.push(("Model", data.model.clone()));
    }
    if !data.poolings.is_empty() {
        v.push(("Poolings", data.poolings.join(", ")));
    }
    if !data.kinds.is_empty() {
        v.push(("Calibrators", data.kinds.join(", ")));
    }
    v
}

/// (sub-heading, caption, table)
type SubTable = (String, String, Table);

/// The tabular sections: (heading, intro paragraph, tables); empty ones are omitted.
fn sections(data: &ReportData) -> Vec<(&'static str, String, Vec<SubTable>)> {
    let mut s = Vec::new();
    if let Some(t) = &data.sts {
        if !t.rows.is_empty() {
            s.push((
                "STS results",
                String::new(),
                vec![(String::new(), t.caption.clone(), sts_table(t))],
            ));
        }
    }
    if !data.anisotropy.is_empty() {
        s.push((
            "Anisotropy",
            "Mean cosine of random pairs of distinct sentences and mean cosine of each sentence to the mean vector; values near 0 indicate an isotropic space.".to_string(),
            vec![(String::new(), String::new(), anisotropy_table(&data.anisotropy))],
        ));
    }
    if !data.spectra.is_empty() {
        s.push((
            "Singular spectrum",
            "Share of the variance of the centred embeddings in the top singular directions, and the effective rank exp(H(p)), p_i = s_i / Σ s_j (Roy & Vetterli 2007).".to_string(),
            vec![(String::new(), String::new(), spectrum_table(&data.spectra))],
        ));
    }
    if !data.lexical_bias.is_empty() {
        s.push((
            "Lexical bias",
            "Spearman correlations × 100 between cosine similarity, gold score and edit distance of the sentence pairs.".to_string(),
            vec![(String::new(), String::new(), lexical_table(&data.lexical_bias))],
        ));
    }
    if !data.alignment_uniformity.is_empty() {
        s.push((
            "Alignment and uniformity",
            "Wang & Isola (2020) on l2-normalised embeddings: alignment = mean squared distance of positive pairs; uniformity = log mean exp(−2 · squared distance) over sentence pairs. Lower is better for both.".to_string(),
            vec![(String::new(), String::new(), align_table(&data.alignment_uniformity))],
        ));
    }
    if !data.frequency.is_empty() {
        let tables = data
            .frequency
            .iter()
            .map(|f| (f.label.clone(), String::new(), frequency_table(&f.geometry)))
            .collect();
        s.push((
            "Word frequency and geometry",
            "Word embeddings grouped by frequency rank (0 = most frequent): mean l2 norm and mean distance to the k nearest neighbours in the whole vocabulary.".to_string(),
            tables,
        ));
    }
    s
}
