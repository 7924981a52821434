//! What peers that never acknowledge can make a server hold to send: each
//! connection is held to its `max_send_buffer` (`SendError::Backpressure`)
//! and all of an endpoint's connections (all lanes of a server) to one
//! shared `send_budget` (`SendError::BudgetSpent`), counted; the bytes come
//! back as peers acknowledge and as connections go. Sans-IO, virtual clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_rudp::{
    ChannelConfig, ChannelKind, ClientSecurity, Config, ConfigError, ConnectionHandle,
    ConnectionId, Ctx, Handler, SendBudget, SendError, Server, ServerConfig, ServerSecurity,
    SEND_MESSAGE_OVERHEAD,
};
use keel_rudp_proto::{Connection, Event, Side};
use keel_rudp_proto::{Endpoint, EndpointConfig, Handled};

const CID: ConnectionId = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);
const MSG: usize = 16 << 10;
/// What a message of `MSG` bytes counts for in a send budget: its data,
/// an eighth more, and the per-message overhead.
const COST: usize = MSG + MSG / 8 + SEND_MESSAGE_OVERHEAD;
static DATA: [u8; MSG] = [5; MSG];

fn cfg() -> Config {
    let mut c = Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::Unreliable),
    ]);
    c.max_message_size = 64 << 10;
    c
}

fn addr(n: usize) -> SocketAddr {
    format!("192.0.2.{}:4000", n + 1).parse().unwrap()
}

/// An insecure endpoint's connection from `addr`, after the cookie round
/// trip: the client's end and the server's handle.
fn connect(
    server: &mut Endpoint,
    now: Instant,
    from: SocketAddr,
    n: u8,
) -> (Connection, ConnectionHandle) {
    let mut client = Connection::connect(cfg(), ClientSecurity::Insecure, [n; 16], now).unwrap();
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    let mut handle = None;
    for _ in 0..2 {
        let len = client.poll_transmit(now, &mut buf).unwrap();
        match server.handle(now, from, &buf[..len], &mut reply) {
            Handled::Reply(m) => client.handle_datagram(now, &reply[..m]),
            Handled::Accepted(h, m) => {
                handle = Some(h);
                client.handle_datagram(now, &reply[..m]);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(client.poll_event(), Some(Event::Connected));
    (client, handle.unwrap())
}

/// Everything the server has to send: to `clients[i]` if `acking[i]`,
/// else dropped (a peer that never acknowledges), and the acking clients'
/// answers back, for `steps` of 10 ms of virtual time.
fn pump(
    server: &mut Endpoint,
    clients: &mut [(Connection, ConnectionHandle)],
    acking: &[bool],
    now: &mut Instant,
    steps: usize,
) {
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    for _ in 0..steps {
        *now += Duration::from_millis(10);
        server.handle_timeout(*now);
        while let Some((h, _, n)) = server.poll_transmit(*now, &mut buf) {
            if let Some(i) = clients.iter().position(|c| c.1 == h) {
                if acking[i] {
                    clients[i].0.handle_datagram(*now, &buf[..n]);
                }
            }
        }
        for (i, (c, _)) in clients.iter_mut().enumerate() {
            if !acking[i] {
                continue;
            }
            c.handle_timeout(*now);
            while let Some(n) = c.poll_transmit(*now, &mut buf) {
                server.handle(*now, addr(i), &buf[..n], &mut reply);
            }
            while let Some(e) = c.poll_event() {
                if let Event::Message { data, .. } = e {
                    c.recycle(data);
                }
            }
        }
    }
}

#[test]
fn peers_that_never_acknowledge_cannot_make_the_endpoint_hold_past_its_send_budget() {
    // Before: each connection was held only to its own max_send_buffer
    // (4 MiB), so these 16 connections queued all 9 MiB sent to them.
    let mut now = Instant::now();
    let mut ec = EndpointConfig::new(0, [9; 32], cfg(), ServerSecurity::Insecure);
    ec.send_budget = SendBudget::new(2 << 20);
    // A quarter of the budget is split over the connections the endpoint
    // may hold: 32 KiB each (one message), whatever the others hold.
    ec.max_connections = 16;
    let budget = ec.send_budget.clone();
    let mut server = Endpoint::new(ec, now).unwrap();
    let mut clients: Vec<_> = (0..16)
        .map(|n| connect(&mut server, now, addr(n), n as u8))
        .collect();
    let (mut sent, mut spent) = (0usize, 0u64);
    for (_, h) in &clients {
        let conn = server.connection_mut(*h).unwrap();
        let mut mine = 0;
        for _ in 0..32 {
            match conn.send(0, &DATA) {
                Ok(_) => {
                    sent += 1;
                    mine += 1;
                }
                Err(SendError::BudgetSpent { used, len, limit }) => {
                    assert_eq!((len, limit), (MSG, 2 << 20));
                    // Past three quarters, only a connection under its
                    // share (limit / 16) may take the last quarter.
                    assert!(used + COST > limit - limit / 4, "{used}");
                    spent += 1;
                }
                Err(e) => panic!("{e}"),
            }
            assert!(budget.used() <= budget.limit(), "{}", budget.used());
        }
        // The first connections spent the open part; each later one still
        // sends, on its quota.
        assert!(mine >= 1, "a connection got nothing of the budget");
    }
    assert!(
        budget.used() + 16 * COST > budget.limit(),
        "the budget is spent"
    );
    assert_eq!(budget.used(), sent * COST);
    assert_eq!(spent, 16 * 32 - sent as u64);
    // Counted by the connections, the endpoint (before and after it
    // settles) and the budget alike.
    let by_conns: u64 = clients
        .iter()
        .map(|(_, h)| server.connection(*h).unwrap().stats().send_budget_refused)
        .sum();
    assert_eq!(by_conns, spent);
    assert_eq!(server.stats().send_budget_refused, spent);
    assert_eq!(budget.refused(), spent);
    server.poll_timeout();
    assert_eq!(server.stats().send_budget_refused, spent);
    let held: usize = clients
        .iter()
        .map(|(_, h)| server.connection(*h).unwrap().send_buffered())
        .sum();
    assert_eq!(held, sent * MSG);

    // Sent and unacknowledged, it stays counted: the peers are silent.
    let mut acking = vec![false; clients.len()];
    pump(&mut server, &mut clients, &acking, &mut now, 20);
    assert_eq!(budget.used(), sent * COST);
    let (_, last) = clients[15];
    assert!(matches!(
        server.connection_mut(last).unwrap().send(0, &DATA),
        Err(SendError::BudgetSpent { .. })
    ));

    // The first connection's peer acknowledges: its bytes come back and
    // another connection can send again.
    let first = clients[0].1;
    let first_held = server.connection(first).unwrap().send_buffered();
    assert!(first_held > 0);
    acking[0] = true;
    pump(&mut server, &mut clients, &acking, &mut now, 100);
    assert_eq!(server.connection(first).unwrap().send_buffered(), 0);
    let back = first_held / MSG * COST;
    assert_eq!(budget.used(), sent * COST - back);
    server.connection_mut(last).unwrap().send(0, &DATA).unwrap();

    // Closing the silent connections gives their bytes back once they go.
    for (_, h) in &clients[1..] {
        let c = server.connection_mut(*h).unwrap();
        c.close(now, 99, "never acknowledges");
    }
    for _ in 0..400 {
        now += Duration::from_millis(10);
        server.handle_timeout(now);
        while server.poll_transmit(now, &mut [0u8; 1500]).is_some() {}
        while server.poll_event().is_some() {}
        if server.connection_count() == 1 {
            break;
        }
    }
    assert_eq!(server.connection_count(), 1, "the silent ones are removed");
    assert_eq!(budget.used(), 0, "the acking one holds nothing");
    drop(server);
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_slow_connection_and_a_spent_budget_are_told_apart() {
    let now = Instant::now();
    let mut c = cfg();
    c.max_send_buffer = 4 * MSG;
    let mut conn = Connection::established(c.clone(), Side::Server, CID, now).unwrap();
    let budget = SendBudget::new(6 * COST);
    conn.set_send_budget(budget.clone());
    for _ in 0..4 {
        conn.send(0, &DATA).unwrap();
    }
    // This connection is at its own cap: backpressure, not the budget.
    assert!(matches!(
        conn.send(0, &DATA),
        Err(SendError::Backpressure { .. })
    ));
    let mut other = Connection::established(c, Side::Server, CID, now).unwrap();
    other.set_send_budget(budget.clone());
    other.send(0, &DATA).unwrap();
    other.send(0, &DATA).unwrap();
    // The other holds little, but the two together spent the budget.
    let err = other.send(0, b"x").unwrap_err();
    assert_eq!(
        err,
        SendError::BudgetSpent {
            used: 6 * COST,
            len: 1,
            limit: budget.limit(),
        }
    );
    assert!(err.to_string().contains("send_budget"), "{err}");
    assert_eq!(other.stats().send_budget_refused, 1);
    assert_eq!(conn.stats().send_budget_refused, 0);
    // Dropping a connection gives back all it held.
    drop(conn);
    assert_eq!(budget.used(), 2 * COST);
    other.send(0, b"x").unwrap();
}

#[test]
fn unreliable_messages_leave_the_budget_once_sent() {
    let now = Instant::now();
    let mut conn = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    let budget = SendBudget::new(1 << 20);
    conn.set_send_budget(budget.clone());
    for _ in 0..8 {
        conn.send(1, &DATA[..1000]).unwrap();
    }
    assert_eq!(budget.used(), 8 * (1000 + 1000 / 8 + SEND_MESSAGE_OVERHEAD));
    let mut buf = [0u8; 1500];
    while conn.poll_transmit(now, &mut buf).is_some() {}
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_send_budget_below_one_message_is_refused_by_name() {
    let now = Instant::now();
    let mut ec = EndpointConfig::new(0, [9; 32], cfg(), ServerSecurity::Insecure);
    ec.send_budget = SendBudget::new(0);
    let e = Endpoint::new(ec, now).unwrap_err();
    assert_eq!(
        e,
        ConfigError::SendBudget {
            budget: 0,
            message: 64 << 10
        }
    );
    assert_eq!(
        e.to_string(),
        "send_budget: 0 bytes cannot hold one message of max_message_size (65536 bytes)"
    );

    struct Nothing;
    impl Handler for Nothing {
        fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
    }
    let mut sc = ServerConfig::new(cfg(), ServerSecurity::Insecure);
    sc.send_budget = 0;
    let e = Server::bind(&[], "127.0.0.1:0".parse().unwrap(), sc, |_| Nothing).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().starts_with("send_budget: "), "{e}");
}

/// On "go", sends 8 messages of `MSG` bytes and reports what became of
/// them: (accepted, refused for the budget, the connection's count).
struct Burst(std::sync::mpsc::Sender<(usize, usize, u64)>);

impl Handler for Burst {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, _: u8, data: &[u8]) {
        if data != b"go" {
            return;
        }
        let (mut ok, mut spent) = (0, 0);
        for _ in 0..8 {
            match ctx.send(conn, 0, &DATA) {
                Ok(_) => ok += 1,
                Err(SendError::BudgetSpent { .. }) => spent += 1,
                Err(e) => panic!("{e}"),
            }
        }
        let counted = ctx.stats(conn).unwrap().send_budget_refused;
        let _ = self.0.send((ok, spent, counted));
    }
}

#[test]
fn a_server_holds_its_connections_to_the_configured_send_budget() {
    use keel_reactor::{IoModel, Runtime};
    use keel_rudp::{Client, ClientConfig};
    struct Quiet;
    impl Handler for Quiet {
        fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
    }
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let mut c = cfg();
    c.max_message_size = MSG; // the budget must hold one message
    let mut sc = ServerConfig::new(c, ServerSecurity::Insecure);
    sc.send_budget = 3 * COST;
    // One connection: its quota is the whole reserved quarter, so all
    // three messages fit.
    sc.max_connections = 1;
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        Burst(tx.clone())
    })
    .unwrap();
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(cfg(), ClientSecurity::Insecure),
        Quiet,
    )
    .unwrap();
    client.sender().send(0, b"go").unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10)).expect("the burst");
    assert_eq!(got, (3, 5, 5), "3 fit the budget; the other 5 are refused");
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().send_budget_refused < 5 {
        assert!(Instant::now() < deadline, "{:?}", server.stats());
        std::thread::yield_now();
    }
    assert_eq!(server.stats().send_budget_refused, 5);
    client.stop();
    server.stop();
    rt.stop().unwrap();
}
