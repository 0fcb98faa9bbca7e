//! Plain-text result tables for the CLI.

/// Renders a table: a header line (`row_header`, then `columns`), a rule of dashes, then
/// one line per row. Row labels are left-aligned; numbers are right-aligned with 2
/// decimals; a missing cell (`None`, or a row shorter than `columns`) shows "-". Cells
/// beyond `columns.len()` are ignored. With `with_average`, an "Avg." column holds the
/// mean of the row's cells, or "-" when any cell is missing. Columns are separated by
/// two spaces; lines have no trailing spaces and end with `\n`.
pub fn render_table(
    row_header: &str,
    columns: &[String],
    rows: &[(String, Vec<Option<f64>>)],
    with_average: bool,
) -> String {
    let mut header: Vec<String> = columns.to_vec();
    if with_average {
        header.push("Avg.".to_string());
    }
    let body: Vec<(String, Vec<String>)> = rows
        .iter()
        .map(|(label, values)| {
            let cells: Vec<Option<f64>> = (0..columns.len())
                .map(|c| values.get(c).copied().flatten())
                .collect();
            let mut text: Vec<String> = cells.iter().map(|v| fmt_cell(*v)).collect();
            if with_average {
                let avg = if cells.is_empty() {
                    None
                } else {
                    cells
                        .iter()
                        .copied()
                        .sum::<Option<f64>>()
                        .map(|s| s / cells.len() as f64)
                };
                text.push(fmt_cell(avg));
            }
            (label.clone(), text)
        })
        .collect();

    let width = |s: &str| s.chars().count();
    let label_w = body
        .iter()
        .map(|(l, _)| width(l))
        .chain([width(row_header)])
        .max()
        .unwrap_or(0);
    let col_w: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(c, h)| {
            body.iter()
                .map(|(_, cells)| width(&cells[c]))
                .chain([width(h)])
                .max()
                .unwrap_or(0)
        })
        .collect();

    let line = |label: &str, cells: &[String]| {
        let mut s = format!("{label:<label_w$}");
        for (cell, w) in cells.iter().zip(&col_w) {
            s.push_str(&format!("  {cell:>w$}"));
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(row_header, &header);
    let total = label_w + col_w.iter().map(|w| w + 2).sum::<usize>();
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for (label, cells) in &body {
        out.push_str(&line(label, cells));
    }
    out
}

fn fmt_cell(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{x:.2}"),
        None => "-".to_string(),
    }
}
