//! What a stop leaves behind is counted, never delivered late: datagrams
//! the receive conditioner still holds when a server stops open no session
//! (before, a held datagram due in the same round as the stop reached
//! `accept` after every session had been ended, and its session never got
//! a `disconnected`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::Reactor;
use keel_udp::{
    DisconnectReason, EndpointConfig, Impairment, Server, ServerConfig, ServerCtx, ServerHandler,
    Session,
};

#[derive(Clone, Default)]
struct Tally {
    connects: Arc<AtomicUsize>,
    disconnects: Arc<AtomicUsize>,
}

impl ServerHandler for Tally {
    type SessionState = ();

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        self.connects.fetch_add(1, Ordering::SeqCst);
        Some(())
    }

    fn datagram(&mut self, _: &mut Session<'_, ()>, _: &[u8]) {}

    fn disconnected(
        &mut self,
        _: &mut ServerCtx<'_, ()>,
        _: SocketAddr,
        _: (),
        _: DisconnectReason,
    ) {
        self.disconnects.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn held_datagrams_due_with_the_stop_are_discarded_and_counted() {
    const PEERS: usize = 5;
    const DELAY: Duration = Duration::from_millis(150);
    // Our own loop, so the stop and the held datagrams' timer can be made
    // to land in one turn.
    let mut reactor = Reactor::new().unwrap();
    let config = ServerConfig {
        endpoint: EndpointConfig {
            recv_impairment: Some(Impairment {
                delay: DELAY,
                ..Impairment::default()
            }),
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    let tally = Tally::default();
    let t = tally.clone();
    let server = Server::bind(&[reactor.handle()], v4(), config, move |_| t.clone()).unwrap();
    let peers: Vec<_> = (0..PEERS).map(|_| std_client(v4())).collect();
    for p in &peers {
        p.send_to(b"hello", server.local_addr()).unwrap();
    }
    let deadline = Instant::now() + LIMIT;
    while server.counters().conditioner_delayed < PEERS as u64 {
        assert!(Instant::now() < deadline, "{:?}", server.counters());
        reactor.turn(Some(Duration::from_millis(5))).unwrap();
    }
    let held_at = Instant::now();
    assert_eq!(tally.connects.load(Ordering::SeqCst), 0, "delivered early");
    // Time, not an event: let the held datagrams come due without turning,
    // so their timer and the stop are handled in the same turn.
    std::thread::sleep(DELAY + Duration::from_millis(20));
    assert!(held_at.elapsed() > DELAY);
    server.stop();
    while !server.is_stopped() {
        assert!(Instant::now() < deadline, "the stop did not finish");
        reactor.turn(Some(Duration::from_millis(5))).unwrap();
    }
    let c = server.counters();
    assert_eq!(tally.connects.load(Ordering::SeqCst), 0, "{c:?}");
    assert_eq!(c.sessions_opened, 0, "{c:?}");
    assert_eq!(c.conditioner_discarded, PEERS as u64, "{c:?}");
    assert_eq!(
        tally.connects.load(Ordering::SeqCst),
        tally.disconnects.load(Ordering::SeqCst)
    );
}

/// When `stop_and_wait` returns true the socket is closed: its port can be
/// bound again at once (the lane signals from its state's last field,
/// after the socket's).
#[test]
fn after_stop_and_wait_the_port_is_free_again() {
    let rt = keel_reactor::Runtime::new(keel_reactor::IoModel::Shared { threads: 2 }).unwrap();
    let mut addr = v4();
    for round in 0..50 {
        let (server, _) = echo_server(&rt, addr, ServerConfig::default());
        addr = server.local_addr();
        assert!(server.stop_and_wait(LIMIT), "round {round}");
        std::net::UdpSocket::bind(addr)
            .unwrap_or_else(|e| panic!("round {round}: {addr} still taken after the stop: {e}"));
    }
    rt.stop().unwrap();
}

/// A `stop_and_wait` (or `close_and_wait`) that reaches a lane already
/// closing is done when that lane is: before, its request was dropped with
/// the closing lane's inbox and it reported a timeout at once.
#[test]
fn waiting_on_a_stop_already_under_way_succeeds() {
    let rt = keel_reactor::Runtime::new(keel_reactor::IoModel::Shared { threads: 2 }).unwrap();
    for round in 0..200 {
        let (server, _) = echo_server(&rt, v4(), ServerConfig::default());
        server.stop();
        assert!(server.stop_and_wait(LIMIT), "server, round {round}");
        assert!(server.is_stopped());
        let sink = std::net::UdpSocket::bind(v4()).unwrap();
        let client = keel_udp::Client::connect(
            rt.handle(),
            sink.local_addr().unwrap(),
            keel_udp::ClientConfig::default(),
            Quiet,
        )
        .unwrap();
        client.close();
        assert!(client.close_and_wait(LIMIT), "client, round {round}");
    }
    rt.stop().unwrap();
}

struct Quiet;

impl keel_udp::ClientHandler for Quiet {
    fn datagram(&mut self, _: &mut keel_udp::ClientCtx<'_>, _: &[u8]) {}
}
