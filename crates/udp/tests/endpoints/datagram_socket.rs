//! The datagram socket: one unconnected socket that sends to any address and
//! reports each datagram's sender.

use std::net::SocketAddr;
use std::sync::mpsc;

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::{
    DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, SendError,
};

/// Reports (sender, bytes); answers "ping" with "pong" to the sender.
struct Report(mpsc::Sender<(SocketAddr, Vec<u8>)>);

impl DatagramSocketHandler for Report {
    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        if data == b"ping" {
            ctx.send_to(from, b"pong").unwrap();
        }
        self.0.send((from, data.to_vec())).unwrap();
    }
}

fn cast_talks_to_anyone(family: SocketAddr) {
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (tx, rx) = mpsc::channel();
    let socket =
        DatagramSocket::bind(rt.handle(), family, EndpointConfig::default(), Report(tx)).unwrap();
    let me = socket.local_addr();
    let peers: Vec<_> = (0..3).map(|_| std_client(family)).collect();
    let addrs: Vec<_> = peers.iter().map(|p| p.local_addr().unwrap()).collect();

    // To each peer: from another thread, and from inside the lane.
    for (i, &a) in addrs.iter().enumerate() {
        socket.send_to(a, format!("to {i}").as_bytes()).unwrap();
    }
    let to = addrs.clone();
    let _ = socket.post(move |_, ctx| {
        for (i, &a) in to.iter().enumerate() {
            ctx.send_to(a, format!("again {i}").as_bytes()).unwrap();
        }
    });
    let mut buf = [0u8; 64];
    for (i, p) in peers.iter().enumerate() {
        for want in [format!("to {i}"), format!("again {i}")] {
            let (n, from) = recv_from(p, &mut buf, &want);
            assert_eq!((&buf[..n], from), (want.as_bytes(), me));
        }
    }

    // Each peer writes back; the socket sees who sent what.
    for (i, p) in peers.iter().enumerate().rev() {
        p.send_to(format!("from {i}").as_bytes(), me).unwrap();
    }
    for (i, &a) in addrs.iter().enumerate().rev() {
        assert_eq!(
            recv_within(&rx, "a datagram at the socket"),
            (a, format!("from {i}").into_bytes())
        );
    }
    // And can answer the sender from the handler.
    peers[1].send_to(b"ping", me).unwrap();
    assert_eq!(recv_within(&rx, "ping"), (addrs[1], b"ping".to_vec()));
    let (n, from) = recv_from(&peers[1], &mut buf, "pong");
    assert_eq!((&buf[..n], from), (&b"pong"[..], me));

    // Too large for the family: refused, counted, and the next send works.
    let limit = keel_udp::max_payload(&family);
    assert_eq!(
        socket.send_to(addrs[0], &vec![0u8; limit + 1]),
        Err(SendError::TooLarge {
            size: limit + 1,
            limit
        })
    );
    socket.send_to(addrs[0], b"still fine").unwrap();
    let (n, _) = recv_from(&peers[0], &mut buf, "still fine");
    assert_eq!(&buf[..n], b"still fine");

    let (btx, brx) = mpsc::channel();
    let _ = socket.post(move |_, _| btx.send(()).unwrap());
    recv_within(&brx, "socket barrier");
    let c = socket.counters();
    assert_eq!((c.datagrams_in, c.datagrams_out), (4, 8), "{c:?}");
    assert_eq!(c.send_too_large, 1, "{c:?}");
    socket.close();
    rt.stop().unwrap();
}

#[test]
fn cast_sends_anywhere_and_reports_senders_ipv4() {
    cast_talks_to_anyone(v4());
}

#[test]
fn cast_sends_anywhere_and_reports_senders_ipv6() {
    cast_talks_to_anyone(v6());
}
