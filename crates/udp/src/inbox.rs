//! Sends handed to a lane from other threads: bounded by the lane's inbox,
//! and every one accepted is either sent or counted.

use std::cell::Cell;
use std::sync::Arc;

use keel_reactor::{Lane, LaneCtx, LaneHandle, PostError};

use crate::counters::{bump_shared, Counters};
use crate::error::SendError;

thread_local! {
    /// Set while this thread offers a closure to a lane: a closure the lane
    /// refuses is dropped before `post` returns, and its send was never
    /// accepted, so its guard must not count it as discarded.
    static OFFERING: Cell<bool> = const { Cell::new(false) };
}

/// Travels with a send that was accepted (`Ok` returned to the caller)
/// until it reaches the send path. Dropped before that (the lane closed,
/// the runtime stopped, the session ended), it counts the send in
/// `send_discarded`: an accepted datagram is never lost silently.
pub(crate) struct Accepted {
    /// `None` for a job that is not a send (nothing to count).
    counters: Option<Arc<Counters>>,
    done: bool,
}

impl Accepted {
    /// A guard for one send about to be offered with [`offer`].
    pub(crate) fn new(counters: &Arc<Counters>) -> Accepted {
        Accepted {
            counters: Some(counters.clone()),
            done: false,
        }
    }

    /// The guard of a job that carries no datagram: it counts nothing.
    pub(crate) fn not_a_send() -> Accepted {
        Accepted {
            counters: None,
            done: true,
        }
    }

    /// The send reached the endpoint's send path (where anything that
    /// happens to it is counted there).
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Accepted {
    fn drop(&mut self) {
        if let (false, Some(c)) = (self.done, &self.counters) {
            if !OFFERING.with(Cell::get) {
                bump_shared(&c.send_discarded, 1);
            }
        }
    }
}

/// Offers `job` (which carries the send's [`Accepted`] guard) to `lane`. A
/// full inbox is counted (`send_inbox_full`) and returned as
/// [`SendError::InboxFull`]; the refused job's guard counts nothing.
pub(crate) fn offer<L, F>(
    lane: &LaneHandle<L>,
    counters: &Arc<Counters>,
    job: F,
) -> Result<(), SendError>
where
    L: Lane,
    F: FnOnce(&mut L, &mut LaneCtx<'_, L>) + Send + 'static,
{
    OFFERING.with(|o| o.set(true));
    let posted = lane.post(job);
    OFFERING.with(|o| o.set(false));
    match posted {
        Ok(()) => Ok(()),
        Err(PostError::Full { capacity }) => {
            bump_shared(&counters.send_inbox_full, 1);
            Err(SendError::InboxFull { capacity })
        }
        // Closed, or a refusal a lane handle does not give (no such lane).
        Err(_) => Err(SendError::Closed),
    }
}
