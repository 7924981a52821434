//! The state one reactor shares between its driving thread(s) and its
//! handles: registry, waker, source and lane tables, timers, run queue,
//! and the loops that drive them (`turn`, `run_worker`).
//!
//! The core sits below the lanes: it knows a lane only as the object-safe
//! [`LaneTask`] it stores in its tables and run queue, so it depends on
//! leaf modules alone. Lanes (`crate::lane`) implement `LaneTask` on top
//! of it; the reactor's own lane (`crate::reactor_lane`) is a lane, so the
//! core keeps it type-erased.
//!
//! Lock order (outer to inner): `timers` → lane inbox → `sched`;
//! `sources` → lane inbox → `sched`. Nothing takes `timers` or `sources`
//! while holding a lane inbox or `sched`.

use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use crate::error::Error;
use crate::ready::Ready;
use crate::slab::Slab;
use crate::source::SourceId;
use crate::sync::lock;
use crate::timer::{poll_timeout, Fire, MissedTicks, TimerError, TimerId, TimerQueue};

/// The token reserved for the reactor's waker. Source tokens pack a slab
/// index and generation and never reach this value.
pub(crate) const WAKER_TOKEN: Token = Token(usize::MAX);

/// How long an idle runtime thread spins for work before it parks.
const SPIN_FOR: Duration = Duration::from_micros(50);

/// How many readiness events one poll collects.
const EVENTS_CAPACITY: usize = 1024;

thread_local! {
    /// The core whose lanes this thread is running right now (its address),
    /// so work enqueued from inside a handler does not wake the poller: the
    /// running thread will pick it up itself.
    static RUNNER_OF: Cell<usize> = const { Cell::new(0) };
}

/// Object-safe view of a lane for the reactor's tables and run queue,
/// implemented by `lane::LaneCell`. Defined here, where it is called, so
/// the core does not depend on lanes. Its methods take the core by
/// reference (a lane's runner already holds it) rather than upgrading the
/// lane's weak pointer on every run.
pub(crate) trait LaneTask: Send + Sync {
    fn run(self: Arc<Self>, core: &Arc<Core>);
    /// Queues readiness; true if the caller must enqueue the lane.
    fn deliver_ready(&self, source: SourceId, ready: Ready) -> bool;
    /// Queues a timer fire; true if the caller must enqueue the lane.
    fn deliver_timer(&self, core: &Core, timer: TimerId, periodic: bool) -> bool;
    fn is_closed(&self) -> bool;
    fn shutdown(&self, core: &Core);
}

/// How the core holds its reactor lane: type-erased, and unwind-safe like
/// the lane it stands for (so `Handle` and `Reactor` stay `UnwindSafe` and
/// `RefUnwindSafe`).
pub(crate) type ReactorLaneSlot = dyn Any + Send + Sync + UnwindSafe + RefUnwindSafe;

pub(crate) struct IoDriver {
    poll: Poll,
    events: Events,
    ready: Vec<Arc<dyn LaneTask>>,
    fired: Vec<Fire<Arc<dyn LaneTask>>>,
}

pub(crate) struct Sched {
    runq: VecDeque<Arc<dyn LaneTask>>,
    /// Present when no thread is polling; taken by the thread that polls.
    io: Option<IoDriver>,
    /// Threads of a shared runtime parked until there is work or the poll
    /// is free, most recently parked last: they are woken last-in
    /// first-out, so the thread woken is the one whose cache is warmest
    /// and the others stay asleep.
    parked: Vec<std::thread::Thread>,
    stopped: bool,
}

pub(crate) struct Core {
    pub(crate) registry: mio::Registry,
    waker: mio::Waker,
    /// A wake is in flight; saves redundant eventfd writes.
    woken: AtomicBool,
    pub(crate) sources: Mutex<Slab<Arc<dyn LaneTask>>>,
    pub(crate) timers: Mutex<TimerQueue<Arc<dyn LaneTask>>>,
    pub(crate) lanes: Mutex<Slab<Arc<dyn LaneTask>>>,
    sched: Mutex<Sched>,
    stopped: AtomicBool,
    /// A thread of a shared runtime that found no work and is spinning
    /// briefly before it parks (at most one at a time): work handed to the
    /// runtime while it spins needs no futex wake.
    spinning: AtomicBool,
    /// Lanes on the run queue, readable without the lock (for the spinner).
    queued: AtomicUsize,
    /// No thread is polling (readable without the lock, for the spinner).
    io_free: AtomicBool,
    /// Threads driving this core (set by the runtime as it starts them).
    workers: AtomicUsize,
    /// At most this many of them are kept awake (running lanes, polling or
    /// spinning): the CPUs this process may use. Waking more only makes
    /// them queue for a CPU and adds futex round trips, which is what made
    /// oversubscribed shared runtimes slower than smaller ones.
    max_awake: AtomicUsize,
    panic: Mutex<Option<String>>,
    /// Posted closures dropped without running (stop, closed lanes,
    /// shutdown).
    discarded: AtomicU64,
    /// Ticks of periodic timers missed and not fired.
    skipped_ticks: AtomicU64,
    /// The reactor's own lane (`crate::reactor_lane`, its only reader and
    /// writer), set once right after construction. Type-erased because it
    /// is a lane and the core sits below lanes; not on any lane's run path.
    reactor_lane: OnceLock<Box<ReactorLaneSlot>>,
}

impl Core {
    pub(crate) fn new() -> io::Result<Arc<Core>> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = mio::Waker::new(poll.registry(), WAKER_TOKEN)?;
        let core = Arc::new(Core {
            registry,
            waker,
            woken: AtomicBool::new(false),
            sources: Mutex::new(Slab::default()),
            timers: Mutex::new(TimerQueue::default()),
            lanes: Mutex::new(Slab::default()),
            sched: Mutex::new(Sched {
                runq: VecDeque::new(),
                io: Some(IoDriver {
                    poll,
                    events: Events::with_capacity(EVENTS_CAPACITY),
                    // Reserved for the same reason as the lane inboxes: a
                    // catch-up of many missed periods, or many ready lanes,
                    // must not allocate on the polling thread.
                    ready: Vec::with_capacity(EVENTS_CAPACITY),
                    fired: Vec::with_capacity(64),
                }),
                parked: Vec::new(),
                stopped: false,
            }),
            stopped: AtomicBool::new(false),
            spinning: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            io_free: AtomicBool::new(true),
            workers: AtomicUsize::new(0),
            max_awake: AtomicUsize::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            panic: Mutex::new(None),
            discarded: AtomicU64::new(0),
            skipped_ticks: AtomicU64::new(0),
            reactor_lane: OnceLock::new(),
        });
        Ok(core)
    }

    /// Stores the reactor's own lane (once; later calls are ignored).
    pub(crate) fn set_reactor_lane(&self, lane: Box<ReactorLaneSlot>) {
        let _ = self.reactor_lane.set(lane);
    }

    /// The reactor's own lane, as stored by [`Core::set_reactor_lane`].
    pub(crate) fn reactor_lane(&self) -> Option<&(dyn Any + Send + Sync)> {
        // Drops the unwind-safety markers, which `downcast_ref` does not take.
        self.reactor_lane
            .get()
            .map(|b| -> &(dyn Any + Send + Sync) { &**b })
    }

    fn addr(&self) -> usize {
        self as *const Core as usize
    }

    fn in_runner(&self) -> bool {
        RUNNER_OF.with(|c| c.get() == self.addr())
    }

    /// Wakes the thread sleeping in poll (if one is). Cheap when a wake is
    /// already pending.
    pub(crate) fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            // A failed eventfd write means the counter is saturated, which
            // only happens when a wake is pending anyway.
            let _ = self.waker.wake();
        }
    }

    /// Puts a lane that was notified (IDLE → SCHEDULED) on the run queue
    /// and makes sure a thread will run it.
    pub(crate) fn enqueue(&self, task: Arc<dyn LaneTask>) {
        let mut s = lock(&self.sched);
        s.runq.push_back(task);
        self.queued.store(s.runq.len(), Ordering::SeqCst);
        if !s.parked.is_empty()
            && !self.spinning.load(Ordering::SeqCst)
            && self.room_to_wake(&s) > 0
        {
            wake_one(&mut s);
        } else if s.io.is_none() && !self.in_runner() {
            drop(s);
            self.wake();
        }
    }

    /// Schedules a lane timer and wakes the poller if it is now the earliest.
    pub(crate) fn add_timer(
        &self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
        lane: Arc<dyn LaneTask>,
        before_unlock: impl FnOnce(TimerId),
    ) -> TimerId {
        let mut timers = lock(&self.timers);
        let id = timers.insert(deadline, period, missed, lane);
        before_unlock(id);
        let earliest = timers.next_deadline() == Some(deadline);
        drop(timers);
        if earliest {
            self.wake();
        }
        id
    }

    /// Registers an unarmed reusable timer for a lane.
    pub(crate) fn add_reusable_timer(&self, lane: Arc<dyn LaneTask>) -> TimerId {
        lock(&self.timers).insert_reusable(lane)
    }

    /// Arms or moves a timer of the lane at `lane` to `deadline`, running
    /// `before_unlock` if it did (with the timer lock held, so no fire of
    /// the timer can be delivered meanwhile), and wakes the poller if the
    /// reactor's earliest deadline is now earlier (moving a timer later
    /// needs no wake: the poller at worst wakes early and finds nothing).
    pub(crate) fn set_timer(
        &self,
        id: TimerId,
        deadline: Instant,
        lane: *const (),
        before_unlock: impl FnOnce(),
    ) -> Result<(), TimerError> {
        let mut timers = lock(&self.timers);
        let before = timers.next_deadline();
        timers.set(id, deadline, |t| same_lane(t, lane))?;
        before_unlock();
        drop(timers);
        if before.is_none_or(|b| deadline < b) {
            self.wake();
        }
        Ok(())
    }

    /// Disarms a timer of the lane at `lane`, keeping it registered, running
    /// `before_unlock` if it could (with the timer lock held); returns
    /// whether it was armed.
    pub(crate) fn unset_timer(
        &self,
        id: TimerId,
        lane: *const (),
        before_unlock: impl FnOnce(),
    ) -> Result<bool, TimerError> {
        let mut timers = lock(&self.timers);
        let was = timers.unset(id, |t| same_lane(t, lane))?;
        before_unlock();
        Ok(was)
    }

    /// How many timers are registered (armed or not), over all lanes.
    pub(crate) fn timer_count(&self) -> usize {
        lock(&self.timers).len()
    }

    /// Counts posted closures dropped without running.
    pub(crate) fn add_discarded(&self, n: usize) {
        if n > 0 {
            self.discarded.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn discarded(&self) -> u64 {
        self.discarded.load(Ordering::Relaxed)
    }

    /// Counts ticks of periodic timers that were missed and not fired.
    pub(crate) fn add_skipped_ticks(&self, n: u64) {
        if n > 0 {
            self.skipped_ticks.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn skipped_ticks(&self) -> u64 {
        self.skipped_ticks.load(Ordering::Relaxed)
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let parked = {
            let mut s = lock(&self.sched);
            s.stopped = true;
            std::mem::take(&mut s.parked)
        };
        for t in parked {
            t.unpark();
        }
        self.wake();
    }

    pub(crate) fn report_panic(&self, message: String) {
        let mut p = lock(&self.panic);
        if p.is_none() {
            *p = Some(message);
        }
        drop(p);
        self.stop();
    }

    pub(crate) fn take_panic(&self) -> Option<Error> {
        lock(&self.panic)
            .clone()
            .map(|message| Error::HandlerPanic { message })
    }

    /// Polls once and turns readiness and due timers into notified lanes,
    /// collected in `io.ready`.
    fn poll_io(&self, io: &mut IoDriver, timeout: Option<Duration>) -> io::Result<()> {
        let next = lock(&self.timers).next_deadline();
        let timer_timeout = poll_timeout(Instant::now(), next);
        let timeout = match (timeout, timer_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match io.poll.poll(&mut io.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        // Clear before looking at any queue: a wake requested after this
        // point makes the next poll return at once, so none is lost.
        self.woken.store(false, Ordering::Release);
        if !io.events.is_empty() {
            let sources = lock(&self.sources);
            for event in io.events.iter() {
                if event.token() == WAKER_TOKEN {
                    continue;
                }
                let source = SourceId::from_token(event.token());
                // A stale token (slot freed or reused) finds nothing here.
                if let Some(lane) = sources.get(source.0) {
                    if lane.deliver_ready(source, Ready::from_event(event)) {
                        io.ready.push(lane.clone());
                    }
                }
            }
        }
        let now = Instant::now();
        // Fires are delivered with the timer lock held (the lock order
        // allows it), so a lane that moves, disarms or cancels a timer
        // (which takes this lock, then its inbox) finds each fire either
        // still in the queue or already in its inbox, never in between.
        let mut timers = lock(&self.timers);
        let skipped = timers.expire(now, &mut io.fired);
        for (id, lane, periodic) in io.fired.drain(..) {
            if lane.is_closed() {
                timers.cancel(id);
            } else if lane.deliver_timer(self, id, periodic) {
                io.ready.push(lane);
            }
        }
        drop(timers);
        self.add_skipped_ticks(skipped);
        Ok(())
    }

    /// One iteration for a reactor driven by its owner's thread: poll (not
    /// longer than `timeout`, not at all if work is queued), then run the
    /// lanes that were ready. Returns how many lane runs it made.
    pub(crate) fn turn(self: &Arc<Core>, timeout: Option<Duration>) -> Result<usize, Error> {
        let _runner = RunnerGuard::enter(self);
        let (mut io, timeout) = {
            let mut s = lock(&self.sched);
            if s.stopped {
                return self.take_panic().map_or(Ok(0), Err);
            }
            let io =
                s.io.take()
                    .expect("turn is only called by the reactor's owner, one thread at a time");
            let timeout = if s.runq.is_empty() {
                timeout
            } else {
                Some(Duration::ZERO)
            };
            (io, timeout)
        };
        let polled = self.poll_io(&mut io, timeout);
        let queued = {
            let mut s = lock(&self.sched);
            s.runq.extend(io.ready.drain(..));
            s.io = Some(io);
            s.runq.len()
        };
        polled?;
        // Lanes requeued while these run wait for the next turn.
        let mut ran = 0;
        for _ in 0..queued {
            let task = lock(&self.sched).runq.pop_front();
            let Some(task) = task else { break };
            task.run(self);
            ran += 1;
        }
        match self.take_panic() {
            Some(e) => Err(e),
            None => Ok(ran),
        }
    }

    /// The loop of one runtime thread (leader/follower). With one thread
    /// per core this is a plain event loop.
    pub(crate) fn run_worker(self: &Arc<Core>) -> Result<(), Error> {
        let _runner = RunnerGuard::enter(self);
        let mut s = lock(&self.sched);
        // Whether this thread may spin before parking: not twice in a row
        // without finding work, so an idle runtime parks all its threads.
        let mut may_spin = true;
        loop {
            if s.stopped {
                return Ok(());
            }
            if let Some(task) = s.runq.pop_front() {
                self.queued.store(s.runq.len(), Ordering::SeqCst);
                if !s.runq.is_empty()
                    && !s.parked.is_empty()
                    && !self.spinning.load(Ordering::SeqCst)
                    && self.room_to_wake(&s) > 0
                {
                    wake_one(&mut s);
                }
                drop(s);
                task.run(self);
                may_spin = true;
                s = lock(&self.sched);
                continue;
            }
            if let Some(mut io) = s.io.take() {
                // Leader: wait for readiness while followers wait for us.
                self.io_free.store(false, Ordering::SeqCst);
                drop(s);
                let polled = self.poll_io(&mut io, None);
                s = lock(&self.sched);
                s.runq.extend(io.ready.drain(..));
                s.io = Some(io);
                self.io_free.store(true, Ordering::SeqCst);
                self.queued.store(s.runq.len(), Ordering::SeqCst);
                // Hand the poll on: this thread runs one ready lane; the
                // others and the poll want one thread each. A spinning
                // thread takes one of those without a futex wake.
                if !s.parked.is_empty() {
                    let spinner = usize::from(self.spinning.load(Ordering::SeqCst));
                    let wanted = s
                        .runq
                        .len()
                        .saturating_sub(spinner)
                        .min(self.room_to_wake(&s));
                    for _ in 0..wanted {
                        wake_one(&mut s);
                    }
                }
                may_spin = true;
                if let Err(e) = polled {
                    drop(s);
                    self.stop();
                    return Err(Error::Io(e));
                }
                continue;
            }
            // Nothing to run and someone else polls. One thread spins for a
            // moment (work usually comes within microseconds when the
            // runtime is busy, and a futex sleep/wake costs more than
            // that); the others park.
            if may_spin && !self.spinning.swap(true, Ordering::SeqCst) {
                drop(s);
                may_spin = self.spin_for_work();
                self.spinning.store(false, Ordering::SeqCst);
                s = lock(&self.sched);
                continue;
            }
            // Park. Whoever wakes us takes our entry off the stack; a
            // spurious return removes it here.
            let me = std::thread::current();
            s.parked.push(me.clone());
            drop(s);
            std::thread::park();
            s = lock(&self.sched);
            if let Some(pos) = s.parked.iter().position(|t| t.id() == me.id()) {
                s.parked.remove(pos);
            }
            may_spin = true;
        }
    }

    /// How many parked threads may be woken without exceeding `max_awake`.
    fn room_to_wake(&self, s: &Sched) -> usize {
        let awake = self
            .workers
            .load(Ordering::Relaxed)
            .saturating_sub(s.parked.len());
        self.max_awake.load(Ordering::Relaxed).saturating_sub(awake)
    }

    /// Caps the threads kept awake (runtime start-up; at least 1).
    pub(crate) fn set_max_awake(&self, n: usize) {
        self.max_awake.store(n.max(1), Ordering::Relaxed);
    }

    /// Registers one more thread driving this core (runtime start-up).
    pub(crate) fn add_worker(&self) {
        self.workers.fetch_add(1, Ordering::Relaxed);
    }

    /// Spins (yielding the CPU between checks) until work shows up or
    /// `SPIN_FOR` passes. Returns whether work showed up.
    fn spin_for_work(&self) -> bool {
        let start = Instant::now();
        loop {
            if self.queued.load(Ordering::SeqCst) > 0
                || self.io_free.load(Ordering::SeqCst)
                || self.stopped.load(Ordering::SeqCst)
            {
                return true;
            }
            for _ in 0..32 {
                std::hint::spin_loop();
            }
            // On an oversubscribed machine the thread that would make the
            // work may be waiting for this CPU.
            std::thread::yield_now();
            if start.elapsed() >= SPIN_FOR {
                return false;
            }
        }
    }

    /// Drops every lane's state (closing its sockets), timers, sources and
    /// the poll itself. Called once the threads driving the core are gone.
    pub(crate) fn shutdown(&self) {
        self.stop();
        let lanes = lock(&self.lanes).drain();
        for lane in &lanes {
            lane.shutdown(self);
        }
        drop(lanes);
        drop(lock(&self.sources).drain());
        lock(&self.timers).clear();
        let (runq, io) = {
            let mut s = lock(&self.sched);
            (std::mem::take(&mut s.runq), s.io.take())
        };
        drop(runq);
        drop(io);
    }
}

/// Whether a timer's target is the lane cell at `lane` (compared by
/// address only).
fn same_lane(target: &Arc<dyn LaneTask>, lane: *const ()) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(target), lane)
}

/// Wakes the most recently parked thread.
fn wake_one(s: &mut Sched) {
    if let Some(t) = s.parked.pop() {
        t.unpark();
    }
}

struct RunnerGuard {
    prev: usize,
}

impl RunnerGuard {
    fn enter(core: &Core) -> RunnerGuard {
        let prev = RUNNER_OF.with(|c| c.replace(core.addr()));
        RunnerGuard { prev }
    }
}

impl Drop for RunnerGuard {
    fn drop(&mut self) {
        RUNNER_OF.with(|c| c.set(self.prev));
    }
}
