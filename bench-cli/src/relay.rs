//! `keel-bench relay`: an impairment relay between clients and one server,
//! so that every library under test runs as its own process, with its own
//! sockets, over the same impaired link (issue 22).
//!
//! * Clients send to `--bind`; each client address (a *flow*) gets an
//!   upstream socket of its own, connected to `--upstream`, so the server
//!   sees one address per client. The server's answers on that socket go
//!   back to the client from `--bind`. At most `--max-flows` flows
//!   (datagrams from a new address beyond it are dropped and counted in
//!   `flows_refused`); flows live until the relay ends.
//! * Each direction is impaired with keel's one link model
//!   ([`keel_impair::Conditioner`], the model of keel-udp's conditioner):
//!   `--impair` client->server, with stream 0 of its seed; `--impair-server`
//!   server->client, with stream 1. One conditioner per direction for all
//!   flows: the fate of a datagram is decided from (seed, direction, its
//!   index in that direction), so the k-th datagram of a direction meets the
//!   same fate whichever library sent it.
//! * Held (delayed) datagrams are bounded per direction by the spec's
//!   `limit` and `limit-bytes`; a copy past either is discarded and counted
//!   (`*_overflow`). Release times are kept as keel-reactor keeps timers:
//!   the poll waits whole milliseconds, rounded up, so a datagram is never
//!   early and at most about a millisecond late, as with the in-process
//!   conditioner.
//! * One thread, plain mio, batched system calls (keel-udp's
//!   [`keel_udp::batch`]): the client-facing socket is drained with
//!   `recvmmsg`, each readable upstream socket too; what is to be sent is
//!   queued per destination socket and flushed with `sendmmsg` once per
//!   turn of the event loop (all server->client datagrams leave from the
//!   one client-facing socket, so they share calls across flows;
//!   client->server ones are grouped by flow, arrival order kept within a
//!   flow). A partial `sendmmsg` resumes from the first datagram not sent;
//!   a full send buffer (`WouldBlock`) drops what is left of that flush, an
//!   error drops its one datagram, each counted in `*_send_errors`. The
//!   buffers are the relay's, allocated once: nothing is allocated per
//!   datagram (a delayed one reuses a released one's buffer).
//!
//! It prints `ready ADDR` on stderr once bound and, at `--seconds` or
//! SIGINT/SIGTERM, one JSON line ([`RelaySummary`]) on stdout. Byte counts
//! are UDP payload bytes as received from the sender, before impairment;
//! no IP or UDP header is added anywhere.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_impair::{Conditioner, Impairment, Verdict};
use keel_udp::batch::{enable_rxq_ovfl, recv_batch, send_batch, RecvBatch, SendBatch};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::flags::RelayConfig;
use crate::procstats::process_cpu_time;

/// The downstream socket (clients send here).
const DOWN: Token = Token(0);
/// The signal thread's wake-up.
const WAKE: Token = Token(1);
/// Flow `i`'s upstream socket is `Token(FIRST_FLOW + i)`.
const FIRST_FLOW: usize = 2;
/// Receive slot: the largest UDP payload (the kernel only touches the
/// pages a datagram fills).
const SLOT: usize = 65_536;
/// Datagrams per `recvmmsg` / `sendmmsg`.
const BATCH: usize = 64;
/// Server->client datagrams queued before a flush is forced.
const DOWN_QUEUE: usize = 4 * BATCH;
/// Client->server datagrams staged before a flush is forced.
const UP_QUEUE: usize = 1024;
/// Socket buffers requested (the kernel may grant less).
const SOCKET_BUFFER: usize = 4 << 20;
/// The longest poll wait, so `--seconds` is kept without a timer of its own.
const MAX_WAIT: Duration = Duration::from_millis(100);

/// Which way a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Way {
    /// Client -> server (`--impair`).
    Up,
    /// Server -> client (`--impair-server`).
    Down,
}

/// What one direction counted.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct WayCounts {
    /// Datagrams received from the sender.
    pub datagrams: u64,
    /// Their UDP payload bytes, as received (before impairment).
    pub bytes: u64,
    /// Dropped by the loss decision.
    pub dropped: u64,
    /// Given a second copy by the duplicate decision.
    pub duplicated: u64,
    /// Held back the reorder delay.
    pub reordered: u64,
    /// Copies discarded because the direction held `limit` datagrams or
    /// `limit-bytes` bytes already.
    pub overflow: u64,
    /// Copies handed to the kernel.
    pub sent: u64,
    /// Bytes of those copies.
    pub sent_bytes: u64,
    /// Copies the kernel refused (a full send buffer, an unreachable port).
    pub send_errors: u64,
    /// Receive system calls that returned datagrams (`recvmmsg`).
    pub recv_calls: u64,
    /// Send system calls that sent datagrams (`sendmmsg`, or `sendto` for
    /// one).
    pub send_calls: u64,
}

/// The one JSON line `keel-bench relay` prints when it ends (the fields of
/// the two directions flattened as `up_*` and `down_*`).
#[derive(Debug, Serialize)]
pub struct RelaySummary {
    /// Always `"relay"`.
    pub role: &'static str,
    /// keel-bench's version.
    pub keel_version: &'static str,
    /// The bound address (with the real port).
    pub bind: String,
    /// `--upstream`.
    pub upstream: String,
    /// `--impair` as applied (its textual form, seed included).
    pub impair: String,
    /// `--impair-server` as applied.
    pub impair_server: String,
    /// Client flows (addresses) seen, one upstream socket each.
    pub flows: u64,
    /// Datagrams from new addresses dropped because `--max-flows` flows
    /// were open.
    pub flows_refused: u64,
    /// Datagrams dropped because an upstream socket could not be opened
    /// (the error is said on stderr).
    pub flows_failed: u64,
    /// Client->server datagrams the kernel dropped at the client-facing
    /// socket, its receive buffer full (`SO_RXQ_OVFL`; `null` where the
    /// counter does not exist).
    pub up_kernel_drops: Option<u64>,
    /// Client -> server.
    #[serde(flatten, with = "up")]
    pub up: WayCounts,
    /// Server -> client.
    #[serde(flatten, with = "down")]
    pub down: WayCounts,
    /// Datagrams still held when the relay ended (never sent).
    pub held_at_end: u64,
    /// Seconds relayed, from ready to the end.
    pub elapsed_seconds: f64,
    /// `"seconds"`, `"SIGINT"` or `"SIGTERM"`.
    pub ended_by: String,
    /// CPU time of the whole process from ready to the end.
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds` per datagram received (both ways), in microseconds.
    pub cpu_us_per_datagram: Option<f64>,
    /// True when it relayed until the end without a fatal error.
    pub ok: bool,
    /// Why not, if not.
    pub error: Option<String>,
}

/// Serializes a [`WayCounts`] with a prefix on every field.
macro_rules! prefixed {
    ($module:ident, $prefix:literal) => {
        mod $module {
            use super::WayCounts;
            use serde::ser::SerializeMap;
            use serde::Serializer;

            pub(super) fn serialize<S: Serializer>(c: &WayCounts, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(11))?;
                m.serialize_entry(concat!($prefix, "datagrams"), &c.datagrams)?;
                m.serialize_entry(concat!($prefix, "bytes"), &c.bytes)?;
                m.serialize_entry(concat!($prefix, "dropped"), &c.dropped)?;
                m.serialize_entry(concat!($prefix, "duplicated"), &c.duplicated)?;
                m.serialize_entry(concat!($prefix, "reordered"), &c.reordered)?;
                m.serialize_entry(concat!($prefix, "overflow"), &c.overflow)?;
                m.serialize_entry(concat!($prefix, "sent"), &c.sent)?;
                m.serialize_entry(concat!($prefix, "sent_bytes"), &c.sent_bytes)?;
                m.serialize_entry(concat!($prefix, "send_errors"), &c.send_errors)?;
                m.serialize_entry(concat!($prefix, "recv_calls"), &c.recv_calls)?;
                m.serialize_entry(concat!($prefix, "send_calls"), &c.send_calls)?;
                m.end()
            }
        }
    };
}
prefixed!(up, "up_");
prefixed!(down, "down_");

impl RelaySummary {
    /// The line as JSON, without the trailing newline.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a RelaySummary always serializes")
    }
}

/// One direction: its conditioner, what it holds, what it counted.
struct Direction {
    conditioner: Conditioner,
    limit: usize,
    limit_bytes: usize,
    held: usize,
    held_bytes: usize,
    counts: WayCounts,
}

impl Direction {
    fn new(imp: &Impairment, stream: u64) -> Self {
        Direction {
            conditioner: Conditioner::with_stream(imp, stream),
            limit: imp.limit,
            limit_bytes: imp.limit_bytes,
            held: 0,
            held_bytes: 0,
            counts: WayCounts::default(),
        }
    }
}

/// A delayed copy, due at `due` (`seq` keeps equal times in arrival order).
struct Held {
    due: Instant,
    seq: u64,
    way: Way,
    flow: usize,
    data: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

struct Flow {
    client: SocketAddr,
    up: UdpSocket,
}

/// Client->server datagrams waiting for the flush, each for its flow's
/// upstream socket; `order` is the flush's scratch (indices grouped by
/// flow), reused.
#[derive(Default)]
struct UpQueue {
    arena: Vec<u8>,
    /// (flow, start in `arena`, length).
    entries: Vec<(usize, usize, usize)>,
    order: Vec<usize>,
}

/// The relay's state, on its one thread.
struct Relay {
    down: UdpSocket,
    upstream: SocketAddr,
    flows: Vec<Flow>,
    index: HashMap<SocketAddr, usize>,
    max_flows: usize,
    flows_refused: u64,
    flows_failed: u64,
    ways: [Direction; 2],
    heap: BinaryHeap<Reverse<Held>>,
    seq: u64,
    /// Spare buffers of released copies, reused for the next delayed ones
    /// (never more than the most copies held at once).
    spare: Vec<Vec<u8>>,
    /// Server->client datagrams to send from `down`.
    down_out: SendBatch,
    /// Client->server datagrams to send, by flow.
    up_queue: UpQueue,
    /// One flow's share of `up_queue`, being sent.
    up_out: SendBatch,
    /// Whether `down` reports kernel drops.
    rxq_ovfl: bool,
    up_kernel_drops: u64,
    warned_full: bool,
    warned_failed: bool,
}

/// A warning on stderr that cannot fail the relay: `eprintln!` panics when
/// stderr is gone (a closed pipe), and these are raised by what clients
/// send.
fn warn(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{args}");
}

/// A UDP socket bound to `addr`, non-blocking, with 4 MiB buffers asked.
fn udp_socket(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let std = std::net::UdpSocket::bind(addr)?;
    std.set_nonblocking(true)?;
    let sock = UdpSocket::from_std(std);
    // Best effort: the kernel caps them at its rmem_max/wmem_max.
    let s2 = socket2::SockRef::from(&sock);
    let _ = s2.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s2.set_send_buffer_size(SOCKET_BUFFER);
    Ok(sock)
}

fn unspecified(of: &SocketAddr) -> SocketAddr {
    let ip = match of.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

impl Relay {
    fn way(&mut self, way: Way) -> &mut Direction {
        &mut self.ways[way as usize]
    }

    /// The flow of `client`, opened (and registered) if new and allowed.
    fn flow_of(&mut self, poll: &Poll, client: SocketAddr) -> Option<usize> {
        if let Some(&i) = self.index.get(&client) {
            return Some(i);
        }
        if self.flows.len() >= self.max_flows {
            self.flows_refused += 1;
            if !self.warned_full {
                self.warned_full = true;
                warn(format_args!(
                    "keel-bench relay: --max-flows {} reached: datagrams from new client \
                     addresses (first {client}) are dropped and counted in flows_refused",
                    self.max_flows
                ));
            }
            return None;
        }
        let opened = udp_socket(unspecified(&self.upstream)).and_then(|mut s| {
            s.connect(self.upstream)?;
            let token = Token(FIRST_FLOW + self.flows.len());
            poll.registry()
                .register(&mut s, token, Interest::READABLE)?;
            Ok(s)
        });
        match opened {
            Ok(up) => {
                let i = self.flows.len();
                self.flows.push(Flow { client, up });
                self.index.insert(client, i);
                Some(i)
            }
            Err(e) => {
                self.flows_failed += 1;
                if !self.warned_failed {
                    self.warned_failed = true;
                    warn(format_args!(
                        "keel-bench relay: opening an upstream socket for {client}: {e} \
                         (its datagrams are dropped, counted in flows_failed)"
                    ));
                }
                None
            }
        }
    }

    /// A datagram received on `way` for `flow`: counted, decided, sent now
    /// or held.
    fn arrive(&mut self, now: Instant, way: Way, flow: usize, data: &[u8]) {
        let dir = self.way(way);
        dir.counts.datagrams += 1;
        dir.counts.bytes += data.len() as u64;
        match dir.conditioner.decide() {
            Verdict::Drop => dir.counts.dropped += 1,
            Verdict::Deliver {
                delay,
                reordered,
                duplicate,
            } => {
                dir.counts.reordered += u64::from(reordered);
                self.emit(now, way, flow, data, delay);
                if let Some(d) = duplicate {
                    self.way(way).counts.duplicated += 1;
                    self.emit(now, way, flow, data, d);
                }
            }
        }
    }

    fn emit(&mut self, now: Instant, way: Way, flow: usize, data: &[u8], delay: Duration) {
        if delay.is_zero() {
            self.queue(way, flow, data);
            return;
        }
        let dir = self.way(way);
        if dir.held >= dir.limit || dir.held_bytes + data.len() > dir.limit_bytes {
            dir.counts.overflow += 1;
            return;
        }
        dir.held += 1;
        dir.held_bytes += data.len();
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        self.seq += 1;
        self.heap.push(Reverse(Held {
            due: now + delay,
            seq: self.seq,
            way,
            flow,
            data: buf,
        }));
    }

    /// Queues a copy for the next flush (which it forces when the queue is
    /// full).
    fn queue(&mut self, way: Way, flow: usize, data: &[u8]) {
        match way {
            Way::Down => {
                let client = self.flows[flow].client;
                if !self.down_out.push(Some(client), data) {
                    self.flush_down();
                    let queued = self.down_out.push(Some(client), data);
                    debug_assert!(queued, "an empty batch takes a datagram");
                }
            }
            Way::Up => {
                if self.up_queue.entries.len() >= UP_QUEUE {
                    self.flush_up();
                }
                let q = &mut self.up_queue;
                q.entries.push((flow, q.arena.len(), data.len()));
                q.arena.extend_from_slice(data);
            }
        }
    }

    /// Sends everything queued, both ways.
    fn flush(&mut self) {
        self.flush_down();
        self.flush_up();
    }

    fn flush_down(&mut self) {
        let c = &mut self.ways[Way::Down as usize].counts;
        send_all(&self.down, &mut self.down_out, c);
        self.down_out.clear();
    }

    /// Sends the staged client->server datagrams, flow by flow (each flow's
    /// in arrival order), one `sendmmsg` per flow and up to [`BATCH`].
    fn flush_up(&mut self) {
        let UpQueue {
            arena,
            entries,
            order,
        } = &mut self.up_queue;
        if entries.is_empty() {
            return;
        }
        order.clear();
        order.extend(0..entries.len());
        // Unique keys: unstable is stable here, and allocates nothing.
        order.sort_unstable_by_key(|&i| (entries[i].0, i));
        let c = &mut self.ways[Way::Up as usize].counts;
        let mut k = 0;
        while k < order.len() {
            let flow = entries[order[k]].0;
            self.up_out.clear();
            while k < order.len() && entries[order[k]].0 == flow && !self.up_out.is_full() {
                let (_, start, len) = entries[order[k]];
                self.up_out.push(None, &arena[start..start + len]);
                k += 1;
            }
            send_all(&self.flows[flow].up, &mut self.up_out, c);
        }
        self.up_out.clear();
        arena.clear();
        entries.clear();
    }

    /// Sends every held copy due by `now`.
    fn release(&mut self, now: Instant) {
        while self.heap.peek().is_some_and(|h| h.0.due <= now) {
            let Reverse(h) = self.heap.pop().expect("peeked");
            let dir = self.way(h.way);
            dir.held -= 1;
            dir.held_bytes -= h.data.len();
            self.queue(h.way, h.flow, &h.data);
            self.spare.push(h.data);
        }
    }

    /// Reads the client-facing socket until it is drained.
    fn read_down(&mut self, poll: &Poll, batch: &mut RecvBatch) {
        loop {
            match recv_batch(&self.down, batch) {
                Ok(n) => {
                    self.ways[Way::Up as usize].counts.recv_calls += 1;
                    if self.rxq_ovfl {
                        self.up_kernel_drops += batch.take_kernel_drops_delta();
                    }
                    let now = Instant::now();
                    for i in 0..n {
                        if let Some(flow) = self.flow_of(poll, batch.addr(i)) {
                            self.arrive(now, Way::Up, flow, batch.data(i));
                        }
                    }
                    // Fewer than a full batch: drained (a later datagram
                    // raises a new event).
                    if n < batch.per_call() {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // An ICMP error of an earlier send to a client that is
                // gone: nothing to read, keep going.
                Err(_) => continue,
            }
        }
    }

    /// Reads flow `flow`'s upstream socket until it is drained.
    fn read_up(&mut self, flow: usize, batch: &mut RecvBatch) {
        loop {
            match recv_batch(&self.flows[flow].up, batch) {
                Ok(n) => {
                    self.ways[Way::Down as usize].counts.recv_calls += 1;
                    let now = Instant::now();
                    for i in 0..n {
                        self.arrive(now, Way::Down, flow, batch.data(i));
                    }
                    if n < batch.per_call() {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // The server's port is closed (ICMP): nothing to read.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(_) => return,
            }
        }
    }
}

/// Sends every datagram of `batch` on `sock`, resuming a partial
/// `sendmmsg` from the first datagram not sent, and counts them in `c`: an
/// error drops (and counts) its one datagram; a full send buffer drops
/// what is left.
fn send_all(sock: &UdpSocket, batch: &mut SendBatch, c: &mut WayCounts) {
    let len = batch.len();
    let mut start = 0;
    while start < len {
        match send_batch(sock, batch, start) {
            Ok(n) => {
                c.send_calls += 1;
                for i in start..start + n {
                    c.sent += 1;
                    c.sent_bytes += batch.entry(i).1.len() as u64;
                }
                start += n;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                c.send_errors += (len - start) as u64;
                return;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                c.send_errors += 1;
                start += 1;
            }
        }
    }
}

/// How long to wait for the next event: until the next held copy is due or
/// the end, at most [`MAX_WAIT`]; mio waits whole milliseconds rounded up,
/// so a copy is never sent early.
fn wait(now: Instant, next_due: Option<Instant>, end: Option<Instant>) -> Duration {
    [next_due, end]
        .into_iter()
        .flatten()
        .map(|t| t.saturating_duration_since(now))
        .fold(MAX_WAIT, Duration::min)
}

/// Relays until `--seconds` or SIGINT/SIGTERM and returns the summary;
/// `Err` when it could not start (the address in use, a bad socket).
pub fn relay(cfg: &RelayConfig) -> Result<RelaySummary, String> {
    let mut poll = Poll::new().map_err(|e| format!("creating the poll: {e}"))?;
    let waker = Arc::new(
        Waker::new(poll.registry(), WAKE).map_err(|e| format!("creating the waker: {e}"))?,
    );
    // 0: running; 1: SIGINT; 2: SIGTERM.
    let signal = Arc::new(AtomicU8::new(0));
    let mut signals =
        Signals::new([SIGINT, SIGTERM]).map_err(|e| format!("installing signal handlers: {e}"))?;
    let signal_handle = signals.handle();
    {
        let (signal, waker) = (signal.clone(), waker.clone());
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                signal.store(if sig == SIGINT { 1 } else { 2 }, Ordering::Release);
                let _ = waker.wake();
            }
        });
    }
    let mut down = udp_socket(cfg.bind).map_err(|e| format!("--bind {}: {e}", cfg.bind))?;
    poll.registry()
        .register(&mut down, DOWN, Interest::READABLE)
        .map_err(|e| format!("registering --bind {}: {e}", cfg.bind))?;
    let bound = down
        .local_addr()
        .map_err(|e| format!("--bind {}: {e}", cfg.bind))?;
    let rxq_ovfl = enable_rxq_ovfl(&down).is_ok();
    let mut relay = Relay {
        down,
        upstream: cfg.upstream,
        flows: Vec::new(),
        index: HashMap::new(),
        max_flows: cfg.max_flows as usize,
        flows_refused: 0,
        flows_failed: 0,
        ways: [
            Direction::new(&cfg.impair, 0),
            Direction::new(&cfg.impair_server, 1),
        ],
        heap: BinaryHeap::new(),
        seq: 0,
        spare: Vec::new(),
        down_out: SendBatch::new(DOWN_QUEUE, BATCH),
        up_queue: UpQueue::default(),
        up_out: SendBatch::new(BATCH, BATCH),
        rxq_ovfl,
        up_kernel_drops: 0,
        warned_full: false,
        warned_failed: false,
    };
    eprintln!("ready {bound}");
    let started = Instant::now();
    let cpu_start = process_cpu_time();
    let end = cfg.seconds.map(|s| started + Duration::from_secs_f64(s));
    let mut events = Events::with_capacity(1024);
    let mut down_in = RecvBatch::new(BATCH, SLOT);
    let mut up_in = RecvBatch::new(BATCH, SLOT).without_sources();
    let mut error = None;
    let ended_by = loop {
        let now = Instant::now();
        relay.release(now);
        relay.flush();
        match signal.load(Ordering::Acquire) {
            1 => break "SIGINT".to_string(),
            2 => break "SIGTERM".to_string(),
            _ => {}
        }
        if end.is_some_and(|e| now >= e) {
            break "seconds".to_string();
        }
        let timeout = wait(now, relay.heap.peek().map(|h| h.0.due), end);
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            error = Some(format!("polling: {e}"));
            break "error".to_string();
        }
        for ev in events.iter() {
            match ev.token() {
                DOWN => relay.read_down(&poll, &mut down_in),
                WAKE => {}
                Token(t) => relay.read_up(t - FIRST_FLOW, &mut up_in),
            }
        }
    };
    signal_handle.close();
    let elapsed = started.elapsed();
    let cpu = cpu_start
        .zip(process_cpu_time())
        .map(|(a, b)| b.saturating_sub(a).as_secs_f64());
    let [up, down] = [relay.ways[0].counts, relay.ways[1].counts];
    let datagrams = up.datagrams + down.datagrams;
    Ok(RelaySummary {
        role: "relay",
        keel_version: env!("CARGO_PKG_VERSION"),
        bind: bound.to_string(),
        upstream: cfg.upstream.to_string(),
        impair: cfg.impair.to_string(),
        impair_server: cfg.impair_server.to_string(),
        flows: relay.flows.len() as u64,
        flows_refused: relay.flows_refused,
        flows_failed: relay.flows_failed,
        up_kernel_drops: rxq_ovfl.then_some(relay.up_kernel_drops),
        up,
        down,
        held_at_end: relay.heap.len() as u64,
        elapsed_seconds: elapsed.as_secs_f64(),
        ended_by,
        cpu_seconds: cpu,
        cpu_us_per_datagram: cpu
            .filter(|_| datagrams > 0)
            .map(|c| c * 1e6 / datagrams as f64),
        ok: error.is_none(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_the_nearest_deadline_at_most_max_wait() {
        let now = Instant::now();
        assert_eq!(wait(now, None, None), MAX_WAIT);
        let soon = now + Duration::from_millis(3);
        assert_eq!(wait(now, Some(soon), None), Duration::from_millis(3));
        assert_eq!(
            wait(now, Some(now + Duration::from_secs(1)), Some(soon)),
            Duration::from_millis(3)
        );
        assert_eq!(wait(now, Some(now), None), Duration::ZERO);
    }

    #[test]
    fn the_summary_flattens_both_directions_with_prefixes() {
        let s = RelaySummary {
            role: "relay",
            keel_version: "0",
            bind: "127.0.0.1:1".into(),
            upstream: "127.0.0.1:2".into(),
            impair: "off".into(),
            impair_server: "off".into(),
            flows: 1,
            flows_refused: 0,
            flows_failed: 0,
            up_kernel_drops: Some(0),
            up: WayCounts {
                datagrams: 3,
                ..WayCounts::default()
            },
            down: WayCounts {
                dropped: 2,
                ..WayCounts::default()
            },
            held_at_end: 0,
            elapsed_seconds: 1.0,
            ended_by: "seconds".into(),
            cpu_seconds: None,
            cpu_us_per_datagram: None,
            ok: true,
            error: None,
        };
        let v: serde_json::Value = serde_json::from_str(&s.to_json_line()).unwrap();
        assert_eq!(v["up_datagrams"], 3);
        assert_eq!(v["down_dropped"], 2);
        assert_eq!(v["down_datagrams"], 0);
        assert!(v.get("up").is_none());
    }
}
