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

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, Config, ConnectionHandle, Ctx,
    DisconnectReason, Handler, Server, ServerConfig,
};

const MAP: u8 = 0;
const SNAPSHOT: u8 = 1;
const INPUT: u8 = 2;
const CHAT: u8 = 3;
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
    ])
}

/// The server's game state on one lane.
struct Game {
    players: Vec<(ConnectionHandle, i32)>,
    tick: u32,
    conns: Vec<ConnectionHandle>,
}

impl Handler for Game {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        println!(
            "server: player {} joined from {:?}",
            conn.index(),
            ctx.peer_addr(conn)
        );
        let map: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let _ = ctx.send(conn, MAP, &map);
        let _ = ctx.send(
            conn,
            CHAT,
            format!("welcome, player {}", conn.index()).as_bytes(),
        );
        self.players.push((conn, 0));
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        match channel {
            INPUT if data.len() == 5 => {
                if let Some(p) = self.players.iter_mut().find(|p| p.0 == conn) {
                    p.1 += i32::from(data[4] as i8); // the input moves the player
                }
            }
            CHAT => {
                let line = format!("player {}: {}", conn.index(), String::from_utf8_lossy(data));
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
        println!("server: player {} left: {reason:?}", conn.index());
        self.players.retain(|p| p.0 != conn);
    }
}

impl Game {
    /// One 60 Hz tick: a snapshot (tick number and every position) to
    /// every player.
    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        self.tick += 1;
        let mut snap = Vec::with_capacity(4 + 8 * self.players.len());
        snap.extend_from_slice(&self.tick.to_be_bytes());
        for (c, x) in &self.players {
            snap.extend_from_slice(&(c.index() as u32).to_be_bytes());
            snap.extend_from_slice(&x.to_be_bytes());
        }
        for (c, _) in &self.players {
            let _ = ctx.send(*c, SNAPSHOT, &snap);
        }
    }
}

/// A client's view.
struct Player {
    name: usize,
    joined: Option<Instant>,
    started: Instant,
    snapshots: u32,
    last_tick: u32,
    stale: u32,
    last_report: Instant,
    /// Its connection, from `connected` on.
    conn: Option<ConnectionHandle>,
}

impl Handler for Player {
    fn connected(&mut self, _: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        println!(
            "client {}: connected after {:?}",
            self.name,
            self.started.elapsed()
        );
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
                    "client {}: map of {} bytes arrived {:?} after start (intact: {ok})",
                    self.name,
                    data.len(),
                    self.started.elapsed()
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
            CHAT => println!(
                "client {}: chat \"{}\"",
                self.name,
                String::from_utf8_lossy(data)
            ),
            _ => {}
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, reason: &DisconnectReason) {
        println!("client {}: disconnected: {reason:?}", self.name);
    }
}

struct Args {
    server: Option<SocketAddr>,
    client: Option<SocketAddr>,
    seconds: f64,
    clients: usize,
    impair: String,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        server: None,
        client: None,
        seconds: 3.0,
        clients: 2,
        impair: "loss=0.05,delay=15ms,jitter=3ms".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag}: expected a value"));
        match flag.as_str() {
            "--server" => a.server = Some(value()?.parse().map_err(|e| format!("--server: {e}"))?),
            "--client" => a.client = Some(value()?.parse().map_err(|e| format!("--client: {e}"))?),
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--clients" => a.clients = value()?.parse().map_err(|e| format!("--clients: {e}"))?,
            "--impair" => a.impair = value()?,
            other => return Err(format!("unknown flag {other}; expected --server ADDR, --client ADDR, --seconds S, --clients N, --impair SPEC")),
        }
    }
    Ok(a)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let rt = Runtime::new(IoModel::Shared { threads: 2 })?;
    let run_for = Duration::from_secs_f64(args.seconds);
    let in_process = args.server.is_none() && args.client.is_none();

    let server = match (args.server, in_process) {
        (Some(addr), _) => Some(start_server(&rt, addr)?),
        (None, true) => Some(start_server(&rt, "127.0.0.1:0".parse()?)?),
        _ => None,
    };
    let target = args.client.or(server.as_ref().map(|s| s.local_addr()));
    let mut clients = Vec::new();
    if let Some(target) = target.filter(|_| args.client.is_some() || in_process) {
        for name in 0..args.clients.max(1) {
            let mut cc = ClientConfig::new(channels(), keel_rudp::ClientSecurity::Insecure);
            if in_process {
                // Each player from its own loopback address, as players on
                // the internet would be: the server admits 16 connections
                // per address (`Admission`).
                cc.local = Some(format!("127.0.{}.{}:0", name / 250, name % 250 + 1).parse()?);
                let spec = &args.impair;
                cc.udp.send_impairment = Some(format!("{spec},seed={}", 2 * name + 1).parse()?);
                cc.udp.recv_impairment = Some(format!("{spec},seed={}", 2 * name + 2).parse()?);
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
            };
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
            s.post(0, |game: &mut Game, ctx| game.tick(ctx));
        }
        for (i, s) in senders.iter().enumerate() {
            let mut input = frame.to_be_bytes().to_vec();
            input.push(if (frame / 30 + i as u32).is_multiple_of(2) {
                1
            } else {
                0xff
            });
            let _ = s.send(INPUT, &input);
            if frame % 90 == 10 * i as u32 + 1 {
                let _ = s.send(CHAT, format!("hello at frame {frame}").as_bytes());
            }
        }
        let next = start + TICK * frame;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }

    // Summaries, read on each lane.
    for c in &clients {
        let (tx, rx) = mpsc::channel();
        c.post(move |p: &mut Player, ctx| {
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
            println!(
                "client {name}: done: joined in {join:?}, {snaps} snapshots ({stale} out of order), \
                 rtt {:.1} ms, loss {:.1} %, {} packets sent, {} resent chunks, {} redundant copies, {} stale dropped",
                s.smoothed_rtt.as_secs_f64() * 1e3,
                s.loss_rate * 100.0,
                s.packets_sent,
                s.retransmissions,
                s.redundant_copies,
                s.stale_messages
            );
        }
        c.close(0, "game over");
    }
    if let Some(s) = &server {
        // Let the closes arrive: wait for the players to leave, bounded.
        let deadline = Instant::now() + Duration::from_secs(1);
        while s.stats().connections_removed < clients.len() as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        println!("server: {:?}", s.stats());
        s.stop();
    }
    // Each stop waits for its CLOSE to be acknowledged: start them all,
    // then wait.
    let stops: Vec<_> = clients.iter().map(|c| c.begin_stop()).collect();
    for s in stops {
        s.wait();
    }
    rt.stop()?;
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
