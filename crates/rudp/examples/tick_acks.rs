//! The server's acknowledgements at a game tick: one server lane that
//! sends a snapshot to every client at `--hz` (its own tick,
//! `Ctx::tick_at`), and `--clients` clients that each send an input at
//! 60 Hz (their own ticks, phases spread over the period), all on
//! loopback in one process: the server on a runtime of one thread, the
//! clients on another. Prints, over a window of `--seconds` after all
//! connected and a second of warm-up, the datagrams the server sent per
//! second, the CPU of the server's thread (`/proc/thread-self/schedstat`,
//! nanoseconds on CPU) as a percentage of one core, the input latency
//! (client send to server handler, p50 and p99), and, over the whole run
//! once every tick stopped and what was in flight arrived, whether every
//! input and every snapshot arrived.
//!
//! ```text
//! cargo run --release -p keel-rudp --example tick_acks -- --hz 20 --clients 200 --server-ack-delay 5
//! cargo run --release -p keel-rudp --example tick_acks -- --hz 60 --clients 200   # the server's default
//! ```
//!
//! `--server-ack-delay MS` sets the server's `max_ack_delay` after
//! `ServerConfig::new` (without it, the default that `new` gives); the
//! clients' is `--client-ack-delay MS` (default 17: a little above their
//! 60 Hz tick, as docs/rudp-guide.md advises).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Admission, ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config,
    ConnectionHandle, Ctx, Handler, Server, ServerConfig, ServerSecurity,
};

const SNAPSHOT: u8 = 0;
const INPUT: u8 = 1;
const INPUT_PERIOD: Duration = Duration::from_nanos(16_666_667);

fn channels() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
    ])
}

/// The clock every timestamp is taken against (one process).
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn stamp() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Set once the run is over: every tick stops asking for the next.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set during the measured window: the server records input latencies.
static MEASURING: AtomicBool = AtomicBool::new(false);

struct World {
    period: Duration,
    first: Option<Instant>,
    ticks: u32,
    players: Vec<ConnectionHandle>,
    snapshot: Vec<u8>,
    snapshots_sent: u64,
    inputs: u64,
    /// Input latencies in the window, in microseconds (bounded by the
    /// capacity reserved up front).
    latencies: Vec<u32>,
}

impl Handler for World {
    fn connected(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle) {
        if self.first.is_none() {
            let first = ctx.now() + self.period;
            self.first = Some(first);
            ctx.tick_at(first);
        }
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        if STOP.load(Ordering::Relaxed) {
            return;
        }
        self.ticks += 1;
        self.snapshot[..4].copy_from_slice(&self.ticks.to_be_bytes());
        ctx.connected(&mut self.players);
        for &p in &self.players {
            if ctx.send(p, SNAPSHOT, &self.snapshot).is_ok() {
                self.snapshots_sent += 1;
            }
        }
        if let Some(first) = self.first {
            ctx.tick_at(first + self.period * self.ticks);
        }
    }

    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, channel: u8, data: &[u8]) {
        if channel != INPUT || data.len() < 8 {
            return;
        }
        self.inputs += 1;
        if MEASURING.load(Ordering::Relaxed) && self.latencies.len() < self.latencies.capacity() {
            let sent = u64::from_be_bytes(data[..8].try_into().unwrap_or_default());
            let us = stamp().saturating_sub(sent) / 1_000;
            self.latencies.push(us.min(u64::from(u32::MAX)) as u32);
        }
    }
}

struct Player {
    first: Option<Instant>,
    phase: Duration,
    n: u32,
    conn: Option<ConnectionHandle>,
    sent: Arc<AtomicU64>,
    snapshots: Arc<AtomicU64>,
    connected: mpsc::Sender<()>,
}

impl Handler for Player {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        let first = ctx.now() + self.phase;
        self.first = Some(first);
        ctx.tick_at(first);
        let _ = self.connected.send(());
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let (Some(conn), Some(first)) = (self.conn, self.first) else {
            return;
        };
        if STOP.load(Ordering::Relaxed) {
            return;
        }
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&stamp().to_be_bytes());
        if ctx.send(conn, INPUT, &input).is_ok() {
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
        self.n += 1;
        ctx.tick_at(first + INPUT_PERIOD * self.n);
    }

    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, channel: u8, _: &[u8]) {
        if channel == SNAPSHOT {
            self.snapshots.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Nanoseconds the calling thread has run on a CPU.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Args {
    hz: u32,
    clients: usize,
    seconds: f64,
    server_ack_delay: Option<u64>,
    client_ack_delay: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        hz: 20,
        clients: 200,
        seconds: 5.0,
        server_ack_delay: None,
        client_ack_delay: 17,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag}: expected a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--hz" => a.hz = v.parse().map_err(|e| bad(&e))?,
            "--clients" => a.clients = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = v.parse().map_err(|e| bad(&e))?,
            "--server-ack-delay" => a.server_ack_delay = Some(v.parse().map_err(|e| bad(&e))?),
            "--client-ack-delay" => a.client_ack_delay = v.parse().map_err(|e| bad(&e))?,
            other => {
                return Err(format!(
                    "unknown flag {other}; expected --hz N (1..=1000), --clients N (1..=1000), \
                     --seconds S (0.5..=60), --server-ack-delay MS, --client-ack-delay MS"
                ))
            }
        }
    }
    if !(1..=1000).contains(&a.hz) {
        return Err(format!("--hz {}: expected 1..=1000", a.hz));
    }
    if !(1..=1000).contains(&a.clients) {
        return Err(format!("--clients {}: expected 1..=1000", a.clients));
    }
    if !(0.5..=60.0).contains(&a.seconds) {
        return Err(format!("--seconds {}: expected 0.5..=60", a.seconds));
    }
    Ok(a)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    EPOCH.get_or_init(Instant::now);
    let window = Duration::from_secs_f64(args.seconds);
    let server_rt = Runtime::new(IoModel::Shared { threads: 1 })?;
    let client_rt = Runtime::new(IoModel::Shared { threads: 1 })?;
    let mut sc = ServerConfig::new(channels(), ServerSecurity::Insecure);
    if let Some(ms) = args.server_ack_delay {
        sc.connection.max_ack_delay = Duration::from_millis(ms);
    }
    // Every client is on loopback: one address for all.
    sc.admission = Admission::OFF;
    // A server's socket buffers (4 MiB asked; Linux caps at rmem_max /
    // wmem_max): the machine is shared, and a burst that arrives while
    // the server's thread is descheduled must not be dropped.
    sc.udp.socket.recv_buffer = Some(4 << 20);
    sc.udp.socket.send_buffer = Some(4 << 20);
    let ack_delay = sc.connection.max_ack_delay;
    let period = Duration::from_secs(1) / args.hz;
    let expected_inputs = (args.clients as f64 * 60.0 * (args.seconds + 1.0)) as usize;
    let server = Server::bind(server_rt.handles(), "127.0.0.1:0".parse()?, sc, move |_| {
        World {
            period,
            first: None,
            ticks: 0,
            players: Vec::new(),
            snapshot: vec![0x5a; 100],
            snapshots_sent: 0,
            inputs: 0,
            latencies: Vec::with_capacity(expected_inputs),
        }
    })?;
    let sent = Arc::new(AtomicU64::new(0));
    let snapshots = Arc::new(AtomicU64::new(0));
    let (up, ups) = mpsc::channel();
    let mut cc = ClientConfig::new(channels(), ClientSecurity::Insecure);
    cc.connection.max_ack_delay = Duration::from_millis(args.client_ack_delay);
    let clients = (0..args.clients)
        .map(|i| {
            let player = Player {
                first: None,
                phase: INPUT_PERIOD * i as u32 / args.clients as u32,
                n: 0,
                conn: None,
                sent: sent.clone(),
                snapshots: snapshots.clone(),
                connected: up.clone(),
            };
            Client::connect(client_rt.handle(), server.local_addr(), cc.clone(), player)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..args.clients {
        let left = deadline.saturating_duration_since(Instant::now());
        ups.recv_timeout(left)
            .map_err(|_| format!("only {i} of {} clients connected in 10 s", args.clients))?;
    }
    std::thread::sleep(Duration::from_secs(1)); // warm-up: every tick running

    // On the server's lane: its thread's CPU time (the runtime has one).
    let on_lane = |f: fn(&mut World) -> (u64, u64)| -> Result<(u64, u64), String> {
        let (tx, rx) = mpsc::channel();
        let posted = server.post(0, move |w: &mut World, _| {
            let _ = tx.send(f(w));
        });
        if posted.is_err() {
            return Err("the server's lane took no job".into());
        }
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| "the server's lane did not answer".to_string())
    };
    let out0 = server.udp_counters().datagrams_out;
    let in0 = server.udp_counters().datagrams_in;
    let (cpu0, _) = on_lane(|_| (thread_cpu_ns(), 0))?;
    MEASURING.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let (cpu1, _) = on_lane(|_| (thread_cpu_ns(), 0))?;
    let elapsed = t0.elapsed().as_secs_f64();
    MEASURING.store(false, Ordering::Relaxed);
    let out1 = server.udp_counters().datagrams_out;
    let in1 = server.udp_counters().datagrams_in;

    // Stop every tick, let what is in flight land, then count.
    STOP.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    let (tx, rx) = mpsc::channel();
    let _ = server.post(0, move |w: &mut World, ctx| {
        let mut l = std::mem::take(&mut w.latencies);
        l.sort_unstable();
        // What the connections dropped as stale (sequenced channels).
        ctx.connections(&mut w.players);
        let stale: u64 = w
            .players
            .iter()
            .filter_map(|&p| ctx.stats(p))
            .map(|s| s.stale_messages)
            .sum();
        let _ = tx.send((w.inputs, w.snapshots_sent, l, stale));
    });
    let (inputs_got, snapshots_sent, lat, stale) = rx.recv_timeout(Duration::from_secs(5))?;
    let sc = server.udp_counters();
    let lost: u64 = clients
        .iter()
        .map(|c| {
            let u = c.udp_counters();
            u.kernel_drops + u.send_queue_rejections + u.send_errors
        })
        .sum();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0)
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "hz={} clients={} server_ack_delay_ms={} server_datagrams_out_per_s={:.0} \
         server_datagrams_in_per_s={:.0} server_cpu_pct={:.2} inputs={}/{} snapshots={}/{} \
         input_latency_p50_us={} input_latency_p99_us={} load1={} \
         (inputs stale on the server {stale}; server kernel drops {}, send rejections {}; \
         clients' drops and rejections {lost})",
        args.hz,
        args.clients,
        ack_delay.as_millis(),
        (out1 - out0) as f64 / elapsed,
        (in1 - in0) as f64 / elapsed,
        (cpu1 - cpu0) as f64 / 1e9 / elapsed * 100.0,
        inputs_got,
        sent.load(Ordering::Relaxed),
        snapshots.load(Ordering::Relaxed),
        snapshots_sent,
        pct(0.5),
        pct(0.99),
        load.split_whitespace().next().unwrap_or("?"),
        sc.kernel_drops,
        sc.send_queue_rejections + sc.send_errors,
    );
    let stops: Vec<_> = clients.iter().map(|c| c.begin_stop()).collect();
    for s in stops {
        s.wait();
    }
    server.stop();
    client_rt.stop()?;
    server_rt.stop()?;
    Ok(())
}
