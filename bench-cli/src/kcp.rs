//! `--protocol kcp`: the same echo over KCP (the `kcp` crate, a peer for
//! comparison only), carried by keel-udp [`DatagramSocket`]s with the same
//! link conditioner as `--protocol rudp`.
//!
//! KCP is driven the way its own simulation drives it: `update` every
//! millisecond (it flushes every `interval`), `input` for each datagram,
//! then `recv` until empty. A message is one KCP message (KCP fragments
//! what exceeds its MTU). `--kcp-mode` picks one of the three modes of
//! KCP's published test (its `test.cpp`): `fast` (nodelay 1, interval
//! 10 ms, resend 2, no congestion window), `default` (nodelay 0, interval
//! 10 ms, resend 0, congestion window) and `normal` (default without the
//! congestion window); all with 128-packet windows, as there. KCP has one
//! delivery mode, reliable and ordered: `--channel` must be
//! `reliable-ordered`.
//!
//! `messages_resent` and `redundant_copies` are null (the crate does not
//! expose them); `wire_bytes_per_payload_byte` counts every packet KCP
//! hands its output (data, acks, resends, window probes) over the message
//! bytes sent, both ends, as keel-rudp's `Stats::bytes_sent` does.

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_udp::{
    DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, Impairment,
    SocketOptions,
};

use crate::flags::{KcpMode, RunConfig};
use crate::output::{RunReport, UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::peer::{
    collect, drive, lock, record, record_server, runtimes, shared_rtt, Driver, Job, ServerCounts,
    ServerProbe, ServerTally, Tally,
};
use crate::procstats::rss_bytes;
use crate::udp_rate::client_endpoint;

/// KCP's send and receive windows, in packets (its published test's).
const WINDOW: u16 = 128;
/// KCP's packet size (its default MTU), the most a client socket takes.
const KCP_MTU: usize = 1400;
/// How often each end calls KCP's `update`.
const UPDATE: Duration = Duration::from_millis(1);

/// Where KCP writes its packets: a queue the lane drains to the socket.
#[derive(Clone, Default)]
struct Out {
    packets: Arc<Mutex<Vec<Vec<u8>>>>,
    bytes: Arc<AtomicU64>,
}

impl Write for Out {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.packets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(data.to_vec());
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Out {
    /// Sends every queued packet to `to`.
    fn drain(&self, ctx: &mut DatagramSocketCtx<'_>, to: SocketAddr) -> u64 {
        let packets = std::mem::take(&mut *self.packets.lock().unwrap_or_else(|p| p.into_inner()));
        let mut refused = 0;
        for p in packets {
            if ctx.send_to(to, &p).is_err() {
                refused += 1;
            }
        }
        refused
    }
}

type Kcp = kcp::Kcp<Out>;

fn new_kcp(conv: u32, mode: KcpMode, out: Out) -> Kcp {
    let mut k = Kcp::new(conv, out);
    match mode {
        KcpMode::Fast => k.set_nodelay(true, 10, 2, true),
        KcpMode::Default => k.set_nodelay(false, 10, 0, false),
        KcpMode::Normal => k.set_nodelay(false, 10, 0, true),
    }
    k.set_wndsize(WINDOW, WINDOW);
    k
}

fn ms(epoch: Instant) -> u32 {
    epoch.elapsed().as_millis() as u32
}

fn endpoint_config(impair: Option<Impairment>) -> EndpointConfig {
    EndpointConfig {
        socket: SocketOptions {
            send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
            recv_buffer: Some(UDP_RECEIVE_BUFFER_REQUEST as usize),
            ..SocketOptions::default()
        },
        send_impairment: impair,
        ..EndpointConfig::default()
    }
}

// ---------------------------------------------------------------- server

/// The echo server: one KCP per peer address.
struct KcpServer {
    mode: KcpMode,
    work: u64,
    epoch: Instant,
    peers: HashMap<SocketAddr, Kcp>,
    out: Out,
    buf: Vec<u8>,
    counts: Arc<ServerCounts>,
}

impl KcpServer {
    fn drain(&mut self, ctx: &mut DatagramSocketCtx<'_>, to: SocketAddr) {
        let refused = self.out.drain(ctx, to);
        self.counts
            .send_rejections
            .fetch_add(refused, Ordering::Relaxed);
    }
}

impl DatagramSocketHandler for KcpServer {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        ctx.timer(Instant::now() + UPDATE, Some(UPDATE));
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        if data.len() < kcp::Kcp::<Out>::header_len() {
            self.counts.invalid.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (mode, out, now) = (self.mode, self.out.clone(), ms(self.epoch));
        let k = self.peers.entry(from).or_insert_with(|| {
            let mut k = new_kcp(kcp::get_conv(data), mode, out);
            let _ = k.update(now);
            k
        });
        if k.input(data).is_err() {
            self.counts.invalid.fetch_add(1, Ordering::Relaxed);
        }
        while let Ok(n) = k.recv(&mut self.buf) {
            let msg = &self.buf[..n];
            if !self.counts.receive(msg, self.work) {
                continue;
            }
            if k.send(msg).is_ok() {
                self.counts
                    .echoed_bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
            } else {
                self.counts.send_rejections.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.drain(ctx, from);
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, _: keel_reactor::TimerId) {
        let now = ms(self.epoch);
        let peers: Vec<SocketAddr> = self.peers.keys().copied().collect();
        for p in peers {
            if let Some(k) = self.peers.get_mut(&p) {
                let _ = k.update(now);
            }
            self.drain(ctx, p);
        }
    }
}

// ---------------------------------------------------------------- client

struct KcpClient {
    driver: Driver,
    kcp: Kcp,
    out: Out,
    server: SocketAddr,
    epoch: Instant,
    buf: Vec<u8>,
    connected: Arc<AtomicUsize>,
    send_refused: u64,
}

impl KcpClient {
    fn pump(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let kcp = &mut self.kcp;
        self.driver.pump(&mut |msg| kcp.send(msg).is_ok());
        self.send_refused += self.out.drain(ctx, self.server);
    }

    fn job(&mut self, ctx: &mut DatagramSocketCtx<'_>, job: Job) {
        match job {
            Job::Start(s) => self.driver.start(s),
            Job::Tick => self.driver.expire(Instant::now()),
        }
        self.pump(ctx);
    }
}

impl DatagramSocketHandler for KcpClient {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let _ = self.kcp.update(ms(self.epoch));
        ctx.timer(Instant::now() + UPDATE, Some(UPDATE));
        // KCP has no handshake.
        self.connected.fetch_add(1, Ordering::Release);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        if from != self.server || self.kcp.input(data).is_err() {
            self.driver.tally.unexpected += 1;
        }
        let now = Instant::now();
        while let Ok(n) = self.kcp.recv(&mut self.buf) {
            self.driver.echo(&self.buf[..n], now);
        }
        self.pump(ctx);
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, _: keel_reactor::TimerId) {
        // Also the open loop's tick: sends come due within this 1 ms.
        self.driver.expire(Instant::now());
        let _ = self.kcp.update(ms(self.epoch));
        self.pump(ctx);
    }
}

// ---------------------------------------------------------------- the run

/// Runs the KCP echo and returns its report with `ok` decided.
pub fn run(cfg: &RunConfig) -> RunReport {
    let mut report = RunReport::new(cfg);
    report.channel = Some(cfg.channel.as_str());
    report.rate_hz = Some(cfg.rate_hz);
    report.kcp_mode = Some(cfg.kcp_mode.as_str());
    report.batch = None;
    report.udp_server_receive_buffer_requested_bytes = Some(UDP_RECEIVE_BUFFER_REQUEST);
    if let Err(e) = run_into(cfg, &mut report) {
        report.error = Some(e);
    }
    report.finish();
    report
}

fn run_into(cfg: &RunConfig, report: &mut RunReport) -> Result<(), String> {
    let rss_before = rss_bytes();
    let (rt, server_threads, client_rt) = runtimes(cfg)?;
    let epoch = Instant::now();
    let counts = Arc::new(ServerCounts::default());
    let server_out = Out::default();
    let handles = rt.handles();
    let server = DatagramSocket::bind(
        &handles[0],
        cfg.server_addr(),
        endpoint_config(cfg.impair_server.as_deref().cloned()),
        KcpServer {
            mode: cfg.kcp_mode,
            work: cfg.work,
            epoch,
            peers: HashMap::new(),
            out: server_out.clone(),
            buf: vec![0; cfg.payload as usize],
            counts: counts.clone(),
        },
    )
    .map_err(|e| format!("starting the KCP echo server: {e}"))?;
    report.udp_server_send_buffer_bytes = Some(server.buffers().send as u64);
    report.udp_server_receive_buffer_bytes = Some(server.buffers().recv as u64);

    let connected = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(AtomicUsize::new(0));
    let rtt = shared_rtt();
    let mut clients = Vec::with_capacity(cfg.clients as usize);
    let mut client_outs = Vec::with_capacity(cfg.clients as usize);
    for id in 0..cfg.clients {
        let out = Out::default();
        client_outs.push(out.clone());
        let impair = cfg.impair.as_ref().map(|imp| Impairment {
            seed: imp.seed.wrapping_add(u64::from(id)),
            ..(**imp).clone()
        });
        let peer = KcpClient {
            driver: Driver::new(cfg, id, drained.clone(), rtt.clone()),
            kcp: new_kcp(id + 1, cfg.kcp_mode, out.clone()),
            out,
            server: server.local_addr(),
            epoch,
            buf: vec![0; cfg.payload as usize],
            connected: connected.clone(),
            send_refused: 0,
        };
        let reactor = client_rt.next_reactor();
        let local = SocketAddr::new(cfg.address_family.loopback(), 0);
        let client =
            DatagramSocket::bind(reactor, local, client_endpoint(impair, KCP_MTU), peer)
                .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
        clients.push(client);
    }

    let post = |i: usize, job: Job| {
        clients[i].post(move |h, ctx| h.job(ctx, job));
    };
    let received = || counts.received.load(Ordering::Relaxed);
    let probe = ServerProbe {
        threads: &server_threads,
        received: &received,
    };
    let result = drive(
        cfg,
        report,
        clients.len(),
        &connected,
        &drained,
        &probe,
        &post,
    );

    let tallies = collect(clients.len(), |i, tx| {
        clients[i].post(move |h, _| {
            let mut t = h.driver.take();
            t.send_rejections += h.send_refused;
            let _ = tx.send(t);
        });
    });
    let mut tally = Tally::default();
    for t in &tallies {
        tally.add(t);
    }
    let got = tallies.len();
    let rtt = lock(&rtt).clone();
    let (mut kernel, mut dropped, mut duplicated, mut send_errors) = (0, 0, 0, 0);
    for c in &clients {
        c.close();
        let k = c.counters();
        kernel += k.kernel_drops;
        dropped += k.conditioner_dropped;
        duplicated += k.conditioner_duplicated;
        send_errors += k.send_errors;
    }
    server.close();
    let k = server.counters();
    let stopped = rt.stop().and(client_rt.stop());

    record(
        report,
        &tally,
        ServerTally {
            delivered: counts.delivered.load(Ordering::Relaxed),
            invalid: counts.invalid.load(Ordering::Relaxed),
            send_rejections: counts.send_rejections.load(Ordering::Relaxed),
        },
        &rtt,
    );
    if let Ok(m) = &result {
        report.set_throughput(m.elapsed);
        record_server(report, m, rss_before, clients.len());
    }
    let wire: u64 = server_out.bytes.load(Ordering::Relaxed)
        + client_outs
            .iter()
            .map(|o| o.bytes.load(Ordering::Relaxed))
            .sum::<u64>();
    let payload = tally.sent_bytes + counts.echoed_bytes.load(Ordering::Relaxed);
    report.wire_bytes_per_payload_byte = (payload > 0).then(|| wire as f64 / payload as f64);
    report.kernel_rcvbuf_drops = Some(kernel + k.kernel_drops);
    report.conditioner_dropped = Some(dropped + k.conditioner_dropped);
    report.conditioner_duplicated = Some(duplicated + k.conditioner_duplicated);
    report.client_send_completion_errors = send_errors;
    report.server_send_completion_errors = Some(k.send_errors);
    result?;
    if got < clients.len() {
        return Err(format!(
            "{} of {} clients did not report",
            clients.len() - got,
            clients.len()
        ));
    }
    stopped.map_err(|e| {
        report.callback_exceptions += 1;
        format!("a handler failed: {e}")
    })
}
