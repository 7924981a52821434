//! Tests of the impairment spec, the decisions and the held-datagram link.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::Link;
use super::*;
use crate::counters::Counters;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn parses_the_documented_shape_and_round_trips() {
    let imp: Impairment = "loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1,seed=7"
        .parse()
        .unwrap();
    assert_eq!(
        imp,
        Impairment {
            loss: 0.05,
            delay: ms(20),
            jitter: ms(5),
            duplicate: 0.01,
            reorder: 0.1,
            seed: 7,
            ..Impairment::default()
        }
    );
    assert_eq!(imp.to_string().parse::<Impairment>().unwrap(), imp);
    let odd: Impairment =
        "delay=1.5ms,jitter=1500ns,reorder=50%,reorder-delay=2s,limit=3,limit-bytes=9"
            .parse()
            .unwrap();
    assert_eq!(odd.delay, Duration::from_micros(1500));
    assert_eq!(odd.jitter, Duration::from_nanos(1500));
    assert_eq!(odd.reorder, 0.5);
    assert_eq!(odd.to_string().parse::<Impairment>().unwrap(), odd);
    assert_eq!("off".parse::<Impairment>().unwrap(), Impairment::default());
    assert!(Impairment::default().is_off());
    assert_eq!(Impairment::default().to_string(), "off");
    assert!("delay=0".parse::<Impairment>().unwrap().is_off());
    assert_eq!(
        "delay=.5us".parse::<Impairment>().unwrap().delay,
        Duration::from_nanos(500)
    );
}

#[test]
fn errors_name_the_key_and_what_it_accepts() {
    let cases = [
        ("", "impairment", "KEY=VALUE"),
        ("loss", "impairment", "KEY=VALUE"),
        ("loss=0.1,", "impairment", "KEY=VALUE"),
        ("lost=0.1", "impairment", "unknown key \"lost\""),
        ("loss=1.5", "loss", "probability"),
        ("loss=101%", "loss", "percentage"),
        ("loss=-0.1", "loss", "probability"),
        ("loss=nan", "loss", "probability"),
        ("loss=1e-3", "loss", "probability"),
        ("dup=", "dup", "probability"),
        ("delay=20", "delay", "20ms"),
        ("delay=20 ms", "delay", "unit"),
        ("delay=-1ms", "delay", "unit"),
        ("delay=3601s", "delay", "3600s"),
        ("delay=1e999ms", "delay", "unit"),
        ("delay=5ms,jitter=6ms", "jitter", "at most delay (5ms)"),
        ("reorder=0.1,reorder-delay=0", "reorder-delay", "positive"),
        ("seed=-1", "seed", "unsigned integer"),
        ("seed=18446744073709551616", "seed", "unsigned integer"),
        ("limit=0", "limit", "1 to 1000000"),
        ("limit-bytes=x", "limit-bytes", "bytes"),
        ("loss=0.1,loss=0.2", "loss", "more than once"),
    ];
    for (text, key, needle) in cases {
        let e = text.parse::<Impairment>().unwrap_err();
        assert_eq!(e.key, key, "{text:?}: {e}");
        assert!(e.to_string().contains(needle), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
    }
    let bad = Impairment {
        duplicate: f64::NAN,
        ..Impairment::default()
    };
    assert_eq!(bad.validate().unwrap_err().key, "dup");
}

#[test]
fn the_same_seed_gives_the_same_verdicts_and_other_seeds_differ() {
    let imp = Impairment {
        loss: 0.2,
        delay: ms(10),
        jitter: ms(3),
        duplicate: 0.1,
        reorder: 0.1,
        seed: 99,
        ..Impairment::default()
    };
    let run = |imp: &Impairment, stream| {
        let mut c = Conditioner::with_stream(imp, stream);
        (0..5000).map(|_| c.decide()).collect::<Vec<_>>()
    };
    assert_eq!(run(&imp, 0), run(&imp, 0));
    assert_eq!(
        run(&imp, 0),
        (0..5000)
            .scan(Conditioner::new(&imp), |c, _| Some(c.decide()))
            .collect::<Vec<_>>()
    );
    assert_ne!(run(&imp, 0), run(&imp, 1));
    let other = Impairment {
        seed: 100,
        ..imp.clone()
    };
    assert_ne!(run(&imp, 0), run(&other, 0));
    // Loss decisions do not depend on the other settings.
    let lossy_only = Impairment {
        loss: 0.2,
        seed: 99,
        ..Impairment::default()
    };
    let drops = |v: Vec<Verdict>| v.iter().map(|v| *v == Verdict::Drop).collect::<Vec<_>>();
    assert_eq!(drops(run(&imp, 0)), drops(run(&lossy_only, 0)));
}

#[test]
fn delays_stay_within_jitter_and_reorder_adds_its_delay() {
    let imp = Impairment {
        delay: ms(20),
        jitter: ms(5),
        reorder: 0.25,
        reorder_delay: ms(100),
        duplicate: 0.5,
        seed: 3,
        ..Impairment::default()
    };
    let mut c = Conditioner::new(&imp);
    let (mut lo, mut hi, mut reordered) = (Duration::MAX, Duration::ZERO, 0);
    for _ in 0..20_000 {
        let Verdict::Deliver {
            delay,
            reordered: r,
            duplicate,
        } = c.decide()
        else {
            panic!("no loss configured");
        };
        let base = if r {
            reordered += 1;
            delay - ms(100)
        } else {
            delay
        };
        for d in [Some(base), duplicate].into_iter().flatten() {
            assert!(d >= ms(15) && d <= ms(25), "{d:?}");
            lo = lo.min(d);
            hi = hi.max(d);
        }
    }
    assert!(lo < ms(16) && hi > ms(24), "{lo:?} {hi:?}");
    assert!((4500..5500).contains(&reordered), "{reordered}");
}

#[test]
fn probabilities_zero_and_one_are_exact() {
    let mut all = Conditioner::new(&Impairment {
        loss: 1.0,
        ..Impairment::default()
    });
    assert!((0..1000).all(|_| all.decide() == Verdict::Drop));
    let mut dup = Conditioner::new(&Impairment {
        duplicate: 1.0,
        ..Impairment::default()
    });
    assert!((0..1000).all(|_| dup.decide()
        == Verdict::Deliver {
            delay: Duration::ZERO,
            reordered: false,
            duplicate: Some(Duration::ZERO)
        }));
}

#[test]
fn the_link_holds_within_its_bounds_and_releases_by_due_time() {
    let counters = Arc::new(Counters::default());
    let imp = Impairment {
        delay: ms(10),
        jitter: ms(5),
        limit: 100,
        seed: 5,
        ..Impairment::default()
    };
    let mut link = Link::for_config(Some(&imp), &counters, 0).unwrap();
    let t0 = Instant::now();
    for i in 0..150u32 {
        assert_eq!(link.route(t0, None, &i.to_be_bytes()), 0, "all delayed");
    }
    let s = counters.snapshot();
    assert_eq!(link.held(), 100);
    assert_eq!(s.conditioner_delayed, 100);
    assert_eq!(s.conditioner_discarded, 50, "past the bound: counted");
    assert!(link.pop_due(t0 + ms(5) - Duration::from_nanos(1)).is_none());
    let mut released = 0;
    for step in 5..=15 {
        while let Some((_, buf)) = link.pop_due(t0 + ms(step)) {
            released += 1;
            link.recycle(buf);
        }
    }
    assert_eq!((released, link.held()), (100, 0));

    // Equal delays keep the order they were held in.
    let fifo = Impairment {
        delay: ms(1),
        ..Impairment::default()
    };
    let mut link = Link::for_config(Some(&fifo), &counters, 0).unwrap();
    for i in 0..50u8 {
        link.route(t0, None, &[i]);
    }
    let order: Vec<u8> = std::iter::from_fn(|| link.pop_due(t0 + ms(1)))
        .map(|(_, b)| b[0])
        .collect();
    assert_eq!(order, (0..50).collect::<Vec<u8>>());

    // The byte bound, and what is still held when the link goes away.
    let bytes = Impairment {
        limit_bytes: 1000,
        ..fifo
    };
    let mut link = Link::for_config(Some(&bytes), &counters, 0).unwrap();
    let before = counters.snapshot().conditioner_discarded;
    for _ in 0..3 {
        link.route(t0, None, &[0u8; 600]);
    }
    assert_eq!(link.held(), 1);
    assert_eq!(counters.snapshot().conditioner_discarded, before + 2);
    drop(link);
    assert_eq!(counters.snapshot().conditioner_discarded, before + 3);
    assert!(Link::for_config(Some(&Impairment::default()), &counters, 0).is_none());
    assert!(Link::for_config(None, &counters, 0).is_none());
}
