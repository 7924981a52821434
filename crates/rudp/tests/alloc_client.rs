//! Both ends of keel-rudp allocate nothing per message in steady state: a
//! [`Client`] and a [`Server`] on one runtime thread; the test thread
//! posts a game tick each millisecond (the way a game's own loop sends),
//! in which the client sends a 400-byte message on a reliable-ordered and
//! one on a reliable-unordered channel; the server echoes each. A counting
//! global allocator counts allocations made on the runtime thread while
//! 3,000 echoes are measured, after a warm-up of 1,200 and a burst of 512
//! messages, so queues and free lists are at their high-water marks. The
//! only test in this binary, so no other test's allocations interfere.
//!
//! (A closed loop as fast as loopback allows is not a steady state: how
//! many messages are unacknowledged at once then depends on how the
//! machine schedules the thread, so a loaded machine finds new
//! high-water marks.)

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Client, ClientConfig, ClientSecurity, ConnectionHandle, Ctx, Handler, Server, ServerConfig,
    ServerSecurity,
};
use keel_testkit::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

const SIZE: usize = 400;

/// Echoes every message on its channel.
struct Echo;

impl Handler for Echo {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        ctx.send(conn, channel, data).expect("echo");
    }
}

/// Sends on each tick and checks every echo; its buffer is made once.
struct Player {
    conn: Option<ConnectionHandle>,
    next: u32,
    expected: u32,
    ticks: u32,
    buf: Vec<u8>,
    echoes: Arc<AtomicU64>,
}

impl Player {
    fn send_next(&mut self, ctx: &mut Ctx<'_>) {
        let Some(conn) = self.conn else { return };
        fill(&mut self.buf, self.next);
        ctx.send(conn, ORDERED, &self.buf).expect("send");
        self.next += 1;
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        self.send_next(ctx);
        let Some(conn) = self.conn else { return };
        fill(&mut self.buf, self.ticks);
        ctx.send(conn, UNORDERED, &self.buf).expect("tick send");
        self.ticks += 1;
    }
}

/// `payload(i, SIZE)` without allocating: the index, then its fill.
fn fill(buf: &mut [u8], i: u32) {
    buf[..4].copy_from_slice(&i.to_le_bytes());
    for (k, b) in buf[4..].iter_mut().enumerate() {
        *b = (i as usize + k) as u8;
    }
}

impl Handler for Player {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        // Bursts larger than any round of the measurement (even with the
        // runtime thread stalled for a few hundred ticks) grow the queues
        // and free lists of both channels to their high-water marks.
        for _ in 0..256 {
            self.tick(ctx);
        }
    }

    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, channel: u8, data: &[u8]) {
        self.echoes.fetch_add(1, Ordering::Relaxed);
        if channel == UNORDERED {
            return;
        }
        assert_eq!(channel, ORDERED);
        fill(&mut self.buf, self.expected);
        assert!(data == &self.buf[..], "echo {} differs", self.expected);
        self.expected += 1;
    }
}

/// Posts a tick send every millisecond until `echoes` reaches `target`
/// (at most 30 s). A tick is posted only once the last one ran, so a
/// stalled runtime thread (a loaded machine) never finds a pile of them.
fn run_until(client: &Client<Player>, echoes: &AtomicU64, target: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let idle = Arc::new(AtomicBool::new(true));
    while echoes.load(Ordering::Relaxed) < target {
        assert!(Instant::now() < deadline, "echo {target} not within 30 s");
        if idle.swap(false, Ordering::AcqRel) {
            let idle = idle.clone();
            let _ = client.post(move |p, ctx| {
                p.tick(ctx);
                idle.store(true, Ordering::Release);
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn client_and_server_allocate_nothing_per_message_in_steady_state() {
    const WARM_UP: u64 = 1_200;
    const MEASURED: u64 = 3_000;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (tx, rx) = mpsc::channel();
    let _ = rt.handle().post(move || {
        keel_testkit::mark_runtime_thread();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("runtime thread marked");

    let server = Server::bind(
        rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::new(config(), ServerSecurity::Insecure),
        |_| Echo,
    )
    .unwrap();
    let echoes = Arc::new(AtomicU64::new(0));
    let player = Player {
        conn: None,
        next: 0,
        expected: 0,
        ticks: 0,
        buf: vec![0; SIZE],
        echoes: echoes.clone(),
    };
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::new(config(), ClientSecurity::Insecure),
        player,
    )
    .unwrap();

    run_until(&client, &echoes, 512 + WARM_UP);

    // Prove the counter works: this closure allocates on the runtime thread.
    keel_testkit::set_measuring(true);
    let (tx, rx) = mpsc::channel();
    let _ = client.post(move |_, _| tx.send(vec![0u8; 16]).unwrap());
    drop(rx.recv_timeout(Duration::from_secs(5)).expect("the probe"));
    assert!(
        keel_testkit::take_runtime_allocs() >= 1,
        "the counter missed a runtime allocation"
    );
    let from = echoes.load(Ordering::Relaxed);
    run_until(&client, &echoes, from + MEASURED);
    keel_testkit::set_measuring(false);
    let allocs = keel_testkit::runtime_allocs();
    let measured = echoes.load(Ordering::Relaxed) - from;
    assert!(measured >= MEASURED);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations on the runtime thread during {measured} echoes (client and server)"
    );
    client.stop();
    server.stop();
    rt.stop().unwrap();
}
