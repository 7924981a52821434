//! A lane's own game tick (`Ctx::tick_at`, `Handler::tick`): a server lane
//! that ticks at a fixed rate and sends a snapshot to every player each
//! tick, never early; a replaced request runs once, at the later time.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Client, ClientConfig, ClientSecurity, ConnectionHandle, Ctx, Handler, Server, ServerConfig,
    ServerSecurity,
};

const PERIOD: Duration = Duration::from_millis(5);
const TICKS: u32 = 20;

/// Ticks every `PERIOD` from the first player's arrival, `TICKS` times,
/// sending the tick's number to every player.
struct World {
    players: Vec<ConnectionHandle>,
    first: Option<Instant>,
    n: u32,
    /// (when asked for, when run) of each tick.
    ticked: mpsc::Sender<(Instant, Instant)>,
}

impl Handler for World {
    fn connected(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle) {
        if self.first.is_none() {
            let first = ctx.now() + PERIOD;
            self.first = Some(first);
            ctx.tick_at(first);
        }
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let asked = self.first.unwrap() + PERIOD * self.n;
        let _ = self.ticked.send((asked, Instant::now()));
        self.n += 1;
        ctx.connections(&mut self.players);
        for &p in &self.players {
            ctx.send(p, ORDERED, &self.n.to_be_bytes()).unwrap();
        }
        if self.n < TICKS {
            ctx.tick_at(self.first.unwrap() + PERIOD * self.n);
        }
    }

    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
}

#[test]
fn a_server_lane_ticks_at_its_rate_and_never_early() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (ticked, ticks) = mpsc::channel();
    let server = Server::bind(
        rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::new(config(), ServerSecurity::Insecure),
        move |_| World {
            players: Vec::new(),
            first: None,
            n: 0,
            ticked: ticked.clone(),
        },
    )
    .unwrap();
    let (player, seen) = recorder(false);
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(config(), ClientSecurity::Insecure),
        player,
    )
    .unwrap();
    assert!(matches!(
        next(&seen, Duration::from_secs(5), "connected"),
        Seen::Connected(..)
    ));
    for i in 1..=TICKS {
        match next(&seen, Duration::from_secs(5), "snapshot") {
            Seen::Message(_, ORDERED, data) => assert_eq!(data, i.to_be_bytes()),
            other => panic!("tick {i}: {other:?}"),
        }
        let (asked, ran) = ticks.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(ran >= asked, "tick {i} ran {:?} early", asked - ran);
    }
    // And no more than asked for.
    assert!(
        ticks.recv_timeout(PERIOD * 4).is_err(),
        "a tick past the last"
    );
    client.stop();
    server.stop();
    rt.stop().unwrap();
}

/// Asks for a tick, then replaces it with a later one.
struct Replaced {
    asked: Option<Instant>,
    ticked: mpsc::Sender<(Instant, Instant)>,
}

impl Handler for Replaced {
    fn connected(&mut self, ctx: &mut Ctx<'_>, _: ConnectionHandle) {
        ctx.tick_at(ctx.now());
        ctx.cancel_tick();
        ctx.tick_at(ctx.now() + Duration::from_millis(1));
        let later = ctx.now() + Duration::from_millis(30);
        self.asked = Some(later);
        ctx.tick_at(later);
    }

    fn tick(&mut self, _: &mut Ctx<'_>) {
        let _ = self.ticked.send((self.asked.unwrap(), Instant::now()));
    }

    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
}

#[test]
fn a_replaced_tick_runs_once_at_the_later_time() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (echo, _events) = recorder(true);
    let server = Server::bind(
        rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::new(config(), ServerSecurity::Insecure),
        move |_| Recorder {
            events: echo.events.clone(),
            echo: true,
        },
    )
    .unwrap();
    let (ticked, ticks) = mpsc::channel();
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(config(), ClientSecurity::Insecure),
        Replaced {
            asked: None,
            ticked,
        },
    )
    .unwrap();
    let (asked, ran) = ticks.recv_timeout(Duration::from_secs(5)).expect("a tick");
    assert!(ran >= asked, "ran {:?} early", asked - ran);
    assert!(
        ticks.recv_timeout(Duration::from_millis(100)).is_err(),
        "more than one tick"
    );
    client.stop();
    server.stop();
    rt.stop().unwrap();
}
