//! Lanes: the unit of serialization. A lane owns its state; its handlers get
//! `&mut` to it and never run on two threads at once.
//!
//! This file holds the lane's types: the public [`Lane`] trait and its
//! settings, and the types that refer to one another (a `LaneCell` holds
//! closures that take a `LaneCtx`, which holds the cell; a `LaneHandle` is
//! a cell shared), so they are defined together. Their behaviour lives in
//! the files below; `run.rs`, `cx.rs` and `handle.rs` use these types,
//! `inbox.rs` and `sched.rs`, and not one another:
//!
//! * `sched.rs`: the lock-free state machine that gives a lane to one
//!   runner at a time (model-checked with loom);
//! * `inbox.rs`: the work queued for a lane between its rounds;
//! * `run.rs`: how a lane runs (its rounds, closing it) and the
//!   `LaneTask` impl the core drives it through;
//! * `cx.rs`: what handlers can do through `LaneCtx`;
//! * `handle.rs`: creating a lane, and what `LaneHandle` offers other
//!   threads.
//!
//! `LaneCtx::reactor` and `LaneHandle::reactor` are in `crate::handle`:
//! they return a `Handle`, which sits above lanes.

mod cx;
mod handle;
mod inbox;
mod run;
pub(crate) mod sched;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};

use crate::core::Core;
use crate::ready::Ready;
use crate::slab::Key;
use crate::source::SourceId;
use crate::timer::TimerId;
use inbox::Inbox;
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
    fn on_ready(&mut self, cx: &mut LaneCtx<'_, Self>, source: SourceId, ready: Ready) -> Flow {
        let _ = (cx, source, ready);
        Flow::Drained
    }

    /// A timer scheduled for this lane fired.
    fn on_timer(&mut self, cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
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
    /// the bound is refused ([`LaneHandle::post`] returns
    /// [`PostError::Full`](crate::PostError::Full)), so producers that
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

/// A closure posted to a lane.
type Post<L> = Box<dyn FnOnce(&mut L, &mut LaneCtx<'_, L>) + Send>;

/// Timer cancellations room is reserved for per round (see `LaneLocal`).
pub(super) const CANCELS_PER_ROUND: usize = 16;

/// Lane-local bookkeeping, only touched by the thread running the lane.
#[derive(Default)]
struct LaneLocal {
    sources: Vec<SourceId>,
    cancelled: Vec<TimerId>,
    /// Reusable timers made by the lane and not cancelled: unarmed, they
    /// never fire, so closing the lane cancels them (an armed timer of a
    /// closed lane is cancelled when it fires).
    reusable: Vec<TimerId>,
    close: bool,
}

/// What only the lane's runner touches, behind a lock the state machine
/// keeps uncontended.
struct Body<L: Lane> {
    state: Option<L>,
    local: LaneLocal,
    /// The round being handled (swapped with the inbox at its start).
    work: Inbox<Post<L>>,
}

/// One lane: its state machine, inbox and body. The core holds it as an
/// `Arc<dyn LaneTask>`; handles and contexts hold it typed.
struct LaneCell<L: Lane> {
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
    inbox: Mutex<Inbox<Post<L>>>,
    body: Mutex<Body<L>>,
}

/// A `Send + Sync + Clone` handle to a lane: post closures that run on the
/// lane with `&mut` to its state, schedule its timers, close it.
pub struct LaneHandle<L: Lane> {
    cell: Arc<LaneCell<L>>,
}

/// What a lane's handlers can do besides touching the state: register
/// sources, schedule timers, reach the reactor, close the lane.
pub struct LaneCtx<'a, L: Lane> {
    core: &'a Arc<Core>,
    cell: &'a Arc<LaneCell<L>>,
    local: &'a mut LaneLocal,
}
