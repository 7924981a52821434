//! The ack policy (`Config::tick_ack_delay`): while an end sends at a
//! steady interval, its acknowledgements wait for its next packet instead
//! of leaving alone; what loss recovery needs is still acknowledged at
//! once, and an end that stops sending still acknowledges within the
//! bound. Virtual time throughout (the simulated link, or datagrams
//! carried by hand).

use std::time::{Duration, Instant};

use keel_rudp_proto::sim::{Impairment, LinkConfig, Pair};
use keel_rudp_proto::{
    ChannelConfig, ChannelKind, Config, Connection, ConnectionId, Event, Side,
    DEFAULT_TICK_ACK_DELAY,
};

const MS: Duration = Duration::from_millis(1);

fn config() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

fn messages(events: &[(Instant, Event)]) -> Vec<Vec<u8>> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Message { data, .. } => Some(data.clone()),
            _ => None,
        })
        .collect()
}

/// `a` sends a 400-byte message every `period` for `ticks` ticks, `b`
/// echoes each one as it arrives (the scale benchmark's load), over a
/// link of 10 ms each way. Returns the pair after everything settled.
fn tick_echo(a_cfg: Config, period: Duration, ticks: u32) -> Pair {
    let link = LinkConfig::new(Impairment {
        delay: 10 * MS,
        ..Impairment::default()
    });
    let mut pair = Pair::new(a_cfg, config(), link.clone(), link, 1);
    let mut echoed = 0;
    for k in 0..ticks {
        pair.a.send(0, &[k as u8; 400]).unwrap();
        let end = pair.now + period;
        while pair.now < end {
            pair.run_for(MS);
            let got = messages(&pair.b_events);
            for m in &got[echoed..] {
                pair.b.send(0, m).unwrap();
            }
            echoed = got.len();
        }
    }
    pair.run_for(Duration::from_millis(500));
    assert_eq!(
        messages(&pair.a_events).len(),
        ticks as usize,
        "every echo came back"
    );
    pair
}

#[test]
fn at_a_steady_tick_acknowledgements_ride_on_the_next_message() {
    // 20 Hz: a's acknowledgement of each echo (which arrives 20 ms after
    // its message) waits 30 ms for the next message instead of leaving
    // alone after max_ack_delay (5 ms). Before the policy a sent one
    // packet of its own per echo: 2 packets a tick.
    let ticks = 100;
    let pair = tick_echo(config(), 50 * MS, ticks);
    let a = pair.a.stats();
    let b = pair.b.stats();
    let alone = a.packets_sent - u64::from(ticks);
    assert!(alone <= 3, "{alone} packets of a carried no message");
    // The peer allows for the wait (it was announced): no spurious probe
    // or loss.
    assert_eq!((b.probes, b.packets_lost, b.spurious_losses), (0, 0, 0));
    assert_eq!(pair.b.peer_max_ack_delay(), DEFAULT_TICK_ACK_DELAY);
}

#[test]
fn with_the_policy_off_each_echo_is_acknowledged_alone() {
    // The same load with tick_ack_delay at or below max_ack_delay: the old
    // behaviour, one acknowledgement of its own per echo.
    let mut cfg = config();
    cfg.tick_ack_delay = Duration::ZERO;
    let ticks = 100;
    let pair = tick_echo(cfg, 50 * MS, ticks);
    let alone = pair.a.stats().packets_sent - u64::from(ticks);
    assert!(alone >= u64::from(ticks) - 3, "{alone} packets alone");
    assert_eq!(pair.b.peer_max_ack_delay(), 5 * MS);
}

#[test]
fn a_tick_slower_than_the_bound_keeps_max_ack_delay() {
    // 10 Hz: the next message (100 ms) is past the 60 ms bound, so the
    // acknowledgements leave alone after max_ack_delay, as before.
    let ticks = 30;
    let pair = tick_echo(config(), 100 * MS, ticks);
    let alone = pair.a.stats().packets_sent - u64::from(ticks);
    assert!(alone >= u64::from(ticks) - 3, "{alone} packets alone");
}

/// Two ends joined by hand (datagrams carried at once, no loss): `a`
/// sends a message every 20 ms for `ticks` ticks, each acknowledged by `b`
/// at once (`b` sends nothing of its own, so its acknowledgements leave at
/// `max_ack_delay`). Returns the ends and the time of `a`'s last send.
fn ticking(ticks: u32) -> (Connection, Connection, Instant, Instant) {
    ticking_losing(ticks, |_| false)
}

/// [`ticking`], with `a`'s packets of the ticks where `lost(k)` dropped.
fn ticking_losing(
    ticks: u32,
    lost: impl Fn(u32) -> bool,
) -> (Connection, Connection, Instant, Instant) {
    let t0 = Instant::now();
    let cid = ConnectionId([3; 8]);
    let mut a = Connection::established(config(), Side::Client, cid, t0).unwrap();
    let mut b = Connection::established(config(), Side::Server, cid, t0).unwrap();
    let mut last = t0;
    for k in 0..ticks {
        let mut now = t0 + 20 * MS * k;
        last = now;
        a.send(0, &[1; 100]).unwrap();
        if lost(k) {
            let mut buf = [0u8; 1500];
            while a.poll_transmit(now, &mut buf).is_some() {}
        } else {
            deliver(&mut a, &mut b, now);
        }
        // b acknowledges after its max_ack_delay.
        now += 5 * MS;
        b.handle_timeout(now);
        deliver(&mut b, &mut a, now);
    }
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}
    (a, b, t0, last)
}

/// Hands every datagram `from` has to send at `at` to `to`, at `at`.
fn deliver(from: &mut Connection, to: &mut Connection, at: Instant) {
    let mut buf = [0u8; 1500];
    while let Some(n) = from.poll_transmit(at, &mut buf) {
        to.handle_datagram(at, &buf[..n]);
    }
}

/// Runs `c`'s timers from `from` until it sends a datagram (at most
/// `within`); returns when.
fn next_send(c: &mut Connection, from: Instant, within: Duration) -> Option<Instant> {
    let mut buf = [0u8; 1500];
    let mut now = from;
    loop {
        if c.poll_transmit(now, &mut buf).is_some() {
            return Some(now);
        }
        let t = c.poll_timeout()?;
        let t = if t <= now {
            now + Duration::from_micros(100)
        } else {
            t
        };
        if t > from + within {
            return None;
        }
        now = t;
        c.handle_timeout(now);
    }
}

#[test]
fn a_ticking_end_that_stops_sending_still_acknowledges_within_the_bound() {
    // a ticked at 50 Hz and stops; b sends a message 5 ms after a's last.
    // a's acknowledgement waits for a's next tick (due 20 ms after its
    // last send, 15 ms after the arrival) and a quarter tick more, then,
    // with no tick, leaves alone: 20 ms after the arrival, within the
    // 60 ms bound and long before the peer's probe.
    let (mut a, mut b, _, last) = ticking(10);
    let at = last + 5 * MS;
    b.send(0, b"from b").unwrap();
    deliver(&mut b, &mut a, at);
    let sent = next_send(&mut a, at, DEFAULT_TICK_ACK_DELAY).expect("an acknowledgement");
    let waited = sent - at;
    assert!(
        waited > 5 * MS,
        "acknowledged after {waited:?}: did not wait for the tick"
    );
    assert!(waited <= 21 * MS, "acknowledged after {waited:?}");
}

#[test]
fn an_end_that_never_sent_acknowledges_at_max_ack_delay() {
    // b only acknowledges (nothing of its own): no tick to wait for.
    let (mut a, mut b, _, last) = ticking(10);
    let at = last + 20 * MS;
    a.send(0, b"to b").unwrap();
    deliver(&mut a, &mut b, at);
    let sent = next_send(&mut b, at, DEFAULT_TICK_ACK_DELAY).expect("an acknowledgement");
    assert_eq!(sent - at, 5 * MS);
}

#[test]
fn a_packet_after_a_gap_is_acknowledged_at_once_while_ticking() {
    // a ticks at 50 Hz, so a lone packet's acknowledgement would wait for
    // its next tick; but b's second packet arrives after a gap (the first
    // was lost): loss recovery needs that acknowledgement now.
    let (mut a, mut b, _, last) = ticking(10);
    let mut buf = [0u8; 1500];
    let at = last + 2 * MS;
    b.send(0, b"lost").unwrap();
    while b.poll_transmit(at, &mut buf).is_some() {} // dropped
    let at = at + MS;
    b.send(0, b"after the gap").unwrap();
    deliver(&mut b, &mut a, at);
    assert!(
        a.poll_transmit(at, &mut buf).is_some(),
        "no acknowledgement at once"
    );
    // And a lone in-order packet in the same state does wait.
    let at = at + MS;
    b.send(0, b"in order").unwrap();
    deliver(&mut b, &mut a, at);
    assert!(
        a.poll_transmit(at + 5 * MS, &mut buf).is_none(),
        "did not wait"
    );
}

/// `b` sends two messages 2 and 4 ms after `a`'s last tick (a peer's
/// tick that jitter put between two of `a`'s); returns whether `a`
/// acknowledged them at once, in a packet of its own.
fn pair_between_ticks_acknowledged_at_once(
    a: &mut Connection,
    b: &mut Connection,
    last: Instant,
) -> bool {
    let mut buf = [0u8; 1500];
    for (i, at) in [last + 2 * MS, last + 4 * MS].into_iter().enumerate() {
        b.send(0, &[i as u8; 100]).unwrap();
        deliver(b, a, at);
    }
    a.poll_transmit(last + 4 * MS, &mut buf).is_some()
}

#[test]
fn on_a_clean_link_two_packets_between_ticks_wait_for_the_tick() {
    // From the start (nothing lost yet) and after 150 ticks without a
    // loss (the measured loss below 1 %; it starts at 6.25 %).
    let (mut a, mut b, _, last) = ticking(5);
    assert!(
        !pair_between_ticks_acknowledged_at_once(&mut a, &mut b, last),
        "a new connection's pair was acknowledged alone"
    );
    let (mut a, mut b, _, last) = ticking(150);
    assert!(
        !pair_between_ticks_acknowledged_at_once(&mut a, &mut b, last),
        "two packets between ticks were acknowledged alone"
    );
    // The acknowledgement rides on the next tick (20 ms after the last)
    // instead, within a quarter tick.
    let sent =
        next_send(&mut a, last + 4 * MS, DEFAULT_TICK_ACK_DELAY).expect("an acknowledgement");
    assert!(
        sent >= last + 20 * MS && sent <= last + 25 * MS,
        "{:?}",
        sent - last
    );
    // A third packet before the tick is acknowledged at once.
    let (mut a, mut b, _, last) = ticking(150);
    let _ = pair_between_ticks_acknowledged_at_once(&mut a, &mut b, last);
    b.send(0, b"third").unwrap();
    deliver(&mut b, &mut a, last + 6 * MS);
    let mut buf = [0u8; 1500];
    assert!(
        a.poll_transmit(last + 6 * MS, &mut buf).is_some(),
        "the third waited"
    );
}

#[test]
fn under_loss_two_packets_between_ticks_are_acknowledged_at_once() {
    // The same, but a lost one of its packets: its measured loss is above
    // 1 %, so every second packet is acknowledged at once (the peer's loss
    // detection learns of a pair sooner).
    let (mut a, mut b, _, last) = ticking_losing(150, |k| k == 140);
    assert_eq!(a.stats().packets_lost, 1);
    assert!(
        pair_between_ticks_acknowledged_at_once(&mut a, &mut b, last),
        "a lossy link's pair waited for the tick"
    );
}

#[test]
fn under_loss_a_steady_echo_delivers_everything_in_order() {
    // 60 Hz both ways (the echo), 10 % loss each way, 25 ms each way: the
    // acknowledgements that ride still let both ends recover every loss.
    let link = LinkConfig::new(Impairment {
        loss: 0.1,
        delay: 25 * MS,
        ..Impairment::default()
    });
    let mut pair = Pair::new(config(), config(), link.clone(), link, 9);
    let ticks = 300u32;
    let mut echoed = 0;
    for k in 0..ticks {
        pair.a.send(0, &k.to_be_bytes()).unwrap();
        let end = pair.now + Duration::from_micros(16_667);
        while pair.now < end {
            pair.run_for(MS);
            let got = messages(&pair.b_events);
            for m in &got[echoed..] {
                pair.b.send(0, m).unwrap();
            }
            echoed = got.len();
        }
    }
    for _ in 0..2000 {
        pair.run_for(MS);
        let got = messages(&pair.b_events);
        for m in &got[echoed..] {
            pair.b.send(0, m).unwrap();
        }
        echoed = got.len();
    }
    let back: Vec<u32> = messages(&pair.a_events)
        .iter()
        .map(|d| u32::from_be_bytes(d[..4].try_into().unwrap()))
        .collect();
    assert_eq!(back, (0..ticks).collect::<Vec<_>>());
}

#[test]
fn a_probe_is_acknowledged_at_once() {
    // a ticked at 50 Hz; b's second message arrives and a's
    // acknowledgement of it is lost, so b probes (a PING and the chunk
    // again), in order. The probe's acknowledgement is what b's loss
    // recovery waits for: a sends it at once, not after max_ack_delay.
    let (mut a, mut b, _, last) = ticking(10);
    let mut buf = [0u8; 1500];
    // A first message, acknowledged: b's RTT sample.
    let at = last + MS;
    b.send(0, b"acknowledged").unwrap();
    deliver(&mut b, &mut a, at);
    let mut acked = at;
    let n = loop {
        if let Some(n) = a.poll_transmit(acked, &mut buf) {
            break n;
        }
        acked = a
            .poll_timeout()
            .unwrap()
            .max(acked + Duration::from_micros(100));
        a.handle_timeout(acked);
    };
    b.handle_datagram(acked, &buf[..n]);
    assert!(b.stats().packets_acked > 0, "b's RTT sample");
    b.send(0, b"second").unwrap();
    let at = acked;
    deliver(&mut b, &mut a, at);
    next_send(&mut a, at, DEFAULT_TICK_ACK_DELAY).expect("an acknowledgement (lost)");
    // b's probe timeout passes with nothing acknowledged.
    let mut t = at;
    let mut sent = 0;
    for _ in 0..16 {
        t = b.poll_timeout().expect("a timer").max(t);
        b.handle_timeout(t);
        while let Some(n) = b.poll_transmit(t, &mut buf) {
            if b.stats().probes > 0 {
                a.handle_datagram(t, &buf[..n]);
                sent += 1;
            }
        }
        if b.stats().probes > 0 {
            break;
        }
    }
    assert_eq!((b.stats().probes, sent), (1, 1), "b's probe");
    assert!(t < last + Duration::from_secs(1), "before a's keepalive");
    assert!(
        a.poll_transmit(t, &mut buf).is_some(),
        "the probe waits for its ack"
    );
}
