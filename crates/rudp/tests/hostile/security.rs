//! Connect tokens, sealed packets and the replay window, through an
//! Endpoint and a client Connection exchanging datagrams directly (sans-IO,
//! virtual clock, deterministic).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{addr, one_channel, public_addr, KEY, T0};
use keel_rudp_proto::wire::{Frame, Header, LongType, Writer};
use keel_rudp_proto::{
    ClientSecurity, ConnectToken, Connection, ConnectionHandle, DisconnectReason, Endpoint,
    EndpointConfig, EndpointStats, Event, Handled, ServerSecurity, TokenMinter, TokenSpec,
    REFUSE_SECURITY_MISMATCH, REFUSE_TOKEN,
};

fn server(now: Instant, security: ServerSecurity) -> Endpoint {
    let mut ec = EndpointConfig::new(0, [9; 32], one_channel(), security);
    ec.unix_time_at_start = T0;
    Endpoint::new(ec, now).unwrap()
}

fn secure_server(now: Instant) -> Endpoint {
    server(
        now,
        ServerSecurity::Tokens {
            key: KEY,
            public_addrs: vec![public_addr()],
        },
    )
}

fn spec() -> TokenSpec {
    TokenSpec {
        server_addrs: vec![addr("198.51.100.1:4000"), public_addr()],
        expires_at: T0 + 60,
        client_id: 4242,
        timeout_secs: 10,
        user_data: b"team=red".to_vec(),
    }
}

fn token(key: [u8; 32], spec: &TokenSpec) -> ConnectToken {
    TokenMinter::new(key).mint(spec).unwrap()
}

/// Runs the handshake of `client` from `from` against `server`, checking
/// that no reply before the connection exists is larger than its hello.
/// Returns the client's first event and the server's new connection.
fn handshake(
    now: Instant,
    server: &mut Endpoint,
    client: &mut Connection,
    from: SocketAddr,
) -> (Option<Event>, Option<ConnectionHandle>) {
    let (mut buf, mut reply) = (vec![0u8; 1500], vec![0u8; 1500]);
    let mut accepted = None;
    for _ in 0..3 {
        let Some(n) = client.poll_transmit(now, &mut buf) else {
            break;
        };
        match server.handle(now, from, &buf[..n], &mut reply) {
            Handled::Reply(m) => {
                assert!(m <= n, "reply of {m} bytes to a hello of {n}");
                client.handle_datagram(now, &reply[..m]);
            }
            Handled::Accepted(h, m) => {
                assert!(m <= n);
                accepted = Some(h);
                client.handle_datagram(now, &reply[..m]);
            }
            other => panic!("hello answered with {other:?}"),
        }
        if let Some(e) = client.poll_event() {
            return (Some(e), accepted);
        }
    }
    (None, accepted)
}

fn connect(token: ConnectToken, nonce: u8, now: Instant) -> Connection {
    Connection::connect(
        one_channel(),
        ClientSecurity::Token(token),
        [nonce; 16],
        now,
    )
    .unwrap()
}

fn refused(e: Option<Event>) -> (u64, String) {
    match e {
        Some(Event::Disconnected(DisconnectReason::Remote { code, reason })) => (code, reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_valid_token_connects_and_every_packet_is_sealed() {
    let now = Instant::now();
    let mut s = secure_server(now);
    let mut c = connect(token(KEY, &spec()), 1, now);
    let from = addr("192.0.2.50:5000");
    let (e, h) = handshake(now, &mut s, &mut c, from);
    assert_eq!(e, Some(Event::Connected));
    let h = h.unwrap();
    assert!(c.is_secure());
    let conn = s.connection(h).unwrap();
    assert!(conn.is_secure());
    let claims = conn.token_claims().unwrap();
    assert_eq!(claims.client_id, 4242);
    assert_eq!(claims.user_data, b"team=red");

    // A message goes through, and its bytes never appear on the wire.
    let secret = b"the-secret-move-of-player-4242";
    c.send(0, secret).unwrap();
    let mut buf = vec![0u8; 1500];
    let mut sent = 0;
    while let Some(n) = c.poll_transmit(now, &mut buf) {
        assert!(
            !buf[..n].windows(secret.len()).any(|w| w == secret),
            "plaintext on the wire"
        );
        s.handle(now, from, &buf[..n], &mut [0u8; 1500]);
        sent += 1;
    }
    assert!(sent > 0);
    let mut got = Vec::new();
    while let Some((_, e)) = s.poll_event() {
        if let Event::Message { data, .. } = e {
            got.push(data);
        }
    }
    assert_eq!(got, vec![secret.to_vec()]);
}

#[test]
fn bad_tokens_are_refused_and_counted_per_cause() {
    let now = Instant::now();
    let mut s = secure_server(now);
    let mut expect = EndpointStats::default();

    // Forged: one byte of the sealed part altered.
    let mut t = token(KEY, &spec());
    let last = t.sealed.len() - 20;
    t.sealed[last] ^= 0x01;
    let (code, reason) =
        refused(handshake(now, &mut s, &mut connect(t, 1, now), addr("192.0.2.1:1")).0);
    assert_eq!(
        (code, reason.as_str()),
        (REFUSE_TOKEN, "connect token forged")
    );
    expect.tokens_forged = 1;

    // Expired.
    let t = token(
        KEY,
        &TokenSpec {
            expires_at: T0 - 1,
            ..spec()
        },
    );
    let (code, reason) =
        refused(handshake(now, &mut s, &mut connect(t, 2, now), addr("192.0.2.2:1")).0);
    assert_eq!(
        (code, reason.as_str()),
        (REFUSE_TOKEN, "connect token expired")
    );
    expect.tokens_expired = 1;

    // Valid at first, expired a minute later.
    let t = token(
        KEY,
        &TokenSpec {
            expires_at: T0 + 30,
            ..spec()
        },
    );
    let later = now + Duration::from_secs(31);
    let (code, _) = refused(
        handshake(
            later,
            &mut s,
            &mut connect(t, 3, later),
            addr("192.0.2.3:1"),
        )
        .0,
    );
    assert_eq!(code, REFUSE_TOKEN);
    expect.tokens_expired = 2;

    // For other servers.
    let t = token(
        KEY,
        &TokenSpec {
            server_addrs: vec![addr("203.0.113.7:4001")],
            ..spec()
        },
    );
    let (_, reason) =
        refused(handshake(now, &mut s, &mut connect(t, 4, now), addr("192.0.2.4:1")).0);
    assert_eq!(reason, "connect token not for this server");
    expect.tokens_wrong_server = 1;

    // Minted under another key.
    let t = token([0x77; 32], &spec());
    let (_, reason) =
        refused(handshake(now, &mut s, &mut connect(t, 5, now), addr("192.0.2.5:1")).0);
    assert_eq!(reason, "connect token sealed under another key");
    expect.tokens_wrong_key = 1;

    // Replayed: one token, used from a second address while the first
    // holds it.
    let t = token(KEY, &spec());
    let (e, _) = handshake(
        now,
        &mut s,
        &mut connect(t.clone(), 6, now),
        addr("192.0.2.6:1"),
    );
    assert_eq!(e, Some(Event::Connected));
    let (_, reason) =
        refused(handshake(now, &mut s, &mut connect(t, 7, now), addr("192.0.2.7:1")).0);
    assert_eq!(reason, "connect token in use from another address");
    expect.tokens_replayed = 1;

    let st = s.stats();
    assert_eq!(
        (
            st.tokens_forged,
            st.tokens_expired,
            st.tokens_wrong_server,
            st.tokens_wrong_key,
            st.tokens_replayed,
        ),
        (
            expect.tokens_forged,
            expect.tokens_expired,
            expect.tokens_wrong_server,
            expect.tokens_wrong_key,
            expect.tokens_replayed,
        )
    );
    assert_eq!(st.refused, 6);
    assert_eq!(s.connection_count(), 1, "only the valid token got in");
}

#[test]
fn insecure_and_secure_peers_refuse_each_other_with_a_reason() {
    let now = Instant::now();
    let mut s = secure_server(now);
    let mut c = Connection::connect(one_channel(), ClientSecurity::Insecure, [1; 16], now).unwrap();
    let (code, reason) = refused(handshake(now, &mut s, &mut c, addr("192.0.2.1:1")).0);
    assert_eq!(code, REFUSE_SECURITY_MISMATCH);
    assert_eq!(
        reason,
        "server requires a connect token; client is in insecure mode"
    );
    assert_eq!(s.stats().security_mismatches, 1);

    let mut s = server(now, ServerSecurity::Insecure);
    let (code, reason) = refused(
        handshake(
            now,
            &mut s,
            &mut connect(token(KEY, &spec()), 2, now),
            addr("192.0.2.2:1"),
        )
        .0,
    );
    assert_eq!(code, REFUSE_SECURITY_MISMATCH);
    assert_eq!(
        reason,
        "server is in insecure mode; client sent a connect token"
    );
    assert_eq!(s.stats().security_mismatches, 1);
    assert_eq!(s.connection_count(), 0);
}

#[test]
fn replayed_and_altered_packets_are_dropped_counted_and_move_nothing() {
    let now = Instant::now();
    let mut s = secure_server(now);
    let mut c = connect(token(KEY, &spec()), 1, now);
    let from = addr("192.0.2.50:5000");
    let h = handshake(now, &mut s, &mut c, from).1.unwrap();
    while s.poll_event().is_some() {}
    let mut buf = vec![0u8; 1500];
    let mut reply = vec![0u8; 1500];
    let mut next_packet = |c: &mut Connection, msg: &[u8]| {
        c.send(0, msg).unwrap();
        let n = c.poll_transmit(now, &mut buf).unwrap();
        buf[..n].to_vec()
    };
    let p1 = next_packet(&mut c, b"one");
    let p2 = next_packet(&mut c, b"two");
    let mut flipped = p2.clone();
    let i = flipped.len() - 20;
    flipped[i] ^= 0x40;
    let attacker = addr("198.18.0.66:6666");

    s.handle(now, from, &p1, &mut reply);
    // The same packet again, from the attacker's address and from the
    // client's: replays.
    s.handle(now, attacker, &p1, &mut reply);
    s.handle(now, from, &p1, &mut reply);
    // An altered packet, from the attacker's address.
    s.handle(now, attacker, &flipped, &mut reply);
    let st = s.connection(h).unwrap().stats();
    assert_eq!(st.replayed_packets, 2);
    assert_eq!(st.auth_failures, 1);
    assert_eq!(s.peer_addr(h), Some(from), "no unauthenticated move");
    assert_eq!(s.stats().address_changes, 0);
    // The genuine packet still gets through after its altered copy.
    s.handle(now, from, &p2, &mut reply);
    let mut got = Vec::new();
    while let Some((_, e)) = s.poll_event() {
        if let Event::Message { data, .. } = e {
            got.push(data);
        }
    }
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
    // An authentic new packet from a new address does move it (NAT
    // rebinding).
    let p3 = next_packet(&mut c, b"three");
    let moved = addr("192.0.2.51:5001");
    s.handle(now, moved, &p3, &mut reply);
    assert_eq!(s.peer_addr(h), Some(moved));
}

/// A HELLO as a client would pad it, with this cookie and token.
fn hello_with(cookie: &[u8], token: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 1200];
    let mut w = Writer::new(&mut buf);
    Header::Long {
        ty: LongType::Hello,
        cid: Default::default(),
    }
    .encode(&mut w)
    .unwrap();
    Frame::Hello {
        nonce: [3; 16],
        config_digest: one_channel().digest(),
        max_ack_delay_us: 5_000,
        cookie,
        token,
    }
    .encode(&mut w)
    .unwrap();
    buf
}

/// 100,000 hellos from spoofed sources (garbage tokens, forged cookies, and
/// a stolen valid token without its cookie) leave no connection state; a
/// real player connects afterwards; before validation the server sent
/// fewer bytes than it received.
#[test]
fn a_flood_of_spoofed_hellos_allocates_nothing_and_never_amplifies() {
    let now = Instant::now();
    let mut s = secure_server(now);
    let stolen = token(KEY, &spec());
    let mut c = connect(stolen.clone(), 9, now);
    let mut hello = vec![0u8; 1500];
    let n = c.poll_transmit(now, &mut hello).unwrap();
    let hello = hello[..n].to_vec();
    let mut reply = vec![0u8; 1500];
    let (mut bytes_in, mut bytes_out) = (0u64, 0u64);
    const FLOOD: u32 = 100_000;
    for i in 0..FLOOD {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 | i);
        let from = SocketAddr::new(ip.into(), (i % 60_000) as u16 + 1024);
        let d = match i % 3 {
            // The stolen token's hello, replayed from everywhere.
            0 => hello.clone(),
            // Garbage for a token.
            1 => hello_with(&[], &[i as u8; 200]),
            // A forged cookie with the stolen token.
            _ => hello_with(&[i as u8; 20], &stolen.sealed),
        };
        bytes_in += d.len() as u64;
        if let Handled::Reply(m) = s.handle(now, from, &d, &mut reply) {
            assert!(m <= d.len());
            bytes_out += m as u64;
        }
    }
    let st = s.stats();
    assert_eq!(st.hellos, u64::from(FLOOD));
    assert_eq!((st.connections_created, s.connection_count()), (0, 0));
    assert_eq!(
        st.retries_sent,
        u64::from(FLOOD),
        "each answered by a RETRY, no more"
    );
    assert_eq!(st.bad_cookies, u64::from(FLOOD / 3));
    let amplification = bytes_out as f64 / bytes_in as f64;
    println!(
        "spoofed flood: {bytes_in} bytes in, {bytes_out} out, amplification {amplification:.3}"
    );
    assert!(amplification <= 1.0, "{amplification}");

    // The real player, with their own token, still gets in.
    let mut player = connect(token(KEY, &spec()), 10, now);
    let (e, h) = handshake(now, &mut s, &mut player, addr("192.0.2.99:7000"));
    assert_eq!(e, Some(Event::Connected));
    assert!(h.is_some());
    assert_eq!(s.connection_count(), 1);
}

/// What a backend hands a client as text connects like the token itself.
#[test]
fn a_token_handed_over_as_text_connects() {
    let now = Instant::now();
    let mut server = secure_server(now);
    let text = token(KEY, &spec()).to_text();
    let parsed: ConnectToken = text.parse().unwrap();
    let mut client = connect(parsed, 9, now);
    let (e, h) = handshake(now, &mut server, &mut client, addr("192.0.2.9:5000"));
    assert_eq!(e, Some(Event::Connected));
    let conn = server.connection(h.unwrap()).unwrap();
    assert!(conn.is_secure() && client.is_secure());
    assert_eq!(conn.token_claims().unwrap().client_id, 4242);
    // A text cut short is refused by name, not taken for another token.
    let cut = &text[..text.len() - 8];
    let err = cut.parse::<ConnectToken>().unwrap_err();
    assert!(err.to_string().starts_with("connect token"), "{err}");
}
