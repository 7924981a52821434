//! `--protocol udp --rate HZ`: the open-loop echo over plain keel-udp, the
//! baseline of the scale case (what keel-rudp's reliability, ordering and
//! connection state cost the server on top of datagrams).
//!
//! The server is the UDP benchmark's own echo server (`crate::loopback`'s
//! [`start_server_impaired`]: a keel-udp [`keel_udp::Server`] with one
//! session per client, the message header checked, the datagram sent
//! back). Each client is a keel-udp `DatagramSocket` driven by the same
//! [`Driver`] as `--protocol rudp` and `kcp` (open loop, spread sends,
//! every echo checked), on the same client as `kcp`
//! (`crate::socket_client`) with plain datagrams for its [`Transport`],
//! treating the transport as lossy: an echo not back
//! within [`crate::peer::UNRELIABLE_LOSS_TIMEOUT`] is lost, and echoes are
//! not required in order. As there, the server runs on its own runtime,
//! apart from the clients', so its CPU time per message is measured alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keel_udp::LaneSteering;

use crate::echo::{EchoMode, EchoStats};
use crate::flags::RunConfig;
use crate::loopback::{start_server_impaired, EchoServerSpec, SessionPolicy};
use crate::output::RunReport;
use crate::peer::{
    drive_sockets, record, record_server, record_sockets, runtimes, shared_rtt, Driver,
    ServerProbe, ServerTally, UNRELIABLE_LOSS_TIMEOUT,
};
use crate::procstats::rss_bytes;
use crate::socket_client::{Clients, Outbound, Transport};

/// Plain datagrams: a message is sent as it is, an echo is the datagram.
struct Datagrams;

impl Transport for Datagrams {
    const ARM_AFTER_DATAGRAM: bool = false;

    fn pump(&mut self, driver: &mut Driver, out: &mut Outbound<'_, '_>) -> u64 {
        let mut refused = 0;
        driver.pump(&mut |msg| {
            let ok = out.send(msg);
            refused += u64::from(!ok);
            ok
        });
        refused
    }

    fn receive(&mut self, driver: &mut Driver, data: &[u8], now: Instant) -> bool {
        driver.echo(data, now);
        true
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
        dont_fragment: cfg.dont_fragment,
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
    let clients = Clients {
        cfg,
        runtime: &client_rt,
        server: server.local_addr(),
        max_datagram: cfg.payload as usize,
        lossy: true,
        connected: &connected,
        drained: &drained,
        rtt: &rtt,
    }
    .bind(|_| Datagrams)?;

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
