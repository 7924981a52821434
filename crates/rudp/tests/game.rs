//! The conveniences a game built on keel-rudp asked for: a connection
//! found by its token's client id from any thread (and a reconnect
//! followed), a broadcast to every connection of every lane with what
//! was refused counted, a connection's state and the list of the ones a
//! send reaches, no client tick after `disconnected`, and a server ack
//! delay that fits a ticking server.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Client, ClientConfig, ClientSecurity, Config, ConnectToken, ConnectionHandle, Ctx,
    DisconnectReason, Handler, SendError, Server, ServerConfig, ServerSecurity, State, TokenMinter,
    TokenSpec, CLOSE_REPLACED, SERVER_MAX_ACK_DELAY,
};

const WAIT: Duration = Duration::from_secs(5);

fn tokens() -> ServerSecurity {
    ServerSecurity::Tokens {
        key: KEY,
        public_addrs: vec![public_addr()],
    }
}

/// A token for the real clock, for `client_id`.
fn token(client_id: u64) -> ConnectToken {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    TokenMinter::new(KEY)
        .mint(&TokenSpec {
            server_addrs: vec![public_addr()],
            expires_at: now + 60,
            client_id,
            timeout_secs: 10,
            user_data: Vec::new(),
        })
        .unwrap()
}

/// The next message a client's recorder saw (skipping nothing else: a
/// panic on any other event).
fn message(rx: &mpsc::Receiver<Seen>, what: &str) -> (u8, Vec<u8>) {
    match next(rx, WAIT, what) {
        Seen::Message(_, ch, data) => (ch, data),
        other => panic!("{what}: {other:?}"),
    }
}

fn connected(rx: &mpsc::Receiver<Seen>, what: &str) -> ConnectionHandle {
    match next(rx, WAIT, what) {
        Seen::Connected(h, _) => h,
        other => panic!("{what}: {other:?}"),
    }
}

/// From the test thread (not a lane), `sender_for_client` finds the
/// connection of a token's client id on whichever of two lanes holds it;
/// a reconnect with the same token (which replaces the old connection)
/// maps to the new connection, and stays mapped when the old one's
/// `disconnected` runs later; the id is forgotten when its connection
/// ends. An unknown id finds nothing.
#[test]
fn a_client_id_finds_its_connection_from_any_thread_and_follows_a_reconnect() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let mut sc = ServerConfig::new(config(), tokens());
    sc.lanes = 2;
    let (srv, srv_rx) = recorder(false);
    let server = Server::bind(rt.handles(), addr("127.0.0.1:0"), sc, move |_| Recorder {
        events: srv.events.clone(),
        echo: false,
    })
    .unwrap();
    let connect = |t: ConnectToken| {
        let (h, rx) = recorder(false);
        let mut cc = ClientConfig::new(config(), ClientSecurity::Token(t));
        cc.local = Some(addr("127.0.0.1:0"));
        (
            Client::connect(rt.next_reactor(), server.local_addr(), cc, h).unwrap(),
            rx,
        )
    };
    assert!(server.sender_for_client(7).is_none());
    let t = token(7);
    let (a, a_rx) = connect(t.clone());
    connected(&a_rx, "a connects");
    let a_conn = connected(&srv_rx, "the server sees a");
    let to_a = server.sender_for_client(7).expect("client 7 is connected");
    assert_eq!(to_a.connection(), a_conn);
    assert!(server.sender_for_client(8).is_none(), "no client 8");
    to_a.send(ORDERED, b"for seven").unwrap();
    assert_eq!(
        message(&a_rx, "a's message"),
        (ORDERED, b"for seven".to_vec())
    );
    assert_eq!(server.client_ids(), 1);

    // The same token again from the same IP: b replaces a.
    let (b, b_rx) = connect(t);
    connected(&b_rx, "b connects");
    let b_conn = connected(&srv_rx, "the server sees b");
    assert_ne!(b_conn, a_conn);
    let to_b = server.sender_for_client(7).expect("client 7 reconnected");
    assert_eq!(
        to_b.connection(),
        b_conn,
        "the id maps to the new connection"
    );
    match next(&a_rx, WAIT, "a replaced") {
        Seen::Disconnected(_, DisconnectReason::Remote { code, .. }, _) => {
            assert_eq!(code, CLOSE_REPLACED)
        }
        other => panic!("{other:?}"),
    }
    // The old connection's end, on the server, leaves the new one mapped.
    match next(&srv_rx, WAIT, "a's end on the server") {
        Seen::Disconnected(h, ..) => assert_eq!(h, a_conn),
        other => panic!("{other:?}"),
    }
    let to_b = server.sender_for_client(7).expect("b still mapped");
    assert_eq!(to_b.connection(), b_conn);
    to_b.send(ORDERED, b"for seven again").unwrap();
    assert_eq!(
        message(&b_rx, "b's message"),
        (ORDERED, b"for seven again".to_vec())
    );
    assert_eq!(server.client_ids(), 1, "one entry per live connection");
    // The stale Sender of a does not reach b.
    to_a.send(ORDERED, b"stale").unwrap();
    match next(&srv_rx, WAIT, "the stale send refused") {
        Seen::SendFailed(h, SendError::Closed) => assert_eq!(h, a_conn),
        other => panic!("{other:?}"),
    }

    b.stop();
    match next(&srv_rx, WAIT, "b's end on the server") {
        Seen::Disconnected(h, ..) => assert_eq!(h, b_conn),
        other => panic!("{other:?}"),
    }
    assert!(
        server.sender_for_client(7).is_none(),
        "forgotten at its end"
    );
    assert_eq!(server.client_ids(), 0);
    assert!(b_rx.try_iter().all(|s| !matches!(s, Seen::Message(..))));
    a.stop();
    server.stop();
    rt.stop().unwrap();
}

/// Insecure connections have no client id: nothing is recorded.
#[test]
fn an_insecure_server_records_no_client_id() {
    let (rt, server, _srv_rx, client, _cli_rx) = connected_pair(1);
    assert_eq!(server.client_ids(), 0);
    assert!(server.sender_for_client(0).is_none());
    client.stop();
    server.stop();
    rt.stop().unwrap();
}

/// A broadcast reaches every client on every lane once (one job per
/// lane); a bad channel or size is refused before anything is posted.
#[test]
fn a_broadcast_reaches_every_connection_of_every_lane() {
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let mut sc = ServerConfig::new(config(), ServerSecurity::Insecure);
    sc.lanes = 2;
    let (srv, srv_rx) = recorder(false);
    let server = Server::bind(rt.handles(), addr("127.0.0.1:0"), sc, move |_| Recorder {
        events: srv.events.clone(),
        echo: false,
    })
    .unwrap();
    // From four addresses: their handshakes go to the lanes of their IPs.
    let clients: Vec<_> = (1..=4)
        .map(|i| {
            let (h, rx) = recorder(false);
            let mut cc = ClientConfig::new(config(), ClientSecurity::Insecure);
            cc.local = Some(addr(&format!("127.0.0.{i}:0")));
            let c = Client::connect(rt.next_reactor(), server.local_addr(), cc, h).unwrap();
            connected(&rx, "a client connects");
            (c, rx)
        })
        .collect();
    for _ in 0..4 {
        connected(&srv_rx, "the server sees a client");
    }
    assert_eq!(server.broadcast(ORDERED, b"to all"), Ok(2));
    for (_, rx) in &clients {
        assert_eq!(message(rx, "the broadcast"), (ORDERED, b"to all".to_vec()));
    }
    assert!(matches!(
        server.broadcast(200, b"x"),
        Err(SendError::UnknownChannel { channel: 200, .. })
    ));
    let big = vec![0; config().max_message_size + 1];
    assert!(matches!(
        server.broadcast(ORDERED, &big),
        Err(SendError::MessageTooLarge { .. })
    ));
    let st = server.broadcast_stats();
    assert_eq!(
        (st.lanes_taken, st.lanes_refused, st.queued),
        (2, 0, 4),
        "{st:?}"
    );
    // Nothing more: each got it once.
    for (c, rx) in clients {
        c.stop();
        assert!(rx.try_iter().all(|s| !matches!(s, Seen::Message(..))));
    }
    server.stop();
    rt.stop().unwrap();
}

/// What connections refuse in a broadcast is counted (and reaches
/// `send_failed`): a second 40 KB message past a connection's 64 KiB
/// `max_send_buffer` (both broadcasts run before any acknowledgement can
/// come: the lane is held until both are posted), and a second
/// connection's copy past the server's 64 KiB send budget.
#[test]
fn what_a_broadcast_is_refused_is_counted() {
    let msg = vec![7u8; 40_000];
    for budget in [false, true] {
        let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
        let mut cfg = config();
        cfg.max_message_size = 64 * 1024;
        cfg.max_send_buffer = if budget { 1 << 20 } else { 64 * 1024 };
        let mut sc = ServerConfig::new(cfg.clone(), ServerSecurity::Insecure);
        if budget {
            sc.send_budget = 64 * 1024;
        }
        let (srv, srv_rx) = recorder(false);
        let mut srv = Some(srv);
        let server = Server::bind(rt.handles(), addr("127.0.0.1:0"), sc, move |_| {
            srv.take().expect("one lane")
        })
        .unwrap();
        let n = if budget { 2 } else { 1 };
        let clients: Vec<_> = (0..n)
            .map(|_| {
                let (h, rx) = recorder(false);
                let cc = ClientConfig::new(cfg.clone(), ClientSecurity::Insecure);
                let c = Client::connect(rt.next_reactor(), server.local_addr(), cc, h).unwrap();
                connected(&rx, "a client connects");
                (c, rx)
            })
            .collect();
        for _ in 0..n {
            connected(&srv_rx, "the server sees a client");
        }
        let (hold, held) = mpsc::channel::<()>();
        let (holding, lane_held) = mpsc::channel::<()>();
        assert!(server
            .post(0, move |_, _| {
                let _ = holding.send(());
                let _ = held.recv_timeout(WAIT);
            })
            .is_ok());
        lane_held.recv_timeout(WAIT).unwrap();
        let times = if budget { 1 } else { 2 };
        for _ in 0..times {
            assert_eq!(server.broadcast(ORDERED, &msg), Ok(1));
        }
        hold.send(()).unwrap();
        let failed = next(&srv_rx, WAIT, "the refusal");
        // The lane runs its jobs in order: once this one ran, the
        // broadcasts are counted.
        let (done, after) = mpsc::channel();
        assert!(server
            .post(0, move |_, _| {
                let _ = done.send(());
            })
            .is_ok());
        after.recv_timeout(WAIT).unwrap();
        let st = server.broadcast_stats();
        let got = (
            st.lanes_taken,
            st.lanes_refused,
            st.queued,
            st.backpressure,
            st.budget_spent,
            st.other_refused,
        );
        let want = (times, 0, 1, u64::from(!budget), u64::from(budget), 0);
        assert_eq!(got, want, "budget {budget}: {st:?}");
        match failed {
            Seen::SendFailed(_, SendError::BudgetSpent { .. }) if budget => {}
            Seen::SendFailed(_, SendError::Backpressure { .. }) if !budget => {}
            other => panic!("budget {budget}: {other:?}"),
        }
        for (c, rx) in clients {
            let _ = rx;
            c.stop();
        }
        server.stop();
        rt.stop().unwrap();
    }
}

/// What a server handler sees of a connection it closes, in the same
/// callback: `state` says Closing, `connections` still lists it,
/// `connected` does not.
/// (state before the close, listed by `connections`, listed by
/// `connected`, state after) from `connected`; the state in
/// `disconnected` on the second channel.
struct Closer(
    mpsc::Sender<(Option<State>, bool, bool, Option<State>)>,
    mpsc::Sender<Option<State>>,
);

impl Handler for Closer {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        let before = ctx.state(conn);
        ctx.close(conn, 4000, "bye");
        let (mut all, mut live) = (Vec::new(), Vec::new());
        ctx.connections(&mut all);
        ctx.connected(&mut live);
        let _ = self.0.send((
            before,
            all.contains(&conn),
            live.contains(&conn),
            ctx.state(conn),
        ));
    }
    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
    fn disconnected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, _: &DisconnectReason) {
        let _ = self.1.send(ctx.state(conn));
    }
}

#[test]
fn a_closing_connection_is_listed_by_connections_but_not_connected() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (tx, rx) = mpsc::channel();
    let (end_tx, end_rx) = mpsc::channel();
    let mut txs = Some((tx, end_tx));
    let server = Server::bind(
        rt.handles(),
        addr("127.0.0.1:0"),
        ServerConfig::new(config(), ServerSecurity::Insecure),
        move |_| {
            let (a, b) = txs.take().expect("one lane");
            Closer(a, b)
        },
    )
    .unwrap();
    let (cli, cli_rx) = recorder(false);
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(config(), ClientSecurity::Insecure),
        cli,
    )
    .unwrap();
    let seen = rx.recv_timeout(WAIT).expect("the server's connected");
    assert_eq!(
        seen,
        (Some(State::Connected), true, false, Some(State::Closing))
    );
    until_disconnected(&cli_rx, "client", |_| {});
    // In its `disconnected`, the connection is done closing.
    let st = end_rx
        .recv_timeout(WAIT)
        .expect("the server's disconnected");
    assert_eq!(st, Some(State::Closed));
    client.stop();
    server.stop();
    rt.stop().unwrap();
}

/// A client that ticks every 2 ms, asking for the next tick from each
/// one (and once more from `disconnected`), reporting each tick and its
/// end.
struct Ticker(mpsc::Sender<&'static str>);

impl Handler for Ticker {
    fn connected(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle) {
        ctx.tick_at(ctx.now());
    }
    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let _ = self.0.send("tick");
        ctx.tick_at(ctx.now() + Duration::from_millis(2));
    }
    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
    fn disconnected(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle, _: &DisconnectReason) {
        let _ = self.0.send("disconnected");
        ctx.tick_at(ctx.now());
    }
}

/// Once a client's `disconnected` has run, its tick never runs again,
/// even though the handler kept asking (from its last tick, and from
/// `disconnected`).
#[test]
fn a_client_never_ticks_after_its_disconnected() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (srv, srv_rx) = recorder(false);
    let mut srv = Some(srv);
    let server = Server::bind(
        rt.handles(),
        addr("127.0.0.1:0"),
        ServerConfig::new(config(), ServerSecurity::Insecure),
        move |_| srv.take().expect("one lane"),
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(config(), ClientSecurity::Insecure),
        Ticker(tx),
    )
    .unwrap();
    let Seen::Connected(_, Some(sender)) = next(&srv_rx, WAIT, "the server's connected") else {
        panic!("no sender");
    };
    // A few ticks, then the server ends the connection.
    for _ in 0..3 {
        assert_eq!(rx.recv_timeout(WAIT), Ok("tick"));
    }
    sender.close(4000, "kicked").unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok("disconnected") => break,
            Ok(_) => {}
            Err(e) => panic!("no disconnected: {e}"),
        }
    }
    // 25 periods: an unstopped tick would have run many times.
    let after: Vec<_> = rx
        .recv_timeout(Duration::from_millis(50))
        .into_iter()
        .collect();
    assert!(after.is_empty(), "after disconnected: {after:?}");
    client.stop();
    server.stop();
    rt.stop().unwrap();
}

/// `ServerConfig::new` gives a server's connections the ack delay of a
/// ticking server when the config has the default, and keeps any other.
#[test]
fn a_server_acks_at_a_game_tick_by_default_and_keeps_a_value_given() {
    let sc = ServerConfig::new(config(), ServerSecurity::Insecure);
    assert_eq!(sc.connection.max_ack_delay, SERVER_MAX_ACK_DELAY);
    assert_eq!(SERVER_MAX_ACK_DELAY, Duration::from_millis(25));
    let mut mine: Config = config();
    mine.max_ack_delay = Duration::from_millis(7);
    let sc = ServerConfig::new(mine, ServerSecurity::Insecure);
    assert_eq!(sc.connection.max_ack_delay, Duration::from_millis(7));
    // Clients keep the protocol's default.
    let cc = ClientConfig::new(config(), ClientSecurity::Insecure);
    assert_eq!(cc.connection.max_ack_delay, Duration::from_millis(5));
}
