//! A server with several lanes owns its `SO_REUSEPORT` group: binding a
//! second server to the port of a running one fails with `AddrInUse`
//! instead of silently joining the group and taking part of its traffic.

use std::io;
use std::net::SocketAddr;

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::{Server, ServerConfig};

fn lanes(n: usize) -> ServerConfig {
    ServerConfig {
        lanes: n,
        ..ServerConfig::default()
    }
}

fn bind_err(rt: &keel_reactor::Runtime, addr: SocketAddr, n: usize) -> io::Error {
    let seen = std::sync::Arc::new(Progress::default());
    match Server::bind(rt.handles(), addr, lanes(n), |_| Echo {
        seen: seen.clone(),
    }) {
        Ok(s) => panic!("a {n}-lane server bound {addr}, taken by another server: {s:?}"),
        Err(e) => e,
    }
}

fn second_server_is_refused(local: SocketAddr) {
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (first, seen) = echo_server(&rt, local, lanes(2));
    let addr = first.local_addr();

    let err = bind_err(&rt, addr, 2);
    assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&addr.to_string()), "names the address: {msg}");
    assert!(msg.contains("already in use"), "{msg}");
    assert!(msg.contains("lanes"), "says why: {msg}");
    // A one-lane server (no SO_REUSEPORT) was refused already.
    assert_eq!(bind_err(&rt, addr, 1).kind(), io::ErrorKind::AddrInUse);

    // The first server still gets every datagram.
    let clients: Vec<_> = (0..8).map(|_| std_client(addr)).collect();
    for c in &clients {
        c.send_to(b"mine", addr).unwrap();
        let mut buf = [0u8; 8];
        recv_from(c, &mut buf, "the first server's echo");
    }
    seen.wait_at_least(8, "8 datagrams at the first server");
    assert_eq!(first.counters().datagrams_in, 8);
    assert!(first.stop_and_wait(LIMIT));
    rt.stop().unwrap();
}

#[test]
fn second_multi_lane_server_on_a_port_is_refused_ipv4() {
    second_server_is_refused(v4());
}

#[test]
fn second_multi_lane_server_on_a_port_is_refused_ipv6() {
    second_server_is_refused(v6());
}
