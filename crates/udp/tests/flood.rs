//! A flood of new peers against a bounded session table.
//!
//! A server with `max_sessions = 10_000` receives one datagram from each of
//! 100,000 distinct sources (every one its own address in 127.0.0.0/8, so
//! every (address, port) differs), while a legitimate peer that connected
//! first keeps pinging it. For both full-table policies:
//!
//! * memory stays bounded: the session table never holds more than 10,000
//!   sessions, and the process's RSS (read from /proc/self/status before,
//!   during and after the flood) grows by a few MiB at most;
//! * every datagram is accounted for: received + kernel drops = sent, and
//!   every flood datagram either opened a session or was refused
//!   (`sessions_refused`); every eviction is counted (`sessions_evicted`)
//!   and seen by the handler as `DisconnectReason::Evicted`;
//! * the legitimate peer keeps its session (it never gets a disconnect) and
//!   gets at least 99 % of its echoes. Under `EvictIdlest` that is not
//!   luck: each of its pings waits behind up to `AHEAD` flood datagrams, so
//!   when it is next heard from, up to about 40 % of the table (more on a
//!   loaded machine) opened after its last datagram; the least recently
//!   active session goes, and that is the peer only once a whole table of
//!   sessions (10,000 admissions) opened after its last datagram.
//!
//! Load is bounded: 100,000 sends, at most 4,096 ahead of what the server
//! has taken from its socket (so the kernel buffer never overflows and
//! what is measured is keel's table, not the kernel's queue), and a time
//! limit per phase.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_testkit::rss_bytes;
use keel_udp::{
    DisconnectReason, FullPolicy, Server, ServerConfig, ServerCtx, ServerHandler, Session,
    SocketOptions,
};

const FLOOD_SOURCES: u32 = 100_000;
const MAX_SESSIONS: usize = 10_000;
/// Most flood datagrams in flight (sent, not yet taken by the server).
const AHEAD: u64 = 4096;
/// Bound of each phase of the test.
const LIMIT: Duration = Duration::from_secs(60);
/// Fewest pings of the legitimate peer that make its 99 % a measurement.
const MIN_PINGS: u64 = 50;

/// Echoes everything; remembers whether the legitimate peer ever lost its
/// session, and counts evictions it was told about.
struct Echo {
    legit: SocketAddr,
    legit_disconnects: Arc<AtomicU64>,
    evictions_seen: Arc<AtomicU64>,
}

impl ServerHandler for Echo {
    type SessionState = ();

    fn accept(&mut self, _ctx: &mut ServerCtx<'_, ()>, _peer: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, session: &mut Session<'_, ()>, data: &[u8]) {
        let _ = session.send(data);
    }

    fn disconnected(
        &mut self,
        _ctx: &mut ServerCtx<'_, ()>,
        peer: SocketAddr,
        _state: (),
        reason: DisconnectReason,
    ) {
        if peer == self.legit && reason != DisconnectReason::Shutdown {
            self.legit_disconnects.fetch_add(1, Ordering::Relaxed);
        }
        if reason == DisconnectReason::Evicted {
            self.evictions_seen.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The `i`-th flood source address: 127.a.b.c with a >= 1 and b, c in
/// 1..=254, distinct for every `i` below 254^3 (none is 127.0.0.1).
fn flood_ip(i: u32) -> Ipv4Addr {
    let c = (i % 254 + 1) as u8;
    let b = ((i / 254) % 254 + 1) as u8;
    let a = (i / (254 * 254) + 1) as u8;
    Ipv4Addr::new(127, a, b, c)
}

/// Pings the server with 8-byte sequence numbers (one in flight, 1 ms
/// apart) until `stop`, counting them in `pings`; returns (sent, echoed).
fn legit_peer(
    sock: UdpSocket,
    server: SocketAddr,
    stop: Arc<AtomicBool>,
    pings: Arc<AtomicU64>,
) -> (u64, u64) {
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let deadline = Instant::now() + LIMIT;
    let (mut sent, mut echoed) = (0u64, 0u64);
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let seq = sent;
        sock.send_to(&seq.to_be_bytes(), server).unwrap();
        sent += 1;
        pings.store(sent, Ordering::Relaxed);
        // Wait for this echo (generously: the machine may be loaded); a
        // late echo of an earlier ping is skipped.
        let wait_until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < wait_until {
            match sock.recv(&mut buf) {
                Ok(8) if buf[..8] == seq.to_be_bytes() => {
                    echoed += 1;
                    break;
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) => panic!("legitimate peer: {e}"),
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    (sent, echoed)
}

struct Outcome {
    sent: u64,
    opened: u64,
    refused: u64,
    evicted: u64,
    legit_sent: u64,
    legit_echoed: u64,
    rss_before: u64,
    rss_peak: u64,
    rss_after: u64,
    rss_stopped: u64,
    max_open_seen: u64,
    took: Duration,
}

fn flood(policy: FullPolicy) -> Outcome {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let legit_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let legit = legit_sock.local_addr().unwrap();
    let legit_disconnects = Arc::new(AtomicU64::new(0));
    let evictions_seen = Arc::new(AtomicU64::new(0));
    let config = ServerConfig {
        max_sessions: MAX_SESSIONS,
        full_policy: policy,
        endpoint: keel_udp::EndpointConfig {
            socket: SocketOptions {
                recv_buffer: Some(4 << 20),
                ..SocketOptions::default()
            },
            ..keel_udp::EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    let server = {
        let (d, e) = (legit_disconnects.clone(), evictions_seen.clone());
        Server::bind(
            rt.handles(),
            "127.0.0.1:0".parse().unwrap(),
            config,
            move |_| Echo {
                legit,
                legit_disconnects: d.clone(),
                evictions_seen: e.clone(),
            },
        )
        .unwrap()
    };
    let target = server.local_addr();

    // The legitimate peer connects first and keeps talking throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let pings = Arc::new(AtomicU64::new(0));
    let pinger = {
        let (stop, pings) = (stop.clone(), pings.clone());
        thread::spawn(move || legit_peer(legit_sock, target, stop, pings))
    };
    let t = Instant::now();
    while server.counters().sessions_opened == 0 {
        assert!(t.elapsed() < LIMIT, "legitimate peer never connected");
        thread::sleep(Duration::from_millis(1));
    }
    let rss_before = rss_bytes();

    let started = Instant::now();
    let mut rss_peak = rss_before;
    let mut max_open_seen = 0;
    let payload = [0x5Au8; 32];
    for i in 0..FLOOD_SOURCES {
        // Stay at most AHEAD datagrams ahead of the server (bounded wait).
        loop {
            let k = server.counters();
            max_open_seen = max_open_seen.max(k.sessions_open);
            // The legitimate peer's datagrams are in datagrams_in too.
            if u64::from(i) < k.datagrams_in + k.kernel_drops + AHEAD {
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "server stalled at {i} sent: {k:?}"
            );
            thread::yield_now();
        }
        let src = SocketAddrV4::new(flood_ip(i), 0);
        let sock = UdpSocket::bind(src).unwrap_or_else(|e| panic!("bind {src}: {e}"));
        sock.send_to(&payload, target)
            .unwrap_or_else(|e| panic!("send from {src}: {e}"));
        drop(sock);
        if i % 5000 == 0 {
            rss_peak = rss_peak.max(rss_bytes());
        }
    }
    // Wait until the server has handled every flood datagram: each one
    // opened a session or was refused, as did the legitimate peer's first.
    let flood_sent = u64::from(FLOOD_SOURCES);
    loop {
        let k = server.counters();
        max_open_seen = max_open_seen.max(k.sessions_open);
        if k.sessions_opened + k.sessions_refused > flood_sent {
            break;
        }
        assert!(started.elapsed() < LIMIT, "flood not drained: {k:?}");
        thread::sleep(Duration::from_millis(1));
    }
    let took = started.elapsed();
    rss_peak = rss_peak.max(rss_bytes());
    // The legitimate peer keeps talking a little after the flood too: 100
    // ms, and until it has sent MIN_PINGS. During the flood it may have sent
    // far fewer: one ping is in flight, and when the server is the
    // bottleneck each one waits behind up to AHEAD flood datagrams, so it
    // sends about one per AHEAD of them (a debug build on a loaded machine
    // sent 46 in all, with 100 ms after the flood).
    let after = Instant::now();
    while after.elapsed() < Duration::from_millis(100) || pings.load(Ordering::Relaxed) < MIN_PINGS
    {
        assert!(
            started.elapsed() < LIMIT,
            "legitimate peer stalled at {} pings",
            pings.load(Ordering::Relaxed)
        );
        thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let (legit_sent, legit_echoed) = pinger.join().expect("legitimate peer thread");
    let rss_after = rss_bytes();

    // The legitimate peer's last ping may still be queued at the server
    // (its echo wait can time out on a loaded machine): wait, bounded, until
    // every datagram sent is accounted for.
    let expected = flood_sent + legit_sent;
    loop {
        let k = server.counters();
        if k.datagrams_in + k.kernel_drops >= expected {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "datagrams not all handled: {k:?}"
        );
        thread::sleep(Duration::from_millis(1));
    }
    let k = server.counters();
    let legit_datagrams = legit_sent;
    // Every datagram is accounted for: taken by the server or dropped by
    // the kernel (and counted).
    assert_eq!(
        k.datagrams_in + k.kernel_drops,
        flood_sent + legit_datagrams,
        "{k:?}"
    );
    assert_eq!(
        k.kernel_drops, 0,
        "the pacing keeps the buffer from overflowing: {k:?}"
    );
    assert_eq!(k.truncated, 0);
    // Every flood datagram opened a session or was refused; the legitimate
    // peer opened exactly one.
    assert_eq!(
        k.sessions_opened + k.sessions_refused,
        flood_sent + 1,
        "{k:?}"
    );
    assert!(max_open_seen <= MAX_SESSIONS as u64, "{max_open_seen}");
    assert_eq!(k.sessions_open, MAX_SESSIONS as u64, "{k:?}");
    match policy {
        FullPolicy::Refuse => {
            assert_eq!(k.sessions_opened, MAX_SESSIONS as u64, "{k:?}");
            assert_eq!(k.sessions_refused, flood_sent + 1 - MAX_SESSIONS as u64);
            assert_eq!(k.sessions_evicted, 0);
        }
        FullPolicy::EvictIdlest => {
            assert_eq!(k.sessions_refused, 0, "{k:?}");
            assert_eq!(k.sessions_opened, flood_sent + 1);
            assert_eq!(k.sessions_evicted, k.sessions_opened - MAX_SESSIONS as u64);
            assert_eq!(evictions_seen.load(Ordering::Relaxed), k.sessions_evicted);
        }
    }
    assert_eq!(
        legit_disconnects.load(Ordering::Relaxed),
        0,
        "the legitimate peer lost its session under {policy:?}"
    );
    assert!(
        legit_sent >= MIN_PINGS,
        "legitimate peer sent only {legit_sent}"
    );
    assert!(
        legit_echoed * 100 >= legit_sent * 99,
        "legitimate peer got {legit_echoed} of {legit_sent} echoes under {policy:?}"
    );

    server.stop();
    rt.stop().expect("no handler failed");
    let rss_stopped = rss_bytes();
    Outcome {
        sent: flood_sent,
        opened: k.sessions_opened,
        refused: k.sessions_refused,
        evicted: k.sessions_evicted,
        legit_sent,
        legit_echoed,
        rss_before,
        rss_peak,
        rss_after,
        rss_stopped,
        max_open_seen,
        took,
    }
}

/// Both policies in one test, one after the other, so the RSS readings of
/// one are not disturbed by the other's flood.
#[test]
fn a_flood_of_100k_sources_keeps_memory_bounded_counts_every_refusal_and_spares_the_live_peer() {
    for policy in [FullPolicy::Refuse, FullPolicy::EvictIdlest] {
        let o = flood(policy);
        eprintln!(
            "flood {policy:?}: {} sources in {:.2} s; sessions opened {}, refused {}, evicted {}, \
             max open {}; legitimate peer {}/{} echoes; RSS before {:.1} MiB, peak during \
             {:.1} MiB, after {:.1} MiB, after stop {:.1} MiB",
            o.sent,
            o.took.as_secs_f64(),
            o.opened,
            o.refused,
            o.evicted,
            o.max_open_seen,
            o.legit_echoed,
            o.legit_sent,
            mib(o.rss_before),
            mib(o.rss_peak),
            mib(o.rss_after),
            mib(o.rss_stopped),
        );
        // Bounded: 10,000 sessions cost well under a MiB; the rest is
        // allocator slack and the receive batch's touched pages.
        let growth = o.rss_peak.saturating_sub(o.rss_before);
        assert!(growth < 16 << 20, "RSS grew {:.1} MiB", mib(growth));
        assert!(o.rss_after <= o.rss_peak + (4 << 20));
    }
}
