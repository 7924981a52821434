//! The throughput and p99 charts: one group of x positions per IO model,
//! one position per thread (shared) or context (sharded) count, one colour
//! per series; median bars from 0 (throughput) or median dots on a log
//! axis (p99), with min–max whiskers. [`Bars::of`] lays a chart out,
//! [`draw`] draws it.
//!
//! When every configuration runs on one IO shape (udp-limits' payload ×
//! window grid, say), an x axis by IO model would be one position with
//! every configuration a colour of its own over it (issue 24). The chart
//! is then by configuration instead: one group of positions per value of
//! the first setting that varies (payload, say), one position per value of
//! the others (window), one colour, the IO shape named in the subtitle.

use std::collections::BTreeSet;
use std::ops::Range;

use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{draw_axes, AxisText, Grid, Slots, YAxis};
use super::dims::{label, or_q, split_dims, BATCH, CLIENTS, FAMILY, LANES, PAYLOAD, WINDOW, WORK};
use super::frame::{plot_on, Frame};
use super::style::{
    bold, draw_err, font, text_width, MAX_WIDTH, PALETTE, SEPARATOR, SUBTLE, TEXT_PX, VALUE_PX,
};
use crate::report::input::ConfigKey;
use crate::report::summary::{Report, Spread, Summary};

const PLOT_H: u32 = 420;
const X_AREA: u32 = 92;
const Y_AREA: u32 = 100;

/// Gap between two IO models' groups, in slots.
const GROUP_GAP: f64 = 0.7;

/// Width of a slot's bars together, in slots.
const GROUP_W: f64 = 0.8;

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
pub(super) enum Mark {
    /// A bar from 0 to the median, linear axis.
    Bar,
    /// A dot at the median, log axis.
    Dot,
}

/// What a bar chart shows: its metric, words and look.
pub(super) struct Metric {
    /// The value of a configuration, if it has one.
    pub(super) value: fn(&Summary) -> Option<Spread>,
    /// Title.
    pub(super) title: &'static str,
    /// The y axis description.
    pub(super) y_desc: &'static str,
    /// Axis tick and value label text.
    pub(super) fmt: fn(f64) -> String,
    /// Bars or dots.
    pub(super) mark: Mark,
}

/// Values by IO shape (x) and series (colour).
pub(super) struct Bars {
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

/// The x position of a configuration: its IO shape (model, threads).
fn shape_of(k: &ConfigKey) -> ConfigKey {
    ConfigKey {
        io_model: k.io_model.clone(),
        io_threads: k.io_threads,
        ..ConfigKey::default()
    }
}

/// The series of a configuration: everything but its IO shape.
fn series_of(k: &ConfigKey) -> ConfigKey {
    ConfigKey {
        io_model: None,
        io_threads: None,
        ..k.clone()
    }
}

/// The distinct values of `f` over `keys`, in order.
fn distinct(keys: &[&ConfigKey], f: fn(&ConfigKey) -> ConfigKey) -> Vec<ConfigKey> {
    keys.iter()
        .map(|k| f(k))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// One slot per shape, consecutive within an IO model and a gap between
/// models; the groups of slots per model.
fn x_layout(shapes: &[ConfigKey]) -> (Vec<Group>, Vec<(f64, String)>) {
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
    (groups, slots)
}

impl Bars {
    /// The chart of `metric` over the summarised configurations; `None`
    /// when no configuration has the metric.
    pub(super) fn of(report: &Report, metric: &Metric) -> Option<Bars> {
        let points: Vec<(&ConfigKey, Spread)> = report
            .summarised()
            .filter_map(|(g, s)| (metric.value)(s).map(|m| (&g.key, m)))
            .collect();
        if points.is_empty() {
            return None;
        }
        let keys: Vec<&ConfigKey> = points.iter().map(|(k, _)| *k).collect();
        let shapes = distinct(&keys, shape_of);
        if shapes.len() == 1 && distinct(&keys, series_of).len() > 1 {
            return Some(Bars::by_configuration(metric, &points, &shapes[0]));
        }
        let (groups, slots) = x_layout(&shapes);
        let dims = [FAMILY, PAYLOAD, CLIENTS, WINDOW, WORK, BATCH, LANES];
        let (constant, varying) = split_dims(&keys, &dims);
        let series = distinct(&keys, series_of)
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
        let what = match metric.mark {
            Mark::Bar => "bar: median over repetitions (fresh processes); whiskers: min–max",
            Mark::Dot => {
                "dot: median over repetitions (fresh processes); whiskers: min–max; log scale"
            }
        };
        Some(Bars {
            title: metric.title.to_string(),
            subtitle: vec![what.to_string(), constant.join(" · ")],
            y_desc: metric.y_desc.to_string(),
            groups,
            slots,
            series,
            fmt: metric.fmt,
            mark: metric.mark,
        })
    }

    /// The chart of `points`, which share the IO shape `shape`, with the
    /// configurations on the x axis: a group per value of the first
    /// setting that varies, a position per value of the others, one
    /// series.
    fn by_configuration(
        metric: &Metric,
        points: &[(&ConfigKey, Spread)],
        shape: &ConfigKey,
    ) -> Bars {
        let keys: Vec<&ConfigKey> = points.iter().map(|(k, _)| *k).collect();
        let dims = [FAMILY, PAYLOAD, CLIENTS, WINDOW, WORK, BATCH, LANES];
        let (mut constant, varying) = split_dims(&keys, &dims);
        constant.push(shape.io_label());
        let configs = distinct(&keys, series_of);
        let (outer, inner) = varying.split_first().expect("several configurations vary");
        let mut groups: Vec<Group> = Vec::new();
        let mut slots = Vec::new();
        for (i, c) in configs.iter().enumerate() {
            // One group per value of `outer`; one group in all when
            // nothing else varies (the ticks then say `outer`).
            let caption = if inner.is_empty() {
                String::new()
            } else {
                (outer.get)(c)
            };
            match groups.last_mut() {
                Some(g) if g.model == caption => g.slots.end = i + 1,
                _ => groups.push(Group {
                    model: caption,
                    counts: String::new(),
                    slots: i..i + 1,
                }),
            }
            let pos = i as f64 + (groups.len() - 1) as f64 * GROUP_GAP;
            let tick = if inner.is_empty() {
                (outer.get)(c)
            } else {
                label(c, inner)
            };
            slots.push((pos, tick));
        }
        let values = configs
            .iter()
            .map(|c| {
                points
                    .iter()
                    .find(|(k, _)| series_of(k) == *c)
                    .map(|(_, s)| *s)
            })
            .collect();
        let what = match metric.mark {
            Mark::Bar => "bar: median over repetitions (fresh processes); whiskers: min–max",
            Mark::Dot => {
                "dot: median over repetitions (fresh processes); whiskers: min–max; log scale"
            }
        };
        Bars {
            title: metric.title.replace("by IO model", "by configuration"),
            subtitle: vec![what.to_string(), constant.join(" · ")],
            y_desc: metric.y_desc.to_string(),
            groups,
            slots,
            series: vec![(shape.io_label(), values)],
            fmt: metric.fmt,
            mark: metric.mark,
        }
    }

    /// Every value, of every series.
    fn values(&self) -> impl Iterator<Item = &Spread> + Clone {
        self.series.iter().flat_map(|(_, v)| v.iter().flatten())
    }

    /// Linear from 0 for bars, logarithmic for dots, with room for the
    /// labels.
    fn y_axis(&self) -> YAxis {
        let max = self.values().map(|s| s.max).fold(0.0_f64, f64::max);
        match self.mark {
            Mark::Bar => YAxis::linear(max),
            Mark::Dot => YAxis::log(
                self.values()
                    .map(|s| s.min)
                    .filter(|&v| v > 0.0)
                    .fold(f64::INFINITY, f64::min),
                max,
            ),
        }
    }

    /// Each value with its colour and the left edge of its bar.
    fn marks(&self) -> impl Iterator<Item = (Spread, RGBColor, f64)> + Clone + '_ {
        let bar_w = GROUP_W / self.series.len() as f64;
        self.series
            .iter()
            .enumerate()
            .flat_map(move |(j, (_, vals))| {
                vals.iter().enumerate().filter_map(move |(i, v)| {
                    let x0 = self.slots[i].0 - GROUP_W / 2.0 + j as f64 * bar_w;
                    v.map(|s| (s, PALETTE[j % PALETTE.len()], x0))
                })
            })
    }
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Slots, YAxis>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Sizes of the marks, once the plot's width in pixels is known.
struct MarkSize {
    /// One bar's width, in slots.
    bar_w: f64,
    /// A dot's radius, px.
    dot_r: i32,
    /// Every value label fits over its bar.
    labels_fit: bool,
}

impl MarkSize {
    fn of(bars: &Bars, chart: &Chart<'_, '_>) -> MarkSize {
        let bar_w = GROUP_W / bars.series.len() as f64;
        let x = chart.x_range();
        let plot_w = f64::from(chart.plotting_area().dim_in_pixel().0);
        let bar_px = plot_w * bar_w / (x.end - x.start);
        MarkSize {
            bar_w,
            dot_r: (bar_px * 0.3).clamp(4.0, 8.0) as i32,
            labels_fit: bars
                .values()
                .all(|s| text_width(&(bars.fmt)(s.median), VALUE_PX) <= bar_px),
        }
    }
}

/// Draws `bars` as an SVG document; `name` (the file) names it in errors.
pub(super) fn draw(bars: &Bars, name: &str) -> Result<String, String> {
    let err = draw_err(name);
    let width = MAX_WIDTH;
    let names: Vec<&str> = bars.series.iter().map(|(n, _)| n.as_str()).collect();
    let frame = Frame::new(&bars.title, &bars.subtitle, &names, width);
    let height = frame.page_height(PLOT_H, X_AREA);
    let x = Slots(bars.slots.iter().map(|(p, _)| *p).collect());

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let body = frame.draw(&root, name)?;
        let mut chart = plot_on(&body, X_AREA, Y_AREA)
            .build_cartesian_2d(x, bars.y_axis())
            .map_err(&err)?;
        let x_label = |v: &f64| {
            bars.slots
                .iter()
                .find(|(p, _)| (p - v).abs() < 1e-6)
                .map(|(_, t)| t.clone())
                .unwrap_or_default()
        };
        let text = AxisText {
            x_label: &x_label,
            y_label: &|v: &f64| (bars.fmt)(*v),
            x_desc: None,
            y_desc: &bars.y_desc,
        };
        let grid = Grid::Horizontal {
            x_ticks: bars.slots.len(),
        };
        draw_axes(&mut chart, &text, grid, name)?;
        draw_group_captions(bars, &root, &chart, name)?;
        let size = MarkSize::of(bars, &chart);
        draw_marks(bars, &mut chart, &size, name)?;
        if size.labels_fit {
            draw_value_labels(bars, &root, &chart, &size, name)?;
        }
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

/// Under the ticks of each group: the IO model and what the numbers count;
/// between groups, a separator.
fn draw_group_captions(
    bars: &Bars,
    root: &Area<'_>,
    chart: &Chart<'_, '_>,
    name: &str,
) -> Result<(), String> {
    let err = draw_err(name);
    let Range {
        start: y_lo,
        end: y_hi,
    } = chart.y_range();
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
                .plotting_area()
                .draw(&PathElement::new(
                    [(sep, y_lo), (sep, y_hi)],
                    SEPARATOR.stroke_width(1),
                ))
                .map_err(&err)?;
        }
    }
    Ok(())
}

/// Bars (or dots) and their min–max whiskers.
fn draw_marks(
    bars: &Bars,
    chart: &mut Chart<'_, '_>,
    size: &MarkSize,
    name: &str,
) -> Result<(), String> {
    let err = draw_err(name);
    let y_lo = chart.y_range().start;
    let bar_w = size.bar_w;
    let whisker = BLACK.stroke_width(2);
    for (s, color, x0) in bars.marks() {
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
                    Circle::new((mid, s.median), size.dot_r, color.filled()),
                    Circle::new((mid, s.median), size.dot_r, BLACK.stroke_width(1)),
                ])
                .map_err(&err)?;
        }
    }
    Ok(())
}

/// The median over each mark, drawn last so no mark covers one: on the
/// whisker just above a dot when there is room, else above the whisker.
fn draw_value_labels(
    bars: &Bars,
    root: &Area<'_>,
    chart: &Chart<'_, '_>,
    size: &MarkSize,
    name: &str,
) -> Result<(), String> {
    let err = draw_err(name);
    let label_h = VALUE_PX as i32 + 4;
    for (s, _, x0) in bars.marks() {
        let mid = x0 + size.bar_w / 2.0;
        let text = (bars.fmt)(s.median);
        let (px, dot_y) = chart.backend_coord(&(mid, s.median));
        let (_, max_y) = chart.backend_coord(&(mid, s.max));
        let bottom = dot_y - size.dot_r - 3;
        if bars.mark == Mark::Dot && bottom - max_y >= label_h + 4 {
            // On a white patch, so the whisker does not cross the text.
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
            root.draw(&Text::new(
                text,
                (px, max_y - 5),
                font(VALUE_PX).pos(Pos::new(HPos::Center, VPos::Bottom)),
            ))
            .map_err(&err)?;
        }
    }
    Ok(())
}
