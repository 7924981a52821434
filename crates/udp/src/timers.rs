//! The timer operations a handler reaches through its context, without the
//! context's type naming the lane type (a leaf: the conditioner and the
//! endpoints both use it).

use std::time::{Duration, Instant};

use keel_reactor::{Lane, LaneCtx, MissedTicks, TimerError, TimerId};

/// Schedules, moves and cancels timers of the lane a context belongs to.
pub(crate) trait Timers {
    fn add(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId;
    fn add_with(
        &mut self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
    ) -> TimerId;
    fn cancel(&mut self, id: TimerId) -> bool;
    fn reusable(&mut self) -> TimerId;
    fn set(&mut self, id: TimerId, deadline: Instant) -> Result<(), TimerError>;
    fn unset(&mut self, id: TimerId) -> Result<bool, TimerError>;
}

impl<L: Lane> Timers for LaneCtx<'_, L> {
    fn add(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timer(deadline, period)
    }

    fn add_with(
        &mut self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
    ) -> TimerId {
        self.timer_with(deadline, period, missed)
    }

    fn cancel(&mut self, id: TimerId) -> bool {
        self.cancel_timer(id)
    }

    fn reusable(&mut self) -> TimerId {
        self.reusable_timer()
    }

    fn set(&mut self, id: TimerId, deadline: Instant) -> Result<(), TimerError> {
        self.set_timer(id, deadline)
    }

    fn unset(&mut self, id: TimerId) -> Result<bool, TimerError> {
        self.unset_timer(id)
    }
}
