//! Sends from other threads meet a bounded inbox (a full one is an error
//! the caller sees, and counted), a stop never waits for a backlog, and
//! every send accepted with `Ok` is either sent or counted as discarded.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_udp::{
    Client, ClientConfig, ClientCtx, ClientHandler, EndpointConfig, SendError, ServerConfig,
};

const CAPACITY: usize = 500;
const THREADS: usize = 4;
const PER_THREAD: usize = 2_000;

/// Blocks lane 0 of `server` until the returned sender is used or dropped;
/// returns once the lane is held.
fn hold_lane<H: keel_udp::ServerHandler>(server: &keel_udp::Server<H>) -> mpsc::Sender<()> {
    let (release, released) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel();
    assert!(server
        .post(0, move |_, _| {
            held_tx.send(()).unwrap();
            let _ = released.recv_timeout(LIMIT);
        })
        .is_ok());
    recv_within(&held, "the lane to be held");
    release
}

#[test]
fn server_sends_from_threads_stop_at_the_inbox_bound_and_stop_counts_the_rest() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let config = ServerConfig {
        endpoint: EndpointConfig {
            inbox_capacity: CAPACITY,
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    let (server, _) = echo_server(&rt, v4(), config);
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let peer = sink.local_addr().unwrap();
    let release = hold_lane(&server);

    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..THREADS)
        .map(|_| {
            let (server, accepted, refused) = (server.clone(), accepted.clone(), refused.clone());
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    match server.send_to(peer, &(i as u32).to_le_bytes()) {
                        Ok(()) => accepted.fetch_add(1, Ordering::Relaxed),
                        Err(SendError::InboxFull { capacity }) => {
                            assert_eq!(capacity, CAPACITY);
                            refused.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("unexpected send error: {e}"),
                    };
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let (accepted, refused) = (
        accepted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    // The held closure left the inbox when it started: the bound is all
    // the room there is, and memory stays bounded by it.
    assert_eq!(accepted, CAPACITY as u64);
    assert_eq!(accepted + refused, (THREADS * PER_THREAD) as u64);
    assert_eq!(server.counters().send_inbox_full, refused);

    // Stop while the backlog waits: the runtime is told first, then the
    // lane is let go; it must not work through the backlog.
    rt.handle().stop();
    drop(release);
    assert!(server.is_stopped(), "a stopped runtime serves nothing");
    rt.stop().unwrap();
    let c = server.counters();
    assert_eq!(
        c.datagrams_out + c.send_discarded,
        accepted,
        "every accepted send is sent or counted: {c:?}"
    );
    assert!(
        c.send_discarded > 0,
        "the stop waited for the backlog: {c:?}"
    );
    assert_eq!(server.send_to(peer, b"late"), Err(SendError::Closed));
}

#[test]
fn a_stop_and_wait_that_times_out_counts_the_sends_it_leaves() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (server, _) = echo_server(&rt, v4(), ServerConfig::default());
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let peer = sink.local_addr().unwrap();
    let release = hold_lane(&server);
    for i in 0u32..300 {
        server.send_to(peer, &i.to_le_bytes()).unwrap();
    }
    assert!(
        !server.stop_and_wait(Duration::from_millis(20)),
        "the lane is held: the stop cannot finish"
    );
    rt.handle().stop();
    drop(release);
    rt.stop().unwrap();
    let c = server.counters();
    assert_eq!(c.datagrams_out + c.send_discarded, 300, "{c:?}");
}

struct Quiet;

impl ClientHandler for Quiet {
    fn datagram(&mut self, _: &mut ClientCtx<'_>, _: &[u8]) {}
}

#[test]
fn client_sends_from_threads_stop_at_the_inbox_bound() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = ClientConfig {
        endpoint: EndpointConfig {
            inbox_capacity: 10,
            ..EndpointConfig::default()
        },
        ..ClientConfig::default()
    };
    let client = Client::connect(rt.handle(), sink.local_addr().unwrap(), config, Quiet).unwrap();
    let (release, released) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel();
    assert!(client
        .post(move |_, _| {
            held_tx.send(()).unwrap();
            let _ = released.recv_timeout(LIMIT);
        })
        .is_ok());
    recv_within(&held, "the client lane to be held");
    let results: Vec<_> = (0..15).map(|_| client.send(b"x")).collect();
    assert!(results[..10].iter().all(Result::is_ok), "{results:?}");
    assert!(
        results[10..]
            .iter()
            .all(|r| *r == Err(SendError::InboxFull { capacity: 10 })),
        "{results:?}"
    );
    assert!(
        client.post(|_, _| {}).is_err(),
        "a full inbox refuses posts too"
    );
    drop(release);
    assert!(client.close_and_wait(LIMIT));
    let c = client.counters();
    assert_eq!((c.send_inbox_full, c.datagrams_out), (5, 10), "{c:?}");
    rt.stop().unwrap();
}

/// Counters that caller threads bump (here `send_too_large`, from
/// `Server::send_to` on four threads at once) lose no increment: before,
/// they used the lane's single-writer load-then-store.
#[test]
fn counters_bumped_from_many_threads_lose_nothing() {
    const PER: u64 = 50_000;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (server, _) = echo_server(&rt, v4(), ServerConfig::default());
    let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    let big = vec![0u8; keel_udp::MAX_PAYLOAD_V4 + 1];
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (server, big) = (server.clone(), big.clone());
            std::thread::spawn(move || {
                for _ in 0..PER {
                    assert!(matches!(
                        server.send_to(peer, &big),
                        Err(SendError::TooLarge { .. })
                    ));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.counters().send_too_large, PER * THREADS as u64);
    rt.stop().unwrap();
}
