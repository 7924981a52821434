//! Line charts (the keel-rudp benchmark's): a value against a number (loss
//! %, connections), one colour per series, a median dot per point with
//! min–max whiskers over the seeds, the medians joined by a line. Series
//! are nudged apart on x so their whiskers do not hide each other; a point
//! some of whose seeds failed is a hollow dot. [`draw`] draws a [`Lines`].
//!
//! The y axis is linear from 0 unless (latency and completion times) the
//! values span more than
//! [`LOG_SPAN`]× (KCP's bulk transfers at 10 % loss take seconds where
//! keel-rudp's take tens of milliseconds): then it is logarithmic, and the
//! axis says so, so that no line is squashed onto zero (issue 24).

use plotters::coord::cartesian::Cartesian2d;
use plotters::prelude::*;

use super::axes::{draw_axes, AxisText, Grid, Through, YAxis};
use super::frame::{plot_on, Frame};
use super::style::{draw_err, MAX_WIDTH, PALETTE};
use crate::report::summary::Spread;

const PLOT_H: u32 = 420;
const X_AREA: u32 = 74;
const Y_AREA: u32 = 100;
const DOT_R: i32 = 6;

/// Largest value over smallest (both > 0) above which the y axis is
/// logarithmic.
pub(super) const LOG_SPAN: f64 = 10.0;

/// One point of a series.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Point {
    /// Where on x.
    pub(super) x: f64,
    /// Median, min and max on y.
    pub(super) y: Spread,
    /// Some seeds failed: the point is of those that passed.
    pub(super) partial: bool,
}

/// A named series of points.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Series {
    /// Its legend entry.
    pub(super) name: String,
    /// Its points, in x order.
    pub(super) points: Vec<Point>,
}

/// A line chart's words and data.
pub(super) struct Lines {
    pub(super) title: String,
    pub(super) subtitle: Vec<String>,
    pub(super) x_desc: String,
    pub(super) y_desc: String,
    /// Text of an x tick.
    pub(super) x_fmt: fn(f64) -> String,
    /// Text of a y tick.
    pub(super) y_fmt: fn(f64) -> String,
    /// Logarithmic y when the values span more than [`LOG_SPAN`]×.
    pub(super) log_when_apart: bool,
    pub(super) series: Vec<Series>,
}

impl Lines {
    fn points(&self) -> impl Iterator<Item = &Point> {
        self.series.iter().flat_map(|s| &s.points)
    }

    /// Linear from 0, or (`log_when_apart`) logarithmic when every value is
    /// above 0 and they span more than [`LOG_SPAN`]×.
    fn y_axis(&self) -> (YAxis, bool) {
        let hi = self.points().map(|p| p.y.max).fold(0.0, f64::max);
        let lo = self.points().map(|p| p.y.min).fold(f64::INFINITY, f64::min);
        if self.log_when_apart && lo > 0.0 && hi / lo > LOG_SPAN {
            (YAxis::log(lo, hi), true)
        } else {
            (YAxis::linear(hi), false)
        }
    }

    /// The y axis' words, with `log scale` on a log axis: `p99 completion
    /// time, ms, log scale (lower is better)`.
    fn y_desc(&self, log: bool) -> String {
        if !log {
            return self.y_desc.clone();
        }
        match self.y_desc.find(" (") {
            Some(i) => format!("{}, log scale{}", &self.y_desc[..i], &self.y_desc[i..]),
            None => format!("{}, log scale", self.y_desc),
        }
    }
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Through, YAxis>>;

/// Draws `lines` as an SVG document; `name` (the file) names it in errors.
pub(super) fn draw(lines: &Lines, name: &str) -> Result<String, String> {
    let err = draw_err(name);
    let width = MAX_WIDTH;
    let names: Vec<&str> = lines.series.iter().map(|s| s.name.as_str()).collect();
    let frame = Frame::new(&lines.title, &lines.subtitle, &names, width);
    let height = frame.page_height(PLOT_H, X_AREA);
    let xs: Vec<f64> = lines.points().map(|p| p.x).collect();
    let x = Through::of(&xs);
    let (y, log) = lines.y_axis();
    let y_desc = lines.y_desc(log);
    let x_ticks = x.ticks().len();

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        let body = frame.draw(&root, name)?;
        let mut chart = plot_on(&body, X_AREA, Y_AREA)
            .build_cartesian_2d(x, y)
            .map_err(&err)?;
        let text = AxisText {
            x_label: &|v: &f64| (lines.x_fmt)(*v),
            y_label: &|v: &f64| (lines.y_fmt)(*v),
            x_desc: Some(&lines.x_desc),
            y_desc: &y_desc,
        };
        draw_axes(&mut chart, &text, Grid::Horizontal { x_ticks }, name)?;
        draw_series(lines, &mut chart, name)?;
        root.present().map_err(&err)?;
    }
    Ok(svg)
}

/// Each series' line, whiskers and dots, nudged apart on x.
fn draw_series(lines: &Lines, chart: &mut Chart<'_, '_>, name: &str) -> Result<(), String> {
    let err = draw_err(name);
    let span = {
        let r = chart.x_range();
        r.end - r.start
    };
    let n = lines.series.len() as f64;
    let nudge = span * 0.012;
    let cap = span * 0.006;
    for (j, s) in lines.series.iter().enumerate() {
        let color = PALETTE[j % PALETTE.len()];
        let dx = (j as f64 - (n - 1.0) / 2.0) * nudge;
        let mut points: Vec<&Point> = s.points.iter().collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        chart
            .draw_series([PathElement::new(
                points
                    .iter()
                    .map(|p| (p.x + dx, p.y.median))
                    .collect::<Vec<_>>(),
                color.stroke_width(2),
            )])
            .map_err(&err)?;
        let whisker = color.stroke_width(2);
        for p in &points {
            let x = p.x + dx;
            chart
                .draw_series([
                    PathElement::new([(x, p.y.min), (x, p.y.max)], whisker),
                    PathElement::new([(x - cap, p.y.min), (x + cap, p.y.min)], whisker),
                    PathElement::new([(x - cap, p.y.max), (x + cap, p.y.max)], whisker),
                ])
                .map_err(&err)?;
        }
        for p in &points {
            let at = (p.x + dx, p.y.median);
            let (fill, edge) = if p.partial {
                (WHITE.filled(), color.stroke_width(2))
            } else {
                (color.filled(), BLACK.stroke_width(1))
            };
            chart
                .draw_series([Circle::new(at, DOT_R, fill), Circle::new(at, DOT_R, edge)])
                .map_err(&err)?;
        }
    }
    Ok(())
}
