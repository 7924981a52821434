//! The benchmark path allocates nothing per echo in steady state: a
//! counting global allocator counts allocations on the runtime thread while
//! the canonical workload (16 `BenchClient`s, window 1, 1024 B, the `Echo`
//! server) does 10,000 echoes after a warm-up. The only test in this
//! binary, so no other test's allocations interfere.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use keel_bench::client::{BenchClient, DrainLatch, Schedule};
use keel_bench::echo::{EchoMode, EchoStats};
use keel_bench::flags::IoModel;
use keel_bench::loopback::{runtime_for, start_server, EchoServerSpec, SessionPolicy};
use keel_bench::stats::RttShards;
use keel_testkit::CountingAllocator;
use keel_udp::{Client, ClientConfig, EndpointConfig};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Polls `done` (a counter read; there is no event to await) every
/// millisecond, at most 30 s.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    keel_testkit::poll_until(Duration::from_secs(30), what, done);
}

#[test]
fn benchmark_echo_path_allocates_nothing_per_echo() {
    const CLIENTS: u32 = 16;
    const PAYLOAD: usize = 1024;
    let rt = runtime_for(IoModel::Shared, 1).unwrap();
    let (tx, rx) = mpsc::channel();
    let _ = rt.handle().post(move || {
        keel_testkit::mark_runtime_thread();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let stats = Arc::new(EchoStats::default());
    let spec = EchoServerSpec {
        bind: "127.0.0.1:0".parse().unwrap(),
        lanes: 1,
        batch: 64,
        receive_buffer: None,
        work: 0,
        mode: EchoMode::Bench,
        steering: keel_udp::LaneSteering::KernelHash,
        sessions: SessionPolicy::default(),
        dont_fragment: false,
    };
    let server = start_server(&rt, &spec, stats.clone()).unwrap();
    let latch = Arc::new(DrainLatch::default());
    let rtt = Arc::new(RttShards::new(1));
    let config = ClientConfig {
        local: None,
        endpoint: EndpointConfig {
            batch: 2,
            max_datagram: 2048,
            ..EndpointConfig::default()
        },
    };
    let now = Instant::now();
    let schedule = Schedule {
        measure_start: now,
        measure_end: now + Duration::from_secs(60),
        loss_timeout: None,
    };
    let mut clients = Vec::new();
    for id in 0..CLIENTS {
        let words = Arc::new(Mutex::new(None));
        let h = BenchClient::new(id, PAYLOAD, 1, latch.clone(), rtt.clone(), words);
        let c = Client::connect(rt.handle(), server.local_addr(), config.clone(), h).unwrap();
        let _ = c.post(move |h, ctx| h.start(ctx, schedule));
        clients.push(c);
    }
    let echoes = || server.counters().datagrams_out;
    // Warm-up: every buffer, map and queue has reached its working size.
    wait_for("2,000 warm-up echoes", || echoes() >= 2_000);
    let from = echoes();
    keel_testkit::set_measuring(true);
    wait_for("10,000 measured echoes", || echoes() >= from + 10_000);
    keel_testkit::set_measuring(false);
    let allocs = keel_testkit::runtime_allocs();
    let measured = echoes() - from;

    for c in &clients {
        c.close();
    }
    server.stop_and_wait(Duration::from_secs(5));
    rt.stop().unwrap();
    assert_eq!(stats.invalid.load(Ordering::Relaxed), 0);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations on the runtime thread during {measured} echoes"
    );
}
