//! `keel-bench relay` through the built binary: the fate of every datagram
//! is the one keel-impair's [`Conditioner`] decides for (seed, direction,
//! index in that direction), and the JSON line counts exactly what went
//! through. The clients and the echo server are plain sockets of the test;
//! every wait is for an event (a datagram, the relay's line), bounded.
//!
//! * Two client flows, interleaved, lossy client->server: the server
//!   receives exactly the datagrams whose index *in the direction* (over
//!   both flows) the conditioner keeps, so per-flow indices would fail
//!   (each flow's in order; the relay batches its sends per flow, so the
//!   two flows' datagrams may interleave differently at the server).
//! * One flow, lossy both ways with duplicates back: the echoes are decided
//!   by stream 1 of the seed, the requests by stream 0, so one stream for
//!   both directions (or unseeded fates) would fail.
//! * A flood of new client addresses past `--max-flows`: the server hears
//!   from exactly that many upstream sockets, every refused datagram is
//!   counted in `flows_refused`, and the flows already open keep working.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_impair::{Conditioner, Impairment, Verdict};
use serde_json::Value;

use common::u;

/// Bound of every wait.
const WAIT: Duration = Duration::from_secs(10);

/// The test's echo server: answers every datagram at once and records the
/// first 8 bytes (the index) of each, in arrival order, and its source.
struct Echo {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<u64>>>,
    sources: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Echo {
    fn start() -> Echo {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sources = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, src2, st2) = (seen.clone(), sources.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !st2.load(Ordering::Acquire) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    src2.lock().unwrap().push(from);
                    s2.lock()
                        .unwrap()
                        .push(u64::from_le_bytes(buf[..8].try_into().unwrap()));
                    sock.send_to(&buf[..n], from).unwrap();
                }
            }
        });
        Echo {
            addr,
            seen,
            sources,
            stop,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<u64> {
        self.seen.lock().unwrap().clone()
    }

    /// The distinct addresses datagrams came from.
    fn distinct_sources(&self) -> usize {
        let mut s = self.sources.lock().unwrap().clone();
        s.sort();
        s.dedup();
        s.len()
    }

    /// Waits until the server has seen `n` datagrams.
    fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + WAIT;
        while self.seen.lock().unwrap().len() < n {
            assert!(
                Instant::now() < deadline,
                "the server saw {} datagrams, expected {n}",
                self.seen.lock().unwrap().len()
            );
            std::thread::yield_now();
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A keel-bench process that says `ready ADDR` on stderr once bound and
/// one JSON line on stdout when SIGTERM ends it (`relay`, `serve`).
struct Ready {
    child: Child,
    addr: SocketAddr,
}

impl Ready {
    /// Starts `keel-bench ARGS` and waits for its `ready ADDR` line.
    fn start<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Ready {
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel-bench"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("expected `ready ADDR` on stderr, got {line:?}"))
            .parse()
            .unwrap();
        Ready { child, addr }
    }

    /// A relay to `upstream` on a free port, with `args` added.
    fn relay(upstream: SocketAddr, args: &[&str]) -> Ready {
        let up = upstream.to_string();
        let mut all = vec!["relay", "--bind", "127.0.0.1:0", "--upstream", &up];
        all.extend_from_slice(args);
        Ready::start(&all)
    }

    /// SIGTERM, then its exit (0) and its one JSON line, which must say it
    /// ended by SIGTERM.
    fn finish(mut self) -> Value {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap())
            .wait_with_output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v = common::json_line(&out);
        assert_eq!(v["ended_by"], "SIGTERM", "{v}");
        v
    }

    /// [`finish`](Self::finish) for a relay: its line says it ran well.
    fn finish_relay(self) -> Value {
        let v = self.finish();
        assert_eq!(v["role"], "relay");
        assert_eq!(v["ok"], true);
        v
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first `n` verdicts of stream `stream` of `spec`.
fn verdicts(spec: &str, stream: u64, n: usize) -> Vec<Verdict> {
    let imp: Impairment = spec.parse().unwrap();
    let mut c = Conditioner::with_stream(&imp, stream);
    (0..n).map(|_| c.decide()).collect()
}

fn datagram(index: u64) -> [u8; 32] {
    let mut d = [0u8; 32];
    d[..8].copy_from_slice(&index.to_le_bytes());
    d
}

#[test]
fn fates_follow_the_index_in_the_direction_over_all_flows() {
    const K: u64 = 400;
    let echo = Echo::start();
    let relay = Ready::relay(echo.addr, &["--impair", "loss=0.2", "--seed", "7"]);
    let clients = [
        UdpSocket::bind("127.0.0.1:0").unwrap(),
        UdpSocket::bind("127.0.0.1:0").unwrap(),
    ];
    let fate = verdicts("loss=0.2,seed=7", 0, K as usize);
    let kept: Vec<u64> = (0..K)
        .filter(|&i| fate[i as usize] != Verdict::Drop)
        .collect();
    // In bursts of 20, each waited for: the server's socket never overflows.
    let mut sent = 0;
    for burst in (0..K).collect::<Vec<_>>().chunks(20) {
        for &i in burst {
            clients[(i % 2) as usize]
                .send_to(&datagram(i), relay.addr)
                .unwrap();
            sent += 1;
        }
        echo.wait_for(kept.iter().filter(|&&i| i < sent).count());
    }
    let v = relay.finish_relay();
    let seen = echo.seen();
    for flow in 0..2 {
        let of = |v: &[u64]| {
            v.iter()
                .copied()
                .filter(|i| i % 2 == flow)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            of(&seen),
            of(&kept),
            "flow {flow}: the datagrams the server got"
        );
    }
    assert_eq!(seen.len(), kept.len());
    assert_eq!(u(&v, "flows"), 2);
    assert_eq!(u(&v, "up_datagrams"), K);
    assert_eq!(u(&v, "up_bytes"), K * 32);
    assert_eq!(u(&v, "up_dropped"), K - kept.len() as u64);
    assert_eq!(u(&v, "up_sent"), kept.len() as u64);
    assert_eq!(u(&v, "down_datagrams"), kept.len() as u64);
    assert_eq!(u(&v, "down_dropped"), 0);
    assert_eq!(u(&v, "down_sent"), kept.len() as u64);
    assert_eq!(u(&v, "held_at_end"), 0);
    assert!(u(&v, "up_dropped") > 40, "loss=0.2 drops about 80 of 400");
}

#[test]
fn each_direction_has_its_own_stream_of_the_seed() {
    const K: u64 = 300;
    let (up_spec, down_spec) = ("loss=0.2", "loss=0.2,dup=0.1");
    let echo = Echo::start();
    let relay = Ready::relay(
        echo.addr,
        &[
            "--impair",
            up_spec,
            "--impair-server",
            down_spec,
            "--seed",
            "11",
        ],
    );
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let up = verdicts(&format!("{up_spec},seed=11"), 0, K as usize);
    let kept: Vec<u64> = (0..K)
        .filter(|&i| up[i as usize] != Verdict::Drop)
        .collect();
    let down = verdicts(&format!("{down_spec},seed=11"), 1, kept.len());
    // Copies of each index the client gets back: the j-th echo's fate is
    // the j-th verdict of the way back.
    let mut expected: BTreeMap<u64, u32> = BTreeMap::new();
    for (j, &i) in kept.iter().enumerate() {
        let copies = match down[j] {
            Verdict::Drop => 0,
            Verdict::Deliver { duplicate, .. } => 1 + u32::from(duplicate.is_some()),
        };
        if copies > 0 {
            expected.insert(i, copies);
        }
    }
    let total: u32 = expected.values().sum();
    let mut got: BTreeMap<u64, u32> = BTreeMap::new();
    let mut received = 0;
    let mut buf = [0u8; 64];
    let mut sent = 0;
    for burst in (0..K).collect::<Vec<_>>().chunks(20) {
        for &i in burst {
            client.send_to(&datagram(i), relay.addr).unwrap();
            sent += 1;
        }
        // Every copy due for this burst, each waited for.
        let due: u32 = expected.range(..sent).map(|(_, c)| c).sum();
        let deadline = Instant::now() + WAIT;
        while received < due {
            assert!(
                Instant::now() < deadline,
                "got {received} echoes of the first {sent}, expected {due}"
            );
            if let Ok(n) = client.recv(&mut buf) {
                assert_eq!(n, 32);
                *got.entry(u64::from_le_bytes(buf[..8].try_into().unwrap()))
                    .or_default() += 1;
                received += 1;
            }
        }
    }
    let v = relay.finish_relay();
    assert_eq!(echo.seen(), kept, "the datagrams the server got");
    assert_eq!(got, expected, "the echoes (and copies) the client got");
    let dropped_down = down.iter().filter(|d| **d == Verdict::Drop).count() as u64;
    let dups = down
        .iter()
        .filter(|d| {
            matches!(
                d,
                Verdict::Deliver {
                    duplicate: Some(_),
                    ..
                }
            )
        })
        .count() as u64;
    assert!(dups > 5 && dropped_down > 20, "{dups} {dropped_down}");
    assert_eq!(u(&v, "flows"), 1);
    assert_eq!(u(&v, "up_datagrams"), K);
    assert_eq!(u(&v, "up_dropped"), K - kept.len() as u64);
    assert_eq!(u(&v, "down_datagrams"), kept.len() as u64);
    assert_eq!(u(&v, "down_bytes"), kept.len() as u64 * 32);
    assert_eq!(u(&v, "down_dropped"), dropped_down);
    assert_eq!(u(&v, "down_duplicated"), dups);
    assert_eq!(u(&v, "down_sent"), u64::from(total));
    assert_eq!(u(&v, "down_sent_bytes"), u64::from(total) * 32);
}

#[test]
fn bad_relay_flags_exit_2_naming_the_flag() {
    for (args, flag) in [
        (vec!["relay", "--bind", "127.0.0.1:0"], "--upstream"),
        (
            vec!["relay", "--upstream", "127.0.0.1:9", "--bind", "x"],
            "--bind",
        ),
        (
            vec![
                "relay",
                "--bind",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--impair",
                "loss=2",
            ],
            "--impair",
        ),
        (
            vec![
                "relay",
                "--bind",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--impair",
                "loss=0.1,seed=3",
                "--seed",
                "4",
            ],
            "--seed",
        ),
        (
            vec![
                "relay",
                "--bind",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--max-flows",
                "0",
            ],
            "--max-flows",
        ),
        (
            vec![
                "relay",
                "--bind",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--clients",
                "3",
            ],
            "--clients",
        ),
    ] {
        let out = common::keel_bench(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = common::stderr(&out);
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(err.contains("usage: keel-bench relay"), "{args:?}: {err}");
    }
}

/// `serve --protocol rudp|kcp` and `--connect`: the run's server and
/// clients as two processes (what the relay's calibration runs), every
/// message echoed, the server's line counting them.
#[test]
fn rudp_and_kcp_serve_and_connect_as_two_processes() {
    for proto in ["rudp", "kcp"] {
        let server = Ready::start(&[
            "serve",
            "--protocol",
            proto,
            "--bind",
            "127.0.0.1:0",
            "--payload",
            "100",
        ]);
        let addr = server.addr.to_string();
        let out = common::keel_bench(&[
            "--protocol",
            proto,
            "--connect",
            &addr,
            "--rate",
            "50",
            "--clients",
            "2",
            "--payload",
            "100",
            "--seconds",
            "0.4",
            "--warmup",
            "0",
            "--format",
            "json",
        ]);
        let v = common::json_line(&out);
        assert_eq!(out.status.code(), Some(0), "{proto}: {v}");
        assert_eq!(v["connect"], addr.as_str(), "{proto}: {v}");
        assert!(u(&v, "messages") > 0, "{proto}: {v}");
        assert_eq!(u(&v, "messages"), u(&v, "messages_sent"), "{proto}: {v}");
        assert!(
            v["messages_delivered"].is_null(),
            "another process's count: {v}"
        );
        let s = server.finish();
        assert_eq!(s["role"], "server", "{s}");
        assert_eq!(
            s["library"],
            if proto == "rudp" { "keel-rudp" } else { "kcp" }
        );
        assert_eq!(s["ended_by"], "SIGTERM");
        assert!(
            u(&s, "messages_echoed") >= u(&v, "messages"),
            "{proto}: {s} {v}"
        );
        assert_eq!(u(&s, "connections"), 2, "{proto}: {s}");
        assert_eq!(u(&s, "invalid_messages"), 0, "{proto}: {s}");
    }
}

/// `--max-flows 8` against 40 new client addresses: exactly 8 upstream
/// sockets reach the server, each refused datagram is counted, and the 8
/// flows still echo after the flood. Without the cap the flood's flows
/// would open (`flows` 48, `flows_refused` 0) and reach the server.
/// The relay's stderr is closed after its `ready` line (the reader is
/// dropped), so its warning about the cap must not panic it (`eprintln!`
/// did: the flows stopped echoing).
#[test]
fn a_flood_of_new_flows_past_max_flows_is_refused_and_counted() {
    const CAP: usize = 8;
    const FLOOD: usize = 40;
    const PER_FLOOD_CLIENT: usize = 5;
    let echo = Echo::start();
    let relay = Ready::relay(echo.addr, &["--max-flows", &CAP.to_string()]);
    let clients: Vec<UdpSocket> = (0..CAP)
        .map(|_| {
            let c = UdpSocket::bind("127.0.0.1:0").unwrap();
            c.set_read_timeout(Some(WAIT)).unwrap();
            c
        })
        .collect();
    let mut buf = [0u8; 64];
    // Each open flow: one datagram there and back.
    let round = |base: u64, buf: &mut [u8]| {
        for (k, c) in clients.iter().enumerate() {
            c.send_to(&datagram(base + k as u64), relay.addr).unwrap();
        }
        for (k, c) in clients.iter().enumerate() {
            let n = c.recv(buf).expect("an open flow's echo");
            assert_eq!(n, 32);
            assert_eq!(buf[..8], (base + k as u64).to_le_bytes());
        }
    };
    round(0, &mut buf);
    let flood: Vec<UdpSocket> = (0..FLOOD)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for j in 0..PER_FLOOD_CLIENT {
        for (k, c) in flood.iter().enumerate() {
            c.send_to(&datagram(1000 + (j * FLOOD + k) as u64), relay.addr)
                .unwrap();
        }
    }
    // Sent after the flood on the same socket of the relay: their echoes
    // mean the relay has read (and refused) every flood datagram.
    round(100, &mut buf);
    let v = relay.finish_relay();
    assert_eq!(u(&v, "flows"), CAP as u64);
    assert_eq!(u(&v, "flows_refused"), (FLOOD * PER_FLOOD_CLIENT) as u64);
    assert_eq!(u(&v, "flows_failed"), 0);
    assert_eq!(u(&v, "up_datagrams"), 2 * CAP as u64);
    assert_eq!(u(&v, "down_sent"), 2 * CAP as u64);
    assert_eq!(
        echo.distinct_sources(),
        CAP,
        "upstream sockets the server heard"
    );
    let mut seen = echo.seen();
    seen.sort();
    let expected: Vec<u64> = (0..CAP as u64).chain(100..100 + CAP as u64).collect();
    assert_eq!(seen, expected, "only the open flows reached the server");
    for c in &flood {
        c.set_nonblocking(true).unwrap();
        assert!(c.recv(&mut buf).is_err(), "a refused flow got an answer");
    }
}
