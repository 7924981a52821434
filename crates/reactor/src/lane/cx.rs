//! What a lane's handlers can do through their [`LaneCtx`]: register
//! sources, schedule, move and cancel the lane's timers, close the lane, hand out
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
use crate::timer::{MissedTicks, TimerError, TimerId};

/// Drops the fires of `id` waiting in a lane's inbox.
fn drop_queued_fires(timers: &mut Vec<TimerId>, id: TimerId) {
    if !timers.is_empty() {
        timers.retain(|t| *t != id);
    }
}

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

    /// Cancels a timer of this lane (armed or not, reusable or not); no
    /// later `on_timer` call is made for it, and its id is dead. Returns
    /// whether it was still registered.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        let mut timers = lock(&self.core.timers);
        let was = timers.cancel(id);
        lock(&self.cell.inbox).timers.retain(|t| *t != id);
        drop(timers);
        self.drop_fires_this_round(id);
        if let Some(i) = self.local.reusable.iter().position(|t| *t == id) {
            self.local.reusable.swap_remove(i);
        }
        was
    }

    /// Makes a timer for this lane that is not armed yet and stays
    /// registered when it fires: arm it and move it (earlier or later) with
    /// [`LaneCtx::set_timer`], disarm it with [`LaneCtx::unset_timer`],
    /// free it with [`LaneCtx::cancel_timer`]. It keeps its one
    /// registration and its id however often it moves: the reactor holds
    /// one entry for it, armed or not, until it is cancelled or the lane
    /// closes. Moving an armed timer never allocates; arming one allocates
    /// only when more timers are armed at once than ever before.
    ///
    /// It calls [`Lane::on_timer`] with its id once per deadline it is
    /// armed at and reaches; after a fire it is unarmed until set again.
    ///
    /// # Examples
    ///
    /// A lane whose one timer follows a deadline that moves (as a
    /// protocol's next retransmission or keepalive does):
    ///
    /// ```
    /// use keel_reactor::{Lane, LaneCtx, Reactor, TimerId};
    /// use std::time::{Duration, Instant};
    ///
    /// #[derive(Default)]
    /// struct Protocol {
    ///     timer: Option<TimerId>,
    ///     fired: Vec<Instant>,
    /// }
    ///
    /// impl Lane for Protocol {
    ///     fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
    ///         assert_eq!(Some(timer), self.timer);
    ///         self.fired.push(Instant::now());
    ///     }
    /// }
    ///
    /// let mut reactor = Reactor::new()?;
    /// let start = Instant::now();
    /// let (lane, set) = reactor.handle().add_lane_with(Protocol::default(), |p, cx| {
    ///     let timer = cx.reusable_timer();
    ///     p.timer = Some(timer);
    ///     // Armed a second away, then moved to 20 ms, then to 30 ms.
    ///     cx.set_timer(timer, start + Duration::from_secs(1))?;
    ///     cx.set_timer(timer, start + Duration::from_millis(20))?;
    ///     cx.set_timer(timer, start + Duration::from_millis(30))
    /// });
    /// set?;
    /// assert_eq!(reactor.handle().timer_count(), 1);
    ///
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let mut fired = None;
    /// let give_up = Instant::now() + Duration::from_secs(10);
    /// while Instant::now() < give_up {
    ///     reactor.turn(Some(Duration::from_millis(10)))?;
    ///     if let Ok(f) = rx.try_recv() {
    ///         fired = Some(f);
    ///         break;
    ///     }
    ///     let tx = tx.clone();
    ///     lane.post(move |p, _| if !p.fired.is_empty() { tx.send(p.fired.clone()).unwrap() });
    /// }
    /// let fired: Vec<Instant> = fired.expect("the timer fires within 10 s");
    /// // It fired once, at its last deadline, and stays registered, unarmed.
    /// assert_eq!(fired.len(), 1);
    /// assert!(fired[0] >= start + Duration::from_millis(30));
    /// assert_eq!(reactor.handle().timer_count(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reusable_timer(&mut self) -> TimerId {
        let id = self.core.add_reusable_timer(self.cell.clone());
        self.local.reusable.push(id);
        id
    }

    /// Arms a timer of this lane at `deadline`, or moves it there if it is
    /// armed (earlier or later; a periodic timer's ticks then continue
    /// from `deadline`). The timer keeps its registration: no entry is
    /// added, none is left behind. From now on `on_timer` is called for it
    /// at `deadline`, not for the deadline it had: a fire of that one
    /// already delivered to this lane and not yet handled is dropped, as
    /// [`LaneCtx::cancel_timer`] drops one. Works on every live timer of
    /// this lane; [`LaneCtx::reusable_timer`] makes one that outlives its
    /// fires.
    ///
    /// # Errors
    ///
    /// [`TimerError::Gone`] if no timer has this id any more (cancelled,
    /// or a one-shot timer from [`LaneCtx::timer`] that fired);
    /// [`TimerError::OtherLane`] if it is not this lane's. Nothing changes.
    pub fn set_timer(&mut self, id: TimerId, deadline: Instant) -> Result<(), TimerError> {
        let inbox = &self.cell.inbox;
        let lane = Arc::as_ptr(self.cell).cast::<()>();
        self.core.set_timer(id, deadline, lane, || {
            drop_queued_fires(&mut lock(inbox).timers, id);
        })?;
        self.drop_fires_this_round(id);
        Ok(())
    }

    /// Disarms a timer of this lane, keeping it registered (and its id
    /// valid) for [`LaneCtx::set_timer`]; returns whether it was armed. A
    /// fire already delivered and not yet handled is dropped. A timer made
    /// by [`LaneCtx::timer`] that is disarmed stays registered too, until
    /// [`LaneCtx::cancel_timer`].
    ///
    /// # Errors
    ///
    /// As [`LaneCtx::set_timer`].
    pub fn unset_timer(&mut self, id: TimerId) -> Result<bool, TimerError> {
        let inbox = &self.cell.inbox;
        let lane = Arc::as_ptr(self.cell).cast::<()>();
        let was = self.core.unset_timer(id, lane, || {
            drop_queued_fires(&mut lock(inbox).timers, id);
        })?;
        self.drop_fires_this_round(id);
        Ok(was)
    }

    /// Fires of `id` taken into the round that is running are not handled.
    fn drop_fires_this_round(&mut self, id: TimerId) {
        // Once per id: a lane that moves its timer at every batch must not
        // grow this list (its room is reserved, see `CANCELS_PER_ROUND`).
        if !self.local.cancelled.contains(&id) {
            self.local.cancelled.push(id);
        }
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
