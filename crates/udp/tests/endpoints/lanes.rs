//! Receive lanes: handlers of one lane never run concurrently, one peer's
//! datagrams arrive in order, and the batched and one-per-call paths give
//! identical results.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use keel_reactor::{IoModel, TimerId};
use keel_udp::{EndpointConfig, Server, ServerConfig, ServerCtx, ServerHandler, Session};

/// Entry/exit flag of one lane: every handler entry point sets it and
/// counts a violation if it was already set.
#[derive(Default)]
struct Exclusive {
    inside: AtomicBool,
    violations: AtomicU64,
    entries: AtomicU64,
}

impl Exclusive {
    fn enter(&self) {
        self.entries.fetch_add(1, Ordering::SeqCst);
        if self.inside.swap(true, Ordering::SeqCst) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn exit(&self) {
        // Give another thread every chance to (wrongly) enter meanwhile.
        std::thread::yield_now();
        self.inside.store(false, Ordering::SeqCst);
    }
}

/// Echoes, checks exclusivity and that each peer's sequence numbers come
/// in order (`seq == last + 1`: the clients never overrun the buffers).
struct Serial {
    flag: Arc<Exclusive>,
    last: HashMap<SocketAddr, u32>,
    out_of_order: Arc<AtomicU64>,
    seen: Arc<Progress>,
}

impl ServerHandler for Serial {
    type SessionState = ();

    fn started(&mut self, ctx: &mut ServerCtx<'_, ()>) {
        let every = Duration::from_micros(500);
        ctx.timer(Instant::now() + every, Some(every));
    }

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        self.flag.enter();
        self.flag.exit();
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        self.flag.enter();
        let seq = u32::from_le_bytes(data[4..8].try_into().unwrap());
        let expected = self.last.get(&s.peer()).map_or(0, |l| l + 1);
        if seq != expected {
            self.out_of_order.fetch_add(1, Ordering::SeqCst);
        }
        self.last.insert(s.peer(), seq);
        s.send(data).unwrap();
        self.flag.exit();
        self.seen.add(1);
    }

    fn timer(&mut self, _: &mut ServerCtx<'_, ()>, _: TimerId) {
        self.flag.enter();
        self.flag.exit();
    }
}

fn serialization(lanes: usize) {
    const SENDERS: usize = 4;
    const PER_SENDER: u32 = 2_000;
    const WINDOW: u32 = 16;
    let rt = runtime(IoModel::Shared { threads: 4 });
    let flags: Vec<Arc<Exclusive>> = (0..lanes).map(|_| Arc::default()).collect();
    let out_of_order = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Progress::default());
    let config = ServerConfig {
        lanes,
        idle_timeout: None,
        ..ServerConfig::default()
    };
    let (f, o, s) = (flags.clone(), out_of_order.clone(), seen.clone());
    let server = Server::bind(rt.handles(), v4(), config, move |lane| Serial {
        flag: f[lane].clone(),
        last: HashMap::new(),
        out_of_order: o.clone(),
        seen: s.clone(),
    })
    .unwrap();
    let addr = server.local_addr();

    let senders: Vec<_> = (0..SENDERS as u32)
        .map(|id| {
            std::thread::spawn(move || {
                let sock = std_client(addr);
                let mut buf = [0u8; 16];
                for start in (0..PER_SENDER).step_by(WINDOW as usize) {
                    for seq in start..start + WINDOW {
                        let mut d = [0u8; 8];
                        d[..4].copy_from_slice(&id.to_le_bytes());
                        d[4..].copy_from_slice(&seq.to_le_bytes());
                        sock.send_to(&d, addr).unwrap();
                    }
                    for seq in start..start + WINDOW {
                        let (n, _) = recv_from(&sock, &mut buf, "an echo");
                        assert_eq!(n, 8);
                        let got = u32::from_le_bytes(buf[4..8].try_into().unwrap());
                        assert_eq!(got, seq, "sender {id}: echoes out of order");
                    }
                }
            })
        })
        .collect();
    // Meanwhile, closures posted from this thread enter the lanes too: a
    // round of them each time the handlers make progress.
    let total = u64::from(PER_SENDER) * SENDERS as u64;
    let mut posted = 0;
    loop {
        let now = seen.get();
        if now >= total {
            break;
        }
        for (lane, flag) in flags.iter().enumerate() {
            let flag = flag.clone();
            assert!(server
                .post(lane, move |_, _| {
                    flag.enter();
                    flag.exit();
                })
                .is_ok());
            posted += 1;
        }
        seen.wait_for(LIMIT, "the echo handlers", |c| c > now);
    }
    for s in senders {
        s.join().expect("sender thread");
    }
    barrier(&server);
    let c = server.counters();
    assert_eq!(
        c.datagrams_in,
        u64::from(PER_SENDER) * SENDERS as u64,
        "{c:?}"
    );
    for (lane, flag) in flags.iter().enumerate() {
        assert_eq!(
            flag.violations.load(Ordering::SeqCst),
            0,
            "lane {lane}: two handlers ran at once"
        );
    }
    let entries: u64 = flags.iter().map(|f| f.entries.load(Ordering::SeqCst)).sum();
    // Datagrams, connects and posted closures at least (timers add more).
    assert!(
        entries >= c.datagrams_in + SENDERS as u64 + posted,
        "{entries} entries"
    );
    assert_eq!(
        out_of_order.load(Ordering::SeqCst),
        0,
        "a peer's datagrams out of order"
    );
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn one_lane_on_four_threads_is_serialized_and_ordered() {
    serialization(1);
}

#[test]
fn four_lanes_on_four_threads_are_each_serialized_and_ordered() {
    serialization(4);
}

/// Records every (peer, bytes) it sees, in order, and echoes.
struct Recorder(Arc<Mutex<Seen>>);

impl ServerHandler for Recorder {
    type SessionState = ();

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        self.0.lock().unwrap().push((s.peer(), data.to_vec()));
        s.send(data).unwrap();
    }
}

type Seen = Vec<(SocketAddr, Vec<u8>)>;

/// Sizes of the burst's datagrams, cycled: small enough that the whole
/// burst fits a default-sized receive buffer (nothing may be dropped).
const SIZES: [usize; 5] = [0, 3, 100, 600, 7];

/// Holds the server's only lane busy while three clients send a burst (so
/// it queues up and the batched path really reads many per call), then
/// returns what the handler saw and what each client got back.
fn burst_through(batch: usize, clients: &[std::net::UdpSocket]) -> (Seen, Vec<Seen>) {
    const BURST: usize = 150;
    let rt = runtime(IoModel::Shared { threads: 1 });
    let log = Arc::new(Mutex::new(Vec::new()));
    let config = ServerConfig {
        idle_timeout: None,
        endpoint: EndpointConfig {
            batch,
            socket: big_buffers(),
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    let l = log.clone();
    let server = Server::bind(rt.handles(), v4(), config, move |_| Recorder(l.clone())).unwrap();
    let addr = server.local_addr();

    let (entered, is_in) = mpsc::channel();
    let (release, go) = mpsc::channel::<()>();
    let _ = server.post(0, move |_, _| {
        entered.send(()).unwrap();
        go.recv_timeout(LIMIT).expect("released");
    });
    recv_within(&is_in, "the lane to be held");
    for i in 0..BURST {
        let c = i % clients.len();
        let data = payload(c, i, SIZES[i % 5]);
        clients[c].send_to(&data, addr).unwrap();
    }
    release.send(()).unwrap();

    let mut buf = vec![0u8; 2048];
    let echoes: Vec<Seen> = clients
        .iter()
        .enumerate()
        .map(|(c, s)| {
            (0..BURST / clients.len())
                .map(|k| {
                    let (n, from) = recv_from(s, &mut buf, &format!("echo {k} to client {c}"));
                    (from, buf[..n].to_vec())
                })
                .collect()
        })
        .collect();
    barrier(&server);
    let c = server.counters();
    assert_eq!(
        (c.datagrams_in, c.datagrams_out),
        (BURST as u64, BURST as u64),
        "{c:?}"
    );
    assert_eq!(c.kernel_drops, 0, "{c:?}");
    server.stop();
    rt.stop().unwrap();
    let seen = log.lock().unwrap().clone();
    // Echoes come from the server's address; compare payloads only.
    for e in &echoes {
        assert!(e.iter().all(|(from, _)| *from == addr));
    }
    let echoes = echoes
        .into_iter()
        .zip(clients)
        .map(|(e, s)| {
            let me = s.local_addr().unwrap();
            e.into_iter().map(|(_, d)| (me, d)).collect()
        })
        .collect();
    (seen, echoes)
}

#[test]
fn batched_and_one_per_call_paths_agree() {
    let clients: Vec<_> = (0..3).map(|_| std_client(v4())).collect();
    let (seen64, echoes64) = burst_through(64, &clients);
    let (seen1, echoes1) = burst_through(1, &clients);
    assert_eq!(seen64.len(), 150);
    // The handler saw the datagrams in the order they were sent.
    for (i, (peer, data)) in seen64.iter().enumerate() {
        let c = i % clients.len();
        assert_eq!(
            *peer,
            clients[c].local_addr().unwrap(),
            "datagram {i}: peer"
        );
        assert!(*data == payload(c, i, SIZES[i % 5]), "datagram {i}");
    }
    assert!(seen64 == seen1, "the handler saw different sequences");
    assert!(echoes64 == echoes1, "the clients got different echoes");
}
