//! A handler panic closes its own lane only: the server says what
//! happened, other servers on the runtime keep serving, and a stopped
//! runtime shows as a stopped server.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::Mutex;

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_udp::{SendError, Server, ServerConfig, ServerCtx, ServerHandler, ServerStatus, Session};

/// Echoes, except that `boom` panics (after telling the test).
struct Fragile(Mutex<mpsc::Sender<()>>);

impl ServerHandler for Fragile {
    type SessionState = ();

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        if data == b"boom" {
            self.0.lock().unwrap().send(()).unwrap();
            panic!("boom from {}", s.peer());
        }
        let _ = s.send(data);
    }
}

#[test]
fn a_panicking_server_fails_alone_and_says_why() {
    // One thread: once the panicking handler has signalled, anything posted
    // afterwards runs after its lane's bookkeeping is done.
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (tx, panicked) = mpsc::channel();
    let fragile = Server::bind(rt.handles(), v4(), ServerConfig::default(), |_| {
        Fragile(Mutex::new(tx.clone()))
    })
    .unwrap();
    let (sturdy, _) = echo_server(&rt, v4(), ServerConfig::default());
    assert_eq!(fragile.status(), ServerStatus::Running);

    let c = std_client(v4());
    let mut buf = [0u8; 64];
    c.send_to(b"hi", fragile.local_addr()).unwrap();
    assert_eq!(recv_from(&c, &mut buf, "fragile's echo").0, 2);
    c.send_to(b"boom", fragile.local_addr()).unwrap();
    recv_within(&panicked, "the panic");
    barrier(&sturdy);

    match fragile.status() {
        ServerStatus::Failed { lane: 0, message } => {
            assert!(message.contains("boom from"), "{message}")
        }
        other => panic!("expected Failed on lane 0, got {other:?}"),
    }
    assert!(fragile.is_stopped());
    assert_eq!(
        fragile.send_to(c.local_addr().unwrap(), b"x"),
        Err(SendError::Closed)
    );
    // The other server on the same runtime thread still serves.
    c.send_to(b"still here", sturdy.local_addr()).unwrap();
    let (n, _) = recv_from(&c, &mut buf, "sturdy's echo");
    assert_eq!(&buf[..n], b"still here");
    assert_eq!(sturdy.status(), ServerStatus::Running);
    // Contained: the runtime ends cleanly.
    sturdy.stop_and_wait(LIMIT);
    rt.stop().unwrap();
}

#[test]
fn a_stopped_runtime_shows_as_a_stopped_server() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (server, _) = echo_server(&rt, v4(), ServerConfig::default());
    assert!(!server.is_stopped());
    rt.handle().stop();
    assert!(server.is_stopped());
    assert_eq!(server.status(), ServerStatus::Stopped);
    assert!(
        !server.stop_and_wait(LIMIT),
        "nobody runs the lanes of a stopped runtime: the stop cannot finish"
    );
    rt.stop().unwrap();
}
