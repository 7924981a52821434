//! A lane's inbox: the work delivered to it between rounds (posted
//! closures, readiness, timer fires), how much room it reserves, and the
//! bound on queued timer fires. Generic over the closure type so that it
//! sits below the lane types that name it.

use crate::ready::Ready;
use crate::source::SourceId;
use crate::timer::TimerId;

/// Work delivered to a lane, handled in the lane's next round:
/// posts first, then readiness, then timers.
pub(super) struct Inbox<P> {
    pub(super) posts: Vec<P>,
    pub(super) events: Vec<(SourceId, Ready)>,
    pub(super) timers: Vec<TimerId>,
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
pub(super) const MAX_QUEUED_TICKS: usize = 65_536;

impl<P> Inbox<P> {
    /// An inbox with no room reserved, for a lane that is closing.
    pub(super) fn empty() -> Self {
        Inbox {
            posts: Vec::new(),
            events: Vec::new(),
            timers: Vec::new(),
        }
    }
}

impl<P> Default for Inbox<P> {
    fn default() -> Self {
        Inbox {
            posts: Vec::with_capacity(INBOX_POSTS),
            events: Vec::with_capacity(INBOX_EVENTS),
            timers: Vec::with_capacity(INBOX_TIMERS),
        }
    }
}

pub(super) fn push_event(events: &mut Vec<(SourceId, Ready)>, source: SourceId, ready: Ready) {
    // Coalesce with a recent event for the same source: one call drains both.
    let tail = events.len().saturating_sub(8);
    if let Some(e) = events[tail..].iter_mut().find(|(s, _)| *s == source) {
        e.1 |= ready;
    } else {
        events.push((source, ready));
    }
}
