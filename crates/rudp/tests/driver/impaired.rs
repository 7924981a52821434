//! keel-rudp over real sockets impaired by keel's link conditioner
//! (seeded): loss, delay, jitter, duplicates and reordering in both
//! directions; clients that change address; spoofed handshakes; silent
//! peers.

use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{Client, ClientConfig, Config, DisconnectReason, Server, ServerConfig};
use keel_rudp_proto::{Connection, Event};
use keel_udp::Impairment;

fn impairment(spec: &str) -> Option<Impairment> {
    Some(spec.parse().expect("impairment"))
}

/// A server and a client whose sockets both impair what they send and
/// receive with `spec` (the seeds differ per direction).
struct Pair {
    rt: Runtime,
    server: Server<Recorder>,
    srv_rx: std::sync::mpsc::Receiver<Seen>,
    client: Client<Recorder>,
    cli_rx: std::sync::mpsc::Receiver<Seen>,
}

fn pair(spec: &str, cfg: Config) -> Pair {
    pair_one_way(spec, spec, cfg)
}

/// [`pair`] with `data` impairing the client's sends and `back` the
/// other three paths.
fn pair_one_way(data: &str, back: &str, cfg: Config) -> Pair {
    let spec = back;
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let mut sc = ServerConfig::new(cfg.clone(), keel_rudp::ServerSecurity::Insecure);
    sc.udp.send_impairment = impairment(&format!("{spec},seed=11"));
    sc.udp.recv_impairment = impairment(&format!("{spec},seed=12"));
    let (srv, srv_rx) = recorder(false);
    let mut srv = Some(srv);
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        srv.take().expect("one lane")
    })
    .unwrap();
    let mut cc = ClientConfig::new(cfg, keel_rudp::ClientSecurity::Insecure);
    cc.udp.send_impairment = impairment(&format!("{data},seed=13"));
    cc.udp.recv_impairment = impairment(&format!("{spec},seed=14"));
    let (cli, cli_rx) = recorder(false);
    let client = Client::connect(rt.next_reactor(), server.local_addr(), cc, cli).unwrap();
    Pair {
        rt,
        server,
        srv_rx,
        client,
        cli_rx,
    }
}

impl Pair {
    fn stop(self) {
        self.client.stop();
        self.server.stop();
        self.rt.stop().unwrap();
    }
}

/// 20 % loss each way at each end (so about 36 % of packets lost end to
/// end), 20 ms delay with 10 ms jitter, 5 % duplicates, 10 % reordered.
const BAD: &str = "loss=0.2,delay=20ms,jitter=10ms,dup=0.05,reorder=0.1";

#[test]
fn reliable_messages_arrive_exactly_once_and_in_order_under_20_percent_loss() {
    const N: u32 = 300;
    let p = pair(BAD, config());
    let sender = p.client.sender();
    let start = Instant::now();
    for i in 0..N {
        sender.send(ORDERED, &payload(i, 100)).unwrap();
        sender.send(UNORDERED, &payload(i, 40)).unwrap();
    }
    let (mut ordered, mut unordered) = (Vec::new(), Vec::new());
    collect_until(
        &p.srv_rx,
        Duration::from_secs(20),
        "all reliable messages",
        |s| {
            match s {
                Seen::Message(_, ORDERED, d) => ordered.push(index(d)),
                Seen::Message(_, UNORDERED, d) => unordered.push(index(d)),
                Seen::Connected(..) => {}
                other => panic!("unexpected {other:?}"),
            }
            ordered.len() == N as usize && unordered.len() == N as usize
        },
    );
    let took = start.elapsed();
    assert_eq!(ordered, (0..N).collect::<Vec<_>>(), "ordered channel");
    let set: HashSet<u32> = unordered.iter().copied().collect();
    assert_eq!(
        set.len(),
        N as usize,
        "unordered channel delivered a duplicate"
    );
    // Nothing more arrives (no late duplicate) while the peers settle.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        p.srv_rx.try_iter().all(|s| !matches!(s, Seen::Message(..))),
        "a message was delivered twice"
    );
    let c = p.client.udp_counters();
    eprintln!(
        "{N}+{N} reliable messages under {BAD}: {took:?}; client sent {} datagrams, \
         its conditioner dropped {}",
        c.datagrams_out, c.conditioner_dropped
    );
    p.stop();
}

#[test]
fn sequenced_channel_never_delivers_an_older_message_after_a_newer() {
    const N: u32 = 400;
    let p = pair(BAD, config());
    let sender = p.client.sender();
    match next(&p.cli_rx, Duration::from_secs(10), "connected") {
        Seen::Connected(..) => {}
        other => panic!("{other:?}"),
    }
    // 2 ms apart, so reordering and jitter shuffle them on the way.
    for i in 0..N {
        sender.send(SEQUENCED, &payload(i, 32)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    sender.send(ORDERED, &payload(0, 8)).unwrap();
    let mut seq = Vec::new();
    collect_until(
        &p.srv_rx,
        Duration::from_secs(10),
        "the marker",
        |s| match s {
            Seen::Message(_, SEQUENCED, d) => {
                seq.push(index(d));
                false
            }
            Seen::Message(_, ORDERED, _) => true,
            _ => false,
        },
    );
    // The marker overtakes nothing that is still in flight: wait a delay.
    std::thread::sleep(Duration::from_millis(200));
    for s in p.srv_rx.try_iter() {
        if let Seen::Message(_, SEQUENCED, d) = s {
            seq.push(index(&d));
        }
    }
    assert!(
        seq.windows(2).all(|w| w[0] < w[1]),
        "older after newer: {seq:?}"
    );
    // About 36 % are lost end to end, and jitter makes many arrive after
    // a newer one (dropped as stale, which is the point).
    assert!(
        seq.len() > N as usize / 5,
        "only {} of {N} arrived",
        seq.len()
    );
    assert!(
        seq.len() < N as usize,
        "no loss at all: is the conditioner on?"
    );
    eprintln!(
        "sequenced: {} of {N} delivered, all in increasing order",
        seq.len()
    );
    p.stop();
}

#[test]
fn a_one_mib_message_crosses_10_percent_loss() {
    // 10 % of the data lost; acknowledgements get through (delayed).
    let p = pair_one_way("loss=0.1,delay=2ms,jitter=1ms", "delay=2ms", config());
    let big = payload(42, 1 << 20);
    let start = Instant::now();
    p.client.sender().send(BULK, &big).unwrap();
    let got = collect_until(
        &p.srv_rx,
        Duration::from_secs(60),
        "the 1 MiB message",
        |s| matches!(s, Seen::Message(_, BULK, _)),
    );
    let took = start.elapsed();
    match got.last() {
        Some(Seen::Message(_, BULK, d)) => {
            assert_eq!(d.len(), 1 << 20);
            assert_eq!(index(d), 42);
        }
        other => panic!("{other:?}"),
    }
    eprintln!("1 MiB across 10 % loss: {took:?}");
    p.stop();
}

/// A client written on the sans-IO core over std sockets, so the test
/// can move it to a new socket (a NAT rebinding: a new source port).
struct RawClient {
    conn: Connection,
    socket: UdpSocket,
    server: SocketAddr,
}

/// A socket whose reads wait at most 1 ms.
fn client_socket() -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    socket
}

impl RawClient {
    fn new(server: SocketAddr, cfg: Config) -> Self {
        RawClient {
            conn: Connection::connect(
                cfg,
                keel_rudp::ClientSecurity::Insecure,
                [9; 16],
                Instant::now(),
            )
            .unwrap(),
            socket: client_socket(),
            server,
        }
    }

    /// Sends what is due, reads what arrived, runs timers: one step.
    fn step(&mut self, events: &mut Vec<Event>) {
        let now = Instant::now();
        let mut buf = [0u8; 1500];
        for _ in 0..1000 {
            let Some(n) = self.conn.poll_transmit(now, &mut buf) else {
                break;
            };
            self.socket.send_to(&buf[..n], self.server).unwrap();
        }
        // Wait for a datagram (at most 1 ms: timers are run below).
        for _ in 0..1000 {
            match self.socket.recv_from(&mut buf) {
                Ok((n, _)) => self.conn.handle_datagram(Instant::now(), &buf[..n]),
                Err(_) => break,
            }
        }
        if self
            .conn
            .poll_timeout()
            .is_some_and(|t| t <= Instant::now())
        {
            self.conn.handle_timeout(Instant::now());
        }
        while let Some(e) = self.conn.poll_event() {
            events.push(e);
        }
    }

    /// Steps until `done` holds, for at most `within`.
    fn run_until(
        &mut self,
        within: Duration,
        what: &str,
        mut done: impl FnMut(&[Event]) -> bool,
    ) -> Vec<Event> {
        let deadline = Instant::now() + within;
        let mut events = Vec::new();
        while !done(&events) {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {within:?}: {events:?}"
            );
            self.step(&mut events);
        }
        events
    }
}

fn echo_server(
    rt: &Runtime,
    lanes: usize,
    cfg: Config,
) -> (Server<Recorder>, std::sync::mpsc::Receiver<Seen>) {
    let mut sc = ServerConfig::new(cfg, keel_rudp::ServerSecurity::Insecure);
    sc.lanes = lanes;
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        Recorder {
            events: tx.clone(),
            echo: true,
        }
    })
    .unwrap();
    (server, rx)
}

#[test]
fn a_client_whose_source_port_changes_keeps_its_connection() {
    // Four lanes: a new source port hashes to another lane three times
    // in four; only steering by connection ID keeps it on its own.
    let rt = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let (server, srv_rx) = echo_server(&rt, 4, config());
    let mut c = RawClient::new(server.local_addr(), config());
    c.run_until(Duration::from_secs(5), "connect", |e| {
        e.contains(&Event::Connected)
    });
    let echoes = |e: &[Event]| {
        e.iter()
            .filter(|e| matches!(e, Event::Message { .. }))
            .count()
    };
    let round = |c: &mut RawClient, from: u32| {
        for i in from..from + 20 {
            c.conn.send(ORDERED, &payload(i, 50)).unwrap();
        }
        let ev = c.run_until(Duration::from_secs(5), "echoes", |e| echoes(e) == 20);
        let got: Vec<u32> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Message { data, .. } => Some(index(data)),
                _ => None,
            })
            .collect();
        assert_eq!(got, (from..from + 20).collect::<Vec<_>>());
    };
    round(&mut c, 0);
    let old = c.socket.local_addr().unwrap();
    for k in 1..=3u32 {
        // Rebind: same connection, a new socket and source port.
        c.socket = client_socket();
        round(&mut c, 100 * k);
    }
    assert_ne!(c.socket.local_addr().unwrap(), old);
    let stats = server.stats();
    assert_eq!(stats.connections_created, 1, "{stats:?}");
    assert_eq!(stats.address_changes, 3, "{stats:?}");
    assert_eq!(
        stats.unknown_connection, 0,
        "a packet reached another lane: {stats:?}"
    );
    let conns: HashSet<_> = srv_rx
        .try_iter()
        .filter_map(|s| match s {
            Seen::Message(h, ..) => Some(h),
            _ => None,
        })
        .collect();
    assert_eq!(conns.len(), 1, "messages arrived on several connections");
    // The client closes from its latest address: the server acknowledges
    // the CLOSE there, so the close ends at once, nothing left.
    c.conn.close(Instant::now(), 9, "done");
    c.run_until(Duration::from_secs(5), "the end of the close", |e| {
        e.iter().any(|e| matches!(e, Event::Disconnected(_)))
    });
    assert!(
        c.conn.undelivered().is_empty(),
        "{:?}",
        c.conn.undelivered()
    );
    assert!(server.stop().is_clean());
    rt.stop().unwrap();
}

#[test]
fn spoofed_sources_allocate_nothing_before_the_cookie_round_trip() {
    const SPOOFED: u64 = 500;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (server, _srv_rx) = echo_server(&rt, 2, config());
    // A valid hello, sent from many sources that never answer the RETRY
    // (as a spoofed source cannot: the RETRY goes to the real owner).
    let mut hello = [0u8; 1500];
    let n = Connection::connect(
        config(),
        keel_rudp::ClientSecurity::Insecure,
        [5; 16],
        Instant::now(),
    )
    .unwrap()
    .poll_transmit(Instant::now(), &mut hello)
    .unwrap();
    assert_eq!(n, 1200);
    let sockets: Vec<UdpSocket> = (0..50)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut buf = [0u8; 1500];
    // In rounds of one hello per socket (60 KB: no receive buffer
    // overflows), each RETRY read back before the next round: every hello
    // is answered, with no more bytes than it had.
    for s in &sockets {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    for _ in 0..SPOOFED as usize / sockets.len() {
        for s in &sockets {
            s.send_to(&hello[..n], server.local_addr()).unwrap();
        }
        for s in &sockets {
            let m = s.recv(&mut buf).expect("a RETRY for each hello");
            assert!(m <= n, "reply of {m} bytes to a hello of {n}");
        }
    }
    // Also a short hello (amplification bait) and garbage: no answer.
    sockets[0]
        .send_to(&hello[..600], server.local_addr())
        .unwrap();
    sockets[0]
        .send_to(&[0xff; 40], server.local_addr())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let stats = loop {
        let s = server.stats();
        if s.malformed >= 1 && s.short_hellos >= 1 || Instant::now() > deadline {
            break s;
        }
        std::thread::yield_now();
    };
    assert_eq!(stats.hellos, SPOOFED + 1, "{stats:?}");
    assert_eq!(stats.retries_sent, SPOOFED, "{stats:?}");
    assert_eq!(stats.short_hellos, 1, "{stats:?}");
    assert_eq!(stats.malformed, 1, "{stats:?}");
    assert_eq!(stats.connections_created, 0, "{stats:?}");
    let udp = server.udp_counters();
    assert!(udp.bytes_out <= udp.bytes_in, "amplified: {udp:?}");
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn a_silent_peer_is_disconnected_on_time() {
    let mut cfg = config();
    cfg.idle_timeout = Duration::from_millis(600);
    cfg.keepalive_interval = Duration::from_millis(150);
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (server, srv_rx) = echo_server(&rt, 1, cfg.clone());
    let mut c = RawClient::new(server.local_addr(), cfg);
    c.run_until(Duration::from_secs(5), "connect", |e| {
        e.contains(&Event::Connected)
    });
    c.conn.send(ORDERED, &payload(1, 8)).unwrap();
    c.run_until(Duration::from_secs(5), "echo", |e| {
        e.iter().any(|e| matches!(e, Event::Message { .. }))
    });
    // From here the client says nothing (its socket stays open).
    let silent_from = Instant::now();
    let seen = collect_until(&srv_rx, Duration::from_secs(5), "the idle timeout", |s| {
        matches!(s, Seen::Disconnected(..))
    });
    match seen.last() {
        Some(Seen::Disconnected(_, DisconnectReason::IdleTimeout, at)) => {
            let after = at.duration_since(silent_from);
            eprintln!(
                "silent peer disconnected {after:?} after its last packet (idle_timeout 600 ms)"
            );
            assert!(
                after >= Duration::from_millis(550) && after <= Duration::from_millis(900),
                "disconnected {after:?} after going silent"
            );
        }
        other => panic!("{other:?}"),
    }
    // Removed from the endpoint, too.
    let deadline = Instant::now() + Duration::from_secs(2);
    while server.stats().connections_removed == 0 {
        assert!(Instant::now() < deadline, "{:?}", server.stats());
        std::thread::yield_now();
    }
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn a_client_sees_a_silent_server_time_out() {
    let mut cfg = config();
    cfg.idle_timeout = Duration::from_millis(500);
    cfg.keepalive_interval = Duration::from_millis(150);
    // The server on a runtime of its own, stopped as a crashed process
    // would: no CLOSE (`Server::stop` would send one).
    let server_rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let sc = ServerConfig::new(cfg.clone(), keel_rudp::ServerSecurity::Insecure);
    let server = Server::bind(
        server_rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        sc,
        |_| recorder(false).0,
    )
    .unwrap();
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (cli, cli_rx) = recorder(false);
    let cc = ClientConfig::new(cfg, keel_rudp::ClientSecurity::Insecure);
    let client = Client::connect(rt.next_reactor(), server.local_addr(), cc, cli).unwrap();
    match next(&cli_rx, Duration::from_secs(5), "connected") {
        Seen::Connected(..) => {}
        other => panic!("{other:?}"),
    }
    server_rt.stop().unwrap();
    let stopped = Instant::now();
    match next(&cli_rx, Duration::from_secs(5), "the client's idle timeout") {
        Seen::Disconnected(_, DisconnectReason::IdleTimeout, at) => {
            let after = at.duration_since(stopped);
            assert!(after <= Duration::from_millis(800), "after {after:?}");
        }
        other => panic!("{other:?}"),
    }
    client.stop();
    rt.stop().unwrap();
}
