//! Helpers of keel-udp's integration tests: blocking std clients with
//! bounded waits, lane barriers, handlers that echo or record events, and
//! re-running a test in its own network namespace. The waits (a progress
//! counter, channel receives) are keel-testkit's, shared with the other
//! crates' tests.
#![allow(dead_code, unused_imports)]

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_udp::{
    DisconnectReason, Server, ServerConfig, ServerCtx, ServerHandler, Session, SocketOptions,
};

/// The bounded waits shared with the other crates' tests: [`LIMIT`] bounds
/// every wait here.
pub use keel_testkit::{recv_within, Progress, LIMIT};

/// The loopback address of `addr`'s family, port 0.
pub fn loopback_like(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
    }
}

pub fn v4() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

pub fn v6() -> SocketAddr {
    SocketAddr::from((Ipv6Addr::LOCALHOST, 0))
}

/// A blocking std socket on loopback (family of `peer`) whose receives give
/// up after [`LIMIT`], with 4 MiB buffers requested (the kernel caps them
/// at `rmem_max`/`wmem_max`).
pub fn std_client(peer: SocketAddr) -> UdpSocket {
    let local = loopback_like(peer);
    let s = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    s.set_recv_buffer_size(4 << 20).unwrap();
    s.set_send_buffer_size(4 << 20).unwrap();
    s.bind(&local.into()).unwrap();
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s
}

/// Receives one datagram or panics (after [`LIMIT`]) naming `what`.
pub fn recv_from(s: &UdpSocket, buf: &mut [u8], what: &str) -> (usize, SocketAddr) {
    match s.recv_from(buf) {
        Ok(r) => r,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            panic!("timed out after {LIMIT:?} waiting for {what}")
        }
        Err(e) => panic!("receiving {what}: {e}"),
    }
}

/// A port on `family`'s loopback that nobody listens on (bound, then
/// released).
pub fn closed_port(family: SocketAddr) -> SocketAddr {
    let s = UdpSocket::bind(loopback_like(family)).unwrap();
    s.local_addr().unwrap()
}

/// Socket options with 4 MiB buffers requested (capped by the kernel).
pub fn big_buffers() -> SocketOptions {
    SocketOptions {
        send_buffer: Some(4 << 20),
        recv_buffer: Some(4 << 20),
        ..SocketOptions::default()
    }
}

/// Runs a closure on every lane of `server` and waits until each has run:
/// everything a lane did before (counters included) is visible afterwards.
pub fn barrier<H: ServerHandler>(server: &Server<H>) {
    for lane in 0..server.lanes() {
        let (tx, rx) = mpsc::channel();
        assert!(
            server.post(lane, move |_, _| tx.send(()).unwrap()).is_ok(),
            "lane {lane} is closed"
        );
        recv_within(&rx, &format!("a closure on lane {lane}"));
    }
}

/// The server's counters read on its (single) lane between two rounds, so
/// no batch is half counted: `datagrams_in` is bumped when a batch is read,
/// the per-datagram counters while it is handled.
pub fn settled_counters<H: ServerHandler>(server: &Server<H>) -> keel_udp::CounterSnapshot {
    assert_eq!(server.lanes(), 1, "settled_counters reads one lane");
    let (tx, rx) = mpsc::channel();
    let s = server.clone();
    assert!(
        server
            .post(0, move |_, _| tx.send(s.counters()).unwrap())
            .is_ok(),
        "lane 0 is closed"
    );
    recv_within(&rx, "the counters from lane 0")
}

/// The runtime models the echo tests run on.
pub fn models() -> [IoModel; 3] {
    [
        IoModel::Shared { threads: 1 },
        IoModel::Shared { threads: 4 },
        IoModel::Sharded { reactors: 4 },
    ]
}

pub fn runtime(model: IoModel) -> Runtime {
    Runtime::new(model).unwrap()
}

/// A payload of `len` bytes that differs per `(client, seq)`, over every
/// byte value (binary, not text).
pub fn payload(client: usize, seq: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (client * 131 + seq * 31 + j * 7) as u8)
        .collect()
}

/// An echo handler: sends every datagram back to its peer and counts it.
pub struct Echo {
    pub seen: Arc<Progress>,
}

impl ServerHandler for Echo {
    type SessionState = ();

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        s.send(data).expect("echo send");
        self.seen.add(1);
    }
}

/// Starts an echo server on `rt` at `addr` with `config`.
pub fn echo_server(
    rt: &Runtime,
    addr: SocketAddr,
    config: ServerConfig,
) -> (Server<Echo>, Arc<Progress>) {
    let seen = Arc::new(Progress::default());
    let s = seen.clone();
    let server = Server::bind(rt.handles(), addr, config, move |_| Echo {
        seen: s.clone(),
    })
    .expect("bind echo server");
    (server, seen)
}

/// What a recording handler saw, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Connect(SocketAddr),
    Datagram(SocketAddr, Vec<u8>),
    Disconnect(SocketAddr, DisconnectReason),
}

/// A shared, ordered event log that test threads can await.
#[derive(Default)]
pub struct Log {
    events: Mutex<Vec<Event>>,
    pub progress: Progress,
}

impl Log {
    pub fn push(&self, e: Event) {
        self.events.lock().unwrap().push(e);
        self.progress.add(1);
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the events so far; returns them.
    pub fn wait(&self, what: &str, pred: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        let deadline = Instant::now() + LIMIT;
        loop {
            let seen = self.progress.get();
            {
                let ev = self.events.lock().unwrap();
                if pred(&ev) {
                    return ev.clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.progress.wait_quietly(left, |c| c > seen) {
                panic!(
                    "timed out after {LIMIT:?} waiting for {what}; events: {:?}",
                    self.events()
                );
            }
        }
    }
}

/// Environment variable that marks a test process re-run inside its own
/// network namespace by [`in_netns`].
pub const NETNS_CHILD_ENV: &str = "KEEL_UDP_NETNS_CHILD";
/// Printed by a namespace child that cannot set up its namespace.
pub const NETNS_SKIP: &str = "KEEL-NETNS-SKIP:";

/// Runs test `name` of module `module` (the caller's `module_path!()`) of
/// the current test binary again inside a private
/// user + network namespace (`unshare -rn`, so nothing on the host changes
/// and the namespace disappears with the process), after running `setup`
/// there (commands such as `ip link set lo up`).
///
/// Returns true when the caller is that child and should run the test
/// body; false in the parent, which has checked the child's outcome (or
/// printed why it skipped: no `unshare`, no user namespaces, a setup
/// command failed). `KEEL_REQUIRE_NETNS=1` makes a skip a failure.
pub fn in_netns(module: &str, name: &str, setup: &[&[&str]]) -> bool {
    use std::process::Command;
    // The test's path as libtest names it: the module path without the
    // crate (the binary) in front, e.g. `drops::kernel_drops::NAME` gives
    // `kernel_drops::NAME`, a lone `kernel_drops::NAME` gives `NAME`.
    let path = match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_owned(),
    };
    let skip = |why: &str| {
        assert!(
            std::env::var_os("KEEL_REQUIRE_NETNS").is_none(),
            "{name}: network namespace required but unavailable: {why}"
        );
        eprintln!("SKIPPED {name}: {why}");
    };
    if std::env::var_os(NETNS_CHILD_ENV).is_some() {
        for step in setup {
            match Command::new(step[0]).args(&step[1..]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => {
                    println!(
                        "{NETNS_SKIP} `{}` failed: {}",
                        step.join(" "),
                        String::from_utf8_lossy(&o.stderr).trim()
                    );
                    return false;
                }
                Err(e) => {
                    println!("{NETNS_SKIP} cannot run `{}`: {e}", step.join(" "));
                    return false;
                }
            }
        }
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = match Command::new("unshare")
        .args(["-rn", "--"])
        .arg(&exe)
        .args(["--exact", &path, "--nocapture", "--test-threads=1"])
        .env(NETNS_CHILD_ENV, "1")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("cannot run unshare: {e}"));
            return false;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Some(line) = stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.contains(NETNS_SKIP))
    {
        skip(line);
        return false;
    }
    if !out.status.success() && !stdout.contains("running 1 test") {
        skip(&format!("unshare -rn failed: {}", stderr.trim()));
        return false;
    }
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} failed in its network namespace:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    false
}
