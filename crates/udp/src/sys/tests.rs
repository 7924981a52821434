//! Tests of the system-call layer with real loopback sockets.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::base::{sockaddr_to_std, std_to_sockaddr, zeroed_storage, KernelDrops};
use super::*;
use crate::socket::{bind, SocketOptions};

type Received = Vec<(Vec<u8>, SocketAddr, bool)>;

fn v4() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn v6() -> SocketAddr {
    SocketAddr::from((Ipv6Addr::LOCALHOST, 0))
}

/// A bound non-blocking socket with buffers large enough for a few dozen
/// maximum-size datagrams.
fn big_socket(addr: SocketAddr) -> mio::net::UdpSocket {
    let opts = SocketOptions {
        send_buffer: Some(4 << 20),
        recv_buffer: Some(4 << 20),
        ..SocketOptions::default()
    };
    bind(addr, &opts).unwrap().0
}
/// A receiver, a sender and the receiver's address, both sockets bound on
/// `family`'s loopback.
fn loopback_pair(family: SocketAddr) -> (mio::net::UdpSocket, mio::net::UdpSocket, SocketAddr) {
    let rx = big_socket(family);
    let tx = big_socket(family);
    let to = rx.local_addr().unwrap();
    (rx, tx, to)
}

/// A payload of `len` bytes that differs per datagram index `i`.
fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// Datagram sizes: empty, tiny, around typical MTUs, and the IPv4 maximum.
const SIZES: &[usize] = &[0, 1, 17, 1200, 1472, 0, 9000, 65_507, 3, 65_507, 0, 512];

/// Receives until `want` datagrams arrived (or a second passed), with
/// whatever path `recv` implements.
fn recv_all(
    socket: &mio::net::UdpSocket,
    batch: &mut RecvBatch,
    want: usize,
    recv: fn(&mio::net::UdpSocket, &mut RecvBatch) -> io::Result<usize>,
) -> Received {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while out.len() < want {
        match recv(socket, batch) {
            Ok(n) => {
                assert!(n >= 1 && n <= batch.batch());
                assert_eq!(batch.len(), n);
                for i in 0..n {
                    out.push((batch.data(i).to_vec(), batch.addr(i), batch.truncated(i)));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(
                    Instant::now() < deadline,
                    "only {} of {want} arrived",
                    out.len()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("receive failed: {e}"),
        }
    }
    out
}

fn linux_recv(s: &mio::net::UdpSocket, b: &mut RecvBatch) -> io::Result<usize> {
    recv_batch(s, b)
}

fn portable_recv(s: &mio::net::UdpSocket, b: &mut RecvBatch) -> io::Result<usize> {
    portable::recv_batch(s, b)
}

/// Sends `SIZES` to `to`, alternating between the two senders.
fn send_mix(senders: &[&mio::net::UdpSocket; 2], to: SocketAddr) -> Received {
    let mut expected = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let sender = senders[i % 2];
        let data = payload(i, len);
        assert_eq!(sender.send_to(&data, to).unwrap(), len);
        expected.push((data, sender.local_addr().unwrap(), false));
    }
    expected
}

fn batched_and_single_agree(family: SocketAddr) {
    let rx = big_socket(family);
    let rx_addr = rx.local_addr().unwrap();
    let a = big_socket(family);
    let b = big_socket(family);
    let max = max_payload(&rx_addr);

    let mut results = Vec::new();
    for (batch, recv) in [
        (RecvBatch::new(8, max), linux_recv as fn(&_, &mut _) -> _),
        (RecvBatch::new(1, max), linux_recv),
        (RecvBatch::new(4, max), portable_recv),
    ] {
        let mut batch = batch;
        let expected = send_mix(&[&a, &b], rx_addr);
        let got = recv_all(&rx, &mut batch, expected.len(), recv);
        assert_eq!(got.len(), expected.len());
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g.0.len(), e.0.len(), "datagram {i}: length");
            assert!(g == e, "datagram {i} differs");
        }
        assert!(matches!(recv(&rx, &mut batch), Err(e) if e.kind() == io::ErrorKind::WouldBlock));
        assert_eq!(batch.take_kernel_drops_delta(), 0);
        results.push(got);
    }
    assert!(results[0] == results[1] && results[1] == results[2]);
}

#[test]
fn batched_and_one_per_call_agree_ipv4() {
    batched_and_single_agree(v4());
}

#[test]
fn batched_and_one_per_call_agree_ipv6() {
    batched_and_single_agree(v6());
}

#[test]
fn batch_fills_several_slots_per_call() {
    let (rx, tx, to) = loopback_pair(v4());
    for i in 0..10 {
        tx.send_to(&payload(i, 100), to).unwrap();
    }
    let mut batch = RecvBatch::new(16, 2048);
    let got = recv_all(&rx, &mut batch, 10, linux_recv);
    assert_eq!(got.len(), 10);
    // Loopback delivers synchronously, so the first call fills all eight
    // initial slots and the next (with sixteen) picks up the last two.
    assert_eq!(batch.len(), 2);
    assert_eq!(batch.slots(), 16);
}

/// The receive slots are not allocated up front: a new batch holds 8 (or
/// the whole batch if smaller), then doubles each time a call fills every
/// slot, up to the batch, and never shrinks. A backlog larger than the
/// initial slots is drained in calls of 8, 16, 32 then the whole batch.
#[test]
fn recv_slots_grow_on_demand_up_to_the_batch() {
    assert_eq!(RecvBatch::new(64, 2048).slots(), 8);
    assert_eq!(RecvBatch::new(5, 2048).slots(), 5);
    assert_eq!(RecvBatch::new(1, 2048).slots(), 1);
    let (rx, tx, to) = loopback_pair(v4());
    let mut batch = RecvBatch::new(64, 2048);
    let mut sizes = Vec::new();
    let mut next = 0;
    // Twice: the second burst finds the slots grown (no shrinking).
    for (backlog, expect) in [(200, &[8, 16, 32, 64, 64, 16][..]), (70, &[64, 6][..])] {
        for i in next..next + backlog {
            tx.send_to(&payload(i, 100), to).unwrap();
        }
        sizes.clear();
        let mut seen = 0;
        while seen < backlog {
            // Loopback delivers synchronously: WouldBlock here is a bug.
            let n = linux_recv(&rx, &mut batch).unwrap();
            // What the call could return is what `was_full` judges by.
            assert_eq!(batch.per_call(), batch.slots());
            assert!(n <= batch.slots());
            for k in 0..n {
                assert_eq!(batch.data(k), payload(next + seen + k, 100));
            }
            sizes.push(n);
            seen += n;
        }
        assert_eq!(sizes, expect);
        assert_eq!(batch.slots(), 64);
        next += backlog;
    }
    assert!(linux_recv(&rx, &mut batch).is_err());
    // A batch of a size that is not a power of two stops at it.
    let mut odd = RecvBatch::new(20, 64);
    for i in 0..50 {
        tx.send_to(&payload(i, 10), to).unwrap();
    }
    let mut sizes = Vec::new();
    while let Ok(n) = linux_recv(&rx, &mut odd) {
        sizes.push(n);
    }
    assert_eq!(sizes, [8, 16, 20, 6]);
    assert_eq!(odd.slots(), 20);
}

/// The `sendmmsg` headers start with room for 8 datagrams and grow (by
/// doubling, up to the datagrams per call) the first time more are queued;
/// a burst larger than the initial headers still goes out in one call.
#[test]
fn send_headers_grow_on_demand_up_to_per_call() {
    let (rx, tx, to) = loopback_pair(v4());
    let mut batch = SendBatch::new(64, 64);
    assert_eq!(batch.scratch.len(), 8);
    assert_eq!(SendBatch::new(64, 3).scratch.len(), 3);
    assert_eq!(SendBatch::new(64, 1).scratch.len(), 0);
    let sent = fill(&mut batch, Some(to), 40);
    assert_eq!(send_batch(&tx, &mut batch, 0).unwrap(), 40);
    assert_eq!(batch.scratch.len(), 64);
    assert_eq!(recv_payloads(&rx, 40), sent);
    batch.clear();
    let mut odd = SendBatch::new(64, 20);
    let sent = fill(&mut odd, Some(to), 30);
    assert_eq!(send_batch(&tx, &mut odd, 0).unwrap(), 20);
    assert_eq!(odd.scratch.len(), 20);
    assert_eq!(send_batch(&tx, &mut odd, 20).unwrap(), 10);
    assert_eq!(recv_payloads(&rx, 30), sent);
}

/// The queue's entries start at 8 whatever the capacity (a client's 1,024
/// reserved up front were 78 KB a socket), grow when more are queued, up to
/// the capacity, and are kept: a second burst as large reallocates nothing.
#[test]
fn send_entries_grow_on_demand_and_are_kept() {
    let (rx, tx, to) = loopback_pair(v4());
    let mut batch = SendBatch::new(1024, 64);
    assert!(
        batch.entries.capacity() <= 8,
        "{}",
        batch.entries.capacity()
    );
    assert_eq!(SendBatch::new(3, 3).entries.capacity(), 3);
    let sent = fill(&mut batch, Some(to), 40);
    let grown = batch.entries.capacity();
    assert!((40..1024).contains(&grown), "{grown}");
    assert_eq!(send_batch(&tx, &mut batch, 0).unwrap(), 40);
    assert_eq!(recv_payloads(&rx, 40), sent);
    batch.clear();
    let ptr = batch.entries.as_ptr();
    let sent = fill(&mut batch, Some(to), 40);
    assert_eq!(
        (batch.entries.as_ptr(), batch.entries.capacity()),
        (ptr, grown)
    );
    assert_eq!(send_batch(&tx, &mut batch, 0).unwrap(), 40);
    assert_eq!(recv_payloads(&rx, 40), sent);
    // Still bounded by the capacity.
    let mut small = SendBatch::new(10, 10);
    assert_eq!(fill(&mut small, Some(to), 10).len(), 10);
    assert!(!small.push(Some(to), b"one too many"));
}

/// A batch without sources (a connected socket's) receives the same bytes
/// on every path, and the kernel writes no source address into it (the
/// header asked for none).
#[test]
fn batch_without_sources_gets_the_data_and_no_address() {
    let (rx, tx, to) = loopback_pair(v4());
    for (batch, recv) in [
        (RecvBatch::new(8, 2048), linux_recv as fn(&_, &mut _) -> _),
        (RecvBatch::new(1, 2048), linux_recv),
        (RecvBatch::new(4, 2048), portable_recv),
    ] {
        let mut batch = batch.without_sources();
        for i in 0..5 {
            tx.send_to(&payload(i, 100 + i), to).unwrap();
        }
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while got.len() < 5 {
            match recv(&rx, &mut batch) {
                Ok(n) => {
                    for i in 0..n {
                        assert_eq!(batch.meta(i).addr_len, 0, "no address asked for");
                        got.push(batch.data(i).to_vec());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "only {} of 5 arrived", got.len());
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("receive failed: {e}"),
            }
        }
        let want: Vec<_> = (0..5).map(|i| payload(i, 100 + i)).collect();
        assert_eq!(got, want);
    }
}

#[test]
fn would_block_on_empty_socket() {
    let rx = big_socket(v4());
    for mut batch in [RecvBatch::new(8, 64), RecvBatch::new(1, 64)] {
        let err = recv_batch(&rx, &mut batch).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(batch.len(), 0);
        let err = portable::recv_batch(&rx, &mut batch).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
}

#[test]
fn truncation_is_flagged_on_both_paths() {
    let (rx, tx, to) = loopback_pair(v6());
    for mut batch in [RecvBatch::new(4, 100), RecvBatch::new(1, 100)] {
        let big = payload(1, 250);
        let fits = payload(2, 100);
        tx.send_to(&big, to).unwrap();
        tx.send_to(&fits, to).unwrap();
        let got = recv_all(&rx, &mut batch, 2, linux_recv);
        assert_eq!(
            got[0],
            (big[..100].to_vec(), tx.local_addr().unwrap(), true)
        );
        assert_eq!(got[1], (fits, tx.local_addr().unwrap(), false));
    }
}

#[test]
fn zero_size_slots_flag_every_nonempty_datagram() {
    let (rx, tx, to) = loopback_pair(v4());
    tx.send_to(&[], to).unwrap();
    tx.send_to(b"x", to).unwrap();
    let mut batch = RecvBatch::new(2, 0);
    let got = recv_all(&rx, &mut batch, 2, linux_recv);
    assert_eq!((got[0].0.len(), got[0].2), (0, false));
    assert_eq!((got[1].0.len(), got[1].2), (0, true));
}

/// Floods a socket with a tiny receive buffer, then reads everything: the
/// drops reported through `SO_RXQ_OVFL` must account exactly for what was
/// sent and not received.
fn kernel_drops_are_exact(batch_size: usize) {
    let opts = SocketOptions {
        recv_buffer: Some(2048),
        ..SocketOptions::default()
    };
    let (rx, buffers) = bind(v4(), &opts).unwrap();
    assert!(buffers.recv < 16 * 1024, "tiny buffer: {buffers:?}");
    let to = rx.local_addr().unwrap();
    let tx = big_socket(v4());
    let burst = 200;
    for i in 0..burst {
        tx.send_to(&payload(i, 1000), to).unwrap();
    }
    let mut batch = RecvBatch::new(batch_size, 2048);
    let mut received = 0;
    let mut drops = 0;
    loop {
        match recv_batch(&rx, &mut batch) {
            Ok(n) => received += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
        drops += batch.take_kernel_drops_delta();
    }
    assert!(received > 0 && received < burst, "received {received}");
    // The counter rides on datagrams queued after the drops: a marker sent
    // once the buffer has room carries the final count.
    tx.send_to(b"marker", to).unwrap();
    let got = recv_all(&rx, &mut batch, 1, linux_recv);
    assert_eq!(got[0].0, b"marker");
    received += 1;
    drops += batch.take_kernel_drops_delta();
    assert_eq!(drops, (burst + 1 - received) as u64);
    assert_eq!(batch.take_kernel_drops_delta(), 0, "delta is taken once");
}

#[test]
fn kernel_drops_exact_batched() {
    kernel_drops_are_exact(32);
}

#[test]
fn kernel_drops_exact_one_per_call() {
    kernel_drops_are_exact(1);
}

#[test]
fn kernel_drops_tracker_wraps() {
    let mut drops = KernelDrops::default();
    drops.observe(5);
    assert_eq!(drops.take_delta(), 5);
    drops.observe(1 << 31);
    drops.observe(u32::MAX - 1);
    drops.observe(3); // wrapped: MAX-1 -> MAX -> 0 -> 1 -> 2 -> 3
    assert_eq!(drops.take_delta(), (1 << 32) - 2);
    // A jump of half the range or more reads as a stale value: ignored.
    drops.observe(3 + (1 << 31));
    assert_eq!(drops.take_delta(), 0);
    drops.observe(2); // stale (behind): ignored
    assert_eq!(drops.take_delta(), 0);
    drops.observe(10);
    assert_eq!(drops.take_delta(), 7);
}

#[test]
fn max_payload_by_family() {
    assert_eq!(max_payload(&v4()), 65_507);
    assert_eq!(max_payload(&v6()), 65_527);
    // A dual-stack socket's IPv4 peer shows as IPv4-mapped; it is reached
    // over IPv4.
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:9".parse().unwrap();
    assert_eq!(max_payload(&mapped), 65_507);
}

/// Queues `count` datagrams of distinct content for `to`.
fn fill(batch: &mut SendBatch, to: Option<SocketAddr>, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let data = payload(i, i * 10);
            assert!(batch.push(to, &data));
            data
        })
        .collect()
}

fn recv_payloads(rx: &mio::net::UdpSocket, want: usize) -> Vec<Vec<u8>> {
    let mut batch = RecvBatch::new(16, 2048);
    recv_all(rx, &mut batch, want, linux_recv)
        .into_iter()
        .map(|(data, _, truncated)| {
            assert!(!truncated);
            data
        })
        .collect()
}

#[test]
fn send_batch_sends_in_order_on_all_paths() {
    let (rx, tx, to) = loopback_pair(v4());
    type Send = fn(&mio::net::UdpSocket, &mut SendBatch, usize) -> io::Result<usize>;
    let linux: Send = |s, b, i| send_batch(s, b, i);
    let portable: Send = |s, b, i| portable::send_batch(s, b, i);
    for (per_call, send, one_call_per_chunk) in [
        (64, linux, true),
        (3, linux, true),
        (1, linux, true),
        (64, portable, false),
    ] {
        let mut batch = SendBatch::new(10, per_call);
        let sent = fill(&mut batch, Some(to), 10);
        assert_eq!(batch.len(), 10);
        let mut start = 0;
        let mut calls = 0;
        while start < batch.len() {
            let n = send(&tx, &mut batch, start).unwrap();
            assert!(n >= 1);
            start += n;
            calls += 1;
        }
        assert_eq!(send(&tx, &mut batch, start).unwrap(), 0);
        assert_eq!(recv_payloads(&rx, 10), sent, "per_call {per_call}");
        let chunk = if one_call_per_chunk { per_call } else { 1 };
        assert_eq!(calls, 10usize.div_ceil(chunk), "per_call {per_call}");
    }
}

#[test]
fn send_batch_resumes_from_start() {
    let (rx, tx, to) = loopback_pair(v6());
    for per_call in [16, 1] {
        let mut batch = SendBatch::new(8, per_call);
        let sent = fill(&mut batch, Some(to), 8);
        // Pretend the first three went out in an earlier call.
        let mut start = 3;
        while start < batch.len() {
            start += send_batch(&tx, &mut batch, start).unwrap();
        }
        assert_eq!(recv_payloads(&rx, 5), sent[3..]);
        assert!(matches!(
            recv_batch(&rx, &mut RecvBatch::new(4, 64)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        ));
    }
}

/// A failing datagram in the middle of a batch makes `sendmmsg` stop there:
/// the call reports the ones before it, the next call reports its error, and
/// the caller skips it and resumes with the rest.
#[test]
fn partial_send_reports_error_then_resumes() {
    let (rx, tx, to) = loopback_pair(v4());
    for per_call in [16, 1] {
        let mut batch = SendBatch::new(8, per_call);
        let oversized = vec![0u8; MAX_PAYLOAD_V4 + 1];
        let mut expected = Vec::new();
        for i in 0..6 {
            if i == 2 {
                assert!(batch.push(Some(to), &oversized));
            } else {
                let data = payload(i, 50);
                assert!(batch.push(Some(to), &data));
                expected.push(data);
            }
        }
        let mut start = 0;
        let mut errors = Vec::new();
        let mut progress = Vec::new();
        while start < batch.len() {
            match send_batch(&tx, &mut batch, start) {
                Ok(n) => {
                    progress.push(n);
                    start += n;
                }
                Err(e) => {
                    errors.push((start, e.raw_os_error()));
                    start += 1;
                }
            }
        }
        assert_eq!(errors, [(2, Some(libc::EMSGSIZE))], "per_call {per_call}");
        if per_call > 1 {
            assert_eq!(progress, [2, 3], "sent before and after the bad one");
        }
        assert_eq!(recv_payloads(&rx, 5), expected);
    }
}

#[test]
fn send_batch_to_connected_peer_without_destination() {
    let rx = big_socket(v4());
    let to = rx.local_addr().unwrap();
    let (tx, _) = crate::socket::connect(None, to, &SocketOptions::default()).unwrap();
    for per_call in [8, 1] {
        let mut batch = SendBatch::new(4, per_call);
        let sent = fill(&mut batch, None, 4);
        let mut start = 0;
        while start < batch.len() {
            start += send_batch(&tx, &mut batch, start).unwrap();
        }
        let mut rbatch = RecvBatch::new(8, 128);
        let got = recv_all(&rx, &mut rbatch, 4, linux_recv);
        for (g, s) in got.iter().zip(&sent) {
            assert_eq!((&g.0, g.1), (s, tx.local_addr().unwrap()));
        }
    }
}

#[test]
fn connection_refused_surfaces_as_error() {
    // Find a port with nobody behind it: bind, note the port, close.
    let closed = big_socket(v4()).local_addr().unwrap();
    let (tx, _) = crate::socket::connect(None, closed, &SocketOptions::default()).unwrap();
    let mut batch = SendBatch::new(2, 2);
    fill(&mut batch, None, 1);
    assert_eq!(send_batch(&tx, &mut batch, 0).unwrap(), 1);
    // The ICMP port unreachable comes back as ECONNREFUSED on the next call.
    let mut rbatch = RecvBatch::new(4, 64);
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match recv_batch(&tx, &mut rbatch) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => break,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "no ECONNREFUSED");
                std::thread::sleep(Duration::from_millis(1));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn send_batch_push_clear_and_capacity() {
    let mut batch = SendBatch::new(2, 2);
    assert!(batch.is_empty());
    assert!(batch.push(None, b"a"));
    assert!(batch.push(Some(v6()), b""));
    assert!(batch.is_full());
    assert!(!batch.push(None, b"c"));
    assert_eq!(batch.entry(0), (None, &b"a"[..]));
    assert_eq!(batch.entry(1), (Some(v6()), &b""[..]));
    batch.clear();
    assert_eq!(batch.len(), 0);
    assert!(batch.push(None, b"again"));
    assert_eq!(batch.entry(0), (None, &b"again"[..]));
}

/// Guards the send-queue fix: dropping the sent prefix frees capacity and
/// keeps the rest (payloads and destinations) in order.
#[test]
fn send_batch_drain_front_keeps_the_rest() {
    let mut batch = SendBatch::new(3, 1);
    assert!(batch.push(None, b"sent"));
    assert!(batch.push(Some(v4()), b""));
    assert!(batch.push(Some(v6()), b"kept"));
    assert!(!batch.push(None, b"x"));
    batch.drain_front(2);
    assert_eq!(batch.len(), 1);
    assert_eq!(batch.entry(0), (Some(v6()), &b"kept"[..]));
    assert!(batch.push(None, b"new"));
    assert_eq!(batch.entry(1), (None, &b"new"[..]));
    batch.drain_front(5);
    assert_eq!(batch.len(), 0);
}

#[test]
fn sockaddr_round_trip() {
    let addrs = [
        SocketAddr::from((Ipv4Addr::new(10, 1, 2, 3), 9000)),
        "[2001:db8::1%7]:443".parse().unwrap(),
        SocketAddr::from((Ipv6Addr::LOCALHOST, 1)),
    ];
    for addr in addrs {
        let mut storage = zeroed_storage();
        let len = std_to_sockaddr(&addr, &mut storage);
        assert_eq!(sockaddr_to_std(&storage, len), Some(addr));
        assert_eq!(sockaddr_to_std(&storage, len - 1), None);
    }
}

#[test]
fn portable_enable_rxq_ovfl_is_unsupported() {
    let rx = big_socket(v4());
    assert_eq!(
        portable::enable_rxq_ovfl(&rx).unwrap_err().kind(),
        io::ErrorKind::Unsupported
    );
}

/// A socket bound to the unspecified address of `addr`'s family (port 0)
/// that reports each datagram's local address.
fn pktinfo_socket(addr: SocketAddr, only_v6: Option<bool>) -> mio::net::UdpSocket {
    let opts = SocketOptions {
        only_v6,
        ..SocketOptions::default()
    };
    let (s, _) = crate::socket::bind_group(addr, &opts, 1).unwrap();
    s.into_iter().next().unwrap()
}

/// Receives one datagram with each receive path in turn and returns what
/// `local` said for it.
fn local_of_each_path(rx: &mio::net::UdpSocket, send: impl Fn()) -> Vec<Option<LocalAddr>> {
    let mut forced = RecvBatch::new(8, 64);
    forced.force_one_per_call();
    let mut out = Vec::new();
    for mut batch in [RecvBatch::new(8, 64), RecvBatch::new(1, 64), forced] {
        send();
        let got = recv_all(rx, &mut batch, 1, linux_recv);
        assert_eq!(got.len(), 1);
        out.push(batch.local(0));
    }
    out
}

#[test]
fn local_is_none_without_pktinfo() {
    let rx = big_socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
    let to = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), rx.local_addr().unwrap().port()));
    let tx = big_socket(v4());
    let locals = local_of_each_path(&rx, || {
        tx.send_to(b"x", to).unwrap();
    });
    assert_eq!(locals, [None, None, None]);
}

#[test]
fn local_is_the_address_sent_to_ipv4() {
    let rx = pktinfo_socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), None);
    let port = rx.local_addr().unwrap().port();
    let tx = big_socket(v4());
    for last in [2, 1, 200] {
        let ip = Ipv4Addr::new(127, 0, 0, last);
        let locals = local_of_each_path(&rx, || {
            tx.send_to(b"x", SocketAddr::from((ip, port))).unwrap();
        });
        for local in locals {
            let local = local.expect("IP_PKTINFO reported");
            assert_eq!(local.ip, IpAddr::V4(ip));
            assert!(local.ifindex > 0, "{local:?}");
        }
    }
}

#[test]
fn local_on_a_dual_stack_socket_is_mapped_for_ipv4() {
    let rx = pktinfo_socket(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)), Some(false));
    let port = rx.local_addr().unwrap().port();
    let tx4 = big_socket(v4());
    let tx6 = big_socket(v6());
    let ip4 = Ipv4Addr::new(127, 0, 0, 9);
    for local in local_of_each_path(&rx, || {
        tx4.send_to(b"x", SocketAddr::from((ip4, port))).unwrap();
    }) {
        assert_eq!(local.unwrap().ip, IpAddr::V6(ip4.to_ipv6_mapped()));
    }
    for local in local_of_each_path(&rx, || {
        tx6.send_to(b"x", SocketAddr::from((Ipv6Addr::LOCALHOST, port)))
            .unwrap();
    }) {
        assert_eq!(local.unwrap().ip, IpAddr::V6(Ipv6Addr::LOCALHOST));
    }
}

/// A datagram sent to a broadcast address must not be answered from it:
/// `IP_PKTINFO`'s `ipi_spec_dst` names the receiving interface's address
/// (127.0.0.1 for loopback's 127.255.255.255).
#[test]
fn local_of_a_broadcast_is_the_interface_address() {
    for (bind, only_v6, expect) in [
        (
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            None,
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        ),
        (
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            Some(false),
            IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
        ),
    ] {
        let rx = pktinfo_socket(bind, only_v6);
        let port = rx.local_addr().unwrap().port();
        let tx = std::net::UdpSocket::bind(v4()).unwrap();
        tx.set_broadcast(true).unwrap();
        let to = SocketAddr::from((Ipv4Addr::new(127, 255, 255, 255), port));
        for local in local_of_each_path(&rx, || {
            tx.send_to(b"all", to).unwrap();
        }) {
            assert_eq!(local.map(|l| l.ip), Some(expect));
        }
    }
}

/// Datagrams queued with a source leave from it on every send path; the
/// others still leave from the kernel's choice.
#[test]
fn send_from_attaches_the_source_on_all_paths() {
    let tx = pktinfo_socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), None);
    let tx_port = tx.local_addr().unwrap().port();
    let rx = big_socket(v4());
    let to = rx.local_addr().unwrap();
    let pinned = LocalAddr {
        ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5)),
        ifindex: 0,
    };
    type Send = fn(&mio::net::UdpSocket, &mut SendBatch, usize) -> io::Result<usize>;
    let linux: Send = |s, b, i| send_batch(s, b, i);
    let portable: Send = |s, b, i| portable::send_batch(s, b, i);
    for (per_call, send) in [(8, linux), (1, linux), (8, portable)] {
        let mut batch = SendBatch::new(6, per_call);
        for i in 0..6u8 {
            let src = (i % 3 != 2).then_some(pinned);
            assert!(batch.push_from(Some(to), src, &[i]));
            assert_eq!(batch.source(usize::from(i)), src);
        }
        let mut start = 0;
        while start < batch.len() {
            start += send(&tx, &mut batch, start).unwrap();
        }
        let mut rbatch = RecvBatch::new(8, 16);
        let got = recv_all(&rx, &mut rbatch, 6, linux_recv);
        for (i, (data, from, _)) in got.iter().enumerate() {
            assert_eq!(data, &[i as u8]);
            let expect = if i % 3 != 2 {
                Ipv4Addr::new(127, 0, 0, 5)
            } else {
                Ipv4Addr::LOCALHOST
            };
            assert_eq!(
                *from,
                SocketAddr::from((expect, tx_port)),
                "per_call {per_call}, datagram {i}"
            );
        }
    }
}

#[test]
fn send_from_ipv6_and_mapped_sources() {
    let tx = pktinfo_socket(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)), Some(false));
    let tx_port = tx.local_addr().unwrap().port();
    let rx4 = big_socket(v4());
    let rx6 = big_socket(v6());
    let to4 = rx4.local_addr().unwrap();
    let to4_mapped = SocketAddr::from((
        match to4.ip() {
            IpAddr::V4(ip) => ip.to_ipv6_mapped(),
            IpAddr::V6(ip) => ip,
        },
        to4.port(),
    ));
    let mapped_src = LocalAddr {
        ip: IpAddr::V6(Ipv4Addr::new(127, 0, 0, 6).to_ipv6_mapped()),
        ifindex: 1,
    };
    let v6_src = LocalAddr {
        ip: IpAddr::V6(Ipv6Addr::LOCALHOST),
        ifindex: 1,
    };
    for per_call in [8, 1] {
        let mut batch = SendBatch::new(4, per_call);
        assert!(batch.push_from(Some(to4_mapped), Some(mapped_src), b"a"));
        assert!(batch.push_from(Some(rx6.local_addr().unwrap()), Some(v6_src), b"b"));
        assert!(batch.push_from(Some(to4_mapped), Some(mapped_src), b"c"));
        let mut start = 0;
        while start < batch.len() {
            start += send_batch(&tx, &mut batch, start).unwrap();
        }
        let mut rbatch = RecvBatch::new(8, 16);
        let got4 = recv_all(&rx4, &mut rbatch, 2, linux_recv);
        for (data, from, _) in &got4 {
            assert_eq!(
                *from,
                SocketAddr::from(([127, 0, 0, 6], tx_port)),
                "{data:?}"
            );
        }
        let got6 = recv_all(&rx6, &mut rbatch, 1, linux_recv);
        assert_eq!(got6[0].1, SocketAddr::from((Ipv6Addr::LOCALHOST, tx_port)));
    }
}
