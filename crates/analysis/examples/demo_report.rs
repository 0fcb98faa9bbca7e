//! Builds a report from synthetic embeddings and writes `report.html`,
//! `report.md` and the PNG figures into the directory given as the first
//! argument (default: `analysis-demo`).
//!
//! `cargo run -p bertflow-analysis --example demo_report -- /tmp/demo`

use bertflow_analysis::*;
use bertflow_numeric::SplitMix64;
use ndarray::Array2;

/// Approximately standard normal numbers (sum of 4 uniforms, rescaled).
fn normal(rng: &mut SplitMix64) -> f32 {
    let s: f64 = (0..4).map(|_| rng.next_f64()).sum();
    ((s - 2.0) * 3f64.sqrt()) as f32
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "analysis-demo".into()),
    );
    std::fs::create_dir_all(out.join("figures"))?;
    let mut rng = SplitMix64::new(7);
    let (n, d) = (2000, 64);
    // "Raw": a shared offset plus a decaying spectrum -> anisotropic.
    let raw = Array2::from_shape_fn((n, d), |(_, j)| {
        2.0 + normal(&mut rng) * 3.0 / (1.0 + j as f32)
    });
    // "Calibrated": isotropic.
    let cal = Array2::from_shape_fn((n, d), |_| normal(&mut rng));

    let a_raw = anisotropy(raw.view(), 20_000, 0)?;
    let a_cal = anisotropy(cal.view(), 20_000, 0)?;
    let s_raw = spectrum(raw.view())?;
    let s_cal = spectrum(cal.view())?;

    let gold: Vec<f64> = (0..500).map(|i| (i % 51) as f64 / 10.0).collect();
    let sims: Vec<f64> = gold
        .iter()
        .enumerate()
        .map(|(i, g)| 0.5 + g / 12.0 + ((i * 37 % 17) as f64 - 8.0) / 60.0)
        .collect();
    let edits: Vec<usize> = (0..500).map(|i| (i * 13) % 20).collect();
    let lb = lexical_bias(&sims, &gold, &edits, 4)?;

    let half = n / 2;
    let au_raw = alignment_uniformity(
        raw.slice(ndarray::s![..half, ..]),
        raw.slice(ndarray::s![half.., ..]),
        raw.view(),
        UniformityMode::Exact,
    )?;
    let au_cal = alignment_uniformity(
        cal.slice(ndarray::s![..half, ..]),
        cal.slice(ndarray::s![half.., ..]),
        cal.view(),
        UniformityMode::default(),
    )?;

    let vocab = 3000;
    let counts: Vec<u64> = (0..vocab as u64)
        .map(|t| if t % 7 == 0 { 0 } else { 100_000 / (t + 1) })
        .collect();
    let words = Array2::from_shape_fn((vocab, 32), |(t, _)| {
        normal(&mut rng) * (0.5 + (t as f32 / vocab as f32))
    });
    let freq = frequency_geometry(
        &counts,
        words.view(),
        &FrequencyConfig {
            bucket_edges: vec![0, 100, 500, 1000],
            ..FrequencyConfig::default()
        },
    )?;

    let data = ReportData {
        title: "bertflow analysis demo (synthetic data)".into(),
        model: "synthetic".into(),
        poolings: vec!["mean".into()],
        kinds: vec!["whitening".into()],
        sts: Some(StsTable {
            caption: "Spearman's rank correlation × 100".into(),
            columns: vec!["STS-B".into(), "SICK-R".into(), "Avg.".into()],
            rows: vec![
                StsRow {
                    label: "raw mean".into(),
                    values: vec![Some(47.29), Some(58.22), Some(52.76)],
                },
                StsRow {
                    label: "mean + whitening".into(),
                    values: vec![Some(68.19), Some(63.9), Some(66.05)],
                },
            ],
        }),
        anisotropy: vec![AnisotropyEntry {
            pooling: "mean".into(),
            calibrator: "whitening".into(),
            before: a_raw,
            after: a_cal,
        }],
        spectra: vec![SpectrumEntry {
            pooling: "mean".into(),
            calibrator: "whitening".into(),
            before: s_raw.summary(),
            after: s_cal.summary(),
        }],
        lexical_bias: vec![LexicalBiasEntry {
            label: "raw mean".into(),
            task: "STS-B".into(),
            result: lb,
        }],
        alignment_uniformity: vec![
            AlignmentUniformityEntry {
                label: "raw mean".into(),
                result: au_raw,
            },
            AlignmentUniformityEntry {
                label: "mean + whitening".into(),
                result: au_cal,
            },
        ],
        frequency: vec![FrequencyEntry {
            label: "synthetic vocabulary".into(),
            geometry: freq.clone(),
        }],
        figures: vec![
            ReportFigure {
                id: "spectrum".into(),
                caption: "Normalised singular values".into(),
                figure: spectrum_figure(
                    "Singular spectrum",
                    &[("raw", &s_raw), ("whitening", &s_cal)],
                ),
                width: 800,
                height: 500,
            },
            ReportFigure {
                id: "sim-vs-gold".into(),
                caption: "Similarity vs gold".into(),
                figure: similarity_vs_gold_figure("Cosine vs gold score", &sims, &gold),
                width: 800,
                height: 500,
            },
            ReportFigure {
                id: "sim-vs-edit".into(),
                caption: "Similarity vs edit distance".into(),
                figure: similarity_vs_edit_figure("Cosine vs edit distance", &sims, &edits),
                width: 800,
                height: 500,
            },
            ReportFigure {
                id: "norm-vs-rank".into(),
                caption: "Word-embedding norm vs frequency rank".into(),
                figure: norm_vs_rank_figure("Norm vs frequency rank", &freq),
                width: 800,
                height: 500,
            },
        ],
        notes: vec!["All numbers come from synthetic data.".into()],
    };
    std::fs::write(out.join("report.html"), render_html(&data))?;
    std::fs::write(out.join("report.md"), render_markdown(&data, "figures"))?;
    for (name, bytes) in report_images(&data)? {
        std::fs::write(out.join("figures").join(name), bytes)?;
    }
    std::fs::write(
        out.join("spectrum.svg"),
        render_svg(&data.figures[0].figure, 800, 500)?,
    )?;
    println!("wrote {}", out.display());
    Ok(())
}
