//! `--protocol udp --rate HZ`: the open-loop echo over plain keel-udp, the
//! baseline of the scale case (what keel-rudp's reliability, ordering and
//! connection state cost the server on top of datagrams).
//!
//! The server is the UDP benchmark's own echo server (`crate::loopback`'s
//! [`start_server_impaired`]: a keel-udp [`keel_udp::Server`] with one
//! session per client, the message header checked, the datagram sent
//! back). Each client is a keel-udp [`DatagramSocket`] driven by the same
//! [`Driver`] as `--protocol rudp` and `kcp` (open loop, spread sends,
//! every echo checked), treating the transport as lossy: an echo not back
//! within [`crate::peer::UNRELIABLE_LOSS_TIMEOUT`] is lost, and echoes are
//! not required in order. As there, the server runs on its own runtime,
//! apart from the clients', so its CPU time per message is measured alone.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keel_reactor::TimerId;
use keel_udp::{
    DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, Impairment,
    LaneSteering, SocketOptions,
};

use crate::echo::{EchoMode, EchoStats};
use crate::flags::RunConfig;
use crate::loopback::{start_server_impaired, EchoServerSpec, SessionPolicy};
use crate::output::{RunReport, UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::peer::{
    drive_sockets, record, record_server, record_sockets, runtimes, shared_rtt, Driver, Job,
    ServerProbe, ServerTally, SocketClient, Tally, UNRELIABLE_LOSS_TIMEOUT,
};
use crate::procstats::rss_bytes;

/// Datagrams a client takes per receive call: a client gets one echo per
/// tick, so a small batch keeps its buffers (and the run's RSS) small.
pub(crate) const CLIENT_BATCH: usize = 4;
/// Datagrams a client's send queue holds (keel-udp reserves room for all
/// of them up front; a client sends a few per tick).
pub(crate) const CLIENT_SEND_QUEUE: usize = 64;

/// A load-generating client socket: small batches and queues, since the
/// scale case runs thousands of them and measures the server.
pub(crate) fn client_endpoint(impair: Option<Impairment>, max_datagram: usize) -> EndpointConfig {
    EndpointConfig {
        batch: CLIENT_BATCH,
        max_datagram,
        send_queue_datagrams: CLIENT_SEND_QUEUE,
        socket: SocketOptions {
            send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
            recv_buffer: Some(UDP_RECEIVE_BUFFER_REQUEST as usize),
            ..SocketOptions::default()
        },
        send_impairment: impair,
        ..EndpointConfig::default()
    }
}

/// A client's end: sends what the driver says, checks what comes back.
struct RateClient {
    driver: Driver,
    server: SocketAddr,
    connected: Arc<AtomicUsize>,
    send_refused: u64,
    wake: WakeTimer,
}

/// The one pending one-shot timer of a client's next wake-up
/// ([`Driver::next_wake`]) on its keel-udp socket.
#[derive(Default)]
pub(crate) struct WakeTimer {
    armed: Option<(TimerId, Instant)>,
}

impl WakeTimer {
    /// Arms the timer for `at` (`None`: disarms it), unless it already is.
    pub(crate) fn set(&mut self, ctx: &mut DatagramSocketCtx<'_>, at: Option<Instant>) {
        if self.armed.map(|(_, t)| t) == at {
            return;
        }
        if let Some((id, _)) = self.armed.take() {
            ctx.cancel_timer(id);
        }
        if let Some(at) = at {
            self.armed = Some((ctx.timer(at, None), at));
        }
    }

    /// Arms the timer for `at` unless it is armed for `at` or earlier
    /// already (then the owner, woken early, looks again): a wanted time
    /// that moves later costs no cancel and re-arm.
    pub(crate) fn set_earlier(&mut self, ctx: &mut DatagramSocketCtx<'_>, at: Instant) {
        if self.armed.is_some_and(|(_, t)| t <= at) {
            return;
        }
        self.set(ctx, Some(at));
    }

    /// Whether `id` is this timer (then no longer armed).
    pub(crate) fn fired(&mut self, id: TimerId) -> bool {
        let mine = self.armed.is_some_and(|(t, _)| t == id);
        if mine {
            self.armed = None;
        }
        mine
    }
}

impl RateClient {
    fn pump(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let server = self.server;
        let mut refused = 0;
        self.driver.pump(&mut |msg| {
            let ok = ctx.send_to(server, msg).is_ok();
            refused += u64::from(!ok);
            ok
        });
        self.send_refused += refused;
    }

    fn tick(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let now = Instant::now();
        self.driver.expire(now);
        self.pump(ctx);
        let wake = self.driver.next_wake(Instant::now());
        self.wake.set(ctx, wake);
    }
}

impl SocketClient for RateClient {
    fn job(&mut self, ctx: &mut DatagramSocketCtx<'_>, job: Job) {
        match job {
            Job::Start(s) => self.driver.start(s),
            Job::Tick => self.driver.expire(Instant::now()),
        }
        self.tick(ctx);
    }

    fn take(&mut self) -> Tally {
        let mut t = self.driver.take();
        t.send_rejections += self.send_refused;
        t
    }
}

impl DatagramSocketHandler for RateClient {
    fn started(&mut self, _: &mut DatagramSocketCtx<'_>) {
        // Plain UDP has no handshake.
        self.connected.fetch_add(1, Ordering::Release);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        if from != self.server {
            self.driver.tally.unexpected += 1;
            return;
        }
        self.driver.echo(data, Instant::now());
        self.pump(ctx);
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, id: TimerId) {
        if self.wake.fired(id) {
            self.tick(ctx);
        }
    }
}

/// Runs the open-loop UDP echo and returns its report with `ok` decided.
pub(crate) fn run(cfg: &RunConfig) -> RunReport {
    let mut report = RunReport::new(cfg);
    report.delivery.rate_hz = Some(cfg.rate_hz);
    report.setup.loss_timeout_ms = Some(UNRELIABLE_LOSS_TIMEOUT.as_millis() as u64);
    if let Err(e) = run_into(cfg, &mut report) {
        report.error = Some(e);
    }
    report.finish();
    report
}

fn run_into(cfg: &RunConfig, report: &mut RunReport) -> Result<(), String> {
    let rss_before = rss_bytes();
    let (rt, server_threads, client_rt) = runtimes(cfg)?;
    let echo_stats = Arc::new(EchoStats::default());
    let spec = EchoServerSpec {
        bind: cfg.server_addr(),
        lanes: cfg.server_lanes,
        batch: cfg.batch,
        receive_buffer: cfg.udp_server_receive_buffer,
        work: cfg.work,
        mode: EchoMode::Bench,
        steering: LaneSteering::KernelHash,
        sessions: SessionPolicy {
            max_sessions: SessionPolicy::default()
                .max_sessions
                .max(cfg.clients as usize),
            ..SessionPolicy::default()
        },
    };
    let server = start_server_impaired(
        &rt,
        &spec,
        cfg.impair_server.as_deref().cloned(),
        echo_stats.clone(),
    )
    .map_err(|e| format!("starting the echo server: {e}"))?;
    report.buffers.udp_server_send_buffer_bytes = Some(server.buffers().send as u64);
    report.buffers.udp_server_receive_buffer_bytes = Some(server.buffers().recv as u64);

    let connected = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(AtomicUsize::new(0));
    let rtt = shared_rtt();
    let mut clients = Vec::with_capacity(cfg.clients as usize);
    for id in 0..cfg.clients {
        let impair = cfg.impair.as_ref().map(|imp| Impairment {
            seed: imp.seed.wrapping_add(u64::from(id)),
            ..(**imp).clone()
        });
        let peer = RateClient {
            driver: Driver::new(cfg, id, drained.clone(), rtt.clone()).lossy(),
            server: server.local_addr(),
            connected: connected.clone(),
            send_refused: 0,
            wake: WakeTimer::default(),
        };
        let local = SocketAddr::new(cfg.address_family.loopback(), 0);
        let endpoint = client_endpoint(impair, cfg.payload as usize);
        let client = DatagramSocket::bind(client_rt.next_reactor(), local, endpoint, peer)
            .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
        clients.push(client);
    }

    let received = || server.counters().datagrams_in;
    let probe = ServerProbe {
        threads: &server_threads,
        received: &received,
    };
    let run = drive_sockets(cfg, report, &clients, &connected, &drained, &probe, &rtt);
    server.stop();
    let k = server.counters();
    let stopped = rt.stop().and(client_rt.stop());

    record(
        report,
        &run.tally,
        ServerTally {
            // The UDP echo server does not tell phases apart.
            delivered: k.datagrams_in,
            invalid: echo_stats.invalid.load(Ordering::Relaxed),
            send_rejections: k.send_queue_rejections,
        },
        &run.rtt,
    );
    report.delivery.messages_delivered = None;
    if let Ok(m) = &run.measured {
        report.set_throughput(m.elapsed);
        record_server(report, m, rss_before, clients.len());
    }
    record_sockets(report, run.udp, k, k.datagrams_in);
    run.outcome(report, stopped)
}
