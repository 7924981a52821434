//! What a game server needs beyond echo: admission with the first datagram,
//! session handles used from other threads, sends that land on the lane
//! owning the session, a per-player pass that sends, and session timers.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::{IoModel, MissedTicks, Runtime, TimerId};
use keel_udp::{
    DisconnectReason, FullPolicy, Server, ServerConfig, ServerCtx, ServerHandler, Session,
    SessionHandle,
};

/// Admits only peers whose first datagram is `join`; then: `bye` closes the
/// session, `arm` starts a 10 ms periodic session timer that sends `tick`,
/// `handle` publishes the session's handle; everything else is recorded.
struct Game {
    log: Arc<Log>,
    handles: Arc<Mutex<Vec<SessionHandle<u32>>>>,
    ticks: Arc<Progress>,
    /// Told the tick count when a lane timer fires.
    lane_timer: LaneTimer,
    armed: HashMap<SocketAddr, TimerId>,
}

type LaneTimer = Arc<Mutex<Option<mpsc::Sender<u64>>>>;

impl ServerHandler for Game {
    type SessionState = u32;

    fn accept(
        &mut self,
        _: &mut ServerCtx<'_, u32>,
        peer: SocketAddr,
        first: &[u8],
    ) -> Option<u32> {
        if first != b"join" {
            return None;
        }
        self.log.push(Event::Connect(peer));
        Some(0)
    }

    fn datagram(&mut self, s: &mut Session<'_, u32>, data: &[u8]) {
        *s.state() += 1;
        match data {
            b"join" => s.send(b"welcome").unwrap(),
            b"bye" => s.close(),
            b"arm" => {
                let every = Duration::from_millis(10);
                let id = s.timer(Instant::now() + every, Some(every));
                self.armed.insert(s.peer(), id);
            }
            b"disarm" => {
                let id = self.armed.remove(&s.peer()).unwrap();
                assert!(s.cancel_timer(id));
                assert!(!s.cancel_timer(id), "a second cancel finds nothing");
                s.send(b"disarmed").unwrap();
            }
            b"handle" => {
                self.handles.lock().unwrap().push(s.handle());
                s.send(b"handle ok").unwrap();
            }
            _ => self.log.push(Event::Datagram(s.peer(), data.to_vec())),
        }
    }

    fn disconnected(
        &mut self,
        _: &mut ServerCtx<'_, u32>,
        peer: SocketAddr,
        _: u32,
        why: DisconnectReason,
    ) {
        self.log.push(Event::Disconnect(peer, why));
    }

    fn session_timer(&mut self, s: &mut Session<'_, u32>, _: TimerId) {
        let _ = s.send(b"tick");
        self.ticks.add(1);
    }

    fn timer(&mut self, ctx: &mut ServerCtx<'_, u32>, id: TimerId) {
        ctx.cancel_timer(id);
        if let Some(tx) = self.lane_timer.lock().unwrap().take() {
            tx.send(self.ticks.get()).unwrap();
        }
    }
}

struct Fixture {
    rt: Runtime,
    server: Server<Game>,
    log: Arc<Log>,
    handles: Arc<Mutex<Vec<SessionHandle<u32>>>>,
    ticks: Arc<Progress>,
    lane_timer: LaneTimer,
}

fn start(model: IoModel, config: ServerConfig) -> Fixture {
    let rt = Runtime::new(model).unwrap();
    let log = Arc::new(Log::default());
    let handles = Arc::new(Mutex::new(Vec::new()));
    let ticks = Arc::new(Progress::default());
    let lane_timer = LaneTimer::default();
    let (l, h, t, lt) = (
        log.clone(),
        handles.clone(),
        ticks.clone(),
        lane_timer.clone(),
    );
    let server = Server::bind(rt.handles(), v4(), config, move |_| Game {
        log: l.clone(),
        handles: h.clone(),
        ticks: t.clone(),
        lane_timer: lt.clone(),
        armed: HashMap::new(),
    })
    .unwrap();
    Fixture {
        rt,
        server,
        log,
        handles,
        ticks,
        lane_timer,
    }
}

/// A client that joined (got `welcome`).
fn joined(f: &Fixture) -> UdpSocket {
    let c = std_client(v4());
    c.send_to(b"join", f.server.local_addr()).unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = recv_from(&c, &mut buf, "welcome");
    assert_eq!(&buf[..n], b"welcome");
    c
}

fn recv_text(c: &UdpSocket, what: &str) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let (n, _) = recv_from(c, &mut buf, what);
    buf[..n].to_vec()
}

#[test]
fn connect_refuses_with_the_first_datagram_in_hand_and_keeps_nothing() {
    let f = start(IoModel::Shared { threads: 1 }, ServerConfig::default());
    let stranger = std_client(v4());
    for _ in 0..3 {
        stranger
            .send_to(b"let me in", f.server.local_addr())
            .unwrap();
    }
    let player = joined(&f);
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!(c.sessions_rejected, 3, "{c:?}");
    assert_eq!(c.sessions_opened, 1);
    assert_eq!(c.sessions_open, 1);
    assert_eq!(f.server.lane_of(stranger.local_addr().unwrap()), None);
    assert_eq!(f.server.lane_of(player.local_addr().unwrap()), Some(0));
    assert!(f.server.stop_and_wait(LIMIT));
    // Only the player connected and disconnected: a refused peer gets no
    // disconnect.
    let ev = f.log.events();
    let p = player.local_addr().unwrap();
    assert_eq!(
        ev,
        vec![
            Event::Connect(p),
            Event::Disconnect(p, DisconnectReason::Shutdown)
        ]
    );
    f.rt.stop().unwrap();
}

#[test]
fn a_refused_newcomer_evicts_nobody() {
    let config = ServerConfig {
        max_sessions: 1,
        full_policy: FullPolicy::EvictIdlest,
        ..ServerConfig::default()
    };
    let f = start(IoModel::Shared { threads: 1 }, config);
    let player = joined(&f);
    let stranger = std_client(v4());
    stranger
        .send_to(b"no token", f.server.local_addr())
        .unwrap();
    // A marker on the same server socket: once its answer is back, the
    // stranger's datagram was handled.
    player.send_to(b"handle", f.server.local_addr()).unwrap();
    assert_eq!(recv_text(&player, "handle ok"), b"handle ok");
    let c = f.server.counters();
    assert_eq!((c.sessions_rejected, c.sessions_evicted), (1, 0), "{c:?}");
    // An admitted newcomer does evict.
    let other = joined(&f);
    barrier(&f.server);
    assert_eq!(f.server.counters().sessions_evicted, 1);
    assert_eq!(f.server.lane_of(player.local_addr().unwrap()), None);
    assert_eq!(f.server.lane_of(other.local_addr().unwrap()), Some(0));
    f.rt.stop().unwrap();
}

/// With several lanes, `Server::send_to` runs on the lane that owns the
/// peer's session: its counters land there (before, a hash of its own
/// picked the lane, wrong for about half the peers).
#[test]
fn send_to_runs_on_the_lane_that_owns_the_session() {
    let config = ServerConfig {
        lanes: 2,
        ..ServerConfig::default()
    };
    let f = start(IoModel::Sharded { reactors: 2 }, config);
    let players: Vec<UdpSocket> = (0..12).map(|_| joined(&f)).collect();
    barrier(&f.server);
    let before: Vec<u64> = (0..2)
        .map(|l| f.server.lane_counters(l).unwrap().datagrams_out)
        .collect();
    let mut expected = before.clone();
    for p in &players {
        let addr = p.local_addr().unwrap();
        let lane = f.server.lane_of(addr).expect("a session");
        expected[lane] += 1;
        f.server.send_to(addr, b"from afar").unwrap();
        assert_eq!(recv_text(p, "from afar"), b"from afar");
    }
    barrier(&f.server);
    let after: Vec<u64> = (0..2)
        .map(|l| f.server.lane_counters(l).unwrap().datagrams_out)
        .collect();
    assert_eq!(after, expected, "sends counted on the owning lanes");
    assert!(
        expected[0] > before[0] && expected[1] > before[1],
        "both lanes own sessions: {expected:?}"
    );
    f.rt.stop().unwrap();
}

#[test]
fn a_session_handle_sends_from_another_thread_in_order() {
    let f = start(IoModel::Shared { threads: 2 }, ServerConfig::default());
    let player = joined(&f);
    player.send_to(b"handle", f.server.local_addr()).unwrap();
    assert_eq!(recv_text(&player, "handle ok"), b"handle ok");
    let handle = f.handles.lock().unwrap().pop().unwrap();
    assert_eq!(handle.peer(), player.local_addr().unwrap());
    assert_eq!(handle.lane(), 0);
    let sender = std::thread::spawn(move || {
        for i in 0u32..200 {
            handle.send(&i.to_le_bytes()).unwrap();
        }
    });
    for i in 0u32..200 {
        assert_eq!(recv_text(&player, "a handle send"), i.to_le_bytes());
    }
    sender.join().unwrap();
    // The same session reached through the server, by address.
    let again = f.server.session(player.local_addr().unwrap()).unwrap();
    again.post(|s| *s.state() += 1000).unwrap();
    let (tx, rx) = mpsc::channel();
    again.post(move |s| tx.send(*s.state()).unwrap()).unwrap();
    // join + handle + the post above.
    assert_eq!(recv_within(&rx, "the session's state"), 1002);
    f.rt.stop().unwrap();
}

#[test]
fn a_handle_to_an_ended_session_reaches_nobody_and_is_counted() {
    let f = start(IoModel::Shared { threads: 1 }, ServerConfig::default());
    let player = joined(&f);
    player.send_to(b"handle", f.server.local_addr()).unwrap();
    recv_text(&player, "handle ok");
    let handle = f.handles.lock().unwrap().pop().unwrap();
    player.send_to(b"bye", f.server.local_addr()).unwrap();
    f.log.wait("the disconnect", |ev| {
        ev.iter().any(|e| matches!(e, Event::Disconnect(..)))
    });
    // The same address joins again: a new session, which the old handle
    // must not reach.
    player.send_to(b"join", f.server.local_addr()).unwrap();
    assert_eq!(recv_text(&player, "welcome again"), b"welcome");
    handle.send(b"stale").unwrap();
    handle.close().unwrap();
    f.server
        .send_to(player.local_addr().unwrap(), b"fresh")
        .unwrap();
    assert_eq!(recv_text(&player, "the server's send"), b"fresh");
    barrier(&f.server);
    let c = f.server.counters();
    assert_eq!(c.send_discarded, 1, "{c:?}");
    assert_eq!(c.sessions_open, 1, "the old handle's close reached nobody");
    f.rt.stop().unwrap();
}

/// A per-player pass that reads state and sends in one go (a tick's
/// snapshot), and one session reached by address.
#[test]
fn for_each_session_sends_each_player_its_own_snapshot() {
    let f = start(IoModel::Shared { threads: 1 }, ServerConfig::default());
    let players: Vec<UdpSocket> = (0..3).map(|_| joined(&f)).collect();
    // Player i sends i extra inputs.
    for (i, p) in players.iter().enumerate() {
        for _ in 0..i {
            p.send_to(b"input", f.server.local_addr()).unwrap();
        }
    }
    f.log.wait("the inputs", |ev| {
        ev.iter()
            .filter(|e| matches!(e, Event::Datagram(..)))
            .count()
            == 3
    });
    assert!(f
        .server
        .post(0, |_, ctx| {
            ctx.for_each_session(|s| {
                let snapshot = format!("{} {}", s.peer().port(), s.state());
                s.send(snapshot.as_bytes()).unwrap();
            });
        })
        .is_ok());
    for (i, p) in players.iter().enumerate() {
        let port = p.local_addr().unwrap().port();
        let want = format!("{port} {}", i + 1);
        assert_eq!(recv_text(p, "a snapshot"), want.as_bytes());
    }
    let target = players[1].local_addr().unwrap();
    assert!(f
        .server
        .post(0, move |_, ctx| {
            let mut s = ctx.session_mut(target).expect("player 1's session");
            *s.state() = 77;
            s.send(b"just you").unwrap();
            assert!(ctx.session_mut(crate::common::closed_port(v4())).is_none());
        })
        .is_ok());
    assert_eq!(recv_text(&players[1], "session_mut's send"), b"just you");
    let (tx, rx) = mpsc::channel();
    f.server
        .session(target)
        .unwrap()
        .post(move |s| tx.send(*s.state()).unwrap())
        .unwrap();
    assert_eq!(recv_within(&rx, "the state"), 77);
    f.rt.stop().unwrap();
}

/// Session timers call `session_timer` with their session, can be
/// cancelled, and end with their session.
#[test]
fn session_timers_fire_with_their_session_and_die_with_it() {
    let f = start(IoModel::Shared { threads: 1 }, ServerConfig::default());
    let server = f.server.local_addr();
    let player = joined(&f);
    // Cancelled before it fires: no tick.
    player.send_to(b"arm", server).unwrap();
    player.send_to(b"disarm", server).unwrap();
    assert_eq!(recv_text(&player, "disarmed"), b"disarmed");
    assert_eq!(lane_timer_reading(&f, 50), 0, "a cancelled timer fired");
    player.send_to(b"arm", server).unwrap();
    for _ in 0..3 {
        assert_eq!(recv_text(&player, "a session tick"), b"tick");
    }
    player.send_to(b"bye", server).unwrap();
    f.log.wait("the disconnect", |ev| {
        ev.iter().any(|e| matches!(e, Event::Disconnect(..)))
    });
    let at_close = f.ticks.get();
    // Five periods later, on the lane itself: the ended session's timer
    // fired no more.
    assert_eq!(lane_timer_reading(&f, 50), at_close);
    let c = f.server.counters();
    assert_eq!(c.sessions_closed, 1, "{c:?}");
    f.rt.stop().unwrap();
}

/// Schedules a one-shot lane timer `ms` from now and returns the session
/// tick count the lane saw when it fired.
fn lane_timer_reading(f: &Fixture, ms: u64) -> u64 {
    let (tx, rx) = mpsc::channel();
    *f.lane_timer.lock().unwrap() = Some(tx);
    assert!(f
        .server
        .post(0, move |_, ctx| {
            // A periodic timer with the Delay policy, cancelled at its first
            // fire by the handler taking the sender: one reading only.
            let every = Duration::from_millis(ms);
            ctx.timer_with(Instant::now() + every, Some(every), MissedTicks::Delay);
        })
        .is_ok());
    recv_within(&rx, "the lane timer")
}
