//! The report's SVG charts, drawn with plotters' SVG backend.
//!
//! * throughput and p99: grouped bars, one group per IO shape (model and
//!   threads, plus server lanes when they vary), one bar colour per
//!   workload (the other settings that vary), median bar height and min–max
//!   whiskers. Settings shared by every bar go in the subtitle, so legends
//!   name only what differs.
//! * loss: one cell per payload × window, coloured by the median lost
//!   echoes per run (green when nothing was lost), labelled with the median,
//!   the worst run and the number of runs.

use std::collections::BTreeSet;
use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{ConfigKey, Report, Run, Spread, Summary};

/// Font of every text in the charts; SVG viewers pick their sans-serif.
const FONT: &str = "sans-serif";

/// Bar colours: the Okabe–Ito palette, distinguishable with the common
/// colour-vision deficiencies.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(80, 80, 80),
];

const GRID: RGBColor = RGBColor(225, 225, 225);
const NO_LOSS: RGBColor = RGBColor(199, 233, 192);
const NOT_RUN: RGBColor = RGBColor(242, 242, 242);
const LOSS_LOW: RGBColor = RGBColor(253, 208, 162);
const LOSS_HIGH: RGBColor = RGBColor(165, 15, 21);

/// A category axis: values are positions `0.0, 1.0, …, n-1`, each with a
/// tick at its centre; bars sit at fractional positions around it.
struct Categories(usize);

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let Range { start, end } = self.range();
        let t = (value - start) / (end - start);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.0).map(|i| i as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// A dimension of the configuration shown in subtitles and legends.
struct Dim {
    /// What it is, e.g. `clients`.
    name: &'static str,
    /// Its value in words, e.g. `16 clients`.
    get: fn(&ConfigKey) -> String,
}

fn or_q<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "?".to_string(), T::to_string)
}

const FAMILY: Dim = Dim {
    name: "protocol/family",
    get: |k| format!("{}/{}", or_q(&k.protocol), or_q(&k.address_family)),
};
const PAYLOAD: Dim = Dim {
    name: "payload",
    get: |k| format!("payload {} B", or_q(&k.payload_bytes)),
};
const CLIENTS: Dim = Dim {
    name: "clients",
    get: |k| super::count(k.clients, "client"),
};
const WINDOW: Dim = Dim {
    name: "window",
    get: |k| format!("window {}", or_q(&k.window)),
};
const WORK: Dim = Dim {
    name: "work",
    get: |k| format!("work {}", or_q(&k.handler_work)),
};
const BATCH: Dim = Dim {
    name: "batch",
    get: |k| format!("batch {}", or_q(&k.batch)),
};
const LANES: Dim = Dim {
    name: "server lanes",
    get: ConfigKey::lanes_label,
};
const IO: Dim = Dim {
    name: "IO model",
    get: ConfigKey::io_label,
};

/// Splits `dims` into the labels every key shares and the dims that vary.
fn split_dims<'d>(keys: &[&ConfigKey], dims: &'d [Dim]) -> (Vec<String>, Vec<&'d Dim>) {
    let mut constant = Vec::new();
    let mut varying = Vec::new();
    for d in dims {
        let values: BTreeSet<String> = keys.iter().map(|k| (d.get)(k)).collect();
        if values.len() == 1 {
            constant.extend(values);
        } else {
            varying.push(d);
        }
    }
    (constant, varying)
}

fn label(key: &ConfigKey, dims: &[&Dim]) -> String {
    dims.iter()
        .map(|d| (d.get)(key))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Grouped bars: categories on x, one series per workload.
struct Bars {
    title: String,
    subtitle: Vec<String>,
    x_desc: String,
    y_desc: String,
    categories: Vec<String>,
    /// Label and, per category, the bar (median, min, max) if any.
    series: Vec<(String, Vec<Option<Spread>>)>,
    /// Axis tick and value label text.
    fmt: fn(f64) -> String,
}

/// Builds the bars of `metric` over the summarised configurations; `None`
/// when no configuration has the metric.
fn bars(
    report: &Report,
    metric: fn(&Summary) -> Option<Spread>,
    title: &str,
    y_desc: &str,
    fmt: fn(f64) -> String,
) -> Option<Bars> {
    let points: Vec<(&ConfigKey, Spread)> = report
        .summarised()
        .filter_map(|(g, s)| metric(s).map(|m| (&g.key, m)))
        .collect();
    if points.is_empty() {
        return None;
    }
    let keys: Vec<&ConfigKey> = points.iter().map(|(k, _)| *k).collect();
    let lanes_vary = keys
        .iter()
        .map(|k| k.server_io_lanes)
        .collect::<BTreeSet<_>>()
        .len()
        > 1;

    // Category = IO shape (+ lanes when they vary); series = the rest.
    let io_of = |k: &ConfigKey| {
        let mut io = ConfigKey {
            io_model: k.io_model.clone(),
            io_threads: k.io_threads,
            ..ConfigKey::default()
        };
        if lanes_vary {
            io.server_io_lanes = k.server_io_lanes;
        }
        io
    };
    let workload_of = |k: &ConfigKey| ConfigKey {
        io_model: None,
        io_threads: None,
        server_io_lanes: if lanes_vary { None } else { k.server_io_lanes },
        ..k.clone()
    };
    let ios: Vec<ConfigKey> = keys
        .iter()
        .map(|k| io_of(k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let workloads: Vec<ConfigKey> = keys
        .iter()
        .map(|k| workload_of(k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    let workload_dims = [FAMILY, PAYLOAD, CLIENTS, WINDOW, WORK, BATCH, LANES];
    let workload_dims = if lanes_vary {
        &workload_dims[..6]
    } else {
        &workload_dims[..]
    };
    let (constant, varying) = split_dims(&keys, workload_dims);
    let categories = ios
        .iter()
        .map(|io| {
            if lanes_vary {
                format!("{}, {}", io.io_label(), io.lanes_label())
            } else {
                io.io_label()
            }
        })
        .collect();
    let series = workloads
        .iter()
        .map(|w| {
            let name = if varying.is_empty() {
                "all runs".to_string()
            } else {
                label(w, &varying)
            };
            let values = ios
                .iter()
                .map(|io| {
                    points
                        .iter()
                        .find(|(k, _)| io_of(k) == *io && workload_of(k) == *w)
                        .map(|(_, s)| *s)
                })
                .collect();
            (name, values)
        })
        .collect();
    Some(Bars {
        title: title.to_string(),
        subtitle: vec![
            "bar: median over repetitions (fresh processes); whiskers: min–max".to_string(),
            constant.join(" · "),
        ],
        x_desc:
            "IO model (shared: one context run by N threads; sharded: N contexts, one thread each)"
                .to_string(),
        y_desc: y_desc.to_string(),
        categories,
        series,
        fmt,
    })
}

/// Rough width in pixels of `text` at `size` px (sans-serif averages a bit
/// over half an em per character).
fn text_width(text: &str, size: u32) -> u32 {
    (text.chars().count() as f64 * f64::from(size) * 0.56).ceil() as u32
}

fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).color(&BLACK)
}

fn bold(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size, FontStyle::Bold).into_font()).color(&BLACK)
}

fn draw_err<E: std::fmt::Display>(name: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("report: drawing {name}: {e}")
}

/// Draws the title and subtitle lines at the top of `area`, returns the
/// area below them.
fn titled<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    subtitle: &[String],
) -> Result<DrawingArea<DB, plotters::coord::Shift>, String>
where
    DB::ErrorType: 'static,
{
    let (w, _) = area.dim_in_pixel();
    let center = Pos::new(HPos::Center, VPos::Top);
    let lines = subtitle.iter().filter(|s| !s.is_empty()).count() as u32;
    let height = 16 + 30 + lines * 22 + 8;
    let (top, rest) = area.split_vertically(height);
    let err = draw_err("title");
    top.draw(&Text::new(
        title.to_string(),
        (w as i32 / 2, 14),
        bold(24).pos(center),
    ))
    .map_err(&err)?;
    for (i, line) in subtitle.iter().filter(|s| !s.is_empty()).enumerate() {
        top.draw(&Text::new(
            line.clone(),
            (w as i32 / 2, 48 + i as i32 * 22),
            font(15).color(&RGBColor(60, 60, 60)).pos(center),
        ))
        .map_err(&err)?;
    }
    Ok(rest)
}

fn draw_bars(bars: &Bars, name: &str) -> Result<String, String> {
    let err = draw_err(name);
    let ncat = bars.categories.len();
    let nser = bars.series.len();
    let legend_w = if nser > 1 {
        bars.series
            .iter()
            .map(|(l, _)| text_width(l, 14))
            .max()
            .unwrap_or(0)
            .max(text_width("workload", 15))
            + 60
    } else {
        0
    };
    let cat_label_w = bars
        .categories
        .iter()
        .map(|c| text_width(c, 15))
        .max()
        .unwrap_or(0)
        + 20;
    let per_cat = (nser as u32 * 44 + 40).max(cat_label_w);
    let width = (ncat as u32 * per_cat + 140 + legend_w).max(960);
    let subtitle_w = bars
        .subtitle
        .iter()
        .map(|s| text_width(s, 15))
        .chain([text_width(&bars.title, 24), text_width(&bars.x_desc, 16)])
        .max()
        .unwrap_or(0)
        + 40;
    let width = width.max(subtitle_w);
    let height = 600;

    let y_top = bars
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().map(|s| s.max))
        .fold(0.0_f64, f64::max);
    let y_top = if y_top > 0.0 { y_top * 1.15 } else { 1.0 };

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let body = titled(&root, &bars.title, &bars.subtitle)?;
        let (plot_area, legend_area) = body.split_horizontally(width - legend_w);

        let mut chart = ChartBuilder::on(&plot_area)
            .margin(12)
            .margin_right(24)
            .x_label_area_size(64)
            .y_label_area_size(90)
            .build_cartesian_2d(Categories(ncat), 0.0..y_top)
            .map_err(&err)?;
        let categories = &bars.categories;
        let x_fmt = |v: &f64| {
            categories
                .get(v.round().max(0.0) as usize)
                .cloned()
                .unwrap_or_default()
        };
        let fmt = bars.fmt;
        let y_fmt = |v: &f64| fmt(*v);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(GRID)
            .light_line_style(WHITE)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .y_labels(8)
            .x_desc(bars.x_desc.as_str())
            .y_desc(bars.y_desc.as_str())
            .label_style(font(15))
            .axis_desc_style(font(16))
            .draw()
            .map_err(&err)?;

        let group_w = 0.8;
        let bar_w = group_w / nser as f64;
        let whisker = BLACK.stroke_width(2);
        for (j, (_, values)) in bars.series.iter().enumerate() {
            let color = PALETTE[j % PALETTE.len()];
            for (i, v) in values.iter().enumerate() {
                let Some(s) = v else { continue };
                let x0 = i as f64 - group_w / 2.0 + j as f64 * bar_w;
                let (l, r) = (x0 + bar_w * 0.08, x0 + bar_w * 0.92);
                let mid = x0 + bar_w / 2.0;
                chart
                    .draw_series([Rectangle::new([(l, 0.0), (r, s.median)], color.filled())])
                    .map_err(&err)?;
                // Whisker: min to max, with caps.
                let cap = bar_w * 0.18;
                chart
                    .draw_series([
                        PathElement::new([(mid, s.min), (mid, s.max)], whisker),
                        PathElement::new([(mid - cap, s.min), (mid + cap, s.min)], whisker),
                        PathElement::new([(mid - cap, s.max), (mid + cap, s.max)], whisker),
                    ])
                    .map_err(&err)?;
                chart
                    .draw_series([EmptyElement::at((mid, s.max))
                        + Text::new(
                            fmt(s.median),
                            (0, -5),
                            font(12).pos(Pos::new(HPos::Center, VPos::Bottom)),
                        )])
                    .map_err(&err)?;
            }
        }

        if legend_w > 0 {
            let x = 10;
            legend_area
                .draw(&Text::new("workload", (x, 20), bold(15)))
                .map_err(&err)?;
            for (j, (l, _)) in bars.series.iter().enumerate() {
                let y = 48 + j as i32 * 26;
                let color = PALETTE[j % PALETTE.len()];
                legend_area
                    .draw(&Rectangle::new([(x, y), (x + 16, y + 16)], color.filled()))
                    .map_err(&err)?;
                legend_area
                    .draw(&Text::new(
                        l.clone(),
                        (x + 24, y + 8),
                        font(14).pos(Pos::new(HPos::Left, VPos::Center)),
                    ))
                    .map_err(&err)?;
            }
        }
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

/// Round trips per second on the axis: `0`, `950`, `12.5k`, `1.25M`.
fn fmt_rate(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else {
        format!("{v:.0}")
    }
}

/// Microseconds on the axis.
fn fmt_us(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.2}"))
    }
}

/// Drops trailing zeros of a fixed-point number (`12.50` → `12.5`).
fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `throughput.svg`, or `None` when no configuration was summarised.
pub(super) fn throughput_svg(report: &Report) -> Result<Option<String>, String> {
    bars(
        report,
        |s| Some(s.throughput),
        "UDP round trips per second by IO model",
        "round trips per second (higher is better)",
        fmt_rate,
    )
    .map(|b| draw_bars(&b, super::THROUGHPUT_FILE))
    .transpose()
}

/// `p99.svg`, or `None` when no summarised configuration has a p99.
pub(super) fn p99_svg(report: &Report) -> Result<Option<String>, String> {
    bars(
        report,
        |s| s.p99_us,
        "UDP p99 round-trip time by IO model",
        "p99 RTT, µs (lower is better)",
        fmt_us,
    )
    .map(|b| draw_bars(&b, super::P99_FILE))
    .transpose()
}

/// Fill colour of a loss cell: green for none, light orange to dark red
/// on a log scale up to the largest median.
fn loss_color(median: f64, top: f64) -> RGBColor {
    if median <= 0.0 {
        return NO_LOSS;
    }
    let t = if top > 0.0 {
        (median.ln_1p() / top.ln_1p()).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * t).round() as u8;
    RGBColor(
        mix(LOSS_LOW.0, LOSS_HIGH.0),
        mix(LOSS_LOW.1, LOSS_HIGH.1),
        mix(LOSS_LOW.2, LOSS_HIGH.2),
    )
}

/// `loss.svg`, or `None` when no run has payload, window and
/// `udp_lost_messages`.
pub(super) fn loss_svg(report: &Report) -> Result<Option<String>, String> {
    if report.loss.is_empty() {
        return Ok(None);
    }
    let name = super::LOSS_FILE;
    let err = draw_err(name);
    let windows: Vec<u64> = report
        .loss
        .iter()
        .map(|c| c.window)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let payloads: Vec<u64> = report
        .loss
        .iter()
        .map(|c| c.payload_bytes)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let runs: Vec<&Run> = report
        .groups
        .iter()
        .flat_map(|g| &g.runs)
        .filter(|r| {
            r.key.payload_bytes.is_some() && r.key.window.is_some() && r.udp_lost_messages.is_some()
        })
        .collect();
    let keys: Vec<&ConfigKey> = runs.iter().map(|r| &r.key).collect();
    let (constant, varying) = split_dims(&keys, &[FAMILY, CLIENTS, WORK, BATCH, LANES, IO]);
    let mut pooled = constant.join(" · ");
    if !varying.is_empty() {
        let names: Vec<&str> = varying.iter().map(|d| d.name).collect();
        if !pooled.is_empty() {
            pooled.push_str(" · ");
        }
        pooled.push_str(&format!("pooled over {}", names.join(", ")));
    }
    let lossy = runs
        .iter()
        .filter(|r| r.udp_lost_messages.unwrap_or(0) > 0)
        .count();
    let verdict = if lossy == 0 {
        format!("no loss: no echo lost in any of the {} runs", runs.len())
    } else {
        format!("{lossy} of {} runs lost echoes", runs.len())
    };
    let subtitle = vec![
        "cell: median lost echoes per run (udp_lost_messages), the worst run, runs; failed runs included"
            .to_string(),
        verdict,
        pooled,
    ];
    let title = "Lost UDP echoes by payload and window";

    let (nw, np) = (windows.len(), payloads.len());
    let width = (nw as u32 * 150 + 220).max(720).max(
        subtitle
            .iter()
            .map(|s| text_width(s, 15))
            .max()
            .unwrap_or(0)
            + 40,
    );
    let height = np as u32 * 90 + 260;
    let top = report
        .loss
        .iter()
        .map(super::LossCell::median)
        .fold(0.0, f64::max);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let body = titled(&root, title, &subtitle)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(12)
            .margin_right(30)
            .x_label_area_size(56)
            .y_label_area_size(110)
            .build_cartesian_2d(Categories(nw), Categories(np))
            .map_err(&err)?;
        let x_fmt = |v: &f64| {
            windows
                .get(v.round().max(0.0) as usize)
                .map_or_else(String::new, u64::to_string)
        };
        let y_fmt = |v: &f64| {
            payloads
                .get(v.round().max(0.0) as usize)
                .map_or_else(String::new, u64::to_string)
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_desc("window (datagrams in flight per client)")
            .y_desc("payload (bytes per datagram)")
            .label_style(font(15))
            .axis_desc_style(font(16))
            .draw()
            .map_err(&err)?;
        // Combinations the inputs do not have.
        for (i, _) in windows.iter().enumerate() {
            for (j, _) in payloads.iter().enumerate() {
                if report
                    .loss
                    .iter()
                    .any(|c| c.window == windows[i] && c.payload_bytes == payloads[j])
                {
                    continue;
                }
                let (x, y) = (i as f64, j as f64);
                chart
                    .draw_series([Rectangle::new(
                        [(x - 0.48, y - 0.46), (x + 0.48, y + 0.46)],
                        NOT_RUN.filled(),
                    )])
                    .map_err(&err)?;
                chart
                    .draw_series([EmptyElement::at((x, y))
                        + Text::new(
                            "not measured",
                            (0, 0),
                            font(14)
                                .color(&RGBColor(110, 110, 110))
                                .pos(Pos::new(HPos::Center, VPos::Center)),
                        )])
                    .map_err(&err)?;
            }
        }
        for c in &report.loss {
            let i = windows.iter().position(|&w| w == c.window).unwrap_or(0) as f64;
            let j = payloads
                .iter()
                .position(|&p| p == c.payload_bytes)
                .unwrap_or(0) as f64;
            let median = c.median();
            let fill = loss_color(median, top);
            let dark = median > 0.0 && top > 0.0 && median.ln_1p() / top.ln_1p() > 0.55;
            let ink = if dark { WHITE } else { BLACK };
            chart
                .draw_series([Rectangle::new(
                    [(i - 0.48, j - 0.46), (i + 0.48, j + 0.46)],
                    fill.filled(),
                )])
                .map_err(&err)?;
            let main = if median == 0.0 && c.max() == 0 {
                "no loss".to_string()
            } else {
                format!("{} lost/run", super::fmt_lost(median))
            };
            let failed = if c.failed_runs > 0 {
                format!(", {} failed", c.failed_runs)
            } else {
                String::new()
            };
            let detail = format!("max {} · {} runs{failed}", c.max(), c.lost.len());
            chart
                .draw_series([EmptyElement::at((i, j))
                    + Text::new(
                        main,
                        (0, -10),
                        bold(17)
                            .color(&ink)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )
                    + Text::new(
                        detail,
                        (0, 12),
                        font(13)
                            .color(&ink)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )])
                .map_err(&err)?;
        }
        root.present().map_err(&err)?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers() {
        assert_eq!(fmt_rate(0.0), "0");
        assert_eq!(fmt_rate(950.0), "950");
        assert_eq!(fmt_rate(12_500.0), "12.5k");
        assert_eq!(fmt_rate(40_000.0), "40k");
        assert_eq!(fmt_rate(1_250_000.0), "1.25M");
        assert_eq!(fmt_us(0.0), "0");
        assert_eq!(fmt_us(5.5), "5.5");
        assert_eq!(fmt_us(12.25), "12.2");
        assert_eq!(fmt_us(250.0), "250");
    }

    #[test]
    fn category_axis_centres_ticks() {
        let c = Categories(4);
        assert_eq!(c.key_points(10usize), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(c.map(&-0.5, (0, 400)), 0);
        assert_eq!(c.map(&0.0, (0, 400)), 50);
        assert_eq!(c.map(&3.5, (0, 400)), 400);
        // Reversed pixel range (a y axis).
        assert_eq!(c.map(&-0.5, (400, 0)), 400);
    }

    #[test]
    fn loss_colours() {
        assert_eq!(loss_color(0.0, 100.0), NO_LOSS);
        assert_eq!(loss_color(100.0, 100.0), LOSS_HIGH);
        let mid = loss_color(10.0, 100.0);
        assert!(mid.0 < LOSS_LOW.0 && mid.0 > LOSS_HIGH.0);
    }
}
