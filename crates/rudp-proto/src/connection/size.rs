//! What a connection's state takes, field by field (printed with
//! `--nocapture`), and a bound on the whole: a server holds thousands.

use super::*;

#[test]
fn connection_size() {
    use std::mem::size_of;
    let parts = [
        ("Connection", size_of::<Connection>()),
        ("Config", size_of::<Config>()),
        ("Stats", size_of::<Stats>()),
        ("Recovery", size_of::<Recovery>()),
        ("RttEstimator", size_of::<RttEstimator>()),
        ("NewReno", size_of::<NewReno>()),
        ("Pacer", size_of::<Pacer>()),
        ("RangeSet", size_of::<RangeSet>()),
        ("SendChannel", size_of::<SendChannel>()),
        ("RecvChannel", size_of::<RecvChannel>()),
        ("RecvMem", size_of::<RecvMem>()),
        ("SendMem", size_of::<SendMem>()),
        ("VecDeque<Event>", size_of::<VecDeque<Event>>()),
        ("Event", size_of::<Event>()),
        ("Instant", size_of::<Instant>()),
        ("Option<Instant>", size_of::<Option<Instant>>()),
    ];
    for (name, n) in parts {
        eprintln!("{name}: {n} B");
    }
    // 1,480 B before the counters left `Stats` and the handshake's and the
    // close's state went into boxes made when they are used (issue 23);
    // 1,112 B then, 1,184 B with parity's six counters and its receive box.
    assert!(
        size_of::<Connection>() <= MAX_CONNECTION_BYTES,
        "a Connection is {} B, more than {MAX_CONNECTION_BYTES} B",
        size_of::<Connection>()
    );
}

/// The bound: a little above today's size, so that growth is a decision.
const MAX_CONNECTION_BYTES: usize = 1216;
