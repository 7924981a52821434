//! Sessions: connect before the first datagram, idle timeout, the bounded
//! table (refuse and evict), explicit close, shutdown.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_udp::{
    DisconnectReason, EndpointConfig, FullPolicy, Server, ServerConfig, ServerCtx, ServerHandler,
    Session,
};

/// Logs every event; echoes datagrams starting with "echo"; closes the
/// session on "bye". Records the largest table size seen at a connect.
struct Rec {
    log: Arc<Log>,
    max_open: Arc<AtomicUsize>,
}

impl ServerHandler for Rec {
    type SessionState = ();

    fn accept(&mut self, ctx: &mut ServerCtx<'_, ()>, peer: SocketAddr, _: &[u8]) -> Option<()> {
        // Sessions already open; the new one is added after this returns.
        self.max_open
            .fetch_max(ctx.session_count() + 1, Ordering::SeqCst);
        self.log.push(Event::Connect(peer));
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        self.log.push(Event::Datagram(s.peer(), data.to_vec()));
        if data == b"bye" {
            s.close();
        }
        if data.starts_with(b"echo") {
            s.send(data).unwrap();
        }
    }

    fn disconnected(
        &mut self,
        _: &mut ServerCtx<'_, ()>,
        peer: SocketAddr,
        _: (),
        reason: DisconnectReason,
    ) {
        self.log.push(Event::Disconnect(peer, reason));
    }
}

struct Fixture {
    rt: Runtime,
    server: Server<Rec>,
    log: Arc<Log>,
    max_open: Arc<AtomicUsize>,
}

fn start(config: ServerConfig) -> Fixture {
    let rt = runtime(IoModel::Shared { threads: 2 });
    let log = Arc::new(Log::default());
    let max_open = Arc::new(AtomicUsize::new(0));
    let (l, m) = (log.clone(), max_open.clone());
    let server = Server::bind(rt.handles(), v4(), config, move |_| Rec {
        log: l.clone(),
        max_open: m.clone(),
    })
    .unwrap();
    Fixture {
        rt,
        server,
        log,
        max_open,
    }
}

impl Fixture {
    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Sends "echo..." from `s` and waits for it to come back: everything
    /// `s` sent before has been handled.
    fn echo(&self, s: &UdpSocket, tag: &str) {
        let msg = format!("echo {tag}");
        s.send_to(msg.as_bytes(), self.addr()).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = recv_from(s, &mut buf, &msg);
        assert_eq!(&buf[..n], msg.as_bytes());
    }

    fn stop(self) {
        self.server.stop();
        self.rt.stop().unwrap();
    }
}

fn disconnects(events: &[Event], reason: &DisconnectReason) -> Vec<SocketAddr> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Disconnect(p, r) if r == reason => Some(*p),
            _ => None,
        })
        .collect()
}

fn no_timeout() -> ServerConfig {
    ServerConfig {
        idle_timeout: None,
        ..ServerConfig::default()
    }
}

#[test]
fn connect_comes_before_a_peers_first_datagram() {
    let f = start(no_timeout());
    let clients: Vec<_> = (0..3).map(|_| std_client(v4())).collect();
    for round in 0..3u8 {
        for (c, s) in clients.iter().enumerate() {
            s.send_to(&[c as u8, round], f.addr()).unwrap();
        }
    }
    let events = f.log.wait("9 datagrams", |ev| {
        ev.iter()
            .filter(|e| matches!(e, Event::Datagram(..)))
            .count()
            == 9
    });
    for (c, s) in clients.iter().enumerate() {
        let me = s.local_addr().unwrap();
        let mine: Vec<_> = events
            .iter()
            .filter(|e| match e {
                Event::Connect(p) | Event::Datagram(p, _) | Event::Disconnect(p, _) => *p == me,
            })
            .cloned()
            .collect();
        let want: Vec<_> = std::iter::once(Event::Connect(me))
            .chain((0..3).map(|r| Event::Datagram(me, vec![c as u8, r])))
            .collect();
        assert_eq!(
            mine, want,
            "client {c}: one connect, then its datagrams in order"
        );
    }
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!((c.sessions_opened, c.sessions_open), (3, 3), "{c:?}");
    f.stop();
}

#[test]
fn idle_session_times_out_and_active_one_stays() {
    const IDLE: Duration = Duration::from_millis(100);
    let f = start(ServerConfig {
        idle_timeout: Some(IDLE),
        ..ServerConfig::default()
    });
    let idle = std_client(v4());
    let busy = std_client(v4());
    let (idle_addr, busy_addr) = (idle.local_addr().unwrap(), busy.local_addr().unwrap());
    f.echo(&busy, "busy 0");
    f.echo(&idle, "idle");
    let quiet_since = Instant::now();
    // Keep `busy` active (every 20 ms, well inside the timeout) until the
    // idle peer's disconnect arrives.
    let mut k = 1;
    let timed_out = loop {
        let ev = f.log.events();
        if let Some(at) = ev
            .iter()
            .position(|e| *e == Event::Disconnect(idle_addr, DisconnectReason::IdleTimeout))
        {
            break (ev, at);
        }
        assert!(quiet_since.elapsed() < LIMIT, "no idle timeout: {ev:?}");
        f.echo(&busy, &format!("busy {k}"));
        k += 1;
        // Pacing for the active peer, not synchronization.
        std::thread::sleep(Duration::from_millis(20));
    };
    let waited = quiet_since.elapsed();
    assert!(
        waited >= IDLE,
        "timed out after {waited:?}, before {IDLE:?}"
    );
    let (events, _) = timed_out;
    assert!(
        disconnects(&events, &DisconnectReason::IdleTimeout) == [idle_addr],
        "only the idle peer times out: {events:?}"
    );
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!((c.sessions_timed_out, c.sessions_open), (1, 1), "{c:?}");

    // Now `busy` goes quiet too.
    f.log.wait("the busy peer's idle timeout", |ev| {
        ev.contains(&Event::Disconnect(busy_addr, DisconnectReason::IdleTimeout))
    });
    // A timed-out peer that comes back gets a new session.
    f.echo(&idle, "back");
    let events = f.log.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == Event::Connect(idle_addr))
            .count(),
        2,
        "{events:?}"
    );
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!(c.sessions_timed_out, 2, "{c:?}");
    assert_eq!((c.sessions_opened, c.sessions_open), (3, 1), "{c:?}");
    f.stop();
}

/// A socket bound to a loopback address of its own (127.1.x.y), so every
/// one is a distinct peer without keeping a thousand ports open.
fn peer_socket(i: usize) -> UdpSocket {
    let ip = Ipv4Addr::new(127, 1, (i / 200) as u8, (i % 200 + 1) as u8);
    let s = UdpSocket::bind((ip, 0)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s
}

#[test]
fn thousand_peers_against_a_hundred_sessions_are_bounded_and_counted() {
    const PEERS: usize = 1_000;
    const MAX: usize = 100;
    const KEEP: usize = 150;
    let f = start(ServerConfig {
        max_sessions: MAX,
        idle_timeout: None,
        endpoint: EndpointConfig {
            socket: big_buffers(),
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    });
    // A control peer holds one session; its echo marks "all before it
    // handled" (one lane, one socket queue).
    let control = std_client(v4());
    f.echo(&control, "first");
    // In chunks of 100, each followed by the control echo, so the server's
    // receive buffer never holds more than a chunk (no kernel drops).
    let mut kept = Vec::new();
    let mut sent = 1;
    for i in 0..PEERS {
        let s = peer_socket(i);
        s.send_to(b"hello", f.addr()).unwrap();
        sent += 1;
        if i < KEEP {
            kept.push(s);
        }
        if i % 100 == 99 {
            f.echo(&control, &format!("after {i}"));
            sent += 1;
        }
    }
    let distinct = PEERS as u64 + 1;
    let deadline = Instant::now() + LIMIT;
    let c = loop {
        f.echo(&control, "mark");
        sent += 1;
        barrier(&f.server);
        let c = f.server.counters();
        if c.sessions_opened + c.sessions_refused == distinct {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "first datagrams unaccounted: {c:?}"
        );
    };
    assert_eq!(c.sessions_opened, MAX as u64, "{c:?}");
    assert_eq!(c.sessions_refused, distinct - MAX as u64, "{c:?}");
    assert_eq!(c.sessions_open, MAX as u64, "{c:?}");
    assert_eq!(c.datagrams_in, sent, "{c:?}");
    assert_eq!(c.kernel_drops, 0, "{c:?}");
    assert!(
        f.max_open.load(Ordering::SeqCst) <= MAX,
        "table grew past its bound"
    );
    let events = f.log.events();
    let connects: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Connect(p) => Some(*p),
            _ => None,
        })
        .collect();
    assert_eq!(connects.len(), MAX);
    // Refused peers reach no handler; nobody was disconnected.
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Datagram(..)))
            .count() as u64,
        c.sessions_opened + (sent - distinct),
        "handled datagrams = first datagrams of admitted peers + control's echoes"
    );
    assert!(!events.iter().any(|e| matches!(e, Event::Disconnect(..))));

    // Established sessions are undisturbed by the flood; a refused peer
    // stays refused while the table is full.
    let admitted = kept
        .iter()
        .find(|s| connects.contains(&s.local_addr().unwrap()))
        .expect("an admitted peer among the first 150");
    let refused = kept
        .iter()
        .find(|s| !connects.contains(&s.local_addr().unwrap()))
        .expect("a refused peer among the first 150");
    f.echo(admitted, "admitted");
    refused.send_to(b"echo refused", f.addr()).unwrap();
    f.echo(&control, "last");
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!(c.sessions_refused, distinct - MAX as u64 + 1, "{c:?}");
    assert_eq!(
        (c.sessions_opened, c.sessions_open),
        (MAX as u64, MAX as u64),
        "{c:?}"
    );
    assert_eq!(c.datagrams_in, sent + 3, "{c:?}");
    f.stop();
}

#[test]
fn full_table_evicts_the_idlest_when_asked() {
    const MAX: usize = 4;
    const PEERS: usize = 10;
    let f = start(ServerConfig {
        max_sessions: MAX,
        full_policy: FullPolicy::EvictIdlest,
        idle_timeout: None,
        ..ServerConfig::default()
    });
    let peers: Vec<_> = (0..PEERS).map(|_| std_client(v4())).collect();
    let addrs: Vec<_> = peers.iter().map(|s| s.local_addr().unwrap()).collect();
    for (i, s) in peers.iter().enumerate() {
        let before = f.log.events().len();
        f.echo(s, &i.to_string());
        let new: Vec<_> = f.log.events()[before..].to_vec();
        if i < MAX {
            assert_eq!(new[0], Event::Connect(addrs[i]), "{new:?}");
            continue;
        }
        // Full: the newcomer is admitted (connect), then one session is
        // evicted to make room, never the one that was active last.
        match &new[..] {
            [Event::Connect(p), Event::Disconnect(victim, DisconnectReason::Evicted), Event::Datagram(..)] =>
            {
                assert_eq!(*p, addrs[i]);
                assert!(addrs[..i].contains(victim), "{victim} was not a session");
                assert_ne!(
                    *victim,
                    addrs[i - 1],
                    "evicted the most recently active peer"
                );
            }
            other => panic!("peer {i}: expected connect, evict, datagram; got {other:?}"),
        }
    }
    barrier(&f.server);
    let c = f.server.counters();
    let evictions = (PEERS - MAX) as u64;
    assert_eq!(c.sessions_evicted, evictions, "{c:?}");
    assert_eq!(c.sessions_opened, PEERS as u64, "{c:?}");
    assert_eq!(
        (c.sessions_open, c.sessions_refused),
        (MAX as u64, 0),
        "{c:?}"
    );
    let evicted = disconnects(&f.log.events(), &DisconnectReason::Evicted);
    assert_eq!(evicted.len() as u64, evictions);
    let mut unique = evicted.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        evicted.len(),
        "a session evicted twice: {evicted:?}"
    );
    f.stop();
}

#[test]
fn close_ends_a_session_with_reason_closed() {
    let f = start(no_timeout());
    let a = std_client(v4());
    let b = std_client(v4());
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    f.echo(&a, "a");
    f.echo(&b, "b");
    // Session::close from the datagram handler.
    a.send_to(b"bye", f.addr()).unwrap();
    f.log.wait("a's disconnect", |ev| {
        ev.contains(&Event::Disconnect(a_addr, DisconnectReason::Closed))
    });
    // ServerCtx::close from another thread.
    assert!(f.server.post(0, move |_, ctx| ctx.close(b_addr)).is_ok());
    f.log.wait("b's disconnect", |ev| {
        ev.contains(&Event::Disconnect(b_addr, DisconnectReason::Closed))
    });
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!((c.sessions_closed, c.sessions_open), (2, 0), "{c:?}");
    // The closed peer comes back as a new session.
    f.echo(&a, "again");
    let events = f.log.events();
    let a_events: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::Connect(p) | Event::Disconnect(p, _) if *p == a_addr))
        .cloned()
        .collect();
    assert_eq!(
        a_events,
        [
            Event::Connect(a_addr),
            Event::Disconnect(a_addr, DisconnectReason::Closed),
            Event::Connect(a_addr)
        ]
    );
    // Stopping the server ends the open session with Shutdown.
    f.server.stop();
    f.log.wait("the shutdown disconnect", |ev| {
        ev.contains(&Event::Disconnect(a_addr, DisconnectReason::Shutdown))
    });
    f.rt.stop().unwrap();
}

/// `stop_and_wait` returns once every lane has ended its sessions
/// (disconnect with `Shutdown`) and closed its socket.
#[test]
fn stop_and_wait_ends_every_session_before_returning() {
    use keel_udp::{DisconnectReason, ServerCtx, ServerHandler, Session};
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    struct Track(Arc<Mutex<Vec<DisconnectReason>>>);
    impl ServerHandler for Track {
        type SessionState = ();
        fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
            Some(())
        }
        fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
            let _ = s.send(data);
        }
        fn disconnected(
            &mut self,
            _: &mut ServerCtx<'_, ()>,
            _: SocketAddr,
            _: (),
            r: DisconnectReason,
        ) {
            self.0.lock().unwrap().push(r);
        }
    }
    let rt = keel_reactor::Runtime::new(keel_reactor::IoModel::Shared { threads: 2 }).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let config = keel_udp::ServerConfig {
        lanes: 2,
        ..Default::default()
    };
    let l2 = log.clone();
    let server = keel_udp::Server::bind(
        rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        config,
        move |_| Track(l2.clone()),
    )
    .unwrap();
    let mut peers = Vec::new();
    for _ in 0..8 {
        let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        c.send_to(b"hi", server.local_addr()).unwrap();
        let mut buf = [0u8; 8];
        c.recv(&mut buf).unwrap();
        peers.push(c);
    }
    assert!(server.stop_and_wait(std::time::Duration::from_secs(5)));
    assert!(server.is_stopped());
    assert_eq!(server.counters().sessions_open, 0);
    let reasons = log.lock().unwrap().clone();
    assert_eq!(reasons.len(), 8);
    assert!(reasons.iter().all(|r| *r == DisconnectReason::Shutdown));
    rt.stop().unwrap();
}
