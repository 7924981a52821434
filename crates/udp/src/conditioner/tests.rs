//! Tests of the held-datagram link (the spec and the decisions are
//! keel-impair's, tested there).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::Link;
use super::*;
use crate::counters::Counters;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
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
