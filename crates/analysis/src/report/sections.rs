//! The content both report renderers show: the metadata lines, the tabular
//! sections (STS results, anisotropy, spectrum, lexical bias, alignment and
//! uniformity, word-frequency geometry) built from [`ReportData`] as format-free
//! tables of formatted cells, and the [`Table`] type that writes such a table
//! as HTML or Markdown (escaping every cell), including number formatting and
//! the bolding of the best STS values.

use std::fmt::Write as _;

use super::{
    escape_html, escape_markdown, AlignmentUniformityEntry, AnisotropyEntry, LexicalBiasEntry,
    ReportData, SpectrumEntry, StsTable,
};
use crate::frequency::FrequencyGeometry;

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

/// A table as header cells and body rows of (already formatted, unescaped)
/// cells; `bold[r][c]` marks cells to emphasise.
pub(super) struct Table {
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

    pub(super) fn html(&self, caption: &str) -> String {
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

    pub(super) fn markdown(&self, caption: &str) -> String {
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

pub(super) fn meta_lines(data: &ReportData) -> Vec<(&'static str, String)> {
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
pub(super) fn sections(data: &ReportData) -> Vec<(&'static str, String, Vec<SubTable>)> {
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
