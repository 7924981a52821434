//! What a lane's handlers can do through their [`LaneCtx`]: register
//! sources, schedule and cancel the lane's timers, close the lane, hand out
//! a [`LaneHandle`]. (`LaneCtx::reactor` is in `crate::handle`.)

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Source;
use mio::Interest;

use super::{Lane, LaneCtx, LaneHandle};
use crate::core::{Core, LaneTask};
use crate::source::SourceId;
use crate::sync::lock;
use crate::timer::{MissedTicks, TimerId};

impl<L: Lane> LaneCtx<'_, L> {
    /// Registers `source` into this lane with `interest`. Its readiness is
    /// delivered to [`Lane::on_ready`] with the returned id.
    pub fn register<S>(&mut self, source: &mut S, interest: Interest) -> io::Result<SourceId>
    where
        S: Source + ?Sized,
    {
        let task: Arc<dyn LaneTask> = self.cell.clone();
        let id = SourceId(lock(&self.core.sources).insert(task));
        if let Err(e) = self.core.registry.register(source, id.token(), interest) {
            lock(&self.core.sources).remove(id.0);
            return Err(e);
        }
        self.local.sources.push(id);
        Ok(id)
    }

    /// Changes the interest of a source registered into this lane.
    pub fn reregister<S>(
        &mut self,
        source: &mut S,
        id: SourceId,
        interest: Interest,
    ) -> io::Result<()>
    where
        S: Source + ?Sized,
    {
        self.check_owned(id)?;
        self.core.registry.reregister(source, id.token(), interest)
    }

    /// Deregisters a source. Events for it that are already queued are
    /// dropped; its slot may be reused, but the new owner's id differs.
    pub fn deregister<S>(&mut self, source: &mut S, id: SourceId) -> io::Result<()>
    where
        S: Source + ?Sized,
    {
        self.check_owned(id)?;
        let result = self.core.registry.deregister(source);
        lock(&self.core.sources).remove(id.0);
        self.local.sources.retain(|s| *s != id);
        result
    }

    fn check_owned(&self, id: SourceId) -> io::Result<()> {
        if self.local.sources.contains(&id) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("source {id:?} is not registered in this lane"),
            ))
        }
    }

    /// Schedules a timer for this lane at `deadline`, repeating every
    /// `period` if given (drift-free, at least
    /// [`MIN_PERIOD`](crate::MIN_PERIOD), late ticks as
    /// [`MissedTicks::Burst`]); it calls [`Lane::on_timer`].
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timer_with(deadline, period, MissedTicks::default())
    }

    /// As [`LaneCtx::timer`], with `missed` deciding what a periodic timer
    /// does when ticks were missed.
    pub fn timer_with(
        &mut self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
    ) -> TimerId {
        self.core
            .add_timer(deadline, period, missed, self.cell.clone(), |_| ())
    }

    /// Cancels a timer of this lane; no later `on_timer` call is made for it.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        let was = lock(&self.core.timers).cancel(id);
        lock(&self.cell.inbox).timers.retain(|t| *t != id);
        self.local.cancelled.push(id);
        was
    }

    /// Closes the lane once this handler returns: its state is dropped and
    /// its sources are deregistered.
    pub fn close(&mut self) {
        self.local.close = true;
    }

    /// A handle to this lane, to hand to other threads.
    pub fn lane(&self) -> LaneHandle<L> {
        LaneHandle {
            cell: self.cell.clone(),
        }
    }

    /// The core this lane runs on (for `LaneCtx::reactor` in
    /// `crate::handle`).
    pub(crate) fn core(&self) -> &Arc<Core> {
        self.core
    }
}
