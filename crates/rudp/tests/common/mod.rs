//! What the integration tests share: the channels, a handler that reports
//! every event to the test thread (and may echo), a connected server and
//! client, waiting with a deadline, the connect-token tests' key and
//! clock, and the hostile tests' crafted packets.
#![allow(dead_code, unused_imports)]

use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use keel_reactor::{Handle, IoModel, Runtime};
use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config, ConnectionHandle,
    ConnectionId, Ctx, DisconnectReason, Handler, SendError, Sender, Server, ServerConfig,
    ServerSecurity,
};
use keel_rudp_proto::wire::{Frame, Header, Writer};

/// The connect-token key of the token tests.
pub const KEY: [u8; 32] = [0x5e; 32];
/// The unix time the server's clock starts at (sans-IO token tests).
pub const T0: u64 = 1_800_000_000;

/// One reliable ordered channel.
pub fn one_channel() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The server's address in the tokens of the token tests.
pub fn public_addr() -> SocketAddr {
    addr("203.0.113.7:4000")
}

/// Channel numbers of [`config`].
pub const ORDERED: u8 = 0;
pub const SEQUENCED: u8 = 1;
pub const UNRELIABLE: u8 = 2;
pub const UNORDERED: u8 = 3;
pub const BULK: u8 = 4;

/// Five channels, short timers (tests take seconds, not minutes).
pub fn config() -> Config {
    let mut bulk = ChannelConfig::new(ChannelKind::ReliableOrdered);
    bulk.bulk = true;
    let mut c = Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
        ChannelConfig::new(ChannelKind::Unreliable),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
        bulk,
    ]);
    c.initial_rtt = Duration::from_millis(100);
    c.idle_timeout = Duration::from_secs(5);
    c.handshake_timeout = Duration::from_secs(5);
    c
}

/// What a [`Recorder`] saw.
#[derive(Debug)]
pub enum Seen {
    Connected(ConnectionHandle, Option<Sender>),
    Message(ConnectionHandle, u8, Vec<u8>),
    Disconnected(ConnectionHandle, DisconnectReason, Instant),
    SendFailed(ConnectionHandle, SendError),
}

/// Reports every event to the test thread; echoes messages if `echo`.
pub struct Recorder {
    pub events: mpsc::Sender<Seen>,
    pub echo: bool,
}

pub fn recorder(echo: bool) -> (Recorder, Receiver<Seen>) {
    let (tx, rx) = mpsc::channel();
    (Recorder { events: tx, echo }, rx)
}

impl Handler for Recorder {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        let _ = self.events.send(Seen::Connected(conn, ctx.sender(conn)));
    }
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        if self.echo {
            let _ = ctx.send(conn, channel, data);
        }
        let _ = self
            .events
            .send(Seen::Message(conn, channel, data.to_vec()));
    }
    fn disconnected(&mut self, _: &mut Ctx<'_>, conn: ConnectionHandle, reason: &DisconnectReason) {
        let _ = self
            .events
            .send(Seen::Disconnected(conn, reason.clone(), Instant::now()));
    }
    fn send_failed(&mut self, _: &mut Ctx<'_>, conn: ConnectionHandle, error: SendError) {
        let _ = self.events.send(Seen::SendFailed(conn, error));
    }
}

/// The next event within `within`, or a panic naming `what` (keel-testkit's
/// bounded receive, shared with the other crates' tests).
pub use keel_testkit::recv_in as next;

/// Events until `done` says enough or `within` passes (then a panic
/// naming `what`).
pub fn collect_until(
    rx: &Receiver<Seen>,
    within: Duration,
    what: &str,
    mut done: impl FnMut(&Seen) -> bool,
) -> Vec<Seen> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(s) => {
                let stop = done(&s);
                got.push(s);
                if stop {
                    return got;
                }
            }
            Err(_) => panic!(
                "{what}: not done within {within:?}; {} events, last {:?}",
                got.len(),
                got.last()
            ),
        }
    }
}

/// Message `i` of `len` bytes (at least 4): its index then a pattern.
pub fn payload(i: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|k| (k as u32 ^ i) as u8).collect();
    v[..4].copy_from_slice(&i.to_be_bytes());
    v
}

/// The index of a [`payload`], checking its pattern.
pub fn index(data: &[u8]) -> u32 {
    let i = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
    assert_eq!(data, &payload(i, data.len())[..], "message {i} corrupted");
    i
}

/// A server on `rt` (insecure, one handler) and a client on `client_on`,
/// both of `cfg`, once each end's handler saw the connection; each end
/// records its handler's events (no echo).
pub fn connect(
    rt: &Runtime,
    client_on: &Handle,
    cfg: Config,
) -> (
    Server<Recorder>,
    Receiver<Seen>,
    Client<Recorder>,
    Receiver<Seen>,
) {
    let (srv, srv_rx) = recorder(false);
    let mut srv = Some(srv);
    let server = Server::bind(
        rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::new(cfg.clone(), ServerSecurity::Insecure),
        |_| srv.take().expect("one lane"),
    )
    .unwrap();
    let (cli, cli_rx) = recorder(false);
    let client = Client::connect(
        client_on,
        server.local_addr(),
        ClientConfig::new(cfg, ClientSecurity::Insecure),
        cli,
    )
    .unwrap();
    for (rx, who) in [(&cli_rx, "client"), (&srv_rx, "server")] {
        collect_until(rx, Duration::from_secs(10), who, |s| {
            matches!(s, Seen::Connected(..))
        });
    }
    (server, srv_rx, client, cli_rx)
}

/// [`connect`] on a runtime of `threads` threads, the client on its next
/// reactor, with idle timeouts of a minute: an end that learns of the
/// other's stop within seconds learned it from a CLOSE.
pub fn connected_pair(
    threads: usize,
) -> (
    Runtime,
    Server<Recorder>,
    Receiver<Seen>,
    Client<Recorder>,
    Receiver<Seen>,
) {
    let rt = Runtime::new(IoModel::Shared { threads }).unwrap();
    let mut cfg = config();
    cfg.idle_timeout = Duration::from_secs(60);
    let (server, srv_rx, client, cli_rx) = connect(&rt, rt.next_reactor(), cfg);
    (rt, server, srv_rx, client, cli_rx)
}

/// The events `rx` gets until its handler's `disconnected`, each given to
/// `seen` (that one too), and the reason.
pub fn until_disconnected(
    rx: &Receiver<Seen>,
    who: &str,
    mut seen: impl FnMut(&Seen),
) -> DisconnectReason {
    let got = collect_until(rx, Duration::from_secs(10), who, |s| {
        seen(s);
        matches!(s, Seen::Disconnected(..))
    });
    match got.last() {
        Some(Seen::Disconnected(_, r, _)) => r.clone(),
        other => panic!("{who}: {other:?}"),
    }
}

/// The connection ID of the hostile tests' crafted packets.
pub const CID: ConnectionId = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);
/// Payload bytes for crafted frames.
pub static BYTES: [u8; 1100] = [7; 1100];

/// A short packet (unsealed: for connections made with `established` or
/// by an insecure endpoint) from `cid` numbered `pn`: its header, then
/// what `body` writes in the rest of `size` bytes.
pub fn short_packet(
    cid: ConnectionId,
    pn: u64,
    size: usize,
    body: impl FnOnce(&mut Writer<'_>),
) -> Vec<u8> {
    let mut buf = vec![0u8; size];
    let mut w = Writer::new(&mut buf);
    Header::Short { cid, pn, pn_len: 4 }.encode(&mut w).unwrap();
    body(&mut w);
    let n = w.len();
    buf.truncate(n);
    buf
}

/// A short packet carrying `frames` (a panic if they pass 1,400 bytes).
pub fn packet(cid: ConnectionId, pn: u64, frames: &[Frame<'_>]) -> Vec<u8> {
    short_packet(cid, pn, 1400, |w| {
        for f in frames {
            f.encode(w).unwrap();
        }
    })
}

/// A packet of [`CID`] of frames made by `next` until 1,200 bytes are full.
pub fn fill<'a>(pn: u64, mut next: impl FnMut() -> Frame<'a>) -> Vec<u8> {
    short_packet(CID, pn, 1200, |w| while next().encode(w).is_ok() {})
}

/// A FRAGMENT of `len` bytes of [`BYTES`].
pub fn fragment(channel: u8, seq: u64, total: u32, offset: u32, len: usize) -> Frame<'static> {
    Frame::Fragment {
        channel,
        seq,
        total,
        offset,
        payload: &BYTES[..len],
    }
}

/// xorshift64: the same attack on every run.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
