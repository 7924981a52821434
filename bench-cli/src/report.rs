//! `keel-bench report FILES... --out DIR`: summarise result files into a
//! Markdown table and SVG charts.
//!
//! # Input
//!
//! Each file holds JSON lines: one [`RunReport`](crate::output::RunReport)
//! object per run, as `keel-bench` prints it, optionally augmented by
//! `scripts/matrix.sh` with `command`, `repetition`, `requested` (the
//! settings it asked for, under their JSON names) and `matrix_errors` (its
//! own validation failures). Blank lines are skipped. A line that is not a
//! JSON object is listed under "Unreadable lines" and otherwise ignored.
//! Fields are read leniently: a missing field, a `null` or a value of the
//! wrong type counts as unknown, never as 0.
//!
//! # Grouping and statistics
//!
//! Runs are grouped by configuration, the [`ConfigKey`]: `protocol`,
//! `address_family`, `payload_bytes`, `clients`, `window`, `handler_work`,
//! `batch`, `server_io_lanes`, `io_model`, `io_threads`. A key field the
//! run did not echo (`null`, e.g. the line of a run whose arguments were
//! rejected) falls back to the same name in `requested`, so a failed run
//! still lands in the configuration that was asked for.
//!
//! A run passes when `ok` is `true`, `matrix_errors` is empty or absent and
//! `roundtrips_per_second` is a number. A configuration is summarised only
//! when every one of its repetitions passed; otherwise it is excluded from
//! the table and throughput/latency charts and listed with each failed
//! repetition's errors. For a summarised configuration:
//!
//! * throughput: median [min, max] of `roundtrips_per_second` over runs;
//! * latency: for each percentile, the median of the runs' own percentiles
//!   (percentiles of different runs are never pooled or averaged into one
//!   distribution);
//! * CPU: median of `cpu_percent` (100 = one core).
//!
//! # Output (in `DIR`, created if needed)
//!
//! * `report.md`: the table, excluded configurations with their errors,
//!   loss per payload × window, unreadable lines, and links to the charts;
//! * `throughput.svg`: round trips per second by IO model (median bars,
//!   min–max whiskers): on the x axis, the thread (shared) or context
//!   (sharded) count, grouped by IO model; one bar colour per series
//!   (server lanes and whatever else of the workload varies), named in a
//!   legend;
//! * `p99.svg`: p99 RTT, the same layout with median dots on a log axis, so
//!   one slow configuration does not flatten the others;
//! * `loss.svg`: lost echoes per run (`udp_lost_messages`) for each payload ×
//!   window cell, from every run that reports it, failed runs included (loss
//!   fails a run, and the chart is there to show where it starts). It is
//!   written whenever some run has `payload_bytes`, `window` and
//!   `udp_lost_messages`; when nothing was lost it says "no loss" rather
//!   than being left out, so "no chart" never has to be read as "no loss".
//!
//! The charts are sized to be read in a docs page about 900 px wide: at
//! most 960 px wide whatever the number of configurations, no text under
//! 16 px.
//!
//! The throughput and p99 charts are written when at least one
//! configuration is summarised. A chart this run does not write is removed
//! from `DIR` if an earlier report left it there, so the directory never
//! mixes two reports.

mod charts;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::flags::ReportConfig;

/// Name of the Markdown file written in the output directory.
pub const MARKDOWN_FILE: &str = "report.md";
/// Name of the throughput chart.
pub const THROUGHPUT_FILE: &str = "throughput.svg";
/// Name of the p99 latency chart.
pub const P99_FILE: &str = "p99.svg";
/// Name of the loss chart.
pub const LOSS_FILE: &str = "loss.svg";

/// Where a run came from: file name and 1-based line number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Source {
    /// The input file as given on the command line.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The settings that make two runs the same configuration. `None` = the run
/// did not say (and `requested` did not either).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConfigKey {
    /// `protocol`.
    pub protocol: Option<String>,
    /// `address_family`.
    pub address_family: Option<String>,
    /// `payload_bytes`.
    pub payload_bytes: Option<u64>,
    /// `clients`.
    pub clients: Option<u64>,
    /// `window`.
    pub window: Option<u64>,
    /// `handler_work`.
    pub handler_work: Option<u64>,
    /// `batch`.
    pub batch: Option<u64>,
    /// `server_io_lanes`.
    pub server_io_lanes: Option<u64>,
    /// `io_model`.
    pub io_model: Option<String>,
    /// `io_threads`.
    pub io_threads: Option<u64>,
}

/// Sort rank of an IO model: shared before sharded, then anything else.
fn io_model_rank(model: Option<&str>) -> u8 {
    match model {
        Some("shared") => 0,
        Some("sharded") => 1,
        Some(_) => 2,
        None => 3,
    }
}

impl ConfigKey {
    /// The order of the table: workload first (family, payload, clients,
    /// window, work, batch, lanes), then IO model (shared before sharded)
    /// and threads.
    #[allow(clippy::type_complexity)]
    fn sort_tuple(
        &self,
    ) -> (
        (&Option<String>, &Option<String>),
        (
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        ),
        Option<u64>,
        (u8, &Option<String>),
        Option<u64>,
    ) {
        (
            (&self.protocol, &self.address_family),
            (
                self.payload_bytes,
                self.clients,
                self.window,
                self.handler_work,
                self.batch,
            ),
            self.server_io_lanes,
            (io_model_rank(self.io_model.as_deref()), &self.io_model),
            self.io_threads,
        )
    }

    /// The IO shape in words: `shared: 1 context, 4 threads` or
    /// `sharded: 4 contexts, 1 thread each`.
    pub fn io_label(&self) -> String {
        let n = self.io_threads;
        match self.io_model.as_deref() {
            Some("shared") => format!("shared: 1 context, {}", count(n, "thread")),
            Some("sharded") => format!("sharded: {}, 1 thread each", count(n, "context")),
            Some(other) => format!("{other}: {}", count(n, "thread")),
            None => format!("?: {}", count(n, "thread")),
        }
    }

    /// Server lanes in words: `1 server lane`, `4 server lanes`.
    pub fn lanes_label(&self) -> String {
        count(self.server_io_lanes, "server lane")
    }
}

/// `1 thread`, `4 threads`, `? threads`.
fn count(n: Option<u64>, what: &str) -> String {
    match n {
        Some(1) => format!("1 {what}"),
        Some(n) => format!("{n} {what}s"),
        None => format!("? {what}s"),
    }
}

impl PartialOrd for ConfigKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ConfigKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sort_tuple().cmp(&other.sort_tuple())
    }
}

/// `Some(v)` as text, `?` for unknown.
fn opt<T: fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "?".to_string(), |v| v.to_string())
}

impl fmt::Display for ConfigKey {
    /// One line: `udp/ipv4, payload 1024 B, 16 clients, window 1, work 0,
    /// batch 64, 1 server lane, shared: 1 context, 1 thread`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}, payload {} B, {}, window {}, work {}, batch {}, {}, {}",
            opt(&self.protocol),
            opt(&self.address_family),
            opt(&self.payload_bytes),
            count(self.clients, "client"),
            opt(&self.window),
            opt(&self.handler_work),
            opt(&self.batch),
            self.lanes_label(),
            self.io_label(),
        )
    }
}

/// One run, read from one JSON line.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// Where the line was.
    pub source: Source,
    /// Its configuration.
    pub key: ConfigKey,
    /// `repetition` (matrix.sh), 1-based.
    pub repetition: Option<u64>,
    /// `command` (matrix.sh): the command line that produced the run.
    pub command: Option<String>,
    /// Why the run does not count; empty when it passed.
    pub errors: Vec<String>,
    /// `roundtrips_per_second`.
    pub roundtrips_per_second: Option<f64>,
    /// `payload_mib_per_second`.
    pub payload_mib_per_second: Option<f64>,
    /// `rtt_p50_us`.
    pub rtt_p50_us: Option<f64>,
    /// `rtt_p99_us`.
    pub rtt_p99_us: Option<f64>,
    /// `rtt_p999_us`.
    pub rtt_p999_us: Option<f64>,
    /// `cpu_percent`.
    pub cpu_percent: Option<f64>,
    /// `udp_lost_messages`.
    pub udp_lost_messages: Option<u64>,
    /// Settings outside the key (`requested_seconds`, `warmup_seconds`,
    /// …) as JSON text, to flag configurations that mix them.
    pub other_settings: BTreeMap<&'static str, String>,
}

/// Settings outside [`ConfigKey`] that should still agree within a group.
const OTHER_SETTINGS: &[&str] = &[
    "backend",
    "role",
    "connect",
    "requested_seconds",
    "warmup_seconds",
    "udp_server_receive_buffer_requested_bytes",
    "loss_timeout_ms",
];

fn finite(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|x| x.is_finite())
}

impl Run {
    /// Reads one run from a parsed JSON line; `Err` if it is not an object.
    pub fn from_json(value: &Value, source: Source) -> Result<Run, String> {
        let Value::Object(obj) = value else {
            return Err(format!("expected a JSON object, got {}", kind_of(value)));
        };
        let requested = obj.get("requested").and_then(Value::as_object);
        // The echoed value, else the requested one.
        let field = |name: &str| -> Option<&Value> {
            match obj.get(name) {
                Some(Value::Null) | None => requested.and_then(|r| r.get(name)),
                Some(v) => Some(v),
            }
        };
        let text = |name: &str| field(name).and_then(Value::as_str).map(str::to_owned);
        let int = |name: &str| field(name).and_then(Value::as_u64);
        let key = ConfigKey {
            protocol: text("protocol"),
            address_family: text("address_family"),
            payload_bytes: int("payload_bytes"),
            clients: int("clients"),
            window: int("window"),
            handler_work: int("handler_work"),
            batch: int("batch"),
            server_io_lanes: int("server_io_lanes"),
            io_model: text("io_model"),
            io_threads: int("io_threads"),
        };

        let mut errors = Vec::new();
        let error_text = obj.get("error").and_then(Value::as_str);
        match obj.get("ok") {
            Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => errors.push(
                error_text
                    .unwrap_or("ok is false (no error given)")
                    .to_string(),
            ),
            _ => errors.push(match error_text {
                Some(e) => format!("ok missing or not a boolean; error: {e}"),
                None => "ok missing or not a boolean".to_string(),
            }),
        }
        match obj.get("matrix_errors") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for e in list {
                    let e = e.as_str().map_or_else(|| e.to_string(), str::to_owned);
                    errors.push(format!("matrix.sh: {e}"));
                }
            }
            Some(other) => errors.push(format!("matrix.sh: {other}")),
        }
        let roundtrips_per_second = finite(obj.get("roundtrips_per_second"));
        if errors.is_empty() && roundtrips_per_second.is_none() {
            errors.push("roundtrips_per_second missing or not a number".to_string());
        }

        let other_settings = OTHER_SETTINGS
            .iter()
            .filter_map(|&name| field(name).map(|v| (name, v.to_string())))
            .collect();

        Ok(Run {
            source,
            key,
            repetition: obj.get("repetition").and_then(Value::as_u64),
            command: obj
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_owned),
            errors,
            roundtrips_per_second,
            payload_mib_per_second: finite(obj.get("payload_mib_per_second")),
            rtt_p50_us: finite(obj.get("rtt_p50_us")),
            rtt_p99_us: finite(obj.get("rtt_p99_us")),
            rtt_p999_us: finite(obj.get("rtt_p999_us")),
            cpu_percent: finite(obj.get("cpu_percent")),
            udp_lost_messages: obj.get("udp_lost_messages").and_then(Value::as_u64),
            other_settings,
        })
    }

    /// True when the run counts towards its configuration's summary.
    pub fn passed(&self) -> bool {
        self.errors.is_empty()
    }

    /// `repetition N (file:line)` or `file:line`.
    pub fn label(&self) -> String {
        match self.repetition {
            Some(r) => format!("repetition {r} ({})", self.source),
            None => self.source.to_string(),
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Median, minimum and maximum of some values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`, `None` if there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// The summary of a configuration whose repetitions all passed.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
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
pub struct Group {
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
    /// The runs that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| !r.passed())
    }
}

/// Lost echoes of the runs in one payload × window cell.
#[derive(Clone, Debug, PartialEq)]
pub struct LossCell {
    /// `payload_bytes`.
    pub payload_bytes: u64,
    /// `window`.
    pub window: u64,
    /// `udp_lost_messages` of each run in the cell.
    pub lost: Vec<u64>,
    /// How many of those runs failed (for any reason).
    pub failed_runs: usize,
}

impl LossCell {
    /// Median lost echoes per run.
    pub fn median(&self) -> f64 {
        Spread::of(self.lost.iter().map(|&n| n as f64)).map_or(0.0, |s| s.median)
    }

    /// Most echoes lost by one run.
    pub fn max(&self) -> u64 {
        self.lost.iter().copied().max().unwrap_or(0)
    }
}

/// A line that could not be read as a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// Where.
    pub source: Source,
    /// Why.
    pub reason: String,
}

/// Everything the report shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The input files, as given.
    pub inputs: Vec<String>,
    /// Configurations in table order.
    pub groups: Vec<Group>,
    /// Loss cells, by payload then window.
    pub loss: Vec<LossCell>,
    /// Lines that were not runs.
    pub unreadable: Vec<Unreadable>,
}

impl Report {
    /// Reads runs from the text of JSON-lines files, given as
    /// `(name, text)` pairs.
    pub fn from_texts<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Report {
        let mut inputs = Vec::new();
        let mut runs = Vec::new();
        let mut unreadable = Vec::new();
        for (name, text) in files {
            inputs.push(name.to_string());
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
        report
    }

    /// Groups runs by configuration and summarises them.
    pub fn from_runs(runs: Vec<Run>) -> Report {
        let mut loss: BTreeMap<(u64, u64), LossCell> = BTreeMap::new();
        for run in &runs {
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

        let mut by_key: BTreeMap<ConfigKey, Vec<Run>> = BTreeMap::new();
        for run in runs {
            by_key.entry(run.key.clone()).or_default().push(run);
        }
        let groups = by_key
            .into_iter()
            .map(|(key, runs)| {
                let summary = if runs.iter().all(Run::passed) {
                    Summary::of(&runs)
                } else {
                    None
                };
                let mixed = OTHER_SETTINGS
                    .iter()
                    .filter_map(|name| {
                        let values: BTreeSet<&str> = runs
                            .iter()
                            .map(|r| r.other_settings.get(name).map_or("absent", String::as_str))
                            .collect();
                        (values.len() > 1).then(|| {
                            format!(
                                "{name}: {}",
                                values.into_iter().collect::<Vec<_>>().join(", ")
                            )
                        })
                    })
                    .collect();
                Group {
                    key,
                    runs,
                    summary,
                    mixed,
                }
            })
            .collect();
        Report {
            inputs: Vec::new(),
            groups,
            loss: loss.into_values().collect(),
            unreadable: Vec::new(),
        }
    }

    /// Runs read, over all configurations.
    pub fn run_count(&self) -> usize {
        self.groups.iter().map(|g| g.runs.len()).sum()
    }

    /// Configurations with a summary, with it.
    pub fn summarised(&self) -> impl Iterator<Item = (&Group, &Summary)> {
        self.groups
            .iter()
            .filter_map(|g| g.summary.as_ref().map(|s| (g, s)))
    }

    /// Configurations excluded because a repetition failed.
    pub fn excluded(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| g.summary.is_none())
    }

    /// The Markdown document; `charts` are the chart files written beside
    /// it, linked by name.
    pub fn markdown(&self, charts: &[&str]) -> String {
        markdown(self, charts)
    }
}

/// What [`write()`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Every file written, the Markdown first.
    pub files: Vec<PathBuf>,
    /// Runs read.
    pub runs: usize,
    /// Configurations summarised.
    pub summarised: usize,
    /// Configurations excluded.
    pub excluded: usize,
    /// Unreadable lines.
    pub unreadable: usize,
}

/// Reads `cfg.inputs`, writes the report into `cfg.out`. `Err` names the
/// file that could not be read or written, or says that the inputs held no
/// line at all.
pub fn write(cfg: &ReportConfig) -> Result<Written, String> {
    let mut texts = Vec::new();
    for path in &cfg.inputs {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("report: cannot read {}: {e}", path.display()))?;
        texts.push((path.display().to_string(), text));
    }
    let report = Report::from_texts(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())));
    if report.run_count() == 0 && report.unreadable.is_empty() {
        return Err(format!(
            "report: no result lines in {}",
            texts
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let out = &cfg.out;
    std::fs::create_dir_all(out)
        .map_err(|e| format!("report: cannot create {}: {e}", out.display()))?;
    let write_file = |name: &str, text: &str| -> Result<PathBuf, String> {
        let path = out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| format!("report: cannot write {}: {e}", path.display()))?;
        Ok(path)
    };

    let charts = [
        (THROUGHPUT_FILE, charts::throughput_svg(&report)?),
        (P99_FILE, charts::p99_svg(&report)?),
        (LOSS_FILE, charts::loss_svg(&report)?),
    ];
    let mut files = Vec::new();
    let mut linked = Vec::new();
    for (name, svg) in &charts {
        match svg {
            Some(svg) => {
                files.push(write_file(name, svg)?);
                linked.push(*name);
            }
            None => remove_stale(&out.join(name))?,
        }
    }
    files.insert(0, write_file(MARKDOWN_FILE, &report.markdown(&linked))?);
    Ok(Written {
        files,
        runs: report.run_count(),
        summarised: report.summarised().count(),
        excluded: report.excluded().count(),
        unreadable: report.unreadable.len(),
    })
}

fn remove_stale(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "report: cannot remove the stale {}: {e}",
            path.display()
        )),
    }
}

// ---------------------------------------------------------------- Markdown

/// Round trips per second, whole.
fn fmt_rate(v: f64) -> String {
    format!("{v:.0}")
}

/// Microseconds: 2 decimals below 10, 1 below 1000, else whole.
fn fmt_us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn fmt_opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

/// Text safe inside a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Inline code that survives backticks inside.
fn code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

fn markdown(report: &Report, charts: &[&str]) -> String {
    let mut md = String::new();
    let summarised: Vec<_> = report.summarised().collect();
    let excluded: Vec<_> = report.excluded().collect();
    let _ = writeln!(md, "# keel-bench report\n");
    let _ = writeln!(
        md,
        "Inputs: {} ({} runs, {} configurations: {} summarised, {} excluded{}).\n",
        report
            .inputs
            .iter()
            .map(|s| code(s))
            .collect::<Vec<_>>()
            .join(", "),
        report.run_count(),
        report.groups.len(),
        summarised.len(),
        excluded.len(),
        if report.unreadable.is_empty() {
            String::new()
        } else {
            format!("; {} unreadable lines", report.unreadable.len())
        }
    );
    md.push_str(
        "Each configuration is summarised over its repetitions (fresh processes). \
         Throughput is the median [min, max] of `roundtrips_per_second`. Latency columns \
         are the median of each run's own percentile (percentiles are never pooled across \
         runs). CPU % is the median of `cpu_percent` (process user + system time over the \
         measured phase; 100 = one core). A configuration with a failed repetition is not \
         summarised: it is listed under *Excluded configurations* with its errors.\n\n",
    );

    md.push_str("## Summary\n\n");
    if summarised.is_empty() {
        md.push_str("No configuration passed every repetition.\n\n");
    } else {
        md.push_str(
            "| protocol | payload B | clients | window | IO model | IO threads | server lanes \
             | work | batch | runs | round trips/s median [min, max] | payload MiB/s | p50 µs \
             | p99 µs | p99.9 µs | CPU % |\n",
        );
        md.push_str(
            "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
             | ---: | ---: | ---: | ---: |\n",
        );
        for (g, s) in &summarised {
            let k = &g.key;
            let _ = writeln!(
                md,
                "| {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} [{}, {}] | {} | {} | {} | {} | {} |",
                cell(&opt(&k.protocol)),
                cell(&opt(&k.address_family)),
                opt(&k.payload_bytes),
                opt(&k.clients),
                opt(&k.window),
                cell(&opt(&k.io_model)),
                opt(&k.io_threads),
                opt(&k.server_io_lanes),
                opt(&k.handler_work),
                opt(&k.batch),
                s.runs,
                fmt_rate(s.throughput.median),
                fmt_rate(s.throughput.min),
                fmt_rate(s.throughput.max),
                fmt_opt(s.mib_per_second.map(|x| x.median), |v| format!("{v:.1}")),
                fmt_opt(s.p50_us.map(|x| x.median), fmt_us),
                fmt_opt(s.p99_us.map(|x| x.median), fmt_us),
                fmt_opt(s.p999_us.map(|x| x.median), fmt_us),
                fmt_opt(s.cpu_percent.map(|x| x.median), |v| format!("{v:.1}")),
            );
        }
        md.push('\n');
    }

    let mixed: Vec<_> = report
        .groups
        .iter()
        .filter(|g| !g.mixed.is_empty())
        .collect();
    if !mixed.is_empty() {
        md.push_str(
            "Runs of these configurations differ in settings outside the grouping key; \
             their numbers may not be comparable:\n\n",
        );
        for g in mixed {
            let _ = writeln!(md, "- {}: {}", g.key, g.mixed.join("; "));
        }
        md.push('\n');
    }

    if !charts.is_empty() {
        md.push_str("## Charts\n\n");
        for name in charts {
            let alt = match *name {
                THROUGHPUT_FILE => "Round trips per second by IO model",
                P99_FILE => "p99 RTT by IO model",
                LOSS_FILE => "Lost echoes per payload x window",
                other => other,
            };
            let _ = writeln!(md, "![{alt}]({name})\n");
        }
    }

    if !excluded.is_empty() {
        md.push_str("## Excluded configurations\n\n");
        md.push_str("A repetition failed, so these are not in the summary or the throughput and latency charts.\n\n");
        for g in &excluded {
            let failed: Vec<_> = g.failed().collect();
            let _ = writeln!(
                md,
                "### {}\n\n{} of {} runs failed:\n",
                g.key,
                failed.len(),
                g.runs.len()
            );
            for run in failed {
                let _ = writeln!(md, "- {}: {}", run.label(), run.errors.join("; "));
                if let Some(cmd) = &run.command {
                    let _ = writeln!(md, "  - command: {}", code(cmd));
                }
            }
            md.push('\n');
        }
    }

    if !report.loss.is_empty() {
        md.push_str("## Loss by payload and window\n\n");
        md.push_str(
            "`udp_lost_messages` per run, from every run that reports it (failed runs included; \
             all other settings pooled): median per run, max in one run, runs.\n\n",
        );
        let windows: BTreeSet<u64> = report.loss.iter().map(|c| c.window).collect();
        let payloads: BTreeSet<u64> = report.loss.iter().map(|c| c.payload_bytes).collect();
        md.push_str("| payload B \\ window |");
        for w in &windows {
            let _ = write!(md, " {w} |");
        }
        md.push_str("\n| ---: |");
        for _ in &windows {
            md.push_str(" ---: |");
        }
        md.push('\n');
        for p in &payloads {
            let _ = write!(md, "| {p} |");
            for w in &windows {
                match report
                    .loss
                    .iter()
                    .find(|c| c.payload_bytes == *p && c.window == *w)
                {
                    Some(c) => {
                        let _ = write!(
                            md,
                            " {} (max {}, {} runs) |",
                            fmt_lost(c.median()),
                            c.max(),
                            c.lost.len()
                        );
                    }
                    None => md.push_str(" – |"),
                }
            }
            md.push('\n');
        }
        md.push('\n');
    }

    if !report.unreadable.is_empty() {
        md.push_str("## Unreadable lines\n\n");
        for u in &report.unreadable {
            let _ = writeln!(md, "- {}: {}", u.source, u.reason);
        }
        md.push('\n');
    }
    md
}

/// A median of lost counts: whole unless it is a half.
fn fmt_lost(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests;
