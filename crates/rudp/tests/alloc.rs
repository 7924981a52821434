//! The steady state of a keel-rudp server allocates nothing: a counting
//! global allocator counts allocations made on the runtime's thread while
//! a client does 3,000 reliable echoes (after a warm-up of 6,000 and
//! 600 ms, with a burst, so queues and arenas are at their high-water
//! marks), with pauses in which only the server's timer makes it send
//! (its keepalive is 10 ms, the client's 1 s). The only test in this
//! binary, so no other test's allocations interfere.

mod common;

use std::net::UdpSocket;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use keel_reactor::{IoModel, Runtime};
use keel_rudp::{ConnectionHandle, Ctx, Handler, Server, ServerConfig};
use keel_rudp_proto::{Connection, Event};
use keel_testkit::CountingAllocator;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Echoes every message on its channel.
struct Echo;

impl Handler for Echo {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        ctx.send(conn, channel, data).expect("echo");
    }
}

/// A client on the sans-IO core over a blocking std socket (its
/// allocations are on this thread, not counted).
struct RawClient {
    conn: Connection,
    socket: UdpSocket,
    buf: Vec<u8>,
}

impl RawClient {
    fn flush(&mut self) {
        let now = Instant::now();
        for _ in 0..100 {
            let Some(n) = self.conn.poll_transmit(now, &mut self.buf) else {
                return;
            };
            self.socket.send(&self.buf[..n]).unwrap();
        }
    }

    /// Reads (or times out) until an event, running timers: bounded.
    fn next_event(&mut self, what: &str) -> Event {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(e) = self.conn.poll_event() {
                return e;
            }
            assert!(Instant::now() < deadline, "no {what} within 5 s");
            self.flush();
            let wait = self
                .conn
                .poll_timeout()
                .map_or(Duration::from_millis(5), |t| {
                    t.saturating_duration_since(Instant::now())
                })
                .clamp(Duration::from_micros(100), Duration::from_millis(5));
            self.socket.set_read_timeout(Some(wait)).unwrap();
            if let Ok(n) = self.socket.recv(&mut self.buf) {
                self.conn.handle_datagram(Instant::now(), &self.buf[..n]);
            }
            if self
                .conn
                .poll_timeout()
                .is_some_and(|t| t <= Instant::now())
            {
                self.conn.handle_timeout(Instant::now());
            }
        }
    }

    /// Says nothing for `d`, reading what arrives; returns how many
    /// packets the server sent meanwhile.
    fn pause(&mut self, d: Duration) -> u64 {
        let before = self.conn.packets_received();
        let end = Instant::now() + d;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            self.socket
                .set_read_timeout(Some(left.max(Duration::from_micros(100))))
                .unwrap();
            if let Ok(n) = self.socket.recv(&mut self.buf) {
                self.conn.handle_datagram(Instant::now(), &self.buf[..n]);
            }
        }
        self.conn.packets_received() - before
    }

    /// `n` messages at once, then their echoes: rounds larger than any of
    /// the measurement, so keel-udp's send arena has grown to its size.
    fn burst(&mut self, n: u32) {
        for i in 0..n {
            self.conn.send(UNORDERED, &payload(i, 600)).unwrap();
        }
        self.flush();
        for _ in 0..n {
            match self.next_event("burst echo") {
                Event::Message { data, .. } => self.conn.recycle(data),
                other => panic!("{other:?}"),
            }
        }
    }

    fn echo(&mut self, i: u32) {
        let data = payload(i, 64);
        self.conn.send(ORDERED, &data).unwrap();
        self.flush();
        match self.next_event("echo") {
            Event::Message { channel, data: got } => {
                assert_eq!((channel, &got[..]), (ORDERED, &data[..]));
                self.conn.recycle(got);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn steady_state_reliable_echo_allocates_nothing_on_the_runtime_thread() {
    const WARM_UP: u32 = 6_000;
    const MEASURED: u32 = 3_000;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let (tx, rx) = mpsc::channel();
    let _ = rt.handle().post(move || {
        keel_testkit::mark_runtime_thread();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("runtime thread marked");

    // The server's keepalive timer fires in the client's pauses.
    let mut server_cfg = config();
    server_cfg.keepalive_interval = Duration::from_millis(10);
    let mut cfg = config();
    cfg.keepalive_interval = Duration::from_secs(1);
    let server = Server::bind(
        rt.handles(),
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::new(server_cfg, keel_rudp::ServerSecurity::Insecure),
        |_| Echo,
    )
    .unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(server.local_addr()).unwrap();
    let mut c = RawClient {
        conn: Connection::connect(
            cfg,
            keel_rudp::ClientSecurity::Insecure,
            [3; 16],
            Instant::now(),
        )
        .unwrap(),
        socket,
        buf: vec![0; 1500],
    };
    assert_eq!(c.next_event("connected"), Event::Connected);
    c.burst(40);
    let start = Instant::now();
    let mut i = 0;
    while i < WARM_UP || start.elapsed() < Duration::from_millis(600) {
        c.echo(i);
        i += 1;
        if i % 500 == 0 {
            c.pause(Duration::from_millis(35));
        }
    }

    // Prove the counter works: this closure allocates on the runtime thread.
    keel_testkit::set_measuring(true);
    let (tx, rx) = mpsc::channel();
    let _ = server.post(0, move |_, _| tx.send(vec![0u8; 16]).unwrap());
    drop(rx.recv_timeout(Duration::from_secs(5)).expect("the probe"));
    assert!(
        keel_testkit::take_runtime_allocs() >= 1,
        "the counter missed a runtime allocation"
    );
    let before = server.udp_counters();
    let mut from_timer = 0;
    for k in 0..MEASURED {
        c.echo(i + k);
        if k % 1000 == 999 {
            from_timer += c.pause(Duration::from_millis(35));
        }
    }
    keel_testkit::set_measuring(false);
    let allocs = keel_testkit::runtime_allocs();
    let after = server.udp_counters();
    assert!(after.datagrams_in - before.datagrams_in >= u64::from(MEASURED));
    assert!(
        from_timer >= 3,
        "the server's timer sent {from_timer} packets in the pauses"
    );
    assert_eq!(
        allocs, 0,
        "{allocs} allocations on the runtime thread during {MEASURED} reliable echoes"
    );
    server.stop();
    rt.stop().unwrap();
}
