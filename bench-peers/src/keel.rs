//! keel-rudp: its [`Server`] and [`Client`]s on keel-udp, each client its
//! own socket. Insecure mode (no tokens, no encryption: as the other
//! peers without TLS; quinn's and GNS's encryption is theirs, always on).
//!
//! Both ends configure two channels, 0 reliable-ordered and 1 unreliable
//! (keel-rudp's handshake checks that both ends agree); the client sends on
//! the one of `--channel`, the server echoes on the channel a message came
//! on. The server's admission limits (16 connections and 4 handshakes a
//! second per source address) are off: every client is on 127.0.0.1.
//!
//! Pump: keel-rudp runs on keel-reactor threads of its own (server: one
//! runtime of one thread; clients: one reactor per CPU, at most one per
//! client); the handlers hand messages to the harness's thread through a
//! channel, and sends go to the lanes as [`Sender`] posts.
//!
//! Tuned: the clients' `max_ack_delay` at 1000/rate + 1 ms (keel-rudp's
//! guide, "Acknowledgements that ride on your tick"), so their acks ride
//! on the next message; defaults otherwise (server `max_ack_delay` 25 ms,
//! client 5 ms).

use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender as Tx};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Admission, ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config,
    ConnectionHandle, Ctx, DisconnectReason, Handler, Sender, Server, ServerConfig, ServerSecurity,
    Stats,
};

use crate::{Channel, ClientArgs, Clients, Description, EchoServer, ServerArgs, Tally};

fn connection() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::Unreliable),
    ])
}

fn channel_index(c: Channel) -> u8 {
    match c {
        Channel::ReliableOrdered => 0,
        Channel::Unreliable => 1,
    }
}

struct Echo {
    tally: Arc<Tally>,
}

impl Handler for Echo {
    fn connected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle) {
        self.tally.connected();
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        if ctx.send(conn, channel, data).is_ok() {
            self.tally.echoed(data.len());
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: &DisconnectReason) {
        self.tally.disconnected();
    }
}

struct KeelServer {
    server: Option<Server<Echo>>,
    rt: Option<Runtime>,
}

impl EchoServer for KeelServer {
    fn local_addr(&self) -> SocketAddr {
        self.server
            .as_ref()
            .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |s| s.local_addr())
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        // keel-rudp runs on its own thread; the harness's only wait is
        // this one, for a signal.
        std::thread::sleep(timeout);
        match self.server.as_ref().map(|s| s.failed_lanes()) {
            Some(f) if !f.is_empty() => Err(format!("keel-rudp server: lanes failed: {f:?}")),
            _ => Ok(()),
        }
    }
}

impl Drop for KeelServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
        if let Some(rt) = self.rt.take() {
            let _ = rt.stop();
        }
    }
}

/// The keel-rudp echo server.
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let rt = Runtime::new(IoModel::Shared { threads: 1 })
        .map_err(|e| format!("keel-rudp: starting the runtime: {e}"))?;
    let mut sc = ServerConfig::new(connection(), ServerSecurity::Insecure);
    sc.admission = Admission::OFF;
    sc.max_connections = 16_384;
    let server = Server::bind(rt.handles(), args.bind, sc, move |_| Echo {
        tally: tally.clone(),
    })
    .map_err(|e| format!("keel-rudp: binding {}: {e}", args.bind))?;
    Ok((
        Box::new(KeelServer {
            server: Some(server),
            rt: Some(rt),
        }),
        Description {
            settings: "insecure; server max_ack_delay 25 ms (default); admission off; \
                       channels reliable-ordered, unreliable"
                .into(),
            pump: "keel-reactor, 1 thread (its own)".into(),
        },
    ))
}

enum Event {
    Connected,
    Message(usize, Vec<u8>),
    Gone(usize, String),
}

/// Set in the environment (to anything) to put the clients' keel-rudp
/// counters in the client's line (`library_stats`; a diagnostic: each
/// message then costs a stats snapshot).
pub const STATS_ENV: &str = "KEEL_PEER_STATS";

/// Each client's latest [`Stats`], when [`STATS_ENV`] is set.
type Snapshots = Arc<Mutex<Vec<Option<Stats>>>>;

struct Peer {
    id: usize,
    tx: Tx<Event>,
    stats: Option<Snapshots>,
}

impl Handler for Peer {
    fn connected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle) {
        let _ = self.tx.send(Event::Connected);
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, _: u8, data: &[u8]) {
        let _ = self.tx.send(Event::Message(self.id, data.to_vec()));
        // Only when asked for: a snapshot allocates.
        let Some(s) = &self.stats else { return };
        if let (Some(st), Ok(mut v)) = (ctx.stats(conn), s.lock()) {
            if let Some(slot) = v.get_mut(self.id) {
                *slot = Some(st);
            }
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, r: &DisconnectReason) {
        let _ = self.tx.send(Event::Gone(self.id, format!("{r:?}")));
    }
}

struct KeelClients {
    clients: Vec<Client<Peer>>,
    senders: Vec<Sender>,
    rx: Receiver<Event>,
    channel: u8,
    rt: Option<Runtime>,
    stats: Option<Snapshots>,
}

impl KeelClients {
    fn handle(&self, ev: Event, deliver: &mut dyn FnMut(usize, &[u8])) -> Result<(), String> {
        match ev {
            Event::Message(i, m) => deliver(i, &m),
            Event::Connected => {}
            Event::Gone(i, why) => {
                return Err(format!("keel-rudp: client {i} disconnected: {why}"))
            }
        }
        Ok(())
    }
}

impl Clients for KeelClients {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        // A refused post (a closed lane) is a lost message; a closed
        // connection shows up as Gone.
        let _ = self.senders[i].send(self.channel, msg);
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        let wait = until.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(ev) => self.handle(ev, deliver)?,
            Err(RecvTimeoutError::Timeout) => return Ok(()),
            Err(RecvTimeoutError::Disconnected) => return Err("keel-rudp: clients gone".into()),
        }
        while let Ok(ev) = self.rx.try_recv() {
            self.handle(ev, deliver)?;
        }
        Ok(())
    }

    fn close(&mut self) {
        let stops: Vec<_> = self.clients.iter().map(|c| c.begin_stop()).collect();
        for s in stops {
            s.wait();
        }
        self.clients.clear();
        if let Some(rt) = self.rt.take() {
            let _ = rt.stop();
        }
    }

    fn stats(&self) -> Option<serde_json::Value> {
        let v = self.stats.as_ref()?.lock().ok()?;
        let all: Vec<&Stats> = v.iter().flatten().collect();
        let sum = |f: fn(&Stats) -> u64| all.iter().map(|s| f(s)).sum::<u64>();
        let mean =
            |f: fn(&Stats) -> f64| all.iter().map(|s| f(s)).sum::<f64>() / all.len().max(1) as f64;
        Some(serde_json::json!({
            "what": "keel-rudp Stats of the clients' connections at their last message, summed (means for RTTs and windows)",
            "connections": all.len(),
            "packets_sent": sum(|s| s.packets_sent),
            "packets_acked": sum(|s| s.packets_acked),
            "packets_lost": sum(|s| s.packets_lost),
            "spurious_losses": sum(|s| s.spurious_losses),
            "random_losses": sum(|s| s.random_losses),
            "congestion_undos": sum(|s| s.congestion_undos),
            "retransmissions": sum(|s| s.retransmissions),
            "redundant_copies": sum(|s| s.redundant_copies),
            "recovered_by_redundancy": sum(|s| s.recovered_by_redundancy),
            "probes": sum(|s| s.probes),
            "bytes_sent": sum(|s| s.bytes_sent),
            "smoothed_rtt_ms": mean(|s| s.smoothed_rtt.as_secs_f64() * 1e3),
            "rttvar_ms": mean(|s| s.rttvar.as_secs_f64() * 1e3),
            "congestion_window_bytes": mean(|s| s.congestion_window as f64),
        }))
    }
}

/// keel-rudp clients, each its own socket, connected.
pub fn clients(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    let n = args.clients as usize;
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let reactors = cpus.min(n).max(1);
    let rt = Runtime::new(IoModel::Sharded { reactors })
        .map_err(|e| format!("keel-rudp: starting the clients' runtime: {e}"))?;
    let (tx, rx) = mpsc::channel();
    let mut conn = connection();
    let ack = (args.tuned).then(|| Duration::from_micros(1_000_000 / u64::from(args.rate) + 1_000));
    if let Some(a) = ack {
        conn.max_ack_delay = a.min(Duration::from_secs(1));
    }
    let stats: Option<Snapshots> =
        std::env::var_os(STATS_ENV).map(|_| Arc::new(Mutex::new(vec![None; n])));
    let mut clients = Vec::with_capacity(n);
    for id in 0..n {
        let cc = ClientConfig::new(conn.clone(), ClientSecurity::Insecure);
        let c = Client::connect(
            rt.next_reactor(),
            args.connect,
            cc,
            Peer {
                id,
                tx: tx.clone(),
                stats: stats.clone(),
            },
        )
        .map_err(|e| format!("keel-rudp: client {id}: {e}"))?;
        clients.push(c);
    }
    drop(tx);
    let senders = clients.iter().map(|c| c.sender()).collect();
    let mut me = KeelClients {
        clients,
        senders,
        rx,
        channel: channel_index(args.channel),
        rt: Some(rt),
        stats,
    };
    let mut up = 0;
    while up < n {
        let wait = deadline.saturating_duration_since(Instant::now());
        match me.rx.recv_timeout(wait) {
            Ok(Event::Connected) => up += 1,
            Ok(Event::Gone(i, why)) => {
                me.close();
                return Err(format!("keel-rudp: client {i} failed to connect: {why}"));
            }
            Ok(Event::Message(..)) => {}
            Err(_) => {
                me.close();
                return Err(format!(
                    "keel-rudp: {up} of {n} clients connected by the deadline"
                ));
            }
        }
    }
    let settings = match ack {
        Some(a) => format!(
            "insecure; client max_ack_delay {} ms (1000/rate + 1); channel {}",
            a.as_millis(),
            args.channel.name()
        ),
        None => format!(
            "insecure; client max_ack_delay 5 ms (default); channel {}",
            args.channel.name()
        ),
    };
    Ok((
        Box::new(me),
        Description {
            settings,
            pump: format!("keel-reactor, {reactors} reactor threads; events by channel"),
        },
    ))
}
