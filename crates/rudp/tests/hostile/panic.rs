//! A handler panic takes down its own lane's connections, with a CLOSE
//! that says so, and nothing else: the other lane keeps serving, the
//! server names the failed lane, the runtime is not stopped.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Client, ClientConfig, ClientSecurity, ConnectionHandle, Ctx, DisconnectReason, Handler, Server,
    ServerConfig, ServerSecurity, ServerStatus, CLOSE_HANDLER_PANIC,
};

/// Echoes, except that `boom` panics; tells the test each client's lane
/// (by the client's port).
struct Fragile {
    lanes: mpsc::Sender<(u16, usize)>,
}

impl Handler for Fragile {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        let port = ctx.peer_addr(conn).map_or(0, |a| a.port());
        let _ = self.lanes.send((port, ctx.lane()));
    }

    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        if data == b"boom" {
            panic!("boom on lane {}", ctx.lane());
        }
        let _ = ctx.send(conn, channel, data);
    }
}

#[test]
fn a_handler_panic_closes_its_lane_only_and_says_so() {
    const CLIENTS: usize = 12;
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let mut cfg = config();
    // Long enough that an end within seconds came from a CLOSE.
    cfg.idle_timeout = Duration::from_secs(60);
    let mut sc = ServerConfig::new(cfg.clone(), ServerSecurity::Insecure);
    sc.lanes = 2;
    let (lanes_tx, lanes_rx) = mpsc::channel();
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), sc, |_| {
        Fragile {
            lanes: lanes_tx.clone(),
        }
    })
    .unwrap();
    // Handshakes are steered to a lane by source IP: the clients come
    // from 127.0.0.1 to 127.0.0.12, which spread over both lanes.
    let local = |i: usize| Some(format!("127.0.0.{}:0", i + 1).parse().unwrap());
    let mut clients: Vec<(Client<Recorder>, Receiver<Seen>)> = Vec::new();
    for i in 0..CLIENTS {
        let (cli, rx) = recorder(false);
        let mut cc = ClientConfig::new(cfg.clone(), ClientSecurity::Insecure);
        cc.local = local(i);
        let c = Client::connect(rt.next_reactor(), server.local_addr(), cc, cli).unwrap();
        clients.push((c, rx));
    }
    let mut lane_of = HashMap::new();
    for _ in 0..CLIENTS {
        let (port, lane) = lanes_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        lane_of.insert(port, lane);
    }
    let lane = |c: &Client<Recorder>| lane_of[&c.local_addr().port()];
    let (zero, one): (Vec<_>, Vec<_>) = clients.iter().partition(|(c, _)| lane(c) == 0);
    assert!(
        !zero.is_empty() && !one.is_empty(),
        "{CLIENTS} clients all steered to one lane"
    );
    for (_, rx) in &clients {
        collect_until(rx, Duration::from_secs(10), "connected", |s| {
            matches!(s, Seen::Connected(..))
        });
    }

    zero[0].0.sender().send(ORDERED, b"boom").unwrap();
    // Every client of lane 0 is told, promptly, by a CLOSE.
    for (_, rx) in &zero {
        let seen = collect_until(rx, Duration::from_secs(10), "the panic's close", |s| {
            matches!(s, Seen::Disconnected(..))
        });
        match seen.last() {
            Some(Seen::Disconnected(_, DisconnectReason::Remote { code, reason }, _)) => {
                assert_eq!(*code, CLOSE_HANDLER_PANIC);
                assert_eq!(
                    reason, "handler panicked",
                    "the message stays on the server"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // Lane 1 keeps serving.
    for (i, (c, rx)) in one.iter().enumerate() {
        c.sender().send(ORDERED, &payload(i as u32, 32)).unwrap();
        let seen = collect_until(rx, Duration::from_secs(10), "an echo on lane 1", |s| {
            matches!(s, Seen::Message(..) | Seen::Disconnected(..))
        });
        assert!(
            matches!(seen.last(), Some(Seen::Message(_, ORDERED, d)) if index(d) == i as u32),
            "{seen:?}"
        );
    }
    // The server names the lane and keeps the message.
    let failed = server.failed_lanes();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].lane, 0);
    assert!(failed[0].message.contains("boom on lane 0"), "{failed:?}");
    assert!(matches!(
        server.status(),
        ServerStatus::Failed { lane: 0, .. }
    ));
    assert!(!server.is_stopped());

    // New players: those that land on the failed lane are turned away
    // with the code, the others are served.
    let (mut refused, mut served) = (0, 0);
    for i in 0..6 {
        let (cli, rx) = recorder(false);
        let mut cc = ClientConfig::new(cfg.clone(), ClientSecurity::Insecure);
        cc.local = local(i as usize);
        let c = Client::connect(rt.next_reactor(), server.local_addr(), cc, cli).unwrap();
        c.sender().send(ORDERED, &payload(i, 16)).unwrap();
        let seen = collect_until(&rx, Duration::from_secs(10), "a new player's fate", |s| {
            matches!(s, Seen::Message(..) | Seen::Disconnected(..))
        });
        match seen.last() {
            Some(Seen::Message(..)) => served += 1,
            Some(Seen::Disconnected(_, DisconnectReason::Remote { code, .. }, _))
                if *code == CLOSE_HANDLER_PANIC =>
            {
                refused += 1
            }
            other => panic!("{other:?}"),
        }
        clients.push((c, rx));
    }
    assert_eq!(refused + served, 6);

    let report = server.stop();
    assert_eq!(report.failed_lanes, failed);
    for (c, _) in clients {
        c.stop();
    }
    // Contained: the runtime was not stopped by it.
    rt.stop().unwrap();
}
