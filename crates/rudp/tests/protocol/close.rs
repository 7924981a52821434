//! A close loses nothing silently (sans-IO, on a virtual clock): what was
//! queued before it is flushed, its CLOSE is repeated until acknowledged,
//! what did not get through is reported; and a peer that never
//! acknowledges is disconnected.

use std::time::{Duration, Instant};

use keel_rudp_proto::sim::{Impairment, LinkConfig, Pair};
use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, DisconnectReason, Event, State};

fn cfg() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
    ])
}

fn lossy(loss: f64) -> LinkConfig {
    LinkConfig::new(Impairment {
        loss,
        delay: Duration::from_millis(20),
        ..Impairment::default()
    })
}

fn messages(ev: &[(Instant, Event)]) -> usize {
    ev.iter()
        .filter(|(_, e)| matches!(e, Event::Message { .. }))
        .count()
}

fn disconnect(ev: &[(Instant, Event)]) -> Option<(Instant, DisconnectReason)> {
    ev.iter().find_map(|(t, e)| match e {
        Event::Disconnected(r) => Some((*t, r.clone())),
        _ => None,
    })
}

/// 500 reliable messages queued just before `close`, over 10 % loss each
/// way: the peer gets every one, then the reason.
#[test]
fn a_close_flushes_what_was_queued_before_it() {
    const N: usize = 500;
    let mut p = Pair::new(cfg(), cfg(), lossy(0.1), lossy(0.1), 21);
    p.run_for(Duration::from_millis(200));
    for i in 0..N {
        p.a.send((i % 2) as u8, &[i as u8; 100]).unwrap();
    }
    let now = p.now;
    p.a.close(now, 4000, "match over");
    p.run_for(Duration::from_secs(3));
    assert_eq!(messages(&p.b_events), N, "messages the peer received");
    // The reason comes after the messages.
    let last = p.b_events.last().map(|(_, e)| e.clone());
    assert_eq!(
        last,
        Some(Event::Disconnected(DisconnectReason::Remote {
            code: 4000,
            reason: "match over".into()
        }))
    );
    let (_, mine) = disconnect(&p.a_events).expect("this side's end");
    assert_eq!(
        mine,
        DisconnectReason::Local {
            code: 4000,
            reason: "match over".into()
        }
    );
    assert_eq!(p.a.state(), State::Closed);
    let left = p.a.undelivered();
    assert!(left.is_empty(), "{left:?}");
}

/// Over 30 % loss each way, on 30 seeds, every peer learns the reason:
/// the CLOSE is repeated until it is acknowledged; the closing side
/// learns it was, and its end comes then, not at its close timeout.
#[test]
fn the_close_is_repeated_until_acknowledged() {
    let mut acknowledged = 0;
    for seed in 0..30 {
        let mut p = Pair::new(cfg(), cfg(), lossy(0.3), lossy(0.3), 100 + seed);
        p.run_for(Duration::from_millis(500));
        let closed_at = p.now;
        p.a.close(closed_at, 7, "bye");
        p.run_for(Duration::from_secs(3));
        let (_, theirs) = disconnect(&p.b_events).unwrap_or_else(|| panic!("seed {seed}: none"));
        assert_eq!(
            theirs,
            DisconnectReason::Remote {
                code: 7,
                reason: "bye".into()
            },
            "seed {seed}"
        );
        let (at, _) = disconnect(&p.a_events).expect("this side's end");
        let left = p.a.undelivered();
        if !left.close_unacknowledged {
            acknowledged += 1;
            assert!(
                at - closed_at < Duration::from_secs(2),
                "seed {seed}: ended {:?} after the close, at its timeout",
                at - closed_at
            );
        }
    }
    // An acknowledgement can be lost after the peer stopped draining;
    // most are not.
    assert!(acknowledged >= 25, "{acknowledged} of 30 acknowledged");
}

/// A peer gone silent: the close ends at `close_timeout` and reports the
/// messages not acknowledged and the CLOSE not acknowledged.
#[test]
fn a_close_to_a_silent_peer_ends_on_time_and_says_what_was_lost() {
    let mut p = Pair::new(cfg(), cfg(), lossy(0.0), lossy(0.0), 3);
    p.run_for(Duration::from_millis(200));
    p.b_frozen = true;
    p.a.send(0, b"one").unwrap();
    p.a.send(0, b"two").unwrap();
    p.a.send(1, &[9; 3000]).unwrap();
    let closed_at = p.now;
    p.a.close(closed_at, 1000, "done");
    p.run_for(Duration::from_secs(5));
    let (at, _) = disconnect(&p.a_events).expect("this side's end");
    assert_eq!(at - closed_at, Duration::from_secs(2), "close_timeout");
    let left = p.a.undelivered();
    assert_eq!((left.messages, left.bytes), (3, 3006), "{left:?}");
    assert_eq!(left.channels.len(), 2);
    assert_eq!(
        (
            left.channels[0].channel,
            left.channels[0].messages,
            left.channels[0].first_seq
        ),
        (0, 2, 0)
    );
    assert_eq!(
        (left.channels[1].channel, left.channels[1].bytes),
        (1, 3000)
    );
    assert!(left.close_unacknowledged);
}

/// A peer that keeps sending (keepalives) but never acknowledges: the
/// idle timeout never fires, since packets arrive; the ack timeout does.
#[test]
fn a_peer_that_never_acknowledges_is_disconnected() {
    let mut patient = cfg();
    patient.idle_timeout = Duration::from_secs(120);
    let mut p = Pair::new(cfg(), patient, lossy(0.0), lossy(0.0), 4);
    p.run_for(Duration::from_millis(200));
    // Nothing a sends reaches b, so b acknowledges nothing; b still sends.
    p.ab.cut = true;
    let cut_at = p.now;
    p.a.send(0, &[1; 1000]).unwrap();
    p.run_for(Duration::from_secs(40));
    let (at, reason) = disconnect(&p.a_events).expect("disconnected within 40 s");
    assert_eq!(format!("{reason:?}"), "AckTimeout");
    let after = at - cut_at;
    assert!(
        after >= Duration::from_secs(15) && after <= Duration::from_secs(16),
        "{after:?}"
    );
    assert_eq!(p.a.state(), State::Closed);
    assert!(p.a.stats().packets_received > 10, "b kept sending");
}

/// The endpoint counts a connection its peer never acknowledged, once it
/// is removed (driven by hand: the client's packets arrive, the server's
/// are lost).
#[test]
fn the_endpoint_counts_ack_timeouts_and_what_was_lost() {
    use keel_rudp_proto::{
        ClientSecurity, Connection, Endpoint, EndpointConfig, Handled, ServerSecurity,
    };
    let mut scfg = cfg();
    scfg.ack_timeout = Duration::from_secs(3);
    let mut now = Instant::now();
    let mut server = Endpoint::new(
        EndpointConfig::new(0, [7; 32], scfg, ServerSecurity::Insecure),
        now,
    )
    .unwrap();
    let mut client = Connection::connect(cfg(), ClientSecurity::Insecure, [1; 16], now).unwrap();
    let addr = "192.0.2.1:5000".parse().unwrap();
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    let mut conn = None;
    for _ in 0..2 {
        let n = client.poll_transmit(now, &mut buf).unwrap();
        match server.handle(now, addr, &buf[..n], &mut reply) {
            Handled::Reply(m) => client.handle_datagram(now, &reply[..m]),
            Handled::Accepted(h, m) => {
                client.handle_datagram(now, &reply[..m]);
                conn = Some(h);
            }
            other => panic!("{other:?}"),
        }
    }
    let conn = conn.expect("accepted");
    server
        .connection_mut(conn)
        .unwrap()
        .send(0, &[5; 100])
        .unwrap();
    // 10 s: the client keeps sending keepalives; nothing comes back.
    let end = now + Duration::from_secs(10);
    while now < end {
        while let Some(n) = client.poll_transmit(now, &mut buf) {
            server.handle(now, addr, &buf[..n], &mut reply);
        }
        while server.poll_transmit(now, &mut buf).is_some() {}
        while server.poll_event().is_some() {}
        server.handle_timeout(now);
        if client.poll_timeout().is_some_and(|t| t <= now) {
            client.handle_timeout(now);
        }
        now += Duration::from_millis(50);
    }
    let s = server.stats();
    assert_eq!(s.connections_removed, 1, "{s:?}");
    assert_eq!(
        (
            s.ack_timeouts,
            s.undelivered_connections,
            s.undelivered_messages
        ),
        (1, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.closes_unacknowledged, 1, "{s:?}");
}
