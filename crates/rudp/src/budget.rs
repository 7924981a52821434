//! Receive memory: what one connection holds for its peer (partly
//! received messages, held-back messages, de-duplication windows), its
//! cap, and the budget all connections of a server share.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The default [`RecvBudget`] of an endpoint or server: 256 MiB, what 64
/// connections can hold at the default `max_recv_buffer` (4 MiB), or 1/16
/// of a 4 GiB game server.
pub const DEFAULT_RECV_BUDGET: usize = 256 << 20;

/// Whole messages one connection holds back for ordering at most, over
/// all its channels: the message that fills a gap releases them all in
/// one packet, so this bounds that packet's work (about 0.5 ms). Past it,
/// a held-back whole message is refused unacknowledged.
pub(crate) const MAX_HELD_MESSAGES: usize = 16_384;

/// Bytes of receive state all the connections of a server may hold in
/// all: partly received messages, messages held back for ordering and
/// de-duplication windows, counted as bytes arrive (not as a header
/// claims) with their bookkeeping. Cloning shares the budget: every lane
/// of a [`Server`](crate::Server) draws on one.
///
/// When it is spent, a frame that would need more memory is refused: its
/// packet is not acknowledged, so the peer resends it later, and the
/// connection counts it in
/// [`Stats::budget_refused`](crate::Stats::budget_refused). Whole
/// messages that arrive in order need no memory and always pass. Lanes
/// check and take with separate atomic operations, so the budget can be
/// passed by at most one frame per lane at a time.
///
/// # Examples
///
/// ```
/// use keel_rudp::RecvBudget;
///
/// let budget = RecvBudget::new(64 << 20);
/// let shared = budget.clone();
/// assert_eq!((shared.limit(), shared.used()), (64 << 20, 0));
/// ```
#[derive(Debug, Clone)]
pub struct RecvBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: usize,
    used: AtomicUsize,
    refused: AtomicU64,
}

impl RecvBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        RecvBudget {
            inner: Arc::new(Inner {
                limit,
                used: AtomicUsize::new(0),
                refused: AtomicU64::new(0),
            }),
        }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes held now by the connections sharing it.
    pub fn used(&self) -> usize {
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Frames refused because it was spent, over all connections sharing it.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    fn try_take(&self, n: usize) -> bool {
        let used = self.inner.used.load(Ordering::Relaxed);
        if used.saturating_add(n) > self.inner.limit {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.inner.used.fetch_add(n, Ordering::Relaxed);
        true
    }

    fn force_take(&self, n: usize) {
        self.inner.used.fetch_add(n, Ordering::Relaxed);
    }

    fn give(&self, n: usize) {
        self.inner.used.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Why a message frame was refused (not acknowledged, to be resent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The connection's `max_recv_buffer` ([`RecvMem::take`]).
    Cap,
    /// The shared [`RecvBudget`] ([`RecvMem::take`]).
    Budget,
    /// Too far ahead of its channel's window.
    Window,
    /// A message's first fragment under `MIN_PIECE` bytes.
    Small,
}

/// What one connection holds, against its cap and the shared budget.
/// Dropping it gives its bytes back to the budget.
#[derive(Debug)]
pub(crate) struct RecvMem {
    held: usize,
    /// Whole messages held back for ordering ([`MAX_HELD_MESSAGES`]).
    held_messages: usize,
    /// `max_recv_buffer`: frames that are not the next one a reliable
    /// channel waits for stop here.
    cap: usize,
    /// The next message a reliable channel waits for is taken up to this
    /// (`max_recv_buffer + max_message_size`), so the cap cannot deadlock
    /// a channel.
    exempt_cap: usize,
    budget: Option<RecvBudget>,
}

impl RecvMem {
    pub fn new(cap: usize, max_message: usize) -> Self {
        RecvMem {
            held: 0,
            held_messages: 0,
            cap,
            exempt_cap: cap.saturating_add(max_message),
            budget: None,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Draws on `budget` from now on (moving what is held onto it).
    pub fn set_budget(&mut self, budget: RecvBudget) {
        if let Some(old) = self.budget.take() {
            old.give(self.held);
        }
        budget.force_take(self.held);
        self.budget = Some(budget);
    }

    /// Takes `n` bytes if the cap (`exempt`: the larger one) and the
    /// budget allow.
    pub fn take(&mut self, n: usize, exempt: bool) -> Result<(), Refusal> {
        if n == 0 {
            return Ok(());
        }
        let cap = if exempt { self.exempt_cap } else { self.cap };
        if self.held + n > cap {
            return Err(Refusal::Cap);
        }
        if let Some(b) = &self.budget {
            if !b.try_take(n) {
                return Err(Refusal::Budget);
            }
        }
        self.held += n;
        Ok(())
    }

    /// Counts one more held-back message, if under [`MAX_HELD_MESSAGES`]
    /// (`force`: whatever the count, for a completed partial message).
    pub fn hold_message(&mut self, force: bool) -> bool {
        if !force && self.held_messages >= MAX_HELD_MESSAGES {
            return false;
        }
        self.held_messages += 1;
        true
    }

    /// One held-back message was delivered.
    pub fn release_message(&mut self) {
        self.held_messages = self.held_messages.saturating_sub(1);
    }

    /// Takes `n` bytes whatever the limits: for moves that free at least
    /// as much right after (a completed message leaving its partial).
    pub fn force_take(&mut self, n: usize) {
        if let Some(b) = &self.budget {
            b.force_take(n);
        }
        self.held += n;
    }

    /// Gives `n` bytes back.
    pub fn give(&mut self, n: usize) {
        debug_assert!(n <= self.held, "gives back {n} of {}", self.held);
        let n = n.min(self.held);
        if let Some(b) = &self.budget {
            b.give(n);
        }
        self.held -= n;
    }
}

impl Drop for RecvMem {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give(self.held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_share_the_budget_and_give_back_when_dropped() {
        let budget = RecvBudget::new(100);
        let mut a = RecvMem::new(80, 1000);
        let mut b = RecvMem::new(80, 1000);
        a.set_budget(budget.clone());
        b.set_budget(budget.clone());
        assert_eq!(a.take(60, false), Ok(()));
        assert_eq!(a.take(30, false), Err(Refusal::Cap));
        assert_eq!(a.take(30, true), Ok(()), "the exempt cap is higher");
        assert_eq!(b.take(20, false), Err(Refusal::Budget));
        assert_eq!(budget.refused(), 1);
        assert_eq!(b.take(10, false), Ok(()));
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 10);
        b.give(10);
        assert_eq!((b.held(), budget.used()), (0, 0));
    }
}
