//! A small game on keel-rudp: a server and clients in one binary.
//!
//! * Join: the server sends each new player a ~20 KB map blob on a
//!   reliable-ordered bulk channel and a welcome on the chat channel.
//! * 60 Hz snapshots from the server on an unreliable-sequenced channel
//!   (a stale one is dropped, never shown after a newer one).
//! * 60 Hz inputs from each client on an unreliable-sequenced channel.
//! * Chat on reliable-ordered, broadcast by the server.
//! * Once a second each client prints its RTT and loss from the stats.
//!
//! ```text
//! cargo run -p keel-rudp --example game                 # both in one process, 3 s
//! cargo run -p keel-rudp --example game -- --seconds 5 --clients 3 --impair loss=0.1,delay=20ms
//! cargo run -p keel-rudp --example game -- --server 0.0.0.0:7777 --seconds 60
//! cargo run -p keel-rudp --example game -- --client 127.0.0.1:7777
//! ```
//!
//! In-process, each client's socket goes through keel's link conditioner
//! (`--impair`, default `loss=0.05,delay=15ms,jitter=3ms`, both ways), so
//! the RTT and the loss repair show.
//!
//! Clients are numbered from 1; each says its number on the join channel
//! as it connects, so "client 2" and the server's "player 2" are the same
//! one. `--help` lists the flags; a bad flag is an error in words and exit
//! status 2 before anything starts.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use keel_udp::Impairment;

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, Config, ConnectionHandle, Ctx,
    DisconnectReason, Handler, Server, ServerConfig,
};

const MAP: u8 = 0;
const SNAPSHOT: u8 = 1;
const INPUT: u8 = 2;
const CHAT: u8 = 3;
/// A client's number (u32, big endian), sent once as it connects, so the
/// server's player numbers are the clients' own.
const JOIN: u8 = 4;
const TICK: Duration = Duration::from_micros(16_667);

/// Both ends configure the same channels (the handshake checks it).
fn channels() -> Config {
    let mut map = ChannelConfig::new(ChannelKind::ReliableOrdered);
    map.bulk = true; // paced by congestion control; never holds back the others
    Config::new(vec![
        map,
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableOrdered),
    ])
}

/// Why a connection ended, in words: `closed by the server (code 0, "game
/// over")`. `this` and `peer` name the two ends as seen from here.
fn reason_text(reason: &DisconnectReason, this: &str, peer: &str) -> String {
    let closed = |by: &str, code: u64, why: &str| {
        if why.is_empty() {
            format!("closed by {by} (code {code})")
        } else {
            format!("closed by {by} (code {code}, \"{why}\")")
        }
    };
    match reason {
        DisconnectReason::Local { code, reason } => closed(this, *code, reason),
        DisconnectReason::Remote { code, reason } => closed(peer, *code, reason),
        DisconnectReason::IdleTimeout => format!("timed out: nothing arrived from {peer}"),
        DisconnectReason::HandshakeTimeout => format!("{peer} never answered the handshake"),
        DisconnectReason::AckTimeout => format!("{peer} acknowledged nothing for too long"),
        other => format!("ended: {other:?}"),
    }
}

/// An address as `127.0.0.1:48499`, or `an unknown address`.
fn addr_text(addr: Option<SocketAddr>) -> String {
    addr.map_or_else(|| "an unknown address".to_string(), |a| a.to_string())
}

/// A player on the server: its connection, the number its client gave,
/// its position.
struct Seat {
    conn: ConnectionHandle,
    number: u32,
    x: i32,
}

/// The server's game state on one lane.
struct Game {
    players: Vec<Seat>,
    tick: u32,
    conns: Vec<ConnectionHandle>,
}

impl Game {
    /// `player N` for a connection that said its number, else `a player
    /// not yet joined`.
    fn name(&self, conn: ConnectionHandle) -> String {
        self.players.iter().find(|p| p.conn == conn).map_or_else(
            || "a player not yet joined".to_string(),
            |p| format!("player {}", p.number),
        )
    }
}

impl Handler for Game {
    fn connected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle) {
        // The player joins when its client says its number (JOIN).
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        match channel {
            JOIN if data.len() == 4 => {
                if self.players.iter().any(|p| p.conn == conn) {
                    return;
                }
                let number = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                println!(
                    "server: player {number} joined from {}",
                    addr_text(ctx.peer_addr(conn))
                );
                let map: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
                let _ = ctx.send(conn, MAP, &map);
                let _ = ctx.send(conn, CHAT, format!("welcome, player {number}").as_bytes());
                self.players.push(Seat { conn, number, x: 0 });
            }
            INPUT if data.len() == 5 => {
                if let Some(p) = self.players.iter_mut().find(|p| p.conn == conn) {
                    p.x += i32::from(data[4] as i8); // the input moves the player
                }
            }
            CHAT => {
                let line = format!("{}: {}", self.name(conn), String::from_utf8_lossy(data));
                println!("server: chat {line}");
                ctx.connected(&mut self.conns);
                for &c in &self.conns {
                    let _ = ctx.send(c, CHAT, line.as_bytes());
                }
            }
            _ => {}
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, conn: ConnectionHandle, reason: &DisconnectReason) {
        println!(
            "server: {} left: {}",
            self.name(conn),
            reason_text(reason, "the server", "the player")
        );
        self.players.retain(|p| p.conn != conn);
    }
}

impl Game {
    /// One 60 Hz tick: a snapshot (tick number and every position) to
    /// every player.
    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        self.tick += 1;
        let mut snap = Vec::with_capacity(4 + 8 * self.players.len());
        snap.extend_from_slice(&self.tick.to_be_bytes());
        for p in &self.players {
            snap.extend_from_slice(&p.number.to_be_bytes());
            snap.extend_from_slice(&p.x.to_be_bytes());
        }
        for p in &self.players {
            let _ = ctx.send(p.conn, SNAPSHOT, &snap);
        }
    }
}

/// A client's view.
struct Player {
    /// Its number, from 1 (the server's player number too).
    name: usize,
    joined: Option<Instant>,
    started: Instant,
    snapshots: u32,
    last_tick: u32,
    stale: u32,
    last_report: Instant,
    /// Its connection, from `connected` on.
    conn: Option<ConnectionHandle>,
    /// Set when the server's welcome arrived: the server knows this
    /// player's number, so its chat lines are signed with it.
    welcomed: Arc<AtomicBool>,
}

impl Handler for Player {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        println!(
            "client {}: connected to {} after {:.1} ms",
            self.name,
            addr_text(ctx.peer_addr(conn)),
            self.started.elapsed().as_secs_f64() * 1e3
        );
        let _ = ctx.send(conn, JOIN, &(self.name as u32).to_be_bytes());
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        match channel {
            MAP => {
                let ok = data
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i as u32 * 7 % 251) as u8);
                self.joined = Some(Instant::now());
                println!(
                    "client {}: map of {} bytes arrived {:.1} ms after start ({})",
                    self.name,
                    data.len(),
                    self.started.elapsed().as_secs_f64() * 1e3,
                    if ok { "intact" } else { "CORRUPT" }
                );
            }
            SNAPSHOT if data.len() >= 4 => {
                let tick = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                if tick <= self.last_tick {
                    self.stale += 1; // never happens: the channel drops stale ones
                }
                self.last_tick = tick;
                self.snapshots += 1;
                if self.last_report.elapsed() >= Duration::from_secs(1) {
                    self.last_report = Instant::now();
                    if let Some(s) = ctx.stats(conn) {
                        println!(
                            "client {}: tick {tick}, {} snapshots, rtt {:.1} ms (min {:.1}, var {:.1}), \
                             loss {:.1} %, {} resent, {} redundant copies",
                            self.name,
                            self.snapshots,
                            s.smoothed_rtt.as_secs_f64() * 1e3,
                            s.min_rtt.as_secs_f64() * 1e3,
                            s.rttvar.as_secs_f64() * 1e3,
                            s.loss_rate * 100.0,
                            s.retransmissions,
                            s.redundant_copies
                        );
                    }
                }
            }
            CHAT => {
                let line = String::from_utf8_lossy(data);
                if line.starts_with("welcome, ") {
                    self.welcomed.store(true, Ordering::Relaxed);
                }
                println!("client {}: chat \"{line}\"", self.name);
            }
            _ => {}
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, reason: &DisconnectReason) {
        println!(
            "client {}: disconnected: {}",
            self.name,
            reason_text(reason, "this client", "the server")
        );
    }
}

/// The flags, as `--help` lists them.
const HELP: &str = "\
game: a small game on keel-rudp (map download, 60 Hz snapshots and inputs, chat)

USAGE:
  game [--seconds S] [--clients N] [--impair SPEC]    server and clients in one process
  game --server ADDR:PORT [--seconds S]               the server alone
  game --client ADDR:PORT [--seconds S] [--clients N] clients only, against a server

FLAGS:
  --seconds S       how long to play, 0 < S <= 3600 (default 3)
  --clients N       clients, 1..=1000 (default 2), numbered from 1
  --impair SPEC     in-process only: keel's link conditioner on every client, both ways
                    (default loss=0.05,delay=15ms,jitter=3ms; see keel-udp's Impairment;
                    each client gets its own seed)
  --server ADDR     serve on ADDR:PORT (e.g. 0.0.0.0:7777)
  --client ADDR     connect to a server at ADDR:PORT
  -h, --help        print this help and exit

Exit status: 0 when the game ran, 1 when it could not run, 2 for a bad flag.
";

struct Args {
    server: Option<SocketAddr>,
    client: Option<SocketAddr>,
    seconds: f64,
    clients: usize,
    impair: Impairment,
}

/// The command line, or `None` for `--help`; `Err` names the flag and
/// what it accepts.
fn parse() -> Result<Option<Args>, String> {
    const DEFAULT_IMPAIR: &str = "loss=0.05,delay=15ms,jitter=3ms";
    let mut a = Args {
        server: None,
        client: None,
        seconds: 3.0,
        clients: 2,
        impair: DEFAULT_IMPAIR.parse().map_err(|e| format!("{e}"))?,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        let mut value = || {
            it.next()
                .ok_or(format!("{flag}: expected a value (see --help)"))
        };
        match flag.as_str() {
            "--server" => {
                let v = value()?;
                a.server = Some(v.parse().map_err(|e| {
                    format!("--server: {e}: {v:?} (expected ADDR:PORT, e.g. 0.0.0.0:7777)")
                })?)
            }
            "--client" => {
                let v = value()?;
                a.client = Some(v.parse().map_err(|e| {
                    format!("--client: {e}: {v:?} (expected ADDR:PORT, e.g. 127.0.0.1:7777)")
                })?)
            }
            "--seconds" => {
                let v = value()?;
                a.seconds = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                    .ok_or(format!(
                        "--seconds: expected a number of seconds, 0 < S <= 3600, got {v:?}"
                    ))?;
            }
            "--clients" => {
                let v = value()?;
                a.clients = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or(format!(
                        "--clients: expected a whole number 1..=1000, got {v:?}"
                    ))?;
            }
            "--impair" => {
                let v = value()?;
                a.impair = v.parse().map_err(|e| format!("--impair: {e}"))?;
            }
            other => {
                return Err(format!(
                    "unknown flag {other:?}; expected --server ADDR:PORT, --client ADDR:PORT, \
                     --seconds S, --clients N, --impair SPEC or --help"
                ))
            }
        }
    }
    if a.server.is_some() && a.client.is_some() {
        return Err("--server and --client: give one (or neither, to play in one process)".into());
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("game: {e}\n(game --help lists the flags)");
            return ExitCode::from(2);
        }
    };
    match play(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("game: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The game as `args` asks: the server, the clients, the loop, the
/// summaries.
fn play(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::new(IoModel::Shared { threads: 2 })?;
    let run_for = Duration::from_secs_f64(args.seconds);
    let in_process = args.server.is_none() && args.client.is_none();

    let server = match (args.server, in_process) {
        (Some(addr), _) => {
            Some(start_server(&rt, addr).map_err(|e| format!("--server {addr}: {e}"))?)
        }
        (None, true) => Some(start_server(&rt, "127.0.0.1:0".parse()?)?),
        _ => None,
    };
    let target = args.client.or(server.as_ref().map(|s| s.local_addr()));
    let mut clients = Vec::new();
    let mut welcomed = Vec::new();
    if let Some(target) = target.filter(|_| args.client.is_some() || in_process) {
        for name in 1..=args.clients {
            let mut cc = ClientConfig::new(channels(), keel_rudp::ClientSecurity::Insecure);
            if in_process {
                // Each player from its own loopback address, as players on
                // the internet would be: the server admits 16 connections
                // per address (`Admission`).
                let i = name - 1;
                cc.local = Some(format!("127.0.{}.{}:0", i / 250, i % 250 + 2).parse()?);
                let seed = |k: u64| Impairment {
                    seed: args.impair.seed.wrapping_add(k),
                    ..args.impair.clone()
                };
                cc.udp.send_impairment = Some(seed(2 * i as u64 + 1));
                cc.udp.recv_impairment = Some(seed(2 * i as u64 + 2));
            }
            let player = Player {
                name,
                joined: None,
                started: Instant::now(),
                snapshots: 0,
                last_tick: 0,
                stale: 0,
                last_report: Instant::now(),
                conn: None,
                welcomed: Arc::new(AtomicBool::new(false)),
            };
            welcomed.push(player.welcomed.clone());
            clients.push(Client::connect(rt.next_reactor(), target, cc, player)?);
        }
    }

    // The game loop: 60 Hz ticks on the server's lane, inputs from each
    // client through its Sender, a chat line now and then.
    let start = Instant::now();
    let senders: Vec<_> = clients.iter().map(|c| c.sender()).collect();
    let mut frame = 0u32;
    while start.elapsed() < run_for {
        frame += 1;
        if let Some(s) = &server {
            let _ = s.post(0, |game: &mut Game, ctx| game.tick(ctx));
        }
        for (i, s) in senders.iter().enumerate() {
            let mut input = frame.to_be_bytes().to_vec();
            input.push(if (frame / 30 + i as u32).is_multiple_of(2) {
                1
            } else {
                0xff
            });
            let _ = s.send(INPUT, &input);
            // Chat once the server knows the player (it welcomed it).
            if frame % 90 == (10 * i as u32 + 1) % 90 && welcomed[i].load(Ordering::Relaxed) {
                let _ = s.send(CHAT, format!("hello at frame {frame}").as_bytes());
            }
        }
        let next = start + TICK * frame;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }

    // Summaries, read on each lane.
    for c in &clients {
        let (tx, rx) = mpsc::channel();
        let _ = c.post(move |p: &mut Player, ctx| {
            let s = p.conn.and_then(|h| ctx.stats(h));
            let _ = tx.send((
                p.name,
                p.snapshots,
                p.stale,
                p.joined.map(|j| j - p.started),
                s,
            ));
        });
        if let Ok((name, snaps, stale, join, Some(s))) = rx.recv_timeout(Duration::from_secs(2)) {
            let join = join.map_or_else(
                || "never got the map".to_string(),
                |j| format!("got the map in {:.1} ms", j.as_secs_f64() * 1e3),
            );
            println!(
                "client {name}: done: {join}, {snaps} snapshots ({stale} out of order), \
                 rtt {:.1} ms, loss {:.1} %, {} packets sent, {} resent chunks, {} redundant copies, {} stale dropped",
                s.smoothed_rtt.as_secs_f64() * 1e3,
                s.loss_rate * 100.0,
                s.packets_sent,
                s.retransmissions,
                s.redundant_copies,
                s.stale_messages
            );
        }
        let _ = c.close(0, "game over");
    }
    if let Some(s) = &server {
        // Let the closes arrive: wait for the players to leave, bounded.
        let deadline = Instant::now() + Duration::from_secs(1);
        while s.stats().connections_removed < clients.len() as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let k = s.stats();
        println!(
            "server: {} connections made, {} ended; {} handshakes, {} refused; {} malformed \
             datagrams, {} for no connection; {} messages left unacknowledged, {} closes \
             unacknowledged",
            k.connections_created,
            k.connections_removed,
            k.hellos,
            k.refused,
            k.malformed,
            k.unknown_connection,
            k.undelivered_messages,
            k.closes_unacknowledged
        );
        s.stop();
    }
    // Each stop waits for its CLOSE to be acknowledged: start them all,
    // then wait.
    let stops: Vec<_> = clients.iter().map(|c| c.begin_stop()).collect();
    for s in stops {
        s.wait();
    }
    rt.stop()
        .map_err(|e| format!("stopping the runtime: {e}"))?;
    Ok(())
}

fn start_server(rt: &Runtime, addr: SocketAddr) -> std::io::Result<Server<Game>> {
    let server = Server::bind(
        rt.handles(),
        addr,
        ServerConfig::new(channels(), keel_rudp::ServerSecurity::Insecure),
        |_| Game {
            players: Vec::new(),
            tick: 0,
            conns: Vec::new(),
        },
    )?;
    println!("server: listening on {}", server.local_addr());
    Ok(server)
}
