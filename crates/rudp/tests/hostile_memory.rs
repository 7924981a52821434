//! What a hostile peer (one holding a valid token: its packets are
//! authentic) can make a server hold: receive state is taken as bytes
//! arrive, not as a header claims; it is bounded per connection
//! (`max_recv_buffer`) and across an endpoint (`recv_budget`), and every
//! refusal is counted. Connections are driven sans-IO with crafted frames.

mod common;

use std::time::Instant;

use common::{fragment, packet, CID};
use keel_rudp::{
    ChannelConfig, ChannelKind, ClientSecurity, Config, ConnectionId, RecvBudget, ServerSecurity,
};
use keel_rudp_proto::wire::Frame;
use keel_rudp_proto::{Connection, Event, Side};
use keel_rudp_proto::{Endpoint, EndpointConfig, Handled};

fn cfg() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
        ChannelConfig::new(ChannelKind::Unreliable),
    ])
}

fn rss_bytes() -> usize {
    keel_testkit::rss_bytes() as usize
}

#[test]
fn fragments_claiming_a_megabyte_take_only_the_bytes_that_arrived() {
    // Before: each first fragment reserved (and zero-filled) its `total`,
    // so these 64 packets of 600 bytes took 64 MiB.
    let now = Instant::now();
    let before = rss_bytes();
    let mut conns: Vec<Connection> = (0..32)
        .map(|_| Connection::established(cfg(), Side::Server, CID, now).unwrap())
        .collect();
    let mut received = 0;
    for c in &mut conns {
        for seq in 1..3 {
            let p = packet(CID, seq, &[fragment(0, seq, 1 << 20, 0, 600)]);
            received += p.len();
            c.handle_datagram(now, &p);
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 16 << 20,
        "RSS grew {grown} bytes for {received} bytes received"
    );
    for c in &conns {
        let s = c.stats();
        assert_eq!(s.refused_packets, 0);
        assert!(
            s.recv_buffered <= 2 * s.bytes_received as usize,
            "{} bytes held for {} received",
            s.recv_buffered,
            s.bytes_received
        );
    }
}

#[test]
fn one_connection_holds_at_most_its_receive_buffer_and_still_takes_the_next_message() {
    let now = Instant::now();
    let mut c = cfg();
    c.max_recv_buffer = 64 << 10;
    let mut conn = Connection::established(c, Side::Server, CID, now).unwrap();
    // Messages 1.. of the ordered channel, never finished: held back.
    for seq in 1..200 {
        let p = packet(CID, seq, &[fragment(0, seq, 1 << 20, 0, 1000)]);
        conn.handle_datagram(now, &p);
    }
    let s = conn.stats();
    assert!(s.recv_buffered <= 64 << 10, "{}", s.recv_buffered);
    assert!(s.refused_packets > 100, "{}", s.refused_packets);
    // Message 0, the one the channel waits for, is taken over the cap.
    let p = packet(
        CID,
        500,
        &[Frame::Message {
            channel: 0,
            seq: 0,
            payload: b"next",
        }],
    );
    conn.handle_datagram(now, &p);
    assert_eq!(conn.poll_event(), Some(Event::Connected));
    assert_eq!(
        conn.poll_event(),
        Some(Event::Message {
            channel: 0,
            data: b"next".to_vec()
        })
    );
}

#[test]
fn a_gap_filled_unordered_stream_keeps_its_window_bounded() {
    // Before: every gap added a range to an unbounded set (29 MB in, +57 MiB).
    let now = Instant::now();
    let mut conn = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    let mut seq = 1;
    for pn in 1..=200 {
        let frames: Vec<Frame<'_>> = (0..100)
            .map(|i| Frame::Message {
                channel: 1,
                seq: seq + 2 * i,
                payload: b"m",
            })
            .collect();
        seq += 200;
        conn.handle_datagram(now, &packet(CID, pn, &frames));
    }
    let s = conn.stats();
    // 4,096 sequence numbers of window (2,048 delivered, odd ones), then refused.
    assert_eq!(s.messages_delivered, 2048);
    assert!(s.window_refused > 10_000, "{}", s.window_refused);
    assert!(s.recv_buffered <= 1024, "{}", s.recv_buffered);
    // Far-ahead and random sequence numbers cost nothing held.
    let frames: Vec<Frame<'_>> = (0..100u64)
        .map(|i| Frame::Message {
            channel: 1,
            seq: i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 2,
            payload: b"m",
        })
        .collect();
    conn.handle_datagram(now, &packet(CID, 1000, &frames));
    assert!(conn.stats().recv_buffered <= 1024);
}

#[test]
fn a_far_ordered_sequence_number_costs_its_bytes_not_its_distance() {
    // Before: the held-back queue was resized to the claimed distance
    // (65,535 slots of 24 bytes for one 1-byte message).
    let now = Instant::now();
    let mut conn = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    let frames = [Frame::Message {
        channel: 0,
        seq: 65_535,
        payload: b"z",
    }];
    conn.handle_datagram(now, &packet(CID, 1, &frames));
    assert!(conn.stats().recv_buffered <= 128);
    let frames = [Frame::Message {
        channel: 0,
        seq: 65_536,
        payload: b"z",
    }];
    conn.handle_datagram(now, &packet(CID, 2, &frames));
    assert_eq!(conn.stats().window_refused, 1);
}

/// An insecure endpoint's connection from `addr`: the client's connection
/// ID, after the cookie round trip.
fn connect(server: &mut Endpoint, now: Instant, addr: std::net::SocketAddr, n: u8) -> ConnectionId {
    let mut client = Connection::connect(cfg(), ClientSecurity::Insecure, [n; 16], now).unwrap();
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    for _ in 0..2 {
        let len = client.poll_transmit(now, &mut buf).unwrap();
        match server.handle(now, addr, &buf[..len], &mut reply) {
            Handled::Reply(m) | Handled::Accepted(_, m) => client.handle_datagram(now, &reply[..m]),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(client.poll_event(), Some(Event::Connected));
    client.connection_id()
}

#[test]
fn the_endpoint_budget_holds_across_connections_and_counts_refusals() {
    let now = Instant::now();
    let mut ec = EndpointConfig::new(0, [9; 32], cfg(), ServerSecurity::Insecure);
    ec.recv_budget = RecvBudget::new(256 << 10);
    let budget = ec.recv_budget.clone();
    let mut server = Endpoint::new(ec, now).unwrap();
    let mut reply = [0u8; 1500];
    let mut received = 0;
    for n in 0..64u8 {
        let addr = format!("192.0.2.{}:4000", n + 1).parse().unwrap();
        let cid = connect(&mut server, now, addr, n);
        for seq in 1..17 {
            let p = packet(cid, seq, &[fragment(1, seq, 1 << 20, 0, 1000)]);
            received += 1000;
            server.handle(now, addr, &p, &mut reply);
            assert!(budget.used() <= budget.limit());
        }
    }
    assert!(received > 2 * budget.limit());
    assert!(budget.used() > budget.limit() / 2, "{}", budget.used());
    let refused = server.stats().budget_refused;
    assert!(refused > 0 && refused == budget.refused(), "{refused}");
    let held: usize = server
        .handles()
        .map(|h| server.connection(h).unwrap().recv_buffered())
        .sum();
    assert_eq!(held, budget.used());
    // Connections give their share back when they go.
    drop(server);
    assert_eq!(budget.used(), 0);
}

/// Attackers that spend the endpoint's budget cannot starve a player: a
/// quarter of the budget is split over the connections the endpoint may
/// hold, so the player's fragmented message, within its quota, still
/// arrives.
#[test]
fn a_player_gets_its_share_of_a_budget_attackers_spent() {
    let now = Instant::now();
    let mut ec = EndpointConfig::new(0, [9; 32], cfg(), ServerSecurity::Insecure);
    ec.recv_budget = RecvBudget::new(512 << 10);
    // A quota of 512 KiB / 4 / 16 = 8 KiB a connection.
    ec.max_connections = 16;
    let budget = ec.recv_budget.clone();
    let mut server = Endpoint::new(ec, now).unwrap();
    let mut reply = [0u8; 1500];
    let attackers: Vec<_> = (0..8u8)
        .map(|n| {
            let addr = format!("192.0.2.{}:4000", n + 1).parse().unwrap();
            (addr, connect(&mut server, now, addr, n))
        })
        .collect();
    let player_addr = "192.0.2.100:4000".parse().unwrap();
    let player = connect(&mut server, now, player_addr, 100);
    // Each attacker opens messages that never finish until refused.
    for (addr, cid) in &attackers {
        for seq in 1..200 {
            let p = packet(*cid, seq, &[fragment(0, seq, 1 << 20, 0, 1000)]);
            server.handle(now, *addr, &p, &mut reply);
        }
    }
    assert!(budget.used() > budget.limit() * 3 / 4, "{}", budget.used());
    let refused_before = budget.refused();
    assert!(refused_before > 0);
    // The player's 6 KB message, in 1,000-byte fragments, out of order
    // (the last first, so every piece is held until the first arrives).
    let total = 6_000u32;
    for (i, off) in (0..6u32).rev().enumerate() {
        let p = packet(
            player,
            i as u64 + 1,
            &[fragment(0, 0, total, off * 1000, 1000)],
        );
        server.handle(now, player_addr, &p, &mut reply);
    }
    assert_eq!(
        budget.refused(),
        refused_before,
        "the player was not refused"
    );
    let delivered = std::iter::from_fn(|| server.poll_event()).any(|(_, e)| {
        matches!(e, Event::Message { channel: 0, ref data } if data.len() == total as usize)
    });
    assert!(delivered, "the player's message arrived");
    assert!(budget.used() <= budget.limit());
}
