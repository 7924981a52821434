//! The benchmark path allocates nothing per echo in steady state: a
//! counting global allocator counts allocations on the runtime thread while
//! the canonical workload (16 `BenchClient`s, window 1, 1024 B, the `Echo`
//! server) does 10,000 echoes after a warm-up. The only test in this
//! binary, so no other test's allocations interfere.
// A global allocator can only be written with `unsafe impl GlobalAlloc`;
// it forwards to `System` and is the only unsafe code here.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use keel_bench::client::{BenchClient, DrainLatch, Schedule};
use keel_bench::echo::{EchoMode, EchoStats};
use keel_bench::flags::IoModel;
use keel_bench::loopback::{runtime_for, start_server, EchoServerSpec, SessionPolicy};
use keel_bench::stats::RttShards;
use keel_udp::{Client, ClientConfig, EndpointConfig};

struct Counting;

static MEASURING: AtomicBool = AtomicBool::new(false);
static RUNTIME_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the runtime's thread (const-initialized: reading it never
    /// allocates, so the allocator may use it).
    static ON_RUNTIME: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if MEASURING.load(Ordering::Relaxed) && ON_RUNTIME.try_with(Cell::get).unwrap_or(false) {
        RUNTIME_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; counting
// touches only atomics and a const-initialized thread local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract is passed on to System unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Polls `done` (a counter read; there is no event to await) every
/// millisecond, at most 30 s.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn benchmark_echo_path_allocates_nothing_per_echo() {
    const CLIENTS: u32 = 16;
    const PAYLOAD: usize = 1024;
    let rt = runtime_for(IoModel::Shared, 1).unwrap();
    let (tx, rx) = mpsc::channel();
    rt.handle().post(move || {
        ON_RUNTIME.with(|c| c.set(true));
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
        c.post(move |h, ctx| h.start(ctx, schedule));
        clients.push(c);
    }
    let echoes = || server.counters().datagrams_out;
    // Warm-up: every buffer, map and queue has reached its working size.
    wait_for("2,000 warm-up echoes", || echoes() >= 2_000);
    let from = echoes();
    MEASURING.store(true, Ordering::SeqCst);
    wait_for("10,000 measured echoes", || echoes() >= from + 10_000);
    MEASURING.store(false, Ordering::SeqCst);
    let allocs = RUNTIME_ALLOCS.load(Ordering::SeqCst);
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
