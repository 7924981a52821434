//! The bounded send queue: datagrams that meet `WouldBlock` wait in the
//! queue and are flushed when the socket is writable; past the bound sends
//! fail with `QueueFull`, are counted, and nothing is lost silently.
//!
//! # Why a network namespace
//!
//! On plain loopback a UDP send never blocks, whatever `SO_SNDBUF` is: the
//! loopback driver orphans each skb (`skb_orphan` in `loopback_xmit`) inside
//! the sending system call, so the socket's write memory is back before the
//! call returns (checked: 2,000 back-to-back 60 KB sends from a socket with
//! the minimum 4,608-byte send buffer all succeed, none returns `EAGAIN`).
//! A send only blocks while its skb is held below the socket, e.g. in a
//! queueing discipline. So the tests that need `WouldBlock` re-run
//! themselves in a private user + network namespace (`unshare -rn`), where
//! they may put a token-bucket qdisc (`tbf`) on that namespace's own `lo`
//! without touching the host: a tiny `SO_SNDBUF` then really fills up. Where
//! namespaces, `ip` or `tc` are unavailable these tests say so and skip
//! (set `KEEL_REQUIRE_NETNS=1` to make that a failure).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::{
    DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, SendError, Server,
    ServerConfig, ServerCtx, ServerHandler, Session, SocketOptions,
};

/// Runs test `name` of this binary again inside `unshare -rn` with a rate
/// limit on the namespace's loopback (see `crate::common::in_netns`), so sends
/// queue in the qdisc and a tiny send buffer fills; returns true in that
/// child, false in the parent (which has checked the child's outcome).
///
/// The child runs on one CPU (the first it may use; `taskset -a` on every
/// thread it has, and the threads it starts inherit it), so the arrival
/// order is the order keel-udp sent in. Otherwise the kernel can reorder:
/// the qdisc hands a datagram to loopback on the CPU that dequeued it (the
/// sender's, in its system call, or its watchdog timer's), loopback queues
/// it on that CPU's backlog, and with two backlogs the one served first
/// delivers first. Under load (three test binaries and four busy loops on
/// the two cores) that reordered one reply in 171 runs of
/// `server_replies_wait_in_the_queue_and_flush_in_order`: 104 before 103.
fn in_throttled_netns(name: &str) -> bool {
    in_netns(
        module_path!(),
        name,
        &[
            &["ip", "link", "set", "lo", "up"],
            &[
                "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "40mbit", "burst", "8kb",
                "latency", "1s",
            ],
            // $PPID: this test process, which runs the steps.
            &[
                "sh",
                "-c",
                "cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\\([0-9]*\\).*/\\1/p' \
                 /proc/$PPID/status) && taskset -a -p -c \"$cpu\" \"$PPID\" >/dev/null",
            ],
        ],
    )
}

/// A datagram socket handler that does nothing on receive: the tests drive it with
/// `post`.
struct Quiet;

impl DatagramSocketHandler for Quiet {
    fn datagram(&mut self, _: &mut DatagramSocketCtx<'_>, _: SocketAddr, _: &[u8]) {}
}

/// A receiver thread that counts datagrams and checks their sequence
/// numbers arrive in order without gaps.
fn receiver() -> (SocketAddr, Arc<Progress>, Arc<Mutex<Vec<u32>>>) {
    let sock = std_client(v4());
    let addr = sock.local_addr().unwrap();
    let got = Arc::new(Progress::default());
    let seqs = Arc::new(Mutex::new(Vec::new()));
    let (g, s) = (got.clone(), seqs.clone());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = sock.recv(&mut buf) {
            let seq = u32::from_le_bytes(buf[..4].try_into().unwrap());
            s.lock().unwrap().push(seq);
            g.add(1);
            let _ = n;
        }
    });
    (addr, got, seqs)
}

fn tiny_sndbuf(batch: usize, queue: usize) -> EndpointConfig {
    EndpointConfig {
        batch,
        send_queue_datagrams: queue,
        socket: SocketOptions {
            // The kernel raises this to its minimum (4,608 bytes on Linux).
            send_buffer: Some(1),
            ..SocketOptions::default()
        },
        ..EndpointConfig::default()
    }
}

/// Sends `rounds` bursts of `per_round` datagrams (each burst inside one
/// call on the socket's lane, so later bursts meet a partly drained queue) and
/// checks: some were queued, the rest refused with `QueueFull` past the
/// bound, every accepted datagram arrives in order, and sent + refused =
/// attempted.
fn burst_through_tiny_sndbuf(batch: usize, rounds: usize, per_round: usize) {
    const LEN: usize = 1_000;
    const QUEUE: usize = 8;
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (to, got, seqs) = receiver();
    let socket = DatagramSocket::bind(rt.handle(), v4(), tiny_sndbuf(batch, QUEUE), Quiet).unwrap();
    assert!(socket.buffers().send < 16 * 1024, "{:?}", socket.buffers());

    let next = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let mut refused = 0u64;
    for _ in 0..rounds {
        let (tx, rx) = mpsc::channel();
        let (next, accepted) = (next.clone(), accepted.clone());
        let _ = socket.post(move |_, ctx| {
            let mut refusals = Vec::new();
            let mut data = vec![0u8; LEN];
            for _ in 0..per_round {
                let seq = next.fetch_add(1, Ordering::Relaxed) as u32;
                data[..4].copy_from_slice(&seq.to_le_bytes());
                match ctx.send_to(to, &data) {
                    Ok(()) => accepted.lock().unwrap().push(seq),
                    Err(e) => refusals.push(e),
                }
            }
            tx.send(refusals).unwrap();
        });
        for e in recv_within(&rx, "a burst on the socket's lane") {
            match e {
                SendError::QueueFull {
                    queued_datagrams,
                    limit_datagrams,
                    ..
                } => {
                    assert_eq!(limit_datagrams, QUEUE);
                    assert!(queued_datagrams >= QUEUE, "refused below the bound");
                }
                other => panic!("expected QueueFull, got {other:?}"),
            }
            refused += 1;
        }
    }
    let attempted = (rounds * per_round) as u64;
    let accepted = accepted.lock().unwrap().clone();
    assert_eq!(accepted.len() as u64 + refused, attempted);
    assert!(refused > 0, "the burst never went past the queue bound");

    // Every accepted datagram arrives (the queue is flushed on writable),
    // in the order it was sent.
    let all = accepted.len() as u64;
    if !got.wait_quietly(LIMIT, |c| c >= all) {
        panic!(
            "{} of {all} accepted datagrams arrived; counters {:?}",
            got.get(),
            socket.counters()
        );
    }
    // Nothing beyond them.
    let (tx, rx) = mpsc::channel();
    let _ = socket.post(move |_, _| tx.send(()).unwrap());
    recv_within(&rx, "socket barrier");
    let c = socket.counters();
    println!("batch {batch}, {rounds} x {per_round}: {refused} refused, {c:?}");
    assert_eq!(*seqs.lock().unwrap(), accepted, "arrival order");
    assert!(c.send_queued > 0, "nothing was queued: {c:?}");
    assert_eq!(c.send_queue_rejections, refused, "{c:?}");
    assert_eq!(c.datagrams_out, accepted.len() as u64, "{c:?}");
    assert_eq!(c.bytes_out, accepted.len() as u64 * LEN as u64, "{c:?}");
    assert_eq!(c.send_errors, 0, "{c:?}");
    assert_eq!(
        c.datagrams_out + c.send_queue_rejections,
        attempted,
        "{c:?}"
    );
    socket.close();
    rt.stop().unwrap();
}

#[test]
fn queue_fills_flushes_and_refuses_batched() {
    if in_throttled_netns("queue_fills_flushes_and_refuses_batched") {
        burst_through_tiny_sndbuf(64, 1, 200);
    }
}

#[test]
fn queue_fills_flushes_and_refuses_one_per_call() {
    if in_throttled_netns("queue_fills_flushes_and_refuses_one_per_call") {
        burst_through_tiny_sndbuf(1, 1, 200);
    }
}

/// Many bursts: each meets a queue the writable handler has partly drained,
/// so the queue is refilled again and again without ever emptying.
#[test]
fn queue_refilled_while_draining_loses_nothing() {
    if in_throttled_netns("queue_refilled_while_draining_loses_nothing") {
        burst_through_tiny_sndbuf(1, 300, 4);
        burst_through_tiny_sndbuf(4, 300, 4);
    }
}

/// Replies a burst of `REPLIES` numbered datagrams to each request.
struct Burst;

const REPLIES: u32 = 30;

impl ServerHandler for Burst {
    type SessionState = u32;

    fn accept(&mut self, _: &mut ServerCtx<'_, u32>, _: SocketAddr, _: &[u8]) -> Option<u32> {
        Some(0)
    }

    fn datagram(&mut self, s: &mut Session<'_, u32>, _: &[u8]) {
        let mut data = [0u8; 1_000];
        for _ in 0..REPLIES {
            let seq = *s.state();
            *s.state() += 1;
            data[..4].copy_from_slice(&seq.to_le_bytes());
            s.send(&data).expect("the queue has room for a burst");
        }
    }
}

/// A server lane's replies meet `WouldBlock` at the end of the batch, wait
/// in the queue, and go out on writable readiness, in order.
#[test]
fn server_replies_wait_in_the_queue_and_flush_in_order() {
    if !in_throttled_netns("server_replies_wait_in_the_queue_and_flush_in_order") {
        return;
    }
    const REQUESTS: u32 = 5;
    let rt = runtime(IoModel::Shared { threads: 2 });
    let config = ServerConfig {
        endpoint: tiny_sndbuf(64, 64),
        ..ServerConfig::default()
    };
    let server = Server::bind(rt.handles(), v4(), config, |_| Burst).unwrap();
    let client = std_client(v4());
    let mut buf = [0u8; 2_000];
    for r in 0..REQUESTS {
        client.send_to(b"go", server.local_addr()).unwrap();
        for k in 0..REPLIES {
            let (n, _) = recv_from(&client, &mut buf, &format!("reply {k} to request {r}"));
            assert_eq!(n, 1_000);
            let seq = u32::from_le_bytes(buf[..4].try_into().unwrap());
            assert_eq!(seq, r * REPLIES + k, "replies out of order");
        }
    }
    barrier(&server);
    let c = server.counters();
    println!("server bursts: {c:?}");
    assert_eq!(c.datagrams_out, u64::from(REQUESTS * REPLIES), "{c:?}");
    assert!(c.send_queued > 0, "nothing was queued: {c:?}");
    assert_eq!(c.send_queue_rejections + c.send_errors, 0, "{c:?}");
    server.stop();
    rt.stop().unwrap();
}

/// On plain loopback (no namespace): a burst of large datagrams from a
/// socket with the minimum send buffer never blocks, and every datagram is
/// accounted for at the receiver (received or a counted kernel drop).
#[test]
fn loopback_burst_with_minimum_sndbuf_is_accounted() {
    const LEN: usize = 60_000;
    const N: usize = 32;
    let rt = runtime(IoModel::Shared { threads: 2 });
    let config = ServerConfig {
        idle_timeout: None,
        endpoint: EndpointConfig {
            socket: big_buffers(),
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    let (server, seen) = echo_server(&rt, v4(), config);
    let to = server.local_addr();
    // The echoes go back to the socket's own socket; it ignores them.
    let socket = DatagramSocket::bind(rt.handle(), v4(), tiny_sndbuf(64, 8), Quiet).unwrap();
    let (tx, rx) = mpsc::channel();
    let _ = socket.post(move |_, ctx| {
        let data = vec![7u8; LEN];
        let results: Vec<_> = (0..N).map(|_| ctx.send_to(to, &data)).collect();
        tx.send(results).unwrap();
    });
    let results = recv_within(&rx, "the burst");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (tx, rx) = mpsc::channel();
    let _ = socket.post(move |_, _| tx.send(()).unwrap());
    recv_within(&rx, "socket barrier");
    let c = socket.counters();
    assert_eq!(c.datagrams_out, N as u64, "{c:?}");
    assert_eq!(c.send_queued, 0, "loopback blocked after all? {c:?}");
    // Markers until the server has accounted for everything: drops are
    // reported with the next datagram that gets in, so a marker that is
    // itself dropped needs another one after it.
    let deadline = std::time::Instant::now() + LIMIT;
    let mut markers = 0;
    let s = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            server.counters()
        );
        let before = seen.get();
        socket.send_to(to, b"marker").unwrap();
        markers += 1;
        seen.wait_quietly(std::time::Duration::from_millis(200), |c| c > before);
        barrier(&server);
        let s = server.counters();
        if s.datagrams_in + s.kernel_drops == (N + markers) as u64 {
            break s;
        }
    };
    assert!(s.datagrams_in > 0, "{s:?}");
    server.stop();
    socket.close();
    rt.stop().unwrap();
}

/// Datagrams still in the send queue when an endpoint closes cannot be
/// sent any more: they are counted in `send_discarded` (before, they were
/// dropped with the socket, uncounted: 736 and 988 in two runs).
#[test]
fn datagrams_queued_at_close_are_counted_as_discarded() {
    if !in_throttled_netns("datagrams_queued_at_close_are_counted_as_discarded") {
        return;
    }
    const QUEUE: usize = 64;
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (to, _got, _seqs) = receiver();
    let socket = DatagramSocket::bind(rt.handle(), v4(), tiny_sndbuf(16, QUEUE), Quiet).unwrap();
    let (tx, rx) = mpsc::channel();
    // One burst and the close in the same lane call: the queue has no
    // chance to drain before the socket goes.
    let _ = socket.post(move |_, ctx| {
        let data = [7u8; 1_000];
        let mut accepted = 0u64;
        for _ in 0..500 {
            if ctx.send_to(to, &data).is_ok() {
                accepted += 1;
            }
        }
        tx.send(accepted).unwrap();
    });
    socket.close();
    let accepted = recv_within(&rx, "the burst");
    rt.stop().unwrap();
    let c = socket.counters();
    assert!(c.send_queued > 0, "nothing was queued: {c:?}");
    assert!(
        c.send_discarded > 0,
        "the queue drained before the close: {c:?}"
    );
    assert_eq!(
        c.datagrams_out + c.send_discarded,
        accepted,
        "every accepted datagram is sent or counted: {c:?}"
    );
}
