//! Echo on every IO model and lane count, exact counters, empty, binary and
//! maximum-size datagrams, the size limit, IPv6.

use std::net::SocketAddr;
use std::sync::mpsc;

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::{
    Client, ClientConfig, ClientCtx, ClientHandler, CounterSnapshot, EndpointConfig, SendError,
    Server, ServerConfig, ServerCtx, ServerHandler, Session, MAX_PAYLOAD_V4, MAX_PAYLOAD_V6,
};

fn config(lanes: usize) -> ServerConfig {
    ServerConfig {
        lanes,
        idle_timeout: None,
        endpoint: EndpointConfig {
            socket: big_buffers(),
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// Sizes cycled through by the echo clients: empty, tiny, all byte values,
/// around the Ethernet MTU, a few KB.
const SIZES: &[usize] = &[0, 1, 256, 1200, 1472, 17, 3000, 0];

/// `clients` std sockets each echo `per_client` datagrams through the
/// server at `addr` (windows of `SIZES.len()` per client in flight), checking
/// every echo's bytes, source and order. Returns (datagrams, bytes) sent.
fn run_clients(addr: SocketAddr, clients: usize, per_client: usize) -> (u64, u64) {
    let socks: Vec<_> = (0..clients).map(|_| std_client(addr)).collect();
    let mut buf = vec![0u8; 65_536];
    let (mut count, mut bytes) = (0u64, 0u64);
    let window = SIZES.len();
    for start in (0..per_client).step_by(window) {
        let end = (start + window).min(per_client);
        for (c, s) in socks.iter().enumerate() {
            for seq in start..end {
                let data = payload(c, seq, SIZES[seq % window]);
                assert_eq!(s.send_to(&data, addr).unwrap(), data.len());
                count += 1;
                bytes += data.len() as u64;
            }
        }
        for (c, s) in socks.iter().enumerate() {
            for seq in start..end {
                let want = payload(c, seq, SIZES[seq % window]);
                let (n, from) = recv_from(s, &mut buf, &format!("echo {seq} to client {c}"));
                assert_eq!(from, addr, "echo from the server's address");
                assert_eq!(n, want.len(), "client {c} echo {seq}: length");
                assert!(buf[..n] == want[..], "client {c} echo {seq}: bytes differ");
            }
        }
    }
    (count, bytes)
}

fn echo(model: IoModel, lanes: usize) {
    const CLIENTS: usize = 16;
    const PER_CLIENT: usize = 40;
    let rt = runtime(model);
    let (server, seen) = echo_server(&rt, v4(), config(lanes));
    assert_eq!(server.lanes(), lanes);
    let (count, bytes) = run_clients(server.local_addr(), CLIENTS, PER_CLIENT);
    assert_eq!(seen.get(), count);
    barrier(&server);

    let c = server.counters();
    let what = format!("{model:?}, {lanes} lanes: {c:?}");
    assert_eq!(c.datagrams_in, count, "{what}");
    assert_eq!(c.datagrams_out, count, "{what}");
    assert_eq!(c.bytes_in, bytes, "{what}");
    assert_eq!(c.bytes_out, bytes, "{what}");
    assert_eq!(c.sessions_opened, CLIENTS as u64, "{what}");
    assert_eq!(c.sessions_open, CLIENTS as u64, "{what}");
    assert_eq!(
        c.kernel_drops + c.truncated + c.send_errors + c.send_queued + c.send_queue_rejections,
        0,
        "{what}"
    );
    let per_lane: Vec<_> = (0..lanes)
        .map(|l| server.lane_counters(l).unwrap())
        .collect();
    assert_eq!(
        per_lane
            .iter()
            .fold(CounterSnapshot::default(), |a, &b| a + b),
        c
    );
    for (l, lc) in per_lane.iter().enumerate() {
        assert_eq!(lc.datagrams_in, lc.datagrams_out, "lane {l}: {what}");
    }
    if lanes > 1 {
        // 16 flows over 4 sockets: all on one lane has odds of 4^-15.
        let used = per_lane.iter().filter(|c| c.datagrams_in > 0).count();
        assert!(used > 1, "SO_REUSEPORT spread nothing: {per_lane:?}");
    }
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn echo_shared_1_thread() {
    echo(IoModel::Shared { threads: 1 }, 1);
    echo(IoModel::Shared { threads: 1 }, 4);
}

#[test]
fn echo_shared_4_threads() {
    echo(IoModel::Shared { threads: 4 }, 1);
    echo(IoModel::Shared { threads: 4 }, 4);
}

#[test]
fn echo_sharded_4() {
    echo(IoModel::Sharded { reactors: 4 }, 1);
    echo(IoModel::Sharded { reactors: 4 }, 4);
}

#[test]
fn echo_ipv6() {
    let rt = runtime(IoModel::Shared { threads: 2 });
    for lanes in [1, 2] {
        let (server, _) = echo_server(&rt, v6(), config(lanes));
        assert!(server.local_addr().is_ipv6());
        let (count, bytes) = run_clients(server.local_addr(), 4, 16);
        barrier(&server);
        let c = server.counters();
        assert_eq!((c.datagrams_in, c.datagrams_out), (count, count), "{c:?}");
        assert_eq!((c.bytes_in, c.bytes_out), (bytes, bytes), "{c:?}");
        server.stop();
    }
    rt.stop().unwrap();
}

/// An echo handler that, for a maximum-size datagram, first tries one byte
/// more (which must be refused) and reports the error.
struct Oversize {
    errors: mpsc::Sender<SendError>,
    extra: Vec<u8>,
}

impl ServerHandler for Oversize {
    type SessionState = ();

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        let limit = keel_udp::max_payload(&s.peer());
        if data.len() == limit {
            self.extra.clear();
            self.extra.extend_from_slice(data);
            self.extra.push(0);
            let e = s.send(&self.extra).expect_err("one byte over the limit");
            self.errors.send(e).unwrap();
        }
        s.send(data).expect("the next send works");
    }
}

fn max_size(family: SocketAddr, limit: usize) {
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (etx, erx) = mpsc::channel();
    let server = Server::bind(rt.handles(), family, config(1), move |_| Oversize {
        errors: etx.clone(),
        extra: Vec::new(),
    })
    .unwrap();
    let addr = server.local_addr();
    let client = std_client(addr);
    let me = client.local_addr().unwrap();
    let mut buf = vec![0u8; 70_000];

    // The largest payload echoes intact; inside the handler one byte more
    // is refused before any system call and the echo after it still works.
    let big = payload(1, 2, limit);
    client.send_to(&big, addr).unwrap();
    let (n, _) = recv_from(&client, &mut buf, "the maximum-size echo");
    assert_eq!(n, limit);
    assert!(buf[..n] == big[..], "maximum-size echo differs");
    assert_eq!(
        recv_within(&erx, "the handler's oversize error"),
        SendError::TooLarge {
            size: limit + 1,
            limit
        }
    );

    // From another thread: refused now, and the next send goes out.
    let over = vec![1u8; limit + 1];
    assert_eq!(
        server.send_to(me, &over),
        Err(SendError::TooLarge {
            size: limit + 1,
            limit
        })
    );
    server.send_to(me, b"after").unwrap();
    let (n, _) = recv_from(&client, &mut buf, "the send after a refused one");
    assert_eq!(&buf[..n], b"after");

    barrier(&server);
    let c = server.counters();
    assert_eq!(c.send_too_large, 2, "{c:?}");
    assert_eq!((c.datagrams_in, c.datagrams_out), (1, 2), "{c:?}");
    assert_eq!(c.bytes_out, limit as u64 + 5, "{c:?}");
    assert_eq!(c.truncated + c.send_errors, 0, "{c:?}");
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn max_payload_ipv4_echoes_and_one_more_byte_is_refused() {
    assert_eq!(MAX_PAYLOAD_V4, 65_507);
    max_size(v4(), MAX_PAYLOAD_V4);
}

#[test]
fn max_payload_ipv6_echoes_and_one_more_byte_is_refused() {
    assert_eq!(MAX_PAYLOAD_V6, 65_527);
    max_size(v6(), MAX_PAYLOAD_V6);
}

/// A client that reports what it receives.
struct Collect(mpsc::Sender<Vec<u8>>);

impl ClientHandler for Collect {
    fn datagram(&mut self, _: &mut ClientCtx<'_>, data: &[u8]) {
        self.0.send(data.to_vec()).unwrap();
    }
}

/// The same through a keel client: `Client::send` refuses 65,508 bytes
/// with the size error, and a 65,507-byte datagram sent right after echoes.
#[test]
fn keel_client_refuses_oversize_and_echoes_maximum() {
    let rt = runtime(IoModel::Shared { threads: 2 });
    let (server, _) = echo_server(&rt, v4(), config(1));
    let (tx, rx) = mpsc::channel();
    let client_config = ClientConfig {
        endpoint: EndpointConfig {
            socket: big_buffers(),
            ..EndpointConfig::default()
        },
        ..ClientConfig::default()
    };
    let client =
        Client::connect(rt.handle(), server.local_addr(), client_config, Collect(tx)).unwrap();
    let over = vec![9u8; 65_508];
    assert_eq!(
        client.send(&over),
        Err(SendError::TooLarge {
            size: 65_508,
            limit: 65_507
        })
    );
    // Inside the client's lane too.
    let (etx, erx) = mpsc::channel();
    let over2 = over.clone();
    let _ = client.post(move |_, ctx| etx.send(ctx.send(&over2)).unwrap());
    assert_eq!(
        recv_within(&erx, "the in-lane send result"),
        Err(SendError::TooLarge {
            size: 65_508,
            limit: 65_507
        })
    );
    let max = payload(3, 4, 65_507);
    client.send(&max).unwrap();
    client.send(&[]).unwrap();
    assert!(recv_within(&rx, "the maximum-size echo") == max);
    assert_eq!(recv_within(&rx, "the empty echo"), Vec::<u8>::new());
    let c = client.counters();
    assert_eq!(c.send_too_large, 2, "{c:?}");
    assert_eq!((c.datagrams_out, c.datagrams_in), (2, 2), "{c:?}");
    assert_eq!((c.bytes_out, c.bytes_in), (65_507, 65_507), "{c:?}");
    client.close();
    server.stop();
    rt.stop().unwrap();
}
