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
//!
//! Where things live: `bars` (throughput and p99) and `loss` draw the
//! charts; `axes` (the axes, their ticks and the one mesh style),
//! `frame` (title, subtitle, legend), `dims` (what subtitles and
//! legends name) and `style` (sizes, fonts, colours, text widths) are
//! what they share. This module is the entry points; no submodule uses it.

mod axes;
mod bars;
mod dims;
mod frame;
mod loss;
mod style;

use bars::{Bars, Mark, Metric};

use super::summary::Report;

pub use style::{MAX_WIDTH, MIN_TEXT_PX};

/// Name of the throughput chart.
pub const THROUGHPUT_FILE: &str = "throughput.svg";
/// Name of the p99 latency chart.
pub const P99_FILE: &str = "p99.svg";
/// Name of the loss chart.
pub const LOSS_FILE: &str = "loss.svg";

/// `throughput.svg`, or `None` when no configuration was summarised.
pub fn throughput_svg(report: &Report) -> Result<Option<String>, String> {
    let metric = Metric {
        value: |s| Some(s.throughput),
        title: "UDP round trips per second by IO model",
        y_desc: "round trips per second (higher is better)",
        fmt: axes::fmt_rate,
        mark: Mark::Bar,
    };
    Bars::of(report, &metric)
        .map(|b| bars::draw(&b, THROUGHPUT_FILE))
        .transpose()
}

/// `p99.svg`, or `None` when no summarised configuration has a p99.
pub fn p99_svg(report: &Report) -> Result<Option<String>, String> {
    let metric = Metric {
        value: |s| s.p99_us,
        title: "UDP p99 round-trip time by IO model",
        y_desc: "p99 RTT, µs, log scale (lower is better)",
        fmt: axes::fmt_us,
        mark: Mark::Dot,
    };
    Bars::of(report, &metric)
        .map(|b| bars::draw(&b, P99_FILE))
        .transpose()
}

/// `loss.svg`, or `None` when no run has payload, window and
/// `udp_lost_messages`.
pub fn loss_svg(report: &Report) -> Result<Option<String>, String> {
    loss::svg(report, LOSS_FILE)
}
