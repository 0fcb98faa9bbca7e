//! Figures rendered with plotters to PNG bytes and SVG text, with no system
//! libraries: text is drawn with the DejaVu Sans font bundled in
//! `assets/` (Bitstream Vera licence, see `assets/DejaVuSans-LICENSE.txt`).
//!
//! A [`Figure`] is plain serialisable data (named line or point series);
//! [`render_png`] and [`render_svg`] draw it.
//!
//! Points that cannot be drawn are **skipped**, not errors: non-finite
//! coordinates, and on a logarithmic axis coordinates `<= 0`.
//! [`Figure::n_dropped_points`] tells how many. A figure with nothing left to
//! draw still renders (empty axes).

use std::io::Cursor;
use std::ops::Range;
use std::sync::OnceLock;

use plotters::backend::RGBPixel;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{AnalysisError, Result};

/// The bundled font (DejaVu Sans, Bitstream Vera licence).
pub const FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
/// The family name under which the font is registered with plotters.
const FAMILY: &str = "sans-serif";

/// Largest accepted width or height, in pixels.
pub const MAX_SIDE: u32 = 8192;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeriesKind {
    /// Points joined by straight segments, in the given order.
    Line,
    /// A scatter of small translucent dots.
    Points,
}

/// Where the legend box goes inside the plotting area.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum LegendPosition {
    /// Top right corner (default).
    #[default]
    UpperRight,
    /// Top left corner.
    UpperLeft,
    /// Bottom left corner.
    LowerLeft,
    /// Bottom right corner.
    LowerRight,
}

/// One named series of `(x, y)` points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Legend text (no legend entry when empty).
    pub name: String,
    /// Line or points.
    pub kind: SeriesKind,
    /// The data.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A line series.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            kind: SeriesKind::Line,
            points,
        }
    }

    /// A scatter series.
    pub fn points(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            kind: SeriesKind::Points,
            points,
        }
    }
}

/// A 2-D chart: title, axis labels, optional log axes and series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Caption drawn above the chart.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Logarithmic (base 10) x axis.
    pub log_x: bool,
    /// Logarithmic (base 10) y axis.
    pub log_y: bool,
    /// The series, drawn in order with a fixed colour cycle.
    pub series: Vec<Series>,
    /// Legend placement (the legend lists the series with a non-empty name).
    #[serde(default)]
    pub legend: LegendPosition,
}

impl Figure {
    /// An empty figure with linear axes.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            log_x: false,
            log_y: false,
            series: Vec::new(),
            legend: LegendPosition::default(),
        }
    }

    /// Sets the legend position.
    pub fn with_legend(mut self, legend: LegendPosition) -> Self {
        self.legend = legend;
        self
    }

    /// Sets the axis scales.
    pub fn with_log_axes(mut self, log_x: bool, log_y: bool) -> Self {
        self.log_x = log_x;
        self.log_y = log_y;
        self
    }

    /// Appends a series.
    pub fn with_series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    fn drawable(&self, &(x, y): &(f64, f64)) -> bool {
        x.is_finite() && y.is_finite() && (!self.log_x || x > 0.0) && (!self.log_y || y > 0.0)
    }

    /// Number of points that are skipped when drawing (non-finite, or
    /// non-positive on a log axis).
    pub fn n_dropped_points(&self) -> usize {
        self.series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|p| !self.drawable(p))
            .count()
    }

    fn drawable_points<'a>(&'a self, s: &'a Series) -> impl Iterator<Item = (f64, f64)> + 'a {
        s.points.iter().copied().filter(|p| self.drawable(p))
    }
}

/// Series colours (colour-blind-friendly "Okabe-Ito" order, then greys).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(0, 0, 0),
];

fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FAMILY, FontStyle::Normal, FONT_TTF).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(AnalysisError::Plot(
            "the bundled font could not be loaded".into(),
        ))
    }
}

fn check_size(width: u32, height: u32) -> Result<()> {
    if !(64..=MAX_SIDE).contains(&width) || !(64..=MAX_SIDE).contains(&height) {
        return Err(AnalysisError::InvalidParameter(format!(
            "figure size {width}x{height}: each side must be in 64..={MAX_SIDE} pixels"
        )));
    }
    Ok(())
}

/// Replaces control characters (invalid in XML) by spaces.
fn clean_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn plot_err<E: std::fmt::Display>(e: E) -> AnalysisError {
    AnalysisError::Plot(e.to_string())
}

/// Renders `fig` to a PNG image (8-bit RGB) of `width` x `height` pixels,
/// encoded in memory.
///
/// Errors: a side outside `64..=MAX_SIDE`, or a drawing/encoding failure.
pub fn render_png(fig: &Figure, width: u32, height: u32) -> Result<Vec<u8>> {
    check_size(width, height)?;
    ensure_font()?;
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let backend = BitMapBackend::<RGBPixel>::with_buffer_and_format(&mut rgb, (width, height))
            .map_err(plot_err)?;
        draw(backend.into_drawing_area(), fig)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc
            .write_header()
            .map_err(|e| AnalysisError::Png(e.to_string()))?;
        writer
            .write_image_data(&rgb)
            .map_err(|e| AnalysisError::Png(e.to_string()))?;
        writer
            .finish()
            .map_err(|e| AnalysisError::Png(e.to_string()))?;
    }
    Ok(out)
}

/// Renders `fig` to an SVG document of `width` x `height` pixels. Text is
/// emitted as `<text>` elements (XML-escaped) in the `sans-serif` family.
///
/// Errors: a side outside `64..=MAX_SIDE`, or a drawing failure.
pub fn render_svg(fig: &Figure, width: u32, height: u32) -> Result<String> {
    check_size(width, height)?;
    ensure_font()?;
    let mut out = String::new();
    {
        let backend = SVGBackend::with_string(&mut out, (width, height));
        draw(backend.into_drawing_area(), fig)?;
    }
    Ok(out)
}

/// Decodes a PNG produced by [`render_png`] (or any 8-bit RGB/RGBA PNG) and
/// returns `(width, height)`. Mainly for checks by callers and tests.
pub fn png_dimensions(bytes: &[u8]) -> Result<(u32, u32)> {
    let decoder = png::Decoder::new(Cursor::new(bytes));
    let reader = decoder
        .read_info()
        .map_err(|e| AnalysisError::Png(e.to_string()))?;
    let info = reader.info();
    Ok((info.width, info.height))
}

fn linear_range(vals: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if lo > hi {
        return 0.0..1.0;
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.05
    } else {
        (lo.abs() * 0.1).max(0.5)
    };
    (lo - pad)..(hi + pad)
}

fn log_range(vals: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if lo > hi {
        return 1.0..10.0;
    }
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    // Widen by a hair so that rounding in the tick computation (ln ratios)
    // cannot drop the end decades' ticks.
    (lo * (1.0 - 1e-9))..(hi * (1.0 + 1e-9))
}

/// Tick label: plain decimals with `decimals` digits (trailing zeros
/// trimmed), or scientific notation for very large/small magnitudes.
fn tick_label(v: f64, decimals: usize) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        let s = format!("{v:.2e}");
        return match s.split_once('e') {
            Some((m, e)) if m.contains('.') => {
                format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.'))
            }
            _ => s,
        };
    }
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// Decimals needed for ticks on a linear axis spanning `r`.
fn decimals_for(r: &Range<f64>) -> usize {
    let step = (r.end - r.start).abs() / 10.0;
    if step <= 0.0 || !step.is_finite() {
        return 2;
    }
    (1.0 - step.log10().floor()).clamp(0.0, 10.0) as usize
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, fig: &Figure) -> Result<()> {
    root.fill(&WHITE).map_err(plot_err)?;
    let all = || fig.series.iter().flat_map(|s| fig.drawable_points(s));
    let xr = if fig.log_x {
        log_range(all().map(|p| p.0))
    } else {
        linear_range(all().map(|p| p.0))
    };
    let yr = if fig.log_y {
        log_range(all().map(|p| p.1))
    } else {
        linear_range(all().map(|p| p.1))
    };
    let (xd, yd) = (decimals_for(&xr), decimals_for(&yr));
    match (fig.log_x, fig.log_y) {
        (false, false) => draw_chart(&root, fig, xr, yr, xd, yd)?,
        (true, false) => draw_chart(&root, fig, xr.log_scale(), yr, 3, yd)?,
        (false, true) => draw_chart(&root, fig, xr, yr.log_scale(), xd, 3)?,
        (true, true) => draw_chart(&root, fig, xr.log_scale(), yr.log_scale(), 3, 3)?,
    }
    root.present().map_err(plot_err)
}

fn draw_chart<DB, XS, YS>(
    root: &DrawingArea<DB, Shift>,
    fig: &Figure,
    xs: XS,
    ys: YS,
    x_decimals: usize,
    y_decimals: usize,
) -> Result<()>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    YS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: ValueFormatter<f64>,
    YS::CoordDescType: ValueFormatter<f64>,
{
    let (w, h) = root.dim_in_pixel();
    let base = (w.min(h) as f64 / 40.0).clamp(10.0, 28.0);
    let title = clean_text(&fig.title);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, base * 1.5))
        .margin((base * 0.8) as u32)
        .margin_right((base * 2.5) as u32)
        .x_label_area_size((base * 3.2) as u32)
        .y_label_area_size((base * 4.5) as u32)
        .build_cartesian_2d(xs, ys)
        .map_err(plot_err)?;
    let x_fmt = move |v: &f64| tick_label(*v, x_decimals);
    let y_fmt = move |v: &f64| tick_label(*v, y_decimals);
    chart
        .configure_mesh()
        .x_desc(clean_text(&fig.x_label))
        .y_desc(clean_text(&fig.y_label))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style((FAMILY, base))
        .axis_desc_style((FAMILY, base * 1.1))
        .light_line_style(RGBColor(244, 244, 244))
        .bold_line_style(RGBColor(205, 205, 205))
        .draw()
        .map_err(plot_err)?;

    let mut any_label = false;
    for (i, s) in fig.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts = fig.drawable_points(s);
        let annotation = match s.kind {
            SeriesKind::Line => {
                let a = chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                    .map_err(plot_err)?;
                a.legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
                a
            }
            SeriesKind::Points => {
                let a = chart
                    .draw_series(pts.map(|p| Circle::new(p, 2, color.mix(0.45).filled())))
                    .map_err(plot_err)?;
                a.legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
                a
            }
        };
        if !s.name.is_empty() {
            annotation.label(clean_text(&s.name));
            any_label = true;
        }
    }
    if any_label {
        chart
            .configure_series_labels()
            .label_font((FAMILY, base))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(150, 150, 150))
            .position(match fig.legend {
                LegendPosition::UpperRight => SeriesLabelPosition::UpperRight,
                LegendPosition::UpperLeft => SeriesLabelPosition::UpperLeft,
                LegendPosition::LowerLeft => SeriesLabelPosition::LowerLeft,
                LegendPosition::LowerRight => SeriesLabelPosition::LowerRight,
            })
            .draw()
            .map_err(plot_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_rgb(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let mut reader = png::Decoder::new(Cursor::new(bytes)).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    fn sample_figure() -> Figure {
        Figure::new("Spectrum before & after <flow>", "index", "value")
            .with_log_axes(false, true)
            .with_series(Series::line(
                "BERT",
                (1..=50).map(|i| (i as f64, 1.0 / i as f64)).collect(),
            ))
            .with_series(Series::line(
                "flow",
                (1..=50).map(|i| (i as f64, 0.9f64.powi(i))).collect(),
            ))
    }

    #[test]
    fn bundled_font_is_a_small_truetype_file() {
        assert!(FONT_TTF.len() < 1024 * 1024);
        assert_eq!(&FONT_TTF[..4], &[0, 1, 0, 0]);
    }

    #[test]
    fn png_has_signature_size_and_drawn_text() {
        let png_bytes = render_png(&sample_figure(), 640, 400).unwrap();
        assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(png_dimensions(&png_bytes).unwrap(), (640, 400));
        let (w, h, rgb) = decode_rgb(&png_bytes);
        assert_eq!((w, h), (640, 400));
        assert_eq!(rgb.len(), 640 * 400 * 3);
        // The caption (drawn with the bundled font) puts dark pixels in the
        // top band of the image, which is otherwise white.
        let top = &rgb[..(640 * 30 * 3)];
        let dark = top.chunks(3).filter(|p| p.iter().all(|&c| c < 100)).count();
        assert!(dark > 50, "only {dark} dark pixels in the caption band");
        // Both series colours appear somewhere.
        let has = |c: RGBColor| rgb.chunks(3).any(|p| p == [c.0, c.1, c.2]);
        assert!(has(PALETTE[0]) && has(PALETTE[1]));
    }

    #[test]
    fn svg_is_xml_and_contains_escaped_title() {
        let svg = render_svg(&sample_figure(), 640, 400).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        assert!(
            texts.contains(&"Spectrum before & after <flow>"),
            "{texts:?}"
        );
        assert!(texts.contains(&"BERT") && texts.contains(&"flow"));
        assert!(texts.contains(&"index"));
        // All four decade ends of the log axis are labelled (0.001 was lost to
        // rounding before the range padding).
        for t in ["0.001", "0.01", "0.1", "1"] {
            assert!(texts.contains(&t), "missing tick {t}: {texts:?}");
        }
    }

    #[test]
    fn log_axes_skip_non_positive_and_non_finite_points() {
        let fig = Figure::new("log", "x", "y")
            .with_log_axes(true, true)
            .with_series(Series::points(
                "pts",
                vec![
                    (1.0, 0.0),
                    (2.0, -1.0),
                    (0.0, 3.0),
                    (f64::NAN, 1.0),
                    (3.0, 0.5),
                    (30.0, 5.0),
                ],
            ));
        assert_eq!(fig.n_dropped_points(), 4);
        let png_bytes = render_png(&fig, 300, 200).unwrap();
        assert_eq!(png_dimensions(&png_bytes).unwrap(), (300, 200));
        let svg = render_svg(&fig, 300, 200).unwrap();
        roxmltree::Document::parse(&svg).unwrap();
        // Linear axes keep zero and negative values; only NaN is dropped.
        let lin = fig.clone().with_log_axes(false, false);
        assert_eq!(lin.n_dropped_points(), 1);
        render_png(&lin, 300, 200).unwrap();
    }

    #[test]
    fn empty_and_constant_figures_render() {
        let empty = Figure::new("nothing", "x", "y").with_log_axes(true, false);
        render_png(&empty, 200, 150).unwrap();
        let constant =
            Figure::new("one point", "x", "y").with_series(Series::points("", vec![(2.0, 2.0)]));
        render_svg(&constant, 200, 150).unwrap();
    }

    #[test]
    fn control_characters_do_not_break_svg() {
        let fig = Figure::new("bad\u{1}title", "x\u{7}", "y")
            .with_series(Series::line("a\u{0}b", vec![(0.0, 1.0), (1.0, 2.0)]));
        let svg = render_svg(&fig, 300, 200).unwrap();
        roxmltree::Document::parse(&svg).unwrap();
    }

    #[test]
    fn bad_sizes_are_errors() {
        let fig = sample_figure();
        assert!(matches!(
            render_png(&fig, 0, 100),
            Err(AnalysisError::InvalidParameter(_))
        ));
        assert!(matches!(
            render_svg(&fig, 100, MAX_SIDE + 1),
            Err(AnalysisError::InvalidParameter(_))
        ));
        assert!(png_dimensions(b"not a png").is_err());
    }

    #[test]
    fn ranges_and_tick_labels() {
        let close = |r: Range<f64>, lo: f64, hi: f64| {
            (r.start / lo - 1.0).abs() < 1e-6 && (r.end / hi - 1.0).abs() < 1e-6
        };
        assert!(close(log_range([0.003, 0.5].into_iter()), 0.001, 1.0));
        assert!(close(log_range([1.0].into_iter()), 1.0, 10.0));
        assert_eq!(log_range(std::iter::empty()), 1.0..10.0);
        // The padding keeps both end decades inside the range.
        let r = log_range([0.01, 0.9].into_iter());
        assert!(r.start < 0.01 && r.end > 1.0);
        let r = linear_range([0.0, 10.0].into_iter());
        assert!((r.start + 0.5).abs() < 1e-12 && (r.end - 10.5).abs() < 1e-12);
        assert_eq!(linear_range(std::iter::empty()), 0.0..1.0);
        assert_eq!(tick_label(0.30000000000000004, 2), "0.3");
        assert_eq!(tick_label(1e-5, 3), "1e-5");
        assert_eq!(tick_label(2.5e7, 0), "2.5e7");
        assert_eq!(tick_label(-0.0001, 1), "-1e-4");
        assert_eq!(tick_label(-0.01, 1), "0");
        assert_eq!(tick_label(100.0, 0), "100");
        assert_eq!(decimals_for(&(0.0..1.0)), 2);
        assert_eq!(decimals_for(&(0.0..1000.0)), 0);
    }
}
