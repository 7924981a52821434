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

/// What the look-ahead saw and what was delivered, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    BatchStart(Vec<Vec<u8>>),
    Datagram(Vec<u8>),
}

/// Holds its first datagram until the test has queued a burst behind it,
/// so that the burst arrives as one received batch.
struct LookAhead {
    seen: mpsc::Sender<Seen>,
    held: Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>,
}

impl DatagramSocketHandler for LookAhead {
    fn batch_start(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>) {
        let all = datagrams.map(<[u8]>::to_vec).collect();
        self.seen.send(Seen::BatchStart(all)).unwrap();
    }

    fn datagram(&mut self, _: &mut DatagramSocketCtx<'_>, _: SocketAddr, data: &[u8]) {
        self.seen.send(Seen::Datagram(data.to_vec())).unwrap();
        if let Some((blocked, resume)) = self.held.take() {
            blocked.send(()).unwrap();
            resume.recv().unwrap();
        }
    }
}

#[test]
fn batch_start_sees_a_batch_before_its_datagrams() {
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (seen_tx, seen) = mpsc::channel();
    let (blocked_tx, blocked) = mpsc::channel();
    let (resume, resume_rx) = mpsc::channel();
    let handler = LookAhead {
        seen: seen_tx,
        held: Some((blocked_tx, resume_rx)),
    };
    let socket =
        DatagramSocket::bind(rt.handle(), v4(), EndpointConfig::default(), handler).unwrap();
    let me = socket.local_addr();
    let peer = std_client(me);
    peer.send_to(b"first", me).unwrap();
    recv_within(&blocked, "the first datagram held in the handler");
    let burst: Vec<Vec<u8>> = (0..8).map(|i| format!("burst {i}").into_bytes()).collect();
    for d in &burst {
        peer.send_to(d, me).unwrap();
    }
    // The burst is in the socket's receive queue before the lane reads on.
    resume.send(()).unwrap();

    assert_eq!(
        recv_within(&seen, "the first datagram"),
        Seen::Datagram(b"first".to_vec())
    );
    // The lane's next receive takes the whole burst (8 is below the
    // default batch, 64): the look-ahead first, with every datagram, in
    // order.
    assert_eq!(
        recv_within(&seen, "the burst's look-ahead"),
        Seen::BatchStart(burst.clone())
    );
    for d in &burst {
        assert_eq!(
            recv_within(&seen, "a burst datagram"),
            Seen::Datagram(d.clone())
        );
    }
    socket.close();
    rt.stop().unwrap();
}
