//! The lane's scheduling state machine: the one piece of lock-free state
//! that keeps a lane from running on two threads at once while never losing
//! a notification. Model-checked with loom (`--cfg loom`, see the tests).
//!
//! ```text
//!            notify                  start
//!   IDLE ──────────────▶ SCHEDULED ─────────▶ RUNNING ──notify──▶ NOTIFIED
//!    ▲   (caller enqueues)    ▲                 │  ▲                  │
//!    │                        │  requeue        │  └──── finish ──────┘
//!    └──────── finish ────────┼─────────────────┘   (run again)
//!                             └──────────── requeue (from RUNNING/NOTIFIED)
//! ```
//! `notify` returns true exactly when it moved IDLE to SCHEDULED: that caller,
//! and only it, puts the lane on a run queue. A notify while the lane runs
//! marks it NOTIFIED; `finish` then tells the runner to run once more.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU8, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU8, Ordering};

const IDLE: u8 = 0;
const SCHEDULED: u8 = 1;
const RUNNING: u8 = 2;
const NOTIFIED: u8 = 3;
const CLOSED: u8 = 4;

pub(crate) struct LaneSched(AtomicU8);

impl LaneSched {
    /// A new lane is owned by its creator (RUNNING) until it calls
    /// `finish`, so events that arrive during set-up are not lost.
    pub(crate) fn new_running() -> LaneSched {
        LaneSched(AtomicU8::new(RUNNING))
    }

    /// Records that the lane has work. Returns true if the caller must put
    /// the lane on a run queue.
    pub(crate) fn notify(&self) -> bool {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            let next = match cur {
                IDLE => SCHEDULED,
                RUNNING => NOTIFIED,
                _ => return false,
            };
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next == SCHEDULED,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The thread that took the lane off a run queue claims it.
    /// Returns false if the lane was closed meanwhile.
    pub(crate) fn start(&self) -> bool {
        self.0
            .compare_exchange(SCHEDULED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The runner is done with one round. Returns true if a notification
    /// came in while it ran: the lane is RUNNING again and the runner must
    /// do another round. Returns false once the lane is IDLE (or closed).
    pub(crate) fn finish(&self) -> bool {
        match self
            .0
            .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => false,
            Err(NOTIFIED) => {
                // Only the runner moves out of NOTIFIED, so a plain store is
                // enough; notifiers seeing RUNNING will mark it again.
                self.0.store(RUNNING, Ordering::Release);
                true
            }
            Err(_) => false,
        }
    }

    /// The runner stops early (budget) and will enqueue the lane itself:
    /// RUNNING/NOTIFIED become SCHEDULED. Returns false if the lane is closed.
    pub(crate) fn requeue(&self) -> bool {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            if cur != RUNNING && cur != NOTIFIED {
                return false;
            }
            match self
                .0
                .compare_exchange_weak(cur, SCHEDULED, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Closes the lane for good: it is never scheduled again.
    pub(crate) fn close(&self) {
        self.0.store(CLOSED, Ordering::Release);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) == CLOSED
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn notify_while_running_runs_again() {
        let s = LaneSched::new_running();
        assert!(!s.notify(), "running lane is not enqueued");
        assert!(s.finish(), "a notification during the run means run again");
        assert!(!s.finish(), "now idle");
        assert!(s.notify(), "idle lane: caller enqueues");
        assert!(!s.notify(), "already scheduled");
        assert!(s.start());
        assert!(!s.start(), "only one runner");
        assert!(s.requeue());
        assert!(s.start());
        s.close();
        assert!(!s.notify());
        assert!(!s.finish());
        assert!(s.is_closed());
    }
}

/// Run with (scripts/test.sh does):
/// `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p keel-reactor --lib --profile loom lane::sched`
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// Exhaustive search over every interleaving does not finish in useful
    /// time (even a three-thread model ran for over 13 minutes). Bugs in a
    /// protocol this small show up within very few preemptions: with 2,
    /// both tests take ~6 s in release and catch each seeded protocol bug
    /// (lost NOTIFIED, notify enqueueing a running lane, requeue ignoring
    /// NOTIFIED, body released after `finish`); 3 takes over a minute.
    /// `LOOM_MAX_PREEMPTIONS` overrides it.
    const PREEMPTION_BOUND: usize = 2;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        if builder.preemption_bound.is_none() {
            builder.preemption_bound = Some(PREEMPTION_BOUND);
        }
        builder.check(f);
    }

    /// A lane as `LaneCell::run` drives it: taking the body (`inside`, a
    /// counter rather than a mutex: loom does not branch before a mutex
    /// release, so a `try_lock` could never observe the window) fails if
    /// another runner holds it; it is released *before* `finish` or
    /// `requeue` lets another thread start the lane. The first `yields`
    /// rounds stop early (budget, `Flow::Yielded`): the runner requeues the
    /// lane itself.
    struct Model {
        sched: LaneSched,
        inside: AtomicUsize,
        work: AtomicUsize,
        done: AtomicUsize,
        queue: Mutex<Vec<()>>,
        yields: AtomicUsize,
    }

    impl Model {
        fn new(yields: usize) -> Arc<Model> {
            let m = Arc::new(Model {
                sched: LaneSched::new_running(),
                inside: AtomicUsize::new(0),
                work: AtomicUsize::new(0),
                done: AtomicUsize::new(0),
                queue: Mutex::new(Vec::new()),
                yields: AtomicUsize::new(yields),
            });
            // The creator finishes set-up.
            assert!(!m.sched.finish());
            m
        }

        /// A producer: queue one unit of work, notify, enqueue if told to.
        fn produce(&self) {
            self.work.fetch_add(1, Ordering::SeqCst);
            if self.sched.notify() {
                self.queue.lock().unwrap().push(());
            }
        }

        fn run(&self) {
            if !self.sched.start() {
                return;
            }
            loop {
                assert_eq!(
                    self.inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "lane ran on two threads at once"
                );
                let n = self.work.swap(0, Ordering::SeqCst);
                self.done.fetch_add(n, Ordering::SeqCst);
                let yielded = self
                    .yields
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |y| y.checked_sub(1))
                    .is_ok();
                // Release the body, then let the state go.
                self.inside.fetch_sub(1, Ordering::SeqCst);
                if yielded {
                    if self.sched.requeue() {
                        self.queue.lock().unwrap().push(());
                    }
                    return;
                }
                if !self.sched.finish() {
                    return;
                }
            }
        }

        /// A worker: take one lane off the queue, if any, and run it.
        fn work_once(&self) {
            let item = self.queue.lock().unwrap().pop();
            if item.is_some() {
                self.run();
            }
        }
    }

    /// Two producers and two workers race; then the queue is drained as the
    /// next worker would. Never two runners inside the lane, and every
    /// unit of work is consumed (no lost notification).
    fn two_producers_two_workers(yields: usize) {
        model(move || {
            let m = Model::new(yields);
            let threads: Vec<_> = (0..4)
                .map(|i| {
                    let m = m.clone();
                    thread::spawn(move || if i < 2 { m.produce() } else { m.work_once() })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            loop {
                let item = m.queue.lock().unwrap().pop();
                if item.is_none() {
                    break;
                }
                m.run();
            }
            assert_eq!(m.done.load(Ordering::SeqCst), 2, "a notification was lost");
            assert!(m.sched.notify(), "the lane ends idle, not stuck scheduled");
        });
    }

    #[test]
    fn no_concurrent_runs_and_no_lost_work() {
        two_producers_two_workers(0);
    }

    /// The same where the first round stops early and goes through
    /// `requeue` (the budget path).
    #[test]
    fn yield_requeue_keeps_exclusivity_and_work() {
        two_producers_two_workers(1);
    }
}
