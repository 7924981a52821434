//! The report: one JSON object on one line on stdout.
//!
//! [`RunReport`] serializes every field of arknet's loopback benchmark, with
//! the same names and in the same order (the contract's "JSON output" list,
//! `schema_version` … `error`), followed by keel's additions (see
//! [`KEEL_FIELDS`]); no field of the contract is renamed or dropped.
//!
//! Conventions:
//!
//! * A value this process cannot know is `null`, never a made-up 0: the
//!   server side (`handler_work`, `server_io_lanes`, `server_send_*`,
//!   `udp_server_*`) when running clients only with `--connect`; every
//!   configuration field in the error line for bad arguments (the values
//!   were not valid); socket buffers not (yet) read back; percentiles with
//!   no samples; `/proc` values that could not be read.
//! * Counters of things that did not happen are 0 (a run that never started
//!   lost nothing), so `ok` stays computable from the line alone.
//! * `rtt_sample_limit` is `null`: keel keeps every sample in an HDR
//!   histogram instead of arknet's 8,192-sample reservoir, and
//!   `rtt_samples == rtt_observations`.
//! * `payload_roundtrip_bytes` is the payload moved in both directions over
//!   the measured phase, `messages × payload × 2`, and
//!   `payload_mib_per_second` is that in MiB over `elapsed_seconds`.
//! * Bulk lines (`--transfer`, rudp and kcp; see `crate::bulk`): a message
//!   is a transfer of `transfer_bytes` (= `payload_bytes`) answered by a
//!   16-byte receipt. `messages` counts the transfers begun in the measured
//!   phase and completed, the `rtt_*` percentiles are their completion
//!   times in µs (handing the message to the protocol to the receipt's
//!   arrival), `payload_roundtrip_bytes` is `messages × (transfer_bytes +
//!   16)`, and `goodput_bytes_per_second` is `transfer_bytes × messages /
//!   elapsed_seconds`, summed over clients. On rudp and kcp echo lines both
//!   bulk fields are null; UDP lines do not have them.
//!
//! [`RunReport`] is made of one struct per topic ([`ConfigEcho`],
//! [`Throughput`], [`Rtt`], [`Checks`], [`Buffers`], [`Cpu`], then keel's
//! [`RttExtra`], [`Setup`], [`Drops`], [`Impair`], [`Delivery`],
//! [`PeerSettings`], [`Bulk`], [`Scale`]), each `#[serde(flatten)]`ed into
//! the one flat JSON object. Each struct's fields are one contiguous run of
//! the line, in its order, so the topics follow the order the contract
//! fixes: the RTT is in two ([`Rtt`], the contract's; [`RttExtra`],
//! keel's), and [`PeerSettings`] holds `server_datagrams_per_message`,
//! which sits among the rudp and kcp settings. Every field keeps its JSON
//! name in Rust (`report.rtt.rtt_p99_us` is `rtt_p99_us`), so a name in a
//! record finds its field. `tests/record_fields.rs` holds each record's key
//! order and a golden line with every field set. What a person reads
//! instead is made in `crate::human`.

use std::time::Duration;

use serde::Serialize;

use crate::bulk::RECEIPT_LEN;
use crate::flags::{Protocol, RunConfig};
use crate::procstats::{cpu_percent, UdpCounters};
use crate::stats::RttSummary;

/// Value of `schema_version`.
pub const SCHEMA_VERSION: u32 = 1;
/// Value of `backend`.
pub const BACKEND: &str = "keel";
/// Send buffer every UDP socket requests (bytes), as in arknet.
pub const UDP_SEND_BUFFER_REQUEST: u64 = 65_536;
/// Receive buffer every UDP socket requests (bytes), as in arknet, unless
/// `--udp-server-receive-buffer` overrides it for the server.
pub const UDP_RECEIVE_BUFFER_REQUEST: u64 = 4 * 1024 * 1024;

/// The contract's fields, in order: the first fields of every report line.
pub const REFERENCE_FIELDS: &[&str] = &[
    "schema_version",
    "backend",
    "protocol",
    "address_family",
    "payload_bytes",
    "clients",
    "window",
    "io_model",
    "handler_work",
    "io_contexts",
    "io_threads",
    "server_io_lanes",
    "requested_seconds",
    "warmup_seconds",
    "elapsed_seconds",
    "messages_sent",
    "messages",
    "payload_roundtrip_bytes",
    "roundtrips_per_second",
    "payload_mib_per_second",
    "rtt_samples",
    "rtt_observations",
    "rtt_sample_limit",
    "rtt_p50_us",
    "rtt_p95_us",
    "rtt_p99_us",
    "client_send_rejections",
    "client_send_completion_errors",
    "server_send_rejections",
    "server_send_completion_errors",
    "content_errors",
    "order_errors",
    "unexpected_messages",
    "disconnect_errors",
    "udp_lost_messages",
    "unfinished_messages",
    "callback_exceptions",
    "drain_timeouts",
    "duplicate_completions",
    "pending_completions",
    "warmup_ok",
    "warmup_errors",
    "udp_send_buffer_requested_bytes",
    "udp_receive_buffer_requested_bytes",
    "udp_server_send_buffer_bytes",
    "udp_server_receive_buffer_bytes",
    "udp_client_send_buffer_min_bytes",
    "udp_client_send_buffer_max_bytes",
    "udp_client_receive_buffer_min_bytes",
    "udp_client_receive_buffer_max_bytes",
    "cpu_seconds",
    "cpu_elapsed_seconds",
    "cpu_percent",
    "peak_rss_bytes",
    "ok",
    "error",
];

/// keel's additional fields, in order, after [`REFERENCE_FIELDS`].
pub const KEEL_FIELDS: &[&str] = &[
    "keel_version",
    "role",
    "connect",
    "rtt_p90_us",
    "rtt_p999_us",
    "rtt_max_us",
    "rtt_mean_us",
    "udp_server_receive_buffer_requested_bytes",
    "batch",
    "loss_timeout_ms",
    "drain_seconds",
    "kernel_rcvbuf_drops",
    "snmp_udp_rcvbuf_errors",
    "snmp_udp_sndbuf_errors",
    "snmp_udp_in_errors",
    "late_echoes",
    "udp_lost_warmup_messages",
    "impair",
    "impair_server",
    "conditioner_dropped",
    "conditioner_duplicated",
    "lane_steering",
    "dont_fragment",
    "rtt_min_us",
    "rtt_stddev_us",
];

/// The line for a command line that was rejected (bad arguments, exit 2)
/// or a `report` that could not run: the contract's `"ok": false` and
/// `"error"` naming the flag, and what produced it, nothing else. A record
/// of every run field set to null would say nothing more and looks like a
/// run; a run that started and failed prints its full [`RunReport`], and a
/// failed `serve` its [`crate::serve::ServeSummary`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorRecord {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `"keel"`.
    pub backend: &'static str,
    /// keel-bench's version.
    pub keel_version: &'static str,
    /// Always false.
    pub ok: bool,
    /// What was wrong: the flag and what it accepts, or why the command
    /// could not run.
    pub error: String,
}

impl ErrorRecord {
    /// The record of `error`.
    pub fn new(error: &str) -> Self {
        ErrorRecord {
            schema_version: SCHEMA_VERSION,
            backend: BACKEND,
            keel_version: env!("CARGO_PKG_VERSION"),
            ok: false,
            error: error.to_owned(),
        }
    }

    /// The record as one line of JSON, without the trailing newline.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("an ErrorRecord always serializes")
    }
}

/// Which part of the benchmark produced a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Server and clients in this process (arknet's shape).
    Loopback,
    /// Clients only, against a `keel-bench serve` elsewhere (`--connect`).
    Client,
}

/// One benchmark result, one JSON object: the nested structs are
/// flattened into it, and field order (theirs within, and theirs among the
/// plain fields here) is the JSON order; see the module docs for the
/// groups and for the meaning of `null`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// Report format version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// `"keel"`.
    pub backend: &'static str,
    /// The run's configuration as the contract echoes it (`protocol` ...
    /// `warmup_seconds`).
    #[serde(flatten)]
    pub config: ConfigEcho,
    /// How much the measured phase moved and how fast (`elapsed_seconds` ...
    /// `payload_mib_per_second`).
    #[serde(flatten)]
    pub throughput: Throughput,
    /// The contract's RTT fields (`rtt_samples` ... `rtt_p99_us`); keel's other
    /// percentiles are in [`RttExtra`].
    #[serde(flatten)]
    pub rtt: Rtt,
    /// The counters and flags that decide `ok` (`client_send_rejections` ...
    /// `warmup_errors`); see [`RunReport::failure_reason`].
    #[serde(flatten)]
    pub checks: Checks,
    /// Socket buffers requested and read back
    /// (`udp_send_buffer_requested_bytes` ...
    /// `udp_client_receive_buffer_max_bytes`).
    #[serde(flatten)]
    pub buffers: Buffers,
    /// CPU time and memory of the process (`cpu_seconds` ... `peak_rss_bytes`).
    #[serde(flatten)]
    pub cpu: Cpu,
    /// True only when the run passed every check ([`RunReport::finish`]).
    pub ok: bool,
    /// First reason the run is not ok; null when ok. Clients that ended
    /// early say what happened and where, e.g. `disconnect_errors = 1:
    /// connection refused by 127.0.0.1:7000 (ICMP port unreachable: nothing
    /// listening on that port)`.
    pub error: Option<String>,

    // ---- keel additions, after the contract's fields ----
    /// keel-bench version.
    pub keel_version: &'static str,
    /// `"loopback"` or `"client"`; null when the arguments were invalid.
    pub role: Option<Role>,
    /// The `--connect` address, null in loopback runs.
    pub connect: Option<String>,
    /// keel's RTT fields beside the contract's (`rtt_p90_us` ...
    /// `rtt_mean_us`).
    #[serde(flatten)]
    pub rtt_extra: RttExtra,
    /// keel's configuration fields beside the contract's
    /// (`udp_server_receive_buffer_requested_bytes` ... `drain_seconds`).
    #[serde(flatten)]
    pub setup: Setup,
    /// Datagrams lost outside the measured echo: kernel and host counters, late
    /// echoes, warm-up losses (`kernel_rcvbuf_drops` ...
    /// `udp_lost_warmup_messages`).
    #[serde(flatten)]
    pub drops: Drops,
    /// The link conditioner: its settings and what it did (`impair` ...
    /// `conditioner_duplicated`).
    #[serde(flatten)]
    pub impair: Impair,
    /// How the server spread datagrams over its lanes: `"kernel-hash"` or
    /// `"peer-port"` (clients bound to ports whose lane runs on their own
    /// context); `null` when no server runs here.
    pub lane_steering: Option<&'static str>,
    /// rudp and kcp lines (and udp with `--rate`): the channel, the rate, what
    /// was delivered and what it cost on the wire (`channel` ...
    /// `wire_bytes_per_payload_byte`); absent from a UDP echo line.
    #[serde(flatten)]
    pub delivery: Delivery,
    /// rudp and kcp settings, and the server's datagrams per message among them
    /// by the JSON order (`kcp_mode` ... `kcp_window`); each only on the lines
    /// it applies to.
    #[serde(flatten)]
    pub peer: PeerSettings,
    /// The bulk case (`--transfer`; `transfer_bytes`,
    /// `goodput_bytes_per_second`): rudp and kcp lines only, null for their
    /// echo.
    #[serde(flatten)]
    pub bulk: Bulk,
    /// Open-loop runs (rudp, kcp, udp with `--rate`), the scale case: the
    /// server's CPU and the memory per connection (`server_cpu_us_per_message`
    /// ... `rss_bytes_per_connection`).
    #[serde(flatten)]
    pub scale: Scale,
    /// Smallest RTT, µs (appended after every other field, as scripts read
    /// the earlier ones by position too).
    pub rtt_min_us: Option<f64>,
    /// Population standard deviation of the RTTs, µs.
    pub rtt_stddev_us: Option<f64>,
    /// `--histogram`: the measured RTTs in HdrHistogram's
    /// percentile-distribution format ([`crate::stats::Rtt::
    /// percentile_distribution`]), kept only when asked for; not in the
    /// JSON line.
    #[serde(skip)]
    pub rtt_distribution: Option<String>,
    /// `--histogram` was given: [`RunReport::set_rtt_of`] keeps the
    /// distribution.
    #[serde(skip)]
    pub wants_distribution: bool,
}

/// The run's configuration as the contract echoes it (`protocol` ...
/// `warmup_seconds`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConfigEcho {
    /// `"udp"`.
    pub protocol: &'static str,
    /// `"ipv4"` or `"ipv6"`.
    pub address_family: Option<&'static str>,
    /// Bytes per datagram, header included.
    pub payload_bytes: Option<u64>,
    /// Client sockets.
    pub clients: Option<u32>,
    /// Datagrams in flight per client.
    pub window: Option<u32>,
    /// `"shared"` or `"sharded"`.
    pub io_model: Option<&'static str>,
    /// Server work rounds per echo (`--work`); null with `--connect`.
    pub handler_work: Option<u64>,
    /// 1 for shared, `io_threads` for sharded.
    pub io_contexts: Option<u32>,
    /// IO threads.
    pub io_threads: Option<u32>,
    /// Server receive lanes; null with `--connect`.
    pub server_io_lanes: Option<u32>,
    /// `--seconds`.
    pub requested_seconds: Option<f64>,
    /// `--warmup`.
    pub warmup_seconds: Option<f64>,
}

/// How much the measured phase moved and how fast (`elapsed_seconds` ...
/// `payload_mib_per_second`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Throughput {
    /// From measured-phase start to the end of the drain.
    pub elapsed_seconds: f64,
    /// Measured-phase datagrams sent by clients.
    pub messages_sent: u64,
    /// Measured-phase echoes received and verified.
    pub messages: u64,
    /// `messages × payload × 2`.
    pub payload_roundtrip_bytes: u64,
    /// `messages / elapsed_seconds`.
    pub roundtrips_per_second: f64,
    /// `payload_roundtrip_bytes / 2^20 / elapsed_seconds`.
    pub payload_mib_per_second: f64,
}

/// The contract's RTT fields (`rtt_samples` ... `rtt_p99_us`); keel's other
/// percentiles are in [`RttExtra`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Rtt {
    /// RTT samples the percentiles come from (= `rtt_observations`).
    pub rtt_samples: u64,
    /// RTTs observed.
    pub rtt_observations: u64,
    /// Reservoir size; null: keel keeps every sample.
    pub rtt_sample_limit: Option<u64>,
    /// Median RTT, µs.
    pub rtt_p50_us: Option<f64>,
    /// 95th percentile RTT, µs.
    pub rtt_p95_us: Option<f64>,
    /// 99th percentile RTT, µs.
    pub rtt_p99_us: Option<f64>,
}

/// The counters and flags that decide `ok` (`client_send_rejections` ...
/// `warmup_errors`); see [`RunReport::failure_reason`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Checks {
    /// Client sends refused when submitted.
    pub client_send_rejections: u64,
    /// Client sends that completed with an error.
    pub client_send_completion_errors: u64,
    /// Server sends refused when submitted; null with `--connect`.
    pub server_send_rejections: Option<u64>,
    /// Server sends that completed with an error; null with `--connect`.
    pub server_send_completion_errors: Option<u64>,
    /// Echoes with a wrong size, header or byte.
    pub content_errors: u64,
    /// Echoes whose sequence is not above the highest seen (reordering).
    pub order_errors: u64,
    /// Echoes that match no outstanding message.
    pub unexpected_messages: u64,
    /// Socket errors that end a client (e.g. ICMP port unreachable).
    pub disconnect_errors: u64,
    /// Measured-phase datagrams never answered by the end of the drain (or
    /// the loss timeout); at most `messages_sent`. Warm-up losses are in
    /// `udp_lost_warmup_messages` and `warmup_errors`.
    pub udp_lost_messages: u64,
    /// Messages started but not finished when the run ended.
    pub unfinished_messages: u64,
    /// Panics caught in callbacks.
    pub callback_exceptions: u64,
    /// 1 when the drain ran out of time with datagrams outstanding.
    pub drain_timeouts: u64,
    /// Completions reported twice for one operation.
    pub duplicate_completions: u64,
    /// Operations still pending at the end.
    pub pending_completions: u64,
    /// The warm-up had no errors (true when skipped).
    pub warmup_ok: bool,
    /// Errors of any kind during the warm-up.
    pub warmup_errors: u64,
}

/// Socket buffers requested and read back (`udp_send_buffer_requested_bytes`
/// ... `udp_client_receive_buffer_max_bytes`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Buffers {
    /// Send buffer each socket requested ([`UDP_SEND_BUFFER_REQUEST`]).
    pub udp_send_buffer_requested_bytes: Option<u64>,
    /// Receive buffer each socket requested ([`UDP_RECEIVE_BUFFER_REQUEST`]).
    pub udp_receive_buffer_requested_bytes: Option<u64>,
    /// Server socket's send buffer as read back; null with `--connect`.
    pub udp_server_send_buffer_bytes: Option<u64>,
    /// Server socket's receive buffer as read back; null with `--connect`.
    pub udp_server_receive_buffer_bytes: Option<u64>,
    /// Smallest client send buffer read back.
    pub udp_client_send_buffer_min_bytes: Option<u64>,
    /// Largest client send buffer read back.
    pub udp_client_send_buffer_max_bytes: Option<u64>,
    /// Smallest client receive buffer read back.
    pub udp_client_receive_buffer_min_bytes: Option<u64>,
    /// Largest client receive buffer read back.
    pub udp_client_receive_buffer_max_bytes: Option<u64>,
}

/// CPU time and memory of the process (`cpu_seconds` ... `peak_rss_bytes`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cpu {
    /// Process user + system CPU over the measured phase, seconds, to the
    /// nanosecond (`CLOCK_PROCESS_CPUTIME_ID`; clock ticks of 10 ms only
    /// where that clock cannot be read).
    pub cpu_seconds: f64,
    /// Wall time the CPU time was measured over, seconds.
    pub cpu_elapsed_seconds: f64,
    /// `cpu_seconds / cpu_elapsed_seconds × 100` (100 = one core).
    pub cpu_percent: f64,
    /// Peak resident set size, bytes (`VmHWM`).
    pub peak_rss_bytes: Option<u64>,
}

/// keel's RTT fields beside the contract's (`rtt_p90_us` ... `rtt_mean_us`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RttExtra {
    /// 90th percentile RTT, µs.
    pub rtt_p90_us: Option<f64>,
    /// 99.9th percentile RTT, µs.
    pub rtt_p999_us: Option<f64>,
    /// Largest RTT, µs.
    pub rtt_max_us: Option<f64>,
    /// Mean RTT, µs.
    pub rtt_mean_us: Option<f64>,
}

/// keel's configuration fields beside the contract's
/// (`udp_server_receive_buffer_requested_bytes` ... `drain_seconds`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Setup {
    /// Receive buffer the server socket(s) requested: the
    /// `--udp-server-receive-buffer` value, else the common 4 MiB; null with
    /// `--connect`.
    pub udp_server_receive_buffer_requested_bytes: Option<u64>,
    /// Datagrams per receive/send system call.
    pub batch: Option<u32>,
    /// `--loss-timeout` in ms; null when off.
    pub loss_timeout_ms: Option<u64>,
    /// `--drain`: the longest wait after the measured phase.
    pub drain_seconds: Option<f64>,
}

/// Datagrams lost outside the measured echo: kernel and host counters, late
/// echoes, warm-up losses (`kernel_rcvbuf_drops` ...
/// `udp_lost_warmup_messages`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Drops {
    /// Datagrams the kernel dropped on this process's sockets for a full
    /// receive buffer (SO_RXQ_OVFL).
    pub kernel_rcvbuf_drops: Option<u64>,
    /// Host `Udp RcvbufErrors` increase over the run (`/proc/net/snmp`, or
    /// `snmp6` for ipv6).
    pub snmp_udp_rcvbuf_errors: Option<u64>,
    /// Host `Udp SndbufErrors` increase over the run.
    pub snmp_udp_sndbuf_errors: Option<u64>,
    /// Host `Udp InErrors` increase over the run.
    pub snmp_udp_in_errors: Option<u64>,
    /// Echoes that came back after `--loss-timeout` had given their message
    /// up (counted, never taken for content); `null` when not measured.
    pub late_echoes: Option<u64>,
    /// Warm-up messages lost (never answered by the end of the drain, or
    /// given up by `--loss-timeout`), apart from `udp_lost_messages`, which
    /// counts measured-phase messages only, as arknet's does (its warm-up
    /// phase's losses are among its `warmup_errors`; so are these). So
    /// `udp_lost_messages <= messages_sent` in every line, and with no
    /// content or order error `messages_sent = messages + udp_lost_messages`.
    pub udp_lost_warmup_messages: Option<u64>,
}

/// The link conditioner: its settings and what it did (`impair` ...
/// `conditioner_duplicated`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Impair {
    /// `--impair` as applied (the link conditioner on the clients' send
    /// path); `null` when off.
    pub impair: Option<String>,
    /// `--impair-server` as applied; `null` when off.
    pub impair_server: Option<String>,
    /// Datagrams the link conditioners dropped on purpose (clients and
    /// server), so a lossy impaired run shows where its losses came from.
    pub conditioner_dropped: Option<u64>,
    /// Extra copies the link conditioners sent.
    pub conditioner_duplicated: Option<u64>,
}

/// rudp and kcp lines (and udp with `--rate`): the channel, the rate, what was
/// delivered and what it cost on the wire (`channel` ...
/// `wire_bytes_per_payload_byte`); absent from a UDP echo line.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Delivery {
    /// `--channel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<&'static str>,
    /// `--rate` (open loop); JSON null in a closed-loop rudp run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_hz: Option<Option<u32>>,
    /// Measured-phase messages the server received (each once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages_delivered: Option<u64>,
    /// Chunks resent after a loss, both ends, whole run (keel-rudp's
    /// `Stats::retransmissions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages_resent: Option<u64>,
    /// Redundant copies of small reliable messages, both ends, whole run
    /// (`Stats::redundant_copies`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redundant_copies: Option<u64>,
    /// rudp lines: messages whose first transmission was lost and that
    /// arrived through a redundant copy without a resend, both ends
    /// (`Stats::recovered_by_redundancy`); absent for KCP, which has no
    /// redundancy. keel-rudp has no FEC: this is its only recovery
    /// without a resend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered_by_redundancy: Option<u64>,
    /// UDP payload bytes both ends sent (`Stats::bytes_sent`: headers,
    /// acks, resends, redundancy, keepalives) over the message bytes they
    /// sent, whole run; 1.0 would be no overhead at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wire_bytes_per_payload_byte: Option<f64>,
}

/// rudp and kcp settings, and the server's datagrams per message among them by
/// the JSON order (`kcp_mode` ... `kcp_window`); each only on the lines it
/// applies to.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeerSettings {
    /// `--kcp-mode` (`--protocol kcp` lines only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kcp_mode: Option<&'static str>,
    /// `--encrypt` (`--protocol rudp` lines only): connect tokens and
    /// ChaCha20-Poly1305 on every packet, or keel-rudp's explicit insecure
    /// mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// `--bulk-channel` (`--protocol rudp` lines only): the channel is held
    /// back by keel-rudp's congestion control and pacer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk_channel: Option<bool>,
    /// Open-loop lines (rudp, kcp, udp with `--rate`): datagrams the
    /// server's socket received per message its handler received, over the
    /// whole run (handshakes, acknowledgements, probes included): 1 for
    /// plain UDP; what keel-rudp's and KCP's acknowledgements add.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_datagrams_per_message: Option<f64>,
    /// `--ack-delay` (`--protocol rudp` lines only): the clients'
    /// keel-rudp `max_ack_delay` in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_delay_ms: Option<u32>,
    /// `--redundancy` (`--protocol rudp` lines only): the channel's
    /// redundancy level (`ChannelConfig::redundancy`), keel-rudp's default
    /// when the flag is not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redundancy: Option<u8>,
    /// `--kcp-window`: KCP's windows in packets (`--protocol kcp` lines
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kcp_window: Option<u16>,
    /// `--client-sockets` (rudp and kcp lines, and udp lines with
    /// `--rate`): "per-client" (a socket each) or "shared" (one per client
    /// thread, batched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_sockets: Option<&'static str>,
    /// Whether the echo server's sockets set Don't Fragment: udp lines
    /// `--dont-fragment`, rudp lines keel-rudp's default (true on Linux),
    /// kcp lines false (keel-udp's default); null in a report that never
    /// got to a run.
    pub dont_fragment: Option<bool>,
}

/// The bulk case (`--transfer`; `transfer_bytes`, `goodput_bytes_per_second`):
/// rudp and kcp lines only, null for their echo.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Bulk {
    /// `--transfer` (rudp and kcp lines): bytes of each bulk transfer; JSON
    /// null when the run is the echo. In a bulk run `messages` counts
    /// completed transfers and the `rtt_*` fields are completion times in
    /// µs, from handing the message to the protocol to the server's
    /// receipt (see `crate::bulk`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_bytes: Option<Option<u64>>,
    /// `transfer_bytes × messages / elapsed_seconds`, summed over clients
    /// (rudp and kcp lines); JSON null when the run is the echo.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_bytes_per_second: Option<Option<f64>>,
}

/// Open-loop runs (rudp, kcp, udp with `--rate`), the scale case: the server's
/// CPU and the memory per connection (`server_cpu_us_per_message` ...
/// `rss_bytes_per_connection`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Scale {
    /// CPU time of the server's threads in the measured phase over the
    /// messages it received in that time, in µs; the server runs on its
    /// own runtime, apart from the clients'. Each thread's CPU time is read
    /// to the nanosecond (its CPU-time clock, else `schedstat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_us_per_message: Option<Option<f64>>,
    /// The server's threads' CPU time over the measured phase's wall time
    /// (100 = one core busy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_percent: Option<Option<f64>>,
    /// RSS with every connection up, minus RSS before the server and the
    /// clients were made, over the clients: both ends of a connection
    /// (client socket and state, server state), in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes_per_connection: Option<Option<f64>>,
}

impl RunReport {
    /// A report with nothing known: configuration and sizes null, counters
    /// 0, not ok.
    fn blank() -> Self {
        RunReport {
            schema_version: SCHEMA_VERSION,
            backend: BACKEND,
            config: ConfigEcho {
                protocol: "udp",
                ..ConfigEcho::default()
            },
            throughput: Throughput::default(),
            rtt: Rtt::default(),
            checks: Checks::default(),
            buffers: Buffers::default(),
            cpu: Cpu::default(),
            ok: false,
            error: None,
            keel_version: env!("CARGO_PKG_VERSION"),
            role: None,
            connect: None,
            rtt_extra: RttExtra::default(),
            setup: Setup::default(),
            drops: Drops::default(),
            impair: Impair::default(),
            lane_steering: None,
            delivery: Delivery::default(),
            peer: PeerSettings::default(),
            bulk: Bulk::default(),
            scale: Scale::default(),
            rtt_min_us: None,
            rtt_stddev_us: None,
            rtt_distribution: None,
            wants_distribution: false,
        }
    }

    /// A report for `cfg` before the run: configuration fields filled (the
    /// server-side ones null with `--connect`), server-side counters 0 in
    /// loopback runs, measurements 0 or null, `ok` false until
    /// [`RunReport::finish`].
    pub fn new(cfg: &RunConfig) -> Self {
        let local_server = cfg.connect.is_none();
        // Known only when the server runs in this process.
        fn server<T>(local: bool, v: T) -> Option<T> {
            local.then_some(v)
        }
        // rudp and kcp lines carry the bulk fields (null for the echo).
        let peer = cfg.protocol != Protocol::Udp;
        let blank = RunReport::blank();
        RunReport {
            config: ConfigEcho {
                protocol: cfg.protocol.as_str(),
                address_family: Some(cfg.address_family.as_str()),
                // The message size: `--transfer` in the bulk case.
                payload_bytes: Some(cfg.transfer.unwrap_or(cfg.payload)),
                clients: Some(cfg.clients),
                window: Some(cfg.window),
                io_model: Some(cfg.io_model.as_str()),
                handler_work: server(local_server, cfg.work),
                io_contexts: Some(cfg.io_contexts()),
                io_threads: Some(cfg.io_threads),
                server_io_lanes: server(local_server, cfg.server_lanes),
                requested_seconds: Some(cfg.seconds),
                warmup_seconds: Some(cfg.warmup),
            },
            checks: Checks {
                server_send_rejections: server(local_server, 0),
                server_send_completion_errors: server(local_server, 0),
                ..blank.checks
            },
            buffers: Buffers {
                udp_send_buffer_requested_bytes: Some(UDP_SEND_BUFFER_REQUEST),
                udp_receive_buffer_requested_bytes: Some(UDP_RECEIVE_BUFFER_REQUEST),
                ..blank.buffers
            },
            role: Some(if local_server {
                Role::Loopback
            } else {
                Role::Client
            }),
            connect: cfg.connect.map(|a| a.to_string()),
            setup: Setup {
                udp_server_receive_buffer_requested_bytes: server(
                    local_server,
                    cfg.udp_server_receive_buffer
                        .unwrap_or(UDP_RECEIVE_BUFFER_REQUEST),
                ),
                batch: Some(cfg.batch),
                loss_timeout_ms: cfg.loss_timeout_ms,
                drain_seconds: Some(cfg.drain),
            },
            impair: Impair {
                impair: cfg.impair.as_ref().map(|i| i.to_string()),
                impair_server: cfg.impair_server.as_ref().map(|i| i.to_string()),
                ..blank.impair
            },
            peer: PeerSettings {
                bulk_channel: (cfg.protocol == Protocol::Rudp).then_some(cfg.bulk_channel),
                kcp_window: (cfg.protocol == Protocol::Kcp).then_some(cfg.kcp_window),
                client_sockets: (cfg.protocol != Protocol::Udp || cfg.rate_hz.is_some())
                    .then(|| cfg.client_sockets.as_str()),
                dont_fragment: Some(match cfg.protocol {
                    Protocol::Udp => cfg.dont_fragment,
                    Protocol::Rudp => {
                        keel_rudp::ServerConfig::new(
                            keel_rudp::Config::new(Vec::new()),
                            keel_rudp::ServerSecurity::Insecure,
                        )
                        .udp
                        .socket
                        .dont_fragment
                    }
                    Protocol::Kcp => false,
                }),
                ack_delay_ms: (cfg.protocol == Protocol::Rudp).then_some(cfg.ack_delay_ms),
                redundancy: (cfg.protocol == Protocol::Rudp).then(|| {
                    cfg.redundancy
                        .unwrap_or(if cfg.bulk_channel || !cfg.channel.reliable() {
                            0
                        } else {
                            keel_rudp::DEFAULT_REDUNDANCY
                        })
                }),
                ..blank.peer
            },
            bulk: Bulk {
                transfer_bytes: peer.then_some(cfg.transfer),
                goodput_bytes_per_second: peer.then_some(None),
            },
            wants_distribution: cfg.histogram.is_some(),
            ..blank
        }
    }

    /// The line for a run that could not happen: `ok` false and `error`
    /// set. With `cfg` (valid arguments, failed setup) the configuration is
    /// echoed as in [`RunReport::new`]; without it (bad arguments) every
    /// configuration field is null.
    pub fn error_report(cfg: Option<&RunConfig>, error: &str) -> Self {
        let mut report = cfg.map_or_else(RunReport::blank, RunReport::new);
        report.ok = false;
        report.error = Some(error.to_owned());
        report
    }

    /// Copies RTT percentiles and counts from a summary.
    pub fn set_rtt(&mut self, rtt: &RttSummary) {
        self.rtt.rtt_samples = rtt.samples;
        self.rtt.rtt_observations = rtt.samples;
        self.rtt.rtt_sample_limit = None;
        self.rtt.rtt_p50_us = rtt.p50_us;
        self.rtt_extra.rtt_p90_us = rtt.p90_us;
        self.rtt.rtt_p95_us = rtt.p95_us;
        self.rtt.rtt_p99_us = rtt.p99_us;
        self.rtt_extra.rtt_p999_us = rtt.p999_us;
        self.rtt_extra.rtt_max_us = rtt.max_us;
        self.rtt_extra.rtt_mean_us = rtt.mean_us;
        self.rtt_min_us = rtt.min_us;
        self.rtt_stddev_us = rtt.stddev_us;
    }

    /// [`RunReport::set_rtt`] of `rtt`'s summary, and its percentile
    /// distribution when `--histogram` asked for it.
    pub fn set_rtt_of(&mut self, rtt: &crate::stats::Rtt) {
        self.set_rtt(&rtt.summary());
        if self.wants_distribution {
            self.rtt_distribution = Some(rtt.percentile_distribution());
        }
    }

    /// Sets `elapsed_seconds` and derives `payload_roundtrip_bytes`,
    /// `roundtrips_per_second` and `payload_mib_per_second` from `messages`
    /// and `payload_bytes` (rates are 0 for a zero elapsed time). In a bulk
    /// run (`transfer_bytes` set) a round trip is the transfer and its
    /// 16-byte receipt, and `goodput_bytes_per_second` is
    /// `transfer_bytes × messages / elapsed_seconds`.
    pub fn set_throughput(&mut self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        self.throughput.elapsed_seconds = secs;
        let payload = self.config.payload_bytes.unwrap_or(0);
        let transfer = self.bulk.transfer_bytes.flatten();
        let answer = transfer.map_or(payload, |_| RECEIPT_LEN as u64);
        self.throughput.payload_roundtrip_bytes = self
            .throughput
            .messages
            .saturating_mul(payload.saturating_add(answer));
        if let Some(bytes) = transfer {
            let goodput = if secs > 0.0 {
                bytes as f64 * self.throughput.messages as f64 / secs
            } else {
                0.0
            };
            self.bulk.goodput_bytes_per_second = Some(Some(goodput));
        }
        if secs > 0.0 {
            self.throughput.roundtrips_per_second = self.throughput.messages as f64 / secs;
            self.throughput.payload_mib_per_second =
                self.throughput.payload_roundtrip_bytes as f64 / (1024.0 * 1024.0) / secs;
        } else {
            self.throughput.roundtrips_per_second = 0.0;
            self.throughput.payload_mib_per_second = 0.0;
        }
    }

    /// Sets the CPU fields from process CPU time used over `wall`.
    pub fn set_cpu(&mut self, cpu: Duration, wall: Duration) {
        self.cpu.cpu_seconds = cpu.as_secs_f64();
        self.cpu.cpu_elapsed_seconds = wall.as_secs_f64();
        self.cpu.cpu_percent = cpu_percent(cpu, wall);
    }

    /// Sets the `snmp_udp_*` fields from a counter delta (null if `None`).
    pub fn set_snmp(&mut self, delta: Option<&UdpCounters>) {
        self.drops.snmp_udp_rcvbuf_errors = delta.and_then(|d| d.rcvbuf_errors);
        self.drops.snmp_udp_sndbuf_errors = delta.and_then(|d| d.sndbuf_errors);
        self.drops.snmp_udp_in_errors = delta.and_then(|d| d.in_errors);
    }

    /// The error counters that must all be zero, with their JSON names.
    pub fn error_counters(&self) -> [(&'static str, u64); 13] {
        [
            ("client_send_rejections", self.checks.client_send_rejections),
            (
                "client_send_completion_errors",
                self.checks.client_send_completion_errors,
            ),
            (
                "server_send_rejections",
                self.checks.server_send_rejections.unwrap_or(0),
            ),
            (
                "server_send_completion_errors",
                self.checks.server_send_completion_errors.unwrap_or(0),
            ),
            ("content_errors", self.checks.content_errors),
            ("order_errors", self.checks.order_errors),
            ("unexpected_messages", self.checks.unexpected_messages),
            ("disconnect_errors", self.checks.disconnect_errors),
            ("udp_lost_messages", self.checks.udp_lost_messages),
            ("unfinished_messages", self.checks.unfinished_messages),
            ("callback_exceptions", self.checks.callback_exceptions),
            ("drain_timeouts", self.checks.drain_timeouts),
            ("duplicate_completions", self.checks.duplicate_completions),
        ]
    }

    /// Why the run is not ok, by the contract's rule (an error, warm-up
    /// errors, a non-zero error counter, no messages, something pending),
    /// or `None` if it is ok.
    pub fn failure_reason(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.clone());
        }
        if !self.checks.warmup_ok || self.checks.warmup_errors != 0 {
            return Some(
                match self.drops.udp_lost_warmup_messages.filter(|n| *n > 0) {
                    Some(lost) => format!(
                        "warm-up failed: warmup_errors = {} (udp_lost_warmup_messages = {lost})",
                        self.checks.warmup_errors
                    ),
                    None => format!(
                        "warm-up failed: warmup_errors = {}",
                        self.checks.warmup_errors
                    ),
                },
            );
        }
        if let Some((name, n)) = self.error_counters().into_iter().find(|(_, n)| *n != 0) {
            return Some(format!("{name} = {n}"));
        }
        if self.throughput.messages == 0 {
            return Some("no message completed in the measured phase (messages = 0)".into());
        }
        if self.checks.pending_completions != 0 {
            return Some(format!(
                "pending_completions = {}",
                self.checks.pending_completions
            ));
        }
        None
    }

    /// Sets `ok`, and `error` to the first reason when not ok.
    pub fn finish(&mut self) {
        self.error = self.failure_reason();
        self.ok = self.error.is_none();
    }

    /// The report as one line of JSON, without the trailing newline.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a RunReport always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{parse, Command};

    fn cfg(args: &[&str]) -> RunConfig {
        match parse(args.iter().copied()).unwrap() {
            Command::Run(c) => c,
            other => panic!("{other:?}"),
        }
    }

    fn passing(cfg: &RunConfig) -> RunReport {
        let mut r = RunReport::new(cfg);
        r.checks.warmup_ok = true;
        r.throughput.messages = 1000;
        r.throughput.messages_sent = 1000;
        r
    }

    #[test]
    fn ok_only_when_every_check_passes() {
        let c = cfg(&[]);
        let mut r = passing(&c);
        r.finish();
        assert!(r.ok, "{:?}", r.error);
        assert_eq!(r.error, None);

        let mut lost = passing(&c);
        lost.checks.udp_lost_messages = 3;
        lost.checks.drain_timeouts = 1;
        lost.finish();
        assert!(!lost.ok);
        assert_eq!(lost.error.as_deref(), Some("udp_lost_messages = 3"));

        let mut none = passing(&c);
        none.throughput.messages = 0;
        none.finish();
        assert!(!none.ok);

        let mut warm = passing(&c);
        warm.checks.warmup_ok = false;
        warm.checks.warmup_errors = 2;
        warm.finish();
        assert!(warm.error.unwrap().contains("warm-up"));

        let mut pending = passing(&c);
        pending.checks.pending_completions = 1;
        pending.finish();
        assert!(!pending.ok);

        let mut server = passing(&c);
        server.checks.server_send_rejections = Some(1);
        server.finish();
        assert_eq!(server.error.as_deref(), Some("server_send_rejections = 1"));

        let mut err = passing(&c);
        err.error = Some("bind failed".into());
        err.finish();
        assert!(!err.ok);
        assert_eq!(err.error.as_deref(), Some("bind failed"));
    }

    #[test]
    fn every_error_counter_fails_the_run() {
        let c = cfg(&[]);
        for i in 0..13 {
            let mut r = passing(&c);
            match i {
                0 => r.checks.client_send_rejections = 1,
                1 => r.checks.client_send_completion_errors = 1,
                2 => r.checks.server_send_rejections = Some(1),
                3 => r.checks.server_send_completion_errors = Some(1),
                4 => r.checks.content_errors = 1,
                5 => r.checks.order_errors = 1,
                6 => r.checks.unexpected_messages = 1,
                7 => r.checks.disconnect_errors = 1,
                8 => r.checks.udp_lost_messages = 1,
                9 => r.checks.unfinished_messages = 1,
                10 => r.checks.callback_exceptions = 1,
                11 => r.checks.drain_timeouts = 1,
                _ => r.checks.duplicate_completions = 1,
            }
            r.finish();
            assert!(!r.ok, "counter {i}");
            assert_eq!(r.error_counters()[i].1, 1);
            assert!(r
                .error
                .as_deref()
                .unwrap()
                .starts_with(r.error_counters()[i].0));
        }
    }

    #[test]
    fn derived_fields() {
        let c = cfg(&["--payload", "1000"]);
        let mut r = RunReport::new(&c);
        r.throughput.messages = 2000;
        r.set_throughput(Duration::from_secs(2));
        assert_eq!(r.throughput.elapsed_seconds, 2.0);
        assert_eq!(r.throughput.payload_roundtrip_bytes, 4_000_000);
        assert_eq!(r.throughput.roundtrips_per_second, 1000.0);
        assert!(
            (r.throughput.payload_mib_per_second - 4_000_000.0 / 1_048_576.0 / 2.0).abs() < 1e-12
        );
        r.set_throughput(Duration::ZERO);
        assert_eq!(r.throughput.roundtrips_per_second, 0.0);

        r.set_cpu(Duration::from_millis(500), Duration::from_secs(2));
        assert_eq!(
            (
                r.cpu.cpu_seconds,
                r.cpu.cpu_elapsed_seconds,
                r.cpu.cpu_percent
            ),
            (0.5, 2.0, 25.0)
        );

        let mut rtt = crate::stats::Rtt::new();
        rtt.record(Duration::from_micros(10));
        r.set_rtt(&rtt.summary());
        assert_eq!((r.rtt.rtt_samples, r.rtt.rtt_observations), (1, 1));
        assert_eq!(r.rtt_extra.rtt_max_us, Some(10.0));
        assert!(r.rtt.rtt_p50_us.is_some() && r.rtt_extra.rtt_p999_us.is_some());

        let d = UdpCounters {
            rcvbuf_errors: Some(5),
            in_errors: Some(6),
            ..Default::default()
        };
        r.set_snmp(Some(&d));
        assert_eq!(
            (
                r.drops.snmp_udp_rcvbuf_errors,
                r.drops.snmp_udp_sndbuf_errors,
                r.drops.snmp_udp_in_errors
            ),
            (Some(5), None, Some(6))
        );
        r.set_snmp(None);
        assert_eq!(r.drops.snmp_udp_in_errors, None);
    }

    #[test]
    fn config_is_echoed_and_server_side_is_null_with_connect() {
        let c = cfg(&[
            "--io-model",
            "sharded",
            "--io-threads",
            "4",
            "--server-lanes",
            "2",
            "--udp-server-receive-buffer",
            "1000000",
            "--loss-timeout",
            "50",
            "--work",
            "7",
        ]);
        let r = RunReport::new(&c);
        assert_eq!(r.config.io_contexts, Some(4));
        assert_eq!(r.config.server_io_lanes, Some(2));
        assert_eq!(r.config.handler_work, Some(7));
        assert_eq!(
            r.setup.udp_server_receive_buffer_requested_bytes,
            Some(1_000_000)
        );
        assert_eq!(r.setup.loss_timeout_ms, Some(50));
        assert_eq!(r.role, Some(Role::Loopback));
        assert_eq!(r.checks.server_send_rejections, Some(0));

        let d = RunReport::new(&cfg(&[]));
        assert_eq!(
            d.setup.udp_server_receive_buffer_requested_bytes,
            Some(4 << 20)
        );
        assert_eq!(d.setup.loss_timeout_ms, None);

        let client = RunReport::new(&cfg(&["--connect", "10.1.2.3:7000"]));
        assert_eq!(client.role, Some(Role::Client));
        assert_eq!(client.connect.as_deref(), Some("10.1.2.3:7000"));
        assert_eq!(client.config.handler_work, None);
        assert_eq!(client.config.server_io_lanes, None);
        assert_eq!(client.checks.server_send_rejections, None);
        assert_eq!(client.setup.udp_server_receive_buffer_requested_bytes, None);
        assert_eq!(client.config.io_threads, Some(1));
    }

    #[test]
    fn bulk_fields_only_where_they_apply() {
        // A UDP line has none of them; an echo over rudp or kcp has them null.
        let udp = RunReport::new(&cfg(&[]));
        let v: serde_json::Value = serde_json::from_str(&udp.to_json_line()).unwrap();
        for f in [
            "transfer_bytes",
            "goodput_bytes_per_second",
            "bulk_channel",
            "kcp_window",
        ] {
            assert!(v.get(f).is_none(), "{f} in a UDP line");
        }
        let echo = RunReport::new(&cfg(&["--protocol", "kcp"]));
        let v: serde_json::Value = serde_json::from_str(&echo.to_json_line()).unwrap();
        assert_eq!(v["transfer_bytes"], serde_json::Value::Null);
        assert_eq!(v["goodput_bytes_per_second"], serde_json::Value::Null);
        assert_eq!(v["kcp_window"], 128);
        assert!(v.get("bulk_channel").is_none());
        let rudp = RunReport::new(&cfg(&["--protocol", "rudp", "--bulk-channel"]));
        assert_eq!(rudp.peer.bulk_channel, Some(true));
        assert_eq!(rudp.peer.kcp_window, None);
    }

    #[test]
    fn bulk_throughput_is_goodput_of_whole_transfers() {
        let c = cfg(&["--protocol", "rudp", "--transfer", "1048576"]);
        let mut r = RunReport::new(&c);
        assert_eq!(r.config.payload_bytes, Some(1 << 20));
        assert_eq!(r.bulk.transfer_bytes, Some(Some(1 << 20)));
        r.throughput.messages = 10;
        r.set_throughput(Duration::from_secs(4));
        assert_eq!(r.bulk.goodput_bytes_per_second, Some(Some(2_621_440.0)));
        // Each round trip: the transfer and its 16-byte receipt.
        assert_eq!(r.throughput.payload_roundtrip_bytes, 10 * ((1 << 20) + 16));
        assert_eq!(r.throughput.roundtrips_per_second, 2.5);
        r.set_throughput(Duration::ZERO);
        assert_eq!(r.bulk.goodput_bytes_per_second, Some(Some(0.0)));
        // The echo's throughput is unchanged: both directions of the payload.
        let mut e = RunReport::new(&cfg(&["--protocol", "rudp", "--payload", "1000"]));
        e.throughput.messages = 10;
        e.set_throughput(Duration::from_secs(1));
        assert_eq!(e.throughput.payload_roundtrip_bytes, 20_000);
        assert_eq!(e.bulk.goodput_bytes_per_second, Some(None));
    }
}
