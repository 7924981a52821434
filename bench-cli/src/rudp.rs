//! `--protocol rudp`: the echo over keel-rudp connections, in this process.
//!
//! The server is a keel-rudp [`Server`] whose handler validates each
//! message, runs `--work` rounds and sends it back on the channel it came
//! on (`--channel`). Each client is a keel-rudp [`Client`]; once every
//! handshake is done the run starts, and each client either keeps
//! `--window` messages in flight (closed loop, the UDP mode's shape) or
//! sends `--rate` messages per second whatever comes back (open loop, a
//! game tick). Messages are the UDP mode's (`crate::message`): header,
//! deterministic fill, checked byte for byte on the way back.
//!
//! The main thread paces the run: it posts a tick to every client each
//! millisecond (sends due in open loop; unreliable channels give up a
//! message after [`UNRELIABLE_LOSS_TIMEOUT`]) until the measured phase and
//! its drain are over. `--impair` and `--impair-server` are keel-udp's link
//! conditioner on the send path of the sockets under keel-rudp.
//!
//! Reported like the UDP mode (same fields, same meaning where they apply),
//! plus `channel`, `rate_hz`, `messages_delivered`, `messages_resent`,
//! `redundant_copies` and `wire_bytes_per_payload_byte`, which only a rudp
//! line has. Socket buffers are not read back (keel-rudp does not expose
//! them): those fields are null.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, Config, ConnectionHandle, Ctx,
    DisconnectReason, Handler, Server, ServerConfig, Stats,
};
use keel_udp::{CounterSnapshot, Impairment, SocketOptions};

use crate::flags::{ChannelChoice, RunConfig};
use crate::loopback::{runtime_for, sleep_until, DRAIN};
use crate::message::{decode_header, encode, server_work, verify_fill, Phase};
use crate::output::{RunReport, UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::procstats::{peak_rss_bytes, process_cpu_time};
use crate::stats::Rtt;

/// How long a message on an unreliable channel may go unanswered before it
/// counts as lost and (closed loop) frees its window slot.
pub const UNRELIABLE_LOSS_TIMEOUT: Duration = Duration::from_secs(1);
/// How long every client has to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Upper bound on collecting tallies and stats after the drain.
const COLLECT: Duration = Duration::from_secs(2);
/// How often the main thread ticks the clients.
const TICK: Duration = Duration::from_millis(1);
/// The one channel of a run.
const CHANNEL: u8 = 0;

/// The connection settings both ends use: one channel of `--channel`'s
/// kind; messages may be as large as `--payload`.
pub fn connection_config(cfg: &RunConfig) -> Config {
    let kind = match cfg.channel {
        ChannelChoice::ReliableOrdered => ChannelKind::ReliableOrdered,
        ChannelChoice::ReliableUnordered => ChannelKind::ReliableUnordered,
        ChannelChoice::UnreliableSequenced => ChannelKind::UnreliableSequenced,
        ChannelChoice::Unreliable => ChannelKind::Unreliable,
    };
    let mut config = Config::new(vec![ChannelConfig::new(kind)]);
    let in_flight = (cfg.window as usize).max(64) * cfg.payload as usize;
    config.max_message_size = config.max_message_size.max(cfg.payload as usize);
    config.max_send_buffer = config.max_send_buffer.max(4 * in_flight);
    config.max_recv_buffer = config.max_recv_buffer.max(4 * in_flight);
    config
}

fn socket_options() -> SocketOptions {
    SocketOptions {
        send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
        recv_buffer: Some(UDP_RECEIVE_BUFFER_REQUEST as usize),
        ..SocketOptions::default()
    }
}

// ---------------------------------------------------------------- server

/// What the echo server counts, shared with the run.
#[derive(Default)]
struct ServerCounts {
    /// Measured-phase messages received.
    delivered: AtomicU64,
    /// Messages with a bad header.
    invalid: AtomicU64,
    /// Echoes keel-rudp refused.
    send_rejections: AtomicU64,
    /// Message bytes echoed (whole run).
    echoed_bytes: AtomicU64,
    /// Sink of the server's work.
    sink: AtomicU64,
}

struct EchoPeer {
    work: u64,
    counts: Arc<ServerCounts>,
}

impl Handler for EchoPeer {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        match decode_header(data) {
            Ok(h) if h.phase == Phase::Measured => {
                self.counts.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                self.counts.invalid.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if self.work > 0 {
            let r = server_work(data, self.work);
            self.counts.sink.fetch_xor(r, Ordering::Relaxed);
        }
        match ctx.send(conn, channel, data) {
            Ok(_) => {
                self.counts
                    .echoed_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.counts.send_rejections.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------- client

/// When the phases start and end.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    start: Instant,
    measure_start: Instant,
    measure_end: Instant,
}

/// One client's counts, added up over the clients at the end.
#[derive(Clone, Debug, Default)]
struct Tally {
    messages_sent: u64,
    messages: u64,
    send_rejections: u64,
    content_errors: u64,
    order_errors: u64,
    unexpected: u64,
    late: u64,
    lost: u64,
    warmup_lost: u64,
    warmup_errors: u64,
    disconnects: u64,
    disconnect_reason: Option<String>,
    /// Message bytes sent, whole run.
    sent_bytes: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.messages_sent += o.messages_sent;
        self.messages += o.messages;
        self.send_rejections += o.send_rejections;
        self.content_errors += o.content_errors;
        self.order_errors += o.order_errors;
        self.unexpected += o.unexpected;
        self.late += o.late;
        self.lost += o.lost;
        self.warmup_lost += o.warmup_lost;
        self.warmup_errors += o.warmup_errors;
        self.disconnects += o.disconnects;
        self.sent_bytes += o.sent_bytes;
        if self.disconnect_reason.is_none() {
            self.disconnect_reason.clone_from(&o.disconnect_reason);
        }
    }
}

/// A client's end of the echo.
struct BenchPeer {
    id: u32,
    payload: usize,
    window: usize,
    rate: Option<u32>,
    channel: ChannelChoice,
    conn: Option<ConnectionHandle>,
    schedule: Option<Schedule>,
    /// Sequence → (sent at, phase).
    outstanding: HashMap<u64, (Instant, Phase)>,
    next_seq: u64,
    /// Highest sequence echoed, per phase (order checks).
    highest: [Option<u64>; 2],
    buf: Vec<u8>,
    tally: Tally,
    rtt: Rtt,
    connected: Arc<AtomicUsize>,
    drained: Arc<AtomicUsize>,
    done: bool,
}

impl BenchPeer {
    fn start(&mut self, ctx: &mut Ctx<'_>, schedule: Schedule) {
        self.schedule = Some(schedule);
        self.pump(ctx);
    }

    /// Sends what is due, gives up on lost unreliable messages, and says
    /// when this client has nothing left in flight after the phase.
    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let now = Instant::now();
        if !self.channel.reliable() {
            let tally = &mut self.tally;
            self.outstanding.retain(|_, (at, phase)| {
                let keep = now.saturating_duration_since(*at) < UNRELIABLE_LOSS_TIMEOUT;
                if !keep {
                    match phase {
                        Phase::Measured => tally.lost += 1,
                        Phase::Warmup => tally.warmup_lost += 1,
                    }
                }
                keep
            });
        }
        self.pump(ctx);
    }

    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let (Some(s), Some(conn)) = (self.schedule, self.conn) else {
            return;
        };
        let now = Instant::now();
        if now < s.measure_end {
            match self.rate {
                None => {
                    while self.outstanding.len() < self.window {
                        if !self.send_one(ctx, conn, now, s) {
                            break;
                        }
                    }
                }
                Some(hz) => {
                    let due = (now.duration_since(s.start).as_secs_f64() * f64::from(hz)) as u64;
                    while self.next_seq < due + 1 {
                        if !self.send_one(ctx, conn, now, s) {
                            break;
                        }
                    }
                }
            }
        } else if self.outstanding.is_empty() && !self.done {
            self.done = true;
            self.drained.fetch_add(1, Ordering::Release);
        }
    }

    fn send_one(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: ConnectionHandle,
        now: Instant,
        s: Schedule,
    ) -> bool {
        let phase = if now < s.measure_start {
            Phase::Warmup
        } else {
            Phase::Measured
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        encode(&mut self.buf, phase, self.id, seq);
        match ctx.send(conn, CHANNEL, &self.buf) {
            Ok(_) => {
                self.outstanding.insert(seq, (now, phase));
                self.tally.sent_bytes += self.payload as u64;
                if phase == Phase::Measured {
                    self.tally.messages_sent += 1;
                }
                true
            }
            Err(_) => {
                match phase {
                    Phase::Measured => self.tally.send_rejections += 1,
                    Phase::Warmup => self.tally.warmup_errors += 1,
                }
                false
            }
        }
    }

    fn check(&mut self, data: &[u8], now: Instant) -> Result<(), ()> {
        let h = decode_header(data).map_err(|_| self.tally.content_errors += 1)?;
        if h.client != self.id || data.len() != self.payload || !verify_fill(data, &h) {
            self.tally.content_errors += 1;
            return Err(());
        }
        let Some((sent, phase)) = self.outstanding.remove(&h.seq) else {
            if h.seq < self.next_seq {
                self.tally.late += 1;
            } else {
                self.tally.unexpected += 1;
            }
            return Err(());
        };
        let slot = usize::from(phase == Phase::Measured);
        let in_order = self.highest[slot].is_none_or(|hi| h.seq > hi);
        if in_order {
            self.highest[slot] = Some(h.seq);
        }
        match phase {
            Phase::Warmup if !in_order && self.channel.ordered() => self.tally.warmup_errors += 1,
            Phase::Warmup => {}
            Phase::Measured => {
                if !in_order && self.channel.ordered() {
                    self.tally.order_errors += 1;
                }
                self.tally.messages += 1;
                self.rtt.record(now.saturating_duration_since(sent));
            }
        }
        Ok(())
    }
}

impl Handler for BenchPeer {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        self.connected.fetch_add(1, Ordering::Release);
        self.pump(ctx);
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle, _: u8, data: &[u8]) {
        let _ = self.check(data, Instant::now());
        self.pump(ctx);
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, reason: &DisconnectReason) {
        self.conn = None;
        self.tally.disconnects += 1;
        if self.tally.disconnect_reason.is_none() {
            self.tally.disconnect_reason = Some(format!("{reason:?}"));
        }
        if !self.done {
            self.done = true;
            self.drained.fetch_add(1, Ordering::Release);
        }
    }
}

// ---------------------------------------------------------------- the run

/// Runs the keel-rudp echo and returns its report with `ok` decided.
pub fn run(cfg: &RunConfig) -> RunReport {
    let mut report = RunReport::new(cfg);
    report.channel = Some(cfg.channel.as_str());
    report.rate_hz = Some(cfg.rate_hz);
    report.batch = None;
    report.udp_server_receive_buffer_requested_bytes = Some(UDP_RECEIVE_BUFFER_REQUEST);
    report.loss_timeout_ms =
        (!cfg.channel.reliable()).then_some(UNRELIABLE_LOSS_TIMEOUT.as_millis() as u64);
    if let Err(e) = run_into(cfg, &mut report) {
        report.error = Some(e);
    }
    report.finish();
    report
}

/// Stats summed over connections.
#[derive(Default)]
struct StatSum {
    retransmissions: u64,
    redundant_copies: u64,
    bytes_sent: u64,
}

impl StatSum {
    fn add(&mut self, s: &Stats) {
        self.retransmissions += s.retransmissions;
        self.redundant_copies += s.redundant_copies;
        self.bytes_sent += s.bytes_sent;
    }
}

fn run_into(cfg: &RunConfig, report: &mut RunReport) -> Result<(), String> {
    let rt = runtime_for(cfg.io_model, cfg.io_threads)
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let counts = Arc::new(ServerCounts::default());
    let mut sc = ServerConfig::new(connection_config(cfg));
    sc.lanes = cfg.server_lanes as usize;
    sc.max_connections = sc.max_connections.max(cfg.clients as usize);
    sc.udp.socket = socket_options();
    sc.udp.send_impairment = cfg.impair_server.as_deref().cloned();
    let work = cfg.work;
    let server_counts = counts.clone();
    let server = Server::bind(rt.handles(), cfg.server_addr(), sc, move |_| EchoPeer {
        work,
        counts: server_counts.clone(),
    })
    .map_err(|e| format!("starting the keel-rudp echo server: {e}"))?;

    let connected = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::with_capacity(cfg.clients as usize);
    for id in 0..cfg.clients {
        let mut cc = ClientConfig::new(connection_config(cfg));
        cc.udp.socket = socket_options();
        cc.udp.send_impairment = cfg.impair.as_ref().map(|imp| Impairment {
            seed: imp.seed.wrapping_add(u64::from(id)),
            ..(**imp).clone()
        });
        let peer = BenchPeer {
            id,
            payload: cfg.payload as usize,
            window: cfg.window as usize,
            rate: cfg.rate_hz,
            channel: cfg.channel,
            conn: None,
            schedule: None,
            outstanding: HashMap::with_capacity(cfg.window as usize * 2),
            next_seq: 0,
            highest: [None, None],
            buf: vec![0; cfg.payload as usize],
            tally: Tally::default(),
            rtt: Rtt::new(),
            connected: connected.clone(),
            drained: drained.clone(),
            done: false,
        };
        let reactor = rt
            .reactor(id as usize % rt.reactors())
            .expect("context index in range");
        let client = Client::connect(reactor, server.local_addr(), cc, peer)
            .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
        clients.push(client);
    }

    let result = drive(cfg, report, &clients, &connected, &drained);
    let (tally, rtt, client_stats, client_udp) = collect_clients(&clients);
    let server_stats = collect_server(&server);
    for c in &clients {
        c.stop();
    }
    let server_udp = server.udp_counters();
    server.stop();
    let stopped = rt.stop();

    record(report, &tally, &counts, &rtt);
    if let Ok(elapsed) = result {
        // After `record`: throughput is messages over elapsed.
        report.set_throughput(elapsed);
    }
    let stats = {
        let mut s = client_stats;
        s.retransmissions += server_stats.retransmissions;
        s.redundant_copies += server_stats.redundant_copies;
        s.bytes_sent += server_stats.bytes_sent;
        s
    };
    report.messages_resent = Some(stats.retransmissions);
    report.redundant_copies = Some(stats.redundant_copies);
    let payload_bytes = tally.sent_bytes + counts.echoed_bytes.load(Ordering::Relaxed);
    report.wire_bytes_per_payload_byte =
        (payload_bytes > 0).then(|| stats.bytes_sent as f64 / payload_bytes as f64);
    report.kernel_rcvbuf_drops = Some(client_udp.kernel_drops + server_udp.kernel_drops);
    report.conditioner_dropped =
        Some(client_udp.conditioner_dropped + server_udp.conditioner_dropped);
    report.conditioner_duplicated =
        Some(client_udp.conditioner_duplicated + server_udp.conditioner_duplicated);
    report.client_send_completion_errors = client_udp.send_errors;
    report.server_send_completion_errors = Some(server_udp.send_errors);
    result?;
    if let Err(e) = stopped {
        report.callback_exceptions += 1;
        return Err(format!("a handler failed: {e}"));
    }
    if let Some(reason) = &tally.disconnect_reason {
        return Err(format!(
            "disconnect_errors = {}: a keel-rudp connection ended: {reason}",
            tally.disconnects
        ));
    }
    Ok(())
}

/// Waits for the handshakes, then ticks the clients through the warm-up,
/// the measured phase and the drain, measuring time and CPU.
fn drive(
    cfg: &RunConfig,
    report: &mut RunReport,
    clients: &[Client<BenchPeer>],
    connected: &AtomicUsize,
    drained: &AtomicUsize,
) -> Result<Duration, String> {
    let n = clients.len();
    let handshake_deadline = Instant::now() + HANDSHAKE;
    while connected.load(Ordering::Acquire) < n {
        if Instant::now() >= handshake_deadline {
            return Err(format!(
                "{} of {n} keel-rudp clients finished the handshake within {HANDSHAKE:?}",
                connected.load(Ordering::Acquire)
            ));
        }
        std::thread::sleep(TICK);
    }
    let start = Instant::now();
    let measure_start = start + Duration::from_secs_f64(cfg.warmup);
    let measure_end = measure_start + Duration::from_secs_f64(cfg.seconds);
    let schedule = Schedule {
        start,
        measure_start,
        measure_end,
    };
    for c in clients {
        c.post(move |h, ctx| h.start(ctx, schedule));
    }
    let drain_deadline = measure_end + DRAIN;
    let mut cpu_start = None;
    let mut wall_start = None;
    let mut next = start;
    let drained_at = loop {
        let now = Instant::now();
        if wall_start.is_none() && now >= measure_start {
            cpu_start = process_cpu_time();
            wall_start = Some(now);
        }
        if now >= measure_end && drained.load(Ordering::Acquire) >= n {
            break Some(now);
        }
        if now >= drain_deadline {
            break None;
        }
        for c in clients {
            c.post(|h, ctx| h.tick(ctx));
        }
        next += TICK;
        sleep_until(next.max(Instant::now()));
    };
    let cpu_end = process_cpu_time();
    let wall = wall_start.map_or(Duration::ZERO, |w| w.elapsed());
    if drained_at.is_none() {
        report.drain_timeouts = 1;
    }
    let end = drained_at.unwrap_or(drain_deadline);
    let elapsed = end.saturating_duration_since(measure_start);
    if let (Some(a), Some(b)) = (cpu_start, cpu_end) {
        report.set_cpu(b.saturating_sub(a), wall);
    }
    report.peak_rss_bytes = peak_rss_bytes();
    Ok(elapsed)
}

/// Every client's tally (what is still outstanding counts as lost), RTT
/// samples, connection stats and socket counters.
fn collect_clients(clients: &[Client<BenchPeer>]) -> (Tally, Rtt, StatSum, CounterSnapshot) {
    let (tx, rx) = mpsc::channel();
    for c in clients {
        let tx = tx.clone();
        c.post(move |h, ctx| {
            let mut t = std::mem::take(&mut h.tally);
            for (_, phase) in h.outstanding.values() {
                match phase {
                    Phase::Measured => t.lost += 1,
                    Phase::Warmup => t.warmup_lost += 1,
                }
            }
            let stats = h.conn.and_then(|c| ctx.stats(c));
            let _ = tx.send((t, std::mem::take(&mut h.rtt), stats));
        });
    }
    drop(tx);
    let mut tally = Tally::default();
    let mut rtt = Rtt::new();
    let mut sum = StatSum::default();
    let deadline = Instant::now() + COLLECT;
    let mut got = 0;
    while got < clients.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((t, r, s)) => {
                tally.add(&t);
                rtt.merge(&r);
                if let Some(s) = s {
                    sum.add(&s);
                }
                got += 1;
            }
            Err(_) => break,
        }
    }
    let mut udp = CounterSnapshot::default();
    for c in clients {
        let k = c.udp_counters();
        udp.kernel_drops += k.kernel_drops;
        udp.conditioner_dropped += k.conditioner_dropped;
        udp.conditioner_duplicated += k.conditioner_duplicated;
        udp.send_errors += k.send_errors;
    }
    if got < clients.len() {
        tally.disconnects += (clients.len() - got) as u64;
        tally
            .disconnect_reason
            .get_or_insert_with(|| format!("{} clients did not report", clients.len() - got));
    }
    (tally, rtt, sum, udp)
}

/// The server connections' stats, summed over lanes.
fn collect_server(server: &Server<EchoPeer>) -> StatSum {
    let (tx, rx) = mpsc::channel();
    for lane in 0..server.lanes() {
        let tx = tx.clone();
        server.post(lane, move |_, ctx| {
            let mut conns = Vec::new();
            ctx.connections(&mut conns);
            let mut sum = StatSum::default();
            for c in conns {
                if let Some(s) = ctx.stats(c) {
                    sum.add(&s);
                }
            }
            let _ = tx.send(sum);
        });
    }
    drop(tx);
    let mut total = StatSum::default();
    let deadline = Instant::now() + COLLECT;
    while let Ok(s) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        total.retransmissions += s.retransmissions;
        total.redundant_copies += s.redundant_copies;
        total.bytes_sent += s.bytes_sent;
    }
    total
}

fn record(report: &mut RunReport, tally: &Tally, counts: &ServerCounts, rtt: &Rtt) {
    report.messages_sent = tally.messages_sent;
    report.messages = tally.messages;
    report.client_send_rejections = tally.send_rejections;
    report.content_errors = tally.content_errors;
    report.order_errors = tally.order_errors;
    report.unexpected_messages = tally.unexpected + counts.invalid.load(Ordering::Relaxed);
    report.disconnect_errors = tally.disconnects;
    report.udp_lost_messages = tally.lost;
    report.late_echoes = Some(tally.late);
    report.udp_lost_warmup_messages = Some(tally.warmup_lost);
    report.warmup_errors = tally.warmup_errors;
    report.warmup_ok = tally.warmup_errors == 0;
    report.server_send_rejections = Some(counts.send_rejections.load(Ordering::Relaxed));
    report.messages_delivered = Some(counts.delivered.load(Ordering::Relaxed));
    report.set_rtt(&rtt.summary());
}
