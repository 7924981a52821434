//! Grouping and statistics: runs of the UDP echo matrix grouped by
//! [`ConfigKey`] into [`Group`]s, each summarised ([`Summary`], medians
//! [min, max] as [`Spread`]s) only when every repetition passed, and lost
//! echoes per payload × window ([`LossCell`]); runs of the keel-rudp
//! benchmark grouped apart ([`super::rudp`]); all in one [`Report`].

use std::collections::BTreeMap;

use serde_json::Value;

use super::input::{ConfigKey, HistogramFile, Run, Source, OTHER_SETTINGS};
use super::rudp::{self, RudpGroup};
use super::stats::mixed_settings;
pub(super) use super::stats::Spread;

/// The summary of a configuration whose repetitions all passed.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Summary {
    /// Runs summarised.
    pub runs: usize,
    /// `roundtrips_per_second` over runs.
    pub throughput: Spread,
    /// `payload_mib_per_second` over runs.
    pub mib_per_second: Option<Spread>,
    /// Per-run `rtt_p50_us`, over runs.
    pub p50_us: Option<Spread>,
    /// Per-run `rtt_p99_us`, over runs.
    pub p99_us: Option<Spread>,
    /// Per-run `rtt_p999_us`, over runs.
    pub p999_us: Option<Spread>,
    /// `cpu_percent` over runs.
    pub cpu_percent: Option<Spread>,
}

impl Summary {
    /// The summary of `runs`, all of which passed (so each has a
    /// throughput). `None` for no runs.
    fn of(runs: &[Run]) -> Option<Summary> {
        let spread = |f: fn(&Run) -> Option<f64>| Spread::of(runs.iter().filter_map(f));
        Some(Summary {
            runs: runs.len(),
            throughput: spread(|r| r.roundtrips_per_second)?,
            mib_per_second: spread(|r| r.payload_mib_per_second),
            p50_us: spread(|r| r.rtt_p50_us),
            p99_us: spread(|r| r.rtt_p99_us),
            p999_us: spread(|r| r.rtt_p999_us),
            cpu_percent: spread(|r| r.cpu_percent),
        })
    }
}

/// The runs of one configuration and, when all passed, their summary.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Group {
    /// The configuration.
    pub key: ConfigKey,
    /// Its runs, in input order.
    pub runs: Vec<Run>,
    /// `None` when a repetition failed: the configuration is excluded.
    pub summary: Option<Summary>,
    /// Settings outside the key on which the runs disagree, as
    /// `name: value, value`.
    pub mixed: Vec<String>,
}

impl Group {
    /// The group of `runs`, which share `key`: summarised when every run
    /// passed.
    fn of(key: ConfigKey, runs: Vec<Run>) -> Group {
        let summary = if runs.iter().all(Run::passed) {
            Summary::of(&runs)
        } else {
            None
        };
        let mixed = mixed_settings(&runs, OTHER_SETTINGS);
        Group {
            key,
            runs,
            summary,
            mixed,
        }
    }

    /// The runs that failed.
    pub(super) fn failed(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| !r.passed())
    }
}

/// Lost echoes of the runs in one payload × window cell.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LossCell {
    /// `payload_bytes`.
    pub payload_bytes: u64,
    /// `window`.
    pub window: u64,
    /// Lost echoes of each run in the cell, both phases.
    pub lost: Vec<u64>,
    /// How many of those runs failed (for any reason).
    pub failed_runs: usize,
}

impl LossCell {
    /// Median lost echoes per run.
    pub(super) fn median(&self) -> f64 {
        Spread::of(self.lost.iter().map(|&n| n as f64)).map_or(0.0, |s| s.median)
    }

    /// Most echoes lost by one run.
    pub(super) fn max(&self) -> u64 {
        self.lost.iter().copied().max().unwrap_or(0)
    }
}

/// A line that could not be read as a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unreadable {
    /// Where.
    pub source: Source,
    /// Why.
    pub reason: String,
}

/// Everything the report shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Report {
    /// The input files, as given.
    pub inputs: Vec<String>,
    /// Configurations in table order.
    pub groups: Vec<Group>,
    /// Loss cells, by payload then window.
    pub loss: Vec<LossCell>,
    /// Configurations of the keel-rudp benchmark, in key order (loss
    /// first).
    pub rudp: Vec<RudpGroup>,
    /// Lines that were not runs.
    pub unreadable: Vec<Unreadable>,
    /// Inputs that were percentile distributions (`--histogram` files),
    /// not JSON lines.
    pub histograms: Vec<HistogramFile>,
}

impl Report {
    /// Reads runs from the text of JSON-lines files, given as
    /// `(name, text)` pairs.
    pub(super) fn from_texts<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Report {
        let mut inputs = Vec::new();
        let mut runs = Vec::new();
        let mut unreadable = Vec::new();
        let mut histograms = Vec::new();
        for (name, text) in files {
            inputs.push(name.to_string());
            if let Some(h) = HistogramFile::parse(name, text) {
                histograms.push(h);
                continue;
            }
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                let source = Source {
                    file: name.to_string(),
                    line: i + 1,
                };
                let parsed = serde_json::from_str::<Value>(line)
                    .map_err(|e| format!("not JSON: {e}"))
                    .and_then(|v| Run::from_json(&v, source.clone()));
                match parsed {
                    Ok(run) => runs.push(run),
                    Err(reason) => unreadable.push(Unreadable { source, reason }),
                }
            }
        }
        let mut report = Report::from_runs(runs);
        report.inputs = inputs;
        report.unreadable = unreadable;
        report.histograms = histograms;
        report
    }

    /// Groups runs by configuration and summarises them: the UDP echo
    /// matrix's and the keel-rudp benchmark's apart.
    pub(super) fn from_runs(runs: Vec<Run>) -> Report {
        let (rudp_runs, runs): (Vec<Run>, Vec<Run>) =
            runs.into_iter().partition(|r| r.rudp.is_some());
        let loss = loss_cells(&runs);
        let mut by_key: BTreeMap<ConfigKey, Vec<Run>> = BTreeMap::new();
        for run in runs {
            by_key.entry(run.key.clone()).or_default().push(run);
        }
        Report {
            inputs: Vec::new(),
            groups: by_key
                .into_iter()
                .map(|(key, runs)| Group::of(key, runs))
                .collect(),
            loss,
            rudp: rudp::groups(rudp_runs),
            unreadable: Vec::new(),
            histograms: Vec::new(),
        }
    }

    /// Runs read, over all configurations (UDP echo matrix and keel-rudp
    /// benchmark).
    pub(super) fn run_count(&self) -> usize {
        self.udp_run_count() + self.rudp.iter().map(|g| g.runs.len()).sum::<usize>()
    }

    /// Runs of the UDP echo matrix.
    pub(super) fn udp_run_count(&self) -> usize {
        self.groups.iter().map(|g| g.runs.len()).sum()
    }

    /// Configurations with a summary, with it.
    pub(super) fn summarised(&self) -> impl Iterator<Item = (&Group, &Summary)> {
        self.groups
            .iter()
            .filter_map(|g| g.summary.as_ref().map(|s| (g, s)))
    }

    /// Configurations excluded because a repetition failed.
    pub(super) fn excluded(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| g.summary.is_none())
    }
}

/// Lost echoes per payload × window, from every run that reports them
/// (failed runs included), in payload then window order.
fn loss_cells(runs: &[Run]) -> Vec<LossCell> {
    let mut loss: BTreeMap<(u64, u64), LossCell> = BTreeMap::new();
    for run in runs {
        if let (Some(p), Some(w), Some(lost)) =
            (run.key.payload_bytes, run.key.window, run.udp_lost_messages)
        {
            let cell = loss.entry((p, w)).or_insert_with(|| LossCell {
                payload_bytes: p,
                window: w,
                lost: Vec::new(),
                failed_runs: 0,
            });
            cell.lost.push(lost);
            cell.failed_runs += usize::from(!run.passed());
        }
    }
    loss.into_values().collect()
}

/// A median of lost counts: whole unless it is a half.
pub(super) fn fmt_lost(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
