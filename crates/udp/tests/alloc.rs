//! The steady-state echo path allocates nothing: a counting global
//! allocator counts allocations made on the runtime's thread while a
//! client does 10,000 echoes (after a warm-up of at least 1,000 echoes and
//! 300 ms), with a lane timer firing throughout. The only test in
//! this binary, so no other test's allocations interfere.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use keel_reactor::{IoModel, TimerId};
use keel_testkit::CountingAllocator;
use keel_udp::{Server, ServerConfig, ServerCtx, ServerHandler, Session};

static TICKS: AtomicU64 = AtomicU64::new(0);

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Echoes (as `common::Echo`) and runs a 500 Hz timer that only counts.
struct Ticking {
    seen: Arc<Progress>,
}

impl ServerHandler for Ticking {
    type SessionState = ();

    fn started(&mut self, ctx: &mut ServerCtx<'_, ()>) {
        let every = Duration::from_millis(2);
        ctx.timer(Instant::now() + every, Some(every));
    }

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        s.send(data).expect("echo send");
        self.seen.add(1);
    }

    fn timer(&mut self, _: &mut ServerCtx<'_, ()>, _: TimerId) {
        TICKS.fetch_add(1, Ordering::Relaxed);
    }
}

fn echoes(client: &std::net::UdpSocket, to: std::net::SocketAddr, n: usize, buf: &mut [u8]) {
    let data = payload(1, 2, 64);
    for i in 0..n {
        client.send_to(&data, to).unwrap();
        let (len, _) = recv_from(client, buf, &format!("echo {i}"));
        assert_eq!(len, data.len());
    }
}

#[test]
fn steady_state_echo_allocates_nothing_on_the_runtime_thread() {
    const WARM_UP: usize = 1_000;
    const MEASURED: usize = 10_000;
    let rt = runtime(IoModel::Shared { threads: 1 });
    // Mark the runtime's only thread.
    let (tx, rx) = mpsc::channel();
    let _ = rt.handle().post(move || {
        keel_testkit::mark_runtime_thread();
        let name = std::thread::current().name().map(str::to_owned);
        tx.send(name).unwrap();
    });
    let name = recv_within(&rx, "the runtime thread to be marked");
    assert!(
        name.as_deref().is_some_and(|n| n.starts_with("keel-")),
        "{name:?}"
    );

    // One lane, default config (idle timeout on), and a 500 Hz lane timer,
    // so the timer path runs all through the warm-up and the measurement.
    let seen = Arc::new(Progress::default());
    let s = seen.clone();
    let server = Server::bind(rt.handles(), v4(), ServerConfig::default(), move |_| {
        Ticking { seen: s.clone() }
    })
    .unwrap();
    let to = server.local_addr();
    let client = std_client(to);
    let mut buf = vec![0u8; 2048];
    // Warm up by count and by time: the first timer fires grow the
    // reactor's timer vectors once (amortized, not per datagram; the lane
    // inbox is double-buffered, so each of its two vectors grows once).
    let start = Instant::now();
    let mut warm = 0;
    while warm < WARM_UP || start.elapsed() < Duration::from_millis(300) {
        echoes(&client, to, 100, &mut buf);
        warm += 100;
    }

    // Prove the counter works: a post allocates its box on the calling
    // thread, and this one allocates on the runtime thread.
    keel_testkit::set_measuring(true);
    let (tx, rx) = mpsc::channel();
    let _ = server.post(0, move |_, _| tx.send(vec![0u8; 16]).unwrap());
    drop(recv_within(&rx, "the probe"));
    let ticks_before = TICKS.load(Ordering::SeqCst);
    let probe_allocs = keel_testkit::take_runtime_allocs();
    assert!(probe_allocs >= 1, "the counter missed a runtime allocation");

    echoes(&client, to, MEASURED, &mut buf);
    keel_testkit::set_measuring(false);
    let allocs = keel_testkit::runtime_allocs();
    let ticks = TICKS.load(Ordering::SeqCst) - ticks_before;
    assert!(ticks > 0, "the timer never fired during the measurement");
    assert_eq!(seen.get(), (warm + MEASURED) as u64);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations on the runtime thread during {MEASURED} echoes"
    );
    server.stop();
    rt.stop().unwrap();
}
