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
//! * the keel-rudp benchmark's line charts (`rudp-p99`, `rudp-bulk`,
//!   `rudp-scale`): a value against loss % or connections on a linear x
//!   axis with a tick at each measured value, one colour per series (the
//!   protocol, and whatever else of the configuration varies) named in a
//!   legend; a median dot per point with min–max whiskers over the seeds,
//!   the medians joined by a line; hollow when some seeds failed. The
//!   latency and bulk charts' y axis turns logarithmic when their values
//!   span more than 10× (so no line is squashed onto zero); the scale
//!   chart's stays linear.
//! * the RTT distribution (`rtt-cdf`): every summarised configuration's
//!   recorded percentiles as a CDF, latency on x (log when spread), the
//!   percentile on a nines scale on y (see `cdf`).
//! * one IO shape only (udp-limits): the throughput and p99 charts put the
//!   configurations on x instead of one lone "by IO model" position.
//!
//! Where things live: `bars` (throughput and p99), `loss`, `lines` and
//! `cdf` draw the charts, `rudp` says what the line charts show; `axes` (the
//! axes, their ticks and the one mesh style), `frame` (title, subtitle,
//! legend), `dims` (what subtitles and legends name) and `style` (sizes,
//! fonts, colours, text widths) are what they share. This module is the
//! entry points; no submodule uses it.

mod axes;
mod bars;
mod cdf;
mod dims;
mod frame;
mod lines;
mod loss;
mod peers;
mod rudp;
mod style;

use bars::{Bars, Mark, Metric};
pub(super) use peers::peers_svgs;
use rudp::{scaled, Spec};

use super::rudp::{trim_number, Case, RudpKey, LINK, LOSS, PAYLOAD, PROTOCOL, RATE, SERVER_LOSS};
use super::rudp::{CLIENTS, IO, TRANSFER, WINDOW};
use super::summary::Report;

/// Name of the throughput chart.
pub(super) const THROUGHPUT_FILE: &str = "throughput.svg";
/// Name of the p99 latency chart.
pub(super) const P99_FILE: &str = "p99.svg";
/// Name of the loss chart.
pub(super) const LOSS_FILE: &str = "loss.svg";
/// Name of the keel-rudp benchmark's p99 against loss chart.
pub(super) const RUDP_P99_FILE: &str = "rudp-p99.svg";
/// Name of the bulk case's completion time against loss chart.
pub(super) const RUDP_BULK_FILE: &str = "rudp-bulk.svg";
/// Name of the scale case's server CPU against connections chart.
pub(super) const RUDP_SCALE_FILE: &str = "rudp-scale.svg";
/// Name of the RTT distribution chart.
pub(super) const RTT_CDF_FILE: &str = "rtt-cdf.svg";

/// `throughput.svg`, or `None` when no configuration was summarised.
pub(super) fn throughput_svg(report: &Report) -> Result<Option<String>, String> {
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
pub(super) fn p99_svg(report: &Report) -> Result<Option<String>, String> {
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
pub(super) fn loss_svg(report: &Report) -> Result<Option<String>, String> {
    loss::svg(report, LOSS_FILE)
}

/// The settings that name a series of a chart against loss.
const BY_LOSS: &[super::rudp::RudpDim] = &[
    PROTOCOL,
    SERVER_LOSS,
    PAYLOAD,
    CLIENTS,
    RATE,
    TRANSFER,
    WINDOW,
    IO,
    LINK,
];

/// The loss of the clients' link, %.
fn loss_x(k: &RudpKey) -> Option<f64> {
    k.link.loss_percent()
}

/// `rudp-p99.svg`: p99 latency (ms) against loss, latency case; `None`
/// when no configuration of that case has a p99.
pub(super) fn rudp_p99_svg(report: &Report) -> Result<Option<String>, String> {
    let spec = Spec {
        case: Case::Latency,
        value: |s| scaled(s.p99_us, 1e-3),
        x: loss_x,
        series: RudpKey::without_loss,
        dims: BY_LOSS,
        title: "p99 message latency against loss",
        x_desc: "loss on each direction, %",
        y_desc: "p99 latency (echo delivered), ms (lower is better)",
        x_fmt: trim_number,
        y_fmt: axes::fmt_us,
        log_when_apart: true,
    };
    spec.lines(report)
        .map(|l| lines::draw(&l, RUDP_P99_FILE))
        .transpose()
}

/// `rudp-bulk.svg`: p99 transfer completion time (ms) against loss, bulk
/// case; `None` when no bulk configuration has one.
pub(super) fn rudp_bulk_svg(report: &Report) -> Result<Option<String>, String> {
    let spec = Spec {
        case: Case::Bulk,
        value: |s| scaled(s.p99_us, 1e-3),
        x: loss_x,
        series: RudpKey::without_loss,
        dims: BY_LOSS,
        title: "Bulk: p99 transfer completion time against loss",
        x_desc: "loss on each direction, %",
        y_desc: "p99 completion time, ms (lower is better)",
        x_fmt: trim_number,
        y_fmt: axes::fmt_us,
        log_when_apart: true,
    };
    spec.lines(report)
        .map(|l| lines::draw(&l, RUDP_BULK_FILE))
        .transpose()
}

/// `rudp-scale.svg`: server CPU µs per message against connections, scale
/// case; `None` when no scale configuration has it.
pub(super) fn rudp_scale_svg(report: &Report) -> Result<Option<String>, String> {
    let spec = Spec {
        case: Case::Scale,
        value: |s| s.cpu_us_per_message,
        x: |k| k.clients.map(|c| c as f64),
        series: RudpKey::without_clients,
        dims: &[PROTOCOL, LOSS, PAYLOAD, RATE, WINDOW, IO, LINK],
        title: "Scale: server CPU per message against connections",
        x_desc: "connections (clients)",
        y_desc: "server CPU per message, µs (lower is better)",
        x_fmt: axes::fmt_rate,
        y_fmt: axes::fmt_us,
        log_when_apart: false,
    };
    spec.lines(report)
        .map(|l| lines::draw(&l, RUDP_SCALE_FILE))
        .transpose()
}

/// `rtt-cdf.svg`: each summarised configuration's RTT distribution from
/// its runs' recorded percentiles; `None` when none records two of them.
pub(super) fn rtt_cdf_svg(report: &Report) -> Result<Option<String>, String> {
    cdf::svg(report, RTT_CDF_FILE)
}
