//! The report's SVG charts, drawn with plotters' SVG backend.
//!
//! They are made to be read inside a docs page about 900 px wide: a canvas
//! of at most [`MAX_WIDTH`] px whatever the number of configurations, short
//! horizontal labels, and no text under [`MIN_TEXT_PX`] px.
//!
//! * throughput and p99: one group of x positions per IO model, one
//!   position per thread (shared) or context (sharded) count, labelled by
//!   the count alone with the model and what the count counts under the
//!   group; one colour per series (server lanes and whatever else of the
//!   workload varies), named in a legend above the plot. Settings shared by
//!   every bar go in the subtitle, so the legend names only what differs.
//!   Throughput: median bars from 0, min–max whiskers. p99: median dots and
//!   min–max whiskers on a log axis, so that one slow run does not flatten
//!   every other configuration.
//! * loss: one cell per payload × window, coloured by the median lost
//!   echoes per run (green when nothing was lost), labelled with the median,
//!   the worst run, the number of runs and how many of them failed.

use std::collections::BTreeSet;
use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::input::{count, ConfigKey, Run};
use super::summary::{fmt_lost, LossCell, Report, Spread, Summary};

/// Name of the throughput chart.
pub const THROUGHPUT_FILE: &str = "throughput.svg";
/// Name of the p99 latency chart.
pub const P99_FILE: &str = "p99.svg";
/// Name of the loss chart.
pub const LOSS_FILE: &str = "loss.svg";

/// Font of every text in the charts; SVG viewers pick their sans-serif.
const FONT: &str = "sans-serif";

/// Width of the throughput and p99 charts, whatever the number of
/// configurations; also the widest the loss chart gets. A 900 px page shows
/// them at 900/960 of their size.
pub const MAX_WIDTH: u32 = 960;

/// The smallest text in any chart, in SVG px: 15 px on a 900 px page.
pub const MIN_TEXT_PX: f64 = 16.0;

const TITLE_PX: f64 = 24.0;
const TEXT_PX: f64 = 17.0;
const VALUE_PX: f64 = MIN_TEXT_PX;

/// plotters' SVG backend writes a text's `font-size` as its style's size
/// divided by 1.24; sizes here are what ends up in the SVG.
const PLOTTERS_FONT_SCALE: f64 = 1.24;

/// Series colours: the Okabe–Ito palette (distinguishable with the common
/// colour-vision deficiencies), then four of Paul Tol's, before repeating.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(80, 80, 80),
    RGBColor(136, 34, 85),
    RGBColor(51, 34, 136),
    RGBColor(153, 153, 51),
    RGBColor(68, 170, 153),
];

const GRID: RGBColor = RGBColor(225, 225, 225);
const SEPARATOR: RGBColor = RGBColor(170, 170, 170);
const SUBTLE: RGBColor = RGBColor(60, 60, 60);
const NO_LOSS: RGBColor = RGBColor(199, 233, 192);
const NOT_RUN: RGBColor = RGBColor(242, 242, 242);
const LOSS_LOW: RGBColor = RGBColor(253, 208, 162);
const LOSS_HIGH: RGBColor = RGBColor(165, 15, 21);

/// A category axis: values are positions `0.0, 1.0, …, n-1`, each with a
/// tick at its centre.
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

/// The x axis of the bar charts: one slot per IO shape at the given
/// positions (consecutive within an IO model, a gap between models), a
/// tick at each.
struct Slots(Vec<f64>);

impl Ranged for Slots {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let Range { start, end } = self.range();
        let t = (value - start) / (end - start);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        self.0.clone()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0.last().copied().unwrap_or(0.0) + 0.5
    }
}

/// The y axis of the bar charts, with its own ticks.
#[derive(Clone, Debug, PartialEq)]
enum YAxis {
    /// From 0 to the last tick.
    Linear { ticks: Vec<f64> },
    /// From the first tick to `top` (at or above the last tick),
    /// logarithmic.
    Log { ticks: Vec<f64>, top: f64 },
}

/// The smallest of 1, 2, 2.5, 5 × 10^k that is at least `v` (> 0).
fn nice_step(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// 1, 2, 5 × 10^k from the largest at or below `lo` up to `hi`
/// (0 < lo ≤ hi).
fn steps_125(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut k = lo.log10().floor() as i32 - 1;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(k);
            if v > hi * (1.0 + 1e-9) {
                return out;
            }
            if v <= lo * (1.0 + 1e-9) {
                out.clear();
            }
            out.push(v);
        }
        k += 1;
    }
}

impl YAxis {
    /// A linear axis from 0 with room for labels above `top`, the largest
    /// value, about 6 ticks.
    fn linear(top: f64) -> YAxis {
        let top = if top > 0.0 { top * 1.1 } else { 1.0 };
        let step = nice_step(top / 6.0);
        let n = (top / step - 1e-9).ceil() as usize;
        YAxis::Linear {
            ticks: (0..=n).map(|i| i as f64 * step).collect(),
        }
    }

    /// A log axis from a tick at or below `lo` (the smallest value > 0) to
    /// a little above `hi` (the largest, room for a label): ticks at 1, 2,
    /// 5 × 10^k, or at powers of ten alone when that would be more than 9
    /// ticks.
    fn log(lo: f64, hi: f64) -> YAxis {
        let hi = if hi > 0.0 { hi } else { 1.0 };
        let lo = if lo > 0.0 && lo <= hi { lo } else { hi };
        let lo = lo / 1.1;
        let top = (hi * 1.3).max(lo * 3.0);
        let ticks = steps_125(lo, top);
        let ticks = if ticks.len() > 9 {
            let (a, b) = (lo.log10().floor() as i32, top.log10().floor() as i32);
            (a..=b).map(|k| 10f64.powi(k)).collect()
        } else {
            ticks
        };
        YAxis::Log { ticks, top }
    }

    fn ticks(&self) -> &[f64] {
        match self {
            YAxis::Linear { ticks } | YAxis::Log { ticks, .. } => ticks,
        }
    }

    /// Where `v` sits on the axis, 0 at the bottom and 1 at the top.
    fn fraction(&self, v: f64) -> f64 {
        let Range { start: lo, end: hi } = self.range();
        match self {
            YAxis::Linear { .. } => (v - lo) / (hi - lo),
            YAxis::Log { .. } => (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()),
        }
    }
}

impl Ranged for YAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = self.fraction(*value);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        self.ticks().to_vec()
    }

    fn range(&self) -> Range<f64> {
        let ticks = self.ticks();
        match self {
            YAxis::Linear { .. } => ticks[0]..ticks[ticks.len() - 1],
            YAxis::Log { top, .. } => ticks[0]..*top,
        }
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
    get: |k| count(k.clients, "client"),
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

/// The IO model under its group of x positions, and what the numbers
/// above it count.
fn model_caption(model: Option<&str>) -> (String, String) {
    match model {
        Some("shared") => ("shared".into(), "threads, 1 context".into()),
        Some("sharded") => ("sharded".into(), "contexts, 1 thread each".into()),
        Some(other) => (other.into(), "threads".into()),
        None => ("?".into(), "threads".into()),
    }
}

/// The x positions of one IO model.
struct Group {
    /// The model, bold under the group.
    model: String,
    /// What the tick numbers count.
    counts: String,
    /// Its slots.
    slots: Range<usize>,
}

/// How a value is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// A bar from 0 to the median, linear axis.
    Bar,
    /// A dot at the median, log axis.
    Dot,
}

/// Values by IO shape (x) and series (colour).
struct Bars {
    title: String,
    subtitle: Vec<String>,
    y_desc: String,
    groups: Vec<Group>,
    /// Per slot: its x position and tick label (the thread or context
    /// count).
    slots: Vec<(f64, String)>,
    /// Label and, per slot, the value (median, min, max) if any.
    series: Vec<(String, Vec<Option<Spread>>)>,
    /// Axis tick and value label text.
    fmt: fn(f64) -> String,
    mark: Mark,
}

/// Gap between two IO models' groups, in slots.
const GROUP_GAP: f64 = 0.7;

/// Builds the chart of `metric` over the summarised configurations; `None`
/// when no configuration has the metric.
fn bars(
    report: &Report,
    metric: fn(&Summary) -> Option<Spread>,
    title: &str,
    y_desc: &str,
    fmt: fn(f64) -> String,
    mark: Mark,
) -> Option<Bars> {
    let points: Vec<(&ConfigKey, Spread)> = report
        .summarised()
        .filter_map(|(g, s)| metric(s).map(|m| (&g.key, m)))
        .collect();
    if points.is_empty() {
        return None;
    }
    let keys: Vec<&ConfigKey> = points.iter().map(|(k, _)| *k).collect();

    // x = IO shape (model, threads); series = everything else.
    let shape_of = |k: &ConfigKey| ConfigKey {
        io_model: k.io_model.clone(),
        io_threads: k.io_threads,
        ..ConfigKey::default()
    };
    let series_of = |k: &ConfigKey| ConfigKey {
        io_model: None,
        io_threads: None,
        ..k.clone()
    };
    let shapes: Vec<ConfigKey> = keys
        .iter()
        .map(|k| shape_of(k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let series_keys: Vec<ConfigKey> = keys
        .iter()
        .map(|k| series_of(k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    let mut groups: Vec<Group> = Vec::new();
    let mut slots = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let same_model = i > 0 && shapes[i - 1].io_model == shape.io_model;
        match groups.last_mut() {
            Some(g) if same_model => g.slots.end = i + 1,
            _ => {
                let (model, counts) = model_caption(shape.io_model.as_deref());
                groups.push(Group {
                    model,
                    counts,
                    slots: i..i + 1,
                });
            }
        }
        let pos = i as f64 + (groups.len() - 1) as f64 * GROUP_GAP;
        slots.push((pos, or_q(&shape.io_threads)));
    }

    let dims = [FAMILY, PAYLOAD, CLIENTS, WINDOW, WORK, BATCH, LANES];
    let (constant, varying) = split_dims(&keys, &dims);
    let series = series_keys
        .iter()
        .map(|w| {
            let name = if varying.is_empty() {
                "all runs".to_string()
            } else {
                label(w, &varying)
            };
            let values = shapes
                .iter()
                .map(|shape| {
                    points
                        .iter()
                        .find(|(k, _)| shape_of(k) == *shape && series_of(k) == *w)
                        .map(|(_, s)| *s)
                })
                .collect();
            (name, values)
        })
        .collect();
    let what = match mark {
        Mark::Bar => "bar: median over repetitions (fresh processes); whiskers: min–max",
        Mark::Dot => "dot: median over repetitions (fresh processes); whiskers: min–max; log scale",
    };
    Some(Bars {
        title: title.to_string(),
        subtitle: vec![what.to_string(), constant.join(" · ")],
        y_desc: y_desc.to_string(),
        groups,
        slots,
        series,
        fmt,
        mark,
    })
}

/// Rough width in px of `text` at `px`: a little over DejaVu Sans' widths
/// (digits 0.64 em, most lowercase 0.6 em, narrow punctuation 0.32 em).
fn text_width(text: &str, px: f64) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            '.' | ',' | ' ' | ':' | ';' | 'i' | 'l' | 'j' | '|' | '\'' | '(' | ')' => 0.34,
            _ => 0.62,
        })
        .sum();
    em * px
}

/// Rough width in px of `text` in bold at `px`.
fn bold_width(text: &str, px: f64) -> f64 {
    text.chars().count() as f64 * px * 0.66
}

/// Splits `text` into lines of at most `max_px` at `px`: between its
/// ` · `-separated items when they fit (the `·` stays at the end of its
/// line), else between words.
fn wrap(text: &str, px: f64, max_px: f64) -> Vec<String> {
    let items: Vec<&str> = text.split(" · ").collect();
    let n = items.len();
    let mut pieces: Vec<String> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let item = if i + 1 < n {
            format!("{item} ·")
        } else {
            item.to_string()
        };
        if text_width(&item, px) <= max_px {
            pieces.push(item);
        } else {
            pieces.extend(item.split(' ').filter(|w| !w.is_empty()).map(str::to_owned));
        }
    }
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for piece in pieces {
        if !line.is_empty() && text_width(&format!("{line} {piece}"), px) > max_px {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&piece);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// A text style of `px` SVG pixels.
fn font(px: f64) -> TextStyle<'static> {
    TextStyle::from((FONT, px * PLOTTERS_FONT_SCALE).into_font()).color(&BLACK)
}

/// A bold text style of `px` SVG pixels.
fn bold(px: f64) -> TextStyle<'static> {
    TextStyle::from((FONT, px * PLOTTERS_FONT_SCALE, FontStyle::Bold).into_font()).color(&BLACK)
}

fn draw_err<E: std::fmt::Display>(name: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("report: drawing {name}: {e}")
}

/// The title and the subtitle wrapped to `width`.
struct Header {
    title: String,
    lines: Vec<String>,
}

const LINE_H: u32 = 24;

impl Header {
    fn new(title: &str, subtitle: &[String], width: u32) -> Header {
        let max = f64::from(width) - 40.0;
        Header {
            title: title.to_string(),
            lines: subtitle
                .iter()
                .flat_map(|s| wrap(s, TEXT_PX, max))
                .collect(),
        }
    }

    fn height(&self) -> u32 {
        14 + 34 + self.lines.len() as u32 * LINE_H + 8
    }

    /// Draws the header at the top of `area`, returns the area below it.
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<DrawingArea<DB, Shift>, String>
    where
        DB::ErrorType: 'static,
    {
        let (w, _) = area.dim_in_pixel();
        let center = Pos::new(HPos::Center, VPos::Top);
        let (top, rest) = area.split_vertically(self.height());
        let err = draw_err("title");
        top.draw(&Text::new(
            self.title.clone(),
            (w as i32 / 2, 14),
            bold(TITLE_PX).pos(center),
        ))
        .map_err(&err)?;
        for (i, line) in self.lines.iter().enumerate() {
            top.draw(&Text::new(
                line.clone(),
                (w as i32 / 2, 14 + 34 + i as i32 * LINE_H as i32),
                font(TEXT_PX).color(&SUBTLE).pos(center),
            ))
            .map_err(&err)?;
        }
        Ok(rest)
    }
}

/// The series legend: colour swatches and names in rows under the header.
struct Legend {
    entries: Vec<(String, RGBColor)>,
    columns: usize,
    column_w: u32,
}

const LEGEND_ROW_H: u32 = 28;
const SWATCH: i32 = 16;

impl Legend {
    /// No legend for a single series (the subtitle says what it is).
    fn new(series: &[(String, Vec<Option<Spread>>)], width: u32) -> Legend {
        let entries: Vec<(String, RGBColor)> = if series.len() > 1 {
            series
                .iter()
                .enumerate()
                .map(|(j, (l, _))| (l.clone(), PALETTE[j % PALETTE.len()]))
                .collect()
        } else {
            Vec::new()
        };
        let column_w = entries
            .iter()
            .map(|(l, _)| text_width(l, TEXT_PX).ceil() as u32)
            .max()
            .unwrap_or(0)
            + SWATCH as u32
            + 8
            + 28;
        let columns = ((width - 40) / column_w.max(1)).clamp(1, entries.len().max(1) as u32);
        Legend {
            entries,
            columns: columns as usize,
            column_w,
        }
    }

    fn height(&self) -> u32 {
        if self.entries.is_empty() {
            return 0;
        }
        self.entries.len().div_ceil(self.columns) as u32 * LEGEND_ROW_H + 6
    }

    /// Draws the legend at the top of `area`, returns the area below it.
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<DrawingArea<DB, Shift>, String>
    where
        DB::ErrorType: 'static,
    {
        let (w, _) = area.dim_in_pixel();
        let (top, rest) = area.split_vertically(self.height());
        let err = draw_err("legend");
        let total = self.columns.min(self.entries.len()) as u32 * self.column_w;
        let x0 = (w.saturating_sub(total) / 2) as i32;
        for (i, (l, color)) in self.entries.iter().enumerate() {
            let x = x0 + (i % self.columns) as i32 * self.column_w as i32;
            let y = (i / self.columns) as i32 * LEGEND_ROW_H as i32 + 4;
            top.draw(&Rectangle::new(
                [(x, y + 2), (x + SWATCH, y + 2 + SWATCH)],
                color.filled(),
            ))
            .map_err(&err)?;
            top.draw(&Text::new(
                l.clone(),
                (x + SWATCH + 8, y + 2 + SWATCH / 2),
                font(TEXT_PX).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(&err)?;
        }
        Ok(rest)
    }
}

const PLOT_H: u32 = 420;
const X_AREA: u32 = 92;
const Y_AREA: u32 = 100;
const MARGIN: u32 = 12;

fn draw_bars(bars: &Bars, name: &str) -> Result<String, String> {
    let err = draw_err(name);
    let width = MAX_WIDTH;
    let header = Header::new(&bars.title, &bars.subtitle, width);
    let legend = Legend::new(&bars.series, width);
    let height = header.height() + legend.height() + MARGIN + PLOT_H + X_AREA + MARGIN;

    let values = || bars.series.iter().flat_map(|(_, v)| v.iter().flatten());
    let y = match bars.mark {
        Mark::Bar => YAxis::linear(values().map(|s| s.max).fold(0.0_f64, f64::max)),
        Mark::Dot => YAxis::log(
            values()
                .map(|s| s.min)
                .filter(|&v| v > 0.0)
                .fold(f64::INFINITY, f64::min),
            values().map(|s| s.max).fold(0.0_f64, f64::max),
        ),
    };
    let (y_lo, y_hi) = (y.range().start, y.range().end);
    let x = Slots(bars.slots.iter().map(|(p, _)| *p).collect());
    let x_span = x.range().end - x.range().start;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let body = header.draw(&root)?;
        let body = legend.draw(&body)?;

        let mut chart = ChartBuilder::on(&body)
            .margin(MARGIN)
            .margin_right(2 * MARGIN)
            .x_label_area_size(X_AREA)
            .y_label_area_size(Y_AREA)
            .build_cartesian_2d(x, y)
            .map_err(&err)?;
        let ticks = &bars.slots;
        let x_fmt = |v: &f64| {
            ticks
                .iter()
                .find(|(p, _)| (p - v).abs() < 1e-6)
                .map(|(_, t)| t.clone())
                .unwrap_or_default()
        };
        let fmt = bars.fmt;
        let y_fmt = |v: &f64| fmt(*v);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(GRID)
            .light_line_style(WHITE)
            .x_labels(bars.slots.len())
            .y_labels(20)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .y_desc(bars.y_desc.as_str())
            .label_style(font(TEXT_PX))
            .axis_desc_style(font(TEXT_PX))
            .draw()
            .map_err(&err)?;

        // Under the ticks of each group: the IO model and what the numbers
        // count; between groups, a separator.
        for (gi, g) in bars.groups.iter().enumerate() {
            let first = bars.slots[g.slots.start].0;
            let last = bars.slots[g.slots.end - 1].0;
            let (cx, bottom) = chart.backend_coord(&((first + last) / 2.0, y_lo));
            let top = Pos::new(HPos::Center, VPos::Top);
            root.draw(&Text::new(
                g.model.clone(),
                (cx, bottom + 34),
                bold(TEXT_PX).pos(top),
            ))
            .map_err(&err)?;
            root.draw(&Text::new(
                g.counts.clone(),
                (cx, bottom + 58),
                font(TEXT_PX).color(&SUBTLE).pos(top),
            ))
            .map_err(&err)?;
            if gi > 0 {
                let sep = first - 0.5 - GROUP_GAP / 2.0;
                chart
                    .draw_series([PathElement::new(
                        [(sep, y_lo), (sep, y_hi)],
                        SEPARATOR.stroke_width(1),
                    )])
                    .map_err(&err)?;
            }
        }

        let nser = bars.series.len();
        let group_w = 0.8;
        let bar_w = group_w / nser as f64;
        let plot_w = f64::from(chart.plotting_area().dim_in_pixel().0);
        let bar_px = plot_w * bar_w / x_span;
        // Value labels only when every one fits over its bar.
        let labels_fit = values().all(|s| text_width(&fmt(s.median), VALUE_PX) <= bar_px);
        let whisker = BLACK.stroke_width(2);
        let dot_r = (bar_px * 0.3).clamp(4.0, 8.0) as i32;
        // Each value with its colour and its x range.
        let marks = bars.series.iter().enumerate().flat_map(|(j, (_, vals))| {
            vals.iter().enumerate().filter_map(move |(i, v)| {
                let x0 = bars.slots[i].0 - group_w / 2.0 + j as f64 * bar_w;
                v.map(|s| (s, PALETTE[j % PALETTE.len()], x0))
            })
        });
        for (s, color, x0) in marks.clone() {
            let mid = x0 + bar_w / 2.0;
            if bars.mark == Mark::Bar {
                let (l, r) = (x0 + bar_w * 0.08, x0 + bar_w * 0.92);
                chart
                    .draw_series([Rectangle::new([(l, y_lo), (r, s.median)], color.filled())])
                    .map_err(&err)?;
            }
            // Whisker: min to max, with caps.
            let cap = bar_w * 0.18;
            chart
                .draw_series([
                    PathElement::new([(mid, s.min), (mid, s.max)], whisker),
                    PathElement::new([(mid - cap, s.min), (mid + cap, s.min)], whisker),
                    PathElement::new([(mid - cap, s.max), (mid + cap, s.max)], whisker),
                ])
                .map_err(&err)?;
            if bars.mark == Mark::Dot {
                chart
                    .draw_series([
                        Circle::new((mid, s.median), dot_r, color.filled()),
                        Circle::new((mid, s.median), dot_r, BLACK.stroke_width(1)),
                    ])
                    .map_err(&err)?;
            }
        }
        // Labels last, over every mark.
        for (s, _, x0) in marks.filter(|_| labels_fit) {
            let mid = x0 + bar_w / 2.0;
            let text = fmt(s.median);
            let (px, dot_y) = chart.backend_coord(&(mid, s.median));
            let (_, max_y) = chart.backend_coord(&(mid, s.max));
            let label_h = VALUE_PX as i32 + 4;
            if bars.mark == Mark::Dot && dot_y - dot_r - 3 - max_y >= label_h + 4 {
                // On the whisker just above the dot, on a white patch.
                let bottom = dot_y - dot_r - 3;
                let half = (text_width(&text, VALUE_PX) / 2.0).ceil() as i32 + 2;
                root.draw(&Rectangle::new(
                    [(px - half, bottom - label_h), (px + half, bottom)],
                    WHITE.filled(),
                ))
                .map_err(&err)?;
                root.draw(&Text::new(
                    text,
                    (px, bottom - label_h / 2),
                    font(VALUE_PX).pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(&err)?;
            } else {
                // Above the whisker.
                root.draw(&Text::new(
                    text,
                    (px, max_y - 5),
                    font(VALUE_PX).pos(Pos::new(HPos::Center, VPos::Bottom)),
                ))
                .map_err(&err)?;
            }
        }
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

/// Round trips per second on the axis and over bars, at most 3
/// significant digits: `0`, `950`, `12.5k`, `141k`, `1.25M`.
fn fmt_rate(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e5 {
        format!("{:.0}k", v / 1e3)
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
        Mark::Bar,
    )
    .map(|b| draw_bars(&b, THROUGHPUT_FILE))
    .transpose()
}

/// `p99.svg`, or `None` when no summarised configuration has a p99.
pub(super) fn p99_svg(report: &Report) -> Result<Option<String>, String> {
    bars(
        report,
        |s| s.p99_us,
        "UDP p99 round-trip time by IO model",
        "p99 RTT, µs, log scale (lower is better)",
        fmt_us,
        Mark::Dot,
    )
    .map(|b| draw_bars(&b, P99_FILE))
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

const CELL_MAIN_PX: f64 = 19.0;
const LOSS_Y_AREA: u32 = 120;
const LOSS_X_AREA: u32 = 70;
const CELL_H: u32 = 100;
const CELL_MAX_W: u32 = 220;
const LOSS_MIN_WIDTH: u32 = 760;
const LOSS_MIN_PLOT_H: u32 = 300;

/// The lines of a loss cell that fit in `max_px`: the median in bold
/// (`no loss`, `12 lost/run`, or the bare number when that does not fit),
/// then the worst run and the run count, then the failed runs.
fn cell_lines(c: &LossCell, max_px: f64) -> Vec<(String, bool)> {
    let median = c.median();
    let main = if median == 0.0 && c.max() == 0 {
        if bold_width("no loss", CELL_MAIN_PX) <= max_px {
            "no loss".to_string()
        } else {
            "0".to_string()
        }
    } else {
        let long = format!("{} lost/run", fmt_lost(median));
        if bold_width(&long, CELL_MAIN_PX) <= max_px {
            long
        } else {
            fmt_lost(median)
        }
    };
    let mut lines = vec![(main, true)];
    let detail = format!("max {} · {} runs", c.max(), c.lost.len());
    if text_width(&detail, MIN_TEXT_PX) <= max_px {
        lines.push((detail, false));
        if c.failed_runs > 0 {
            lines.push((format!("{} failed", c.failed_runs), false));
        }
    }
    lines
}

/// `loss.svg`, or `None` when no run has payload, window and
/// `udp_lost_messages`.
pub(super) fn loss_svg(report: &Report) -> Result<Option<String>, String> {
    if report.loss.is_empty() {
        return Ok(None);
    }
    let name = LOSS_FILE;
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
        "cell: median lost echoes per run (udp_lost_messages),".to_string(),
        "the worst run, the runs and how many failed (they count too)".to_string(),
        verdict,
        pooled,
    ];
    let title = "Lost UDP echoes by payload and window";

    let (nw, np) = (windows.len(), payloads.len());
    let fixed = MARGIN + LOSS_Y_AREA + 3 * MARGIN;
    let cell_w = ((MAX_WIDTH - fixed) / nw as u32).min(CELL_MAX_W);
    let width = (fixed + nw as u32 * cell_w).max(LOSS_MIN_WIDTH);
    let header = Header::new(title, &subtitle, width);
    // Tall enough for the y axis description.
    let plot_h = (np as u32 * CELL_H).max(LOSS_MIN_PLOT_H);
    let height = header.height() + MARGIN + plot_h + LOSS_X_AREA + MARGIN;
    let top = report.loss.iter().map(LossCell::median).fold(0.0, f64::max);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(&err)?;
        let body = header.draw(&root)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(MARGIN)
            .margin_right(3 * MARGIN)
            .x_label_area_size(LOSS_X_AREA)
            .y_label_area_size(LOSS_Y_AREA)
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
            .label_style(font(TEXT_PX))
            .axis_desc_style(font(TEXT_PX))
            .draw()
            .map_err(&err)?;
        let cell_px = f64::from(chart.plotting_area().dim_in_pixel().0) / nw as f64 * 0.96 - 10.0;
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
                let text = if text_width("not measured", MIN_TEXT_PX) <= cell_px {
                    "not measured"
                } else {
                    "–"
                };
                chart
                    .draw_series([EmptyElement::at((x, y))
                        + Text::new(
                            text,
                            (0, 0),
                            font(MIN_TEXT_PX)
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
            let lines = cell_lines(c, cell_px);
            let line_h = |main: bool| if main { 26 } else { 22 };
            let total: i32 = lines.iter().map(|(_, m)| line_h(*m)).sum();
            let mut y = -total / 2;
            for (text, main) in lines {
                let style = if main {
                    bold(CELL_MAIN_PX)
                } else {
                    font(MIN_TEXT_PX)
                };
                let h = line_h(main);
                chart
                    .draw_series([EmptyElement::at((i, j))
                        + Text::new(
                            text,
                            (0, y + h / 2),
                            style.color(&ink).pos(Pos::new(HPos::Center, VPos::Center)),
                        )])
                    .map_err(&err)?;
                y += h;
            }
        }
        root.present().map_err(&err)?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use plotters::coord::ranged1d::{BoldPoints, LightPoints};

    use super::*;

    #[test]
    fn axis_numbers() {
        assert_eq!(fmt_rate(0.0), "0");
        assert_eq!(fmt_rate(950.0), "950");
        assert_eq!(fmt_rate(12_500.0), "12.5k");
        assert_eq!(fmt_rate(40_000.0), "40k");
        assert_eq!(fmt_rate(140_528.0), "141k");
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
    fn slot_axis_has_a_tick_per_slot_and_room_around() {
        let s = Slots(vec![0.0, 1.0, 2.7]);
        assert_eq!(s.key_points(BoldPoints(3)), vec![0.0, 1.0, 2.7]);
        assert!(s.key_points(LightPoints::new(3, 30)).is_empty());
        assert_eq!(s.range(), -0.5..3.2);
    }

    #[test]
    fn linear_axis_has_round_ticks_above_the_top() {
        assert_eq!(nice_step(0.9), 1.0);
        assert_eq!(nice_step(23_000.0), 25_000.0);
        assert_eq!(nice_step(26_000.0), 50_000.0);
        let y = YAxis::linear(140_000.0);
        assert_eq!(y.ticks().first(), Some(&0.0));
        let last = *y.ticks().last().unwrap();
        assert!((154_000.0..=200_000.0).contains(&last), "{y:?}");
        assert!((5..=9).contains(&y.ticks().len()), "{y:?}");
    }

    #[test]
    fn log_axis_ticks_1_2_5_and_keeps_small_values_apart() {
        let y = YAxis::log(165.0, 8000.0);
        assert_eq!(
            y.ticks(),
            [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10_000.0]
        );
        // Room above the largest value for its label, not a whole step.
        assert!((10_000.0..12_000.0).contains(&y.range().end), "{y:?}");
        // 165 µs and 300 µs are an eighth of the axis apart, not 1.3 %.
        assert!(y.fraction(300.0) - y.fraction(165.0) > 0.12);
        assert_eq!(y.fraction(0.0), 0.0, "non-positive values sit on the floor");
        // Many decades: powers of ten only.
        let y = YAxis::log(1.0, 1e7);
        assert_eq!(y.ticks().first(), Some(&0.1));
        assert!(y.ticks().iter().all(|t| {
            let l = t.log10();
            (l - l.round()).abs() < 1e-9
        }));
        // One value: still a range.
        let y = YAxis::log(50.0, 50.0);
        assert!(y.ticks().len() >= 2);
    }

    #[test]
    fn wrap_keeps_separators_at_line_ends() {
        // "aaaa ·" is 4 × 6.2 + 3.4 + 6.2 = 34.4 px wide at 10 px.
        let lines = wrap("aaaa · bbbb · cccc", 10.0, 75.0);
        assert_eq!(lines, ["aaaa · bbbb ·", "cccc"]);
        // An item is kept whole when it fits on a line of its own.
        let lines = wrap("aa · bbb ccc", 10.0, 60.0);
        assert_eq!(lines, ["aa ·", "bbb ccc"]);
        // Else it is split between words.
        let lines = wrap("aa · bbb ccc ddd", 10.0, 60.0);
        assert_eq!(lines, ["aa · bbb", "ccc ddd"]);
        assert_eq!(wrap("short", 10.0, 1000.0), ["short"]);
    }

    #[test]
    fn loss_colours() {
        assert_eq!(loss_color(0.0, 100.0), NO_LOSS);
        assert_eq!(loss_color(100.0, 100.0), LOSS_HIGH);
        let mid = loss_color(10.0, 100.0);
        assert!(mid.0 < LOSS_LOW.0 && mid.0 > LOSS_HIGH.0);
    }
}
