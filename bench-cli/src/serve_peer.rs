//! `keel-bench serve --protocol rudp|kcp`: the keel-rudp or KCP echo server
//! of a run, alone in its process, for clients of another process
//! (`keel-bench --connect ADDR --protocol rudp|kcp`, directly or through
//! `keel-bench relay`).
//!
//! The server is exactly the run's (`crate::rudp::start_server`,
//! `crate::kcp::bind_server`) with the same `--channel`, `--payload`,
//! `--kcp-mode` and `--kcp-window` as the clients give. It prints `ready
//! ADDR` on stderr once bound, serves until `--seconds` or SIGINT/SIGTERM,
//! and prints one JSON line ([`PeerServeSummary`], the server line of
//! issue 22's peers: `role` `"server"`).

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::flags::{Protocol, RunConfig, ServeConfig};
use crate::loopback::runtime_for;
use crate::peer::ServerCounts;
use crate::procstats::{process_cpu_time, rss_bytes};

/// How often the wait loop looks at the counters (CPU window, RSS and
/// connections are sampled at this resolution).
const SAMPLE: Duration = Duration::from_millis(10);
/// How often connections and RSS are sampled (a post to each lane and a
/// read of /proc: cheap at this period).
const SAMPLE_CONNECTIONS: Duration = Duration::from_millis(100);

/// The line `serve --protocol rudp|kcp` prints when it ends.
#[derive(Debug, Serialize)]
pub struct PeerServeSummary {
    /// Always `"server"`.
    pub role: &'static str,
    /// `"keel-rudp"` or `"kcp"`.
    pub library: &'static str,
    /// The settings in words.
    pub settings: String,
    /// The bound address.
    pub bind: String,
    /// Valid messages received and answered.
    pub messages_echoed: u64,
    /// Datagrams or messages that were not benchmark messages.
    pub invalid_messages: u64,
    /// Echoes the transport refused.
    pub send_rejections: u64,
    /// Most connections (keel-rudp) or peers (KCP) seen at once.
    pub connections: u64,
    /// CPU time of the whole process from the first message to the last
    /// (sampled every 10 ms).
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds` per message echoed, microseconds.
    pub cpu_us_per_message: Option<f64>,
    /// Largest RSS seen while serving.
    pub rss_bytes: Option<u64>,
    /// (`rss_bytes` - RSS before the first connection) / `connections`.
    pub rss_bytes_per_connection: Option<f64>,
    /// Seconds served.
    pub elapsed_seconds: f64,
    /// `"seconds"`, `"SIGINT"` or `"SIGTERM"`.
    pub ended_by: String,
    /// True when it served and stopped cleanly.
    pub ok: bool,
    /// Why not, if not.
    pub error: Option<String>,
}

impl PeerServeSummary {
    /// The line as JSON, without the trailing newline.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a PeerServeSummary always serializes")
    }
}

/// The run configuration the server is made from.
fn run_config(cfg: &ServeConfig) -> RunConfig {
    RunConfig {
        protocol: cfg.protocol,
        channel: cfg.channel,
        kcp_mode: cfg.kcp_mode,
        kcp_window: cfg.kcp_window,
        payload: cfg.payload,
        work: cfg.work,
        server_lanes: cfg.server_lanes,
        io_model: cfg.io_model,
        io_threads: cfg.io_threads,
        ..RunConfig::default()
    }
}

enum Running {
    Rudp(keel_rudp::Server<crate::rudp::EchoPeer>),
    Kcp(keel_udp::DatagramSocket<crate::kcp::KcpServer>),
}

impl Running {
    fn connections(&self) -> usize {
        match self {
            Running::Rudp(s) => crate::rudp::server_connections(s),
            Running::Kcp(s) => crate::kcp::server_peers(s).unwrap_or(0),
        }
    }
}

/// Serves until `--seconds` or a signal; `Err` when it could not start.
pub fn serve(cfg: &ServeConfig) -> Result<PeerServeSummary, String> {
    let (tx, rx) = mpsc::channel();
    let mut signals =
        Signals::new([SIGINT, SIGTERM]).map_err(|e| format!("installing signal handlers: {e}"))?;
    let signal_handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = tx.send(if sig == SIGINT { "SIGINT" } else { "SIGTERM" });
        }
    });
    let run = run_config(cfg);
    let rt = runtime_for(cfg.io_model, cfg.io_threads)
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let counts = Arc::new(ServerCounts::default());
    let rss_before = rss_bytes();
    let (library, settings, server) = match cfg.protocol {
        Protocol::Rudp => (
            "keel-rudp",
            format!(
                "keel-bench serve --protocol rudp, channel {}, insecure, max_ack_delay 5 ms",
                cfg.channel.as_str()
            ),
            Running::Rudp(crate::rudp::start_server(
                &run,
                &rt,
                cfg.bind,
                keel_rudp::ServerSecurity::Insecure,
                counts.clone(),
            )?),
        ),
        Protocol::Kcp => (
            "kcp",
            format!(
                "keel-bench serve --protocol kcp, --kcp-mode {}, window {}",
                cfg.kcp_mode.as_str(),
                cfg.kcp_window
            ),
            Running::Kcp(crate::kcp::bind_server(
                &run,
                &rt.handles()[0],
                cfg.bind,
                Instant::now(),
                counts.clone(),
                Default::default(),
            )?),
        ),
        Protocol::Udp => unreachable!("serve --protocol udp is crate::serve"),
    };
    let bound = match &server {
        Running::Rudp(s) => s.local_addr(),
        Running::Kcp(s) => s.local_addr(),
    };
    eprintln!("ready {bound}");
    let started = Instant::now();
    let end = cfg.seconds.map(|s| started + Duration::from_secs_f64(s));
    let (mut first, mut last) = (None, None);
    let mut seen = 0;
    let mut connections = 0;
    let mut rss_max = rss_before;
    let mut next_sample = started;
    let ended_by = loop {
        let timeout = end.map_or(SAMPLE, |e| {
            e.saturating_duration_since(Instant::now()).min(SAMPLE)
        });
        match rx.recv_timeout(timeout) {
            Ok(sig) => break sig.to_string(),
            Err(mpsc::RecvTimeoutError::Disconnected) => break "signal thread ended".to_string(),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let received = counts.received.load(Ordering::Relaxed);
        if received != seen {
            let cpu = process_cpu_time();
            if seen == 0 {
                first = cpu;
            }
            last = cpu;
            seen = received;
        }
        let now = Instant::now();
        if now >= next_sample {
            next_sample = now + SAMPLE_CONNECTIONS;
            connections = connections.max(server.connections());
            rss_max = rss_max.max(rss_bytes());
        }
        if end.is_some_and(|e| now >= e) {
            break "seconds".to_string();
        }
    };
    signal_handle.close();
    connections = connections.max(server.connections());
    let elapsed = started.elapsed();
    match &server {
        Running::Rudp(s) => {
            s.stop();
        }
        Running::Kcp(s) => s.close(),
    }
    let error = rt.stop().err().map(|e| format!("a handler failed: {e}"));
    let invalid = counts.invalid.load(Ordering::Relaxed);
    let echoed = counts
        .received
        .load(Ordering::Relaxed)
        .saturating_sub(invalid);
    let cpu = first
        .zip(last)
        .map(|(a, b)| b.saturating_sub(a).as_secs_f64());
    Ok(PeerServeSummary {
        role: "server",
        library,
        settings,
        bind: bound.to_string(),
        messages_echoed: echoed,
        invalid_messages: invalid,
        send_rejections: counts.send_rejections.load(Ordering::Relaxed),
        connections: connections as u64,
        cpu_seconds: cpu,
        cpu_us_per_message: cpu.filter(|_| echoed > 0).map(|c| c * 1e6 / echoed as f64),
        rss_bytes: rss_max,
        rss_bytes_per_connection: rss_before
            .zip(rss_max)
            .filter(|_| connections > 0)
            .map(|(a, b)| b.saturating_sub(a) as f64 / connections as f64),
        elapsed_seconds: elapsed.as_secs_f64(),
        ended_by,
        ok: error.is_none(),
        error,
    })
}
