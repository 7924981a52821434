//! Stopping: sockets and the poll close, threads join, running handlers
//! finish, and a handler's panic reaches the owner instead of vanishing.
//!
//! Every test here takes `SERIAL`: the fd-counting tests need the process
//! to themselves, and tests in one binary run on parallel threads.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{open_fds, threads_named, udp, wait_until_in_poll, Progress};
use keel_reactor::{
    Error, Flow, Handle, Interest, IoModel, Lane, LaneCtx, LaneHandle, LaneOptions, Reactor, Ready,
    Runtime, SourceId, TimerId,
};
use mio::net::UdpSocket;

const LIMIT: Duration = Duration::from_secs(10);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on another thread and waits at most `LIMIT` for its result.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not return within {LIMIT:?}"),
    }
}

/// Waits (bounded) until no runtime thread is left. A joined thread's
/// /proc entry can outlive `join` by a moment, and nothing signals its
/// removal, so this polls.
fn no_runtime_threads_left() {
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = threads_named("keel-shar");
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "runtime threads left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A lane owning registered UDP sockets (echoing what they receive) and a
/// periodic timer, holding handles to itself and to its reactor: a cycle
/// only stop can break by dropping the state.
struct Echo {
    sockets: Vec<(SourceId, UdpSocket)>,
    me: Option<LaneHandle<Echo>>,
    reactor: Option<Handle>,
    timer: Option<TimerId>,
    ticks: Arc<Progress>,
}

impl Lane for Echo {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, id: SourceId, _r: Ready) -> Flow {
        let (_, sock) = self.sockets.iter().find(|(s, _)| *s == id).unwrap();
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
        Flow::Drained
    }

    fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, _timer: TimerId) {
        self.ticks.add(1);
    }
}

fn fds_return_to_baseline(model: IoModel) {
    const LANES: usize = 3;
    const SOCKETS_PER_LANE: usize = 2;
    let before = open_fds();
    let rt = Runtime::new(model).unwrap();
    let ticks = Arc::new(Progress::default());
    let mut lanes = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..LANES {
        let mut socks = Vec::new();
        for _ in 0..SOCKETS_PER_LANE {
            let (s, a) = udp();
            socks.push(s);
            addrs.push(a);
        }
        let state = Echo {
            sockets: Vec::new(),
            me: None,
            reactor: None,
            timer: None,
            ticks: ticks.clone(),
        };
        let (lane, ()) = rt.add_lane_with(state, move |st, cx| {
            for mut s in socks {
                let id = cx.register(&mut s, Interest::READABLE).unwrap();
                st.sockets.push((id, s));
            }
            st.timer = Some(cx.timer(Instant::now(), Some(Duration::from_millis(1))));
            st.me = Some(cx.lane());
            st.reactor = Some(cx.reactor());
        });
        lanes.push(lane);
    }
    // A closure timer per reactor, its closure holding the reactor's handle.
    for i in 0..rt.reactors() {
        let h = rt.reactor(i).unwrap().clone();
        let hh = h.clone();
        h.timer(Instant::now(), Some(Duration::from_millis(1)), move || {
            let _ = hh.is_stopped();
        });
    }
    // Everything is live: each socket echoes, each lane's timer ticks.
    {
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.set_read_timeout(Some(LIMIT)).unwrap();
        for a in &addrs {
            client.send_to(b"hello", a).unwrap();
            let mut buf = [0u8; 16];
            let (n, from) = client.recv_from(&mut buf).expect("echo");
            assert_eq!((&buf[..n], from), (&b"hello"[..], *a));
        }
    }
    ticks.wait_for(LIMIT, "lane timer ticks", |n| n >= 3 * LANES as u64);
    assert!(
        open_fds() >= before + LANES * SOCKETS_PER_LANE,
        "the sockets are counted"
    );

    let rt_handle = rt.handle().clone();
    bounded("Runtime::stop", move || rt.stop()).unwrap();
    no_runtime_threads_left();
    // The lanes' state is dropped at stop, though their handles live on:
    // their ports are free again, and posting to them fails.
    for a in &addrs {
        assert!(
            std::net::UdpSocket::bind(a).is_ok(),
            "socket on {a} still open after stop"
        );
    }
    for lane in &lanes {
        assert!(lane.is_closed());
        assert!(lane.post(|_, _| ()).is_err(), "posted to a lane after stop");
    }
    assert!(
        rt_handle.post(|| ()).is_err(),
        "posted to a reactor after stop"
    );
    drop(lanes);
    drop(rt_handle);
    assert_eq!(
        open_fds(),
        before,
        "file descriptors leaked by {model:?} (sockets, poll or waker)"
    );
}

#[test]
fn fds_return_to_baseline_shared_4() {
    let _serial = serial();
    fds_return_to_baseline(IoModel::Shared { threads: 4 });
}

#[test]
fn fds_return_to_baseline_sharded_3() {
    let _serial = serial();
    fds_return_to_baseline(IoModel::Sharded { reactors: 3 });
}

#[test]
fn reactor_run_returns_after_stop_from_another_thread() {
    let _serial = serial();
    const NAME: &str = "keel-t-runstop";
    let (htx, hrx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(NAME.into())
        .spawn(move || {
            let mut reactor = Reactor::new().unwrap();
            htx.send(reactor.handle()).unwrap();
            done_tx.send(reactor.run()).unwrap();
        })
        .unwrap();
    let handle: Handle = hrx.recv_timeout(LIMIT).unwrap();
    wait_until_in_poll(NAME, LIMIT);
    let stopper = handle.clone();
    std::thread::spawn(move || stopper.stop()).join().unwrap();
    done_rx
        .recv_timeout(LIMIT)
        .expect("run() did not return after stop() from another thread")
        .expect("run() returns Ok after stop");
    thread.join().unwrap();
    assert!(handle.is_stopped());
}

/// Dropped when the runtime thread it was installed on exits (thread-local
/// destructors run before `join` returns). It takes a moment, so a stop
/// that does not join its threads returns before any probe counts.
struct ExitProbe(Arc<Progress>);

impl Drop for ExitProbe {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(5));
        self.0.add(1);
    }
}

thread_local! {
    static PROBE: std::cell::RefCell<Option<ExitProbe>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn runtime_stop_lets_running_handlers_finish_and_joins_threads() {
    let _serial = serial();
    for model in [
        IoModel::Shared { threads: 4 },
        IoModel::Sharded { reactors: 3 },
    ] {
        struct Busy;
        impl Lane for Busy {}
        let rt = Runtime::new(model).unwrap();
        // An exit probe on the thread of each reactor's closures.
        let installed = Arc::new(Progress::default());
        let exited = Arc::new(Progress::default());
        for i in 0..rt.reactors() {
            let (inst, ex) = (installed.clone(), exited.clone());
            let _ = rt.reactor(i).unwrap().post(move || {
                PROBE.with(|p| {
                    if p.borrow().is_none() {
                        *p.borrow_mut() = Some(ExitProbe(ex));
                        inst.add(1);
                    }
                })
            });
        }
        let probes = installed.wait_for(LIMIT, "exit probes", |n| n >= rt.reactors() as u64);

        let lane = rt.add_lane(Busy);
        let inside = Arc::new(Progress::default());
        let finished = Arc::new(AtomicBool::new(false));
        let (i, f) = (inside.clone(), finished.clone());
        let _ = lane.post(move |_, cx| {
            i.add(1);
            // Still running when stop is called: wait until it is (stop
            // raises a flag nothing waits on, so poll it, bounded).
            let reactor = cx.reactor();
            let deadline = Instant::now() + LIMIT;
            while !reactor.is_stopped() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            f.store(reactor.is_stopped(), Ordering::SeqCst);
        });
        inside.wait_for(LIMIT, "handler running", |n| n >= 1);
        bounded("Runtime::stop", move || rt.stop()).unwrap();
        assert!(
            finished.load(Ordering::SeqCst),
            "{model:?}: stop returned before the running handler finished"
        );
        assert_eq!(
            exited.get(),
            probes,
            "{model:?}: stop returned before its threads exited"
        );
        no_runtime_threads_left();
    }
}

/// Panics in `on_ready` when it receives "boom".
struct Fragile {
    socket: UdpSocket,
}

impl Lane for Fragile {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, _id: SourceId, _r: Ready) -> Flow {
        let mut buf = [0u8; 16];
        while let Ok(n) = self.socket.recv(&mut buf) {
            if &buf[..n] == b"boom" {
                panic!("boom in on_ready (a panic this test expects)");
            }
        }
        Flow::Drained
    }
}

fn assert_handler_panic(result: Result<(), Error>, message: &str) {
    match result {
        Err(Error::HandlerPanic { message: m }) => assert_eq!(m, message),
        other => panic!("expected HandlerPanic({message:?}), got {other:?}"),
    }
}

#[test]
fn lane_handler_panic_stops_the_runtime_and_is_returned_by_join() {
    let _serial = serial();
    for model in [
        IoModel::Shared { threads: 2 },
        IoModel::Sharded { reactors: 2 },
    ] {
        let rt = Runtime::new(model).unwrap();
        // Sharded: the fragile lane on the second reactor; join must stop
        // the first one too.
        let (socket, addr) = udp();
        let (lane, reg) = rt
            .reactor(rt.reactors() - 1)
            .unwrap()
            .add_lane_with(Fragile { socket }, |st, cx| {
                cx.register(&mut st.socket, Interest::READABLE)
            });
        reg.unwrap();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"boom", addr).unwrap();
        // Nobody calls stop: the panic must end the runtime by itself.
        let result = bounded("Runtime::join after a handler panic", move || rt.join());
        assert_handler_panic(result, "boom in on_ready (a panic this test expects)");
        assert!(lane.is_closed(), "{model:?}: the panicking lane is closed");
        no_runtime_threads_left();
    }
}

#[test]
fn posted_closure_and_timer_panics_are_returned_by_stop_and_join() {
    let _serial = serial();
    // A lane post panics; stop() (called after it) returns the panic.
    struct Plain;
    impl Lane for Plain {}
    let rt = Runtime::new(IoModel::Sharded { reactors: 3 }).unwrap();
    let lane = rt.reactor(1).unwrap().add_lane(Plain);
    let reached = Arc::new(Progress::default());
    let r = reached.clone();
    let _ = lane.post(move |_, _| {
        r.add(1);
        panic!("boom in a lane post (a panic this test expects)");
    });
    reached.wait_for(LIMIT, "the panicking post", |n| n >= 1);
    let result = bounded("Runtime::stop after a handler panic", move || rt.stop());
    assert_handler_panic(result, "boom in a lane post (a panic this test expects)");
    no_runtime_threads_left();

    // A closure timer panics; join() returns without anyone calling stop.
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    rt.handle().timer(Instant::now(), None, || {
        panic!("boom in a timer (a panic this test expects)")
    });
    let result = bounded("Runtime::join after a timer panic", move || rt.join());
    assert_handler_panic(result, "boom in a timer (a panic this test expects)");
    no_runtime_threads_left();
}

#[test]
fn posted_closure_panic_is_returned_by_turn() {
    let _serial = serial();
    let mut reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let ran_before = Arc::new(AtomicBool::new(false));
    let r = ran_before.clone();
    let _ = handle.post(move || r.store(true, Ordering::SeqCst));
    let _ = handle.post(|| panic!("boom in a reactor post (a panic this test expects)"));
    let result = reactor.turn(Some(LIMIT)).map(|_| ());
    assert!(ran_before.load(Ordering::SeqCst));
    assert_handler_panic(result, "boom in a reactor post (a panic this test expects)");
    assert!(handle.is_stopped(), "a handler panic stops the reactor");
    // The error is not consumed: later turns and run() report it too.
    let again = reactor.turn(Some(Duration::ZERO)).map(|_| ());
    assert_handler_panic(again, "boom in a reactor post (a panic this test expects)");
    assert_handler_panic(
        reactor.run(),
        "boom in a reactor post (a panic this test expects)",
    );
}

/// What the closures of `stop_drops_queued_posts_instead_of_running_them`
/// report: how many ran, how many were dropped without running.
#[derive(Default)]
struct Counts {
    ran: AtomicU64,
    dropped: AtomicU64,
}

/// Held by each posted closure; counts it as dropped unless it ran.
struct Counted {
    counts: Arc<Counts>,
    ran: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if !self.ran {
            self.counts.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn stop_drops_queued_posts_instead_of_running_them() {
    let _serial = serial();
    const POSTERS: u64 = 4;
    const PER_POSTER: u64 = 250_000;
    const POSTED: u64 = POSTERS * PER_POSTER;
    struct Plain;
    impl Lane for Plain {}
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let handle = rt.handle().clone();
    let options = LaneOptions {
        max_posts: 1 << 20,
        ..LaneOptions::default()
    };
    let (lane, ()) = rt.add_lane_with_options(Plain, options, |_, _| ());
    // The lane is busy in this closure while the others queue up.
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    assert!(lane
        .post(move |_, _| {
            entered_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(LIMIT);
        })
        .is_ok());
    entered_rx
        .recv_timeout(LIMIT)
        .expect("the blocking post runs");
    let counts = Arc::new(Counts::default());
    let posters: Vec<_> = (0..POSTERS)
        .map(|_| {
            let (lane, counts) = (lane.clone(), counts.clone());
            std::thread::spawn(move || {
                for _ in 0..PER_POSTER {
                    let guard = Counted {
                        counts: counts.clone(),
                        ran: false,
                    };
                    lane.post(move |_, _| {
                        // Binds the whole guard: `guard.ran = true` alone
                        // would capture a copy of the flag, not the guard.
                        let mut guard = guard;
                        guard.ran = true;
                        guard.counts.ran.fetch_add(1, Ordering::SeqCst);
                    })
                    .expect("room for every post");
                }
            })
        })
        .collect();
    for p in posters {
        p.join().unwrap();
    }
    assert_eq!(lane.queued_posts() as u64, POSTED);
    assert_eq!(
        counts.dropped.load(Ordering::SeqCst),
        0,
        "the closures hold their guards"
    );
    // Stop first, then let the blocking closure return: the lane must see
    // the stop before its next closure and run none of them.
    handle.stop();
    release_tx.send(()).unwrap();
    bounded("Runtime::stop with a million posts queued", move || {
        rt.stop()
    })
    .unwrap();
    let ran = counts.ran.load(Ordering::SeqCst);
    let dropped = counts.dropped.load(Ordering::SeqCst);
    assert_eq!(
        ran + dropped,
        POSTED,
        "a closure was leaked (neither run nor dropped)"
    );
    assert_eq!(ran, 0, "queued closures ran after stop");
    assert_eq!(handle.discarded_posts(), dropped);
    assert_eq!(lane.queued_posts(), 0);
    assert!(lane.is_closed());
}

/// A lane state that reports its drop (the lane closing) by name, and
/// panics in `on_timer`, and in `on_ready` on "boom".
struct Doomed {
    name: &'static str,
    socket: Option<UdpSocket>,
    dropped: mpsc::Sender<&'static str>,
}

impl Drop for Doomed {
    fn drop(&mut self) {
        let _ = self.dropped.send(self.name);
    }
}

impl Lane for Doomed {
    fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, _id: SourceId, _r: Ready) -> Flow {
        let mut buf = [0u8; 16];
        while let Some(Ok(n)) = self.socket.as_ref().map(|s| s.recv(&mut buf)) {
            if &buf[..n] == b"boom" {
                panic!("boom in a contained on_ready (a panic this test expects)");
            }
        }
        Flow::Drained
    }

    fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, _timer: TimerId) {
        panic!("boom in a contained on_timer (a panic this test expects)");
    }
}

#[test]
fn contained_panics_close_only_their_lane() {
    let _serial = serial();
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let handle = rt.handle().clone();
    let contained = LaneOptions {
        contain_panics: true,
        ..LaneOptions::default()
    };
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let doomed = |name, socket| Doomed {
        name,
        socket,
        dropped: dropped_tx.clone(),
    };

    // A bystander lane with default options, on the same reactor.
    let (bystander, ()) = rt.add_lane_with(doomed("bystander", None), |_, _| ());
    let ask_bystander = |round: u32| {
        let (tx, rx) = mpsc::channel();
        assert!(bystander.post(move |_, _| tx.send(round).unwrap()).is_ok());
        assert_eq!(rx.recv_timeout(LIMIT).expect("bystander runs posts"), round);
    };
    ask_bystander(0);

    // 1. A posted closure panics; the closure queued behind it is dropped.
    let (posts, ()) = rt.add_lane_with_options(doomed("posts", None), contained, |_, _| ());
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    assert!(posts
        .post(move |_, _| {
            entered_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(LIMIT);
        })
        .is_ok());
    entered_rx
        .recv_timeout(LIMIT)
        .expect("the blocking post runs");
    assert!(posts
        .post(|_, _| panic!("boom in a contained post (a panic this test expects)"))
        .is_ok());
    let counts = Arc::new(Counts::default());
    let guard = Counted {
        counts: counts.clone(),
        ran: false,
    };
    assert!(posts
        .post(move |_, _| {
            let mut guard = guard;
            guard.ran = true;
        })
        .is_ok());
    release_tx.send(()).unwrap();

    // 2. A timer handler panics.
    let (timers, ()) = rt.add_lane_with_options(doomed("timers", None), contained, |_, cx| {
        cx.timer(Instant::now(), None);
    });

    // 3. A readiness handler panics.
    let (socket, addr) = udp();
    let (ready, reg) =
        rt.add_lane_with_options(doomed("ready", Some(socket)), contained, |st, cx| {
            cx.register(st.socket.as_mut().unwrap(), Interest::READABLE)
        });
    reg.unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(b"boom", addr).unwrap();

    let mut closed: Vec<&str> = (0..3)
        .map(|_| {
            dropped_rx
                .recv_timeout(LIMIT)
                .expect("the panicking lanes close")
        })
        .collect();
    closed.sort_unstable();
    assert_eq!(closed, ["posts", "ready", "timers"]);
    for (lane, what) in [
        (&posts, "post"),
        (&timers, "on_timer"),
        (&ready, "on_ready"),
    ] {
        assert!(lane.is_closed(), "{what}");
        let expected = format!("boom in a contained {what} (a panic this test expects)");
        assert_eq!(lane.panic_message().as_deref(), Some(expected.as_str()));
        assert_eq!(lane.post(|_, _| ()), Err(keel_reactor::PostError::Closed));
    }
    assert_eq!(
        counts.dropped.load(Ordering::SeqCst),
        1,
        "queued closure dropped"
    );
    assert_eq!(handle.discarded_posts(), 1);
    assert!(bystander.panic_message().is_none());

    // The reactor kept running: the other lane still works, the runtime
    // was not stopped, and stop reports no error.
    for round in 1..=3 {
        ask_bystander(round);
    }
    assert!(
        !handle.is_stopped(),
        "a contained panic stopped the reactor"
    );
    bounded("Runtime::stop after contained panics", move || rt.stop())
        .expect("contained panics are not returned by stop");
    no_runtime_threads_left();
}
