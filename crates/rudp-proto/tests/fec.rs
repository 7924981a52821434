//! Forward error correction (PARITY frames, by `ChannelConfig::redundancy`):
//! a lost message is rebuilt from the parity of the next packet without a
//! resend, the sender hears it was (REPAIRED) and does not resend it, and
//! under seeded loss parity replaces most resends. Virtual time throughout.

use std::time::{Duration, Instant};

use keel_rudp_proto::sim::{Impairment, LinkConfig, Pair};
use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Connection, ConnectionId, Event, Side};

/// Level 4: every packet carries the parity of the two messages before
/// its own.
const PARITY_EVERY_PACKET: u8 = 4;

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

/// 400-byte messages 0..8 one tick apart (message i: bytes i, length
/// 400 - i), message `lost`'s packet lost; b's packets carried back to a.
/// Returns what b delivered, b's stats and a's stats 40 ms after the
/// last send (before a's loss detection could resend).
fn one_lost(
    redundancy: u8,
    lost: usize,
) -> (Vec<Vec<u8>>, keel_rudp_proto::Stats, keel_rudp_proto::Stats) {
    let t0 = Instant::now();
    let cid = ConnectionId([9; 8]);
    let mut a = Connection::established(config(redundancy), Side::Client, cid, t0).unwrap();
    let mut b = Connection::established(config(redundancy), Side::Server, cid, t0).unwrap();
    let mut buf = [0u8; 1500];
    let mut got = Vec::new();
    let tick = Duration::from_micros(16_667);
    let one_way = Duration::from_millis(25);
    let mut to_a: Vec<(Instant, Vec<u8>)> = Vec::new();
    for i in 0..8 {
        let t = t0 + tick * i as u32;
        to_a.retain(|(at, d)| {
            if *at <= t {
                a.handle_datagram(*at, d);
                false
            } else {
                true
            }
        });
        a.send(0, &vec![i as u8; 400 - i]).unwrap();
        while let Some(n) = a.poll_transmit(t, &mut buf) {
            if i != lost {
                b.handle_datagram(t + one_way, &buf[..n]);
            }
        }
        got.extend(messages(&mut b));
        while let Some(n) = b.poll_transmit(t + one_way, &mut buf) {
            to_a.push((t + one_way * 2, buf[..n].to_vec()));
        }
    }
    let end = t0 + tick * 7 + Duration::from_millis(40);
    for (at, d) in to_a.drain(..) {
        if at <= end {
            a.handle_datagram(at, &d);
        }
    }
    b.handle_timeout(end);
    while let Some(n) = b.poll_transmit(end, &mut buf) {
        a.handle_datagram(end, &buf[..n]);
    }
    a.handle_timeout(end);
    (got, b.stats(), a.stats())
}

#[test]
fn parity_rebuilds_a_lost_message_without_a_resend() {
    let (got, b, a) = one_lost(PARITY_EVERY_PACKET, 4);
    let want: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 400 - i]).collect();
    assert_eq!(got, want, "every message, in order, lengths and bytes");
    assert_eq!(b.repaired_by_parity, 1);
    assert_eq!((b.parity_invalid, b.malformed_packets), (0, 0));
    assert!(a.parity_sent >= 6, "{} parities", a.parity_sent);
    // a heard the repair: message 4 is acknowledged, never resent.
    assert_eq!(a.repairs_acked, 1);
    assert_eq!(a.retransmissions, 0);
}

#[test]
fn without_parity_the_lost_message_holds_the_rest_back() {
    let (got, b, a) = one_lost(1, 4);
    assert_eq!(got.len(), 4, "only the messages before the lost one");
    assert_eq!((b.repaired_by_parity, a.parity_sent), (0, 0));
}

/// A 60 Hz tick of 400-byte messages for `secs` over a link losing
/// `loss` both ways, b echoing each message back: (a's stats, b's stats,
/// messages b delivered, messages a delivered).
fn echo_tick(
    redundancy: u8,
    loss: f64,
    secs: u64,
    seed: u64,
) -> (keel_rudp_proto::Stats, keel_rudp_proto::Stats, usize, usize) {
    let link = LinkConfig::new(Impairment {
        loss,
        delay: Duration::from_millis(25),
        ..Impairment::default()
    });
    let mut pair = Pair::new(
        config(redundancy),
        config(redundancy),
        link.clone(),
        link,
        seed,
    );
    let mut echoed = 0;
    // The ticks, then 3 s of ticks without new messages (echoes go on).
    for i in 0..(secs + 3) * 60 {
        if i < secs * 60 {
            let mut m = vec![0u8; 400];
            m[..8].copy_from_slice(&i.to_be_bytes());
            pair.a.send(0, &m).unwrap();
        }
        pair.run_for(Duration::from_micros(16_667));
        let got: Vec<Vec<u8>> = pair.b_events[echoed..]
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Message { data, .. } => Some(data.clone()),
                _ => None,
            })
            .collect();
        echoed = pair.b_events.len();
        for d in got {
            pair.b.send(0, &d).unwrap();
        }
    }
    let count = |ev: &[(Instant, Event)]| {
        ev.iter()
            .filter(|(_, e)| matches!(e, Event::Message { .. }))
            .count()
    };
    (
        pair.a.stats(),
        pair.b.stats(),
        count(&pair.b_events),
        count(&pair.a_events),
    )
}

#[test]
fn under_seeded_loss_parity_replaces_most_resends() {
    let (a1, b1, got_b1, got_a1) = echo_tick(1, 0.1, 5, 11);
    let (a, b, got_b, got_a) = echo_tick(PARITY_EVERY_PACKET, 0.1, 5, 11);
    assert_eq!((got_b1, got_a1, got_b, got_a), (300, 300, 300, 300));
    assert_eq!((a1.parity_sent, a1.repaired_by_parity), (0, 0));
    // About 30 of each side's 300 messages lost: most rebuilt from
    // parity, reported, and not resent.
    for (s, s1) in [(&a, &a1), (&b, &b1)] {
        assert!(s.parity_sent > 200, "{} parities", s.parity_sent);
        assert_eq!((s.parity_invalid, s.malformed_packets), (0, 0));
        assert!(
            s.retransmissions * 2 < s1.retransmissions,
            "{} resends with parity, {} without",
            s.retransmissions,
            s1.retransmissions
        );
    }
    assert!(b.repaired_by_parity >= 15, "{}", b.repaired_by_parity);
    assert!(a.repaired_by_parity >= 15, "{}", a.repaired_by_parity);
    assert!(a.repairs_acked >= 10 && b.repairs_acked >= 10);
}

#[test]
fn at_high_loss_a_level_copies_every_message() {
    // The default level at 10 % loss each way: copies only of resent
    // messages. At 20 %, once the loss is judged high (after 100 packets
    // or so), a copy of every message too, and fewer resends per loss.
    let level = keel_rudp_proto::DEFAULT_REDUNDANCY;
    let (a10, b10, got_b10, got_a10) = echo_tick(level, 0.1, 8, 3);
    let (a20, b20, got_b20, got_a20) = echo_tick(level, 0.2, 8, 3);
    assert_eq!((got_b10, got_a10, got_b20, got_a20), (480, 480, 480, 480));
    for (s10, s20) in [(&a10, &a20), (&b10, &b20)] {
        assert!(
            s10.redundant_copies < 100,
            "{} copies at 10 %",
            s10.redundant_copies
        );
        assert!(
            s20.redundant_copies > 300,
            "{} copies at 20 %",
            s20.redundant_copies
        );
        // Resends per lost packet: fewer at 20 % than at 10 %.
        assert!(
            s20.retransmissions * s10.packets_lost < s10.retransmissions * s20.packets_lost,
            "{}/{} at 20 %, {}/{} at 10 %",
            s20.retransmissions,
            s20.packets_lost,
            s10.retransmissions,
            s10.packets_lost
        );
    }
}

/// One echo run in the simulator: 400 B at 60 Hz for `secs` from a to b
/// and back on channel 0 at `level`, `loss` each way (25 ms each way, 3
/// ms jitter): the round trips after the first second, sorted, and wire
/// bytes per payload byte (both ends' `bytes_sent` over the message
/// bytes of messages and echoes).
fn simulated_echo(level: u8, loss: f64, seed: u64, secs: u64) -> (Vec<Duration>, f64) {
    let link = LinkConfig::new(Impairment {
        loss,
        delay: Duration::from_millis(25),
        jitter: Duration::from_millis(3),
        ..Impairment::default()
    });
    let mut pair = Pair::new(config(level), config(level), link.clone(), link, seed);
    let mut sent_at = Vec::new();
    let mut rtts = Vec::new();
    let (mut seen_b, mut seen_a) = (0, 0);
    let t0 = pair.now;
    for i in 0..secs * 60 {
        let mut m = vec![0u8; 400];
        m[..8].copy_from_slice(&i.to_be_bytes());
        sent_at.push(pair.now);
        pair.a.send(0, &m).unwrap();
        pair.run_for(Duration::from_micros(16_667));
        let got: Vec<Vec<u8>> = pair.b_events[seen_b..]
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Message { data, .. } => Some(data.clone()),
                _ => None,
            })
            .collect();
        seen_b = pair.b_events.len();
        for d in got {
            pair.b.send(0, &d).unwrap();
        }
        for (at, e) in &pair.a_events[seen_a..] {
            if let Event::Message { data, .. } = e {
                let k = u64::from_be_bytes(data[..8].try_into().unwrap());
                if sent_at[k as usize] > t0 + Duration::from_secs(1) {
                    rtts.push(*at - sent_at[k as usize]);
                }
            }
        }
        seen_a = pair.a_events.len();
    }
    rtts.sort();
    let (sa, sb) = (pair.a.stats(), pair.b.stats());
    let payload = 2.0 * 400.0 * rtts.len() as f64;
    ((rtts), (sa.bytes_sent + sb.bytes_sent) as f64 / payload)
}

fn quantile(rtts: &[Duration], q: f64) -> f64 {
    let d = rtts[((rtts.len() as f64 * q) as usize).min(rtts.len() - 1)];
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Not a test: the echo round trip's p99 in the simulator for each level
/// at 10 and 20 % loss each way (25 ms each way, 3 ms jitter, 400 B at
/// 60 Hz, 60 s), against the lossless one, and wire bytes per payload
/// byte; medians over seeds. `KEEL_SIM_LEVELS` (default "0 1 2 3 4 5")
/// `KEEL_SIM_SEEDS` (default "5 6 7") and `KEEL_SIM_SECS` (default 60)
/// choose; `KEEL_SIM_EACH` set prints each seed's p99 and wire too.
/// `cargo test --release -p keel-rudp-proto --test fec simulated -- --ignored --nocapture`.
#[test]
#[ignore]
fn simulated_tail_curve() {
    let list = |var: &str, default: &str| -> Vec<u64> {
        std::env::var(var)
            .unwrap_or_else(|_| default.into())
            .split_whitespace()
            .map(|s| s.parse().expect("a number"))
            .collect()
    };
    let levels = list("KEEL_SIM_LEVELS", "0 1 2 3 4 5");
    let seeds = list("KEEL_SIM_SEEDS", "5 6 7");
    let secs = list("KEEL_SIM_SECS", "60")[0];
    let point = |level: u8, loss: f64| {
        let runs: Vec<(Vec<Duration>, f64)> = seeds
            .iter()
            .map(|&s| simulated_echo(level, loss, s, secs))
            .collect();
        let p = |q: f64| median(runs.iter().map(|(r, _)| quantile(r, q)).collect());
        let wire = median(runs.iter().map(|(_, w)| *w).collect());
        if std::env::var_os("KEEL_SIM_EACH").is_some() {
            let each: Vec<String> = runs
                .iter()
                .map(|(r, w)| format!("{:.1}/{w:.3}", quantile(r, 0.99)))
                .collect();
            eprintln!(
                "  level {level} loss {loss}: p99/wire by seed {}",
                each.join(" ")
            );
        }
        (p(0.5), p(0.99), p(0.999), wire)
    };
    let lossless = point(2, 0.0);
    eprintln!("lossless p99 {:.1} ms", lossless.1);
    eprintln!(
        "level | 10 %: p50 p99 p99.9 (x lossless) wire | 20 %: p50 p99 p99.9 wire | 20/10 p99"
    );
    for &level in &levels {
        let a = point(level as u8, 0.1);
        let b = point(level as u8, 0.2);
        eprintln!(
            "{level} | {:.1} {:.1} {:.1} ({:.2}x) {:.3} | {:.1} {:.1} {:.1} {:.3} | {:.2}",
            a.0,
            a.1,
            a.2,
            a.1 / lossless.1,
            a.3,
            b.0,
            b.1,
            b.2,
            b.3,
            b.1 / a.1
        );
    }
}
