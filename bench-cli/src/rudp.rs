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
//! The main thread paces the run (`crate::peer::drive`): closed loop, it
//! posts a tick to every client each millisecond (unreliable channels give
//! up a message after [`UNRELIABLE_LOSS_TIMEOUT`]); open loop, each client
//! ticks itself on its lane with `Ctx::tick_at`. `--impair` and `--impair-server` are keel-udp's link
//! conditioner on the send path of the sockets under keel-rudp.
//!
//! With `--transfer` (the bulk case, `crate::bulk`) the server answers each
//! whole message with a 16-byte receipt instead of echoing it.
//!
//! Reported like the UDP mode (same fields, same meaning where they apply),
//! plus `channel`, `rate_hz`, `messages_delivered`, `messages_resent`,
//! `redundant_copies`, `recovered_by_redundancy` and
//! `wire_bytes_per_payload_byte`, which only a rudp
//! line has. Socket buffers are not read back (keel-rudp does not expose
//! them): those fields are null.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config, ConnectionHandle,
    Ctx, DisconnectReason, Handler, Server, ServerConfig, ServerSecurity, Stats, TokenMinter,
    TokenSpec,
};
use keel_rudp_proto::{os_random, Connection, Event};
use keel_udp::{CounterSnapshot, Impairment};

use crate::flags::{ChannelChoice, ClientSocketsChoice, RunConfig, DEFAULT_ACK_DELAY_MS};
use crate::output::{RunReport, UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::peer::ClientSet;
use crate::peer::{
    collect_tallies, drive, lock, record, record_server, record_sockets, runtimes, shared_rtt,
    Driver, Job, Measured, ServerCounts, ServerProbe, ServerTally, SharedRtt, Tally, COLLECT,
    UNRELIABLE_LOSS_TIMEOUT,
};
use crate::procstats::rss_bytes;
use crate::socket_client::{client_endpoint, Clients, Outbound, Transport, Wake};
use crate::stats::Rtt;

/// The one channel of a run.
const CHANNEL: u8 = 0;

/// The connection settings both ends use: one channel of `--channel`'s
/// kind (bulk with `--bulk-channel`); messages may be as large as
/// `--payload` (or `--transfer`), and the buffers hold 4 times what is in
/// flight.
pub(crate) fn connection_config(cfg: &RunConfig) -> Config {
    connection_config_of(cfg, Duration::from_millis(DEFAULT_ACK_DELAY_MS.into()))
}

/// A client's connection settings: the server's with `--ack-delay`.
fn client_connection_config(cfg: &RunConfig) -> Config {
    connection_config_of(cfg, Duration::from_millis(cfg.ack_delay_ms.into()))
}

fn connection_config_of(cfg: &RunConfig, max_ack_delay: Duration) -> Config {
    let kind = match cfg.channel {
        ChannelChoice::ReliableOrdered => ChannelKind::ReliableOrdered,
        ChannelChoice::ReliableUnordered => ChannelKind::ReliableUnordered,
        ChannelChoice::UnreliableSequenced => ChannelKind::UnreliableSequenced,
        ChannelChoice::Unreliable => ChannelKind::Unreliable,
    };
    let mut channel = ChannelConfig::new(kind);
    if let Some(level) = cfg.redundancy {
        channel = channel.with_redundancy(level);
    }
    if cfg.bulk_channel {
        channel = channel.bulk();
    }
    let mut config = Config::new(vec![channel]);
    // The bulk case (`crate::bulk`): one message of `--transfer` at a time.
    let (message, in_flight) = match cfg.transfer {
        Some(bytes) => (bytes as usize, bytes as usize),
        None => (
            cfg.payload as usize,
            (cfg.window as usize).max(64) * cfg.payload as usize,
        ),
    };
    config.max_message_size = config.max_message_size.max(message);
    config.max_send_buffer = config.max_send_buffer.max(4 * in_flight);
    config.max_recv_buffer = config.max_recv_buffer.max(4 * in_flight);
    config.max_ack_delay = max_ack_delay;
    config
}

// ---------------------------------------------------------------- server

pub(crate) struct EchoPeer {
    work: u64,
    /// `--transfer`: answer each whole message with a receipt instead.
    transfer: Option<u64>,
    counts: Arc<ServerCounts>,
}

impl Handler for EchoPeer {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        let receipt;
        let reply = match self.transfer {
            None if self.counts.receive(data, self.work) => data,
            None => return,
            Some(bytes) => match self.counts.receive_transfer(data, bytes, self.work) {
                Some(r) => {
                    receipt = r;
                    &receipt[..]
                }
                None => return,
            },
        };
        match ctx.send(conn, channel, reply) {
            Ok(_) => {
                self.counts
                    .echoed_bytes
                    .fetch_add(reply.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.counts.send_rejections.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------- client

/// A client's end of the echo over its keel-rudp connection.
struct BenchPeer {
    driver: Driver,
    conn: Option<ConnectionHandle>,
    connected: Arc<AtomicUsize>,
}

impl BenchPeer {
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        let Some(conn) = self.conn else {
            return;
        };
        self.driver
            .pump(&mut |msg| ctx.send(conn, CHANNEL, msg).is_ok());
    }

    fn job(&mut self, ctx: &mut Ctx<'_>, job: Job) {
        match job {
            Job::Start(s) => self.driver.start(s),
            Job::Tick => self.driver.expire(Instant::now()),
            Job::End(at) => self.driver.end_at(at),
        }
        self.pump(ctx);
        self.rearm(ctx);
    }

    /// Open loop: the lane's own tick at the driver's next wake-up.
    fn rearm(&mut self, ctx: &mut Ctx<'_>) {
        match self.driver.next_wake(Instant::now()) {
            Some(at) => ctx.tick_at(at),
            None => ctx.cancel_tick(),
        }
    }
}

impl Handler for BenchPeer {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        self.connected.fetch_add(1, Ordering::Release);
        self.pump(ctx);
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle, _: u8, data: &[u8]) {
        self.driver.echo(data, Instant::now());
        self.pump(ctx);
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        self.driver.expire(Instant::now());
        self.pump(ctx);
        self.rearm(ctx);
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, reason: &DisconnectReason) {
        self.conn = None;
        let t = &mut self.driver.tally;
        t.disconnects += 1;
        if t.disconnect_reason.is_none() {
            t.disconnect_reason = Some(format!("a keel-rudp connection ended: {reason:?}"));
        }
        self.driver.finished();
    }
}

/// A client's keel-rudp-proto connection on a shared socket
/// (`--client-sockets shared`): what keel-rudp's [`Client`] does for the
/// connection on a socket of its own (send, poll its datagrams, its
/// timeouts and events), on the group's socket.
struct RudpConn {
    conn: Box<Connection>,
    /// A datagram being written (reused).
    buf: Vec<u8>,
    connected: bool,
    /// Where the connection's stats go when the run is over.
    stats: Arc<Mutex<StatSum>>,
}

impl RudpConn {
    /// The connection's events: the handshake's end, echoes for the
    /// driver, the end of the connection.
    fn events(&mut self, driver: &mut Driver, now: Instant) {
        while let Some(event) = self.conn.poll_event() {
            match event {
                Event::Connected => self.connected = true,
                Event::Message { data, .. } => {
                    driver.echo(&data, now);
                    self.conn.recycle(data);
                }
                Event::Disconnected(reason) => {
                    self.connected = false;
                    let t = &mut driver.tally;
                    t.disconnects += 1;
                    if t.disconnect_reason.is_none() {
                        t.disconnect_reason =
                            Some(format!("a keel-rudp connection ended: {reason:?}"));
                    }
                    driver.finished();
                }
                _ => {}
            }
        }
    }
}

impl Transport for RudpConn {
    const ARM_AFTER_DATAGRAM: bool = true;

    fn pump(&mut self, driver: &mut Driver, out: &mut Outbound<'_, '_>) -> u64 {
        if self.connected {
            let conn = &mut self.conn;
            driver.pump(&mut |msg| conn.send(CHANNEL, msg).is_ok());
        }
        let now = Instant::now();
        let mut refused = 0;
        while let Some(n) = self.conn.poll_transmit(now, &mut self.buf) {
            refused += u64::from(!out.send(&self.buf[..n]));
        }
        refused
    }

    fn receive(&mut self, driver: &mut Driver, data: &[u8], now: Instant) -> bool {
        self.conn.handle_datagram(now, data);
        self.events(driver, now);
        true
    }

    fn wake(&mut self, next: Option<Instant>) -> Wake {
        Wake::At(match (next, self.conn.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    fn woken(&mut self, driver: &mut Driver, now: Instant) {
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        self.events(driver, now);
    }

    fn connected(&self) -> bool {
        self.connected
    }

    fn finish(&mut self) {
        lock(&self.stats).add(&self.conn.stats());
        self.conn.close(Instant::now(), 0, "the run is over");
    }
}

// ---------------------------------------------------------------- the run

/// Runs the keel-rudp echo and returns its report with `ok` decided.
pub(crate) fn run(cfg: &RunConfig) -> RunReport {
    let mut report = RunReport::new(cfg);
    report.delivery.channel = Some(cfg.channel.as_str());
    report.peer.encrypted = Some(cfg.encrypt);
    report.delivery.rate_hz = Some(cfg.rate_hz);
    report.setup.batch = None;
    report.setup.udp_server_receive_buffer_requested_bytes = Some(UDP_RECEIVE_BUFFER_REQUEST);
    report.setup.loss_timeout_ms =
        (!cfg.channel.reliable()).then_some(UNRELIABLE_LOSS_TIMEOUT.as_millis() as u64);
    if let Err(e) = run_into(cfg, &mut report) {
        report.error = Some(e);
    }
    report.finish();
    report
}

/// Stats summed over connections (`+` sums two sums: lanes, both ends).
#[derive(Default, Clone, Copy)]
struct StatSum {
    retransmissions: u64,
    redundant_copies: u64,
    recovered_by_redundancy: u64,
    bytes_sent: u64,
}

impl StatSum {
    fn add(&mut self, s: &Stats) {
        self.retransmissions += s.retransmissions;
        self.redundant_copies += s.redundant_copies;
        self.recovered_by_redundancy += s.recovered_by_redundancy;
        self.bytes_sent += s.bytes_sent;
    }
}

impl std::ops::Add for StatSum {
    type Output = StatSum;

    fn add(self, o: StatSum) -> StatSum {
        StatSum {
            retransmissions: self.retransmissions + o.retransmissions,
            redundant_copies: self.redundant_copies + o.redundant_copies,
            recovered_by_redundancy: self.recovered_by_redundancy + o.recovered_by_redundancy,
            bytes_sent: self.bytes_sent + o.bytes_sent,
        }
    }
}

/// `--encrypt`: a backend's key that mints each client a connect token for
/// the server's address, or keel-rudp's explicit insecure mode.
enum Security {
    Insecure,
    Tokens {
        minter: TokenMinter,
        key: [u8; 32],
        server: SocketAddr,
    },
}

impl Security {
    fn server(&self) -> ServerSecurity {
        match self {
            Security::Insecure => ServerSecurity::Insecure,
            Security::Tokens { key, server, .. } => ServerSecurity::Tokens {
                key: *key,
                public_addrs: vec![*server],
            },
        }
    }

    fn client(&self, id: u32) -> Result<ClientSecurity, String> {
        match self {
            Security::Insecure => Ok(ClientSecurity::Insecure),
            Security::Tokens { minter, server, .. } => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let spec = TokenSpec {
                    server_addrs: vec![*server],
                    expires_at: now + 3600,
                    client_id: u64::from(id),
                    timeout_secs: 10,
                    user_data: Vec::new(),
                };
                let token = minter
                    .mint(&spec)
                    .map_err(|e| format!("--encrypt: minting client {id}'s token: {e}"))?;
                Ok(ClientSecurity::Token(token))
            }
        }
    }
}

/// The server's address and security. A token names the server's address,
/// so with `--encrypt` a free port is picked first (bound, then released:
/// a benchmark on loopback can live with that small race).
fn server_security(cfg: &RunConfig) -> Result<(SocketAddr, Security), String> {
    if !cfg.encrypt {
        return Ok((cfg.server_addr(), Security::Insecure));
    }
    let probe = std::net::UdpSocket::bind(cfg.server_addr())
        .and_then(|s| s.local_addr())
        .map_err(|e| format!("--encrypt: picking the server's port: {e}"))?;
    let key: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(73).wrapping_add(19));
    Ok((
        probe,
        Security::Tokens {
            minter: TokenMinter::new(key),
            key,
            server: probe,
        },
    ))
}

/// The keel-rudp echo server of a run (or of `serve --protocol rudp`) on
/// `rt`, bound to `addr`, counting into `counts`.
pub(crate) fn start_server(
    cfg: &RunConfig,
    rt: &keel_reactor::Runtime,
    addr: SocketAddr,
    security: ServerSecurity,
    counts: Arc<ServerCounts>,
) -> Result<Server<EchoPeer>, String> {
    let mut sc = ServerConfig::new(connection_config(cfg), security);
    // The benchmark's server acknowledges as its figures in docs/ were
    // measured (DEFAULT_ACK_DELAY_MS), not with keel-rudp's newer 25 ms
    // server default (SERVER_MAX_ACK_DELAY, for servers that tick): an
    // echo server's replies carry its acknowledgements either way.
    sc.connection.max_ack_delay = Duration::from_millis(DEFAULT_ACK_DELAY_MS.into());
    sc.lanes = cfg.server_lanes as usize;
    sc.max_connections = sc.max_connections.max(cfg.clients as usize);
    // Every client is on loopback, one address: the per-address limits
    // (16 connections, 4 handshakes a second) would refuse most of them.
    sc.admission = keel_rudp::Admission::OFF;
    // Buffers only: the rest (Don't Fragment) stays keel-rudp's default.
    sc.udp.socket.send_buffer = Some(UDP_SEND_BUFFER_REQUEST as usize);
    sc.udp.socket.recv_buffer = Some(UDP_RECEIVE_BUFFER_REQUEST as usize);
    sc.udp.send_impairment = cfg.impair_server.as_deref().cloned();
    let (work, transfer) = (cfg.work, cfg.transfer);
    Server::bind(rt.handles(), addr, sc, move |_| EchoPeer {
        work,
        transfer,
        counts: counts.clone(),
    })
    .map_err(|e| format!("starting the keel-rudp echo server: {e}"))
}

/// Connections open on the server now, over all lanes.
pub(crate) fn server_connections(server: &Server<EchoPeer>) -> usize {
    let (tx, rx) = mpsc::channel();
    for lane in 0..server.lanes() {
        let tx = tx.clone();
        let _ = server.post(lane, move |_, ctx| {
            let mut conns = Vec::new();
            ctx.connections(&mut conns);
            let _ = tx.send(conns.len());
        });
    }
    drop(tx);
    let deadline = Instant::now() + COLLECT;
    let mut n = 0;
    while let Ok(c) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        n += c;
    }
    n
}

fn run_into(cfg: &RunConfig, report: &mut RunReport) -> Result<(), String> {
    let rss_before = rss_bytes();
    let (rt, server_threads, client_rt) = runtimes(cfg)?;
    let counts = Arc::new(ServerCounts::default());
    let (server_addr, security) = server_security(cfg)?;
    // --connect: clients only, against `serve --protocol rudp`.
    let server = match cfg.connect {
        Some(_) => None,
        None => Some(start_server(
            cfg,
            &rt,
            server_addr,
            security.server(),
            counts.clone(),
        )?),
    };
    let server_addr = server.as_ref().map_or(server_addr, |s| s.local_addr());

    let received = || counts.received.load(Ordering::Relaxed);
    let probe = ServerProbe {
        threads: &server_threads,
        received: &received,
    };
    // Before the clients close: a connection that ends leaves the count.
    let server_stats = || server.as_ref().map(collect_server).unwrap_or_default();
    let run = match cfg.client_sockets {
        ClientSocketsChoice::PerClient => run_own_sockets(
            cfg,
            report,
            &client_rt,
            server_addr,
            &security,
            &probe,
            &server_stats,
        )?,
        ClientSocketsChoice::Shared => run_shared_sockets(
            cfg,
            report,
            &client_rt,
            server_addr,
            &security,
            &probe,
            &server_stats,
        )?,
    };
    let ClientsRun {
        measured: result,
        tally,
        rtt,
        stats: client_stats,
        udp: client_udp,
        clients,
        server_stats,
    } = run;
    let server_udp = server
        .as_ref()
        .map(|s| s.udp_counters())
        .unwrap_or_default();
    if let Some(s) = &server {
        s.stop();
    }
    let stopped = rt.stop().and(client_rt.stop());

    let server_tally = ServerTally {
        delivered: counts.delivered.load(Ordering::Relaxed),
        invalid: counts.invalid.load(Ordering::Relaxed),
        send_rejections: counts.send_rejections.load(Ordering::Relaxed),
    };
    record(report, &tally, server_tally, &rtt);
    if let Ok(m) = &result {
        // After `record`: throughput is messages over elapsed.
        report.set_throughput(m.elapsed);
        record_server(report, m, rss_before, clients);
    }
    let stats = client_stats + server_stats;
    report.delivery.messages_resent = Some(stats.retransmissions);
    report.delivery.redundant_copies = Some(stats.redundant_copies);
    report.delivery.recovered_by_redundancy = Some(stats.recovered_by_redundancy);
    let payload_bytes = tally.sent_bytes + counts.echoed_bytes.load(Ordering::Relaxed);
    report.delivery.wire_bytes_per_payload_byte =
        (payload_bytes > 0).then(|| stats.bytes_sent as f64 / payload_bytes as f64);
    if server.is_none() {
        // The server is another process: what it received and sent is in
        // its own line (and the relay's), not here.
        report.delivery.messages_delivered = None;
        report.delivery.wire_bytes_per_payload_byte = None;
    }
    record_sockets(
        report,
        client_udp,
        server_udp,
        counts.received.load(Ordering::Relaxed),
    );
    result?;
    if let Err(e) = stopped {
        report.checks.callback_exceptions += 1;
        return Err(format!("a handler failed: {e}"));
    }
    if let Some(reason) = &tally.disconnect_reason {
        return Err(format!(
            "disconnect_errors = {}: {reason}",
            tally.disconnects
        ));
    }
    Ok(())
}

/// What the clients of a run measured and reported, on their sockets of
/// their own or shared.
struct ClientsRun {
    measured: Result<Measured, String>,
    tally: Tally,
    rtt: Rtt,
    /// The clients' connection stats, summed.
    stats: StatSum,
    udp: CounterSnapshot,
    clients: usize,
    /// The server's connection stats, summed before the clients closed.
    server_stats: StatSum,
}

/// The run's clients, each a keel-rudp [`Client`] on a socket of its own
/// (`--client-sockets per-client`), driven and then stopped.
fn run_own_sockets(
    cfg: &RunConfig,
    report: &mut RunReport,
    client_rt: &keel_reactor::Runtime,
    server_addr: SocketAddr,
    security: &Security,
    probe: &ServerProbe<'_>,
    server_stats: &dyn Fn() -> StatSum,
) -> Result<ClientsRun, String> {
    let connected = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(AtomicUsize::new(0));
    let rtt = shared_rtt();
    let mut clients = Vec::with_capacity(cfg.clients as usize);
    for id in 0..cfg.clients {
        let mut cc = ClientConfig::new(client_connection_config(cfg), security.client(id)?);
        cc.udp = client_endpoint(
            cfg.impair.as_ref().map(|imp| Impairment {
                seed: imp.seed.wrapping_add(u64::from(id)),
                ..(**imp).clone()
            }),
            cc.connection.max_datagram_size,
            cfg.dont_fragment,
        );
        let peer = BenchPeer {
            driver: Driver::new(cfg, id, drained.clone(), rtt.clone()),
            conn: None,
            connected: connected.clone(),
        };
        let reactor = client_rt.next_reactor();
        let client = Client::connect(reactor, server_addr, cc, peer)
            .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
        clients.push(client);
    }

    let post = |i: usize, job: Job| {
        let _ = clients[i].post(move |h, ctx| h.job(ctx, job));
    };
    let result = drive(
        cfg,
        report,
        clients.len(),
        &connected,
        &drained,
        probe,
        &post,
    );
    let (tally, rtt, client_stats, client_udp) = collect_clients(&clients, &rtt);
    let server_stats = server_stats();
    // All at once: each stop waits for its CLOSE to be acknowledged (at
    // most close_timeout), so one after the other could add up.
    let stops: Vec<_> = clients.iter().map(|c| c.begin_stop()).collect();
    for s in stops {
        s.wait();
    }
    Ok(ClientsRun {
        measured: result,
        tally,
        rtt,
        stats: client_stats,
        udp: client_udp,
        clients: clients.len(),
        server_stats,
    })
}

/// The run's clients on shared sockets (`--client-sockets shared`): each a
/// keel-rudp-proto [`Connection`] carried by [`RudpConn`] from an address
/// of its own (`crate::socket_client`), driven as kcp's and udp's clients
/// are; each closes its connection when the run is over.
fn run_shared_sockets(
    cfg: &RunConfig,
    report: &mut RunReport,
    client_rt: &keel_reactor::Runtime,
    server_addr: SocketAddr,
    security: &Security,
    probe: &ServerProbe<'_>,
    server_stats: &dyn Fn() -> StatSum,
) -> Result<ClientsRun, String> {
    let connected = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(AtomicUsize::new(0));
    let rtt = shared_rtt();
    let stats = Arc::new(Mutex::new(StatSum::default()));
    let config = client_connection_config(cfg);
    let now = Instant::now();
    let mut conns = Vec::with_capacity(cfg.clients as usize);
    for id in 0..cfg.clients {
        let nonce = os_random().map_err(|e| format!("--clients: a nonce for client {id}: {e}"))?;
        let conn = Connection::connect(config.clone(), security.client(id)?, nonce, now)
            .map_err(|e| format!("--clients: client {id}'s connection: {e}"))?;
        conns.push(Some(conn));
    }
    let clients = Clients {
        cfg,
        runtime: client_rt,
        server: server_addr,
        max_datagram: config.max_datagram_size,
        lossy: false,
        connected: &connected,
        drained: &drained,
        rtt: &rtt,
    }
    .bind(|id| RudpConn {
        conn: Box::new(
            conns[id as usize]
                .take()
                .expect("one connection per client"),
        ),
        buf: vec![0; config.max_datagram_size],
        connected: false,
        stats: stats.clone(),
    })?;
    let post = |i: usize, job: Job| clients.post_job(i, job);
    let n = clients.len();
    let measured = drive(cfg, report, n, &connected, &drained, probe, &post);
    let server_stats = server_stats();
    // Each client's tally and stats; its connection closes.
    let (mut tally, reported) = collect_tallies(n, |i, tx| clients.post_take(i, tx));
    count_unreported(&mut tally, n, reported.len());
    let rtt = lock(&rtt).clone();
    let udp = clients.close();
    let stats = *lock(&stats);
    Ok(ClientsRun {
        measured,
        tally,
        rtt,
        stats,
        udp,
        clients: n,
        server_stats,
    })
}

/// Every client's tally (what is still outstanding counts as lost), the
/// run's round trips, connection stats and socket counters.
fn collect_clients(
    clients: &[Client<BenchPeer>],
    rtt: &SharedRtt,
) -> (Tally, Rtt, StatSum, CounterSnapshot) {
    let (mut tally, stats) = collect_tallies(clients.len(), |i, tx| {
        let _ = clients[i].post(move |h, ctx| {
            let stats = h.conn.and_then(|c| ctx.stats(c));
            let _ = tx.send((h.driver.take(), stats));
        });
    });
    let mut sum = StatSum::default();
    for s in stats.iter().flatten() {
        sum.add(s);
    }
    let got = stats.len();
    let udp = clients
        .iter()
        .fold(CounterSnapshot::default(), |sum, c| sum + c.udp_counters());
    count_unreported(&mut tally, clients.len(), got);
    (tally, lock(rtt).clone(), sum, udp)
}

/// Clients that did not report their tally count as disconnected, so the
/// run fails with the reason instead of reading as short of messages.
fn count_unreported(tally: &mut Tally, clients: usize, reported: usize) {
    if reported < clients {
        let missing = clients - reported;
        tally.disconnects += missing as u64;
        tally
            .disconnect_reason
            .get_or_insert_with(|| format!("{missing} of {clients} clients did not report"));
    }
}

/// The server connections' stats, summed over lanes.
fn collect_server(server: &Server<EchoPeer>) -> StatSum {
    let (tx, rx) = mpsc::channel();
    for lane in 0..server.lanes() {
        let tx = tx.clone();
        let _ = server.post(lane, move |_, ctx| {
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
        total = total + s;
    }
    total
}
