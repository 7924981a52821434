//! What a validated command line asks for: [`Command`] and its
//! configurations, the choices a flag can name, and the defaults and limits
//! of the flags. Plain data: nothing here parses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use keel_udp::Impairment;

use super::table::Subcommand;

/// Largest UDP payload over IPv4: keel-udp's [`keel_udp::MAX_PAYLOAD_V4`]
/// (65,535 − 20 IP − 8 UDP), the one number keel-udp refuses sends above.
pub const MAX_PAYLOAD_IPV4: u64 = keel_udp::MAX_PAYLOAD_V4 as u64;
/// Largest UDP payload over IPv6 without jumbograms: keel-udp's
/// [`keel_udp::MAX_PAYLOAD_V6`] (65,535 − 8 UDP).
pub const MAX_PAYLOAD_IPV6: u64 = keel_udp::MAX_PAYLOAD_V6 as u64;
/// Smallest payload: the 16-byte message header.
pub const MIN_PAYLOAD: u64 = 16;
/// Most `--clients` of a closed loop (arknet's bound).
pub const MAX_CLIENTS_CLOSED_LOOP: u32 = 1024;
/// Most `--clients` with `--rate` (the scale case: thousands of
/// connections, each a socket of its own).
pub const MAX_CLIENTS_OPEN_LOOP: u32 = 10_000;
/// Cap on `clients × window × payload`: bytes in flight at once.
pub const MAX_IN_FLIGHT_BYTES: u64 = 256 * 1024 * 1024;
/// Smallest `--transfer`: the 16-byte message header.
pub const MIN_TRANSFER: u64 = 16;
/// Largest `--transfer`: 64 MiB (and `clients × transfer` at most
/// [`MAX_IN_FLIGHT_BYTES`]).
pub const MAX_TRANSFER: u64 = 64 * 1024 * 1024;
/// Default `--kcp-window`: KCP's send and receive windows, in packets (the
/// 128 of KCP's published test).
pub const DEFAULT_KCP_WINDOW: u16 = 128;
/// Default `--ack-delay`: keel-rudp's own default `max_ack_delay`.
pub const DEFAULT_ACK_DELAY_MS: u32 = 5;
/// Largest `--redundancy`: keel-rudp's `MAX_REDUNDANCY`.
pub const MAX_REDUNDANCY: u32 = keel_rudp::MAX_REDUNDANCY as u32;
/// Largest `--ack-delay` (keel-rudp accepts up to 1 s).
pub const MAX_ACK_DELAY_MS: u32 = 1000;
/// Largest `--kcp-window`.
pub const MAX_KCP_WINDOW: u16 = 32_768;

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
/// Default `--drain` with `--transfer`: a transfer in flight when the
/// measured phase ends may take this long to finish (a 1 MiB transfer
/// under heavy loss takes longer than the echo's 2 s).
pub const DEFAULT_BULK_DRAIN: f64 = 30.0;
/// Default `--drain`: how long echoes in flight may take after the
/// measured phase (arknet's fixed 2 s).
pub const DEFAULT_DRAIN: f64 = 2.0;
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
/// Transport under test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// UDP datagrams (arknet's benchmark).
    #[default]
    Udp,
    /// keel-rudp connections and channels over keel-udp.
    Rudp,
    /// KCP (a peer for comparison) over keel-udp sockets.
    Kcp,
}

impl Protocol {
    /// Name as written on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            Protocol::Rudp => "rudp",
            Protocol::Kcp => "kcp",
        }
    }
}

/// `--kcp-mode`: which KCP configuration `--protocol kcp` runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KcpMode {
    /// nodelay 1, interval 10 ms, resend 2, no congestion window.
    #[default]
    Fast,
    /// KCP's "default mode" of its published test: nodelay 0, interval
    /// 10 ms, resend 0, congestion window on.
    Default,
    /// KCP's "normal mode" of its published test: as default, without the
    /// congestion window.
    Normal,
}

impl KcpMode {
    /// Name as written on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            KcpMode::Fast => "fast",
            KcpMode::Default => "default",
            KcpMode::Normal => "normal",
        }
    }
}

/// `--channel`: the keel-rudp channel kind the messages and echoes use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChannelChoice {
    /// Resent until acknowledged, delivered once, in order.
    #[default]
    ReliableOrdered,
    /// Resent until acknowledged, delivered once, as soon as complete.
    ReliableUnordered,
    /// Never resent; never older after newer.
    UnreliableSequenced,
    /// Never resent; as it arrives.
    Unreliable,
}

impl ChannelChoice {
    /// Name as written on the command line and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelChoice::ReliableOrdered => "reliable-ordered",
            ChannelChoice::ReliableUnordered => "reliable-unordered",
            ChannelChoice::UnreliableSequenced => "unreliable-sequenced",
            ChannelChoice::Unreliable => "unreliable",
        }
    }

    /// True when every message is resent until delivered.
    pub fn reliable(self) -> bool {
        matches!(
            self,
            ChannelChoice::ReliableOrdered | ChannelChoice::ReliableUnordered
        )
    }

    /// True when a message never arrives after a later one.
    pub fn ordered(self) -> bool {
        matches!(
            self,
            ChannelChoice::ReliableOrdered | ChannelChoice::UnreliableSequenced
        )
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

    /// Largest UDP payload of this family, as keel-udp checks it
    /// ([`keel_udp::max_payload`] of this family's loopback address).
    pub fn max_payload(self) -> u64 {
        keel_udp::max_payload(&SocketAddr::new(self.loopback(), 0)) as u64
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

/// `--client-sockets`: where the clients of an open-loop run live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClientSocketsChoice {
    /// Each client on a socket of its own, a system call per datagram, as
    /// game clients send.
    #[default]
    PerClient,
    /// One socket per client thread, each client sending from a loopback
    /// address of its own (127.1.x.y), batched system calls: the load
    /// generator of the scale case.
    Shared,
}

impl ClientSocketsChoice {
    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientSocketsChoice::PerClient => "per-client",
            ClientSocketsChoice::Shared => "shared",
        }
    }
}

/// `serve --full-policy`: what a lane does with a new peer when its session
/// table is full (keel-udp's `FullPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FullPolicyChoice {
    /// Drop the new peer's datagrams (counted in `sessions_refused`) until
    /// a session ends; established peers are never disturbed, but a flood
    /// of valid messages from spoofed sources locks new peers out for the
    /// idle timeout.
    Refuse,
    /// The default: end the least recently active session
    /// (`sessions_evicted`) and admit the new peer, whose first datagram
    /// passed the check. A flood of one-off sources evicts its own oldest
    /// sessions, not a peer that keeps talking.
    #[default]
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

/// `--format`: how a run or `serve` shows its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OutputFormat {
    /// No `--format`: the JSON line on stdout, and the summary on stderr
    /// only when stdout is a terminal (a person is reading). Scripts, whose
    /// stdout is a pipe or a file, see exactly what `json` gives.
    #[default]
    Auto,
    /// The JSON line on stdout, nothing else.
    Json,
    /// The summary on stdout instead of the JSON line.
    Human,
    /// The JSON line on stdout and the summary on stderr.
    Both,
}

/// Where a result goes, once `--format` and the terminal are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The JSON line goes to stdout.
    pub json: bool,
    /// The human summary goes to stdout.
    pub summary_on_stdout: bool,
    /// The human summary goes to stderr.
    pub summary_on_stderr: bool,
}

impl OutputFormat {
    /// Name as written on the command line; `auto` is the default's name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Auto => "auto",
            OutputFormat::Json => "json",
            OutputFormat::Human => "human",
            OutputFormat::Both => "both",
        }
    }

    /// Where the result goes when stdout is (or is not) a terminal.
    pub fn shown(self, stdout_is_terminal: bool) -> Shown {
        let (json, summary_on_stdout, summary_on_stderr) = match self {
            OutputFormat::Auto => (true, false, stdout_is_terminal),
            OutputFormat::Json => (true, false, false),
            OutputFormat::Human => (false, true, false),
            OutputFormat::Both => (true, false, true),
        };
        Shown {
            json,
            summary_on_stdout,
            summary_on_stderr,
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
    /// `--drain`: the longest wait after the measured phase for what is
    /// still in flight.
    pub drain: f64,
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
    /// `--format`: the JSON line, a human summary, or both.
    pub format: OutputFormat,
    /// `--channel` (`--protocol rudp` only).
    pub channel: ChannelChoice,
    /// `--rate`: messages per client per second, open loop; `None` = the
    /// closed-loop echo (`--protocol rudp` only).
    pub rate_hz: Option<u32>,
    /// `--kcp-mode` (`--protocol kcp` only).
    pub kcp_mode: KcpMode,
    /// `--encrypt` (`--protocol rudp` only).
    pub encrypt: bool,
    /// `--dont-fragment` (`--protocol udp` only): the echo's keel-udp
    /// sockets set Don't Fragment, as keel-rudp's do by default.
    pub dont_fragment: bool,
    /// `--transfer`: the bulk case, each client sends one message of this
    /// many bytes at a time and waits for the server's receipt; `None` =
    /// the echo (`--protocol rudp` and `kcp` only; see `crate::bulk`).
    pub transfer: Option<u64>,
    /// `--kcp-window`: KCP's send and receive windows in packets
    /// (`--protocol kcp` only).
    pub kcp_window: u16,
    /// `--bulk-channel`: keel-rudp's channel is marked bulk (congestion
    /// control and pacing) (`--protocol rudp` only).
    pub bulk_channel: bool,
    /// `--ack-delay`: the keel-rudp clients' `max_ack_delay` in ms
    /// (`--protocol rudp` only).
    pub ack_delay_ms: u32,
    /// `--redundancy`: the level of keel-rudp's channel redundancy
    /// (`ChannelConfig::redundancy`, `--protocol rudp` only); `None`:
    /// keel-rudp's default for the channel.
    pub redundancy: Option<u8>,
    /// `--client-sockets`: a socket per client, or shared.
    pub client_sockets: ClientSocketsChoice,
    /// `--output FILE`: the JSON line goes to this file (created or
    /// truncated) instead of stdout.
    pub output: Option<PathBuf>,
    /// `--histogram FILE`: the measured RTTs go to this file in
    /// HdrHistogram's percentile-distribution format.
    pub histogram: Option<PathBuf>,
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
            drain: DEFAULT_DRAIN,
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
            format: OutputFormat::Auto,
            channel: ChannelChoice::ReliableOrdered,
            rate_hz: None,
            kcp_mode: KcpMode::Fast,
            encrypt: false,
            dont_fragment: false,
            transfer: None,
            kcp_window: DEFAULT_KCP_WINDOW,
            bulk_channel: false,
            ack_delay_ms: DEFAULT_ACK_DELAY_MS,
            redundancy: None,
            client_sockets: ClientSocketsChoice::PerClient,
            output: None,
            histogram: None,
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
    /// `--format`: the summary line as JSON, in words, or both.
    pub format: OutputFormat,
    /// `--output FILE`: the JSON summary goes to this file instead of
    /// stdout.
    pub output: Option<PathBuf>,
    /// `--protocol`: udp (the echo of [`crate::serve`]), or the keel-rudp
    /// or KCP echo server of a run, alone (`crate::serve_peer`).
    pub protocol: Protocol,
    /// `--channel` (rudp): the clients' channel kind.
    pub channel: ChannelChoice,
    /// `--kcp-mode` (kcp).
    pub kcp_mode: KcpMode,
    /// `--kcp-window` (kcp).
    pub kcp_window: u16,
    /// `--payload` (rudp, kcp): the clients' message size, which sizes
    /// the connections' buffers as a run does.
    pub payload: u64,
}

/// A validated `keel-bench relay`: the impairment relay.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayConfig {
    /// `--bind`: where clients send.
    pub bind: SocketAddr,
    /// `--upstream`: the server.
    pub upstream: SocketAddr,
    /// `--impair`: client->server datagrams (seed already set by `--seed`).
    pub impair: Impairment,
    /// `--impair-server`: server->client datagrams.
    pub impair_server: Impairment,
    /// `--seconds`: relay this long; `None` = until interrupted.
    pub seconds: Option<f64>,
    /// `--max-flows`.
    pub max_flows: u32,
}

/// Default `relay --max-flows`.
pub const DEFAULT_MAX_FLOWS: u32 = 4096;
/// Largest `relay --max-flows`.
pub const MAX_MAX_FLOWS: u32 = 65_536;

/// A validated `keel-bench report`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportConfig {
    /// JSON-lines files produced by runs.
    pub inputs: Vec<PathBuf>,
    /// `--out`: directory for the Markdown table and SVG charts.
    pub out: PathBuf,
}

/// A validated `keel-bench compare A B`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompareConfig {
    /// The baseline: a JSON-lines file of runs.
    pub baseline: PathBuf,
    /// The candidate, compared with the baseline configuration by
    /// configuration.
    pub candidate: PathBuf,
}

/// A shell `keel-bench completions` writes a script for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// bash.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
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
    /// Relay datagrams between clients and a server, impaired.
    Relay(RelayConfig),
    /// Compare two result files.
    Compare(CompareConfig),
    /// Print a completion script for a shell.
    Completions(Shell),
    /// Print the help of a subcommand (`help_text(sub, long)`) and exit 0.
    Help {
        /// Whose help: `serve --help` is serve's.
        sub: Subcommand,
        /// `--help` (every flag in full) rather than `-h` (a line each).
        long: bool,
    },
    /// Print `keel-bench VERSION` and exit 0.
    Version,
}
