//! The flag table: every flag keel-bench knows ([`FLAGS`]), which
//! subcommands take it, and what `--help` says about it. Parsing, validation
//! and help all read this one table, so a flag cannot be accepted without
//! being documented, or documented without being accepted.

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
    /// `compare A B`.
    Compare,
    /// `completions SHELL`.
    Completions,
    /// `relay`: the impairment relay between clients and one server.
    Relay,
}

impl Subcommand {
    /// This subcommand's bit in [`FlagSpec`]'s scope.
    fn bit(self) -> u8 {
        match self {
            Subcommand::Run => RUN,
            Subcommand::Serve => SERVE,
            Subcommand::Report => REPORT,
            Subcommand::Compare => COMPARE,
            Subcommand::Completions => COMPLETIONS,
            Subcommand::Relay => RELAY,
        }
    }

    /// How errors name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Subcommand::Run => "keel-bench (run)",
            Subcommand::Serve => "keel-bench serve",
            Subcommand::Report => "keel-bench report",
            Subcommand::Compare => "keel-bench compare",
            Subcommand::Completions => "keel-bench completions",
            Subcommand::Relay => "keel-bench relay",
        }
    }

    /// The word that selects it (`serve`), empty for a run.
    pub fn word(self) -> &'static str {
        match self {
            Subcommand::Run => "",
            Subcommand::Serve => "serve",
            Subcommand::Report => "report",
            Subcommand::Compare => "compare",
            Subcommand::Completions => "completions",
            Subcommand::Relay => "relay",
        }
    }

    /// Every subcommand, the run first.
    pub const ALL: [Subcommand; 6] = [
        Subcommand::Run,
        Subcommand::Serve,
        Subcommand::Report,
        Subcommand::Compare,
        Subcommand::Completions,
        Subcommand::Relay,
    ];
}

/// Scope bit: a run takes the flag.
const RUN: u8 = 1;
/// Scope bit: `serve` takes the flag.
const SERVE: u8 = 2;
/// Scope bit: `report` takes the flag.
const REPORT: u8 = 4;
/// Scope bit: `compare` takes the flag.
const COMPARE: u8 = 8;
/// Scope bit: `completions` takes the flag.
const COMPLETIONS: u8 = 16;
/// Scope bit: `relay` takes the flag.
const RELAY: u8 = 32;
/// Every subcommand.
const ALL: u8 = RUN | SERVE | REPORT | COMPARE | COMPLETIONS | RELAY;

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

    /// True when a run takes this flag.
    pub fn for_run(&self) -> bool {
        self.scope & RUN != 0
    }

    /// True when `serve` takes this flag.
    pub fn for_serve(&self) -> bool {
        self.scope & SERVE != 0
    }

    /// True when `report` takes this flag.
    pub fn for_report(&self) -> bool {
        self.scope & REPORT != 0
    }

    /// True when `sub` takes this flag.
    pub fn accepted_by(&self, sub: Subcommand) -> bool {
        self.scope & sub.bit() != 0
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

/// What `--transfer` accepts.
pub const TRANSFER_ACCEPTED: &str =
    "16..=67108864 (a plain integer, no suffix, like every size flag; \
1 MiB = 1048576); clients x transfer <= 268435456";

/// What `serve --idle-timeout` accepts.
pub const IDLE_TIMEOUT_ACCEPTED: &str =
    "a decimal, 0 < s <= 3600, or off (0 is not accepted: write off)";

/// Every flag keel-bench knows, in `--help` order.
pub const FLAGS: &[FlagSpec] = &[
    spec("protocol", "NAME", "udp", "udp, rudp, kcp (arknet's tcp is not supported)", "transport: udp = arknet's datagram echo; rudp = keel: the same echo over keel-rudp connections (see --channel, --rate); kcp = the same echo over KCP on keel-udp sockets, a peer for comparison (see --kcp-mode); serve: the protocol served (rudp, kcp: with --channel, --kcp-mode, --kcp-window and --payload as the clients give them)", RUN | SERVE),
    spec("channel", "KIND", "reliable-ordered", "reliable-ordered, reliable-unordered, unreliable-sequenced, unreliable", "keel, --protocol rudp: the channel messages and their echoes use (kcp: reliable-ordered only)", RUN | SERVE),
    spec("encrypt", "", "", "switch", "keel, --protocol rudp: each client connects with a connect token and every packet is sealed (ChaCha20-Poly1305, replay window), as a game on the open internet runs; without it keel-rudp runs in its explicit insecure mode, as KCP does", RUN),
    spec("dont-fragment", "", "off (the kernel's default)", "switch", "keel, --protocol udp: the echo server's and the clients' keel-udp sockets set Don't Fragment (SocketOptions::dont_fragment; Linux), which keel-rudp's sockets do by default; with it the kernel also skips the IPv4 identification generator on each send, so it makes plain keel-udp the like-for-like baseline of a keel-rudp run", RUN),
    spec("kcp-mode", "MODE", "fast", "fast, default, normal", "keel, --protocol kcp, the three modes of KCP's published test: fast = nodelay 1, interval 10 ms, resend 2, no congestion window; default = nodelay 0, interval 10 ms, resend 0, congestion window; normal = default without the congestion window; 128-packet windows", RUN | SERVE),
    spec("transfer", "BYTES", "off (the echo)", TRANSFER_ACCEPTED, "keel, --protocol rudp or kcp: the bulk case; each client sends one message of BYTES (header and checked fill) on the reliable channel (kcp: in stream mode), the server answers with a 16-byte receipt (the message's header) once it has checked all of it, and the client starts the next; rtt_* are then completion times (handing the message to the protocol to the receipt), messages the transfers completed, goodput_bytes_per_second = BYTES x messages / elapsed_seconds; a transfer still in flight at the end gets up to --drain to finish, 30 s by default with --transfer; not with --window, --rate, --payload or an unreliable --channel", RUN),
    spec("kcp-window", "PACKETS", "128", "1..=32768", "keel, --protocol kcp: KCP's send and receive windows in packets (KCP raises a receive window below 128 to 128); fast mode sends at most this many packets per round trip, so bulk throughput is window-bound", RUN | SERVE),
    spec("bulk-channel", "", "off", "switch", "keel, --protocol rudp: mark the channel bulk, i.e. held back by keel-rudp's congestion control (NewReno) and pacer, as a game's large downloads would be; off: a plain channel, sent as fast as the send buffer allows", RUN),
    spec("redundancy", "LEVEL", "2 (keel-rudp's default; 0 on unreliable and bulk channels)", "0..=5", "keel, --protocol rudp, a reliable channel that is not --bulk-channel: the channel's latency/overhead knob (ChannelConfig::redundancy), applied while the measured loss is at least 1 %: 0 none; 1 a message resent after a loss rides once more; 2-5 also XOR parity of recent messages (forward error correction, which rebuilds one lost message without a resend): 2 every third packet over the 3 messages before, 3 every other packet over the 4 before, 4 every packet over the 2 before, 5 that and a copy of every message (about 1.55, 1.7, 2.05 and 3.1 wire bytes per payload byte for 400 B at 60 Hz, 10 % loss); while the measured loss is high (about 16 % and more) 1-4 add a copy of every message and 5 a second one. The sender's setting; the receiver uses any parity it gets", RUN),
    spec("ack-delay", "MS", "5 (keel-rudp's default)", "0..=1000", "keel, --protocol rudp: the clients' max_ack_delay in milliseconds, how long a client holds an acknowledgement back when it is not sending at a steady tick (at a steady --rate, keel-rudp's tick_ack_delay, up to 60 ms, already lets each acknowledgement ride on the next message). The server keeps the default", RUN),
    spec("rate", "HZ", "off (closed loop)", "1..=10000", "keel: open loop, each client sends HZ messages per second (a game tick) whatever comes back, the clients' sends spread over the period; the rtt_* percentiles are then the delivery latency of message and echo. With --protocol udp: the plain keel-udp echo in open loop (the scale case's baseline; an echo not back within 1 s is lost). The server runs on its own runtime, apart from the clients', and its CPU per message is reported (server_cpu_us_per_message)", RUN),
    spec("client-sockets", "HOW", "per-client", "per-client, shared", "keel, --protocol rudp or kcp, or udp with --rate: where the clients live; per-client = a socket each, a system call per datagram, as game clients send; shared = one socket per client thread, each client sending from a loopback address of its own (127.1.x.y, IP_PKTINFO, so the server still sees one peer per client) and the thread's datagrams sent and received up to 64 to a system call (sendmmsg/recvmmsg): a load generator that does not fall behind thousands of clients at a game tick (scripts/rudp-scale.sh). IPv4 only; not with --connect or --impair", RUN),
    spec("address-family", "FAMILY", "ipv4", "ipv4 (127.0.0.1), ipv6 (::1)", "loopback address family; with --connect, must match the address", RUN),
    spec("payload", "BYTES", "1024", "16..=65507 (ipv6: 16..=65527)", "bytes per datagram, 16-byte header included", RUN | SERVE),
    spec("clients", "N", "1", "1..=1024 (with --rate: 1..=10000)", "client sockets, one each", RUN),
    spec("window", "N", "1", "1..=1024", "datagrams in flight per client (closed loop)", RUN),
    spec("seconds", "S", "1 (serve: until interrupted)", "a decimal, 0 < s <= 3600 (serve: <= 86400)", "measured phase (serve: how long to serve; relay: how long to relay, default until SIGINT/SIGTERM)", RUN | SERVE | RELAY),
    spec("warmup", "S", "0.25", "a decimal, 0 <= s <= 3600 (0 skips)", "warm-up phase, not reported", RUN),
    spec("drain", "S", "2", "a decimal, 0 < s <= 3600", "keel: the longest wait after the measured phase for echoes still in flight (the run ends as soon as none is); what is still outstanding then counts as lost and the run is not ok. A reliable protocol that falls behind its --rate needs longer to deliver everything, as KCP's own test waits for every message", RUN),
    spec("io-model", "MODEL", "shared", "shared (1 context, N threads), sharded (N contexts, 1 thread each); arknet's owned is not supported", "IO thread organisation", RUN | SERVE),
    spec("io-threads", "N", "1", "1..=64", "N of --io-model", RUN | SERVE),
    spec("work", "ROUNDS", "0", "0..=10000000", "xorshift64 rounds the server runs per echo, inside its receive lane", RUN | SERVE),
    spec("udp-server-receive-buffer", "BYTES", "none (the 4 MiB request every socket makes)", "1..=1073741824", "keel: receive buffer request of the server socket(s) only", RUN | SERVE),
    spec("lane-steering", "HOW", "auto", "auto, hash, port", "keel: how datagrams spread over --server-lanes: hash = the kernel's hash of the peer address; port = peer port % lanes, and each client binds a port whose lane runs on the client's own context (flows stay on one core); auto = port for --io-model sharded with several lanes, else hash", RUN | SERVE),
    spec("server-lanes", "N", "1", "1..=64", "keel: server receive lanes; N > 1 opens N SO_REUSEPORT sockets on one port, one serialized lane each", RUN | SERVE),
    spec("batch", "N", "64", "1..=1024", "keel: datagrams per receive/send system call (recvmmsg/sendmmsg); 1 = one per call", RUN | SERVE),
    spec("loss-timeout", "MS", "off", "1..=3600000", "keel: count a datagram unanswered after MS as lost and release its window slot (off: it holds the slot until the drain ends, as in arknet)", RUN),
    spec("impair", "SPEC", "off", IMPAIR_ACCEPTED, "keel: link conditioner on each client's send path, e.g. loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1 (client i uses seed+i); pair loss with --loss-timeout (longer than the delay it adds) and --warmup 0 to keep measuring: messages_sent = messages + udp_lost_messages + order_errors; duplicates show as unexpected_messages, reordering (and jitter) as order_errors; relay: client->server datagrams", RUN | RELAY),
    spec("impair-server", "SPEC", "off", IMPAIR_ACCEPTED, "keel: link conditioner on the server's send path (its echoes), same SPEC as --impair; relay: server->client datagrams", RUN | RELAY),
    spec("connect", "ADDR:PORT", "none (server in this process)", "IP:PORT literal, port 1..=65535 (e.g. 10.0.0.2:7000, [fd00::2]:7000)", "keel: clients only, against `keel-bench serve` at ADDR:PORT (rudp, kcp: `serve --protocol rudp|kcp` with the same --channel, --payload, --kcp-mode; or through `keel-bench relay`); server-side flags go to serve", RUN),
    spec("idle-timeout", "S", "30", IDLE_TIMEOUT_ACCEPTED, "serve: end a peer's session after S seconds without a datagram from it, so one-off or spoofed sources do not hold their slots of --max-sessions forever (30 s is far longer than any pause of a keel-bench or sockperf client during a run; the echo server keeps no state per session, and a peer that comes back gets a new one); off keeps every session until the server stops", SERVE),
    spec("max-sessions", "N", "65536", "1..=16777216", "serve: sessions (peer addresses) per receive lane at most; a new peer beyond it meets --full-policy", SERVE),
    spec("full-policy", "POLICY", "evict-idlest", "refuse, evict-idlest", "serve: a new peer (whose first datagram is a valid message: garbage never opens a session, it is counted in invalid_messages and sessions_rejected) when the session table is full: evict-idlest = end the least recently active session (sessions_evicted) and admit the new peer, so a flood of spoofed sources evicts its own sessions and cannot lock a real peer out; refuse = eviction off: drop its datagrams (sessions_refused) until an idle session times out, established peers are never disturbed", SERVE),
    spec("upstream", "ADDR:PORT", "required", "IP:PORT literal, port 1..=65535 (e.g. 127.0.0.1:7000)", "relay: the server every client flow is forwarded to, each from an upstream socket of its own", RELAY),
    spec("seed", "N", "each SPEC's seed= (default 0)", "an unsigned 64-bit integer, 0 to 18446744073709551615 (not with a seed= in --impair or --impair-server)", "relay: the seed of both directions' fates (client->server decides with stream 0 of it, server->client with stream 1), so the k-th datagram of a direction meets the same fate whichever library sent it", RELAY),
    spec("max-flows", "N", "4096", "1..=65536", "relay: client addresses (flows, one upstream socket each) at most; datagrams from a new address beyond it are dropped and counted in flows_refused", RELAY),
    spec("format", "FORMAT", "json on stdout, plus the summary on stderr when stdout is a terminal", "json, human, both", "keel: json = the JSON line on stdout, nothing else there (errors are still said on stderr); human = a few lines for a person (configuration, throughput, p50/p99/p99.9 RTT, CPU, drops and errors, ok or why not) on stdout instead of the JSON line; both = the JSON line on stdout and the summary on stderr", RUN | SERVE),
    spec("output", "FILE", "none (stdout)", "a file path (created or truncated when the command starts)", "keel: write the JSON line to FILE instead of stdout (the summary goes where --format says, stdout included when it is a terminal)", RUN | SERVE),
    spec("bind", "ADDR:PORT", "required", "IP:PORT literal (e.g. 0.0.0.0:7000, [::]:7000); port 0 picks a free port", "serve: address to serve on; relay: the address clients send to", SERVE | RELAY),
    spec("sockperf", "", "off", "switch", "serve: answer sockperf's UDP ping-pong client (clear the client bit) instead of keel-bench clients; as sockperf's own server, it leaves warm-up messages and messages without a pong request unanswered, counted in the summary's unanswered_warmup and unanswered_no_reply (every datagram received is in one summary counter: datagrams_in = answered + unanswered_warmup + unanswered_no_reply + invalid_messages + sessions_refused + truncated + recv_discarded)", SERVE),
    spec("out", "DIR", "required", "directory path", "report: where the Markdown table and SVG charts go", REPORT),
    spec("histogram", "FILE", "none", "a file path (created or truncated when the run starts)", "keel: write the measured phase's RTT distribution to FILE in HdrHistogram's percentile-distribution format (microseconds; give it to keel-bench report for its CDF, plot it with HdrHistogram's plotter, or read the Value and Percentile columns)", RUN),
    spec("help", "", "", "switch (-h: the short help)", "print this help (of the subcommand: serve --help, report --help) and exit 0", ALL),
    spec("version", "", "", "switch (also -V)", "print keel-bench's version and exit 0", ALL),
];

/// Looks up a flag by its long name (without `--`).
pub fn find_flag(name: &str) -> Option<&'static FlagSpec> {
    FLAGS.iter().find(|f| f.name == name)
}

#[cfg(test)]
mod tests {
    use super::super::config::{
        DEFAULT_KCP_WINDOW, MAX_IN_FLIGHT_BYTES, MAX_KCP_WINDOW, MAX_PAYLOAD_IPV4,
        MAX_PAYLOAD_IPV6, MAX_TRANSFER, MIN_PAYLOAD, MIN_TRANSFER,
    };
    use super::*;

    #[test]
    fn payload_range_in_the_table_is_keel_udps() {
        // The table is const text; this keeps it equal to keel-udp's limits.
        let payload = find_flag("payload").unwrap();
        assert_eq!(
            payload.accepted,
            format!(
                "{MIN_PAYLOAD}..={MAX_PAYLOAD_IPV4} (ipv6: {MIN_PAYLOAD}..={MAX_PAYLOAD_IPV6})"
            )
        );
    }

    #[test]
    fn transfer_and_kcp_window_texts_are_the_limits() {
        assert!(TRANSFER_ACCEPTED.starts_with(&format!("{MIN_TRANSFER}..={MAX_TRANSFER} ")));
        assert!(
            TRANSFER_ACCEPTED.ends_with(&format!("clients x transfer <= {MAX_IN_FLIGHT_BYTES}"))
        );
        let w = find_flag("kcp-window").unwrap();
        assert_eq!(w.accepted, format!("1..={MAX_KCP_WINDOW}"));
        assert_eq!(w.default, DEFAULT_KCP_WINDOW.to_string());
    }
}
