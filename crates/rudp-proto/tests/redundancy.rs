//! Channel redundancy (`ChannelConfig::redundancy`): a lost packet's
//! message arrives in a later packet without a resend, level 1 repeats
//! only resends, level 5 copies every message, and a clean link stops
//! paying for copies (the channels' and the small-message budget's). Virtual time throughout (hand-carried datagrams, or
//! the simulated link). Parity (levels 2-5) has its own tests in fec.rs.

use std::time::{Duration, Instant};

use keel_rudp_proto::sim::{Impairment, LinkConfig, Pair};
use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Connection, ConnectionId, Event, Side};

fn config(redundancy: u8) -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered).with_redundancy(redundancy)
    ])
}

fn messages(c: &mut Connection) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while let Some(e) = c.poll_event() {
        if let Event::Message { data, .. } = e {
            got.push(data);
        }
    }
    got
}

/// Two 400-byte messages one tick apart; the first one's packet is lost.
/// Returns what b has delivered 1 ms after the second packet arrived, and
/// a's retransmissions by then.
fn first_packet_lost(redundancy: u8) -> (Vec<Vec<u8>>, u64) {
    let t0 = Instant::now();
    let cid = ConnectionId([9; 8]);
    let mut a = Connection::established(config(redundancy), Side::Client, cid, t0).unwrap();
    let mut b = Connection::established(config(redundancy), Side::Server, cid, t0).unwrap();
    let mut buf = [0u8; 1500];
    a.send(0, &[1u8; 400]).unwrap();
    while a.poll_transmit(t0, &mut buf).is_some() {} // lost
    let t1 = t0 + Duration::from_millis(16);
    a.send(0, &[2u8; 400]).unwrap();
    while let Some(n) = a.poll_transmit(t1, &mut buf) {
        b.handle_datagram(t1 + Duration::from_millis(25), &buf[..n]);
    }
    let got = messages(&mut b);
    (got, a.stats().retransmissions)
}

#[test]
fn a_lost_message_is_delivered_from_the_next_packet_without_a_resend() {
    let (got, resent) = first_packet_lost(5);
    assert_eq!(got, vec![vec![1u8; 400], vec![2u8; 400]]);
    assert_eq!(resent, 0);
}

#[test]
fn without_redundancy_the_lost_message_holds_the_next_one_back() {
    // The same case with the knob at 0 (and today's small-message
    // redundancy, which leaves 400-byte messages alone): nothing yet.
    let (got, _) = first_packet_lost(0);
    assert!(got.is_empty(), "{} delivered", got.len());
}

/// A 60 Hz tick of 400-byte messages for `secs` over `link` both ways:
/// (copies sent by a, resends by a, messages b delivered).
fn tick(redundancy: u8, link: LinkConfig, secs: u64, seed: u64) -> (u64, u64, usize) {
    let mut pair = Pair::new(
        config(redundancy),
        config(redundancy),
        link.clone(),
        link,
        seed,
    );
    let ticks = secs * 60;
    for i in 0..ticks {
        let mut m = vec![0u8; 400];
        m[..8].copy_from_slice(&i.to_be_bytes());
        pair.a.send(0, &m).unwrap();
        pair.run_for(Duration::from_micros(16_667));
    }
    pair.run_for(Duration::from_secs(3));
    let s = pair.a.stats();
    let got = pair
        .b_events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Message { .. }))
        .count();
    (s.redundant_copies, s.retransmissions, got)
}

#[test]
fn under_loss_copies_replace_most_resends() {
    let link = LinkConfig::new(Impairment {
        loss: 0.1,
        delay: Duration::from_millis(25),
        ..Impairment::default()
    });
    let (copies0, resent0, got0) = tick(0, link.clone(), 5, 3);
    let (copies1, resent1, got1) = tick(1, link.clone(), 5, 3);
    let (copies5, resent5, got5) = tick(5, link, 5, 3);
    assert_eq!((got0, got1, got5), (300, 300, 300));
    assert_eq!(copies0, 0);
    // Level 1: only resends ride again.
    assert!(
        copies1 > 0 && copies1 <= resent1,
        "{copies1} copies, {resent1} resends"
    );
    // Level 5: every message (and parity besides).
    assert!(copies5 >= 250, "{copies5} copies");
    // About 10 % of 300 lost: ~30 resends without, a few with.
    assert!(
        resent5 * 3 < resent0,
        "{resent5} resends with, {resent0} without"
    );
}

#[test]
fn a_clean_link_stops_sending_copies() {
    let link = LinkConfig::new(Impairment {
        delay: Duration::from_millis(25),
        ..Impairment::default()
    });
    let (copies, resent, got) = tick(5, link, 10, 1);
    assert_eq!((resent, got), (0, 600));
    // The first packets are protected (a new connection assumes loss)
    // until 64 are acknowledged without a loss; then none.
    assert!(
        copies > 0 && copies < 100,
        "{copies} copies of 600 messages"
    );
}

/// The small-message budget (`Config::redundancy`: messages up to 128
/// bytes ride again in the next packets) is paid, as the channels'
/// copies are, only while the measured loss justifies it: a 100-byte
/// message at a 20 Hz tick over a clean 50 ms round trip rode twice
/// (once more in the next tick's packet, before its acknowledgement).
#[test]
fn a_clean_link_stops_copying_small_messages() {
    let link = LinkConfig::new(Impairment {
        delay: Duration::from_millis(25),
        ..Impairment::default()
    });
    let mut pair = Pair::new(config(0), config(0), link.clone(), link, 1);
    for i in 0..400u64 {
        let mut m = vec![0u8; 100];
        m[..8].copy_from_slice(&i.to_be_bytes());
        pair.a.send(0, &m).unwrap();
        pair.run_for(Duration::from_millis(50));
    }
    pair.run_for(Duration::from_secs(3));
    let got = pair
        .b_events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Message { .. }))
        .count();
    let s = pair.a.stats();
    assert_eq!((s.retransmissions, got), (0, 400));
    // The first packets are protected until 64 are acknowledged without
    // a loss; then none of the other 330 or so messages rides again.
    assert!(
        s.redundant_copies > 0 && s.redundant_copies < 100,
        "{} copies of 400 small messages",
        s.redundant_copies
    );
}

/// The copies a channel's level asks for look at its 64 oldest
/// unacknowledged messages only (`REDUNDANCY_SCAN`: the cost of a packet
/// stays bounded however many messages wait): with 100 messages of 200
/// bytes queued at once and nothing acknowledged, level 5 (a copy of
/// every message) copies messages 0-63 and never 64-99.
#[test]
fn copies_scan_the_oldest_64_messages_only() {
    use keel_rudp_proto::wire::{Frame, Header, Reader};
    let t0 = Instant::now();
    let cid = ConnectionId([5; 8]);
    let mut a = Connection::established(config(5), Side::Client, cid, t0).unwrap();
    for i in 0..100u8 {
        a.send(0, &[i; 200]).unwrap();
    }
    let mut sent = [0u32; 100];
    let mut buf = [0u8; 1500];
    let mut packets = 0;
    while let Some(n) = a.poll_transmit(t0, &mut buf) {
        packets += 1;
        assert!(packets < 1000, "a bounded number of packets");
        let mut r = Reader::new(&buf[..n]);
        Header::decode(&mut r).unwrap();
        while !r.is_empty() {
            if let Frame::Message { seq, .. } = Frame::decode(&mut r).unwrap() {
                sent[seq as usize] += 1;
            }
        }
    }
    assert!(sent[..64].iter().all(|&n| n == 2), "{:?}", &sent[..64]);
    assert!(sent[64..].iter().all(|&n| n == 1), "{:?}", &sent[64..]);
}
