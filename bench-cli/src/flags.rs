//! Command line: parsed with lexopt into [`RawArgs`] (pure syntax, no side
//! effects), then validated into one [`Command`].
//!
//! ```text
//! keel-bench [RUN FLAGS]                      one loopback run, one JSON line
//! keel-bench --connect ADDR:PORT [RUN FLAGS]  clients only, against `serve`
//! keel-bench serve --bind ADDR:PORT [SERVE FLAGS]
//! keel-bench report FILES... --out DIR
//! keel-bench --help
//! ```
//!
//! The run flags, their defaults and ranges are those of arknet's loopback
//! benchmark (UDP part), plus keel's additions; [`FLAGS`] is the single table
//! that drives validation scope and `--help`. Rules:
//!
//! * every flag takes exactly one value (`--flag V` or `--flag=V`), except
//!   the switches `--sockperf` and `--help`/`-h`;
//! * integers are whole tokens of ASCII digits: no sign (not even `+`), no
//!   spaces, no trailing junk, no underscores or suffixes;
//! * durations are finite decimal numbers (`1`, `0.25`, `2.5e1`): no sign,
//!   no `inf`/`nan`, nothing that overflows to infinity;
//! * a value that starts with `--` is taken as a forgotten value
//!   (`--clients --window 4` reports `--clients: missing value`);
//! * a flag given twice is an error (never "last wins"), so a script that
//!   appends an override cannot silently run something else than it reads;
//! * unknown flags, flags of another subcommand and stray arguments are
//!   errors, never ignored.
//!
//! Every error is a [`FlagError`] naming the flag and what it accepts.

use std::ffi::OsString;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use keel_udp::Impairment;

/// Largest UDP payload over IPv4 (65,535 − 20 IP − 8 UDP).
pub const MAX_PAYLOAD_IPV4: u64 = 65_507;
/// Largest UDP payload over IPv6 without jumbograms (65,535 − 8 UDP).
pub const MAX_PAYLOAD_IPV6: u64 = 65_527;
/// Smallest payload: the 16-byte message header.
pub const MIN_PAYLOAD: u64 = 16;
/// Cap on `clients × window × payload`: bytes in flight at once.
pub const MAX_IN_FLIGHT_BYTES: u64 = 256 * 1024 * 1024;

/// Default `--payload`.
pub const DEFAULT_PAYLOAD: u64 = 1024;
/// Default `--clients`.
pub const DEFAULT_CLIENTS: u32 = 1;
/// Default `--window`.
pub const DEFAULT_WINDOW: u32 = 1;
/// Default `--seconds`.
pub const DEFAULT_SECONDS: f64 = 1.0;
/// Default `--warmup`.
pub const DEFAULT_WARMUP: f64 = 0.25;
/// Default `--io-threads`.
pub const DEFAULT_IO_THREADS: u32 = 1;
/// Default `--work`.
pub const DEFAULT_WORK: u64 = 0;
/// Default `--server-lanes` (arknet's shape: one socket, one lane).
pub const DEFAULT_SERVER_LANES: u32 = 1;
/// Default `--batch`: datagrams per recvmmsg/sendmmsg call.
pub const DEFAULT_BATCH: u32 = 64;
/// Default `serve --idle-timeout`, seconds. The echo server keeps no state
/// per session, so ending an idle one never changes a measurement (a peer
/// that comes back gets a new session with its next datagram); 30 s is far
/// longer than any pause of a keel-bench or sockperf client during a run,
/// and short enough that one-off or spoofed sources give their slots back
/// within half a minute instead of holding them forever.
pub const DEFAULT_SERVE_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest `serve --idle-timeout`, seconds.
pub const MAX_IDLE_TIMEOUT_SECS: f64 = 3600.0;
/// Default `serve --max-sessions`: keel-udp's default, per receive lane.
pub const DEFAULT_MAX_SESSIONS: u32 = 65_536;
/// Largest `serve --max-sessions` (sessions per lane; the table grows as
/// peers arrive, so the bound costs nothing until it is used).
pub const MAX_MAX_SESSIONS: u32 = 1 << 24;

/// A rejected command line: which flag, and what was wrong with it.
///
/// Displays as `FLAG: MESSAGE`, e.g.
/// `--clients: expected an integer in 1..=1024, got "0"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagError {
    /// The flag as written on the command line (`--clients`), or the
    /// offending argument for stray positionals, or the combination
    /// (`--clients x --window x --payload`) for cross-checks.
    pub flag: String,
    /// What is accepted, and what was given.
    pub message: String,
}

impl FlagError {
    fn new(flag: impl Into<String>, message: impl Into<String>) -> Self {
        FlagError {
            flag: flag.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}

impl std::error::Error for FlagError {}

/// Transport under test. keel-bench measures UDP only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// UDP datagrams.
    #[default]
    Udp,
}

impl Protocol {
    /// Name as written on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        "udp"
    }
}

/// Address family of the loopback (or `--connect`/`--bind`) address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AddressFamily {
    /// IPv4, loopback 127.0.0.1.
    #[default]
    Ipv4,
    /// IPv6, loopback ::1.
    Ipv6,
}

impl AddressFamily {
    /// Name as written on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            AddressFamily::Ipv4 => "ipv4",
            AddressFamily::Ipv6 => "ipv6",
        }
    }

    /// The loopback address of this family.
    pub fn loopback(self) -> IpAddr {
        match self {
            AddressFamily::Ipv4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
            AddressFamily::Ipv6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
        }
    }

    /// Largest UDP payload of this family.
    pub fn max_payload(self) -> u64 {
        match self {
            AddressFamily::Ipv4 => MAX_PAYLOAD_IPV4,
            AddressFamily::Ipv6 => MAX_PAYLOAD_IPV6,
        }
    }

    /// The family of an address.
    pub fn of(addr: &SocketAddr) -> AddressFamily {
        match addr {
            SocketAddr::V4(_) => AddressFamily::Ipv4,
            SocketAddr::V6(_) => AddressFamily::Ipv6,
        }
    }
}

/// How IO threads are organised (arknet's `owned` has no keel equivalent and
/// is rejected).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IoModel {
    /// One IO context run by `io_threads` threads.
    #[default]
    Shared,
    /// `io_threads` contexts with one thread each.
    Sharded,
}

impl IoModel {
    /// Name as written on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            IoModel::Shared => "shared",
            IoModel::Sharded => "sharded",
        }
    }

    /// `io_contexts` of the report: 1 for shared, `io_threads` for sharded.
    pub fn io_contexts(self, io_threads: u32) -> u32 {
        match self {
            IoModel::Shared => 1,
            IoModel::Sharded => io_threads,
        }
    }
}

/// `--lane-steering`: how datagrams spread over the server's lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LaneSteeringChoice {
    /// `port` for a sharded run with several lanes, `hash` otherwise.
    #[default]
    Auto,
    /// The kernel hashes the peer's address to a lane.
    Hash,
    /// Lane = peer port % lanes; the run binds each client to a port whose
    /// lane is on the client's own context.
    Port,
}

/// `serve --full-policy`: what a lane does with a new peer when its session
/// table is full (keel-udp's `FullPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FullPolicyChoice {
    /// Drop the new peer's datagrams (counted in `sessions_refused`) until
    /// a session ends; established peers are never disturbed.
    #[default]
    Refuse,
    /// End the idlest of a few sampled sessions (`sessions_evicted`) and
    /// admit the new peer.
    EvictIdlest,
}

impl FullPolicyChoice {
    /// Name as written on the command line and in the serve summary.
    pub fn as_str(self) -> &'static str {
        match self {
            FullPolicyChoice::Refuse => "refuse",
            FullPolicyChoice::EvictIdlest => "evict-idlest",
        }
    }
}

/// A validated benchmark run (`keel-bench [flags]`, or clients only with
/// `--connect`). `Default` is the reference table's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// `--protocol`.
    pub protocol: Protocol,
    /// `--address-family`; with `--connect`, the family of that address.
    pub address_family: AddressFamily,
    /// `--payload`: bytes per datagram, header included.
    pub payload: u64,
    /// `--clients`: client sockets.
    pub clients: u32,
    /// `--window`: datagrams in flight per client.
    pub window: u32,
    /// `--seconds`: measured phase.
    pub seconds: f64,
    /// `--warmup`: warm-up phase (0 skips it).
    pub warmup: f64,
    /// `--io-model`.
    pub io_model: IoModel,
    /// `--io-threads`.
    pub io_threads: u32,
    /// `--work`: xorshift rounds the server runs per echo.
    pub work: u64,
    /// `--udp-server-receive-buffer`: the server socket's receive buffer
    /// request in bytes; `None` = the same 4 MiB request as every socket.
    pub udp_server_receive_buffer: Option<u64>,
    /// `--server-lanes`: server receive lanes (sockets on one port).
    pub server_lanes: u32,
    /// `--batch`: datagrams per receive/send system call.
    pub batch: u32,
    /// `--loss-timeout`: milliseconds after which an unanswered datagram is
    /// counted lost and its window slot released; `None` = off (arknet's
    /// behaviour: a lost datagram holds its slot until the drain ends).
    pub loss_timeout_ms: Option<u64>,
    /// `--connect`: drive clients only, against a `keel-bench serve` there.
    pub connect: Option<SocketAddr>,
    /// `--impair`: link conditioner on each client's send path (client `i`
    /// uses seed + `i`); `None` = off. Boxed: rarely set, and it would
    /// double the size of every [`Command`].
    pub impair: Option<Box<Impairment>>,
    /// `--impair-server`: link conditioner on the server's send path (its
    /// echoes; lane `i` uses stream `i` of the seed); `None` = off.
    pub impair_server: Option<Box<Impairment>>,
    /// `--lane-steering`.
    pub lane_steering: LaneSteeringChoice,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            protocol: Protocol::Udp,
            address_family: AddressFamily::Ipv4,
            payload: DEFAULT_PAYLOAD,
            clients: DEFAULT_CLIENTS,
            window: DEFAULT_WINDOW,
            seconds: DEFAULT_SECONDS,
            warmup: DEFAULT_WARMUP,
            io_model: IoModel::Shared,
            io_threads: DEFAULT_IO_THREADS,
            work: DEFAULT_WORK,
            udp_server_receive_buffer: None,
            server_lanes: DEFAULT_SERVER_LANES,
            batch: DEFAULT_BATCH,
            loss_timeout_ms: None,
            connect: None,
            impair: None,
            impair_server: None,
            lane_steering: LaneSteeringChoice::Auto,
        }
    }
}

impl RunConfig {
    /// `io_contexts` of the report.
    pub fn io_contexts(&self) -> u32 {
        self.io_model.io_contexts(self.io_threads)
    }

    /// The server address clients send to: `--connect`, or the loopback
    /// address of the family with port 0 (to be bound).
    pub fn server_addr(&self) -> SocketAddr {
        self.connect
            .unwrap_or_else(|| SocketAddr::new(self.address_family.loopback(), 0))
    }
}

/// A validated `keel-bench serve`: the echo server alone.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    /// `--bind`: address and port to serve on (port 0 picks a free port).
    pub bind: SocketAddr,
    /// `--io-model`.
    pub io_model: IoModel,
    /// `--io-threads`.
    pub io_threads: u32,
    /// `--server-lanes`.
    pub server_lanes: u32,
    /// `--seconds`: serve this long; `None` = until interrupted.
    pub seconds: Option<f64>,
    /// `--sockperf`: answer sockperf's ping-pong client instead of
    /// keel-bench clients.
    pub sockperf: bool,
    /// `--work`.
    pub work: u64,
    /// `--batch`.
    pub batch: u32,
    /// `--udp-server-receive-buffer`.
    pub udp_server_receive_buffer: Option<u64>,
    /// `--lane-steering` (`auto` is `hash` here: remote peers pick their
    /// own ports).
    pub lane_steering: LaneSteeringChoice,
    /// `--idle-timeout`: a session without a datagram for this long ends;
    /// `None` (`off`) keeps sessions until the server stops.
    pub idle_timeout: Option<Duration>,
    /// `--max-sessions`: sessions per receive lane at most.
    pub max_sessions: u32,
    /// `--full-policy`: a new peer when the table is full.
    pub full_policy: FullPolicyChoice,
}

/// A validated `keel-bench report`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportConfig {
    /// JSON-lines files produced by runs.
    pub inputs: Vec<PathBuf>,
    /// `--out`: directory for the Markdown table and SVG charts.
    pub out: PathBuf,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// One run (loopback, or clients only with `--connect`).
    Run(RunConfig),
    /// The echo server alone.
    Serve(ServeConfig),
    /// Summarise result files.
    Report(ReportConfig),
    /// Print [`help_text`] and exit 0.
    Help,
}

/// Subcommand selected by the first argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Subcommand {
    /// No subcommand: a run.
    #[default]
    Run,
    /// `serve`.
    Serve,
    /// `report`.
    Report,
}

impl Subcommand {
    fn bit(self) -> u8 {
        match self {
            Subcommand::Run => RUN,
            Subcommand::Serve => SERVE,
            Subcommand::Report => REPORT,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Subcommand::Run => "keel-bench (run)",
            Subcommand::Serve => "keel-bench serve",
            Subcommand::Report => "keel-bench report",
        }
    }
}

const RUN: u8 = 1;
const SERVE: u8 = 2;
const REPORT: u8 = 4;

/// One row of the flag table: drives parsing scope and `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagSpec {
    /// Long name without the leading `--`.
    pub name: &'static str,
    /// Value placeholder for help; empty for a switch.
    pub value: &'static str,
    /// Default, as shown in help.
    pub default: &'static str,
    /// Accepted values, as shown in help and errors.
    pub accepted: &'static str,
    /// One-line meaning.
    pub help: &'static str,
    scope: u8,
}

impl FlagSpec {
    /// True for a flag that takes no value.
    pub fn is_switch(&self) -> bool {
        self.value.is_empty()
    }

    fn for_run(&self) -> bool {
        self.scope & RUN != 0
    }

    fn for_serve(&self) -> bool {
        self.scope & SERVE != 0
    }
}

const fn spec(
    name: &'static str,
    value: &'static str,
    default: &'static str,
    accepted: &'static str,
    help: &'static str,
    scope: u8,
) -> FlagSpec {
    FlagSpec {
        name,
        value,
        default,
        accepted,
        help,
        scope,
    }
}

/// What `--impair` and `--impair-server` accept.
pub const IMPAIR_ACCEPTED: &str = "off, or comma-separated KEY=VALUE (each key once, no spaces): \
loss=P, dup=P, reorder=P (P a probability such as 0.05, or 5%); delay=D, jitter=D (at most delay), \
reorder-delay=D (default 10ms; how long a reordered datagram is held back) (D such as 20ms, 1.5ms, \
500us or 0, at most 3600s); seed=N (default 0); limit=N datagrams (default 4096) and limit-bytes=N \
(default 16777216) held at most";

/// What `serve --idle-timeout` accepts.
pub const IDLE_TIMEOUT_ACCEPTED: &str =
    "finite, 0 < s <= 3600, or off (0 is not accepted: write off)";

/// Every flag keel-bench knows, in `--help` order.
pub const FLAGS: &[FlagSpec] = &[
    spec("protocol", "NAME", "udp", "udp (arknet's tcp is not supported)", "transport", RUN),
    spec("address-family", "FAMILY", "ipv4", "ipv4 (127.0.0.1), ipv6 (::1)", "loopback address family; with --connect, must match the address", RUN),
    spec("payload", "BYTES", "1024", "16..=65507 (ipv6: 16..=65527)", "bytes per datagram, 16-byte header included", RUN),
    spec("clients", "N", "1", "1..=1024", "client sockets, one each", RUN),
    spec("window", "N", "1", "1..=1024", "datagrams in flight per client (closed loop)", RUN),
    spec("seconds", "S", "1 (serve: until interrupted)", "finite, 0 < s <= 3600 (serve: <= 86400)", "measured phase (serve: how long to serve)", RUN | SERVE),
    spec("warmup", "S", "0.25", "finite, 0 <= s <= 3600 (0 skips)", "warm-up phase, not reported", RUN),
    spec("io-model", "MODEL", "shared", "shared (1 context, N threads), sharded (N contexts, 1 thread each); arknet's owned is not supported", "IO thread organisation", RUN | SERVE),
    spec("io-threads", "N", "1", "1..=64", "N of --io-model", RUN | SERVE),
    spec("work", "ROUNDS", "0", "0..=10000000", "xorshift64 rounds the server runs per echo, inside its receive lane", RUN | SERVE),
    spec("udp-server-receive-buffer", "BYTES", "none (the 4 MiB request every socket makes)", "1..=1073741824", "keel: receive buffer request of the server socket(s) only", RUN | SERVE),
    spec("lane-steering", "HOW", "auto", "auto, hash, port", "keel: how datagrams spread over --server-lanes: hash = the kernel's hash of the peer address; port = peer port % lanes, and each client binds a port whose lane runs on the client's own context (flows stay on one core); auto = port for --io-model sharded with several lanes, else hash", RUN | SERVE),
    spec("server-lanes", "N", "1", "1..=64", "keel: server receive lanes; N > 1 opens N SO_REUSEPORT sockets on one port, one serialized lane each", RUN | SERVE),
    spec("batch", "N", "64", "1..=1024", "keel: datagrams per receive/send system call (recvmmsg/sendmmsg); 1 = one per call", RUN | SERVE),
    spec("loss-timeout", "MS", "off", "1..=3600000", "keel: count a datagram unanswered after MS as lost and release its window slot (off: it holds the slot until the drain ends, as in arknet)", RUN),
    spec("impair", "SPEC", "off", IMPAIR_ACCEPTED, "keel: link conditioner on each client's send path, e.g. loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1 (client i uses seed+i); pair loss with --loss-timeout (longer than the delay it adds) and --warmup 0 to keep measuring: messages_sent = messages + udp_lost_messages + order_errors; duplicates show as unexpected_messages, reordering (and jitter) as order_errors", RUN),
    spec("impair-server", "SPEC", "off", IMPAIR_ACCEPTED, "keel: link conditioner on the server's send path (its echoes), same SPEC as --impair", RUN),
    spec("connect", "ADDR:PORT", "none (server in this process)", "IP:PORT literal, port 1..=65535 (e.g. 10.0.0.2:7000, [fd00::2]:7000)", "keel: clients only, against `keel-bench serve` at ADDR:PORT; server-side flags go to serve", RUN),
    spec("idle-timeout", "S", "30", IDLE_TIMEOUT_ACCEPTED, "serve: end a peer's session after S seconds without a datagram from it, so one-off or spoofed sources do not hold their slots of --max-sessions forever (30 s is far longer than any pause of a keel-bench or sockperf client during a run; the echo server keeps no state per session, and a peer that comes back gets a new one); off keeps every session until the server stops", SERVE),
    spec("max-sessions", "N", "65536", "1..=16777216", "serve: sessions (peer addresses) per receive lane at most; a new peer beyond it meets --full-policy", SERVE),
    spec("full-policy", "POLICY", "refuse", "refuse, evict-idlest", "serve: a new peer when the session table is full: refuse = drop its datagrams (sessions_refused) until an idle session times out, established peers are never disturbed; evict-idlest = end the idlest of a few sampled sessions (sessions_evicted) and admit the new peer", SERVE),
    spec("bind", "ADDR:PORT", "required", "IP:PORT literal (e.g. 0.0.0.0:7000, [::]:7000); port 0 picks a free port", "serve: address to serve on", SERVE),
    spec("sockperf", "", "off", "switch", "serve: answer sockperf's UDP ping-pong client (clear the client bit) instead of keel-bench clients", SERVE),
    spec("out", "DIR", "required", "directory path", "report: where the Markdown table and SVG charts go", REPORT),
    spec("help", "", "", "switch (also -h)", "print this help and exit 0", RUN | SERVE | REPORT),
];

/// Looks up a flag by its long name (without `--`).
pub fn find_flag(name: &str) -> Option<&'static FlagSpec> {
    FLAGS.iter().find(|f| f.name == name)
}

/// One flag occurrence as written, before validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFlag {
    /// Long name without `--` (always a [`FLAGS`] entry).
    pub name: &'static str,
    /// The value; `None` for a switch.
    pub value: Option<String>,
}

/// The command line split into subcommand, flags and positionals; only
/// syntax has been checked (known flag names, values present and UTF-8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawArgs {
    /// Subcommand (first argument `serve` or `report`; otherwise a run).
    pub subcommand: Subcommand,
    /// `--help` or `-h` was given.
    pub help: bool,
    /// Flags in command line order (switches have no value).
    pub flags: Vec<RawFlag>,
    /// Other arguments (input files of `report`).
    pub positionals: Vec<String>,
}

fn missing_value(flag: &str, spec: &FlagSpec) -> FlagError {
    FlagError::new(
        format!("--{flag}"),
        format!("missing value (expected {})", spec.accepted),
    )
}

fn utf8(flag: &str, value: OsString) -> Result<String, FlagError> {
    value.into_string().map_err(|v| {
        FlagError::new(
            flag,
            format!("value is not valid UTF-8: {:?}", v.to_string_lossy()),
        )
    })
}

/// Splits the arguments (without the program name) into [`RawArgs`].
/// Pure: reads nothing but `args`.
pub fn parse_raw<I>(args: I) -> Result<RawArgs, FlagError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    enum Tok {
        Long(String),
        Short(char),
        Value(OsString),
    }
    let mut parser = lexopt::Parser::from_args(args);
    let mut raw = RawArgs::default();
    let mut first = true;
    loop {
        let tok = match parser.next() {
            Ok(None) => break,
            Ok(Some(lexopt::Arg::Long(name))) => Tok::Long(name.to_owned()),
            Ok(Some(lexopt::Arg::Short(c))) => Tok::Short(c),
            Ok(Some(lexopt::Arg::Value(v))) => Tok::Value(v),
            Err(e) => return Err(FlagError::new("arguments", e.to_string())),
        };
        match tok {
            Tok::Short('h') => raw.help = true,
            Tok::Short(c) => {
                return Err(FlagError::new(
                    format!("-{c}"),
                    "unknown flag (keel-bench has only long --flags and -h; see --help)",
                ))
            }
            Tok::Long(name) => {
                let Some(spec) = find_flag(&name) else {
                    return Err(FlagError::new(
                        format!("--{name}"),
                        "unknown flag (see --help for the flags keel-bench accepts)",
                    ));
                };
                let flag = format!("--{}", spec.name);
                if spec.is_switch() {
                    if let Some(v) = parser.optional_value() {
                        return Err(FlagError::new(
                            flag,
                            format!("takes no value, got {:?}", v.to_string_lossy()),
                        ));
                    }
                    if spec.name == "help" {
                        raw.help = true;
                    } else {
                        raw.flags.push(RawFlag {
                            name: spec.name,
                            value: None,
                        });
                    }
                } else {
                    let value = parser.value().map_err(|_| missing_value(spec.name, spec))?;
                    let value = utf8(&flag, value)?;
                    if value.starts_with("--") && value.len() > 2 {
                        return Err(missing_value(spec.name, spec));
                    }
                    raw.flags.push(RawFlag {
                        name: spec.name,
                        value: Some(value),
                    });
                }
            }
            Tok::Value(v) => {
                let v = utf8("argument", v)?;
                match v.as_str() {
                    "serve" if first => raw.subcommand = Subcommand::Serve,
                    "report" if first => raw.subcommand = Subcommand::Report,
                    _ => raw.positionals.push(v),
                }
            }
        }
        first = false;
    }
    Ok(raw)
}

/// Parses and validates the arguments (without the program name).
pub fn parse<I>(args: I) -> Result<Command, FlagError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    validate(parse_raw(args)?)
}

/// Validates [`RawArgs`] into a [`Command`]: values, ranges, scope of each
/// flag, repeats, and the cross-checks between flags.
pub fn validate(raw: RawArgs) -> Result<Command, FlagError> {
    if raw.help {
        return Ok(Command::Help);
    }
    let sub = raw.subcommand;
    // Scope and repeats first, so the later passes can assume one value each.
    for (i, f) in raw.flags.iter().enumerate() {
        let spec = find_flag(f.name).expect("raw flags come from the table");
        if spec.scope & sub.bit() == 0 {
            let owners: Vec<&str> = [(RUN, "a run"), (SERVE, "serve"), (REPORT, "report")]
                .iter()
                .filter(|(bit, _)| spec.scope & bit != 0)
                .map(|(_, n)| *n)
                .collect();
            return Err(FlagError::new(
                format!("--{}", f.name),
                format!(
                    "not accepted by {} (it belongs to {})",
                    sub.name(),
                    owners.join(" and ")
                ),
            ));
        }
        if let Some(prev) = raw.flags[..i].iter().find(|p| p.name == f.name) {
            return Err(FlagError::new(
                format!("--{}", f.name),
                format!(
                    "given more than once ({:?} then {:?}); each flag takes one value",
                    prev.value.as_deref().unwrap_or(""),
                    f.value.as_deref().unwrap_or("")
                ),
            ));
        }
    }
    match sub {
        Subcommand::Run => validate_run(&raw).map(Command::Run),
        Subcommand::Serve => validate_serve(&raw).map(Command::Serve),
        Subcommand::Report => validate_report(&raw).map(Command::Report),
    }
}

fn value_of<'a>(raw: &'a RawArgs, name: &str) -> Option<&'a str> {
    raw.flags
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| f.value.as_deref())
}

fn has(raw: &RawArgs, name: &str) -> bool {
    raw.flags.iter().any(|f| f.name == name)
}

fn no_positionals(raw: &RawArgs) -> Result<(), FlagError> {
    match raw.positionals.first() {
        None => Ok(()),
        Some(p) => Err(FlagError::new(
            // An empty argument (`keel-bench ""`) would otherwise make the
            // error read ": unexpected argument", naming nothing.
            if p.is_empty() {
                "\"\" (an empty argument)".to_string()
            } else {
                p.clone()
            },
            format!(
                "unexpected argument for {} (subcommands serve and report come first; \
                 everything else is --flag VALUE)",
                raw.subcommand.name()
            ),
        )),
    }
}

/// A whole-token unsigned integer in `min..=max`.
pub fn parse_uint(flag: &str, value: &str, min: u64, max: u64) -> Result<u64, FlagError> {
    let err = || {
        FlagError::new(
            format!("--{flag}"),
            format!("expected an integer in {min}..={max}, got {value:?}"),
        )
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    let n: u64 = value.parse().map_err(|_| err())?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(err())
    }
}

fn parse_u32(flag: &str, value: &str, min: u32, max: u32) -> Result<u32, FlagError> {
    let n = parse_uint(flag, value, min.into(), max.into())?;
    Ok(u32::try_from(n).expect("range fits u32"))
}

/// True for an unsigned decimal: `D+[.D*]` or `.D+`, optional `e[+-]D+`.
fn is_plain_decimal(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = digits(int)
        && frac.is_none_or(digits)
        && (!int.is_empty() || frac.is_some_and(|f| !f.is_empty()));
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

/// A finite, unsigned decimal number of seconds `s` with `0 < s <= max`,
/// or `0 <= s <= max` when `zero_ok`.
pub fn parse_seconds(flag: &str, value: &str, zero_ok: bool, max: f64) -> Result<f64, FlagError> {
    let op = if zero_ok { "<=" } else { "<" };
    let err = || {
        FlagError::new(
            format!("--{flag}"),
            format!("expected a finite number of seconds in 0 {op} s <= {max}, got {value:?}"),
        )
    };
    if !is_plain_decimal(value) {
        return Err(err());
    }
    let s: f64 = value.parse().map_err(|_| err())?;
    let low_ok = if zero_ok { s >= 0.0 } else { s > 0.0 };
    if s.is_finite() && low_ok && s <= max {
        Ok(s)
    } else {
        Err(err())
    }
}

fn parse_addr(flag: &str, value: &str, port_zero_ok: bool) -> Result<SocketAddr, FlagError> {
    let accepted = if port_zero_ok {
        "an IP:PORT literal such as 0.0.0.0:7000 or [::]:7000"
    } else {
        "an IP:PORT literal with port 1..=65535, such as 10.0.0.2:7000 or [fd00::2]:7000"
    };
    let addr: SocketAddr = value.parse().map_err(|_| {
        FlagError::new(
            format!("--{flag}"),
            format!("expected {accepted} (no host names), got {value:?}"),
        )
    })?;
    if addr.port() == 0 && !port_zero_ok {
        return Err(FlagError::new(
            format!("--{flag}"),
            format!("expected {accepted}, got port 0 in {value:?}"),
        ));
    }
    Ok(addr)
}

fn parse_io_model(value: &str) -> Result<IoModel, FlagError> {
    match value {
        "shared" => Ok(IoModel::Shared),
        "sharded" => Ok(IoModel::Sharded),
        "owned" => Err(FlagError::new(
            "--io-model",
            "expected shared or sharded, got \"owned\": keel supports shared and sharded; \
             arknet's owned model has no keel equivalent",
        )),
        _ => Err(FlagError::new(
            "--io-model",
            format!("expected shared or sharded, got {value:?}"),
        )),
    }
}

fn parse_work(value: &str) -> Result<u64, FlagError> {
    parse_uint("work", value, 0, 10_000_000)
}

fn parse_lanes(value: &str) -> Result<u32, FlagError> {
    parse_u32("server-lanes", value, 1, 64)
}

fn parse_batch(value: &str) -> Result<u32, FlagError> {
    parse_u32("batch", value, 1, 1024)
}

fn parse_threads(value: &str) -> Result<u32, FlagError> {
    parse_u32("io-threads", value, 1, 64)
}

fn parse_server_rcvbuf(value: &str) -> Result<u64, FlagError> {
    parse_uint("udp-server-receive-buffer", value, 1, 1 << 30)
}

/// A link conditioner spec ([`Impairment`]'s textual shape); `off` (or an
/// impairment that does nothing) is `None`.
pub fn parse_impair(flag: &str, value: &str) -> Result<Option<Box<Impairment>>, FlagError> {
    let imp: Impairment = value.parse().map_err(|e: keel_udp::ImpairmentError| {
        FlagError::new(format!("--{flag}"), e.to_string())
    })?;
    Ok((!imp.is_off()).then(|| Box::new(imp)))
}

fn parse_lane_steering(value: &str) -> Result<LaneSteeringChoice, FlagError> {
    match value {
        "auto" => Ok(LaneSteeringChoice::Auto),
        "hash" => Ok(LaneSteeringChoice::Hash),
        "port" => Ok(LaneSteeringChoice::Port),
        _ => Err(FlagError::new(
            "--lane-steering",
            format!("expected auto, hash or port, got {value:?}"),
        )),
    }
}

/// `--idle-timeout`: `off`, or seconds in `0 < s <= 3600`.
fn parse_idle_timeout(value: &str) -> Result<Option<Duration>, FlagError> {
    if value == "off" {
        return Ok(None);
    }
    let s = parse_seconds("idle-timeout", value, false, MAX_IDLE_TIMEOUT_SECS).map_err(|_| {
        FlagError::new(
            "--idle-timeout",
            format!(
                "expected off or a finite number of seconds in 0 < s <= {MAX_IDLE_TIMEOUT_SECS}{}, \
                 got {value:?}",
                if value.parse::<f64>().is_ok_and(|s| s == 0.0) {
                    " (0 is not accepted: write off to turn the idle timeout off)"
                } else {
                    ""
                }
            ),
        )
    })?;
    // At least a microsecond: keel rejects a zero timeout, and a value
    // such as 1e-300 would round to one.
    Ok(Some(
        Duration::from_secs_f64(s).max(Duration::from_micros(1)),
    ))
}

fn parse_full_policy(value: &str) -> Result<FullPolicyChoice, FlagError> {
    match value {
        "refuse" => Ok(FullPolicyChoice::Refuse),
        "evict-idlest" => Ok(FullPolicyChoice::EvictIdlest),
        _ => Err(FlagError::new(
            "--full-policy",
            format!("expected refuse or evict-idlest, got {value:?}"),
        )),
    }
}

fn validate_run(raw: &RawArgs) -> Result<RunConfig, FlagError> {
    no_positionals(raw)?;
    let mut cfg = RunConfig::default();
    let mut family_given = false;
    for f in &raw.flags {
        let v = f.value.as_deref().unwrap_or("");
        match f.name {
            "protocol" => {
                if v != "udp" {
                    return Err(FlagError::new(
                        "--protocol",
                        format!(
                            "expected udp, got {v:?}: keel-bench supports only udp \
                             (the UDP part of arknet's benchmark)"
                        ),
                    ));
                }
                cfg.protocol = Protocol::Udp;
            }
            "address-family" => {
                family_given = true;
                cfg.address_family = match v {
                    "ipv4" => AddressFamily::Ipv4,
                    "ipv6" => AddressFamily::Ipv6,
                    _ => {
                        return Err(FlagError::new(
                            "--address-family",
                            format!("expected ipv4 or ipv6, got {v:?}"),
                        ))
                    }
                };
            }
            "payload" => {
                cfg.payload =
                    parse_uint("payload", v, MIN_PAYLOAD, MAX_PAYLOAD_IPV6).map_err(|_| {
                        FlagError::new(
                            "--payload",
                            format!(
                                "expected an integer in {MIN_PAYLOAD}..={MAX_PAYLOAD_IPV4} \
                                 (ipv6: {MIN_PAYLOAD}..={MAX_PAYLOAD_IPV6}), got {v:?}"
                            ),
                        )
                    })?
            }
            "clients" => cfg.clients = parse_u32("clients", v, 1, 1024)?,
            "window" => cfg.window = parse_u32("window", v, 1, 1024)?,
            "seconds" => cfg.seconds = parse_seconds("seconds", v, false, 3600.0)?,
            "warmup" => cfg.warmup = parse_seconds("warmup", v, true, 3600.0)?,
            "io-model" => cfg.io_model = parse_io_model(v)?,
            "io-threads" => cfg.io_threads = parse_threads(v)?,
            "work" => cfg.work = parse_work(v)?,
            "udp-server-receive-buffer" => {
                cfg.udp_server_receive_buffer = Some(parse_server_rcvbuf(v)?)
            }
            "server-lanes" => cfg.server_lanes = parse_lanes(v)?,
            "lane-steering" => cfg.lane_steering = parse_lane_steering(v)?,
            "batch" => cfg.batch = parse_batch(v)?,
            "loss-timeout" => {
                cfg.loss_timeout_ms = Some(parse_uint("loss-timeout", v, 1, 3_600_000)?)
            }
            "connect" => cfg.connect = Some(parse_addr("connect", v, false)?),
            "impair" => cfg.impair = parse_impair("impair", v)?,
            "impair-server" => cfg.impair_server = parse_impair("impair-server", v)?,
            other => unreachable!("flag --{other} is not in the run scope"),
        }
    }

    if let Some(addr) = cfg.connect {
        let family = AddressFamily::of(&addr);
        if family_given && family != cfg.address_family {
            return Err(FlagError::new(
                "--address-family",
                format!(
                    "{} contradicts --connect {addr} ({}); leave it out or make them agree",
                    cfg.address_family.as_str(),
                    family.as_str()
                ),
            ));
        }
        cfg.address_family = family;
        if has(raw, "impair-server") {
            return Err(FlagError::new(
                "--impair-server",
                "impairs the in-process server's sends, and --connect runs no server; \
                 use --impair to impair the clients' sends instead",
            ));
        }
        for server_side in [
            "work",
            "server-lanes",
            "udp-server-receive-buffer",
            "lane-steering",
        ] {
            if has(raw, server_side) {
                return Err(FlagError::new(
                    format!("--{server_side}"),
                    "configures the server, which --connect does not run; \
                     pass it to `keel-bench serve` instead",
                ));
            }
        }
    }

    let max = cfg.address_family.max_payload();
    if cfg.payload > max {
        return Err(FlagError::new(
            "--payload",
            format!(
                "expected an integer in {MIN_PAYLOAD}..={max} for {}, got \"{}\"",
                cfg.address_family.as_str(),
                cfg.payload
            ),
        ));
    }

    let in_flight = u64::from(cfg.clients) * u64::from(cfg.window) * cfg.payload;
    if in_flight > MAX_IN_FLIGHT_BYTES {
        return Err(FlagError::new(
            "--clients x --window x --payload",
            format!(
                "{} x {} x {} = {in_flight} bytes in flight, more than the \
                 {MAX_IN_FLIGHT_BYTES} (256 MiB) allowed",
                cfg.clients, cfg.window, cfg.payload
            ),
        ));
    }
    Ok(cfg)
}

fn validate_serve(raw: &RawArgs) -> Result<ServeConfig, FlagError> {
    no_positionals(raw)?;
    let Some(bind) = value_of(raw, "bind") else {
        return Err(FlagError::new(
            "--bind",
            "required by serve: an IP:PORT literal such as 0.0.0.0:7000 or [::]:7000",
        ));
    };
    let mut cfg = ServeConfig {
        bind: parse_addr("bind", bind, true)?,
        io_model: IoModel::Shared,
        io_threads: DEFAULT_IO_THREADS,
        server_lanes: DEFAULT_SERVER_LANES,
        seconds: None,
        sockperf: false,
        work: DEFAULT_WORK,
        batch: DEFAULT_BATCH,
        udp_server_receive_buffer: None,
        lane_steering: LaneSteeringChoice::Auto,
        idle_timeout: Some(DEFAULT_SERVE_IDLE_TIMEOUT),
        max_sessions: DEFAULT_MAX_SESSIONS,
        full_policy: FullPolicyChoice::Refuse,
    };
    for f in &raw.flags {
        let v = f.value.as_deref().unwrap_or("");
        match f.name {
            "bind" => {}
            "io-model" => cfg.io_model = parse_io_model(v)?,
            "io-threads" => cfg.io_threads = parse_threads(v)?,
            "server-lanes" => cfg.server_lanes = parse_lanes(v)?,
            "lane-steering" => cfg.lane_steering = parse_lane_steering(v)?,
            "seconds" => cfg.seconds = Some(parse_seconds("seconds", v, false, 86_400.0)?),
            "sockperf" => cfg.sockperf = true,
            "work" => cfg.work = parse_work(v)?,
            "batch" => cfg.batch = parse_batch(v)?,
            "udp-server-receive-buffer" => {
                cfg.udp_server_receive_buffer = Some(parse_server_rcvbuf(v)?)
            }
            "idle-timeout" => cfg.idle_timeout = parse_idle_timeout(v)?,
            "max-sessions" => cfg.max_sessions = parse_u32("max-sessions", v, 1, MAX_MAX_SESSIONS)?,
            "full-policy" => cfg.full_policy = parse_full_policy(v)?,
            other => unreachable!("flag --{other} is not in the serve scope"),
        }
    }
    Ok(cfg)
}

fn validate_report(raw: &RawArgs) -> Result<ReportConfig, FlagError> {
    if raw.positionals.is_empty() {
        return Err(FlagError::new(
            "FILES",
            "report needs at least one result file (JSON lines written by runs)",
        ));
    }
    let Some(out) = value_of(raw, "out") else {
        return Err(FlagError::new(
            "--out",
            "required by report: the directory for the table and charts",
        ));
    };
    if out.is_empty() {
        return Err(FlagError::new(
            "--out",
            "expected a directory path, got \"\"",
        ));
    }
    Ok(ReportConfig {
        inputs: raw.positionals.iter().map(PathBuf::from).collect(),
        out: PathBuf::from(out),
    })
}

/// The `--help` text: usage, every flag with its default and accepted
/// values, the differences from arknet, and the exit codes.
pub fn help_text() -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    s.push_str(
        "keel-bench: UDP loopback benchmark on keel, a drop-in for the UDP part of \
         arknet's loopback benchmark\n\
         \n\
         USAGE:\n  \
         keel-bench [RUN FLAGS]                       one run in this process, one JSON line on stdout\n  \
         keel-bench --connect ADDR:PORT [RUN FLAGS]   clients only, against `keel-bench serve`\n  \
         keel-bench serve --bind ADDR:PORT [--io-model M] [--io-threads N] [--server-lanes N]\n                   \
         [--seconds S] [--work R] [--batch N] [--udp-server-receive-buffer B] [--sockperf]\n                   \
         [--idle-timeout S|off] [--max-sessions N] [--full-policy refuse|evict-idlest]\n  \
         keel-bench report FILES... --out DIR\n  \
         keel-bench --help\n\
         \n\
         Every flag takes exactly one value (--flag V or --flag=V) except the switches \
         --sockperf and --help.\nIntegers are whole digit tokens (no sign, spaces or suffix); \
         seconds are finite decimals.\nA flag given twice, an unknown flag or a flag of another \
         subcommand is an error.\n\nFLAGS:\n",
    );
    for f in FLAGS {
        let head = if f.is_switch() {
            format!("--{}", f.name)
        } else {
            format!("--{} {}", f.name, f.value)
        };
        let scope = match (f.for_run(), f.for_serve(), f.scope & REPORT != 0) {
            (true, true, true) => "",
            (true, true, false) => " [run, serve]",
            (true, false, _) => " [run]",
            (false, true, _) => " [serve]",
            (false, false, _) => " [report]",
        };
        let _ = writeln!(s, "  {head}{scope}\n      {}", f.help);
        if !f.default.is_empty() {
            let _ = writeln!(s, "      default: {}", f.default);
        }
        let _ = writeln!(s, "      accepted: {}", f.accepted);
    }
    s.push_str(
        "\nCROSS-CHECKS:\n  \
         clients x window x payload <= 268435456 (256 MiB in flight)\n  \
         payload <= 65507 for ipv4, <= 65527 for ipv6\n  \
         --connect: --address-family (if given) must match the address; --work, \
         --server-lanes and\n  --udp-server-receive-buffer belong to `serve`; \
         --impair-server needs the in-process server\n\
         \n\
         DIFFERENCES FROM ARKNET (additive; no field renamed):\n  \
         backend is \"keel\"; percentiles come from every sample (rtt_sample_limit is null);\n  \
         --protocol accepts only udp; --io-model owned is rejected; keel flags and JSON fields \
         are marked keel above.\n\
         \n\
         EXIT CODES:\n  \
         0  ok: the run passed every check (or --help)\n  \
         1  the run failed its checks (ok: false in the JSON line)\n  \
         2  bad arguments (still one JSON line on stdout with \"ok\": false and \"error\" naming the flag)\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_decimals() {
        for ok in ["0", "1", "0.25", "1.", ".5", "2.5e1", "1E-3", "3e+2", "007"] {
            assert!(is_plain_decimal(ok), "{ok}");
        }
        for bad in [
            "", ".", "+1", "-1", "1..2", "e5", "1e", "1e+", "inf", "nan", " 1", "1 ", "0x10",
            "1_0", "1s",
        ] {
            assert!(!is_plain_decimal(bad), "{bad}");
        }
    }

    #[test]
    fn every_scoped_flag_is_handled() {
        // Each flag in a scope parses with a valid value in that scope
        // (no unreachable!), which keeps FLAGS and the validators in step.
        let sample = |name: &str| match name {
            "protocol" => "udp",
            "address-family" => "ipv4",
            "io-model" => "shared",
            "lane-steering" => "auto",
            "full-policy" => "evict-idlest",
            "connect" => "127.0.0.1:7000",
            "bind" => "127.0.0.1:7000",
            "out" => "dir",
            "payload" => "64",
            "impair" | "impair-server" => "loss=0.1,delay=1ms",
            _ => "1",
        };
        for f in FLAGS.iter().filter(|f| f.name != "help") {
            let arg = if f.is_switch() {
                format!("--{}", f.name)
            } else {
                format!("--{}={}", f.name, sample(f.name))
            };
            if f.for_run() && f.name != "connect" {
                parse([arg.as_str()]).unwrap();
            }
            if f.for_serve() {
                let mut args = vec!["serve", arg.as_str()];
                if f.name != "bind" {
                    args.extend(["--bind", "127.0.0.1:0"]);
                }
                parse(args).unwrap();
            }
        }
    }
}
