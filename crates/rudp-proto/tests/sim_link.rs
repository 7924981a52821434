//! The simulator's link is keel's one impairment model (keel-impair) and
//! nothing of its own: each datagram arrives exactly when the model's
//! verdict for its seed says (`delay +/- jitter`, the reorder delay, the
//! copy), the return link of a `Pair` is stream 1 of the seed, an invalid
//! setting is refused by name, what it holds is bounded and counted, and
//! a cut link still draws each datagram's fate.

use std::time::{Duration, Instant};

use keel_impair::{Conditioner, Verdict};
use keel_rudp_proto::sim::{Impairment, Link, LinkConfig, Pair};
use keel_rudp_proto::{ChannelConfig, ChannelKind, Config};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn bad() -> Impairment {
    Impairment {
        loss: 0.1,
        delay: ms(20),
        jitter: ms(5),
        duplicate: 0.1,
        reorder: 0.1,
        reorder_delay: ms(30),
        ..Impairment::default()
    }
}

/// Offers `n` datagrams (their index as 4 bytes) at `t0` and drains the
/// link: each arrival as (index, hold).
fn arrivals(link: &mut Link, t0: Instant, n: u32) -> Vec<(u32, Duration)> {
    for i in 0..n {
        link.send(t0, &i.to_be_bytes());
    }
    let mut got = Vec::new();
    while let Some(at) = link.next_arrival() {
        let d = link.receive(at).expect("due");
        got.push((u32::from_be_bytes(d[..4].try_into().unwrap()), at - t0));
    }
    got
}

/// What the model says for stream `stream` of `seed`: each copy as
/// (index, hold), in the order the link releases them (by hold, then in
/// the order they were held).
fn predicted(imp: &Impairment, seed: u64, stream: u64, n: u32) -> Vec<(u32, Duration)> {
    let imp = Impairment {
        seed,
        ..imp.clone()
    };
    let mut c = Conditioner::with_stream(&imp, stream);
    let mut copies = Vec::new();
    for i in 0..n {
        if let Verdict::Deliver {
            delay, duplicate, ..
        } = c.decide()
        {
            copies.push((i, delay));
            copies.extend(duplicate.map(|d| (i, d)));
        }
    }
    // Stable: equal holds keep the order they were held in.
    copies.sort_by_key(|&(_, d)| d);
    copies
}

#[test]
fn a_link_delivers_what_the_model_decides() {
    let t0 = Instant::now();
    let mut link = Link::new(LinkConfig::new(bad()), 7);
    let got = arrivals(&mut link, t0, 2000);
    assert_eq!(got, predicted(&bad(), 7, 0, 2000));
    // Jitter is +/- around the delay (the simulator used to add 0..=jitter).
    let plain: Vec<Duration> = got
        .iter()
        .map(|(_, d)| *d)
        .filter(|d| *d <= ms(25))
        .collect();
    assert!(
        plain.iter().all(|d| *d >= ms(15)),
        "{:?}",
        plain.iter().min()
    );
    assert!(
        plain.iter().any(|d| *d < ms(16)),
        "{:?}",
        plain.iter().min()
    );
    let s = link.stats;
    assert_eq!(s.sent, 2000);
    assert_eq!(s.delivered, got.len() as u64);
    assert_eq!(s.sent - s.lost + s.duplicated, s.delivered);
    assert!(s.reordered > 0 && s.duplicated > 0 && s.lost > 0, "{s:?}");
    // And again: the same seed, the same arrivals.
    let mut again = Link::new(LinkConfig::new(bad()), 7);
    assert_eq!(arrivals(&mut again, t0, 2000), got);
    assert_eq!(again.stats, s);
}

#[test]
fn a_pair_decides_with_streams_0_and_1_of_its_seed() {
    let cfg = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
    let link = LinkConfig::new(bad());
    let mut p = Pair::new(cfg.clone(), cfg, link.clone(), link, 5);
    let t0 = p.now;
    assert_eq!(arrivals(&mut p.ab, t0, 500), predicted(&bad(), 5, 0, 500));
    assert_eq!(arrivals(&mut p.ba, t0, 500), predicted(&bad(), 5, 1, 500));
}

#[test]
fn a_cut_link_drops_everything_and_keeps_the_fates_of_what_follows() {
    let t0 = Instant::now();
    let mut link = Link::new(LinkConfig::new(bad()), 3);
    link.cut = true;
    assert!(arrivals(&mut link, t0, 100).is_empty());
    assert_eq!(link.stats.lost, 100);
    link.cut = false;
    let after: Vec<(u32, Duration)> = arrivals(&mut link, t0, 200);
    // The verdicts of datagrams 100..300 of the seed.
    let expected: Vec<(u32, Duration)> = predicted(&bad(), 3, 0, 300)
        .into_iter()
        .filter(|(i, _)| *i >= 100)
        .map(|(i, d)| (i - 100, d))
        .collect();
    assert_eq!(after, expected);
}

#[test]
fn what_a_link_holds_is_bounded_and_counted() {
    let t0 = Instant::now();
    let cfg = LinkConfig::new(Impairment {
        delay: ms(10),
        limit: 10,
        ..Impairment::default()
    });
    let mut link = Link::new(cfg, 1);
    assert_eq!(arrivals(&mut link, t0, 15).len(), 10);
    assert_eq!(link.stats.discarded, 5);
    let bytes = LinkConfig::new(Impairment {
        delay: ms(10),
        limit_bytes: 1000,
        ..Impairment::default()
    });
    let mut link = Link::new(bytes, 1);
    for _ in 0..3 {
        link.send(t0, &[0; 600]);
    }
    assert_eq!(link.stats.discarded, 2);
    assert!(link.receive(t0 + ms(10)).is_some());
    // Released bytes are room again.
    link.send(t0, &[0; 600]);
    assert_eq!(link.stats.discarded, 2);
}

#[test]
fn invalid_settings_are_refused_by_name() {
    let cases = [
        (
            LinkConfig::new(Impairment {
                delay: ms(20),
                jitter: ms(80),
                ..Impairment::default()
            }),
            "jitter: expected at most delay (20ms)",
        ),
        (
            LinkConfig::new(Impairment {
                loss: 1.5,
                ..Impairment::default()
            }),
            "loss: expected a probability",
        ),
        (
            LinkConfig {
                bandwidth: Some(0),
                ..LinkConfig::default()
            },
            "bandwidth: expected None (unlimited) or at least 1 byte per second",
        ),
        (
            LinkConfig {
                queue_limit: 0,
                ..LinkConfig::default()
            },
            "queue-limit: expected at least 1 byte",
        ),
    ];
    for (cfg, message) in cases {
        let e = cfg.validate().unwrap_err();
        assert!(e.to_string().starts_with(message), "{e}");
    }
    assert!(LinkConfig::default().validate().is_ok());
}

#[test]
#[should_panic(expected = "sim::LinkConfig: jitter: expected at most delay")]
fn a_link_with_an_invalid_setting_is_not_made() {
    let _ = Link::new(
        LinkConfig::new(Impairment {
            jitter: ms(1),
            ..Impairment::default()
        }),
        1,
    );
}
