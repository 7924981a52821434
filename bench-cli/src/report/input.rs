//! The input of the report: one [`Run`] per JSON line, its [`Source`]
//! and its configuration ([`ConfigKey`]), read leniently (a missing,
//! `null` or mistyped field is unknown, never 0). A run of the keel-rudp
//! benchmark also carries a [`RudpRun`] (read in [`super::rudp_key`]), which
//! keeps it out of the UDP echo matrix.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::fields::Fields;
pub(super) use super::fields::{count, opt};
use super::rudp_key::{self, RudpRun};

/// Where a run came from: file name and 1-based line number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Source {
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
pub(super) struct ConfigKey {
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
    pub(super) fn io_label(&self) -> String {
        let n = self.io_threads;
        match self.io_model.as_deref() {
            Some("shared") => format!("shared: 1 context, {}", count(n, "thread")),
            Some("sharded") => format!("sharded: {}, 1 thread each", count(n, "context")),
            Some(other) => format!("{other}: {}", count(n, "thread")),
            None => format!("?: {}", count(n, "thread")),
        }
    }

    /// Server lanes in words: `1 server lane`, `4 server lanes`.
    pub(super) fn lanes_label(&self) -> String {
        count(self.server_io_lanes, "server lane")
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
pub(super) struct Run {
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
    /// The run's recorded RTT distribution: for each of
    /// [`RTT_QUANTILES`], its field (µs), percentiles capped at the run's
    /// max (`rtt_p*_us` of older lines could lie above it).
    pub rtt_quantiles: [Option<f64>; RTT_QUANTILES.len()],
    /// `cpu_percent`.
    pub cpu_percent: Option<f64>,
    /// Lost echoes of the run, both phases: `udp_lost_messages` (the
    /// measured phase's), plus `udp_lost_warmup_messages` on a UDP echo line
    /// that counts them apart (older lines held both in `udp_lost_messages`).
    pub udp_lost_messages: Option<u64>,
    /// What a run of the keel-rudp benchmark adds (its key, seed and
    /// measurements); `None` for a run of the UDP echo matrix. See
    /// `RudpRun::is_rudp_line` for which lines are which.
    pub rudp: Option<RudpRun>,
    /// Settings outside the key (`requested_seconds`, `warmup_seconds`,
    /// …) as JSON text, to flag configurations that mix them.
    pub other_settings: BTreeMap<&'static str, String>,
}

/// A run's `--histogram FILE` given to the report: HdrHistogram's
/// percentile-distribution text, as keel-bench writes it (values in µs).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct HistogramFile {
    /// The file, as given.
    pub name: String,
    /// `(fraction, µs)` of each row, in file order.
    pub points: Vec<(f64, f64)>,
}

impl HistogramFile {
    /// Reads `text` as a percentile distribution: a header line starting
    /// `Value Percentile`, then rows whose first two columns are the value
    /// and its fraction (0..=1), up to the `#[...]` footer. `None` when
    /// the text is not one (a JSON-lines file), or a row does not parse.
    pub(super) fn parse(name: &str, text: &str) -> Option<HistogramFile> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let mut head = lines.next()?.split_whitespace();
        if (head.next(), head.next()) != (Some("Value"), Some("Percentile")) {
            return None;
        }
        let mut points = Vec::new();
        for line in lines.take_while(|l| !l.starts_with('#')) {
            let mut cols = line.split_whitespace();
            let value: f64 = cols.next()?.parse().ok()?;
            let q: f64 = cols.next()?.parse().ok()?;
            if !value.is_finite() || !(0.0..=1.0).contains(&q) {
                return None;
            }
            points.push((q, value));
        }
        Some(HistogramFile {
            name: name.to_string(),
            points,
        })
    }
}

/// The points of a run's RTT distribution its record holds: the fraction
/// of round trips at or below the value, and the field holding it (µs).
pub(super) const RTT_QUANTILES: [(f64, &str); 7] = [
    (0.0, "rtt_min_us"),
    (0.5, "rtt_p50_us"),
    (0.9, "rtt_p90_us"),
    (0.95, "rtt_p95_us"),
    (0.99, "rtt_p99_us"),
    (0.999, "rtt_p999_us"),
    (1.0, "rtt_max_us"),
];

/// Settings outside [`ConfigKey`] that should still agree within a group.
pub(super) const OTHER_SETTINGS: &[&str] = &[
    "backend",
    "role",
    "connect",
    "requested_seconds",
    "warmup_seconds",
    "udp_server_receive_buffer_requested_bytes",
    "loss_timeout_ms",
    "drain_seconds",
];

/// The UDP echo matrix's configuration of a line. A UDP line with
/// `dont_fragment` true is protocol `udp-df` (`--dont-fragment`, as
/// `scripts/rudp-scale.sh` names it): another configuration, not pooled
/// with the kernel's default.
fn key(f: &Fields<'_>) -> ConfigKey {
    ConfigKey {
        protocol: if f.udp_dont_fragment() {
            Some("udp-df".to_string())
        } else {
            f.text("protocol")
        },
        address_family: f.text("address_family"),
        payload_bytes: f.int("payload_bytes"),
        clients: f.int("clients"),
        window: f.int("window"),
        handler_work: f.int("handler_work"),
        batch: f.int("batch"),
        server_io_lanes: f.int("server_io_lanes"),
        io_model: f.text("io_model"),
        io_threads: f.int("io_threads"),
    }
}

/// Why the run does not count: `ok` not true, matrix.sh's own
/// findings, or no throughput.
fn errors(f: &Fields<'_>) -> Vec<String> {
    let mut errors = Vec::new();
    let error_text = f.obj.get("error").and_then(Value::as_str);
    match f.obj.get("ok") {
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
    match f.obj.get("matrix_errors") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for e in list {
                let e = e.as_str().map_or_else(|| e.to_string(), str::to_owned);
                errors.push(format!("matrix.sh: {e}"));
            }
        }
        Some(other) => errors.push(format!("matrix.sh: {other}")),
    }
    if errors.is_empty() && f.measured("roundtrips_per_second").is_none() {
        errors.push("roundtrips_per_second missing or not a number".to_string());
    }
    errors
}

impl Run {
    /// Reads one run from a parsed JSON line; `Err` if it is not an object.
    pub(super) fn from_json(value: &Value, source: Source) -> Result<Run, String> {
        let Value::Object(obj) = value else {
            return Err(format!("expected a JSON object, got {}", kind_of(value)));
        };
        if !["ok", "backend", "schema_version"]
            .iter()
            .any(|k| obj.contains_key(*k))
        {
            return Err(
                "not a keel-bench record (none of ok, backend, schema_version)".to_string(),
            );
        }
        let f = Fields::new(obj);
        let rudp = RudpRun::is_rudp_line(&f).then(|| RudpRun::read(&f));
        let other_settings = f.other_settings(if rudp.is_some() {
            rudp_key::OTHER_SETTINGS
        } else {
            OTHER_SETTINGS
        });
        Ok(Run {
            source,
            key: key(&f),
            repetition: obj.get("repetition").and_then(Value::as_u64),
            command: obj
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_owned),
            errors: errors(&f),
            roundtrips_per_second: f.measured("roundtrips_per_second"),
            payload_mib_per_second: f.measured("payload_mib_per_second"),
            rtt_p50_us: f.percentile("rtt_p50_us"),
            rtt_p99_us: f.percentile("rtt_p99_us"),
            rtt_p999_us: f.percentile("rtt_p999_us"),
            rtt_quantiles: RTT_QUANTILES.map(|(q, name)| {
                if q == 0.0 || q == 1.0 {
                    f.measured(name)
                } else {
                    f.percentile(name)
                }
            }),
            cpu_percent: f.measured("cpu_percent"),
            udp_lost_messages: lost_echoes(obj, rudp.is_some()),
            rudp,
            other_settings,
        })
    }

    /// True when the run counts towards its configuration's summary.
    pub(super) fn passed(&self) -> bool {
        self.errors.is_empty()
    }

    /// `repetition N (file:line)` or `file:line`.
    pub(super) fn label(&self) -> String {
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

/// A line's lost echoes, both phases. keel-bench's UDP echo once counted
/// warm-up losses in `udp_lost_messages` (and `udp_lost_warmup_messages`
/// said which share), so lost could exceed `messages_sent`; it now counts
/// only the measured phase's there and the warm-up's apart, among
/// `warmup_errors`. A line whose `warmup_errors` hold its warm-up losses
/// is of the new kind: its total is the sum. Older lines (their warm-up
/// losses not among `warmup_errors`) and keel-rudp lines (whose warm-up
/// losses were always apart and are not a loss of the measured run) keep
/// `udp_lost_messages`.
pub(crate) fn lost_echoes(obj: &serde_json::Map<String, Value>, rudp: bool) -> Option<u64> {
    let lost = obj.get("udp_lost_messages").and_then(Value::as_u64);
    let warmup = obj
        .get("udp_lost_warmup_messages")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let warmup_errors = obj
        .get("warmup_errors")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if rudp || warmup == 0 || warmup_errors < warmup {
        return lost;
    }
    Some(lost.unwrap_or(0) + warmup)
}
