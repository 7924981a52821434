//! keel-rudp on real sockets: a server on keel-udp lanes and a client,
//! on both runtime models and from a game loop driving `Reactor::turn`.

use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::{IoModel, Reactor, Runtime};
use std::sync::mpsc::Receiver;

use keel_rudp::{Client, ClientConfig, DisconnectReason, Server, ServerConfig, CLOSE_STOPPED};

const MESSAGES: u32 = 200;

/// A client sends `MESSAGES` on the ordered channel through a Sender; the
/// server echoes each; the client sees them all, once, in order.
fn echo_round_trip(model: IoModel, lanes: usize) {
    let rt = Runtime::new(model).unwrap();
    let mut sc = ServerConfig::new(config(), keel_rudp::ServerSecurity::Insecure);
    sc.lanes = lanes;
    let (srv_events, srv_rx) = recorder(true);
    let mut handlers = Some(srv_events);
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        handlers.take().unwrap_or_else(|| recorder(true).0)
    })
    .unwrap();
    let (cli, cli_rx) = recorder(false);
    let client = Client::connect(
        rt.next_reactor(),
        server.local_addr(),
        ClientConfig::new(config(), keel_rudp::ClientSecurity::Insecure),
        cli,
    )
    .unwrap();
    let sender = client.sender();
    for i in 0..MESSAGES {
        sender.send(ORDERED, &payload(i, 64)).unwrap();
    }
    let mut got = Vec::new();
    let mut connected = false;
    collect_until(&cli_rx, Duration::from_secs(10), "echoes", |s| {
        match s {
            Seen::Connected(..) => connected = true,
            Seen::Message(_, ORDERED, d) => got.push(index(d)),
            other => panic!("unexpected {other:?}"),
        }
        got.len() == MESSAGES as usize
    });
    assert!(connected);
    assert_eq!(got, (0..MESSAGES).collect::<Vec<_>>());
    // Close: the server's handler sees the code and reason. With several
    // lanes, the recording handler is lane 0's: only check with one lane.
    assert!(client.close(7, "bye").is_ok());
    if lanes == 1 {
        let seen = collect_until(&srv_rx, Duration::from_secs(5), "server disconnect", |s| {
            matches!(s, Seen::Disconnected(..))
        });
        match seen.last() {
            Some(Seen::Disconnected(_, DisconnectReason::Remote { code: 7, reason }, _)) => {
                assert_eq!(reason, "bye")
            }
            other => panic!("{other:?}"),
        }
    }
    let stats = server.stats();
    assert_eq!(stats.connections_created, 1, "{stats:?}");
    client.stop();
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn echo_on_a_shared_runtime() {
    echo_round_trip(IoModel::Shared { threads: 2 }, 1);
}

#[test]
fn echo_on_a_sharded_runtime_with_four_lanes() {
    echo_round_trip(IoModel::Sharded { reactors: 2 }, 4);
}

/// A game loop owns a reactor and turns it; server and client live on it.
#[test]
fn echo_from_a_game_loop_driving_reactor_turn() {
    let mut reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let (srv, _srv_rx) = recorder(true);
    let mut srv = Some(srv);
    let server = Server::bind(
        std::slice::from_ref(&handle),
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::new(config(), keel_rudp::ServerSecurity::Insecure),
        move |_| srv.take().expect("one lane"),
    )
    .unwrap();
    let (cli, cli_rx) = recorder(false);
    let client = Client::connect(
        &handle,
        server.local_addr(),
        ClientConfig::new(config(), keel_rudp::ClientSecurity::Insecure),
        cli,
    )
    .unwrap();
    client.sender().send(UNORDERED, &payload(1, 32)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut echoed = false;
    // One game frame per turn: bounded by the deadline.
    while !echoed && Instant::now() < deadline {
        reactor.turn(Some(Duration::from_millis(16))).unwrap();
        while let Ok(s) = cli_rx.try_recv() {
            if let Seen::Message(_, UNORDERED, d) = s {
                assert_eq!(index(&d), 1);
                echoed = true;
            }
        }
    }
    assert!(echoed, "no echo within 10 s of turns");
    // The loop cannot block in `stop` (nobody else turns the reactor):
    // it starts the stops and turns until they report.
    let mut stops = [client.begin_stop(), server.begin_stop(CLOSE_STOPPED, "bye")];
    let mut reports = [None, None];
    while reports.iter().any(Option::is_none) && Instant::now() < deadline {
        reactor.turn(Some(Duration::from_millis(16))).unwrap();
        for (s, r) in stops.iter_mut().zip(&mut reports) {
            if r.is_none() {
                *r = s.poll();
            }
        }
    }
    for r in reports {
        let r = r.expect("a report within the test's 10 s");
        assert!(r.is_clean(), "{r:?}");
    }
    // The lanes close their sockets after their reports.
    for _ in 0..10 {
        reactor.turn(Some(Duration::ZERO)).unwrap();
    }
    assert!(server.is_stopped());
}

/// Random datagrams (seeded), many shaped like short headers for the
/// lanes' connection IDs, never stop a server: each is counted, and a
/// client connects and echoes afterwards on the same lanes.
#[test]
fn garbage_is_counted_and_never_stops_a_server() {
    const N: u64 = 2_000;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let mut sc = ServerConfig::new(config(), keel_rudp::ServerSecurity::Insecure);
    sc.lanes = 2;
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        Recorder {
            events: tx.clone(),
            echo: true,
        }
    })
    .unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.connect(server.local_addr()).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = [0u8; 1400];
    for i in 0..N {
        let len = (rand() % 1400) as usize;
        for b in &mut buf[..len] {
            *b = rand() as u8;
        }
        if len > 1 && i % 2 == 0 {
            buf[0] = 0x40 | (buf[0] & 0x03); // a short header
            buf[1] = (i % 3) as u8; // lane 0, 1, or no lane
        }
        peer.send(&buf[..len]).unwrap();
        if i % 100 == 99 {
            // Paced so the receive buffer never overflows: wait until the
            // server has taken them in (an event: its counters).
            let deadline = Instant::now() + Duration::from_secs(5);
            while server.udp_counters().datagrams_in + server.udp_counters().kernel_drops < i + 1 {
                assert!(Instant::now() < deadline, "{:?}", server.udp_counters());
                std::thread::yield_now();
            }
        }
    }
    let (cli, cli_rx) = recorder(false);
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(config(), keel_rudp::ClientSecurity::Insecure),
        cli,
    )
    .unwrap();
    client.sender().send(ORDERED, &payload(5, 64)).unwrap();
    collect_until(
        &cli_rx,
        Duration::from_secs(5),
        "an echo after the garbage",
        |s| matches!(s, Seen::Message(_, ORDERED, _)),
    );
    let s = server.stats();
    let udp = server.udp_counters();
    assert_eq!(udp.kernel_drops, 0, "{udp:?}");
    // Every garbage datagram is in exactly one drop counter (the client's
    // handshake took one RETRY).
    let counted = s.malformed + s.unknown_connection + s.short_hellos + s.retries_sent - 1;
    assert_eq!(counted, N, "{s:?}");
    assert_eq!(s.connections_created, 1, "{s:?}");
    client.stop();
    server.stop();
    rt.stop().unwrap();
}

fn remote_close(rx: &Receiver<Seen>, who: &str) -> (u64, String) {
    match until_disconnected(rx, who, |_| {}) {
        DisconnectReason::Remote { code, reason } => (code, reason),
        other => panic!("{who}: {other:?}"),
    }
}

#[test]
fn stopping_a_server_tells_its_clients() {
    let (rt, server, _srv_rx, client, cli_rx) = connected_pair(1);
    server.stop();
    assert_eq!(
        remote_close(&cli_rx, "client"),
        (CLOSE_STOPPED, "server stopping".to_owned())
    );
    client.stop();
    rt.stop().unwrap();
}

#[test]
fn a_server_can_say_why_it_stops() {
    let (rt, server, _srv_rx, client, cli_rx) = connected_pair(1);
    server.stop_with(4000, "map change");
    assert_eq!(
        remote_close(&cli_rx, "client"),
        (4000, "map change".to_owned())
    );
    client.stop();
    rt.stop().unwrap();
}

#[test]
fn stopping_a_client_frees_its_place_on_the_server() {
    let (rt, server, srv_rx, client, _cli_rx) = connected_pair(1);
    client.stop();
    assert_eq!(
        remote_close(&srv_rx, "server"),
        (CLOSE_STOPPED, "client stopping".to_owned())
    );
    server.stop();
    rt.stop().unwrap();
}

/// However a lane's deadlines move (connections with different ack
/// delays and keepalives, sends that bring a deadline in, acks that push
/// it out, several rounds), each lane holds one reactor timer: the
/// reactor that runs a two-lane server and every client never holds more
/// timers than it has lanes (read after every turn). Before timers could
/// move, a lane armed up to 4.
#[test]
fn each_lane_holds_one_reactor_timer_however_its_deadlines_move() {
    const CLIENTS: usize = 8;
    const LANES: usize = 2;
    let mut reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let mut sc = ServerConfig::new(config(), keel_rudp::ServerSecurity::Insecure);
    sc.lanes = LANES;
    let server = Server::bind(
        std::slice::from_ref(&handle),
        "127.0.0.1:0".parse().unwrap(),
        sc,
        |_| recorder(true).0,
    )
    .unwrap();
    let mut clients = Vec::new();
    let mut events = Vec::new();
    for i in 0..CLIENTS as u64 {
        let mut c = config();
        c.max_ack_delay = Duration::from_millis(1 + 3 * i);
        c.keepalive_interval = Duration::from_millis(40 + 15 * i);
        // A client stopped after the server waits this long for an ack of
        // its CLOSE that will not come.
        c.close_timeout = Duration::from_millis(100);
        let (cli, rx) = recorder(false);
        let client = Client::connect(
            &handle,
            server.local_addr(),
            ClientConfig::new(c, keel_rudp::ClientSecurity::Insecure),
            cli,
        )
        .unwrap();
        clients.push(client);
        events.push(rx);
    }
    let lanes = LANES + CLIENTS;
    let deadline = Instant::now() + Duration::from_secs(10);
    let most = std::cell::Cell::new(0);
    let turn = |reactor: &mut Reactor| {
        reactor.turn(Some(Duration::from_millis(5))).unwrap();
        let n = handle.timer_count();
        assert!(n <= lanes, "{n} reactor timers for {lanes} lanes");
        most.set(most.get().max(n));
    };
    // Rounds of traffic: every client sends a few messages on channels
    // with different timers, then the test turns until all echoes are in.
    let rounds = 6u32;
    let mut echoed = vec![0u32; CLIENTS];
    for round in 0..rounds {
        for (i, client) in clients.iter().enumerate() {
            let sender = client.sender();
            for k in 0..=(i as u32 % 3) {
                let channel = [ORDERED, UNORDERED, SEQUENCED][(k + round) as usize % 3];
                sender.send(channel, &payload(round * 10 + k, 48)).unwrap();
            }
        }
        let want: Vec<u32> = (0..CLIENTS as u32)
            .map(|i| (round + 1) * (i % 3 + 1))
            .collect();
        while echoed != want {
            assert!(
                Instant::now() < deadline,
                "round {round}: echoes {echoed:?} of {want:?} within 10 s"
            );
            turn(&mut reactor);
            for (i, rx) in events.iter().enumerate() {
                while let Ok(s) = rx.try_recv() {
                    if let Seen::Message(..) = s {
                        echoed[i] += 1;
                    }
                }
            }
        }
        // Some quiet turns: acks and keepalives move the deadlines out.
        for _ in 0..5 {
            turn(&mut reactor);
        }
    }
    assert_eq!(server.stats().connections_created, CLIENTS as u64);
    eprintln!("traffic done at {:?}", deadline - Instant::now());
    // Every lane made its timer (it stays registered while unarmed).
    assert_eq!(most.get(), lanes);
    // The server first (the clients acknowledge its CLOSEs), then them.
    let server_stop = vec![server.begin_stop(CLOSE_STOPPED, "bye")];
    for mut stops in [
        server_stop,
        clients.iter().map(Client::begin_stop).collect(),
    ] {
        let mut done = vec![false; stops.len()];
        while done.iter().any(|d| !d) && Instant::now() < deadline {
            turn(&mut reactor);
            for (s, d) in stops.iter_mut().zip(&mut done) {
                *d = *d || s.poll().is_some();
            }
        }
        eprintln!("stops at {:?}", deadline - Instant::now());
        assert!(done.iter().all(|d| *d), "stops reported within 10 s");
    }
}

/// keel-rudp keeps its datagrams within `max_datagram_size` itself, so
/// its sockets forbid IP fragmentation by default where keel-udp can set
/// that (Linux; keel-udp's own tests read the option back from a socket).
#[test]
fn sockets_set_dont_fragment_by_default() {
    let sc = ServerConfig::new(config(), keel_rudp::ServerSecurity::Insecure);
    let cc = ClientConfig::new(config(), keel_rudp::ClientSecurity::Insecure);
    let linux = cfg!(target_os = "linux");
    assert_eq!(sc.udp.socket.dont_fragment, linux);
    assert_eq!(cc.udp.socket.dont_fragment, linux);
    // The rest of keel-udp's defaults is unchanged.
    let mut plain = keel_udp::EndpointConfig::default();
    plain.socket.dont_fragment = linux;
    assert_eq!(sc.udp.socket, plain.socket);
}
