//! `keel-bench serve` as a process: its session table against one-off
//! peers (idle timeout, table bound, full policy) and floods of spoofed
//! sources, garbage or valid (no session for garbage; the least recently
//! active session evicted by default, so a real peer is always served), and
//! a summary whose counters are final (read after the server stopped, equal
//! to the kernel's own count of drops on its socket, never passed off as
//! final when the server could not stop in time) and account for every
//! datagram received.
//!
//! Every wait is bounded: socket read timeouts for echoes, a channel with a
//! timeout for the child's exit.

use std::io::{BufRead, BufReader, ErrorKind};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel_bench::message::{encode, Phase};
use serde_json::Value;

use crate::common::{u, BIN};

/// A running `keel-bench serve` on 127.0.0.1 (port picked by the kernel).
struct Serve {
    child: Option<Child>,
    addr: SocketAddr,
    /// Kept open, so that the server never writes to a closed pipe.
    _stderr: BufReader<ChildStderr>,
}

impl Serve {
    /// Starts `serve --bind 127.0.0.1:0 ARGS` and waits until it says it
    /// listens (the line names the real address).
    fn start(args: &[&str]) -> Serve {
        let mut child = Command::new(BIN)
            .args(["serve", "--bind", "127.0.0.1:0", "--seconds", "60"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn keel-bench serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let addr = line
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no listening address in {line:?}"));
        Serve {
            child: Some(child),
            addr,
            _stderr: stderr,
        }
    }

    fn pid(&self) -> String {
        self.child.as_ref().unwrap().id().to_string()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig}");
    }

    /// Waits, at most 5 s, until every thread of the server is stopped
    /// (state `T` in `/proc/PID/task/*/stat`): `kill -STOP` returns before
    /// the threads on other cores have stopped.
    fn wait_stopped(&self) {
        let tasks = format!("/proc/{}/task", self.pid());
        let all_stopped = || {
            std::fs::read_dir(&tasks).unwrap().all(|t| {
                let stat =
                    std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
                // The state follows the parenthesised command name.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !all_stopped() {
            assert!(Instant::now() < deadline, "serve did not stop on SIGSTOP");
            std::thread::yield_now();
        }
    }

    /// Waits at most `limit` for the server to exit (after a signal sent
    /// with [`Serve::signal`]); returns its exit code and summary line.
    fn finish(mut self, limit: Duration) -> (Option<i32>, Value) {
        let child = self.child.take().unwrap();
        let pid = child.id().to_string();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out: Output = match rx.recv_timeout(limit) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                panic!("serve did not exit within {limit:?} of being stopped");
            }
        };
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "one summary line: {stdout:?}");
        let summary = serde_json::from_str(stdout.trim_end()).expect("a JSON summary");
        (out.status.code(), summary)
    }

    /// SIGTERM, then [`Serve::finish`].
    fn stop(self) -> (Option<i32>, Value) {
        self.signal("TERM");
        self.finish(Duration::from_secs(10))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A keel-bench message of `len` bytes (the server echoes valid ones).
fn message(len: usize, client: u32, seq: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    encode(&mut buf, Phase::Measured, client, seq);
    buf
}

/// A peer with its own source address (a fresh port).
fn peer() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// Sends one message from `sock` and waits at most `wait` for its echo.
fn echoed(sock: &UdpSocket, to: SocketAddr, seq: u64, wait: Duration) -> bool {
    let msg = message(64, 7, seq);
    sock.send_to(&msg, to).unwrap();
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 128];
    let deadline = Instant::now() + wait;
    loop {
        match sock.recv(&mut buf) {
            // Echoes of earlier probes may still come in; wait for this one.
            Ok(n) if buf[..n] == msg[..] => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(e) => panic!("recv: {e}"),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        sock.set_read_timeout(Some(left)).unwrap();
    }
}

/// Resends from `sock` every `every` until an echo comes back, for at most
/// `limit`; returns when it came back (None: never).
fn echoed_within(
    sock: &UdpSocket,
    to: SocketAddr,
    every: Duration,
    limit: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    let mut seq = 1000;
    while start.elapsed() < limit {
        seq += 1;
        if echoed(sock, to, seq, every) {
            return Some(Instant::now());
        }
    }
    None
}

#[test]
fn idle_sessions_time_out_so_one_off_peers_cannot_lock_new_peers_out() {
    // Eviction off: a full table refuses new peers until a session ends.
    let serve = Serve::start(&[
        "--max-sessions",
        "4",
        "--idle-timeout",
        "0.5",
        "--full-policy",
        "refuse",
    ]);
    let to = serve.addr;
    // Four one-off peers take every session...
    let one_off: Vec<UdpSocket> = (0..4).map(|_| peer()).collect();
    for s in &one_off {
        assert!(
            echoed_within(s, to, Duration::from_millis(200), Duration::from_secs(5)).is_some(),
            "a peer of an empty table is served"
        );
    }
    // ...and are fresh (each echo means the server just saw the peer), so a
    // fifth peer right after is refused: no session, no echo.
    for (i, s) in one_off.iter().enumerate() {
        assert!(
            echoed(s, to, i as u64, Duration::from_secs(2)),
            "refresh {i}"
        );
    }
    let last_seen = Instant::now();
    let newcomer = peer();
    assert!(
        !echoed(&newcomer, to, 1, Duration::from_millis(150)),
        "a table of 4 fresh sessions refuses a fifth peer"
    );
    // The four go silent; once their sessions time out the newcomer is served.
    let served = echoed_within(
        &newcomer,
        to,
        Duration::from_millis(100),
        Duration::from_secs(5),
    )
    .expect("the newcomer is served once the idle sessions time out");
    let waited = served.duration_since(last_seen);
    assert!(
        waited >= Duration::from_millis(400),
        "served after {waited:?}, before the 0.5 s idle timeout could end a session"
    );
    let (code, v) = serve.stop();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["idle_timeout_seconds"], 0.5, "{v}");
    assert_eq!(v["max_sessions"], 4, "{v}");
    assert_eq!(v["full_policy"], "refuse", "{v}");
    assert!(u(&v, "sessions_refused") >= 1, "{v}");
    // The newcomer got the slot of the first session that timed out (the
    // other three may time out a sweep later, after SIGTERM).
    assert!(u(&v, "sessions_timed_out") >= 1, "{v}");
    assert!(u(&v, "sessions_opened") >= 5, "{v}");
    assert_eq!(v["sessions_evicted"], 0, "{v}");
}

#[test]
fn evict_idlest_admits_a_new_peer_at_once_and_defaults_are_reported() {
    // evict-idlest is the default.
    let serve = Serve::start(&["--max-sessions", "4"]);
    let to = serve.addr;
    let one_off: Vec<UdpSocket> = (0..4).map(|_| peer()).collect();
    for s in &one_off {
        assert!(echoed_within(s, to, Duration::from_millis(200), Duration::from_secs(5)).is_some());
    }
    let newcomer = peer();
    assert!(
        echoed_within(
            &newcomer,
            to,
            Duration::from_millis(200),
            Duration::from_secs(5)
        )
        .is_some(),
        "a full table evicts its idlest session for the newcomer"
    );
    let (code, v) = serve.stop();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["full_policy"], "evict-idlest", "{v}");
    assert_eq!(v["sessions_evicted"], 1, "{v}");
    assert_eq!(v["sessions_refused"], 0, "{v}");
    assert_eq!(v["sessions_opened"], 5, "{v}");
    // The default idle timeout is on (30 s), so this short run timed none out.
    assert_eq!(v["idle_timeout_seconds"], 30.0, "{v}");
    assert_eq!(v["sessions_timed_out"], 0, "{v}");
}

/// The kernel's drop counter of the UDP socket bound to `addr`, from
/// `/proc/net/udp` (last column).
fn proc_net_udp_drops(addr: SocketAddr) -> u64 {
    let SocketAddr::V4(v4) = addr else {
        panic!("ipv4 only")
    };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let line = table
        .lines()
        .skip(1)
        .find(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
        .unwrap_or_else(|| panic!("no socket {local} in /proc/net/udp"));
    line.split_whitespace().last().unwrap().parse().unwrap()
}

#[test]
fn summary_kernel_drops_equal_the_kernels_count_for_the_socket() {
    // --idle-timeout off: no periodic sweep counts the drops early, so only
    // reading the counters after the server stopped gets them all.
    let serve = Serve::start(&["--udp-server-receive-buffer", "1", "--idle-timeout", "off"]);
    // Stopped, the server reads nothing: the smallest receive buffer fills
    // with the first datagrams and the kernel drops the rest. No datagram
    // queued after those drops will report them to the server.
    serve.signal("STOP");
    serve.wait_stopped();
    let flood = peer();
    for seq in 0..300 {
        flood.send_to(&message(1024, 1, seq), serve.addr).unwrap();
    }
    let kernel = proc_net_udp_drops(serve.addr);
    assert!(
        kernel >= 250,
        "the flood overflowed the buffer: {kernel} drops"
    );
    // SIGTERM waits while the process is stopped and ends it once resumed.
    serve.signal("TERM");
    serve.signal("CONT");
    let (code, v) = serve.finish(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(u(&v, "kernel_rcvbuf_drops"), kernel, "{v}");
    assert_eq!(u(&v, "datagrams_in") + kernel, 300, "{v}");
}

#[test]
fn a_server_that_cannot_stop_in_time_does_not_claim_final_counters() {
    // 10M rounds of work per echo and a backlog of 500 datagrams keep the
    // lane busy for seconds (even in a release build): it cannot stop
    // within serve's 2 s.
    let serve = Serve::start(&["--work", "10000000"]);
    let flood = peer();
    for seq in 0..500 {
        flood.send_to(&message(16, 1, seq), serve.addr).unwrap();
    }
    let asked = Instant::now();
    serve.signal("TERM");
    let (code, v) = serve.finish(Duration::from_secs(10));
    let took = asked.elapsed();
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("did not stop within 2 s") && error.contains("not final"),
        "{error}"
    );
    assert!(
        took < Duration::from_secs(6),
        "ended {took:?} after SIGTERM"
    );
}

/// Every datagram `serve` received is in exactly one summary counter.
#[track_caller]
fn assert_every_datagram_counted(v: &Value) {
    let parts = [
        "answered",
        "unanswered_warmup",
        "unanswered_no_reply",
        "invalid_messages",
        "sessions_refused",
        "truncated",
        "recv_discarded",
    ];
    let sum: u64 = parts.iter().map(|k| u(v, k)).sum();
    assert_eq!(u(v, "datagrams_in"), sum, "datagrams_in = {parts:?}: {v}");
}

/// Issue 19, point 6: a datagram that fails the check opens no session.
/// With eviction off and a table of 8, garbage (7 bytes each) from 64
/// sources used to open 8 sessions and lock every later peer out for the
/// idle timeout; now it is counted (invalid, rejected) and costs no slot.
#[test]
fn garbage_from_many_sources_opens_no_session_so_a_real_peer_is_served() {
    const SOURCES: u64 = 64;
    let serve = Serve::start(&["--max-sessions", "8", "--full-policy", "refuse"]);
    let garbage: Vec<UdpSocket> = (0..SOURCES).map(|_| peer()).collect();
    for s in &garbage {
        for _ in 0..2 {
            s.send_to(b"garbage", serve.addr).unwrap();
        }
    }
    // One lane handles datagrams in arrival order: when the real peer's
    // echo comes, the garbage before it has been handled.
    let real = peer();
    assert!(
        echoed(&real, serve.addr, 1, Duration::from_secs(5)),
        "the real peer is served after the garbage flood"
    );
    let (code, v) = serve.stop();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["full_policy"], "refuse", "{v}");
    assert_eq!(u(&v, "sessions_opened"), 1, "only the real peer: {v}");
    assert_eq!(u(&v, "sessions_rejected"), 2 * SOURCES, "{v}");
    assert_eq!(u(&v, "invalid_messages"), 2 * SOURCES, "{v}");
    assert_eq!(u(&v, "sessions_refused"), 0, "{v}");
    assert_eq!(u(&v, "answered"), 1, "{v}");
    assert_every_datagram_counted(&v);
}

/// Issue 19, point 6: valid messages from many one-off (spoofed) sources
/// fill the table, and by default a new one evicts the least recently
/// active session: the flood evicts its own, a real peer that keeps
/// talking keeps its session (it is never evicted: every session opened is
/// one source's), and a newcomer after the flood is served at once (with
/// eviction off, as before, it got nothing for the idle timeout).
#[test]
fn a_flood_of_valid_one_off_sources_cannot_lock_a_real_peer_out() {
    const TABLE: usize = 16;
    const SOURCES: usize = 8 * TABLE;
    let serve = Serve::start(&["--max-sessions", &TABLE.to_string()]);
    let to = serve.addr;
    let real = peer();
    assert!(echoed(&real, to, 0, Duration::from_secs(5)));
    let flood: Vec<UdpSocket> = (0..SOURCES).map(|_| peer()).collect();
    for (round, burst) in flood.chunks(TABLE / 2).enumerate() {
        for (i, s) in burst.iter().enumerate() {
            s.send_to(&message(64, 1000 + i as u32, 0), to).unwrap();
        }
        assert!(
            echoed(&real, to, round as u64 + 1, Duration::from_secs(5)),
            "the real peer is served after burst {round}"
        );
    }
    let newcomer = peer();
    assert!(
        echoed(&newcomer, to, 0, Duration::from_secs(5)),
        "a newcomer after the flood is served at once"
    );
    let (code, v) = serve.stop();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["full_policy"], "evict-idlest", "{v}");
    assert_eq!(u(&v, "sessions_refused"), 0, "{v}");
    // The real peer, the flood and the newcomer, each opened once.
    assert_eq!(u(&v, "sessions_opened"), SOURCES as u64 + 2, "{v}");
    assert_eq!(
        u(&v, "sessions_evicted"),
        SOURCES as u64 + 2 - TABLE as u64,
        "{v}"
    );
    assert_every_datagram_counted(&v);
}

/// A sockperf message: u64 sequence, u16 flags, u32 length (the whole
/// datagram), network order, then `len - 14` bytes.
fn sockperf(seq: u64, flags: u16, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    m[..8].copy_from_slice(&seq.to_be_bytes());
    m[8..10].copy_from_slice(&flags.to_be_bytes());
    m[10..14].copy_from_slice(&(len as u32).to_be_bytes());
    m
}

/// Issue 19, point 6: in `--sockperf` mode the datagrams it deliberately
/// does not answer (warm-up, no pong request) have their own counters, so
/// `datagrams_in = answered + unanswered_warmup + unanswered_no_reply +
/// invalid_messages + ...` holds.
#[test]
fn sockperf_mode_counts_what_it_leaves_unanswered_by_design() {
    const CLIENT: u16 = 1;
    const PONG: u16 = 2;
    const WARMUP: u16 = 4;
    let serve = Serve::start(&["--sockperf"]);
    let to = serve.addr;
    // A peer whose first message is a warm-up one: valid, so it opens a
    // session, and is not answered.
    let a = peer();
    a.send_to(&sockperf(0, CLIENT | PONG | WARMUP, 64), to)
        .unwrap();
    for seq in 1..=2 {
        a.send_to(&sockperf(seq, CLIENT | WARMUP, 64), to).unwrap();
    }
    for seq in 3..=4 {
        a.send_to(&sockperf(seq, CLIENT, 64), to).unwrap(); // no pong request
    }
    a.send_to(b"garbage", to).unwrap();
    a.send_to(&sockperf(5, PONG, 64), to).unwrap(); // client bit clear
                                                    // A source with nothing but garbage: no session.
    let b = peer();
    for _ in 0..3 {
        b.send_to(&sockperf(9, CLIENT | PONG, 63)[..62], to)
            .unwrap();
    }
    // Five pings; the echo of the last says (one lane, in order) that
    // everything before it was handled.
    let mut buf = [0u8; 128];
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for seq in 10..15 {
        a.send_to(&sockperf(seq, CLIENT | PONG, 64), to).unwrap();
        let n = a.recv(&mut buf).expect("a reply to each ping");
        let want = sockperf(seq, PONG, 64);
        assert_eq!(&buf[..n], &want[..], "reply {seq}: the client bit cleared");
    }
    let (code, v) = serve.stop();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["mode"], "sockperf", "{v}");
    assert_eq!(u(&v, "answered"), 5, "{v}");
    assert_eq!(u(&v, "unanswered_warmup"), 3, "{v}");
    assert_eq!(u(&v, "unanswered_no_reply"), 2, "{v}");
    assert_eq!(u(&v, "invalid_messages"), 5, "{v}");
    assert_eq!(u(&v, "sessions_rejected"), 3, "{v}");
    assert_eq!(u(&v, "sessions_opened"), 1, "{v}");
    assert_eq!(u(&v, "datagrams_in"), 15, "{v}");
    assert_every_datagram_counted(&v);
}
