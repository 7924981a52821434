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
//! Pump: the server runs on a keel-reactor runtime of one thread of its
//! own. The clients run as a game client on keel-rudp would
//! (docs/rudp-guide.md, "the game tick" and "Your own loop"): one
//! [`Reactor`] turned by the harness's thread, every client a lane of it,
//! each sending its messages from its own [`Handler::tick`] at its slots
//! of the harness's schedule ([`OpenLoop`]), each echo recorded in its
//! [`Handler::message`]: nothing crosses threads. (Until this change the
//! clients ran on a runtime of one reactor per CPU, the harness's thread
//! posting every send through a `Sender` and taking every echo from a
//! channel: 2-2.5x ikcp's CPU per message, docs/performance/rudp-peers.md,
//! "keel-peer clients on the reactor".)
//!
//! Tuned: the clients' `max_ack_delay` at 1000/rate + 1 ms (keel-rudp's
//! guide, "Acknowledgements that ride on your tick"), so their acks ride
//! on the next message; defaults otherwise (server `max_ack_delay` 25 ms,
//! client 5 ms).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Reactor, Runtime};
use keel_rudp::{
    Admission, ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config,
    ConnectionHandle, Ctx, DisconnectReason, Handler, Server, ServerConfig, ServerSecurity, Stats,
    DEFAULT_REDUNDANCY,
};

use crate::{Channel, ClientArgs, Clients, Description, EchoServer, OpenLoop, ServerArgs, Tally};

/// Both ends' channels; `redundancy` (`--redundancy`) sets the
/// reliable-ordered channel's level, keel-rudp's default otherwise.
fn connection(redundancy: Option<u8>) -> Config {
    let mut reliable = ChannelConfig::new(ChannelKind::ReliableOrdered);
    if let Some(level) = redundancy {
        reliable = reliable.with_redundancy(level);
    }
    Config::new(vec![reliable, ChannelConfig::new(ChannelKind::Unreliable)])
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

/// The level in a [`Description`]'s settings, so a record says which
/// point of keel-rudp's latency/overhead curve it is.
fn redundancy_setting(redundancy: Option<u8>) -> String {
    match redundancy {
        Some(level) => format!("reliable-ordered redundancy level {level}"),
        None => format!("reliable-ordered redundancy level {DEFAULT_REDUNDANCY} (default)"),
    }
}

/// The keel-rudp echo server.
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let rt = Runtime::new(IoModel::Shared { threads: 1 })
        .map_err(|e| format!("keel-rudp: starting the runtime: {e}"))?;
    let mut sc = ServerConfig::new(connection(args.redundancy), ServerSecurity::Insecure);
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
            settings: format!(
                "insecure; server max_ack_delay 25 ms (default); admission off; \
                 channels reliable-ordered, unreliable; {}",
                redundancy_setting(args.redundancy)
            ),
            pump: "keel-reactor, 1 thread (its own)".into(),
        },
    ))
}

/// Set in the environment (to anything) to put the clients' keel-rudp
/// counters in the client's line (`library_stats`; a diagnostic: each
/// message then costs a stats snapshot).
pub const STATS_ENV: &str = "KEEL_PEER_STATS";

/// What the clients' handlers share with the harness's thread. Everything
/// runs on that one thread (the harness turns the reactor, the handlers
/// run inside `turn`), so the lock is never contended; it is there
/// because a [`Handler`] is `Send`.
#[derive(Default)]
struct Shared {
    /// The run's schedule and records, from [`Clients::run_ticks`] on.
    load: Option<OpenLoop>,
    /// Clients whose handshake finished.
    connected: usize,
    /// The first client connection that ended, and why.
    gone: Option<(usize, String)>,
    /// Each client's latest [`Stats`], when [`STATS_ENV`] is set.
    stats: Option<Vec<Option<Stats>>>,
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // A panic in a handler is contained by keel-rudp (the lane closes,
    // `disconnected` runs); the data is still whole.
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// One client, as a game client runs on keel-rudp: its sends from its
/// lane's [`Handler::tick`], at its slots of the schedule, its echoes
/// handled in [`Handler::message`].
struct Peer {
    id: usize,
    channel: u8,
    conn: Option<ConnectionHandle>,
    /// This client's next message (`id`, `id + N`, ...).
    next: u64,
    shared: Arc<Mutex<Shared>>,
}

impl Handler for Peer {
    fn connected(&mut self, _: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        lock(&self.shared).connected += 1;
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, _: u8, data: &[u8]) {
        let mut sh = lock(&self.shared);
        if let Some(load) = sh.load.as_mut() {
            load.received(self.id, data);
        }
        // Only when asked for: a snapshot allocates.
        if let Some(v) = sh.stats.as_mut() {
            if let (Some(st), Some(slot)) = (ctx.stats(conn), v.get_mut(self.id)) {
                *slot = Some(st);
            }
        }
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let Some(conn) = self.conn else { return };
        let mut sh = lock(&self.shared);
        let Some(load) = sh.load.as_mut() else { return };
        let channel = self.channel;
        // A refused send (backpressure) is a lost message; a closed
        // connection shows up in `disconnected`.
        load.send(self.next, |_, msg| {
            let _ = ctx.send(conn, channel, msg);
        });
        self.next += load.clients() as u64;
        // Late (the reactor was busy): at once, as the harness's loop
        // sends a late message; nothing is skipped.
        match load.due(self.next) {
            Some(at) => ctx.tick_at(at),
            None => ctx.cancel_tick(),
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, r: &DisconnectReason) {
        self.conn = None;
        let mut sh = lock(&self.shared);
        if sh.gone.is_none() {
            sh.gone = Some((self.id, format!("{r:?}")));
        }
    }
}

struct KeelClients {
    /// Turned by the harness's thread: the clients' one thread.
    reactor: Reactor,
    clients: Vec<Client<Peer>>,
    shared: Arc<Mutex<Shared>>,
}

impl KeelClients {
    fn turn(&mut self, until: Instant) -> Result<(), String> {
        let wait = until.saturating_duration_since(Instant::now());
        self.reactor
            .turn(Some(wait))
            .map(|_| ())
            .map_err(|e| format!("keel-rudp: the clients' reactor: {e}"))
    }

    fn gone(&self) -> Result<(), String> {
        match &lock(&self.shared).gone {
            Some((i, why)) => Err(format!("keel-rudp: client {i} disconnected: {why}")),
            None => Ok(()),
        }
    }
}

impl Clients for KeelClients {
    fn send(&mut self, _: usize, _: &[u8]) -> Result<(), String> {
        Err("keel-rudp: the clients send on their ticks (run_ticks)".into())
    }

    fn pump(&mut self, until: Instant, _: &mut dyn FnMut(usize, &[u8])) -> Result<(), String> {
        self.turn(until)
    }

    fn ticks_itself(&self) -> bool {
        true
    }

    fn run_ticks(&mut self, load: OpenLoop) -> Result<OpenLoop, String> {
        let firsts: Vec<Option<Instant>> = (0..self.clients.len() as u64)
            .map(|j| load.due(j))
            .collect();
        let drain_end = load.drain_end();
        lock(&self.shared).load = Some(load);
        // Each client's first tick, asked for on its lane (a tick is asked
        // for from the lane: this one post per client starts it; the
        // ticks then ask for the next themselves).
        for (c, first) in self.clients.iter().zip(firsts) {
            let Some(at) = first else { continue };
            c.post(move |peer, ctx| {
                peer.next = peer.id as u64;
                ctx.tick_at(at);
            })
            .map_err(|e| format!("keel-rudp: starting a client's tick: {e:?}"))?;
        }
        loop {
            self.gone()?;
            if lock(&self.shared)
                .load
                .as_mut()
                .is_some_and(|l| l.finished(Instant::now()))
            {
                break;
            }
            // Returns after the lane runs of one round (a tick, an echo, a
            // timer), so the check above sees each change.
            self.turn(drain_end)?;
        }
        lock(&self.shared)
            .load
            .take()
            .ok_or_else(|| "keel-rudp: the load went missing".into())
    }

    fn close(&mut self) {
        let mut stops: Vec<_> = self.clients.iter().map(|c| c.begin_stop()).collect();
        let mut done = vec![false; stops.len()];
        // Within the connections' close_timeout (2 s) and a little.
        let deadline = Instant::now() + Duration::from_millis(2_500);
        while done.contains(&false) && Instant::now() < deadline {
            if self
                .turn(deadline.min(Instant::now() + Duration::from_millis(10)))
                .is_err()
            {
                break;
            }
            for (s, d) in stops.iter_mut().zip(&mut done) {
                *d |= s.poll().is_some();
            }
        }
        self.clients.clear();
    }

    fn stats(&self) -> Option<serde_json::Value> {
        let sh = lock(&self.shared);
        let v = sh.stats.as_ref()?;
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

/// keel-rudp clients, each its own socket, connected, on one reactor that
/// the harness's thread turns.
pub fn clients(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    let n = args.clients as usize;
    let reactor =
        Reactor::new().map_err(|e| format!("keel-rudp: creating the clients' reactor: {e}"))?;
    let handle = reactor.handle();
    let mut conn = connection(args.redundancy);
    let ack = (args.tuned).then(|| Duration::from_micros(1_000_000 / u64::from(args.rate) + 1_000));
    if let Some(a) = ack {
        conn.max_ack_delay = a.min(Duration::from_secs(1));
    }
    let shared = Arc::new(Mutex::new(Shared {
        stats: std::env::var_os(STATS_ENV).map(|_| vec![None; n]),
        ..Shared::default()
    }));
    let channel = channel_index(args.channel);
    let mut clients = Vec::with_capacity(n);
    for id in 0..n {
        let cc = ClientConfig::new(conn.clone(), ClientSecurity::Insecure);
        let c = Client::connect(
            &handle,
            args.connect,
            cc,
            Peer {
                id,
                channel,
                conn: None,
                next: id as u64,
                shared: shared.clone(),
            },
        )
        .map_err(|e| format!("keel-rudp: client {id}: {e}"))?;
        clients.push(c);
    }
    let mut me = KeelClients {
        reactor,
        clients,
        shared,
    };
    loop {
        let up = lock(&me.shared).connected;
        if up >= n {
            break;
        }
        if let Err(e) = me.gone() {
            me.close();
            return Err(format!("keel-rudp: a client failed to connect: {e}"));
        }
        if Instant::now() >= deadline {
            me.close();
            return Err(format!(
                "keel-rudp: {up} of {n} clients connected by the deadline"
            ));
        }
        if let Err(e) = me.turn(deadline) {
            me.close();
            return Err(e);
        }
    }
    let ack_setting = match ack {
        Some(a) => format!("client max_ack_delay {} ms (1000/rate + 1)", a.as_millis()),
        None => "client max_ack_delay 5 ms (default)".to_owned(),
    };
    let settings = format!(
        "insecure; {ack_setting}; channel {}; {}",
        args.channel.name(),
        redundancy_setting(args.redundancy)
    );
    Ok((
        Box::new(me),
        Description {
            settings,
            pump: "keel-reactor turned by the harness's thread (one thread); each client \
                   sends from its lane's Handler::tick at its slots; echoes in the handler"
                .into(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redundancy_flag_sets_the_reliable_channel_and_matches_keel_rudp() {
        assert_eq!(crate::flags::MAX_REDUNDANCY_FLAG, keel_rudp::MAX_REDUNDANCY);
        assert_eq!(
            connection(None).channels[0],
            ChannelConfig::new(ChannelKind::ReliableOrdered)
        );
        assert_eq!(
            connection(Some(0)).channels[0],
            ChannelConfig::new(ChannelKind::ReliableOrdered).with_redundancy(0)
        );
        assert_ne!(
            connection(Some(0)).channels[0],
            connection(None).channels[0]
        );
    }

    #[test]
    fn ticked_clients_send_the_whole_schedule_and_get_every_echo() {
        let tally = Arc::new(Tally::default());
        let sargs = ServerArgs {
            library: "keel".into(),
            bind: "127.0.0.1:0".parse().unwrap(),
            tuned: false,
            redundancy: None,
        };
        let (srv, _) = server(&sargs, tally).expect("server");
        let args = ClientArgs {
            library: "keel".into(),
            connect: srv.local_addr(),
            clients: 3,
            rate: 50,
            payload: 64,
            seconds: Duration::from_millis(300),
            warmup: Duration::from_millis(100),
            drain: Duration::from_secs(2),
            channel: Channel::ReliableOrdered,
            tuned: true,
            redundancy: None,
        };
        let (mut c, d) = clients(&args, Instant::now() + Duration::from_secs(5)).expect("clients");
        assert!(c.ticks_itself() && d.pump.contains("Handler::tick"));
        let run = crate::load::drive(c.as_mut(), &args, Instant::now()).expect("run");
        c.close();
        let n = &run.counts;
        // 3 clients x 50 Hz: 15 warmup messages, 45 in the window, every
        // one sent from a tick and echoed once, unchanged.
        assert_eq!((n.warmup_sent, n.sent), (15, 45));
        assert_eq!((n.delivered, n.duplicates, n.corrupt), (45, 0, 0));
    }
}
