//! How a lane runs: its rounds (posts, then readiness, then timers), the
//! budget that sends a busy lane to the back of the run queue, closing it,
//! and the [`LaneTask`] impl through which the core delivers work and runs
//! it. This is the lane run path: keep it free of extra indirection.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::inbox::{push_event, Inbox, MAX_QUEUED_TICKS};
use super::{Body, Flow, Lane, LaneCell, LaneCtx, Post};
use crate::core::{Core, LaneTask};
use crate::error::panic_message;
use crate::ready::Ready;
use crate::source::SourceId;
use crate::sync::lock;
use crate::timer::TimerId;

/// How many rounds a lane may run back to back before it goes to the back
/// of the run queue, so a busy lane cannot starve the others.
const ROUNDS_PER_RUN: usize = 16;

impl<L: Lane> LaneCell<L> {
    fn round(self: &Arc<Self>, core: &Arc<Core>, body: &mut Body<L>) -> bool {
        {
            let mut inbox = lock(&self.inbox);
            std::mem::swap(&mut *inbox, &mut body.work);
        }
        let Body { state, local, work } = body;
        let Some(state) = state.as_mut() else {
            self.discard_posts(core, &mut work.posts);
            work.events.clear();
            work.timers.clear();
            return false;
        };
        let mut yielded = false;
        let mut cx = LaneCtx {
            core,
            cell: self,
            local,
        };
        let mut posts = work.posts.drain(..);
        // Stop is checked before each closure (one atomic load), so a
        // stopped reactor does not first run everything still queued.
        while !core.is_stopped() {
            let Some(post) = posts.next() else { break };
            // Before the call: the running closure no longer waits, so it
            // may post its successor even into a full inbox.
            self.pending.fetch_sub(1, Ordering::Relaxed);
            post(state, &mut cx);
        }
        let left = posts.len();
        if left > 0 {
            self.pending.fetch_sub(left, Ordering::Relaxed);
            core.add_discarded(left);
        }
        // Drops the closures left (their destructors run).
        drop(posts);
        if core.is_stopped() {
            work.events.clear();
            work.timers.clear();
            cx.local.cancelled.clear();
            return false;
        }
        let mut i = 0;
        while i < work.events.len() && !core.is_stopped() {
            let (source, ready) = work.events[i];
            i += 1;
            // Deregistered while the event was queued: drop it.
            if !cx.local.sources.contains(&source) {
                continue;
            }
            if state.on_ready(&mut cx, source, ready) == Flow::Yielded {
                yielded = true;
                push_event(&mut lock(&self.inbox).events, source, ready);
            }
        }
        work.events.clear();
        for timer in work.timers.drain(..) {
            if core.is_stopped() {
                break;
            }
            if !cx.local.cancelled.contains(&timer) {
                state.on_timer(&mut cx, timer);
            }
        }
        cx.local.cancelled.clear();
        yielded
    }

    fn close_now(&self, core: &Core, body: &mut Body<L>) {
        // Closed before the inbox is taken: a post checks this under the
        // inbox lock, so none can land in the inbox after it is taken.
        self.sched.close();
        let sources = std::mem::take(&mut body.local.sources);
        if !sources.is_empty() {
            let mut table = lock(&core.sources);
            for s in sources {
                table.remove(s.0);
            }
        }
        let reusable = std::mem::take(&mut body.local.reusable);
        if !reusable.is_empty() {
            let mut timers = lock(&core.timers);
            for id in reusable {
                timers.cancel(id);
            }
        }
        if let Some(key) = lock(&self.key).take() {
            lock(&core.lanes).remove(key);
        }
        let inbox = std::mem::replace(&mut *lock(&self.inbox), Inbox::empty());
        // Counted before anything is dropped, as a drop may panic.
        core.add_discarded(self.pending.swap(0, Ordering::Relaxed));
        // The rest of an interrupted round (a panic drops it while
        // unwinding; this is for any path that does not).
        body.work.posts.clear();
        body.work.events.clear();
        body.work.timers.clear();
        // Dropped outside the locks: state and closures may own anything.
        body.state = None;
        drop(inbox);
    }

    /// Drops posted closures that will not run, keeping the counts right.
    fn discard_posts(&self, core: &Core, posts: &mut Vec<Post<L>>) {
        let n = posts.len();
        if n > 0 {
            self.pending.fetch_sub(n, Ordering::Relaxed);
            core.add_discarded(n);
            posts.clear();
        }
    }
}

impl<L: Lane> LaneTask for LaneCell<L> {
    fn run(self: Arc<Self>, core: &Arc<Core>) {
        if !self.sched.start() {
            return;
        }
        let mut rounds = 0;
        loop {
            // The state machine gives the lane to one runner at a time, so
            // the body is free; if that ever failed, stopping loudly beats
            // corrupting state.
            let mut body = match self.body.try_lock() {
                Ok(b) => b,
                Err(std::sync::TryLockError::WouldBlock) => {
                    panic!("keel-reactor bug: a lane was started on two threads at once")
                }
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            };
            let result = catch_unwind(AssertUnwindSafe(|| self.round(core, &mut body)));
            match result {
                Err(payload) => {
                    let message = panic_message(payload.as_ref());
                    let contained = self.contain_panics;
                    if contained {
                        // Recorded before the lane shows as closed, so
                        // whoever sees it closed finds the message.
                        *lock(&self.panic) = Some(message.clone());
                    }
                    // Dropping the state could panic again; contain it too.
                    let _ = catch_unwind(AssertUnwindSafe(|| self.close_now(core, &mut body)));
                    if !contained {
                        core.report_panic(message);
                    }
                    return;
                }
                Ok(yielded) => {
                    if body.local.close {
                        self.close_now(core, &mut body);
                        return;
                    }
                    if core.is_stopped() {
                        // No more rounds: what is left is dropped (and
                        // counted) at shutdown.
                        drop(body);
                        self.sched.finish();
                        return;
                    }
                    rounds += 1;
                    // Release the body *before* the state says the lane may
                    // run elsewhere: once `finish` or `requeue` lets go,
                    // another thread may start it at once.
                    drop(body);
                    if yielded || rounds >= ROUNDS_PER_RUN {
                        if self.sched.requeue() {
                            core.enqueue(self);
                        }
                        return;
                    }
                }
            }
            if !self.sched.finish() {
                return;
            }
        }
    }

    fn deliver_ready(&self, source: SourceId, ready: Ready) -> bool {
        push_event(&mut lock(&self.inbox).events, source, ready);
        self.sched.notify()
    }

    fn deliver_timer(&self, core: &Core, timer: TimerId, periodic: bool) -> bool {
        let mut inbox = lock(&self.inbox);
        if periodic && inbox.timers.len() >= MAX_QUEUED_TICKS {
            // The lane is far behind its timers (a poller on another
            // thread can expire faster than the lane handles fires): drop
            // the tick rather than grow without bound. One-shot fires are
            // never dropped.
            drop(inbox);
            core.add_skipped_ticks(1);
            return false;
        }
        inbox.timers.push(timer);
        drop(inbox);
        self.sched.notify()
    }

    fn is_closed(&self) -> bool {
        self.sched.is_closed()
    }

    fn shutdown(&self, core: &Core) {
        self.sched.close();
        let (state, leftover) = {
            let mut body = lock(&self.body);
            body.local.sources.clear();
            (body.state.take(), std::mem::take(&mut body.work.posts))
        };
        let inbox = std::mem::replace(&mut *lock(&self.inbox), Inbox::empty());
        core.add_discarded(self.pending.swap(0, Ordering::Relaxed));
        // Dropped outside the locks: posted closures may own anything.
        drop(leftover);
        drop(inbox);
        drop(state);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::lane::{LaneHandle, LaneOptions};
    use crate::slab::Key;

    struct Plain;
    impl Lane for Plain {}

    /// A lane that cannot keep up with a periodic timer holds at most
    /// `MAX_QUEUED_TICKS` of its fires; the rest are counted as skipped.
    /// One-shot fires are never dropped.
    #[test]
    fn periodic_fires_queued_for_a_lane_are_bounded() {
        let core = Core::new().unwrap();
        let (lane, ()) = LaneHandle::create(&core, Plain, LaneOptions::default(), |_, _| ());
        let task = lane.task();
        let timer = TimerId(Key::from_u64(1));
        let extra = 1000;
        for _ in 0..MAX_QUEUED_TICKS + extra {
            task.deliver_timer(&core, timer, true);
        }
        assert_eq!(lock(&lane.cell.inbox).timers.len(), MAX_QUEUED_TICKS);
        assert_eq!(core.skipped_ticks(), extra as u64);
        task.deliver_timer(&core, timer, false);
        assert_eq!(lock(&lane.cell.inbox).timers.len(), MAX_QUEUED_TICKS + 1);
        assert_eq!(core.skipped_ticks(), extra as u64);
        core.shutdown();
    }
}
