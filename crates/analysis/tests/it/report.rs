//! End-to-end checks of the HTML and Markdown reports.

use bertflow_analysis::plot::png_dimensions;
use bertflow_analysis::*;
use ndarray::Array2;
use scraper::{Html, Selector};

const EVIL: &str = "<script>alert(1)</script>";

fn aniso(m: f64) -> Anisotropy {
    Anisotropy {
        mean_random_pair_cosine: m,
        std_random_pair_cosine: 0.05,
        mean_cosine_to_mean: m + 0.1,
        n_pairs: 1000,
        n_sentences: 100,
    }
}

fn data() -> ReportData {
    let x = Array2::from_shape_fn((40, 6), |(i, j)| ((i * 7 + j * 3) % 11) as f32 + j as f32);
    let spec = spectrum(x.view()).unwrap();
    let lb = lexical_bias(
        &[0.9, 0.8, 0.7, 0.6, 0.5],
        &[1.0, 3.0, 2.0, 5.0, 4.0],
        &[0, 1, 2, 5, 8],
        4,
    )
    .unwrap();
    let counts = vec![10, 5, 0, 7, 1];
    let emb = ndarray::array![
        [1.0f32, 0.0],
        [2.0, 0.0],
        [4.0, 0.0],
        [0.0, 3.0],
        [8.0, 0.0]
    ];
    let freq = frequency_geometry(
        &counts,
        emb.view(),
        &FrequencyConfig {
            bucket_edges: vec![0, 2],
            k: 1,
            ..FrequencyConfig::default()
        },
    )
    .unwrap();
    let au = alignment_uniformity(x.view(), x.view(), x.view(), UniformityMode::Exact).unwrap();
    ReportData {
        title: "BERT-flow report".into(),
        model: "bert-base-uncased".into(),
        poolings: vec!["cls".into(), "first-last-avg".into()],
        kinds: vec!["flow".into(), "whitening".into()],
        sts: Some(StsTable {
            caption: "Spearman x 100".into(),
            columns: vec!["STS-B".into(), "SICK-R".into(), "Avg.".into()],
            rows: vec![
                StsRow {
                    label: "BERT first-last-avg".into(),
                    values: vec![Some(59.04), Some(63.75), Some(61.4)],
                },
                StsRow {
                    label: EVIL.into(),
                    values: vec![Some(71.23), None],
                },
            ],
        }),
        anisotropy: vec![AnisotropyEntry {
            pooling: "cls".into(),
            calibrator: "flow".into(),
            before: aniso(0.8123),
            after: aniso(0.0456),
        }],
        spectra: vec![SpectrumEntry {
            pooling: "cls".into(),
            calibrator: "whitening".into(),
            before: spec.summary(),
            after: spec.summary(),
        }],
        lexical_bias: vec![LexicalBiasEntry {
            label: "BERT & co".into(),
            task: "STS-B".into(),
            result: lb,
        }],
        alignment_uniformity: vec![AlignmentUniformityEntry {
            label: "flow".into(),
            result: au,
        }],
        frequency: vec![FrequencyEntry {
            label: "bert-base word embeddings".into(),
            geometry: freq.clone(),
        }],
        figures: vec![
            ReportFigure {
                id: "Spectrum / cls".into(),
                caption: format!("Spectrum {EVIL}"),
                figure: spectrum_figure("Singular spectrum", &[("BERT", &spec)]),
                width: 320,
                height: 240,
            },
            ReportFigure {
                id: "norm-vs-rank".into(),
                caption: "Norm vs rank".into(),
                figure: norm_vs_rank_figure("Norm vs rank", &freq),
                width: 300,
                height: 200,
            },
        ],
        notes: vec!["Note with \"quotes\" & <tags>.".into()],
    }
}

#[test]
fn html_is_well_formed_self_contained_and_escaped() {
    let d = data();
    let html = render_html(&d);
    let doc = Html::parse_document(&html);
    assert!(doc.errors.is_empty(), "HTML parse errors: {:?}", doc.errors);

    // No external references of any kind.
    for bad in [
        "http://", "https://", "<link", "<script", "src=\"/", "src=\"./", "url(",
    ] {
        assert!(!html.contains(bad), "found {bad:?}");
    }
    let sel = |s: &str| Selector::parse(s).unwrap();
    assert_eq!(doc.select(&sel("script")).count(), 0);
    assert_eq!(doc.select(&sel("link")).count(), 0);

    // Every image is an inline PNG that decodes to the declared size.
    let imgs: Vec<_> = doc.select(&sel("img")).collect();
    assert_eq!(imgs.len(), 2);
    for (img, f) in imgs.iter().zip(&d.figures) {
        let src = img.value().attr("src").unwrap();
        let b64 = src
            .strip_prefix("data:image/png;base64,")
            .expect("data URI");
        let png_bytes = decode_base64(b64);
        assert_eq!(png_dimensions(&png_bytes).unwrap(), (f.width, f.height));
        assert_eq!(img.value().attr("alt").unwrap(), f.caption);
    }

    // The evil label is text, not markup.
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let row_heads: Vec<String> = doc
        .select(&sel("tbody th"))
        .map(|e| e.text().collect::<String>())
        .collect();
    assert!(row_heads.iter().any(|t| t == EVIL), "{row_heads:?}");

    // Table values, dashes for missing ones, best value per column in bold.
    let cells: Vec<String> = doc.select(&sel("td")).map(|e| e.text().collect()).collect();
    for v in [
        "59.04", "63.75", "61.40", "71.23", "0.8123", "0.0456", "-100.00", "-80.00", "-50.00",
    ] {
        assert!(cells.iter().any(|c| c == v), "missing {v}");
    }
    let strong: Vec<String> = doc
        .select(&sel("td strong"))
        .map(|e| e.text().collect())
        .collect();
    assert!(strong.contains(&"71.23".to_string()) && strong.contains(&"63.75".to_string()));
    assert!(!strong.contains(&"59.04".to_string()));
    let first_table_rows: Vec<Vec<String>> = doc
        .select(&sel("table"))
        .next()
        .unwrap()
        .select(&sel("tbody tr"))
        .map(|tr| tr.select(&sel("td")).map(|e| e.text().collect()).collect())
        .collect();
    assert_eq!(first_table_rows[1], vec!["71.23", "–", "–"]);

    // Structure and metadata.
    assert_eq!(doc.select(&sel("html > head > title")).count(), 1);
    assert_eq!(doc.select(&sel("head > style")).count(), 1);
    let h2: Vec<String> = doc.select(&sel("h2")).map(|e| e.text().collect()).collect();
    for s in [
        "STS results",
        "Anisotropy",
        "Singular spectrum",
        "Lexical bias",
        "Alignment and uniformity",
        "Word frequency and geometry",
        "Figures",
        "Notes",
    ] {
        assert!(h2.iter().any(|h| h == s), "missing section {s}");
    }
    assert!(
        html.contains("bert-base-uncased")
            && html.contains("first-last-avg")
            && html.contains("whitening")
    );
    assert!(html.contains("BERT &amp; co"));
}

#[test]
fn empty_report_omits_sections() {
    let html = render_html(&ReportData::default());
    let doc = Html::parse_document(&html);
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    assert_eq!(doc.select(&Selector::parse("h2").unwrap()).count(), 0);
    assert_eq!(doc.select(&Selector::parse("h1").unwrap()).count(), 1);
}

#[test]
fn failing_figure_is_reported_inline() {
    let mut d = data();
    d.figures[0].width = 0;
    let html = render_html(&d);
    assert!(html.contains("Figure could not be rendered"));
    assert!(report_images(&d).is_err());
}

#[test]
fn markdown_twin_references_image_files() {
    let d = data();
    let md = render_markdown(&d, "figs/");
    let images = report_images(&d).unwrap();
    let names: Vec<&str> = images.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec!["fig01-spectrum-cls.png", "fig02-norm-vs-rank.png"]
    );
    for (name, bytes) in &images {
        assert!(
            md.contains(&format!("(figs/{name})")),
            "{name} not referenced"
        );
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
    assert!(md.starts_with("# BERT-flow report\n"));
    assert!(!md.contains("<script>"));
    assert!(md.contains("&lt;script&gt;"));
    assert!(
        md.contains("|  | STS-B | SICK-R | Avg. |\n|---|---|---|---|\n"),
        "{md}"
    );
    assert!(md.contains("| &lt;script&gt;alert(1)&lt;/script&gt; | **71.23** | – | – |"));
    assert!(!md.contains("http://") && !md.contains("https://"));
    // An empty directory means "next to the Markdown file"; spaces are encoded.
    assert!(render_markdown(&d, "").contains("(fig01-spectrum-cls.png)"));
    assert!(render_markdown(&d, "my figs").contains("(my%20figs/fig01-spectrum-cls.png)"));

    // Writing the files where the Markdown says works.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("figs")).unwrap();
    for (name, bytes) in &images {
        std::fs::write(dir.path().join("figs").join(name), bytes).unwrap();
    }
    for name in names {
        assert!(dir.path().join("figs").join(name).is_file());
    }
}

#[test]
fn report_data_round_trips_through_json() {
    let d = data();
    let json = serde_json::to_string(&d).unwrap();
    let back: ReportData = serde_json::from_str(&json).unwrap();
    // (serde_json's default float parsing may differ in the last bit for
    // 17-digit values, so computed floats are compared with a tolerance.)
    assert_eq!(back.sts, d.sts);
    assert_eq!(back.anisotropy, d.anisotropy);
    assert_eq!(back.poolings, d.poolings);
    assert_eq!(back.notes, d.notes);
    assert_eq!(back.frequency, d.frequency);
    let ids = |r: &ReportData| r.figures.iter().map(|f| f.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&back), ids(&d));
    let (a, b) = (&back.spectra[0].before, &d.spectra[0].before);
    assert!((a.variance_share_top5 - b.variance_share_top5).abs() < 1e-12);
    assert_eq!(render_html(&back).len(), render_html(&d).len());
    // Optional sections may be left out of the JSON.
    let minimal: ReportData = serde_json::from_str(r#"{"title":"t","model":"m"}"#).unwrap();
    assert_eq!(minimal.title, "t");
    assert!(minimal.figures.is_empty());
}

/// Test-side base64 decoder (independent of the crate's encoder).
fn decode_base64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in bytes {
        acc = (acc << 6) | val(c);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
