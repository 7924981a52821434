//! Memory per client of many keel-rudp clients in one process (a bot farm,
//! a load generator), each with the default keel-udp endpoint settings
//! (`ClientConfig::new`: a batch of 64 datagrams per call): a server on a
//! runtime of one thread, `--clients` clients on another, all on loopback.
//! Each client sends a 400-byte reliable-ordered message, waits for its
//! echo and sends the next, `--echoes` times. Prints one line: the
//! process's resident memory growth from before the clients were made to
//! after every echo arrived (`VmRSS`, `/proc/self/status`) divided by the
//! clients, so both ends of each connection (the client's socket and
//! connection, the server's connection) are in it.
//!
//! ```text
//! cargo run --release -p keel-rudp --example client_footprint -- --clients 1000
//! cargo run --release -p keel-rudp --example client_footprint -- --clients 1000 --batch 8
//! ```
//!
//! `--batch N` sets the clients' `udp.batch` (default: keel-udp's, 64).
//! Bounded: at most 10,000 clients and 30 s of waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Admission, ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config,
    ConnectionHandle, Ctx, Handler, Server, ServerConfig, ServerSecurity,
};

const SIZE: usize = 400;

fn channels() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

/// Echoes every message.
struct Echo;

impl Handler for Echo {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        let _ = ctx.send(conn, channel, data);
    }
}

/// Sends a message, and the next on each echo, until `left` is 0.
struct Player {
    left: u32,
    done: Arc<AtomicU64>,
}

impl Handler for Player {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        let _ = ctx.send(conn, 0, &[7; SIZE]);
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, _: u8, _: &[u8]) {
        self.left = self.left.saturating_sub(1);
        if self.left == 0 {
            self.done.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = ctx.send(conn, 0, &[7; SIZE]);
        }
    }
}

/// The process's resident memory in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn arg(args: &[String], name: &str, default: u64, max: u64) -> u64 {
    let Some(i) = args.iter().position(|a| a == name) else {
        return default;
    };
    match args.get(i + 1).and_then(|v| v.parse::<u64>().ok()) {
        Some(v) if (1..=max).contains(&v) => v,
        _ => {
            eprintln!("{name}: expected a whole number in 1..={max}");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let clients = arg(&args, "--clients", 1000, 10_000) as usize;
    let echoes = arg(&args, "--echoes", 20, 1000) as u32;
    let batch = args
        .iter()
        .any(|a| a == "--batch")
        .then(|| arg(&args, "--batch", 64, 1024) as usize);

    let server_rt = Runtime::new(IoModel::Shared { threads: 1 }).expect("server runtime");
    let client_rt = Runtime::new(IoModel::Shared { threads: 1 }).expect("client runtime");
    let mut sc = ServerConfig::new(channels(), ServerSecurity::Insecure);
    sc.max_connections = clients.max(1);
    // Every client comes from 127.0.0.1: no per-source handshake limit.
    sc.admission = Admission::OFF;
    let server = Server::bind(
        server_rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        sc,
        |_| Echo,
    )
    .expect("server");
    let before = rss_kib();
    let done = Arc::new(AtomicU64::new(0));
    let mut all = Vec::with_capacity(clients);
    for _ in 0..clients {
        let mut cc = ClientConfig::new(channels(), ClientSecurity::Insecure);
        if let Some(b) = batch {
            cc.udp.batch = b;
        }
        let player = Player {
            left: echoes,
            done: done.clone(),
        };
        all.push(
            Client::connect(client_rt.handle(), server.local_addr(), cc, player).expect("client"),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while (done.load(Ordering::Relaxed) as usize) < clients && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = done.load(Ordering::Relaxed);
    let after = rss_kib();
    println!(
        "{{\"clients\": {clients}, \"echoes_each\": {echoes}, \"batch\": {}, \"finished\": {finished}, \"rss_before_kib\": {before}, \"rss_after_kib\": {after}, \"rss_per_connection_kib\": {:.1}}}",
        batch.unwrap_or(keel_udp::DEFAULT_BATCH),
        after.saturating_sub(before) as f64 / clients as f64
    );
    for c in all {
        c.stop();
    }
    server.stop();
    let _ = client_rt.stop();
    let _ = server_rt.stop();
}
