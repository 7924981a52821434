//! The RTT distribution chart (`rtt-cdf.svg`): for each configuration
//! summarised (of the UDP echo matrix, every repetition passed; of the
//! keel-rudp benchmark, a seed passed), its RTT (completion time, for
//! bulk transfers) as a cumulative distribution.
//!
//! * Source: the records' percentiles, [`RTT_QUANTILES`] (`rtt_min_us`,
//!   `rtt_p50_us`, `rtt_p90_us`, `rtt_p95_us`, `rtt_p99_us`,
//!   `rtt_p999_us`, `rtt_max_us`), each the median over the
//!   configuration's passing runs of the run's own value (never pooled),
//!   a percentile capped at its run's max. A point the runs do not record
//!   (older lines have no min, p90 or p95) is left out. The medians are
//!   made non-decreasing and none is above the max's, so a curve never
//!   turns back and no point lies right of its max.
//! * x: latency, in µs, or in ms when the largest is 10 ms or more;
//!   logarithmic when the values span more than
//!   [`LOG_SPAN`](super::lines::LOG_SPAN)×, linear from 0 otherwise.
//! * y: the percentile, on a "nines" scale (`-log10(1 - q)`: 0, 50, 90,
//!   99 and 99.9 % evenly spaced by decade), so that the tail, where
//!   protocols differ, is not squashed against 100 %; the max (100 %,
//!   off that scale) is drawn one decade above the highest percentile,
//!   at a tick labelled `max`.
//! * One colour per configuration, named in the legend by what differs
//!   between configurations (what they share goes in the subtitle); a dot
//!   at each recorded percentile, joined by straight lines (the
//!   distribution between two recorded points is not known).

use std::ops::Range;

use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

use super::axes::{draw_axes, fmt_us, AxisText, Grid, YAxis};
use super::dims::{self, Dim};
use super::frame::{plot_on, Frame};
use super::lines::LOG_SPAN;
use super::style::{draw_err, MAX_WIDTH, PALETTE};
use crate::report::input::{HistogramFile, Run, RTT_QUANTILES};
use crate::report::rudp::{self, RudpDim, RudpKey};
use crate::report::stats::Spread;
use crate::report::summary::Report;

const PLOT_H: u32 = 440;
const X_AREA: u32 = 74;
const Y_AREA: u32 = 110;
const DOT_R: i32 = 4;

/// One configuration's distribution.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Curve {
    /// Its legend entry.
    pub(super) name: String,
    /// `(fraction, µs)` in fraction order, non-decreasing in µs.
    pub(super) points: Vec<(f64, f64)>,
    /// A dot at each point (the records' few percentiles; a histogram
    /// file's many rows are a line alone).
    pub(super) dots: bool,
}

/// The settings that name a UDP echo configuration.
const UDP_DIMS: [Dim; 8] = [
    dims::FAMILY,
    dims::PAYLOAD,
    dims::CLIENTS,
    dims::WINDOW,
    dims::WORK,
    dims::BATCH,
    dims::LANES,
    dims::IO,
];

/// The settings that name a keel-rudp benchmark configuration.
const RUDP_DIMS: [RudpDim; 10] = [
    rudp::PROTOCOL,
    rudp::LOSS,
    rudp::SERVER_LOSS,
    rudp::PAYLOAD,
    rudp::CLIENTS,
    rudp::RATE,
    rudp::TRANSFER,
    rudp::WINDOW,
    rudp::IO,
    rudp::LINK,
];

/// The distribution of `runs` (all passed): per recorded point, the median
/// over the runs; made non-decreasing and capped at the max's median.
fn points_of(runs: &[&Run]) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = RTT_QUANTILES
        .iter()
        .enumerate()
        .filter_map(|(i, (q, _))| {
            Spread::of(runs.iter().filter_map(|r| r.rtt_quantiles[i])).map(|s| (*q, s.median))
        })
        .collect();
    tidy(&mut points);
    points
}

/// Makes `points` (in fraction order) non-decreasing, none above the max
/// (the point at fraction 1, if any).
fn tidy(points: &mut [(f64, f64)]) {
    let mut floor = f64::NEG_INFINITY;
    for p in points.iter_mut() {
        p.1 = p.1.max(floor);
        floor = p.1;
    }
    if let Some(&(1.0, max)) = points.last() {
        for p in points.iter_mut() {
            p.1 = p.1.min(max);
        }
    }
}

/// A histogram file's curve: its rows in fraction order, one point per
/// fraction (the last row of each), tidied as the records' are.
fn histogram_curve(h: &HistogramFile) -> Option<Curve> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for &(q, v) in &h.points {
        match points.last_mut() {
            Some(last) if last.0 >= q => {
                if last.0 == q {
                    last.1 = v;
                }
            }
            _ => points.push((q, v)),
        }
    }
    tidy(&mut points);
    let file = std::path::Path::new(&h.name)
        .file_name()
        .map_or_else(|| h.name.clone(), |f| f.to_string_lossy().into_owned());
    (points.len() >= 2).then(|| Curve {
        name: format!("{file} (whole distribution)"),
        points,
        dots: false,
    })
}

/// The curves of the report's summarised configurations (the UDP echo
/// matrix's, then the keel-rudp benchmark's) with at least two recorded
/// points, what they all share (the subtitle), and whether one of them is
/// of bulk transfers.
pub(super) fn curves(report: &Report) -> ((Vec<Curve>, Vec<String>), bool) {
    let udp: Vec<_> = report
        .summarised()
        .map(|(g, _)| (g, points_of(&g.runs.iter().collect::<Vec<_>>())))
        .filter(|(_, p)| p.len() >= 2)
        .collect();
    let rudp: Vec<_> = report
        .rudp
        .iter()
        .map(|g| {
            let passed: Vec<&Run> = g.runs.iter().filter(|r| r.passed()).collect();
            (g, points_of(&passed))
        })
        .filter(|(_, p)| p.len() >= 2)
        .collect();
    let both = !udp.is_empty() && !rudp.is_empty();
    let bulk = rudp.iter().any(|(g, _)| g.case() == rudp::Case::Bulk);
    let mut shared = Vec::new();
    let mut curves = Vec::new();
    if !udp.is_empty() {
        let keys: Vec<_> = udp.iter().map(|(g, _)| &g.key).collect();
        let (constant, varying) = dims::split_dims(&keys, &UDP_DIMS);
        if !both {
            shared.extend(constant);
        }
        for (g, points) in udp {
            let name = if both {
                format!(
                    "UDP echo {}",
                    dims::label(&g.key, &UDP_DIMS.iter().collect::<Vec<_>>())
                )
            } else if varying.is_empty() {
                "all runs".to_string()
            } else {
                dims::label(&g.key, &varying)
            };
            curves.push(Curve {
                name,
                points,
                dots: true,
            });
        }
    }
    if !rudp.is_empty() {
        let keys: Vec<&RudpKey> = rudp.iter().map(|(g, _)| &g.key).collect();
        let (constant, varying) = rudp::split_dims(&keys, &RUDP_DIMS);
        if !both {
            shared.extend(constant);
        }
        for (g, points) in rudp {
            let name = if both {
                rudp::dims_label(&g.key, &RUDP_DIMS.iter().collect::<Vec<_>>())
            } else if varying.is_empty() {
                "all runs".to_string()
            } else {
                rudp::dims_label(&g.key, &varying)
            };
            curves.push(Curve {
                name,
                points,
                dots: true,
            });
        }
    }
    curves.extend(report.histograms.iter().filter_map(histogram_curve));
    ((curves, shared), bulk)
}

/// Where fraction `q` sits on the nines scale; `top` for the max.
fn nines(q: f64, top: f64) -> f64 {
    if q >= 1.0 {
        top
    } else {
        -(1.0 - q).log10()
    }
}

/// The percentile of a recorded fraction in words: `50`, `99.9`.
fn percent_label(q: f64) -> String {
    match q {
        0.0 => "0 (min)".to_string(),
        1.0 => "max".to_string(),
        q => {
            let s = format!("{:.6}", q * 100.0);
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// The y axis: the nines scale, a tick at each recorded fraction.
#[derive(Clone, Debug, PartialEq)]
struct Nines {
    /// `(position, label)`.
    ticks: Vec<(f64, String)>,
    top: f64,
}

impl Nines {
    /// The axis of `curves`: its top one decade above the highest
    /// percentile below 100 %; a tick at each of the records' percentiles
    /// (and each further decade, 99.99 %…) below the top, at 0 when a
    /// curve starts there, and at the max.
    fn of(curves: &[Curve]) -> Nines {
        let qs = || curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
        let top = qs()
            .filter(|&q| q < 1.0)
            .map(|q| nines(q, 0.0))
            .fold(0.0, f64::max);
        // -log10(1 - 0.999) is 2.9999999999999996: a decade above it is 4.
        let top = (top + 1e-9).floor() + 1.0;
        let mut fractions: Vec<f64> = RTT_QUANTILES
            .iter()
            .map(|(q, _)| *q)
            .filter(|&q| q > 0.0 && q < 1.0)
            .collect();
        fractions.extend(
            (4..)
                .map(|k| 1.0 - 10f64.powi(-k))
                .take_while(|&q| nines(q, 0.0) < top - 0.5),
        );
        fractions.retain(|&q| nines(q, 0.0) < top - 0.5);
        if qs().any(|q| q == 0.0) {
            fractions.insert(0, 0.0);
        }
        fractions.push(1.0);
        Nines {
            ticks: fractions
                .iter()
                .map(|&q| (nines(q, top), percent_label(q)))
                .collect(),
            top,
        }
    }

    fn label(&self, v: f64) -> String {
        self.ticks
            .iter()
            .find(|(p, _)| (p - v).abs() < 1e-9)
            .map_or_else(String::new, |(_, l)| l.clone())
    }
}

impl Ranged for Nines {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let Range { start, end } = self.range();
        let t = (value - start) / (end - start);
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.iter().map(|t| t.0).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        -0.12..self.top + 0.12
    }
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<YAxis, Nines>>;

/// `rtt-cdf.svg`, or `None` when no summarised configuration records two
/// points of its distribution. `name` (the file) names it in errors.
pub(super) fn svg(report: &Report, name: &str) -> Result<Option<String>, String> {
    let ((curves, shared), bulk) = curves(report);
    if curves.is_empty() {
        return Ok(None);
    }
    let err = draw_err(name);
    let hi = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let (scale, unit) = if hi >= 10_000.0 {
        (1e-3, "ms")
    } else {
        (1.0, "µs")
    };
    let lo = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .fold(f64::INFINITY, f64::min);
    let log = lo > 0.0 && hi / lo > LOG_SPAN;
    let x = if log {
        YAxis::log(lo * scale, hi * scale)
    } else {
        YAxis::linear(hi * scale)
    };
    let x_desc = format!(
        "RTT{}, {unit}{} (left is better)",
        if bulk {
            " (of a bulk transfer: its completion time)"
        } else {
            ""
        },
        if log { ", log scale" } else { "" }
    );
    let y = Nines::of(&curves);
    let mut subtitle = vec![
        "dots: the runs' recorded percentiles (min, p50, p90, p95, p99, p99.9, max), \
         each the median over a configuration's passing runs, joined by straight lines"
            .to_string(),
        "y: percentile, each decade of nines evenly spaced; max one decade above".to_string(),
        if curves.iter().any(|c| !c.dots) {
            "line without dots: a run's --histogram file, its whole distribution".to_string()
        } else {
            String::new()
        },
        shared.join(" · "),
    ];
    subtitle.retain(|s| !s.is_empty());
    let names: Vec<&str> = curves.iter().map(|c| c.name.as_str()).collect();
    let frame = Frame::new(
        "RTT distribution by configuration",
        &subtitle,
        &names,
        MAX_WIDTH,
    );
    let height = frame.page_height(PLOT_H, X_AREA);
    let x_ticks = x.ticks().len();

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (MAX_WIDTH, height)).into_drawing_area();
        let body = frame.draw(&root, name)?;
        let mut chart = plot_on(&body, X_AREA, Y_AREA)
            .build_cartesian_2d(x, y.clone())
            .map_err(&err)?;
        let text = AxisText {
            x_label: &|v: &f64| fmt_us(*v),
            y_label: &|v: &f64| y.label(*v),
            x_desc: Some(&x_desc),
            y_desc: "percentile (nines scale)",
        };
        draw_axes(&mut chart, &text, Grid::Horizontal { x_ticks }, name)?;
        draw_curves(&curves, &y, scale, &mut chart, name)?;
        root.present().map_err(&err)?;
    }
    Ok(Some(svg))
}

/// Each curve: a line through its points and a dot at each.
fn draw_curves(
    curves: &[Curve],
    y: &Nines,
    scale: f64,
    chart: &mut Chart<'_, '_>,
    name: &str,
) -> Result<(), String> {
    let err = draw_err(name);
    for (j, c) in curves.iter().enumerate() {
        let color = PALETTE[j % PALETTE.len()];
        let at: Vec<(f64, f64)> = c
            .points
            .iter()
            .map(|&(q, v)| (v * scale, nines(q, y.top)))
            .collect();
        chart
            .draw_series([PathElement::new(at.clone(), color.stroke_width(2))])
            .map_err(&err)?;
        if c.dots {
            chart
                .draw_series(at.iter().map(|&p| Circle::new(p, DOT_R, color.filled())))
                .map_err(&err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// A passing keel-rudp game-tick line at `loss` %, seed `seed`, whose
    /// RTT percentiles (ms) are `at`: min, p50, p90, p95, p99, p99.9, max.
    fn tick(loss: u32, seed: u64, at: [f64; 7]) -> Value {
        let p = f64::from(loss) / 100.0;
        let mut v = json!({
            "schema_version": 1, "backend": "keel", "protocol": "rudp",
            "address_family": "ipv4", "payload_bytes": 400, "clients": 8, "window": 1,
            "io_model": "shared", "io_threads": 1, "roundtrips_per_second": 470.0,
            "ok": true, "error": null, "channel": "reliable-ordered", "rate_hz": 60,
            "impair": format!("loss={p},delay=25ms,seed={seed}"),
            "impair_server": format!("loss={p},delay=25ms,seed={}", seed + 1000),
        });
        for ((_, name), ms) in RTT_QUANTILES.iter().zip(at) {
            v[*name] = json!(ms * 1000.0);
        }
        v
    }

    /// A passing UDP echo line with `window` and percentiles (µs) `at`,
    /// without min, p90 and p95 (older lines).
    fn echo(window: u64, at: [f64; 4]) -> Value {
        json!({
            "schema_version": 1, "backend": "keel", "protocol": "udp",
            "address_family": "ipv4", "payload_bytes": 1024, "clients": 16,
            "window": window, "io_model": "shared", "io_threads": 1, "server_io_lanes": 1,
            "batch": 64, "handler_work": 0, "roundtrips_per_second": 100_000.0,
            "ok": true, "error": null, "rtt_p50_us": at[0], "rtt_p99_us": at[1],
            "rtt_p999_us": at[2], "rtt_max_us": at[3],
        })
    }

    fn report_of(lines: &[Value]) -> Report {
        let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
        Report::from_texts([("r.jsonl", text.as_str())])
    }

    /// The curves' polylines (`stroke-width="2"`; the axes' are 1) as
    /// pixel points.
    fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
        svg.match_indices("<polyline ")
            .map(|(i, _)| &svg[i..i + svg[i..].find("/>").unwrap()])
            .filter(|e| e.contains("stroke-width=\"2\""))
            .map(|e| {
                let p = &e[e.find("points=\"").unwrap() + 8..];
                p[..p.find('"').unwrap()]
                    .split_whitespace()
                    .map(|xy| {
                        let (x, y) = xy.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    fn lines() -> Vec<Value> {
        let mut lines = Vec::new();
        for seed in 1..=3 {
            let s = seed as f64;
            lines.push(tick(0, seed, [5.0, 51.0, 53.0, 54.0, 56.0 + s, 58.0, 59.0]));
            // An older record: p99.9 (a bucket's upper edge) above the max.
            lines.push(tick(
                5,
                seed,
                [50.0, 54.0, 120.0, 130.0, 180.0, 230.0 + s, 225.0 + s],
            ));
        }
        lines.push(tick(10, 1, [50.0, 80.0, 150.0, 160.0, 220.0, 290.0, 320.0]));
        let mut failed = tick(10, 2, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1e6]);
        failed["ok"] = json!(false);
        lines.push(failed);
        lines
    }

    #[test]
    fn a_curve_per_configuration_non_decreasing_and_never_past_its_max() {
        let ((curves, shared), bulk) = curves(&report_of(&lines()));
        assert!(!bulk);
        let names: Vec<&str> = curves.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["loss 0 %", "loss 5 %", "loss 10 %"], "{shared:?}");
        assert!(shared.contains(&"keel-rudp reliable-ordered".to_string()));
        for c in &curves {
            let qs: Vec<f64> = c.points.iter().map(|p| p.0).collect();
            assert_eq!(qs, [0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0], "{}", c.name);
            assert!(c.points.windows(2).all(|w| w[0].1 <= w[1].1), "{c:?}");
        }
        // Medians over the seeds: p99 of loss 0 is 58 ms (57, 58, 59).
        assert_eq!(curves[0].points[4], (0.99, 58_000.0));
        // Loss 5: each run's p99.9 capped at its max (226, 227, 228 ms).
        assert_eq!(curves[1].points[5], (0.999, 227_000.0));
        assert_eq!(curves[1].points[6], (1.0, 227_000.0));
        // Loss 10: the failed seed (max 1,000 s) is not in the numbers.
        assert_eq!(curves[2].points[6], (1.0, 320_000.0));
    }

    #[test]
    fn the_svg_has_one_monotonic_line_per_configuration() {
        let svg = svg(&report_of(&lines()), "rtt-cdf.svg").unwrap().unwrap();
        let curves = polylines(&svg);
        assert_eq!(curves.len(), 3, "one line per configuration");
        for c in &curves {
            assert_eq!(c.len(), 7, "{c:?}");
            // Right and up (SVG y grows downwards): a CDF never turns back.
            assert!(
                c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 > w[1].1),
                "{c:?}"
            );
            // No point right of the max (the last).
            let max_x = c.last().unwrap().0;
            assert!(c.iter().all(|p| p.0 <= max_x), "{c:?}");
        }
        for text in [
            "RTT distribution by configuration",
            ">\n99.9\n<",
            ">\nmax\n<",
            ">\n0 (min)\n<",
            // 5 to 320 ms spans more than 10x: a log axis.
            "RTT, ms, log scale (left is better)",
            "loss 5 %",
        ] {
            assert!(svg.contains(text), "rtt-cdf.svg lacks {text:?}");
        }
    }

    #[test]
    fn echo_runs_without_min_p90_p95_still_make_a_curve_in_us() {
        let lines = [
            echo(1, [20.0, 40.0, 80.0, 100.0]),
            echo(8, [60.0, 90.0, 150.0, 140.0]),
        ];
        let ((curves, shared), _) = curves(&report_of(&lines));
        let names: Vec<&str> = curves.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["window 1", "window 8"], "{shared:?}");
        assert_eq!(
            curves[1].points,
            [(0.5, 60.0), (0.99, 90.0), (0.999, 140.0), (1.0, 140.0)]
        );
        let svg = svg(&report_of(&lines), "rtt-cdf.svg").unwrap().unwrap();
        assert_eq!(polylines(&svg).len(), 2);
        assert!(svg.contains("RTT, µs (left is better)"), "linear: 0 to 150");
        assert!(!svg.contains("0 (min)"));
        // Nothing to draw: no chart.
        let no_rtt = json!({"schema_version": 1, "ok": true, "roundtrips_per_second": 1.0});
        assert_eq!(svg_of(&[no_rtt]), None);
    }

    fn svg_of(lines: &[Value]) -> Option<String> {
        svg(&report_of(lines), "rtt-cdf.svg").unwrap()
    }

    #[test]
    fn a_histogram_file_is_a_curve_of_its_whole_distribution() {
        let mut rtt = crate::stats::Rtt::new();
        for us in 1..=1000u64 {
            rtt.record(std::time::Duration::from_micros(us));
        }
        let hgrm = rtt.percentile_distribution();
        let jsonl = format!("{}\n", echo(1, [500.0, 990.0, 999.0, 1000.0]));
        let report = Report::from_texts([("out/run.hgrm", hgrm.as_str()), ("r.jsonl", &jsonl)]);
        assert_eq!(report.histograms.len(), 1);
        assert!(report.unreadable.is_empty(), "{:?}", report.unreadable);
        let ((curves, _), _) = curves(&report);
        let names: Vec<&str> = curves.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["all runs", "run.hgrm (whole distribution)"]);
        let h = &curves[1];
        assert!(!h.dots);
        assert!(h.points.len() > 20, "{h:?}");
        assert_eq!(h.points[0], (0.0, 1.0));
        assert_eq!(*h.points.last().unwrap(), (1.0, 1000.0));
        assert!(h
            .points
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        let svg = svg(&report, "rtt-cdf.svg").unwrap().unwrap();
        let lines = polylines(&svg);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].len(), h.points.len());
        // Dots for the record's four percentiles only.
        let dots = svg.matches("<circle ").count();
        assert_eq!(dots, 4, "{svg}");
        for text in [">\nmax\n<", ">\n0 (min)\n<", "whole distribution"] {
            assert!(svg.contains(text), "rtt-cdf.svg lacks {text:?}");
        }
        // A histogram file alone is a report (its chart), not an error.
        let only = Report::from_texts([("run.hgrm", hgrm.as_str())]);
        assert_eq!(only.run_count(), 0);
        assert!(svg_of_report(&only).is_some());
        // A file that is not one stays JSON lines (unreadable ones).
        let bad = "       Value     Percentile\n\n  12.0 x\n";
        let r = Report::from_texts([("bad.hgrm", bad)]);
        assert!(r.histograms.is_empty());
        assert_eq!(r.unreadable.len(), 2);
    }

    fn svg_of_report(report: &Report) -> Option<String> {
        svg(report, "rtt-cdf.svg").unwrap()
    }
}
