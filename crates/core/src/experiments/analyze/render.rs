//! Labels, figures, JSON and the readable summary of the analyses.
use super::{FrequencyResult, PoolingResult, StsbData};
use crate::error::{CoreError, Result};
use crate::runtime::progress::Progress;
use bertflow_analysis::{
    norm_vs_rank_figure, render_png, render_svg, similarity_vs_edit_figure,
    similarity_vs_gold_figure, spectrum_figure, ReportFigure, Spectrum,
};
use bertflow_calib::CalibSpec;
use bertflow_encoder::Pooling;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// A file-name-safe version of `s`.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// Short name of a spec: the kind alone when its options are the defaults
/// (`flow`, `whiten`), else the full spec.
pub fn spec_name(spec: &CalibSpec) -> String {
    match spec.kind().parse::<CalibSpec>() {
        Ok(default) if default == *spec => spec.kind().to_string(),
        _ => spec.to_string(),
    }
}

fn kind_label(spec: &CalibSpec) -> String {
    if spec.is_none() {
        "uncalibrated".to_string()
    } else {
        spec_name(spec)
    }
}

/// "pooling" or "pooling + kind".
pub fn method_label(pooling: &Pooling, spec: &CalibSpec) -> String {
    if spec.is_none() {
        pooling.to_string()
    } else {
        format!("{pooling} + {}", spec_name(spec))
    }
}

/// The figures of one pooling: the spectrum of every kind, and per kind the
/// similarity against gold and against edit distance on STS-B dev.
pub fn pooling_figures(r: &PoolingResult, data: &StsbData) -> Vec<ReportFigure> {
    let pooling = r.pooling.to_string();
    let named: Vec<(String, &Spectrum)> = r
        .kinds
        .iter()
        .map(|k| (kind_label(&k.spec), &k.spectrum))
        .collect();
    let refs: Vec<(&str, &Spectrum)> = named.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let mut figs = vec![ReportFigure {
        id: format!("spectrum-{}", slug(&pooling)),
        caption: format!(
            "Normalised singular values of the centred embeddings of every STS-B sentence, {pooling}, before and after calibration"
        ),
        figure: spectrum_figure(&format!("Singular spectrum ({pooling})"), &refs),
        width: 800,
        height: 500,
    }];
    for k in &r.kinds {
        let label = kind_label(&k.spec);
        let name = method_label(&r.pooling, &k.spec);
        figs.push(ReportFigure {
            id: format!("sim-vs-gold-{}-{}", slug(&pooling), slug(&label)),
            caption: format!("Cosine similarity against gold score, STS-B dev, {name}"),
            figure: similarity_vs_gold_figure(
                &format!("Similarity vs gold ({name})"),
                &k.sims,
                &data.gold,
            ),
            width: 800,
            height: 500,
        });
        figs.push(ReportFigure {
            id: format!("sim-vs-edit-{}-{}", slug(&pooling), slug(&label)),
            caption: format!(
                "Cosine similarity against edit distance ({}), STS-B dev, {name}",
                data.edit_unit.name()
            ),
            figure: similarity_vs_edit_figure(
                &format!("Similarity vs edit distance ({name})"),
                &k.sims,
                &data.edits,
            ),
            width: 800,
            height: 500,
        });
    }
    figs
}

/// The norm-vs-frequency-rank figure.
pub fn frequency_figure(f: &FrequencyResult) -> ReportFigure {
    ReportFigure {
        id: "norm-vs-rank".into(),
        caption: format!(
            "l2 norm of each word piece's static embedding against its frequency rank (counted on {})",
            f.corpus
        ),
        figure: norm_vs_rank_figure("Word-embedding norm vs frequency rank", &f.geometry),
        width: 800,
        height: 500,
    }
}

/// Writes `<id>.png` and `<id>.svg` for each figure into `dir`; returns the paths.
pub fn write_plots(
    dir: &Path,
    figs: &[ReportFigure],
    progress: &dyn Progress,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(CoreError::io("create", dir))?;
    let pb = progress.bar(figs.len() as u64, "plotting", "figures");
    let mut paths = Vec::new();
    for f in figs {
        let png = render_png(&f.figure, f.width, f.height)?;
        let svg = render_svg(&f.figure, f.width, f.height)?;
        for (ext, bytes) in [("png", png.as_slice()), ("svg", svg.as_bytes())] {
            let p = dir.join(format!("{}.{ext}", f.id));
            bertflow_durable::write(&p, bytes)?;
            paths.push(p);
        }
        pb.inc(1);
    }
    pb.finish();
    Ok(paths)
}

fn opt_json(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

/// The JSON form of one pooling's results: {kind: {...}}.
pub fn pooling_json(r: &PoolingResult) -> Value {
    let mut kinds = Map::new();
    for k in &r.kinds {
        let s = &k.spectrum;
        kinds.insert(
            spec_name(&k.spec),
            json!({
                "spec": k.spec.to_string(),
                "calibrator": k.fitted,
                "anisotropy": k.anisotropy,
                "spectrum": {
                    "variance_share_top1": s.variance_share_top1,
                    "variance_share_top5": s.variance_share_top5,
                    "variance_share_top10": s.variance_share_top10,
                    "effective_rank": s.effective_rank,
                    "n_sentences": s.n_sentences,
                    "dim": s.dim,
                    "singular_values_normalised": s.singular_values_normalised,
                },
                "lexical_bias": k.lexical,
                "alignment_uniformity": k.align,
            }),
        );
    }
    Value::Object(kinds)
}

/// "Should I calibrate?" in words: the statistics `auto` decides on, its
/// decision and the advice.
pub fn advice_text(r: &PoolingResult) -> String {
    let a = &r.advice;
    let st = &a.stats;
    format!(
        "Should I calibrate? ({} fit embeddings of {} dimensions, rule {})\n  \
         mean pair cosine {:.4}; mean-vector share in the top-10 directions {:.4}; \
         row-norm variation {:.4}; variance share top-10 {:.4}; effective rank / rank {:.3}\n  \
         auto would apply: {}; expected effect of calibrating: {}\n  {}\n",
        st.n,
        st.dim,
        bertflow_calib::AUTO_RULE,
        st.mean_cosine,
        st.mean_top10_align,
        st.norm_cv,
        st.top10_share,
        st.eff_rank_ratio,
        a.decision.summary(),
        a.expected,
        a.message
    )
}

/// The JSON form of the frequency result (without the per-token points).
pub fn frequency_json(f: &FrequencyResult) -> Value {
    json!({
        "corpus": f.corpus,
        "sentences": f.n_sentences,
        "word_pieces": f.n_tokens,
        "k": f.geometry.k,
        "vocab_size": f.geometry.vocab_size,
        "seen_tokens": f.geometry.n_seen_tokens,
        "buckets": f.geometry.buckets,
    })
}

/// The model-free numbers of the data set.
pub fn dataset_json(data: &StsbData) -> Value {
    json!({
        "task": "STS-B dev",
        "edit_unit": data.edit_unit.name(),
        "pairs": data.dev_pairs.len(),
        "spearman_gold_vs_edit": opt_json(data.gold_vs_edit()),
        "mean_edit_distance": data.edits.iter().sum::<usize>() as f64 / data.edits.len().max(1) as f64,
        "threshold": data.edit_threshold,
        "n_small": data.edits.iter().filter(|&&e| e <= data.edit_threshold).count(),
    })
}

fn fmt_opt(v: Option<f64>, d: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.d$}"))
}

/// The readable summary of one pooling.
pub fn summary_text(
    model: &str,
    r: &PoolingResult,
    data: &StsbData,
    freq: Option<&FrequencyResult>,
) -> String {
    let mut s = format!("{model}, pooling {}\n", r.pooling);
    for (what, desc) in data.describe_sets() {
        s.push_str(&format!("  {what}: {desc}\n"));
    }
    s.push_str(&format!(
        "\nData set (no model): Spearman(gold, edit distance) x100 = {} on the {} STS-B dev pairs ({})\n\n",
        fmt_opt(data.gold_vs_edit(), 2),
        data.dev_pairs.len(),
        data.edit_unit.name()
    ));
    let header: Vec<String> = r.kinds.iter().map(|k| spec_name(&k.spec)).collect();
    let t = data.edit_threshold;
    let n_small = r.kinds.first().map_or(0, |k| k.lexical.n_small);
    let rows: Vec<(String, Vec<String>)> = vec![
        (
            "Random-pair cosine".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.anisotropy.mean_random_pair_cosine))
                .collect(),
        ),
        (
            "Cosine to mean vector".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.anisotropy.mean_cosine_to_mean))
                .collect(),
        ),
        (
            "Variance share top-1".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.spectrum.variance_share_top1))
                .collect(),
        ),
        (
            "Variance share top-5".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.spectrum.variance_share_top5))
                .collect(),
        ),
        (
            "Variance share top-10".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.spectrum.variance_share_top10))
                .collect(),
        ),
        (
            "Effective rank".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.1}", k.spectrum.effective_rank))
                .collect(),
        ),
        (
            "Spearman(sim, edit) x100".into(),
            r.kinds
                .iter()
                .map(|k| fmt_opt(k.lexical.spearman_sim_vs_edit, 2))
                .collect(),
        ),
        (
            "Spearman(sim, gold) x100".into(),
            r.kinds
                .iter()
                .map(|k| fmt_opt(k.lexical.spearman_sim_vs_gold, 2))
                .collect(),
        ),
        (
            format!("  same, edit <= {t} ({n_small} pairs)"),
            r.kinds
                .iter()
                .map(|k| fmt_opt(k.lexical.spearman_sim_vs_gold_small, 2))
                .collect(),
        ),
        (
            "Alignment (gold >= 4)".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.align.alignment))
                .collect(),
        ),
        (
            "Uniformity".into(),
            r.kinds
                .iter()
                .map(|k| format!("{:.4}", k.align.uniformity))
                .collect(),
        ),
    ];
    let w0 = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|(_, v)| v[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    s.push_str(&format!("{:w0$}", ""));
    for (h, w) in header.iter().zip(&widths) {
        s.push_str(&format!("  {h:>w$}"));
    }
    s.push('\n');
    for (label, vals) in &rows {
        s.push_str(&format!("{label:w0$}"));
        for (v, w) in vals.iter().zip(&widths) {
            s.push_str(&format!("  {v:>w$}"));
        }
        s.push('\n');
    }
    s.push('\n');
    s.push_str(&advice_text(r));
    if let Some(f) = freq {
        s.push_str(&format!(
            "\nWord pieces: frequency rank vs the static word embeddings ({} word pieces counted on {})\n",
            f.n_tokens, f.corpus
        ));
        s.push_str(&format!(
            "{:>16}  {:>7}  {:>10}  {:>12}\n",
            "rank range",
            "tokens",
            "mean norm",
            format!("mean {}-NN dist", f.geometry.k)
        ));
        for b in &f.geometry.buckets {
            let range = match b.rank_end {
                Some(e) => format!("[{}, {})", b.rank_start, e),
                None => format!("[{}, inf)", b.rank_start),
            };
            s.push_str(&format!(
                "{range:>16}  {:>7}  {:>10}  {:>12}\n",
                b.n_tokens,
                fmt_opt(b.mean_norm, 4),
                fmt_opt(b.mean_knn_distance, 4)
            ));
        }
    }
    s
}
