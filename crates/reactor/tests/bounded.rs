//! Bounded lane inboxes: posts over `max_posts` are refused (and dropped on
//! the caller's thread), control posts are not, and every accepted closure
//! runs exactly once.

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use keel_reactor::{IoModel, Lane, LaneOptions, PostError, Reactor, Runtime, DEFAULT_MAX_POSTS};

const LIMIT: Duration = Duration::from_secs(10);

struct Plain;
impl Lane for Plain {}

/// One bit per closure id.
struct Bitmap(Vec<AtomicU64>);

impl Bitmap {
    fn new(bits: usize) -> Bitmap {
        Bitmap((0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Sets bit `id`; returns whether it was already set.
    fn set(&self, id: usize) -> bool {
        let mask = 1 << (id % 64);
        self.0[id / 64].fetch_or(mask, Ordering::SeqCst) & mask != 0
    }

    fn get(&self, id: usize) -> bool {
        self.0[id / 64].load(Ordering::SeqCst) & (1 << (id % 64)) != 0
    }

    fn count(&self) -> usize {
        self.0
            .iter()
            .map(|w| w.load(Ordering::SeqCst).count_ones() as usize)
            .sum()
    }
}

/// Marks its id in `dropped` when dropped (run or not).
struct Guard {
    id: usize,
    dropped: Arc<Bitmap>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.dropped.set(self.id);
    }
}

#[test]
fn post_into_a_blocked_lane_accepts_exactly_max_posts() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 40_000;
    const TOTAL: usize = THREADS * PER_THREAD;
    const MAX: usize = DEFAULT_MAX_POSTS;
    const _: () = assert!(TOTAL > MAX);

    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let lane = rt.add_lane(Plain);
    // Hold the lane busy: a closure that waits for the test to release it,
    // then tries to post to its own (full) lane.
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (self_post_tx, self_post_rx) = mpsc::channel();
    assert!(lane
        .post(move |_, cx| {
            entered_tx.send(()).unwrap();
            release_rx.recv_timeout(LIMIT).expect("released");
            self_post_tx.send(cx.lane().post(|_, _| ())).unwrap();
        })
        .is_ok());
    entered_rx.recv_timeout(LIMIT).expect("blocker runs");
    assert_eq!(lane.queued_posts(), 0);

    let ran = Arc::new(Bitmap::new(TOTAL));
    let twice = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(Bitmap::new(TOTAL));
    let accepted = Arc::new(Bitmap::new(TOTAL));
    let posters: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lane, ran, twice, dropped, accepted) = (
                lane.clone(),
                ran.clone(),
                twice.clone(),
                dropped.clone(),
                accepted.clone(),
            );
            std::thread::spawn(move || {
                for k in 0..PER_THREAD {
                    let id = t * PER_THREAD + k;
                    let guard = Guard {
                        id,
                        dropped: dropped.clone(),
                    };
                    let (ran, twice) = (ran.clone(), twice.clone());
                    match lane.post(move |_, _| {
                        let _guard = guard;
                        if ran.set(id) {
                            twice.fetch_add(1, Ordering::SeqCst);
                        }
                    }) {
                        Ok(()) => {
                            accepted.set(id);
                        }
                        Err(e) => {
                            assert_eq!(e, PostError::Full { capacity: MAX });
                            assert!(
                                dropped.get(id),
                                "a refused closure was not dropped before post returned"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for p in posters {
        p.join().unwrap();
    }
    assert_eq!(accepted.count(), MAX, "accepted exactly max_posts");
    assert_eq!(lane.queued_posts(), MAX);
    assert_eq!(
        dropped.count(),
        TOTAL - MAX,
        "every refused closure dropped"
    );
    assert_eq!(ran.count(), 0, "nothing ran while the lane was blocked");
    assert!(
        lane.post(|_, _| ()).is_err(),
        "post() is refused when full too"
    );
    // Control posts go through a full inbox; this one runs after the rest.
    let (done_tx, done_rx) = mpsc::channel();
    assert!(lane
        .post_control(move |_, _| done_tx.send(()).unwrap())
        .is_ok());
    assert_eq!(lane.queued_posts(), MAX + 1);

    release_tx.send(()).unwrap();
    assert_eq!(
        self_post_rx.recv_timeout(LIMIT).expect("blocker finishes"),
        Err(PostError::Full { capacity: MAX }),
        "a handler posting to its own full lane is refused too"
    );
    done_rx.recv_timeout(LIMIT).expect("the control post ran");
    assert_eq!(twice.load(Ordering::SeqCst), 0, "a closure ran twice");
    assert_eq!(ran.count(), MAX, "every accepted closure ran");
    for id in 0..TOTAL {
        assert_eq!(ran.get(id), accepted.get(id), "closure {id}");
    }
    assert_eq!(dropped.count(), TOTAL);
    assert_eq!(lane.queued_posts(), 0);
    assert!(
        lane.post(|_, _| ()).is_ok(),
        "room again once the lane caught up"
    );
    rt.stop().unwrap();
}

#[test]
fn max_posts_zero_means_one_and_errors_say_what_happened() {
    let mut reactor = Reactor::new().unwrap();
    let options = LaneOptions {
        max_posts: 0,
        ..LaneOptions::default()
    };
    let (lane, ()) = reactor
        .handle()
        .add_lane_with_options(Plain, options, |_, _| ());
    assert_eq!(lane.post(|_, _| ()), Ok(()));
    let full = lane.post(|_, _| ()).unwrap_err();
    assert_eq!(full, PostError::Full { capacity: 1 });
    let text = full.to_string();
    assert!(text.contains("full") && text.contains('1'), "{text}");
    assert_eq!(lane.queued_posts(), 1);
    reactor.turn(Some(LIMIT)).unwrap();
    assert_eq!(lane.queued_posts(), 0);

    assert!(lane.close());
    reactor.turn(Some(LIMIT)).unwrap();
    assert!(lane.is_closed());
    let dropped = Arc::new(Bitmap::new(1));
    let guard = Guard {
        id: 0,
        dropped: dropped.clone(),
    };
    let closed = lane.post(move |_, _| drop(guard)).expect_err("closed lane");
    assert_eq!(closed, PostError::Closed);
    assert!(dropped.get(0), "the refused closure was dropped");
    assert!(closed.to_string().contains("closed"));
    assert!(
        lane.post_control(|_, _| ()).is_err(),
        "control posts need an open lane"
    );
}

/// A full lane on a stopped reactor says Closed, not Full: retrying will
/// never help.
#[test]
fn full_lane_of_a_stopped_reactor_is_closed() {
    let reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let options = LaneOptions {
        max_posts: 1,
        ..LaneOptions::default()
    };
    let (lane, ()) = handle.add_lane_with_options(Plain, options, |_, _| ());
    assert_eq!(lane.post(|_, _| ()), Ok(()));
    assert_eq!(lane.post(|_, _| ()), Err(PostError::Full { capacity: 1 }));
    handle.stop();
    assert_eq!(lane.post(|_, _| ()), Err(PostError::Closed));
    assert_eq!(handle.post(|| ()), Err(PostError::Closed));
    drop(reactor);
    assert_eq!(
        handle.discarded_posts(),
        1,
        "the waiting closure was dropped"
    );
    assert_eq!(lane.queued_posts(), 0);
}
