//! Creating a lane, and what a [`LaneHandle`] offers other threads:
//! posting closures (bounded), scheduling and cancelling the lane's
//! timers, closing it. (`LaneHandle::reactor` is in `crate::handle`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::inbox::Inbox;
use super::sched::LaneSched;
use super::{
    Body, Lane, LaneCell, LaneCtx, LaneHandle, LaneLocal, LaneOptions, Post, CANCELS_PER_ROUND,
};
use crate::core::{Core, LaneTask};
use crate::error::PostError;
use crate::sync::lock;
use crate::timer::{MissedTicks, TimerId};

impl<L: Lane> Clone for LaneHandle<L> {
    fn clone(&self) -> Self {
        LaneHandle {
            cell: self.cell.clone(),
        }
    }
}

impl<L: Lane> std::fmt::Debug for LaneHandle<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneHandle")
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl<L: Lane> LaneHandle<L> {
    /// Creates a lane on `core`, running `init` on the calling thread with
    /// the lane already claimed, so events that arrive for sources it
    /// registers are queued, not lost, and handled once it returns.
    pub(crate) fn create<R>(
        core: &Arc<Core>,
        state: L,
        options: LaneOptions,
        init: impl FnOnce(&mut L, &mut LaneCtx<'_, L>) -> R,
    ) -> (LaneHandle<L>, R) {
        let cell = Arc::new(LaneCell {
            core: Arc::downgrade(core),
            key: Mutex::new(None),
            sched: LaneSched::new_running(),
            pending: AtomicUsize::new(0),
            max_posts: options.max_posts.max(1),
            contain_panics: options.contain_panics,
            panic: Mutex::new(None),
            inbox: Mutex::new(Inbox::default()),
            body: Mutex::new(Body {
                state: Some(state),
                local: LaneLocal {
                    // Room for the timers a round cancels, reserved like the
                    // inboxes' so cancelling does not allocate on the lane.
                    cancelled: Vec::with_capacity(CANCELS_PER_ROUND),
                    ..LaneLocal::default()
                },
                work: Inbox::default(),
            }),
        });
        let task: Arc<dyn LaneTask> = cell.clone();
        let key = lock(&core.lanes).insert(task);
        *lock(&cell.key) = Some(key);
        let result = {
            let mut body = lock(&cell.body);
            let Body { state, local, .. } = &mut *body;
            let state = state.as_mut().expect("new lane has state");
            let mut cx = LaneCtx {
                core,
                cell: &cell,
                local,
            };
            let result = init(state, &mut cx);
            // Timers `init` moved or cancelled: their earlier fires were
            // dropped from the inbox already, and the list is for a
            // round's own fires (none here), so a fire that comes before
            // the first round must not be skipped by it.
            local.cancelled.clear();
            result
        };
        if core.is_stopped() {
            // Created after stop: nobody will run or shut it down.
            cell.shutdown(core);
            lock(&core.lanes).remove(key);
        } else if cell.sched.finish() && cell.sched.requeue() {
            core.enqueue(cell.clone());
        }
        (LaneHandle { cell }, result)
    }

    pub(crate) fn task(&self) -> Arc<dyn LaneTask> {
        self.cell.clone()
    }

    /// Runs `f` on the lane with `&mut` to its state, if the lane accepts
    /// it. The bound holds for posts from any thread, the lane's own
    /// handlers included.
    ///
    /// # Errors
    ///
    /// [`PostError::Full`] if [`LaneOptions::max_posts`] closures already
    /// wait; [`PostError::Closed`] if the lane is closed or its reactor
    /// stopped or is gone. Either way `f` is dropped before this returns,
    /// on the calling thread.
    pub fn post<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut L, &mut LaneCtx<'_, L>) + Send + 'static,
    {
        let Some(core) = self.cell.core.upgrade() else {
            return Err(PostError::Closed);
        };
        // Checked once before boxing, so a refused post costs no
        // allocation; checked again under the lock to be exact.
        if let Err(e) = self.admit(&core, true) {
            drop(f);
            return Err(e);
        }
        self.push_post(&core, Box::new(f), true)
    }

    /// Runs `f` on the lane like [`LaneHandle::post`], but is never refused
    /// for a full inbox, only when the lane is closed or its reactor stopped
    /// ([`PostError::Closed`]). Meant for rare control work (stop, shutdown,
    /// close) that a flood of ordinary posts must not crowd out; it counts
    /// towards the bound that ordinary posts see.
    ///
    /// # Errors
    ///
    /// [`PostError::Closed`]; `f` is dropped before this returns.
    pub fn post_control<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut L, &mut LaneCtx<'_, L>) + Send + 'static,
    {
        match self.cell.core.upgrade() {
            Some(core) => self.push_post(&core, Box::new(f), false),
            None => Err(PostError::Closed),
        }
    }

    /// Whether a post would be accepted now (closed before full).
    fn admit(&self, core: &Core, bounded: bool) -> Result<(), PostError> {
        if self.cell.sched.is_closed() || core.is_stopped() {
            Err(PostError::Closed)
        } else if bounded && self.cell.pending.load(Ordering::Relaxed) >= self.cell.max_posts {
            Err(PostError::Full {
                capacity: self.cell.max_posts,
            })
        } else {
            Ok(())
        }
    }

    fn push_post(&self, core: &Arc<Core>, post: Post<L>, bounded: bool) -> Result<(), PostError> {
        let mut inbox = lock(&self.cell.inbox);
        if let Err(e) = self.admit(core, bounded) {
            // Dropped outside the lock: its destructor may post to this lane.
            drop(inbox);
            drop(post);
            return Err(e);
        }
        inbox.posts.push(post);
        self.cell.pending.fetch_add(1, Ordering::Relaxed);
        drop(inbox);
        if self.cell.sched.notify() {
            core.enqueue(self.cell.clone());
        }
        Ok(())
    }

    /// How many posted closures are waiting to run (accepted, not started).
    /// One atomic load.
    pub fn queued_posts(&self) -> usize {
        self.cell.pending.load(Ordering::Relaxed)
    }

    /// Schedules a timer that calls this lane's [`Lane::on_timer`] at
    /// `deadline`, then every `period` if given (drift-free, at least
    /// [`MIN_PERIOD`](crate::MIN_PERIOD), late ticks as
    /// [`MissedTicks::Burst`]). `None` if the reactor is gone.
    pub fn timer(&self, deadline: Instant, period: Option<Duration>) -> Option<TimerId> {
        self.timer_with(deadline, period, MissedTicks::default())
    }

    /// As [`LaneHandle::timer`], with `missed` deciding what a periodic
    /// timer does when ticks were missed.
    pub fn timer_with(
        &self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
    ) -> Option<TimerId> {
        let core = self.cell.core.upgrade()?;
        Some(core.add_timer(deadline, period, missed, self.cell.clone(), |_| ()))
    }

    /// Cancels a timer of this lane. From another thread this races with a
    /// fire already under way; from the lane itself use
    /// [`LaneCtx::cancel_timer`], which guarantees no later call.
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        let Some(core) = self.cell.core.upgrade() else {
            return false;
        };
        let was = lock(&core.timers).cancel(id);
        lock(&self.cell.inbox).timers.retain(|t| *t != id);
        was
    }

    /// Closes the lane: after the closures already posted run, its state is
    /// dropped (closing the sockets it owns) and it never runs again.
    /// Returns false if it was already closed or its reactor stopped. Never
    /// refused for a full inbox (it is a [`LaneHandle::post_control`]).
    pub fn close(&self) -> bool {
        self.post_control(|_, cx| cx.close()).is_ok()
    }

    /// Whether the lane is closed.
    pub fn is_closed(&self) -> bool {
        self.cell.sched.is_closed()
    }

    /// The message of the panic that closed this lane, for a lane made with
    /// [`LaneOptions::contain_panics`]; `None` while it has not panicked
    /// (or if it does not contain panics: then the panic stops the reactor
    /// and is returned as [`Error::HandlerPanic`](crate::Error::HandlerPanic)).
    pub fn panic_message(&self) -> Option<String> {
        lock(&self.cell.panic).clone()
    }

    /// The core this lane lives on, if it still exists (for
    /// `LaneHandle::reactor` in `crate::handle`).
    pub(crate) fn core(&self) -> Option<Arc<Core>> {
        self.cell.core.upgrade()
    }
}
