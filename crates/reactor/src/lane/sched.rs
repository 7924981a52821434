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

/// Run with:
/// `RUSTFLAGS="--cfg loom" cargo test -p keel-reactor --lib --release lane::sched`
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// Two notifiers each add one unit of work and notify; a run queue is a
    /// mutex-protected vec; two runner threads pop and run. Invariants: never
    /// two runners inside the lane, and all work is consumed.
    #[test]
    fn no_concurrent_runs_and_no_lost_work() {
        loom::model(|| {
            let sched = Arc::new(LaneSched::new_running());
            let work = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(AtomicUsize::new(0));
            let inside = Arc::new(AtomicUsize::new(0));
            let queue: Arc<Mutex<Vec<()>>> = Arc::new(Mutex::new(Vec::new()));

            // The creator finishes set-up.
            assert!(!sched.finish());

            let run = {
                let (sched, work, done, inside) =
                    (sched.clone(), work.clone(), done.clone(), inside.clone());
                move || {
                    if !sched.start() {
                        return;
                    }
                    loop {
                        assert_eq!(
                            inside.fetch_add(1, Ordering::SeqCst),
                            0,
                            "lane ran twice at once"
                        );
                        let n = work.swap(0, Ordering::SeqCst);
                        done.fetch_add(n, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        if !sched.finish() {
                            break;
                        }
                    }
                }
            };

            let mut handles = Vec::new();
            for _ in 0..2 {
                let (sched, work, queue) = (sched.clone(), work.clone(), queue.clone());
                handles.push(thread::spawn(move || {
                    work.fetch_add(1, Ordering::SeqCst);
                    if sched.notify() {
                        queue.lock().unwrap().push(());
                    }
                }));
            }
            let runner = {
                let queue = queue.clone();
                let run = run.clone();
                thread::spawn(move || {
                    let item = queue.lock().unwrap().pop();
                    if item.is_some() {
                        run();
                    }
                })
            };
            for h in handles {
                h.join().unwrap();
            }
            runner.join().unwrap();
            // Drain what is left on the queue, as the next worker would.
            while queue.lock().unwrap().pop().is_some() {
                run();
            }
            assert_eq!(done.load(Ordering::SeqCst), 2, "a notification was lost");
        });
    }
}
