//! `keel-bench serve`: the echo server alone, for a second host or for
//! sockperf. Ends after `--seconds` or on SIGINT/SIGTERM with one JSON
//! summary line.
//!
//! Unlike the run's in-process server, `serve` faces peers it does not
//! know, so a burst of one-off or spoofed source addresses must not lock
//! every later peer out:
//!
//! * a datagram that is not a message of the mode opens no session (the
//!   handler's `accept` checks a new peer's first datagram), so garbage
//!   from any number of sources costs no slot of the table;
//! * when the table (`--max-sessions` per lane) is full, a new peer with a
//!   valid message evicts the least recently active session
//!   (`--full-policy evict-idlest`, the default; `refuse` turns eviction
//!   off and drops a new peer's datagrams until a session times out);
//! * sessions time out (`--idle-timeout`, 30 s by default).
//!
//! Every datagram received is in exactly one summary counter:
//! `datagrams_in = answered + unanswered_warmup + unanswered_no_reply +
//! invalid_messages + sessions_refused + truncated + recv_discarded`
//! (kernel drops never reached the socket's queue and are apart).
//!
//! The summary's counters are read after the server has stopped (every lane
//! handled what was queued, counted the kernel drops no datagram reported,
//! and closed its socket), so they are final. If the lanes do not stop
//! within [`STOP_WAIT`], the summary says so (`ok: false`, `error`) instead
//! of passing partial counters off as final.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::echo::{Echo, EchoMode, EchoStats};
use crate::flags::{FullPolicyChoice, LaneSteeringChoice, ServeConfig};
use crate::loopback::{runtime_for, start_server, EchoServerSpec, SessionPolicy};
use keel_udp::{FullPolicy, LaneSteering, Server};

/// How long `serve` waits for its lanes to stop (handle what is queued,
/// count the last kernel drops, close) before it reports that its counters
/// may be incomplete.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// The summary line `serve` prints when it ends.
#[derive(Debug, Serialize)]
pub struct ServeSummary {
    /// Always `"serve"`.
    pub role: &'static str,
    /// `"keel"`.
    pub backend: &'static str,
    /// keel-bench's version.
    pub keel_version: &'static str,
    /// The bound address (with the real port).
    pub bind: String,
    /// `"bench"` or `"sockperf"`.
    pub mode: &'static str,
    /// IO model and threads.
    pub io_model: &'static str,
    /// `--io-threads`.
    pub io_threads: u32,
    /// Receive lanes.
    pub server_io_lanes: u32,
    /// `--idle-timeout` in seconds; `null` when off.
    pub idle_timeout_seconds: Option<f64>,
    /// `--max-sessions`: sessions per receive lane at most.
    pub max_sessions: u32,
    /// `--full-policy`: `"refuse"` or `"evict-idlest"`.
    pub full_policy: &'static str,
    /// Seconds served.
    pub elapsed_seconds: f64,
    /// What ended it: `"seconds"`, `"SIGINT"` or `"SIGTERM"`; `"error"`
    /// when it could not start ([`ServeSummary::failed`]).
    pub ended_by: String,
    /// Datagrams received: each is in exactly one of `answered`,
    /// `unanswered_warmup`, `unanswered_no_reply`, `invalid_messages`,
    /// `sessions_refused`, `truncated` and `recv_discarded`.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Kernel receive-buffer drops (SO_RXQ_OVFL).
    pub kernel_rcvbuf_drops: u64,
    /// Messages answered: their echo (sockperf: reply) was handed to the
    /// send path (`send_rejections` counts those it refused).
    pub answered: u64,
    /// sockperf warm-up messages, deliberately not answered (as sockperf's
    /// own server does); 0 in bench mode.
    pub unanswered_warmup: u64,
    /// sockperf messages that ask for no reply, deliberately not answered;
    /// 0 in bench mode.
    pub unanswered_no_reply: u64,
    /// Datagrams that were not benchmark (or sockperf) messages, from peers
    /// with a session or without (those opened none: `sessions_rejected`).
    pub invalid_messages: u64,
    /// Sends refused (queue full, too large).
    pub send_rejections: u64,
    /// Sends the kernel refused.
    pub send_errors: u64,
    /// Truncated datagrams (larger than the receive slot), dropped.
    pub truncated: u64,
    /// Datagrams still queued on the socket when the server stopped, beyond
    /// what the stop handled: read and discarded.
    pub recv_discarded: u64,
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Datagrams from new peers refused because the table was full
    /// (`--full-policy refuse`).
    pub sessions_refused: u64,
    /// New peers whose first datagram failed the check: no session was
    /// opened for them (these datagrams are part of `invalid_messages`).
    pub sessions_rejected: u64,
    /// Sessions ended by the idle timeout.
    pub sessions_timed_out: u64,
    /// Sessions evicted for a new peer (`--full-policy evict-idlest`, the
    /// default: the least recently active session goes).
    pub sessions_evicted: u64,
    /// Socket buffers granted.
    pub udp_server_send_buffer_bytes: u64,
    /// Socket buffers granted.
    pub udp_server_receive_buffer_bytes: u64,
    /// True when it served and shut down cleanly: every lane stopped within
    /// [`STOP_WAIT`] (so the counters above are final) and no handler
    /// failed.
    pub ok: bool,
    /// Why not, if not.
    pub error: Option<String>,
}

/// Serves until `--seconds` or a signal, stops the server, and returns the
/// summary (the caller prints it).
///
/// If the lanes do not stop within [`STOP_WAIT`] (a handler still busy,
/// e.g. with a large `--work` backlog), the runtime is left to the process
/// exit instead of being joined, so a wedged lane cannot keep `serve` from
/// ending; the summary then has `ok: false` and says why.
pub fn serve(cfg: &ServeConfig) -> Result<ServeSummary, String> {
    let (tx, rx) = mpsc::channel();
    let mut signals =
        Signals::new([SIGINT, SIGTERM]).map_err(|e| format!("installing signal handlers: {e}"))?;
    let signal_handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = tx.send(if sig == SIGINT { "SIGINT" } else { "SIGTERM" });
        }
    });
    let rt = runtime_for(cfg.io_model, cfg.io_threads)
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let stats = Arc::new(EchoStats::default());
    let server = start_server(&rt, &echo_spec(cfg), stats.clone())
        .map_err(|e| format!("--bind {}: {e}", cfg.bind))?;
    eprintln!("keel-bench serve: listening on {}", server.local_addr());
    let started = Instant::now();
    let ended_by = wait_for_end(cfg.seconds, &rx);
    signal_handle.close();
    let elapsed = started.elapsed();
    // Counters only after the lanes are gone: stopping handles what is
    // still queued and counts the kernel drops no datagram reported, so
    // anything read before is short of the final figures.
    let stopped_in_time = server.stop_and_wait(STOP_WAIT) || server.is_stopped();
    let error = if stopped_in_time {
        rt.stop().err().map(|e| format!("a handler failed: {e}"))
    } else {
        // Joining would wait for the busy handler; the process exit ends it.
        std::mem::forget(rt);
        Some(format!(
            "the server did not stop within {} s (a lane was still busy): \
             the counters are not final",
            STOP_WAIT.as_secs_f64()
        ))
    };
    Ok(summary(cfg, &server, &stats, elapsed, ended_by, error))
}

/// The echo server `cfg` asks for.
fn echo_spec(cfg: &ServeConfig) -> EchoServerSpec {
    EchoServerSpec {
        bind: cfg.bind,
        lanes: cfg.server_lanes,
        batch: cfg.batch,
        receive_buffer: cfg.udp_server_receive_buffer,
        work: cfg.work,
        mode: if cfg.sockperf {
            EchoMode::Sockperf
        } else {
            EchoMode::Bench
        },
        // Remote peers pick their own ports: `auto` is the kernel's hash.
        steering: match cfg.lane_steering {
            LaneSteeringChoice::Port => LaneSteering::PeerPort,
            _ => LaneSteering::KernelHash,
        },
        sessions: SessionPolicy {
            idle_timeout: cfg.idle_timeout,
            max_sessions: cfg.max_sessions as usize,
            full_policy: match cfg.full_policy {
                FullPolicyChoice::Refuse => FullPolicy::Refuse,
                FullPolicyChoice::EvictIdlest => FullPolicy::EvictIdlest,
            },
        },
        dont_fragment: false,
    }
}

/// Waits for `--seconds` (if given) or a signal, and says which ended it.
fn wait_for_end(seconds: Option<f64>, signals: &mpsc::Receiver<&'static str>) -> String {
    match seconds {
        Some(s) => match signals.recv_timeout(Duration::from_secs_f64(s)) {
            Ok(sig) => sig.to_string(),
            Err(_) => "seconds".to_string(),
        },
        None => signals
            .recv()
            .map_or_else(|_| "signal thread ended".to_string(), str::to_string),
    }
}

impl ServeSummary {
    /// The summary of a `serve` that could not start (the address in use,
    /// the runtime not started): the configuration as asked, every
    /// counter 0 (nothing was served) and the socket buffers 0 (none was
    /// granted), `ended_by` `"error"`, `ok` false and `error` why; the
    /// same fields, in the same order, as a summary of a server that ran.
    pub fn failed(cfg: &ServeConfig, error: &str) -> ServeSummary {
        ServeSummary {
            role: "serve",
            backend: crate::output::BACKEND,
            keel_version: env!("CARGO_PKG_VERSION"),
            bind: cfg.bind.to_string(),
            mode: if cfg.sockperf { "sockperf" } else { "bench" },
            io_model: cfg.io_model.as_str(),
            io_threads: cfg.io_threads,
            server_io_lanes: cfg.server_lanes,
            idle_timeout_seconds: cfg.idle_timeout.map(|d| d.as_secs_f64()),
            max_sessions: cfg.max_sessions,
            full_policy: cfg.full_policy.as_str(),
            elapsed_seconds: 0.0,
            ended_by: "error".to_string(),
            datagrams_in: 0,
            datagrams_out: 0,
            bytes_in: 0,
            bytes_out: 0,
            kernel_rcvbuf_drops: 0,
            answered: 0,
            unanswered_warmup: 0,
            unanswered_no_reply: 0,
            invalid_messages: 0,
            send_rejections: 0,
            send_errors: 0,
            truncated: 0,
            recv_discarded: 0,
            sessions_opened: 0,
            sessions_refused: 0,
            sessions_rejected: 0,
            sessions_timed_out: 0,
            sessions_evicted: 0,
            udp_server_send_buffer_bytes: 0,
            udp_server_receive_buffer_bytes: 0,
            ok: false,
            error: Some(error.to_owned()),
        }
    }
}

/// The summary of a server that has stopped (its counters are final
/// unless `error` says otherwise).
fn summary(
    cfg: &ServeConfig,
    server: &Server<Echo>,
    stats: &EchoStats,
    elapsed: Duration,
    ended_by: String,
    error: Option<String>,
) -> ServeSummary {
    let k = server.counters();
    let b = server.buffers();
    ServeSummary {
        role: "serve",
        backend: crate::output::BACKEND,
        keel_version: env!("CARGO_PKG_VERSION"),
        bind: server.local_addr().to_string(),
        mode: if cfg.sockperf { "sockperf" } else { "bench" },
        io_model: cfg.io_model.as_str(),
        io_threads: cfg.io_threads,
        server_io_lanes: cfg.server_lanes,
        idle_timeout_seconds: cfg.idle_timeout.map(|d| d.as_secs_f64()),
        max_sessions: cfg.max_sessions,
        full_policy: cfg.full_policy.as_str(),
        elapsed_seconds: elapsed.as_secs_f64(),
        ended_by,
        datagrams_in: k.datagrams_in,
        datagrams_out: k.datagrams_out,
        bytes_in: k.bytes_in,
        bytes_out: k.bytes_out,
        kernel_rcvbuf_drops: k.kernel_drops,
        answered: stats.answered(),
        unanswered_warmup: stats.unanswered_warmup(),
        unanswered_no_reply: stats.unanswered_no_reply(),
        invalid_messages: stats.invalid.load(Ordering::Relaxed),
        send_rejections: k.send_queue_rejections + k.send_too_large,
        send_errors: k.send_errors,
        truncated: k.truncated,
        recv_discarded: k.recv_discarded,
        sessions_opened: k.sessions_opened,
        sessions_refused: k.sessions_refused,
        sessions_rejected: k.sessions_rejected,
        sessions_timed_out: k.sessions_timed_out,
        sessions_evicted: k.sessions_evicted,
        udp_server_send_buffer_bytes: b.send as u64,
        udp_server_receive_buffer_bytes: b.recv as u64,
        ok: error.is_none(),
        error,
    }
}
