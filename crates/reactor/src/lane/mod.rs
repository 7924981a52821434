//! Lanes: the unit of serialization. A lane owns its state; its handlers get
//! `&mut` to it and never run on two threads at once.

pub(crate) mod sched;

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mio::event::Source;
use mio::Interest;

use crate::core::{Core, LaneTask};
use crate::error::{panic_message, PostError};
use crate::ready::Ready;
use crate::slab::Key;
use crate::source::SourceId;
use crate::sync::lock;
use crate::timer::{MissedTicks, TimerId};
use sched::LaneSched;

/// What a readiness handler tells the lane after handling an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// The source was drained until `WouldBlock`; the next edge will come.
    Drained,
    /// The handler stopped early (its budget ran out). No new edge will come
    /// for data already queued, so the lane puts itself back on the run
    /// queue and calls the handler again with the same readiness.
    Yielded,
}

/// A lane's behaviour. Implement it on the state the lane owns.
///
/// Both handlers have defaults that do nothing, so a lane that only runs
/// posted closures needs an empty `impl Lane for MyState {}`.
pub trait Lane: Send + Sized + 'static {
    /// A registered source became ready. mio is edge-triggered: drain the
    /// source until `WouldBlock` and return [`Flow::Drained`], or stop early
    /// and return [`Flow::Yielded`].
    fn on_ready(&mut self, cx: &mut LaneCx<'_, Self>, source: SourceId, ready: Ready) -> Flow {
        let _ = (cx, source, ready);
        Flow::Drained
    }

    /// A timer scheduled for this lane fired.
    fn on_timer(&mut self, cx: &mut LaneCx<'_, Self>, timer: TimerId) {
        let _ = (cx, timer);
    }
}

/// The default of [`LaneOptions::max_posts`].
pub const DEFAULT_MAX_POSTS: usize = 65_536;

/// Settings of one lane, for
/// [`Handle::add_lane_with_options`](crate::Handle::add_lane_with_options).
/// Build it with struct update syntax so later fields keep their defaults:
///
/// ```
/// use keel_reactor::LaneOptions;
///
/// let options = LaneOptions {
///     max_posts: 1024,
///     ..LaneOptions::default()
/// };
/// assert!(!options.contain_panics);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneOptions {
    /// How many posted closures may wait in the lane's inbox. A post over
    /// the bound is refused ([`LaneHandle::try_post`] returns
    /// [`PostError::Full`], [`LaneHandle::post`] false), so producers that
    /// outrun the lane cannot grow memory without limit. Only
    /// [`LaneHandle::post_control`] may go over it. 0 is treated as 1.
    /// Default: [`DEFAULT_MAX_POSTS`].
    pub max_posts: usize,
    /// Whether a panic in this lane's handlers, posted closures or timers
    /// closes only this lane (its state and waiting closures are dropped,
    /// the message is kept for [`LaneHandle::panic_message`]) instead of
    /// stopping the whole reactor with
    /// [`Error::HandlerPanic`](crate::Error::HandlerPanic). Default: false.
    pub contain_panics: bool,
}

impl Default for LaneOptions {
    fn default() -> Self {
        LaneOptions {
            max_posts: DEFAULT_MAX_POSTS,
            contain_panics: false,
        }
    }
}

type Post<L> = Box<dyn FnOnce(&mut L, &mut LaneCx<'_, L>) + Send>;

/// Work delivered to a lane, handled in the lane's next round:
/// posts first, then readiness, then timers.
struct Inbox<L: Lane> {
    posts: Vec<Post<L>>,
    events: Vec<(SourceId, Ready)>,
    timers: Vec<TimerId>,
}

/// Room reserved in each of a lane's two inboxes when the lane is made, so
/// that a burst the lane has not seen before (a stall that makes a periodic
/// timer fire many missed periods at once, many sources ready together)
/// does not grow a vector on the hot thread: the steady state allocates
/// nothing, and bursts up to these sizes do not either.
const INBOX_POSTS: usize = 16;
const INBOX_EVENTS: usize = 16;
const INBOX_TIMERS: usize = 64;

/// At most this many periodic timer fires wait in one lane's inbox; more
/// are dropped and counted as skipped ticks. Far above what the lane's
/// timers make in a pass (at most `MAX_CATCH_UP` each), so it only bites
/// when the lane cannot keep up with its timers at all.
const MAX_QUEUED_TICKS: usize = 65_536;

impl<L: Lane> Inbox<L> {
    /// An inbox with no room reserved, for a lane that is closing.
    fn empty() -> Self {
        Inbox {
            posts: Vec::new(),
            events: Vec::new(),
            timers: Vec::new(),
        }
    }
}

impl<L: Lane> Default for Inbox<L> {
    fn default() -> Self {
        Inbox {
            posts: Vec::with_capacity(INBOX_POSTS),
            events: Vec::with_capacity(INBOX_EVENTS),
            timers: Vec::with_capacity(INBOX_TIMERS),
        }
    }
}

/// Lane-local bookkeeping, only touched by the thread running the lane.
#[derive(Default)]
pub(crate) struct LaneLocal {
    sources: Vec<SourceId>,
    cancelled: Vec<TimerId>,
    close: bool,
}

struct Body<L: Lane> {
    state: Option<L>,
    local: LaneLocal,
    work: Inbox<L>,
}

pub(crate) struct LaneCell<L: Lane> {
    core: Weak<Core>,
    key: Mutex<Option<Key>>,
    sched: LaneSched,
    /// Posted closures accepted and neither started nor dropped yet (those
    /// in the inbox and those of the running round not reached yet). Only
    /// incremented under the inbox lock, so the bound checked under that
    /// lock cannot be overshot by racing posters.
    pending: AtomicUsize,
    /// Bound on `pending` for ordinary posts (at least 1).
    max_posts: usize,
    contain_panics: bool,
    /// The message of a contained panic.
    panic: Mutex<Option<String>>,
    inbox: Mutex<Inbox<L>>,
    body: Mutex<Body<L>>,
}

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
        let mut cx = LaneCx {
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

fn push_event(events: &mut Vec<(SourceId, Ready)>, source: SourceId, ready: Ready) {
    // Coalesce with a recent event for the same source: one call drains both.
    let tail = events.len().saturating_sub(8);
    if let Some(e) = events[tail..].iter_mut().find(|(s, _)| *s == source) {
        e.1 |= ready;
    } else {
        events.push((source, ready));
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

/// A `Send + Sync + Clone` handle to a lane: post closures that run on the
/// lane with `&mut` to its state, schedule its timers, close it.
pub struct LaneHandle<L: Lane> {
    cell: Arc<LaneCell<L>>,
}

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
        init: impl FnOnce(&mut L, &mut LaneCx<'_, L>) -> R,
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
                local: LaneLocal::default(),
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
            let mut cx = LaneCx {
                core,
                cell: &cell,
                local,
            };
            init(state, &mut cx)
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

    /// Runs `f` on the lane with `&mut` to its state. Returns false (and
    /// drops `f` before returning) if the lane is closed, its reactor
    /// stopped or is gone, or its inbox is full ([`LaneOptions::max_posts`]
    /// closures waiting). [`LaneHandle::try_post`] says which.
    pub fn post<F>(&self, f: F) -> bool
    where
        F: FnOnce(&mut L, &mut LaneCx<'_, L>) + Send + 'static,
    {
        self.try_post(f).is_ok()
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
    pub fn try_post<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut L, &mut LaneCx<'_, L>) + Send + 'static,
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
    /// (false). Meant for rare control work (stop, shutdown, close) that a
    /// flood of ordinary posts must not crowd out; it counts towards the
    /// bound that ordinary posts see.
    pub fn post_control<F>(&self, f: F) -> bool
    where
        F: FnOnce(&mut L, &mut LaneCx<'_, L>) + Send + 'static,
    {
        match self.cell.core.upgrade() {
            Some(core) => self.push_post(&core, Box::new(f), false).is_ok(),
            None => false,
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
    /// [`LaneCx::cancel_timer`], which guarantees no later call.
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
        self.post_control(|_, cx| cx.close())
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

/// What a lane's handlers can do besides touching the state: register
/// sources, schedule timers, reach the reactor, close the lane.
pub struct LaneCx<'a, L: Lane> {
    core: &'a Arc<Core>,
    cell: &'a Arc<LaneCell<L>>,
    local: &'a mut LaneLocal,
}

impl<L: Lane> LaneCx<'_, L> {
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

    /// As [`LaneCx::timer`], with `missed` deciding what a periodic timer
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

    /// The core this lane runs on (for `LaneCx::reactor` in
    /// `crate::handle`).
    pub(crate) fn core(&self) -> &Arc<Core> {
        self.core
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

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
