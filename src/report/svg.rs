//! SVG charts for the report (and anyone else's results): grouped bar charts drawn with
//! `plotters`' SVG backend. No fonts are loaded (text is laid out with plotters' fixed-width
//! estimate and rendered by the browser), so the output is the same bytes everywhere.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result, Setting};

/// One series of a grouped bar chart: one bar per group.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// One value per group (`None`: no bar).
    pub values: Vec<Option<f64>>,
    /// Bar colour, `(r, g, b)`.
    pub color: (u8, u8, u8),
}

impl Series {
    /// A series with its colour.
    pub fn new(name: impl Into<String>, values: Vec<Option<f64>>, color: (u8, u8, u8)) -> Self {
        Self {
            name: name.into(),
            values,
            color,
        }
    }
}

/// A qualitative palette (ColorBrewer Set1-like) for series without a meaningful colour.
pub const PALETTE: [(u8, u8, u8); 8] = [
    (55, 126, 184),
    (228, 26, 28),
    (77, 175, 74),
    (152, 78, 163),
    (255, 127, 0),
    (166, 86, 40),
    (247, 129, 191),
    (120, 120, 120),
];

/// A grouped bar chart: groups along x, one bar per series in each group, a legend on the
/// right.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Caption above the plot.
    pub title: String,
    /// Label of the y axis (empty: none).
    pub y_label: String,
    /// Group names along x.
    pub groups: Vec<String>,
    /// The series; each has one value per group.
    pub series: Vec<Series>,
    /// Top of the y axis; `None`: 1 when every value is in [0, 1] (metrics), else 10% above the
    /// largest value.
    pub y_max: Option<f64>,
    /// Size in pixels; `None`: wide enough for the bars, height 340.
    pub size: Option<(u32, u32)>,
}

impl BarChart {
    /// A chart with default axis range and size.
    pub fn new(title: impl Into<String>, groups: Vec<String>, series: Vec<Series>) -> Self {
        Self {
            title: title.into(),
            y_label: String::new(),
            groups,
            series,
            y_max: None,
            size: None,
        }
    }
}

/// Draws `title` over `groups` with one bar per series in each group; returns an `<svg>`
/// element (no XML declaration) to inline in HTML. Text is escaped by the backend.
pub fn grouped_bars(title: &str, groups: &[String], series: &[Series]) -> Result<String> {
    render(&BarChart::new(title, groups.to_vec(), series.to_vec()))
}

/// Width of the legend column, pixels.
const LEGEND_WIDTH: u32 = 230;
/// Approximate width of one character of the labels (15 pt in plotters, 12 px in the SVG).
const CHAR_WIDTH_PX: f64 = 7.0;

/// Draws `chart` (see [`grouped_bars`]).
pub fn render(chart: &BarChart) -> Result<String> {
    for s in &chart.series {
        if s.values.len() != chart.groups.len() {
            return Err(Error::invalid(
                Setting::ChartSeries,
                format!(
                    "`{}` has {} values for {} groups",
                    s.name,
                    s.values.len(),
                    chart.groups.len()
                ),
            ));
        }
    }
    let num_groups = chart.groups.len().max(1);
    let num_series = chart.series.len().max(1);
    let (width, height) = chart.size.unwrap_or_else(|| {
        let bars = (num_groups * (num_series * 18 + 40)) as u32;
        ((bars + 90 + LEGEND_WIDTH).clamp(640, 1400), 340)
    });
    let largest = chart
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let y_max = match chart.y_max {
        Some(m) if m.is_finite() && m > 0.0 => m,
        _ if largest <= 1.0 => 1.0,
        _ => largest * 1.1,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        draw(&root, chart, num_groups, y_max).map_err(|e| Error::Resource {
            what: format!("chart `{}`", chart.title),
            message: e.to_string(),
        })?;
        root.present().map_err(|e| Error::Resource {
            what: format!("chart `{}`", chart.title),
            message: e.to_string(),
        })?;
    }
    Ok(svg)
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    chart: &BarChart,
    num_groups: usize,
    y_max: f64,
) -> DrawResult {
    root.fill(&WHITE)?;
    let (width, _) = root.dim_in_pixel();
    let (plot_area, legend_area) = root.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
    let mut ctx = ChartBuilder::on(&plot_area)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..num_groups as f64, 0f64..y_max)?;
    let y_format = |v: &f64| format!("{v:.1}");
    let mut mesh = ctx.configure_mesh();
    mesh.disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&y_format)
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .label_style(("sans-serif", 15));
    if !chart.y_label.is_empty() {
        mesh.y_desc(chart.y_label.as_str());
    }
    mesh.draw()?;

    // Bars: each group takes a unit of x; 80% of it holds the series side by side.
    let num_series = chart.series.len().max(1) as f64;
    let bar_width = 0.8 / num_series;
    for (si, series) in chart.series.iter().enumerate() {
        let (r, g, b) = series.color;
        let style = RGBColor(r, g, b).filled();
        for (gi, value) in series.values.iter().enumerate() {
            let Some(v) = value.filter(|v| v.is_finite()) else {
                continue;
            };
            let x0 = gi as f64 + 0.1 + si as f64 * bar_width;
            let top = v.clamp(0.0, y_max);
            ctx.plotting_area().draw(&Rectangle::new(
                [(x0, 0.0), (x0 + bar_width * 0.92, top)],
                style,
            ))?;
        }
    }

    // Group labels under the axis, centred, cut to the space a group has.
    let label_style = TextStyle::from(("sans-serif", 15).into_font())
        .pos(Pos::new(HPos::Center, VPos::Top))
        .color(&BLACK);
    for (gi, group) in chart.groups.iter().enumerate() {
        let (x, y) = ctx.backend_coord(&(gi as f64 + 0.5, 0.0));
        let (x_next, _) = ctx.backend_coord(&(gi as f64 + 1.5, 0.0));
        let max_chars = (((x_next - x) as f64 / CHAR_WIDTH_PX) as usize).max(4);
        plot_area.draw(&Text::new(
            shorten(group, max_chars),
            (x, y + 8),
            label_style.clone(),
        ))?;
    }

    // Legend: a swatch and the name per series.
    let text_style = TextStyle::from(("sans-serif", 15).into_font())
        .pos(Pos::new(HPos::Left, VPos::Center))
        .color(&BLACK);
    let max_chars = ((LEGEND_WIDTH as f64 - 30.0) / 6.5) as usize;
    for (si, series) in chart.series.iter().enumerate() {
        let y = 40 + si as i32 * 20;
        let (r, g, b) = series.color;
        legend_area.draw(&Rectangle::new(
            [(6, y - 6), (18, y + 6)],
            RGBColor(r, g, b).filled(),
        ))?;
        legend_area.draw(&Text::new(
            shorten(&series.name, max_chars),
            (24, y),
            text_style.clone(),
        ))?;
    }
    Ok(())
}

/// `text` cut to `max_chars` characters, ending in `…` when cut.
fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> String {
        grouped_bars(
            "alpha-nDCG@10 <&>",
            &["bm25".to_string(), "fusion".to_string()],
            &[
                Series::new("question", vec![Some(0.25), Some(0.5)], PALETTE[0]),
                Series::new("nuggets \"x\"", vec![None, Some(0.75)], PALETTE[1]),
            ],
        )
        .unwrap()
    }

    #[test]
    fn draws_bars_legend_and_escaped_text() {
        let svg = chart();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        assert!(svg.contains("alpha-nDCG@10 &lt;&amp;&gt;"));
        // plotters puts text content on its own line.
        assert!(
            svg.contains("\nbm25\n") && svg.contains("\nfusion\n"),
            "{svg}"
        );
        assert!(svg.contains("nuggets &quot;x&quot;") || svg.contains("nuggets \"x\""));
        // Background + 3 bars + 2 legend swatches, at least.
        assert!(svg.matches("<rect").count() >= 6, "{svg}");
        assert!(!svg.contains("<?xml"));
    }

    #[test]
    fn same_bytes_every_time() {
        assert_eq!(chart(), chart());
    }

    #[test]
    fn mismatched_series_is_an_error() {
        let err = grouped_bars(
            "t",
            &["a".to_string()],
            &[Series::new("s", vec![Some(1.0), Some(2.0)], PALETTE[0])],
        )
        .unwrap_err();
        assert!(err.to_string().contains("2 values for 1 groups"), "{err}");
    }

    #[test]
    fn shortens_long_labels() {
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("abc", 4), "abc");
    }
}
