//! The server's frame: the [`Tally`] every library reports to, and
//! [`run`], which binds, prints `ready`, pumps until SIGINT/SIGTERM and
//! prints the server's JSON line.
//!
//! CPU is the whole process (getrusage, every thread) over the window from
//! the first message echoed to the last: the tally snapshots CPU, the
//! message count and RSS at the first message and then at most every
//! [`SNAPSHOT_EVERY`] while messages flow, so the last snapshot is at most
//! that long before the last message (the messages after it are left out
//! of both the CPU and the count). Connection setup (before the first
//! message) and the idle time after the last (a library pumped every
//! millisecond spends CPU idle) are outside the window. RSS per connection
//! is (RSS at the last snapshot, all connections up and in use - RSS
//! after bind) / the most connections seen at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::stats::rss_bytes;
use crate::sys::process_cpu;
use crate::{Library, ServerArgs, SERVER_PUMP_MAX};

/// How often, at most, the tally snapshots CPU and RSS while messages flow.
pub const SNAPSHOT_EVERY: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, Debug)]
struct Snapshot {
    cpu: Option<Duration>,
    messages: u64,
    rss: Option<u64>,
}

fn snapshot(messages: u64) -> Snapshot {
    Snapshot {
        cpu: process_cpu(),
        messages,
        rss: rss_bytes(),
    }
}

/// What a server's library reports: connections and messages echoed.
/// Cheap on the hot path (an atomic add and a clock read per message; a
/// snapshot at most every [`SNAPSHOT_EVERY`]); callable from any thread.
pub struct Tally {
    epoch: Instant,
    messages: AtomicU64,
    bytes: AtomicU64,
    connections: AtomicUsize,
    peak: AtomicUsize,
    connections_total: AtomicU64,
    /// Nanoseconds after `epoch` of the last snapshot.
    last_snapshot_ns: AtomicU64,
    baseline_rss: Mutex<Option<u64>>,
    first: Mutex<Option<Snapshot>>,
    last: Mutex<Option<Snapshot>>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            epoch: Instant::now(),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            connections_total: AtomicU64::new(0),
            last_snapshot_ns: AtomicU64::new(0),
            baseline_rss: Mutex::new(None),
            first: Mutex::new(None),
            last: Mutex::new(None),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tally {
    /// A connection came up (or, connectionless, a new peer address).
    pub fn connected(&self) {
        let now = self.connections.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection went away.
    pub fn disconnected(&self) {
        let _ = self
            .connections
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// One message of `len` bytes was echoed.
    pub fn echoed(&self, len: usize) {
        let n = self.messages.fetch_add(1, Ordering::Relaxed) + 1;
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        if n == 1 {
            let s = snapshot(n);
            *lock(&self.first) = Some(s);
            *lock(&self.last) = Some(s);
            self.last_snapshot_ns
                .store(self.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
            return;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let last = self.last_snapshot_ns.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= SNAPSHOT_EVERY.as_nanos() as u64
            && self
                .last_snapshot_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            *lock(&self.last) = Some(snapshot(n));
        }
    }

    /// Messages echoed so far.
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Records the RSS before any connection (the harness calls it after
    /// bind).
    pub fn set_baseline(&self) {
        *lock(&self.baseline_rss) = rss_bytes();
    }

    /// The server's JSON fields measured by the tally.
    pub fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let first = *lock(&self.first);
        let last = *lock(&self.last);
        let peak = self.peak.load(Ordering::Relaxed);
        let baseline = *lock(&self.baseline_rss);
        let cpu = first
            .zip(last)
            .and_then(|(f, l)| Some((l.cpu?.saturating_sub(f.cpu?), l.messages - f.messages)));
        let rss = last.and_then(|l| l.rss).or_else(rss_bytes);
        let per_conn = rss
            .zip(baseline)
            .filter(|_| peak > 0)
            .map(|(r, b)| r.saturating_sub(b) as f64 / peak as f64);
        let mut m = serde_json::Map::new();
        m.insert("messages_echoed".into(), json!(self.messages()));
        m.insert(
            "bytes_echoed".into(),
            json!(self.bytes.load(Ordering::Relaxed)),
        );
        m.insert("connections".into(), json!(peak));
        m.insert(
            "connections_total".into(),
            json!(self.connections_total.load(Ordering::Relaxed)),
        );
        m.insert(
            "cpu_seconds".into(),
            json!(cpu.map(|(c, _)| c.as_secs_f64())),
        );
        m.insert("cpu_window_messages".into(), json!(cpu.map(|(_, n)| n)));
        m.insert(
            "cpu_us_per_message".into(),
            json!(cpu
                .filter(|(_, n)| *n > 0)
                .map(|(c, n)| c.as_secs_f64() * 1e6 / n as f64)),
        );
        m.insert("rss_bytes".into(), json!(rss));
        m.insert("rss_bytes_baseline".into(), json!(baseline));
        m.insert("rss_bytes_per_connection".into(), json!(per_conn));
        m
    }
}

/// Runs `lib`'s echo server: bind, `ready ADDR` on stderr, pump until
/// SIGINT/SIGTERM, one JSON line on stdout. Returns the exit code.
pub fn run(lib: &Library, args: &ServerArgs) -> i32 {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("keel-peer: installing the signal handler: {e}");
            return 1;
        }
    }
    let tally = Arc::new(Tally::default());
    let mut error = None;
    let mut desc = crate::Description::default();
    match (lib.server)(args, tally.clone()) {
        Err(e) => error = Some(e),
        Ok((mut server, d)) => {
            desc = d;
            tally.set_baseline();
            eprintln!("ready {}", server.local_addr());
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = server.pump(SERVER_PUMP_MAX) {
                    error = Some(e);
                    break;
                }
            }
        }
    }
    let mut line = serde_json::Map::new();
    line.insert("role".into(), json!("server"));
    line.insert("library".into(), json!(lib.name));
    line.insert("settings".into(), json!(desc.settings));
    line.insert("tuned".into(), json!(args.tuned));
    line.insert("pump".into(), json!(desc.pump));
    line.extend(tally.fields());
    line.insert("ok".into(), json!(error.is_none()));
    line.insert("error".into(), json!(error));
    println!("{}", serde_json::Value::Object(line));
    if let Some(e) = &error {
        eprintln!("keel-peer {} server: {e}", lib.name);
        1
    } else {
        0
    }
}
