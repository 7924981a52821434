//! The figures of "Stop, close and peers that never acknowledge" in
//! docs/reliability.md: how many players learn a stop's reason over a
//! lossy link, and how many of 2,000 queued messages a stop delivers.
//!
//! ```text
//! cargo run --release -p keel-rudp --example stop_figures -- [players] [loss] [runs]
//! ```
//!
//! Defaults: 200 players, 5 % loss each way at each player's socket
//! (keel-udp's link conditioner, seeded per run), 5 runs. Loopback only.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config, ConnectionHandle,
    Ctx, DisconnectReason, Handler, Server, ServerConfig, ServerSecurity,
};

/// What a handler saw.
enum Seen {
    Connected,
    Message,
    Ended(DisconnectReason),
}

struct Report(mpsc::Sender<Seen>);

impl Handler for Report {
    fn connected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle) {
        let _ = self.0.send(Seen::Connected);
    }
    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {
        let _ = self.0.send(Seen::Message);
    }
    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, r: &DisconnectReason) {
        let _ = self.0.send(Seen::Ended(r.clone()));
    }
}

fn config() -> Config {
    let mut c = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
    // An end within seconds comes from a CLOSE, not from the idle timeout.
    c.idle_timeout = Duration::from_secs(60);
    c.handshake_timeout = Duration::from_secs(30);
    c
}

/// Each player from its own loopback address, as on the internet: the
/// server admits 16 connections per address, and steers handshakes to a
/// lane by address, so one address would put every player on one lane.
fn player_addr(k: usize) -> std::net::SocketAddr {
    format!("127.0.{}.{}:0", k / 250, k % 250 + 1)
        .parse()
        .expect("a loopback address")
}

fn bind_server(rt: &Runtime, tx: &mpsc::Sender<Seen>) -> Server<Report> {
    let mut sc = ServerConfig::new(config(), ServerSecurity::Insecure);
    sc.lanes = 2;
    Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        Report(tx.clone())
    })
    .unwrap()
}

/// Waits for `n` events that `pick` accepts, at most `within`; returns
/// how many came.
fn count(
    rx: &mpsc::Receiver<Seen>,
    n: usize,
    within: Duration,
    pick: impl Fn(&Seen) -> bool,
) -> usize {
    let deadline = Instant::now() + within;
    let mut got = 0;
    while got < n {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(s) if pick(&s) => got += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    got
}

fn stop_with_over_loss(players: usize, loss: f64, run: u64) {
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let (stx, _srx) = mpsc::channel();
    let server = bind_server(&rt, &stx);
    let (tx, rx) = mpsc::channel();
    let mut clients = Vec::new();
    for k in 0..players as u64 {
        let mut cc = ClientConfig::new(config(), ClientSecurity::Insecure);
        let imp = |s: u64| {
            Some(
                format!("loss={loss},seed={}", run * 100_000 + s)
                    .parse()
                    .unwrap(),
            )
        };
        cc.udp.send_impairment = imp(2 * k);
        cc.udp.recv_impairment = imp(2 * k + 1);
        cc.local = Some(player_addr(k as usize));
        clients.push(
            Client::connect(
                rt.next_reactor(),
                server.local_addr(),
                cc,
                Report(tx.clone()),
            )
            .unwrap(),
        );
    }
    let connected = count(&rx, players, Duration::from_secs(30), |s| {
        matches!(s, Seen::Connected)
    });
    let started = Instant::now();
    let report = server.stop_with(4000, "map change");
    let took = started.elapsed();
    let told = count(&rx, connected, Duration::from_secs(5), |s| {
        matches!(s, Seen::Ended(DisconnectReason::Remote { code: 4000, .. }))
    });
    println!(
        "stop_with, {loss} loss each way, run {run}: {told} of {connected} players saw the reason; \
         {} CLOSEs unacknowledged, {} messages undelivered; stop took {took:?}",
        report.undelivered.len(),
        report.messages_undelivered()
    );
    let stops: Vec<_> = clients.iter().map(|c| c.begin_stop()).collect();
    for s in stops {
        s.wait();
    }
    rt.stop().unwrap();
}

/// A runtime of two threads, a server on it (its handlers' events on the
/// first receiver) and one client (its events on the second), once the
/// client saw the connection.
fn one_client() -> (
    Runtime,
    Server<Report>,
    mpsc::Receiver<Seen>,
    Client<Report>,
    mpsc::Receiver<Seen>,
) {
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let (stx, srx) = mpsc::channel();
    let server = bind_server(&rt, &stx);
    let (tx, rx) = mpsc::channel();
    let client = Client::connect(
        rt.next_reactor(),
        server.local_addr(),
        ClientConfig::new(config(), ClientSecurity::Insecure),
        Report(tx),
    )
    .unwrap();
    count(&rx, 1, Duration::from_secs(5), |s| {
        matches!(s, Seen::Connected)
    });
    (rt, server, srx, client, rx)
}

fn stops_with_queued(n: u32) {
    let (rt, server, srx, client, rx) = one_client();
    count(&srx, 1, Duration::from_secs(5), |s| {
        matches!(s, Seen::Connected)
    });
    // Server::stop with n queued on the lane.
    let (queued, is_queued) = mpsc::channel();
    let lane = (0..server.lanes())
        .find(|&l| {
            server
                .lane_stats(l)
                .is_some_and(|s| s.connections_created == 1)
        })
        .unwrap();
    let _ = server.post(lane, move |_, ctx| {
        let mut conns = Vec::new();
        ctx.connections(&mut conns);
        for i in 0..n {
            let _ = ctx.send(conns[0], 0, &i.to_be_bytes().repeat(16));
        }
        let _ = queued.send(());
    });
    is_queued.recv_timeout(Duration::from_secs(5)).unwrap();
    let report = server.stop();
    let got = count(&rx, n as usize, Duration::from_secs(5), |s| {
        matches!(s, Seen::Message)
    });
    println!(
        "Server::stop with {n} queued: the client received {got}; report: {} undelivered",
        report.messages_undelivered()
    );
    client.stop();
    rt.stop().unwrap();

    // Client::stop right after n sends.
    let (rt, server, srx, client, _rx) = one_client();
    let sender = client.sender();
    for i in 0..n {
        sender.send(0, &i.to_be_bytes().repeat(16)).unwrap();
    }
    let report = client.stop();
    let got = count(&srx, n as usize, Duration::from_secs(5), |s| {
        matches!(s, Seen::Message)
    });
    println!(
        "Client::stop right after {n} sends: the server received {got}; report: {} undelivered",
        report.messages_undelivered()
    );
    server.stop();
    rt.stop().unwrap();
}

/// Panics on "boom"; echoes the rest.
struct Fragile;

impl Handler for Fragile {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, ch: u8, data: &[u8]) {
        if data == b"boom" {
            panic!("boom");
        }
        let _ = ctx.send(conn, ch, data);
    }
}

/// `players` on a 2-lane server; one player of lane 0 makes its handler
/// panic: how many of lane 0's players learn it and how soon, and whether
/// lane 1's still get echoes.
fn panic_on_one_lane(players: usize) {
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let mut sc = ServerConfig::new(config(), ServerSecurity::Insecure);
    sc.lanes = 2;
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        Fragile
    })
    .unwrap();
    let mut clients = Vec::new();
    for k in 0..players {
        let (tx, rx) = mpsc::channel();
        let mut cc = ClientConfig::new(config(), ClientSecurity::Insecure);
        cc.local = Some(player_addr(k));
        let c = Client::connect(rt.next_reactor(), server.local_addr(), cc, Report(tx)).unwrap();
        clients.push((c, rx));
    }
    for (_, rx) in &clients {
        count(rx, 1, Duration::from_secs(10), |s| {
            matches!(s, Seen::Connected)
        });
    }
    // Which lane each is on: a lane's connection count tells, one at a time.
    let per_lane: Vec<u64> = (0..2)
        .map(|l| server.lane_stats(l).unwrap().connections_created)
        .collect();
    // An echo from every player first; then player 0 says boom.
    for (c, _) in &clients {
        c.sender().send(0, b"hi").unwrap();
    }
    for (_, rx) in &clients {
        count(rx, 1, Duration::from_secs(10), |s| {
            matches!(s, Seen::Message)
        });
    }
    let started = Instant::now();
    clients[0].0.sender().send(0, b"boom").unwrap();
    let failed = loop {
        let f = server.failed_lanes();
        if !f.is_empty() || started.elapsed() > Duration::from_secs(5) {
            break f;
        }
        std::thread::yield_now();
    };
    let lane = failed.first().map_or(usize::MAX, |f| f.lane);
    let mut told = 0;
    let mut last = Duration::ZERO;
    let mut echoed = 0;
    for (c, rx) in &clients {
        c.sender().send(0, b"still there?").unwrap();
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Seen::Ended(DisconnectReason::Remote { code: 16, .. })) => {
                told += 1;
                last = last.max(started.elapsed());
            }
            Ok(Seen::Message) => echoed += 1,
            _ => {}
        }
    }
    println!(
        "handler panic on lane {lane} of 2 ({per_lane:?} players per lane): {told} players told \
         (code 16), the last {last:?} after the panic's message was sent; {echoed} players \
         still echoed; runtime stop: {:?}",
        {
            let stops: Vec<_> = clients.iter().map(|(c, _)| c.begin_stop()).collect();
            for s in stops {
                s.wait();
            }
            server.stop();
            rt.stop().map(|_| "ok")
        }
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let players = args.next().map_or(200, |a| a.parse().expect("players"));
    let loss = args.next().map_or(0.05, |a| a.parse().expect("loss"));
    let runs = args.next().map_or(5, |a| a.parse().expect("runs"));
    for run in 0..runs {
        stop_with_over_loss(players, loss, run);
    }
    for _ in 0..runs.min(3) {
        stops_with_queued(2_000);
    }
    for _ in 0..runs.min(3) {
        panic_on_one_lane(players.min(100));
    }
}
