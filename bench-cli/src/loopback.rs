//! The run: the echo server (unless `--connect`) and every client in this
//! process, on one keel runtime, through keel-udp's public API only.
//!
//! This module is the run, step by step; `server` (the echo server, shared
//! with `serve`) and `ports` (client ports for peer-port steering) are
//! what it starts. They never use this module.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::Runtime;
use keel_udp::{
    Client, ClientConfig, DisconnectReason, EndpointConfig, Impairment, LaneSteering, Server,
    SocketOptions,
};

mod ports;
mod server;

use ports::PortPicker;
pub use server::{runtime_for, start_server, start_server_impaired, EchoServerSpec, SessionPolicy};

use crate::client::{BenchClient, ClientTally, DrainLatch, Schedule};
use crate::echo::{Echo, EchoMode, EchoStats};
use crate::flags::{AddressFamily, IoModel, LaneSteeringChoice, RunConfig};
use crate::output::{RunReport, UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::procstats::{peak_rss_bytes, process_cpu_time, udp_delta, UdpCounters};
use crate::stats::RttShards;

/// Upper bound on collecting the clients' tallies after the drain.
const COLLECT: Duration = Duration::from_secs(2);

/// Runs the benchmark and returns its report with `ok` decided.
pub fn run(cfg: &RunConfig) -> RunReport {
    let mut report = RunReport::new(cfg);
    if let Err(e) = run_into(cfg, &mut report) {
        report.error = Some(e);
    }
    report.finish();
    report
}

fn snmp(family: AddressFamily) -> Option<UdpCounters> {
    match family {
        AddressFamily::Ipv4 => UdpCounters::read_ipv4(),
        AddressFamily::Ipv6 => UdpCounters::read_ipv6(),
    }
}

/// The run, step by step: the server, the clients, the phases, the
/// tallies, the shutdown; each step writes what it measured into `report`.
/// `Err` is the run's error (the first thing that went wrong).
fn run_into(cfg: &RunConfig, report: &mut RunReport) -> Result<(), String> {
    let rt = runtime_for(cfg.io_model, cfg.io_threads)
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let echo_stats = Arc::new(EchoStats::default());
    let steering = run_steering(cfg);
    let server = start_run_server(&rt, cfg, steering, &echo_stats)?;
    let target = server
        .as_ref()
        .map_or_else(|| cfg.server_addr(), |s| s.local_addr());
    if let Some(s) = &server {
        record_server_buffers(report, s, steering);
    }
    let clients = start_clients(&rt, cfg, steering, target)?;
    record_client_buffers(report, &clients.list);

    let snmp_before = snmp(cfg.address_family);
    let phases = run_phases(cfg, &clients);
    if phases.drain_timed_out {
        report.checks.drain_timeouts = 1;
    }
    let (tally, collected) = collect_tallies(&clients);
    let shutdown = close_all(&clients.list, server.as_ref());
    let snmp_after = snmp(cfg.address_family);
    let stopped = if shutdown.complete() {
        rt.stop()
    } else {
        // Joining would wait for the busy lane; the process exit ends it.
        std::mem::forget(rt);
        Ok(())
    };

    record_tally(report, &tally, &echo_stats, clients.list.len() - collected);
    record_measurements(report, &clients, &phases, &shutdown);
    if let Some(t) = phases.interrupted {
        report.error = Some(crate::interrupt::error(
            t,
            phases.measure_start,
            cfg.seconds,
        ));
    }
    report.set_snmp(udp_delta(snmp_before.as_ref(), snmp_after.as_ref()).as_ref());
    if let Some(s) = &shutdown.server {
        report.checks.server_send_rejections = Some(s.send_rejections);
        report.checks.server_send_completion_errors = Some(s.send_errors);
    }
    if let Err(e) = stopped {
        report.checks.callback_exceptions += 1;
        return Err(format!("a handler failed: {e}"));
    }
    if collected < clients.list.len() {
        return Err(format!(
            "{} of {} clients did not report within {:?}",
            clients.list.len() - collected,
            clients.list.len(),
            COLLECT
        ));
    }
    shutdown.check(clients.list.len())?;
    if let Some(reason) = &tally.disconnect_reason {
        return Err(disconnect_error(tally.disconnects, reason, target));
    }
    Ok(())
}

/// The in-process echo server, unless `--connect` drives a remote one.
fn start_run_server(
    rt: &Runtime,
    cfg: &RunConfig,
    steering: LaneSteering,
    echo_stats: &Arc<EchoStats>,
) -> Result<Option<Server<Echo>>, String> {
    if cfg.connect.is_some() {
        return Ok(None);
    }
    let spec = EchoServerSpec {
        bind: cfg.server_addr(),
        lanes: cfg.server_lanes,
        batch: cfg.batch,
        receive_buffer: cfg.udp_server_receive_buffer,
        work: cfg.work,
        mode: EchoMode::Bench,
        steering,
        sessions: SessionPolicy::default(),
        dont_fragment: cfg.dont_fragment,
    };
    start_server_impaired(
        rt,
        &spec,
        cfg.impair_server.as_deref().cloned(),
        echo_stats.clone(),
    )
    .map(Some)
    .map_err(|e| format!("starting the echo server: {e}"))
}

/// The server's socket buffers as granted, and its lane steering.
fn record_server_buffers(report: &mut RunReport, server: &Server<Echo>, steering: LaneSteering) {
    let b = server.buffers();
    report.buffers.udp_server_send_buffer_bytes = Some(b.send as u64);
    report.buffers.udp_server_receive_buffer_bytes = Some(b.recv as u64);
    report.lane_steering = Some(match steering {
        LaneSteering::PeerPort => "peer-port",
        _ => "kernel-hash",
    });
}

/// The clients of a run and what they share with it.
struct Clients {
    /// One per `--clients`, client `i` on context `i % contexts`.
    list: Vec<Client<BenchClient>>,
    /// Where a client that ended early left its tally.
    last_words: Vec<Arc<Mutex<Option<ClientTally>>>>,
    /// Counts the clients that have nothing in flight any more.
    latch: Arc<DrainLatch>,
    /// Every client's RTT samples, one shard per IO thread.
    rtt: Arc<RttShards>,
}

/// The configuration every client starts from (its own `--impair` seed
/// and local port are set per client).
fn client_config(cfg: &RunConfig) -> ClientConfig {
    let payload = cfg.payload as usize;
    let window = cfg.window as usize;
    ClientConfig {
        local: None,
        endpoint: EndpointConfig {
            // A client never has more than `window` echoes to read; two
            // slots keep the short-batch drain (one call per wake-up) even
            // at window 1, unless --batch 1 asks for one per call.
            batch: (cfg.batch as usize).min(window.max(2)),
            // The whole window may wait in the queue if the socket blocks.
            send_queue_datagrams: window.max(keel_udp::DEFAULT_SEND_QUEUE_DATAGRAMS),
            send_queue_bytes: (window * payload).max(keel_udp::DEFAULT_SEND_QUEUE_BYTES),
            max_datagram: payload
                .next_power_of_two()
                .clamp(2048, keel_udp::DEFAULT_MAX_DATAGRAM),
            socket: SocketOptions {
                send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
                recv_buffer: Some(UDP_RECEIVE_BUFFER_REQUEST as usize),
                dont_fragment: cfg.dont_fragment,
                ..SocketOptions::default()
            },
            // Set per client below (`--impair`).
            send_impairment: None,
            recv_impairment: None,
            ..EndpointConfig::default()
        },
    }
}

/// Connects every client to `target`, each on its context.
fn start_clients(
    rt: &Runtime,
    cfg: &RunConfig,
    steering: LaneSteering,
    target: SocketAddr,
) -> Result<Clients, String> {
    let mut ports = PortPicker::new(cfg, steering, target);
    let base = client_config(cfg);
    let mut clients = Clients {
        list: Vec::with_capacity(cfg.clients as usize),
        last_words: Vec::with_capacity(cfg.clients as usize),
        latch: Arc::new(DrainLatch::default()),
        rtt: Arc::new(RttShards::new(cfg.io_threads as usize)),
    };
    for id in 0..cfg.clients {
        let words = Arc::new(Mutex::new(None));
        clients.last_words.push(words.clone());
        let handler = || {
            BenchClient::new(
                id,
                cfg.payload as usize,
                cfg.window,
                clients.latch.clone(),
                clients.rtt.clone(),
                words.clone(),
            )
        };
        let mut config = base.clone();
        // Each client its own seed, so their decisions are independent.
        config.endpoint.send_impairment = cfg.impair.as_ref().map(|imp| Impairment {
            seed: imp.seed.wrapping_add(u64::from(id)),
            ..(**imp).clone()
        });
        // Client `id` runs on context `id % contexts`.
        let context = id as usize % rt.reactors();
        let reactor = rt.reactor(context).expect("context index in range");
        let client = ports
            .connect(context, reactor, config, handler)
            .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
        clients.list.push(client);
    }
    Ok(clients)
}

/// The smallest and largest socket buffers the clients were granted.
fn record_client_buffers(report: &mut RunReport, clients: &[Client<BenchClient>]) {
    let (mut smin, mut smax, mut rmin, mut rmax) = (u64::MAX, 0, u64::MAX, 0);
    for c in clients {
        let b = c.buffers();
        smin = smin.min(b.send as u64);
        smax = smax.max(b.send as u64);
        rmin = rmin.min(b.recv as u64);
        rmax = rmax.max(b.recv as u64);
    }
    report.buffers.udp_client_send_buffer_min_bytes = Some(smin);
    report.buffers.udp_client_send_buffer_max_bytes = Some(smax);
    report.buffers.udp_client_receive_buffer_min_bytes = Some(rmin);
    report.buffers.udp_client_receive_buffer_max_bytes = Some(rmax);
}

/// When the phases ran, and the process CPU time over the measured one.
struct Phases {
    measure_start: Instant,
    /// When a Ctrl-C ended the measured phase early, if one did.
    interrupted: Option<Instant>,
    /// When the last echo came back, or the drain's deadline.
    drain_end: Instant,
    drain_timed_out: bool,
    /// Process CPU time at the start and end of the measured phase.
    cpu: (Option<Duration>, Option<Duration>),
    /// Wall time of the measured phase and its drain.
    wall: Duration,
}

/// Starts every client, sleeps through the warm-up and the measured
/// phase, then waits for the drain (at most `--drain`).
fn run_phases(cfg: &RunConfig, clients: &Clients) -> Phases {
    let start = Instant::now();
    let measure_start = start + Duration::from_secs_f64(cfg.warmup);
    let measure_end = measure_start + Duration::from_secs_f64(cfg.seconds);
    let schedule = Schedule {
        measure_start,
        measure_end,
        loss_timeout: cfg.loss_timeout_ms.map(Duration::from_millis),
    };
    for c in &clients.list {
        let _ = c.post(move |h, ctx| h.start(ctx, schedule));
    }
    // Ctrl-C ends the phase early: the clients stop sending and drain.
    let stop_at = |t: Instant| {
        for c in &clients.list {
            let _ = c.post(move |h, _| h.end_at(t));
        }
    };
    let mut measure_end = measure_end;
    let mut interrupted = crate::interrupt::wait_until(measure_start);
    if let Some(t) = interrupted {
        stop_at(t);
        measure_end = t;
    }
    let cpu_start = process_cpu_time();
    let wall_start = Instant::now();
    if interrupted.is_none() {
        interrupted = crate::interrupt::wait_until(measure_end);
        if let Some(t) = interrupted {
            stop_at(t);
            measure_end = t;
        }
    }
    let drain_deadline = measure_end + Duration::from_secs_f64(cfg.drain);
    let drained_at = clients.latch.wait(cfg.clients, drain_deadline);
    let cpu_end = process_cpu_time();
    let wall_end = Instant::now();
    Phases {
        measure_start,
        interrupted,
        drain_end: drained_at.unwrap_or(drain_deadline),
        drain_timed_out: drained_at.is_none(),
        cpu: (cpu_start, cpu_end),
        wall: wall_end.saturating_duration_since(wall_start),
    }
}

/// Every client's tally and samples, read on its own lane (at most
/// [`COLLECT`]), plus those that ended early; and how many there were.
fn collect_tallies(clients: &Clients) -> (ClientTally, usize) {
    let (tx, rx) = mpsc::channel();
    let mut tally = ClientTally::default();
    let mut collected = 0;
    for c in &clients.list {
        let tx = tx.clone();
        let _ = c.post(move |h, _| {
            if let Some(words) = h.report() {
                let _ = tx.send(words);
            }
        });
    }
    drop(tx);
    let collect_deadline = Instant::now() + COLLECT;
    while collected < clients.list.len() {
        let left = collect_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(t) => {
                tally.add(&t);
                collected += 1;
            }
            Err(_) => break,
        }
    }
    // Clients that ended early (e.g. port unreachable) left their tally.
    for words in &clients.last_words {
        if let Some(t) = words.lock().unwrap_or_else(|p| p.into_inner()).take() {
            tally.add(&t);
            collected += 1;
        }
    }
    (tally, collected)
}

/// The server's final counters.
struct ServerTotals {
    send_rejections: u64,
    send_errors: u64,
}

/// What closing the endpoints found: their final counters, and whether
/// each closed in time (else the counters are not final).
#[derive(Default)]
struct Shutdown {
    client_send_errors: u64,
    kernel_drops: u64,
    conditioner_dropped: u64,
    conditioner_duplicated: u64,
    /// Clients that did not close by the deadline.
    not_closed: usize,
    /// The server stopped in time (true without one).
    server_stopped: bool,
    server: Option<ServerTotals>,
}

impl Shutdown {
    /// Every endpoint closed in time.
    fn complete(&self) -> bool {
        self.not_closed == 0 && self.server_stopped
    }

    /// The run's error when an endpoint did not close in time.
    fn check(&self, clients: usize) -> Result<(), String> {
        if self.complete() {
            return Ok(());
        }
        Err(format!(
            "{} did not close within the shutdown deadline: the counters \
             (kernel_rcvbuf_drops, server_send_*, client_send_completion_errors) are not final",
            match (self.server_stopped, self.not_closed) {
                (false, 0) => "the server".to_string(),
                (false, n) => format!("the server and {n} of {clients} clients"),
                (true, n) => format!("{n} of {clients} clients"),
            }
        ))
    }
}

/// Closes every client, then stops the server, and reads their counters
/// once they are final.
fn close_all(clients: &[Client<BenchClient>], server: Option<&Server<Echo>>) -> Shutdown {
    let mut totals = Shutdown {
        server_stopped: true,
        ..Shutdown::default()
    };
    // Close first: an endpoint reads its socket's drop counter as it
    // closes, so drops at the very end of the run (no later datagram
    // reported them) are counted too.
    for c in clients {
        c.close();
    }
    // One shared deadline, so a wedged runtime cannot stretch the run by a
    // second per client. Counters are read only after the endpoint closed
    // (its last kernel drops counted); one that did not close in time has
    // counters that are not final, and the run says so.
    let close_deadline = Instant::now() + Duration::from_secs(1);
    for c in clients {
        // `close_and_wait` also says false, at once, when the close posted
        // above already closed the lane before its own request ran (keel-udp
        // drops that request with the lane); a closed client has ended, and
        // ending counted its last drops.
        if !c.close_and_wait(close_deadline.saturating_duration_since(Instant::now()))
            && !c.is_closed()
        {
            totals.not_closed += 1;
        }
        let k = c.counters();
        totals.client_send_errors += k.send_errors;
        totals.kernel_drops += k.kernel_drops;
        totals.conditioner_dropped += k.conditioner_dropped;
        totals.conditioner_duplicated += k.conditioner_duplicated;
    }
    if let Some(s) = server {
        totals.server_stopped = s.stop_and_wait(
            close_deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(500),
        ) || s.is_stopped();
        let k = s.counters();
        totals.server = Some(ServerTotals {
            send_rejections: k.send_queue_rejections + k.send_too_large,
            send_errors: k.send_errors,
        });
        totals.kernel_drops += k.kernel_drops;
        totals.conditioner_dropped += k.conditioner_dropped;
        totals.conditioner_duplicated += k.conditioner_duplicated;
    }
    totals
}

/// The clients' tally: messages and every error counter.
fn record_tally(report: &mut RunReport, tally: &ClientTally, echo: &EchoStats, unfinished: usize) {
    report.throughput.messages_sent = tally.messages_sent;
    report.throughput.messages = tally.messages;
    report.checks.client_send_rejections = tally.send_rejections;
    report.checks.content_errors = tally.content_errors;
    report.checks.order_errors = tally.order_errors;
    report.checks.unexpected_messages = tally.unexpected + echo.invalid.load(Ordering::Relaxed);
    report.checks.disconnect_errors = tally.disconnects;
    report.checks.udp_lost_messages = tally.lost;
    report.checks.unfinished_messages = unfinished as u64;
    report.drops.late_echoes = Some(tally.late_echoes);
    report.drops.udp_lost_warmup_messages = Some(tally.warmup_lost);
    report.checks.warmup_errors = tally.warmup_errors;
    report.checks.warmup_ok = tally.warmup_errors == 0;
}

/// RTT, throughput, CPU, memory and the endpoints' final counters.
fn record_measurements(
    report: &mut RunReport,
    clients: &Clients,
    phases: &Phases,
    shutdown: &Shutdown,
) {
    report.checks.client_send_completion_errors = shutdown.client_send_errors;
    report.set_rtt_of(&clients.rtt.merged());
    report.set_throughput(
        phases
            .drain_end
            .saturating_duration_since(phases.measure_start),
    );
    if let (Some(a), Some(b)) = phases.cpu {
        report.set_cpu(b.saturating_sub(a), phases.wall);
    }
    report.cpu.peak_rss_bytes = peak_rss_bytes();
    report.drops.kernel_rcvbuf_drops = Some(shutdown.kernel_drops);
    report.impair.conditioner_dropped = Some(shutdown.conditioner_dropped);
    report.impair.conditioner_duplicated = Some(shutdown.conditioner_duplicated);
}

/// The run's error for clients that ended early: the counter, then what
/// happened and where, e.g. `disconnect_errors = 1: connection refused by
/// 127.0.0.1:7000 (ICMP port unreachable: nothing listening on that port)`.
pub fn disconnect_error(count: u64, reason: &DisconnectReason, server: SocketAddr) -> String {
    let what = match reason {
        DisconnectReason::Refused => format!(
            "connection refused by {server} (ICMP port unreachable: nothing listening on that port)"
        ),
        DisconnectReason::Error(kind) => format!("socket error talking to {server}: {kind}"),
        other => format!("client of {server} ended: {other}"),
    };
    format!("disconnect_errors = {count}: {what}")
}

/// The lane steering a run's server uses (`--lane-steering`).
pub fn run_steering(cfg: &RunConfig) -> LaneSteering {
    match cfg.lane_steering {
        LaneSteeringChoice::Port => LaneSteering::PeerPort,
        LaneSteeringChoice::Hash => LaneSteering::KernelHash,
        LaneSteeringChoice::Auto if cfg.io_model == IoModel::Sharded && cfg.server_lanes > 1 => {
            LaneSteering::PeerPort
        }
        LaneSteeringChoice::Auto => LaneSteering::KernelHash,
    }
}

/// Sleeps until `t` (phase timing, not synchronization).
pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}
