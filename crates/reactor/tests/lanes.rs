//! Lane guarantees under load: exclusivity, no lost wakeups, stale tokens,
//! budget yields.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{udp, Progress};
use keel_reactor::{
    Flow, Interest, IoModel, Lane, LaneCtx, Reactor, Ready, Runtime, RuntimeOptions, SourceId,
};
use mio::net::UdpSocket;

const LIMIT: Duration = Duration::from_secs(30);

/// A lane owning many sockets; records every datagram (sender, seq) and
/// checks on entry that no other thread is inside.
struct Flooded {
    sockets: Vec<(SourceId, UdpSocket)>,
    inside: Arc<AtomicBool>,
    violations: Arc<AtomicU64>,
    seen: HashSet<(u32, u32)>,
    duplicates: u64,
    posts: u64,
    progress: Arc<Progress>,
}

impl Flooded {
    fn enter(&self) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn exit(&self) {
        self.inside.store(false, Ordering::SeqCst);
    }
}

impl Lane for Flooded {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, id: SourceId, _r: Ready) -> Flow {
        self.enter();
        let mut buf = [0u8; 64];
        let mut n = 0;
        let sock = &self
            .sockets
            .iter()
            .find(|(s, _)| *s == id)
            .expect("own source")
            .1;
        while let Ok(len) = sock.recv(&mut buf) {
            assert_eq!(len, 8);
            let sender = u32::from_be_bytes(buf[0..4].try_into().unwrap());
            let seq = u32::from_be_bytes(buf[4..8].try_into().unwrap());
            if !self.seen.insert((sender, seq)) {
                self.duplicates += 1;
            }
            n += 1;
        }
        // Give another thread every chance to (wrongly) enter.
        std::thread::yield_now();
        self.exit();
        self.progress.add(n);
        Flow::Drained
    }
}

/// Every thread of the runtime awake and competing for lanes, whatever the
/// machine's CPU count, so the guarantees are tested under real contention.
fn all_awake(model: IoModel) -> Runtime {
    let options = RuntimeOptions {
        awake_threads: Some(model.threads()),
    };
    Runtime::with_options(model, options).unwrap()
}

fn exclusivity(model: IoModel) {
    const SOCKETS: usize = 8;
    const SENDERS: u32 = 4;
    const PER_SENDER: u32 = 5_000;
    const POSTS_PER_SENDER: u64 = 2_000;
    const WINDOW: u64 = 256;

    let rt = all_awake(model);
    let inside = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Progress::default());
    let mut addrs: Vec<SocketAddr> = Vec::new();
    let mut sockets = Vec::new();
    for _ in 0..SOCKETS {
        let (s, a) = udp();
        sockets.push(s);
        addrs.push(a);
    }
    let state = Flooded {
        sockets: Vec::new(),
        inside: inside.clone(),
        violations: violations.clone(),
        seen: HashSet::new(),
        duplicates: 0,
        posts: 0,
        progress: progress.clone(),
    };
    let (lane, ()) = rt.add_lane_with(state, move |st, cx| {
        for mut s in sockets {
            let id = cx.register(&mut s, Interest::READABLE).unwrap();
            st.sockets.push((id, s));
        }
    });

    let sent = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    for sender in 0..SENDERS {
        let addrs = addrs.clone();
        let lane = lane.clone();
        let sent = sent.clone();
        let progress = progress.clone();
        senders.push(std::thread::spawn(move || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for seq in 0..PER_SENDER {
                // Bounded in flight so the kernel never drops on loopback.
                let total = sent.fetch_add(1, Ordering::SeqCst) + 1;
                progress.wait_for(LIMIT, "window", |rx| total.saturating_sub(rx) <= WINDOW);
                let mut msg = [0u8; 8];
                msg[0..4].copy_from_slice(&sender.to_be_bytes());
                msg[4..8].copy_from_slice(&seq.to_be_bytes());
                s.send_to(&msg, addrs[(seq as usize + sender as usize) % addrs.len()])
                    .unwrap();
                if u64::from(seq) < POSTS_PER_SENDER {
                    let _ = lane.post(|st, _| {
                        st.enter();
                        st.posts += 1;
                        st.exit();
                    });
                }
            }
        }));
    }
    for s in senders {
        s.join().unwrap();
    }
    let total = u64::from(SENDERS * PER_SENDER);
    progress.wait_for(LIMIT, "all datagrams", |rx| rx >= total);
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |st, _| {
        tx.send((st.seen.len() as u64, st.duplicates, st.posts))
            .unwrap();
    });
    let (unique, dups, posts) = rx.recv_timeout(LIMIT).unwrap();
    rt.stop().unwrap();
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "two threads were inside the lane"
    );
    assert_eq!(dups, 0, "a datagram was handled twice");
    assert_eq!(unique, total, "every datagram handled exactly once");
    assert_eq!(progress.get(), total);
    assert_eq!(posts, POSTS_PER_SENDER * u64::from(SENDERS));
}

#[test]
fn lane_exclusive_under_shared_4() {
    exclusivity(IoModel::Shared { threads: 4 });
}

#[test]
fn lane_exclusive_under_sharded_2() {
    exclusivity(IoModel::Sharded { reactors: 2 });
}

/// The handler drains its socket, then holds the lane while the test sends
/// the next burst, then returns without reading again. The burst's
/// readiness arrives while the lane runs; it must make the lane run again.
struct Holding {
    socket: UdpSocket,
    received: u64,
    rounds: u64,
    progress: Arc<Progress>,
    inside: Arc<Progress>,
    release: Arc<Progress>,
}

impl Lane for Holding {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, _id: SourceId, _r: Ready) -> Flow {
        let mut buf = [0u8; 16];
        let mut n = 0;
        while self.socket.recv(&mut buf).is_ok() {
            n += 1;
        }
        self.received += n;
        if n > 0 {
            self.progress.add(n);
            // Tell the test we are inside, wait until its next burst is sent.
            self.rounds += 1;
            self.inside.add(1);
            let round = self.rounds;
            self.release.wait_for(LIMIT, "release", |r| r >= round);
        }
        Flow::Drained
    }
}

fn no_lost_wakeup(model: IoModel) {
    const BURSTS: u64 = 200;
    const PER_BURST: u64 = 5;
    let rt = all_awake(model);
    let (socket, addr) = udp();
    let progress = Arc::new(Progress::default());
    let inside = Arc::new(Progress::default());
    let release = Arc::new(Progress::default());
    let state = Holding {
        socket,
        received: 0,
        rounds: 0,
        progress: progress.clone(),
        inside: inside.clone(),
        release: release.clone(),
    };
    let (_lane, reg) = rt.add_lane_with(state, |st, cx| {
        cx.register(&mut st.socket, Interest::READABLE)
    });
    reg.unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let send_burst = || {
        for _ in 0..PER_BURST {
            client.send_to(b"x", addr).unwrap();
        }
    };
    send_burst();
    for round in 1..BURSTS {
        // Handler call `round` is inside, blocked; each call drains what is
        // queued, so there is one call per burst.
        inside.wait_for(LIMIT, "lane inside handler", |n| n >= round);
        send_burst(); // lands while the lane runs
        release.add(1); // let the call return without reading again
    }
    inside.wait_for(LIMIT, "last burst handled", |n| n >= BURSTS);
    release.add(1);
    progress.wait_for(LIMIT, "every burst", |n| n >= BURSTS * PER_BURST);
    assert_eq!(progress.get(), BURSTS * PER_BURST);
    rt.stop().unwrap();
}

#[test]
fn no_lost_wakeup_shared_4() {
    no_lost_wakeup(IoModel::Shared { threads: 4 });
}

#[test]
fn no_lost_wakeup_shared_1() {
    no_lost_wakeup(IoModel::Shared { threads: 1 });
}

#[test]
fn no_lost_wakeup_sharded_2() {
    no_lost_wakeup(IoModel::Sharded { reactors: 2 });
}

/// Two sockets in one lane; both have data, so both events are queued for
/// the lane. Handling the first, the lane deregisters the second and
/// registers a third, which takes the freed slot. The queued event of the
/// second must not reach the lane, neither under its old id nor the new.
struct Churn {
    first: Option<(SourceId, UdpSocket)>,
    second: Option<(SourceId, UdpSocket)>,
    third: Option<(SourceId, UdpSocket)>,
    third_addr: Option<SocketAddr>,
    log: Vec<SourceId>,
}

impl Lane for Churn {
    fn on_ready(&mut self, cx: &mut LaneCtx<'_, Self>, id: SourceId, _r: Ready) -> Flow {
        self.log.push(id);
        if let Some((_, first)) = self.first.as_ref().filter(|f| f.0 == id) {
            let mut buf = [0u8; 8];
            while first.recv(&mut buf).is_ok() {}
            if let Some((sid, mut sock)) = self.second.take() {
                cx.deregister(&mut sock, sid).unwrap();
                drop(sock);
                let (mut s3, a3) = udp();
                let id3 = cx.register(&mut s3, Interest::READABLE).unwrap();
                assert_eq!(id3.slot(), sid.slot(), "the freed slot is reused");
                assert_ne!(id3, sid);
                self.third = Some((id3, s3));
                self.third_addr = Some(a3);
            }
        } else if let Some((id3, s3)) = &self.third {
            assert_eq!(id, *id3, "only live sources reach the lane");
            let mut buf = [0u8; 8];
            while s3.recv(&mut buf).is_ok() {}
        }
        Flow::Drained
    }
}

#[test]
fn stale_token_never_reaches_new_owner() {
    let mut reactor = Reactor::new().unwrap();
    let (mut s1, a1) = udp();
    let (mut s2, a2) = udp();
    let (lane, (id1, id2)) = reactor.handle().add_lane_with(
        Churn {
            first: None,
            second: None,
            third: None,
            third_addr: None,
            log: Vec::new(),
        },
        |_, cx| {
            let id1 = cx.register(&mut s1, Interest::READABLE).unwrap();
            let id2 = cx.register(&mut s2, Interest::READABLE).unwrap();
            (id1, id2)
        },
    );
    let _ = lane.post(move |st, _| {
        st.first = Some((id1, s1));
        st.second = Some((id2, s2));
    });
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(b"1", a1).unwrap();
    client.send_to(b"2", a2).unwrap();
    // One turn harvests both events before the lane runs.
    reactor.turn(Some(Duration::from_secs(5))).unwrap();
    let (tx, rx) = mpsc::channel();
    let probe = lane.clone();
    let _ = probe.post(move |st, _| tx.send((st.log.clone(), st.third_addr)).unwrap());
    reactor.turn(Some(Duration::ZERO)).unwrap();
    let (log, a3) = rx.try_recv().unwrap();
    assert_eq!(
        log,
        vec![id1],
        "the event of the deregistered source was dropped"
    );
    // The new owner gets its own events, under its own id.
    client.send_to(b"3", a3.unwrap()).unwrap();
    let (tx, rx) = mpsc::channel();
    for _ in 0..50 {
        reactor.turn(Some(Duration::from_millis(100))).unwrap();
        let tx = tx.clone();
        let _ = lane.post(move |st, _| {
            if st.log.len() > 1 {
                let _ = tx.send(st.log.clone());
            }
        });
        if let Ok(log) = rx.try_recv() {
            assert_eq!(log.len(), 2);
            assert_ne!(log[1], id2);
            assert_eq!(log[1].slot(), id2.slot());
            return;
        }
    }
    panic!("the third socket's datagram never arrived");
}

/// Churn under a shared runtime: a lane keeps replacing its sockets while
/// datagrams flow to old and new ones; the lane never sees an id it does
/// not currently own.
struct Replacing {
    live: Vec<(SourceId, UdpSocket)>,
    foreign: u64,
    replaced: u64,
    progress: Arc<Progress>,
}

impl Lane for Replacing {
    fn on_ready(&mut self, cx: &mut LaneCtx<'_, Self>, id: SourceId, _r: Ready) -> Flow {
        let Some(pos) = self.live.iter().position(|(s, _)| *s == id) else {
            self.foreign += 1;
            return Flow::Drained;
        };
        let mut buf = [0u8; 8];
        while self.live[pos].1.recv(&mut buf).is_ok() {}
        // Replace this socket with a new one bound to the same port number.
        let (old_id, mut old) = self.live.swap_remove(pos);
        let addr = old.local_addr().unwrap();
        cx.deregister(&mut old, old_id).unwrap();
        drop(old);
        if let Ok(mut s) = UdpSocket::bind(addr) {
            let nid = cx.register(&mut s, Interest::READABLE).unwrap();
            self.live.push((nid, s));
        }
        self.replaced += 1;
        self.progress.add(1);
        Flow::Drained
    }
}

#[test]
fn churn_under_shared_4_never_misdelivers() {
    let rt = all_awake(IoModel::Shared { threads: 4 });
    let progress = Arc::new(Progress::default());
    let mut addrs = Vec::new();
    let mut socks = Vec::new();
    for _ in 0..16 {
        let (s, a) = udp();
        socks.push(s);
        addrs.push(a);
    }
    let (lane, ()) = rt.add_lane_with(
        Replacing {
            live: Vec::new(),
            foreign: 0,
            replaced: 0,
            progress: progress.clone(),
        },
        move |st, cx| {
            for mut s in socks {
                let id = cx.register(&mut s, Interest::READABLE).unwrap();
                st.live.push((id, s));
            }
        },
    );
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for round in 0..2_000usize {
        let _ = client.send_to(b"c", addrs[round % addrs.len()]);
        if round % 64 == 63 {
            progress.wait_for(LIMIT, "replacements", |n| n > 0);
        }
    }
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |st, _| tx.send((st.foreign, st.replaced)).unwrap());
    let (foreign, replaced) = rx.recv_timeout(LIMIT).unwrap();
    rt.stop().unwrap();
    assert_eq!(
        foreign, 0,
        "an event reached the lane for a source it no longer owns"
    );
    assert!(replaced > 0);
}

/// A handler that yields after each datagram is called again without a
/// new edge, until the socket is drained.
struct Stingy {
    socket: UdpSocket,
    calls: u64,
    got: u64,
    progress: Arc<Progress>,
}

impl Lane for Stingy {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, _id: SourceId, _r: Ready) -> Flow {
        self.calls += 1;
        let mut buf = [0u8; 8];
        match self.socket.recv(&mut buf) {
            Ok(_) => {
                self.got += 1;
                self.progress.add(1);
                Flow::Yielded
            }
            Err(_) => Flow::Drained,
        }
    }
}

#[test]
fn yielded_lane_runs_again_without_new_events() {
    for model in [
        IoModel::Shared { threads: 1 },
        IoModel::Shared { threads: 3 },
    ] {
        let rt = all_awake(model);
        let (socket, addr) = udp();
        let progress = Arc::new(Progress::default());
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Queue all datagrams before registering: exactly one edge.
        for _ in 0..100 {
            client.send_to(b"y", addr).unwrap();
        }
        let state = Stingy {
            socket,
            calls: 0,
            got: 0,
            progress: progress.clone(),
        };
        let (lane, reg) = rt.add_lane_with(state, |st, cx| {
            cx.register(&mut st.socket, Interest::READABLE)
        });
        reg.unwrap();
        progress.wait_for(LIMIT, "all 100 via yields", |n| n >= 100);
        let (tx, rx) = mpsc::channel();
        let _ = lane.post(move |st, _| tx.send((st.got, st.calls)).unwrap());
        let (got, calls) = rx.recv_timeout(LIMIT).unwrap();
        rt.stop().unwrap();
        assert_eq!(got, 100);
        assert!(calls >= 100);
    }
}
