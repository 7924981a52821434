//! What the keel-rudp benchmark's charts show: for one [`Case`], a value
//! of each configuration's [`RudpSummary`] against a number of its key,
//! one series per everything else (the protocol, and whatever else of the
//! configuration varies), laid out as [`Lines`] for `lines` to draw.

use std::collections::{BTreeMap, BTreeSet};

use super::lines::{Lines, Point, Series};
use crate::report::rudp::{dims_label, split_dims, Case, RudpDim, RudpKey, RudpSummary};
use crate::report::summary::{Report, Spread};

/// A line chart of the keel-rudp benchmark.
pub(super) struct Spec {
    /// The case whose configurations it shows.
    pub(super) case: Case,
    /// The y value of a configuration, in the chart's unit.
    pub(super) value: fn(&RudpSummary) -> Option<Spread>,
    /// The x value of a configuration.
    pub(super) x: fn(&RudpKey) -> Option<f64>,
    /// The configuration with its x setting left out: a series.
    pub(super) series: fn(&RudpKey) -> RudpKey,
    /// The settings that name a series (when they vary) or go in the
    /// subtitle (when they do not).
    pub(super) dims: &'static [RudpDim],
    pub(super) title: &'static str,
    pub(super) x_desc: &'static str,
    pub(super) y_desc: &'static str,
    pub(super) x_fmt: fn(f64) -> String,
    pub(super) y_fmt: fn(f64) -> String,
    /// A log y axis when the values span more than
    /// [`LOG_SPAN`](super::lines::LOG_SPAN)× (latency and completion
    /// times); false keeps it linear from 0 (CPU per message).
    pub(super) log_when_apart: bool,
}

/// `spread` scaled by `k` (µs to ms).
pub(super) fn scaled(spread: Option<Spread>, k: f64) -> Option<Spread> {
    spread.map(|s| Spread {
        median: s.median * k,
        min: s.min * k,
        max: s.max * k,
    })
}

impl Spec {
    /// The chart of the report's configurations of this case; `None` when
    /// none has both the value and the x.
    pub(super) fn lines(&self, report: &Report) -> Option<Lines> {
        let mut by_series: BTreeMap<RudpKey, Vec<Point>> = BTreeMap::new();
        let mut seeds = BTreeSet::new();
        let mut partial = false;
        for g in report.rudp.iter().filter(|g| g.case() == self.case) {
            let (Some(y), Some(x)) = ((self.value)(&g.summary), (self.x)(&g.key)) else {
                continue;
            };
            let point = Point {
                x,
                y,
                partial: g.summary.runs_ok < g.runs.len(),
            };
            partial |= point.partial;
            seeds.insert(g.runs.len());
            by_series
                .entry((self.series)(&g.key))
                .or_default()
                .push(point);
        }
        if by_series.is_empty() {
            return None;
        }
        let keys: Vec<&RudpKey> = by_series.keys().collect();
        let (constant, varying) = split_dims(&keys, self.dims);
        let series = by_series
            .iter()
            .map(|(k, points)| Series {
                name: if varying.is_empty() {
                    "all runs".to_string()
                } else {
                    dims_label(k, &varying)
                },
                points: points.clone(),
            })
            .collect();
        let over = match seeds.iter().collect::<Vec<_>>().as_slice() {
            [1] => "dot: one run".to_string(),
            [n] => format!("dot: median over {n} runs (seeds); whiskers: min–max"),
            _ => "dot: median over the runs (seeds); whiskers: min–max".to_string(),
        };
        let mut subtitle = vec![over, constant.join(" · ")];
        if partial {
            subtitle.push(
                "hollow dot: some runs failed; the point is of those that passed".to_string(),
            );
        }
        subtitle.retain(|s| !s.is_empty());
        Some(Lines {
            title: self.title.to_string(),
            subtitle,
            x_desc: self.x_desc.to_string(),
            y_desc: self.y_desc.to_string(),
            x_fmt: self.x_fmt,
            y_fmt: self.y_fmt,
            log_when_apart: self.log_when_apart,
            series,
        })
    }
}
