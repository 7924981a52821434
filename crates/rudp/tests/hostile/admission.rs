//! Admission: one live connection per connect token, and limits per source
//! address on connections and on the handshake rate, so that an attacker
//! holding one token, or one host with 64 sockets, cannot fill the
//! connection table. Sans-IO (an Endpoint and client Connections with a
//! virtual clock), then once through a real Server.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{addr, one_channel, public_addr, KEY, T0};
use keel_rudp::{
    Admission, ClientSecurity, ConfigError, ConnectToken, DisconnectReason, ReplayCache,
    ServerSecurity, State, TokenMinter, TokenSpec, CLOSE_REPLACED, REFUSE_ADDRESS_LIMIT,
    REFUSE_FULL, REFUSE_RATE_LIMIT, REFUSE_TOKEN,
};
use keel_rudp_proto::wire::{Header, Reader};
use keel_rudp_proto::{Connection, Event};
use keel_rudp_proto::{Endpoint, EndpointConfig, Handled};

fn tokens() -> ServerSecurity {
    ServerSecurity::Tokens {
        key: KEY,
        public_addrs: vec![public_addr()],
    }
}

/// A token for [`T0`], the sans-IO server's clock.
fn token(client_id: u64) -> ConnectToken {
    token_expiring(client_id, T0 + 120)
}

/// A token for the real clock (what a real Server reads).
fn live_token(client_id: u64) -> ConnectToken {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    token_expiring(client_id, now + 60)
}

fn token_expiring(client_id: u64, expires_at: u64) -> ConnectToken {
    TokenMinter::new(KEY)
        .mint(&TokenSpec {
            server_addrs: vec![public_addr()],
            expires_at,
            client_id,
            timeout_secs: 10,
            user_data: Vec::new(),
        })
        .unwrap()
}

/// A server endpoint and the clients talking to it, on a virtual clock.
/// Server datagrams reach the client at their address holding their
/// connection ID (several clients may share an address: one attacker's
/// socket).
struct World {
    now: Instant,
    server: Endpoint,
    clients: Vec<(SocketAddr, Connection)>,
    /// Every event the server's side gave, in order.
    server_events: Vec<Event>,
    /// The most connections the server held at once, and the most of them
    /// connected at once.
    peak_held: usize,
    peak_connected: usize,
}

impl World {
    fn new(security: ServerSecurity, max_connections: usize, admission: Admission) -> World {
        let mut ec = EndpointConfig::new(0, [9; 32], one_channel(), security);
        ec.max_connections = max_connections;
        ec.admission = admission;
        World::with(ec)
    }

    /// A world whose server endpoint has these settings (its clock starts
    /// at T0).
    fn with(mut ec: EndpointConfig) -> World {
        let now = Instant::now();
        ec.unix_time_at_start = T0;
        World {
            now,
            server: Endpoint::new(ec, now).unwrap(),
            clients: Vec::new(),
            server_events: Vec::new(),
            peak_held: 0,
            peak_connected: 0,
        }
    }

    /// Connects a new client from `from`, `nonce` its hello nonce: its
    /// first event (Connected, or the REFUSE as Disconnected).
    fn connect(&mut self, from: SocketAddr, security: ClientSecurity, nonce: u128) -> Event {
        let c =
            Connection::connect(one_channel(), security, nonce.to_be_bytes(), self.now).unwrap();
        self.clients.push((from, c));
        let i = self.clients.len() - 1;
        for _ in 0..4 {
            self.pump();
            if let Some(e) = self.clients[i].1.poll_event() {
                return e;
            }
        }
        panic!("client {i} from {from} got no answer");
    }

    /// Delivers every datagram either side has, until none is left.
    fn pump(&mut self) {
        let (mut buf, mut reply) = (vec![0u8; 1500], vec![0u8; 1500]);
        loop {
            let mut moved = false;
            for (from, c) in &mut self.clients {
                while let Some(n) = c.poll_transmit(self.now, &mut buf) {
                    moved = true;
                    match self.server.handle(self.now, *from, &buf[..n], &mut reply) {
                        Handled::Reply(m) | Handled::Accepted(_, m) => {
                            assert!(m <= n, "a reply of {m} bytes to {n}");
                            c.handle_datagram(self.now, &reply[..m]);
                        }
                        _ => {}
                    }
                }
            }
            while let Some((_, to, n)) = self.server.poll_transmit(self.now, &mut buf) {
                moved = true;
                let Ok(Header::Short { cid, .. }) = Header::decode(&mut Reader::new(&buf[..n]))
                else {
                    panic!("the server sent a long header outside a reply");
                };
                if let Some((_, c)) = self
                    .clients
                    .iter_mut()
                    .find(|(a, c)| *a == to && c.connection_id() == cid)
                {
                    c.handle_datagram(self.now, &buf[..n]);
                }
            }
            while let Some((_, e)) = self.server.poll_event() {
                self.server_events.push(e);
            }
            let held = self.server.connection_count();
            let connected = self
                .server
                .handles()
                .filter(|&h| self.server.connection(h).unwrap().state() == State::Connected)
                .count();
            self.peak_held = self.peak_held.max(held);
            self.peak_connected = self.peak_connected.max(connected);
            if !moved {
                return;
            }
        }
    }

    /// Moves the clock on by `d`, running every timer due.
    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.server.poll_timeout();
        self.server.handle_timeout(self.now);
        for (_, c) in &mut self.clients {
            if c.poll_timeout().is_some_and(|t| t <= self.now) {
                c.handle_timeout(self.now);
            }
        }
        self.pump();
    }

    /// How many server-side events are a disconnect with `code`.
    fn server_closes(&self, code: u64) -> usize {
        self.server_events
            .iter()
            .filter(|e| {
                matches!(e, Event::Disconnected(DisconnectReason::Local { code: c, .. }) if *c == code)
            })
            .count()
    }
}

fn code_of(e: &Event) -> Option<u64> {
    match e {
        Event::Disconnected(DisconnectReason::Remote { code, .. }) => Some(*code),
        _ => None,
    }
}

/// An attacker with one valid token, from one address, sends hello after
/// hello with fresh nonces, 200 in one second. It holds at most one live
/// connection (each new one replaces the last), and no more slots than
/// its address's limit; the table (64 here, so filling it is cheap) never
/// fills, and a real player from another address connects at once.
#[test]
fn one_token_from_one_address_holds_one_live_connection() {
    let limit = Admission::default().max_connections_per_ip;
    let mut w = World::new(tokens(), 64, Admission::default());
    let attacker = addr("192.0.2.66:6666");
    let stolen = token(666);
    let (mut connected, mut refused) = (0, 0);
    for i in 0..200u128 {
        let e = w.connect(attacker, ClientSecurity::Token(stolen.clone()), i);
        match code_of(&e) {
            None => {
                assert_eq!(e, Event::Connected);
                connected += 1;
            }
            Some(REFUSE_ADDRESS_LIMIT | REFUSE_RATE_LIMIT) => refused += 1,
            Some(other) => panic!("attempt {i}: refused with code {other}"),
        }
        w.advance(Duration::from_millis(5));
    }
    let st = w.server.stats();
    println!(
        "one token, one address, 200 hellos in 1 s: {connected} connected, {refused} refused, \
         peak {} held / {} live, {st:?}",
        w.peak_held, w.peak_connected
    );
    assert_eq!(w.peak_connected, 1, "one live connection per token");
    assert!(w.peak_held <= limit, "{} slots held", w.peak_held);
    assert_eq!(connected + refused, 200);
    assert_eq!(st.connections_created, connected);
    assert_eq!(st.connections_replaced, connected - 1);
    assert_eq!(st.refused_rate_limit + st.refused_address_limit, refused);
    assert!(st.refused_rate_limit > 0);
    // Each replaced connection: the server's side saw it end with
    // CLOSE_REPLACED, and so did the attacker's client that held it.
    assert_eq!(w.server_closes(CLOSE_REPLACED) as u64, connected - 1);
    let told = w
        .clients
        .iter_mut()
        .filter_map(|(_, c)| c.poll_event())
        .filter(|e| code_of(e) == Some(CLOSE_REPLACED))
        .count();
    assert_eq!(told as u64, connected - 1);

    // The real player, another token from another address, gets in at once
    // (one round trip: hello, retry, hello, accept).
    let e = w.connect(
        addr("192.0.2.99:7000"),
        ClientSecurity::Token(token(1)),
        1000,
    );
    assert_eq!(e, Event::Connected);
}

/// A client that crashed comes back with the same token from a new port of
/// the same IP: the new connection replaces the old one, which is closed
/// with CLOSE_REPLACED. The same token from another IP is still refused as
/// replayed.
#[test]
fn a_reconnect_with_the_same_token_replaces_the_old_connection() {
    let mut w = World::new(tokens(), 64, Admission::default());
    let t = token(7);
    let first = addr("192.0.2.7:5000");
    assert_eq!(
        w.connect(first, ClientSecurity::Token(t.clone()), 1),
        Event::Connected
    );
    assert_eq!(
        w.connect(addr("192.0.2.7:5001"), ClientSecurity::Token(t.clone()), 2),
        Event::Connected
    );
    let reason = match w.clients[0].1.poll_event() {
        Some(Event::Disconnected(DisconnectReason::Remote { code, reason })) => {
            assert_eq!(code, CLOSE_REPLACED);
            reason
        }
        other => panic!("the old client got {other:?}"),
    };
    assert_eq!(
        reason,
        "replaced by a new connection with the same connect token"
    );
    assert_eq!(w.server_closes(CLOSE_REPLACED), 1);
    assert_eq!(w.server.stats().connections_replaced, 1);
    match code_of(&w.connect(addr("192.0.2.8:5000"), ClientSecurity::Token(t), 3)) {
        Some(REFUSE_TOKEN) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(w.server.stats().tokens_replayed, 1);
    // The old connection goes once its closing is over; one is left.
    w.advance(Duration::from_secs(5));
    assert_eq!(w.server.connection_count(), 1);
}

/// Two endpoints given one replay cache (two lanes of a server) refuse a
/// token the other took for another IP; an endpoint with a cache of its
/// own does not know it. The cache stays bound after the connection is
/// gone, until the token expires.
#[test]
fn endpoints_sharing_a_replay_cache_refuse_a_token_taken_on_the_other() {
    let shared = ReplayCache::new();
    let lane = |i: u8, cache: &ReplayCache| {
        let mut ec = EndpointConfig::new(i, [9; 32], one_channel(), tokens());
        ec.replay_cache = cache.clone();
        World::with(ec)
    };
    let (mut a, mut b) = (lane(0, &shared), lane(1, &shared));
    let t = token(5);
    let e = a.connect(addr("192.0.2.5:1000"), ClientSecurity::Token(t.clone()), 1);
    assert_eq!(e, Event::Connected);
    assert_eq!(shared.len(), 1);
    let e = b.connect(addr("192.0.2.6:1000"), ClientSecurity::Token(t.clone()), 2);
    assert_eq!(code_of(&e), Some(REFUSE_TOKEN));
    assert_eq!(b.server.stats().tokens_replayed, 1);
    // The connection leaves; the token stays bound to its IP.
    a.clients[0].1.close(a.now, 0, "bye");
    a.pump();
    for _ in 0..5 {
        a.advance(Duration::from_secs(1));
    }
    assert_eq!(a.server.connection_count(), 0);
    let e = b.connect(addr("192.0.2.6:1001"), ClientSecurity::Token(t.clone()), 3);
    assert_eq!(code_of(&e), Some(REFUSE_TOKEN));
    let e = b.connect(addr("192.0.2.5:1001"), ClientSecurity::Token(t.clone()), 4);
    assert_eq!(e, Event::Connected);
    // Its own cache: the other endpoints' tokens are unknown to it.
    let mut c = lane(2, &ReplayCache::new());
    let e = c.connect(addr("192.0.2.6:1000"), ClientSecurity::Token(t), 5);
    assert_eq!(e, Event::Connected);
    assert_eq!(shared.len(), 1);
}

/// Insecure mode: one host with 64 sockets (64 ports of one IP) opens 4
/// connections on each, 256 in 2 s, against a table of 256. It gets its
/// address's share and no more; a player from another address connects.
#[test]
fn sixty_four_sockets_of_one_host_get_one_address_share() {
    let limit = Admission::default().max_connections_per_ip;
    let mut w = World::new(ServerSecurity::Insecure, 256, Admission::default());
    let mut connected = 0u64;
    let mut nonce = 0u128;
    for round in 0..4 {
        for port in 0..64u16 {
            nonce += 1;
            let from = SocketAddr::new(addr("192.0.2.66:0").ip(), 20_000 + port);
            let e = w.connect(from, ClientSecurity::Insecure, nonce);
            match code_of(&e) {
                None => connected += 1,
                Some(REFUSE_ADDRESS_LIMIT | REFUSE_RATE_LIMIT) => {}
                Some(c) => panic!("round {round}, port {port}: code {c}"),
            }
            w.advance(Duration::from_millis(8));
        }
    }
    let st = w.server.stats();
    println!(
        "64 sockets x 4 in 2 s: {connected} connected, {} refused at the address limit, \
         {} at the rate limit",
        st.refused_address_limit, st.refused_rate_limit
    );
    assert_eq!(connected, limit as u64);
    assert!(w.peak_held <= limit);
    assert_eq!(
        st.refused_address_limit + st.refused_rate_limit,
        256 - limit as u64
    );
    let e = w.connect(addr("192.0.2.99:7000"), ClientSecurity::Insecure, 9999);
    assert_eq!(e, Event::Connected);
    assert_eq!(w.server.connection_count(), limit + 1);
}

/// The handshake rate: a burst, then the sustained rate, per address;
/// another address has its own bucket. Hellos with bad or no cookies from
/// the victim's address (a spoofer who cannot receive there) are answered
/// by a RETRY and spend none of the victim's handshakes.
#[test]
fn the_handshake_rate_limits_validated_sources_only() {
    let a = Admission {
        max_connections_per_ip: 1000,
        handshake_burst: 5,
        handshakes_per_sec: 2,
        ..Admission::default()
    };
    let mut w = World::new(ServerSecurity::Insecure, 4096, a);
    let victim = addr("192.0.2.10:1000").ip();

    // A spoofer sends 10,000 hellos "from" the victim; it never sees the
    // RETRYs, so it never returns a cookie.
    let mut c =
        Connection::connect(one_channel(), ClientSecurity::Insecure, [0xee; 16], w.now).unwrap();
    let mut hello = vec![0u8; 1500];
    let n = c.poll_transmit(w.now, &mut hello).unwrap();
    let mut reply = vec![0u8; 1500];
    for i in 0..10_000u16 {
        let from = SocketAddr::new(victim, 1024 + i);
        match w.server.handle(w.now, from, &hello[..n], &mut reply) {
            Handled::Reply(m) => assert!(m <= n),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(w.server.stats().retries_sent, 10_000);
    assert_eq!(w.server.stats().refused_rate_limit, 0);

    // The victim's own burst is whole.
    let mut nonce = 0u128;
    let mut attempt = |w: &mut World, ip| {
        nonce += 1;
        w.connect(SocketAddr::new(ip, 5000), ClientSecurity::Insecure, nonce)
    };
    for _ in 0..5 {
        assert_eq!(attempt(&mut w, victim), Event::Connected);
    }
    let e = attempt(&mut w, victim);
    match e {
        Event::Disconnected(DisconnectReason::Remote { code, reason }) => {
            assert_eq!(code, REFUSE_RATE_LIMIT);
            assert_eq!(
                reason,
                "too many handshakes from this address; try again later"
            );
        }
        other => panic!("{other:?}"),
    }
    // Another address is not held back.
    assert_eq!(attempt(&mut w, addr("192.0.2.11:1").ip()), Event::Connected);
    // Half a second at 2 a second: one more handshake, not two.
    w.now += Duration::from_millis(500);
    assert_eq!(attempt(&mut w, victim), Event::Connected);
    assert_eq!(code_of(&attempt(&mut w, victim)), Some(REFUSE_RATE_LIMIT));
    assert_eq!(w.server.stats().refused_rate_limit, 2);
}

/// The address limit counts an IP, whatever its ports; at it a hello gets
/// REFUSE_ADDRESS_LIMIT with its reason, and a freed slot lets the next in.
/// A full table still answers REFUSE_FULL.
#[test]
fn the_address_limit_counts_ips_not_ports() {
    let a = Admission {
        max_connections_per_ip: 3,
        ..Admission::default()
    };
    let mut w = World::new(ServerSecurity::Insecure, 5, a);
    for port in 1..=3 {
        let from = SocketAddr::new(addr("192.0.2.20:0").ip(), port);
        assert_eq!(
            w.connect(from, ClientSecurity::Insecure, u128::from(port)),
            Event::Connected
        );
    }
    match w.connect(addr("192.0.2.20:4"), ClientSecurity::Insecure, 4) {
        Event::Disconnected(DisconnectReason::Remote { code, reason }) => {
            assert_eq!(code, REFUSE_ADDRESS_LIMIT);
            assert_eq!(reason, "too many connections from this address");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.server.stats().refused_address_limit, 1);
    // One of the three leaves; once it is removed, the address may connect
    // again.
    w.clients[0].1.close(w.now, 0, "bye");
    w.pump();
    for _ in 0..5 {
        w.advance(Duration::from_secs(1));
    }
    assert_eq!(w.server.connection_count(), 2);
    assert_eq!(
        w.connect(addr("192.0.2.20:5"), ClientSecurity::Insecure, 5),
        Event::Connected
    );
    // Two more addresses fill the table of 5.
    assert_eq!(
        w.connect(addr("192.0.2.21:1"), ClientSecurity::Insecure, 6),
        Event::Connected
    );
    assert_eq!(
        w.connect(addr("192.0.2.22:1"), ClientSecurity::Insecure, 7),
        Event::Connected
    );
    let e = w.connect(addr("192.0.2.23:1"), ClientSecurity::Insecure, 8);
    assert_eq!(code_of(&e), Some(REFUSE_FULL));
}

#[test]
fn admission_settings_out_of_range_are_refused_by_name() {
    type Spoil = fn(&mut Admission);
    let cases: [(Spoil, &str); 5] = [
        (
            |a| a.max_connections_per_ip = 0,
            "max_connections_per_ip: 0, 1 or more accepted",
        ),
        (
            |a| a.ipv6_prefix_len = 0,
            "ipv6_prefix_len: 0, 32 to 128 accepted",
        ),
        (
            |a| a.ipv6_prefix_len = 129,
            "ipv6_prefix_len: 129, 32 to 128 accepted",
        ),
        (
            |a| a.handshakes_per_sec = 0,
            "handshakes_per_sec: 0, 1 or more accepted",
        ),
        (
            |a| a.rate_table_size = 0,
            "rate_table_size: 0, 1 or more accepted",
        ),
    ];
    for (spoil, message) in cases {
        let mut ec = EndpointConfig::new(0, [9; 32], one_channel(), ServerSecurity::Insecure);
        spoil(&mut ec.admission);
        let e = Endpoint::new(ec, Instant::now()).unwrap_err();
        assert!(matches!(e, ConfigError::Admission { .. }), "{e:?}");
        assert_eq!(e.to_string(), message);
    }
    Admission::default().validate().unwrap();
    Admission::OFF.validate().unwrap();
}

/// Through a real Server on loopback: two clients of one host and one
/// token; the second replaces the first, whose client and whose server
/// handler both see CLOSE_REPLACED. Once the replaced connection is gone
/// (its close acknowledged), a third client of that host gets in, and a
/// fourth, past the address limit of 2, is refused; a client from
/// 127.0.0.2, another address, gets in.
#[test]
fn through_a_server_a_token_holds_one_connection_and_an_address_its_share() {
    use crate::common::*;
    use keel_reactor::{IoModel, Runtime};
    use keel_rudp::{Client, ClientConfig, Server, ServerConfig};

    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let mut sc = ServerConfig::new(config(), tokens());
    sc.admission.max_connections_per_ip = 2;
    let (srv, srv_rx) = recorder(false);
    let mut srv = Some(srv);
    let server = Server::bind(rt.handles(), addr("127.0.0.1:0"), sc, move |_| {
        srv.take().expect("one lane")
    })
    .unwrap();
    // Tokens here carry the server's unix time, not the test's T0.
    let mint = live_token;
    let connect = |t: ConnectToken, local: &str| {
        let (h, rx) = recorder(false);
        let mut cc = ClientConfig::new(config(), ClientSecurity::Token(t));
        cc.local = Some(addr(local));
        let c = Client::connect(rt.next_reactor(), server.local_addr(), cc, h).unwrap();
        (c, rx)
    };
    let wait = Duration::from_secs(5);
    let t = mint(1);
    let (a, a_rx) = connect(t.clone(), "127.0.0.1:0");
    assert!(matches!(
        next(&a_rx, wait, "a connects"),
        Seen::Connected(..)
    ));
    let (b, b_rx) = connect(t, "127.0.0.1:0");
    assert!(matches!(
        next(&b_rx, wait, "b connects"),
        Seen::Connected(..)
    ));
    match next(&a_rx, wait, "a replaced") {
        Seen::Disconnected(_, DisconnectReason::Remote { code, .. }, _) => {
            assert_eq!(code, CLOSE_REPLACED)
        }
        other => panic!("{other:?}"),
    }
    let seen = collect_until(&srv_rx, wait, "the server's disconnect", |s| {
        matches!(s, Seen::Disconnected(..))
    });
    assert!(
        matches!(
            seen.last(),
            Some(Seen::Disconnected(
                _,
                DisconnectReason::Local {
                    code: CLOSE_REPLACED,
                    ..
                },
                _
            ))
        ),
        "{seen:?}"
    );
    // The server's disconnect comes when the close is done, in the lane
    // turn that then removes the connection: the address holds b alone.
    let (c, c_rx) = connect(mint(2), "127.0.0.1:0");
    assert!(matches!(
        next(&c_rx, wait, "c connects"),
        Seen::Connected(..)
    ));
    let (e, e_rx) = connect(mint(4), "127.0.0.1:0");
    match next(&e_rx, wait, "e refused") {
        Seen::Disconnected(_, DisconnectReason::Remote { code, .. }, _) => {
            assert_eq!(code, REFUSE_ADDRESS_LIMIT)
        }
        other => panic!("{other:?}"),
    }
    let (d, d_rx) = connect(mint(3), "127.0.0.2:0");
    assert!(matches!(
        next(&d_rx, wait, "d connects"),
        Seen::Connected(..)
    ));
    let st = server.stats();
    assert_eq!(
        (st.connections_replaced, st.refused_address_limit),
        (1, 1),
        "{st:?}"
    );
    for x in [a, b, c, d, e] {
        x.stop();
    }
    server.stop();
    rt.stop().unwrap();
}

/// Server::bind names a bad admission setting.
#[test]
fn server_bind_names_a_bad_admission_setting() {
    use keel_reactor::{IoModel, Runtime};
    use keel_rudp::{Server, ServerConfig};

    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let mut sc = ServerConfig::new(one_channel(), ServerSecurity::Insecure);
    sc.admission.handshake_burst = 0;
    let e = Server::bind(rt.handles(), addr("127.0.0.1:0"), sc, |_| {
        crate::common::recorder(false).0
    })
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        e.to_string(),
        "admission: handshake_burst: 0, 1 or more accepted"
    );
    rt.stop().unwrap();
}

/// A 4-lane server on loopback: what the lanes hold together, however the
/// kernel would have spread the sockets. `events` gets every lane's events.
mod lanes {
    use super::*;
    use crate::common::*;
    use keel_reactor::{IoModel, Runtime};
    use keel_rudp::{Client, ClientConfig, Server, ServerConfig};
    use std::sync::mpsc::Receiver;

    pub const LANES: usize = 4;
    pub const WAIT: Duration = Duration::from_secs(5);

    pub struct Bed {
        pub rt: Runtime,
        pub server: Server<Recorder>,
        pub events: Receiver<Seen>,
    }

    pub fn bed(security: ServerSecurity) -> Bed {
        let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
        let mut sc = ServerConfig::new(config(), security);
        sc.lanes = LANES;
        let (srv, events) = recorder(false);
        let server = Server::bind(rt.handles(), addr("127.0.0.1:0"), sc, |_| Recorder {
            events: srv.events.clone(),
            echo: false,
        })
        .unwrap();
        Bed { rt, server, events }
    }

    /// A token for the server's clock.
    pub fn mint(id: u64) -> ConnectToken {
        live_token(id)
    }

    /// A client from a fresh port of `ip` and its first event: connected
    /// (None) or the code it was refused with.
    pub fn connect(
        bed: &Bed,
        security: ClientSecurity,
        ip: &str,
    ) -> (Client<Recorder>, Receiver<Seen>, Option<u64>) {
        let (h, rx) = recorder(false);
        let mut cc = ClientConfig::new(config(), security);
        cc.local = Some(SocketAddr::new(ip.parse().unwrap(), 0));
        let c = Client::connect(bed.rt.next_reactor(), bed.server.local_addr(), cc, h).unwrap();
        let outcome = match next(&rx, WAIT, "the handshake's outcome") {
            Seen::Connected(..) => None,
            Seen::Disconnected(_, DisconnectReason::Remote { code, .. }, _) => Some(code),
            other => panic!("{other:?}"),
        };
        (c, rx, outcome)
    }

    /// Lanes that created a connection.
    pub fn lanes_used(server: &Server<Recorder>) -> usize {
        (0..LANES)
            .filter(|&i| server.lane_stats(i).unwrap().connections_created > 0)
            .count()
    }

    pub fn stop(bed: Bed, clients: Vec<Client<Recorder>>) {
        for c in clients {
            c.stop();
        }
        bed.server.stop();
        bed.rt.stop().unwrap();
    }
}

/// One token used by 8 clients from 8 ports of 127.0.0.1, one after the
/// other, against 4 lanes: each replaces the one before, so one is live at
/// the end (on the old code, the kernel's hash spread them over lanes that
/// each kept one). The token is refused from 8 ports of 127.0.0.2 (every
/// lane knows it is taken); a player with its own token from 127.0.0.3
/// connects.
#[test]
fn on_four_lanes_a_token_holds_one_live_connection_and_is_refused_from_another_ip() {
    use crate::common::Seen;
    use lanes::*;
    let bed = bed(tokens());
    let t = mint(1);
    let mut clients = Vec::new();
    let mut receivers = Vec::new();
    for i in 0..8 {
        let (c, rx, refused) = connect(&bed, ClientSecurity::Token(t.clone()), "127.0.0.1");
        assert_eq!(refused, None, "client {i} from 127.0.0.1");
        clients.push(c);
        receivers.push(rx);
    }
    // Every client but the last is told it was replaced.
    for (i, rx) in receivers[..7].iter().enumerate() {
        match crate::common::next(rx, WAIT, "the replaced client's CLOSE") {
            Seen::Disconnected(_, DisconnectReason::Remote { code, .. }, _) => {
                assert_eq!(code, CLOSE_REPLACED, "client {i}")
            }
            other => panic!("client {i}: {other:?}"),
        }
    }
    // The server's handlers saw 8 connect and 7 replaced: 1 live.
    let (mut connected, mut replaced) = (0, 0);
    crate::common::collect_until(&bed.events, WAIT, "8 connected, 7 replaced", |s| {
        match s {
            Seen::Connected(..) => connected += 1,
            Seen::Disconnected(_, DisconnectReason::Local { code, .. }, _) => {
                assert_eq!(*code, CLOSE_REPLACED);
                replaced += 1;
            }
            other => panic!("{other:?}"),
        }
        (connected, replaced) == (8, 7)
    });
    assert_eq!(bed.server.stats().connections_replaced, 7);
    assert_eq!(lanes_used(&bed.server), 1, "one address, one lane");
    // From another IP the token is refused, whichever lane its port hits.
    for i in 0..8 {
        let (c, _, refused) = connect(&bed, ClientSecurity::Token(t.clone()), "127.0.0.2");
        assert_eq!(refused, Some(REFUSE_TOKEN), "try {i} from 127.0.0.2");
        clients.push(c);
    }
    assert_eq!(bed.server.stats().tokens_replayed, 8);
    let (c, _, refused) = connect(&bed, ClientSecurity::Token(mint(2)), "127.0.0.3");
    assert_eq!(refused, None, "a player from 127.0.0.3");
    clients.push(c);
    // The live one is still live: the last client has no event.
    assert!(receivers[7].try_recv().is_err());
    stop(bed, clients);
}

/// Insecure mode, 4 lanes: 64 sockets of 127.0.0.1 get one address's
/// share in all (16 by default), not one per lane, all on one lane; a
/// player from 127.0.0.2 connects.
#[test]
fn on_four_lanes_sixty_four_sockets_of_one_host_get_one_address_share() {
    use lanes::*;
    let limit = Admission::default().max_connections_per_ip;
    let bed = bed(ServerSecurity::Insecure);
    let mut clients = Vec::new();
    let mut connected = 0;
    for i in 0..64 {
        let (c, _, refused) = connect(&bed, ClientSecurity::Insecure, "127.0.0.1");
        match refused {
            None => connected += 1,
            Some(REFUSE_ADDRESS_LIMIT | REFUSE_RATE_LIMIT) => {}
            Some(code) => panic!("socket {i}: refused with {code}"),
        }
        clients.push(c);
    }
    let st = bed.server.stats();
    assert_eq!(connected, limit, "{st:?}");
    assert_eq!(st.connections_created, limit as u64);
    assert_eq!(
        st.refused_address_limit + st.refused_rate_limit,
        64 - limit as u64
    );
    assert_eq!(lanes_used(&bed.server), 1, "one address, one lane");
    let (c, _, refused) = connect(&bed, ClientSecurity::Insecure, "127.0.0.2");
    assert_eq!(refused, None, "a player from 127.0.0.2");
    clients.push(c);
    stop(bed, clients);
}
