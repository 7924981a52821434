//! Untrusted input never panics and every rejected datagram is counted;
//! refusals name the thing and what is accepted.

use std::time::{Duration, Instant};

use keel_rudp::{ChannelConfig, ChannelKind, Config, ConfigError, ConnectionId, SendError};
use keel_rudp_proto::{Connection, Side};
use keel_rudp_proto::{Endpoint, EndpointConfig, Handled};
use proptest::prelude::*;

fn cfg() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
    ])
}

const CID: ConnectionId = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);

fn counted(c: &Connection) -> u64 {
    let s = c.stats();
    s.malformed_packets + s.dropped_packets + s.duplicate_packets + s.packets_received
}

/// A few real packets from a connection carrying messages, to mutate.
fn real_packets() -> Vec<Vec<u8>> {
    let now = Instant::now();
    let mut a = Connection::established(cfg(), Side::Client, CID, now).unwrap();
    let mut b = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    a.send(0, b"small").unwrap();
    a.send(0, &[7; 3000]).unwrap();
    a.send(1, b"snapshot").unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1500];
    while let Some(n) = a.poll_transmit(now, &mut buf) {
        out.push(buf[..n].to_vec());
        b.handle_datagram(now, &buf[..n]);
    }
    let later = now + Duration::from_millis(10);
    while let Some(n) = b.poll_transmit(later, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_datagrams_are_counted_never_panic(data in proptest::collection::vec(any::<u8>(), 0..1300)) {
        let now = Instant::now();
        let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
        c.handle_datagram(now, &data);
        prop_assert_eq!(counted(&c), 1, "each datagram lands in exactly one counter");
        let mut e = Endpoint::new(EndpointConfig::new(0, [3; 32], cfg(), keel_rudp::ServerSecurity::Insecure), now).unwrap();
        let mut reply = [0u8; 1500];
        let r = e.handle(now, "192.0.2.1:9".parse().unwrap(), &data, &mut reply);
        if let Handled::Reply(n) | Handled::Accepted(_, n) = r {
            prop_assert!(n <= data.len());
        }
        prop_assert_eq!(e.connection_count(), 0);
    }

    #[test]
    fn mutated_real_packets_are_counted_never_panic(
        which in 0usize..4, flips in proptest::collection::vec((0usize..1500, any::<u8>()), 1..6), cut in 0usize..1500,
    ) {
        let packets = real_packets();
        let mut p = packets[which % packets.len()].clone();
        for (at, x) in flips {
            let len = p.len();
            p[at % len] ^= x;
        }
        p.truncate(cut.max(1));
        let now = Instant::now();
        let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
        c.handle_datagram(now, &p);
        prop_assert_eq!(counted(&c), 1);
        // Whatever it was, the connection still works afterwards.
        let mut buf = [0u8; 1500];
        while c.poll_transmit(now, &mut buf).is_some() {}
        c.handle_timeout(now + Duration::from_secs(1));
    }
}

#[test]
fn malformed_packets_are_counted() {
    let now = Instant::now();
    let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    // Short header, right CID, packet number, then an unknown frame type.
    let mut p = vec![0x40];
    p.extend_from_slice(&CID.0);
    p.extend_from_slice(&[0, 0x1f]);
    c.handle_datagram(now, &p);
    // A MESSAGE for channel 9 (only 0 and 1 exist).
    let mut q = vec![0x40];
    q.extend_from_slice(&CID.0);
    q.extend_from_slice(&[1, 0x03, 9, 0, 1, b'x']);
    c.handle_datagram(now, &q);
    // Another connection's ID.
    let mut r = q.clone();
    r[3] ^= 0xff;
    c.handle_datagram(now, &r);
    let s = c.stats();
    assert_eq!(
        (s.malformed_packets, s.dropped_packets, s.packets_received),
        (2, 1, 0)
    );
}

#[test]
fn send_errors_name_the_limit() {
    let now = Instant::now();
    let mut config = cfg();
    config.max_message_size = 10_000;
    config.max_send_buffer = 25_000;
    let mut c = Connection::established(config, Side::Client, CID, now).unwrap();
    assert_eq!(
        c.send(2, b"x"),
        Err(SendError::UnknownChannel {
            channel: 2,
            channels: 2
        })
    );
    assert_eq!(
        c.send(0, &[0; 10_001]),
        Err(SendError::MessageTooLarge {
            len: 10_001,
            max: 10_000
        })
    );
    c.send(0, &[0; 10_000]).unwrap();
    c.send(0, &[0; 10_000]).unwrap();
    let err = c.send(0, &[0; 10_000]).unwrap_err();
    assert_eq!(
        err,
        SendError::Backpressure {
            queued: 20_000,
            len: 10_000,
            cap: 25_000
        }
    );
    assert!(
        err.to_string().contains("max_send_buffer (25000 bytes)"),
        "{err}"
    );
    assert_eq!(c.queued_bytes(0), 20_000);
    assert_eq!(
        SendError::UnknownChannel {
            channel: 2,
            channels: 2
        }
        .to_string(),
        "channel 2 does not exist (channels 0 to 1 are configured)"
    );
}

#[test]
fn backpressure_clears_as_the_peer_acknowledges() {
    let now = Instant::now();
    let mut config = cfg();
    config.max_message_size = 10_000;
    config.max_send_buffer = 20_000;
    let mut a = Connection::established(config.clone(), Side::Client, CID, now).unwrap();
    let mut b = Connection::established(config, Side::Server, CID, now).unwrap();
    a.send(0, &[1; 10_000]).unwrap();
    a.send(0, &[2; 10_000]).unwrap();
    assert!(matches!(
        a.send(0, b"more"),
        Err(SendError::Backpressure { .. })
    ));
    let mut buf = [0u8; 1500];
    let mut t = now;
    for _ in 0..10 {
        t += Duration::from_millis(10);
        while let Some(n) = a.poll_transmit(t, &mut buf) {
            b.handle_datagram(t, &buf[..n]);
        }
        while let Some(n) = b.poll_transmit(t, &mut buf) {
            a.handle_datagram(t, &buf[..n]);
        }
        b.handle_timeout(t);
    }
    assert_eq!(a.queued_bytes(0), 0);
    a.send(0, b"more").unwrap();
}

#[test]
fn config_errors_name_the_setting() {
    let mut c = cfg();
    c.max_datagram_size = 500;
    assert_eq!(c.validate(), Err(ConfigError::DatagramSize(500)));
    assert_eq!(
        ConfigError::DatagramSize(500).to_string(),
        "max_datagram_size: 500 bytes, 1200 to 65527 accepted"
    );
    let empty = Config::new(vec![]);
    assert_eq!(empty.validate(), Err(ConfigError::Channels(0)));
}
