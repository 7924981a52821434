//! What a packet costs cannot grow with state an attacker shapes: the
//! receive structures are maps and fixed windows (O(log n) a frame), and
//! the state a packet works on stays bounded whatever the attacker sends.
//! Structural checks (sizes of state, counts); the timings are in
//! `examples/hostile_recv.rs` and docs/security.md.

use std::time::Instant;

use crate::common::{fill, Rng, BYTES, CID};
use keel_rudp::{ChannelConfig, ChannelKind, Config};
use keel_rudp_proto::wire::{varint, Frame, Header, Writer};
use keel_rudp_proto::{Connection, Side};

fn cfg() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
    ])
}

/// A FRAGMENT of a 1 MiB message on the ordered channel.
fn fragment(seq: u64, offset: u32, len: usize) -> Frame<'static> {
    crate::common::fragment(0, seq, 1 << 20, offset, len)
}

#[test]
fn one_byte_fragments_at_alternating_offsets_add_no_pieces() {
    // Before: each sliver became a range of the partial message, and each
    // insert scanned them all (24 ms a packet).
    let now = Instant::now();
    let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    c.handle_datagram(now, &fill(0, || fragment(1, 0, 600)));
    let held = c.recv_buffered();
    let mut off = 600;
    for pn in 1..=500 {
        c.handle_datagram(
            now,
            &fill(pn, || {
                off += 2;
                fragment(1, off, 1)
            }),
        );
    }
    // A sliver open on both sides is no sender's cut: the packet is
    // malformed and nothing is stored.
    assert_eq!(c.recv_buffered(), held);
    assert!(c.stats().malformed_packets >= 500);
}

#[test]
fn one_byte_fragments_in_order_cost_their_bytes() {
    let now = Instant::now();
    let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    for seq in 1..=100 {
        c.handle_datagram(now, &fill(seq, || fragment(seq, 0, 600)));
    }
    let mut offs = [600u32; 101];
    let mut rng = Rng(3);
    let mut bytes = 0;
    for pn in 101..=600 {
        // 80 frames of at most 13 bytes fit; `fill` would make one more
        // frame than it writes.
        let frames: Vec<Frame<'_>> = (0..80)
            .map(|_| {
                let seq = 1 + rng.next() % 100;
                offs[seq as usize] += 1;
                bytes += 1;
                fragment(seq, offs[seq as usize] - 1, 1)
            })
            .collect();
        let mut n = 0;
        let p = fill(pn, || {
            n += 1;
            frames
                .get(n - 1)
                .copied()
                .unwrap_or(Frame::Padding { len: 2000 })
        });
        assert!(n > 80);
        c.handle_datagram(now, &p);
    }
    let s = c.stats();
    assert_eq!(s.malformed_packets + s.refused_packets, 0);
    // Each partial: its prefix (grown 1.5x at a time) and bookkeeping.
    assert!(
        s.recv_buffered <= 100 * 2 * 600 + 2 * bytes,
        "{} held",
        s.recv_buffered
    );
}

#[test]
fn random_sequence_numbers_keep_the_unordered_window_fixed() {
    // Before: each new number could add a range, inserted by shifting
    // all the others (114 ms for the worst packet).
    let now = Instant::now();
    let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    let mut rng = Rng(7);
    let mut frames = 0u64;
    for pn in 0..300 {
        c.handle_datagram(
            now,
            &fill(pn, || {
                frames += 1;
                Frame::Message {
                    channel: 1,
                    seq: 1 + rng.next() % 8192,
                    payload: b"r",
                }
            }),
        );
        // The encoder's last failed attempt is not in the packet.
        frames -= 1;
        assert!(c.recv_buffered() <= 1024, "{}", c.recv_buffered());
    }
    let s = c.stats();
    assert!(s.window_refused > 0 && s.duplicate_messages > 0);
    assert!(s.messages_delivered <= 4095);
    assert_eq!(
        s.messages_delivered + s.duplicate_messages + s.window_refused,
        frames
    );
}

#[test]
fn sparse_ordered_sequence_numbers_hold_what_arrived_within_the_cap() {
    let now = Instant::now();
    let mut config = cfg();
    config.max_recv_buffer = 256 << 10;
    let mut c = Connection::established(config, Side::Server, CID, now).unwrap();
    let mut rng = Rng(11);
    for pn in 0..2000 {
        c.handle_datagram(
            now,
            &fill(pn, || Frame::Message {
                channel: 0,
                seq: 1 + rng.next() % 70_000,
                payload: b"s",
            }),
        );
        assert!(c.recv_buffered() <= 256 << 10);
    }
    let s = c.stats();
    assert!(s.window_refused > 0, "past 65,536 ahead");
    assert!(s.refused_packets > 0, "the cap was reached");
}

#[test]
fn an_ack_frame_past_256_ranges_is_malformed() {
    // The decoder bounds an ACK's ranges, so its work is bounded too.
    let now = Instant::now();
    let mut c = Connection::established(cfg(), Side::Server, CID, now).unwrap();
    let mut buf = [0u8; 1500];
    for i in 0..600 {
        c.send(0, &BYTES[..(i % 50) + 1]).unwrap();
        while c.poll_transmit(now, &mut buf).is_some() {}
    }
    let sent = c.stats().packets_sent;
    assert!(sent > 520, "{sent}");
    // 257 ranges of one packet each (the encoder stops at 256).
    let mut b = vec![0u8; 1500];
    let mut w = Writer::new(&mut b);
    Header::Short {
        cid: CID,
        pn: 0,
        pn_len: 4,
    }
    .encode(&mut w)
    .unwrap();
    let mut n = w.len();
    for v in [0x02, 600, 0, 257, 0] {
        n += varint::encode(v, &mut b[n..]);
    }
    n += 2 * 257; // each a gap of 0 and a range of 0
    c.handle_datagram(now, &b[..n]);
    assert_eq!(c.stats().malformed_packets, 1);
}
