//! The `Send + Sync + Clone` handle to a reactor, and the ways a lane
//! reaches it ([`LaneCtx::reactor`], [`LaneHandle::reactor`]: they are
//! here, not in `lane`, because a `Handle` sits above lanes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::error::PostError;
use crate::lane::{Lane, LaneCtx, LaneHandle, LaneOptions};
use crate::reactor_lane::{cancel_closure_timer, closure_timer, reactor_lane};
use crate::timer::{MissedTicks, TimerId};

/// A handle to one reactor, usable from any thread: post closures, add
/// lanes, schedule and cancel timers, stop.
///
/// Posting wakes a reactor that sleeps in poll (one eventfd write, skipped
/// when a wake is already pending); it never makes the loop spin.
#[derive(Clone)]
pub struct Handle {
    pub(crate) core: Arc<Core>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl Handle {
    pub(crate) fn from_core(core: Arc<Core>) -> Handle {
        Handle { core }
    }

    /// Runs `f` on the reactor (on its own lane, serialized with the
    /// reactor's other closures and closure timers).
    ///
    /// # Errors
    ///
    /// As [`LaneHandle::post`]: the reactor stopped, or its lane's inbox is
    /// full ([`DEFAULT_MAX_POSTS`](crate::DEFAULT_MAX_POSTS) closures
    /// waiting); `f` is dropped before this returns.
    pub fn post<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce() + Send + 'static,
    {
        reactor_lane(&self.core).post(move |_, _| f())
    }

    /// How many posted closures this reactor dropped without running them
    /// (because it stopped, their lane closed, or at shutdown), over all
    /// its lanes. Their destructors ran.
    pub fn discarded_posts(&self) -> u64 {
        self.core.discarded()
    }

    /// Adds a lane owning `state` to this reactor, with default
    /// [`LaneOptions`].
    pub fn add_lane<L: Lane>(&self, state: L) -> LaneHandle<L> {
        LaneHandle::create(&self.core, state, LaneOptions::default(), |_, _| ()).0
    }

    /// Adds a lane and runs `init` on it right away, on the calling thread
    /// (typically to register the lane's sockets and start its timers).
    /// Readiness that arrives during `init` is handled after it returns.
    pub fn add_lane_with<L, R, F>(&self, state: L, init: F) -> (LaneHandle<L>, R)
    where
        L: Lane,
        F: FnOnce(&mut L, &mut LaneCtx<'_, L>) -> R,
    {
        LaneHandle::create(&self.core, state, LaneOptions::default(), init)
    }

    /// As [`Handle::add_lane_with`], with `options` (the inbox bound, panic
    /// containment). `max_posts: 0` is treated as 1.
    pub fn add_lane_with_options<L, R, F>(
        &self,
        state: L,
        options: LaneOptions,
        init: F,
    ) -> (LaneHandle<L>, R)
    where
        L: Lane,
        F: FnOnce(&mut L, &mut LaneCtx<'_, L>) -> R,
    {
        LaneHandle::create(&self.core, state, options, init)
    }

    /// Calls `f` on the reactor at `deadline`, then every `period` if given
    /// (at least [`MIN_PERIOD`](crate::MIN_PERIOD)). Periodic timers keep a
    /// drift-free schedule: each fire is due at `deadline + k * period`,
    /// and a late loop catches up fire by fire, up to
    /// [`MAX_CATCH_UP`](crate::MAX_CATCH_UP) fires per turn
    /// ([`MissedTicks::Burst`]).
    pub fn timer<F>(&self, deadline: Instant, period: Option<Duration>, f: F) -> TimerId
    where
        F: FnMut() + Send + 'static,
    {
        self.timer_with(deadline, period, MissedTicks::default(), f)
    }

    /// As [`Handle::timer`], with `missed` deciding what a periodic timer
    /// does when ticks were missed.
    pub fn timer_with<F>(
        &self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
        f: F,
    ) -> TimerId
    where
        F: FnMut() + Send + 'static,
    {
        closure_timer(&self.core, deadline, period, missed, Box::new(f))
    }

    /// How many ticks of this reactor's periodic timers were missed and
    /// not fired: passed over by [`MissedTicks::Skip`] and
    /// [`MissedTicks::Delay`], beyond [`MAX_CATCH_UP`](crate::MAX_CATCH_UP)
    /// under [`MissedTicks::Burst`], or dropped because a lane had a large
    /// backlog of timer fires it had not handled yet.
    pub fn skipped_ticks(&self) -> u64 {
        self.core.skipped_ticks()
    }

    /// How many timers this reactor holds now: every lane timer and
    /// closure timer still scheduled, and every
    /// [reusable](LaneCtx::reusable_timer) timer not cancelled, armed or
    /// not. Moving a timer never changes it. A diagnostic: it takes the
    /// timer lock.
    pub fn timer_count(&self) -> usize {
        self.core.timer_count()
    }

    /// Cancels a timer made by [`Handle::timer`]: it does not run again, even
    /// if its fire was already delivered to the reactor (e.g. cancelled by
    /// another timer of the same turn). Returns whether it was still in the
    /// timer queue (a one-shot whose fire is delivered is not).
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        cancel_closure_timer(&self.core, id)
    }

    /// Asks the reactor to stop: running handlers finish, then `run()` and
    /// runtime threads return.
    pub fn stop(&self) {
        self.core.stop();
    }

    /// Whether stop was requested.
    pub fn is_stopped(&self) -> bool {
        self.core.is_stopped()
    }
}

impl<L: Lane> LaneCtx<'_, L> {
    /// A handle to the reactor this lane runs on.
    pub fn reactor(&self) -> Handle {
        Handle::from_core(self.core().clone())
    }
}

impl<L: Lane> LaneHandle<L> {
    /// The reactor this lane lives on, if it still exists.
    pub fn reactor(&self) -> Option<Handle> {
        self.core().map(Handle::from_core)
    }
}
