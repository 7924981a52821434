//! The reactor's own lane: closures posted to the reactor
//! ([`Handle::post`](crate::Handle::post)) and closure timers
//! ([`Handle::timer`](crate::Handle::timer)) run on it, serialized with each
//! other.
//!
//! It is an ordinary lane, so it sits above `lane`; the core stores it
//! type-erased (the core sits below lanes) and this module is the only one
//! that puts it there and reads it back.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::core::{Core, LaneTask};
use crate::lane::{Lane, LaneCtx, LaneHandle, LaneOptions};
use crate::sync::lock;
use crate::timer::{MissedTicks, TimerId};

/// The state of the lane every reactor has for closures posted to the
/// reactor itself and for closure timers.
pub(crate) struct ReactorLane {
    /// Closure timers: the callback and whether it is one-shot.
    timers: HashMap<TimerId, (TimerFn, bool)>,
    /// Timers cancelled through a handle whose cleanup has not run yet: a
    /// fire already delivered in the same round must not call them.
    cancelled: Arc<Mutex<Vec<TimerId>>>,
}

type TimerFn = Box<dyn FnMut() + Send>;

impl Lane for ReactorLane {
    fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
        if lock(&self.cancelled).contains(&timer) {
            return;
        }
        let one_shot = match self.timers.get_mut(&timer) {
            Some((f, one_shot)) => {
                f();
                *one_shot
            }
            None => return,
        };
        if one_shot {
            self.timers.remove(&timer);
        }
    }
}

/// What the core keeps for its reactor lane.
struct Installed {
    lane: LaneHandle<ReactorLane>,
    /// Shared with the lane's state: closure timers cancelled by a handle.
    cancelled: Arc<Mutex<Vec<TimerId>>>,
}

/// A new core with its reactor lane in place: what a
/// [`Reactor`](crate::Reactor) and each reactor of a
/// [`Runtime`](crate::Runtime) are built on.
pub(crate) fn new_core() -> io::Result<Arc<Core>> {
    let core = Core::new()?;
    let cancelled = Arc::new(Mutex::new(Vec::new()));
    let state = ReactorLane {
        timers: HashMap::new(),
        cancelled: cancelled.clone(),
    };
    let lane = LaneHandle::create(&core, state, LaneOptions::default(), |_, _| ()).0;
    core.set_reactor_lane(Box::new(Installed { lane, cancelled }));
    Ok(core)
}

fn installed(core: &Core) -> &Installed {
    core.reactor_lane()
        .and_then(|any| any.downcast_ref::<Installed>())
        .expect("the reactor lane is set at construction (new_core)")
}

/// The reactor's own lane, for [`Handle::post`](crate::Handle::post).
pub(crate) fn reactor_lane(core: &Core) -> &LaneHandle<ReactorLane> {
    &installed(core).lane
}

/// Posts a closure timer on the reactor lane.
pub(crate) fn closure_timer(
    core: &Core,
    deadline: Instant,
    period: Option<Duration>,
    missed: MissedTicks,
    f: Box<dyn FnMut() + Send>,
) -> TimerId {
    let lane = reactor_lane(core).clone();
    let task: Arc<dyn LaneTask> = lane.task();
    core.add_timer(deadline, period, missed, task, |id| {
        // Queued before the timer can fire (we hold the timer lock), and a
        // lane runs its posts before its timers, so the closure is in place.
        // A control post: a flood of Handle::post must not lose a timer.
        let _ = lane.post_control(move |st: &mut ReactorLane, _| {
            st.timers.insert(id, (f, period.is_none()));
        });
    })
}

/// Cancels a closure timer; returns whether it was still in the queue.
pub(crate) fn cancel_closure_timer(core: &Core, id: TimerId) -> bool {
    let was = lock(&core.timers).cancel(id);
    let installed = installed(core);
    // Marked first: a fire of it already delivered (even in the round that
    // is running this cancel) is skipped; the cleanup below runs before any
    // later round's timers.
    lock(&installed.cancelled).push(id);
    let _ = installed.lane.post_control(move |st: &mut ReactorLane, _| {
        st.timers.remove(&id);
        lock(&st.cancelled).retain(|t| *t != id);
    });
    was
}
