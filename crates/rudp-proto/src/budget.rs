//! Receive memory: what one connection holds for its peer (partly
//! received messages, held-back messages, de-duplication windows), its
//! cap, and the budget all connections of a server share; and the send
//! side's budget: messages queued or awaiting acknowledgement over all
//! connections of a server.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The default [`RecvBudget`] of an endpoint or server: 256 MiB, what 64
/// connections can hold at the default `max_recv_buffer` (4 MiB), or 1/16
/// of a 4 GiB game server.
pub const DEFAULT_RECV_BUDGET: usize = 256 << 20;

/// The default [`SendBudget`] of an endpoint or server: 256 MiB. What
/// 64 connections hold at the default `max_send_buffer` (4 MiB), so the
/// 16 GiB that 4,096 connections could hold at their caps is out of reach;
/// 64 KiB of reliable data in flight for each of 4,096 players (320 KB/s
/// each at 200 ms of RTT, far above a game's reliable traffic: its
/// snapshots are unreliable and leave the queue once sent); and with
/// [`DEFAULT_RECV_BUDGET`] 512 MiB in all, 1/8 of a 4 GiB game server.
pub const DEFAULT_SEND_BUDGET: usize = 256 << 20;

/// Bytes a queued message is counted for in the [`SendBudget`] besides
/// its data and an eighth of it (see [`SendBudget`]), so that neither
/// many small messages nor large ones hold much more memory than the
/// budget says. Per message: its 64-byte slot in the channel's queue, its
/// chunk list, the allocations' headers and the data's smallest
/// allocation; per packet that carries a piece of it while
/// unacknowledged, the loss-recovery record (the eighth of the data
/// covers that for messages of several packets). Measured with
/// `examples/hostile_send.rs`, each message or fragment in a packet of
/// its own (the worst case): a 16-byte message holds about 400 bytes, a
/// 1,024-byte one 1,340, a 16 KiB one in 15 fragments 19,300.
pub const SEND_MESSAGE_OVERHEAD: usize = 384;

/// What a message of `len` bytes counts for in the send budget: its data,
/// an eighth more, and [`SEND_MESSAGE_OVERHEAD`].
pub(crate) fn send_cost(len: usize) -> usize {
    len + len / 8 + SEND_MESSAGE_OVERHEAD
}

/// Whole messages one connection holds back for ordering at most, over
/// all its channels: the message that fills a gap releases them all in
/// one packet, so this bounds that packet's work (about 0.5 ms). Past it,
/// a held-back whole message is refused unacknowledged.
pub(crate) const MAX_HELD_MESSAGES: usize = 16_384;

/// Bytes of receive state all the connections of a server may hold in
/// all: partly received messages, messages held back for ordering and
/// de-duplication windows, counted as bytes arrive (not as a header
/// claims) with their bookkeeping. Cloning shares the budget: every lane
/// of a `keel_rudp::Server` draws on one.
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
/// use keel_rudp_proto::RecvBudget;
///
/// let budget = RecvBudget::new(64 << 20);
/// let shared = budget.clone();
/// assert_eq!((shared.limit(), shared.used()), (64 << 20, 0));
/// ```
#[derive(Debug, Clone)]
pub struct RecvBudget {
    inner: Arc<Counter>,
}

/// A limit in bytes shared by the connections of an endpoint (or of all
/// the lanes of a server): what is used, and how often it refused. The
/// state behind both [`RecvBudget`] and [`SendBudget`].
///
/// A quarter of the limit is a reserve, split evenly over the connections
/// the endpoints drawing on it may hold (their `max_connections`, added up
/// as each endpoint is made): each connection's first bytes up to its
/// quota come from it, whatever the others hold, and the rest of the limit
/// is open to all. So connections that fill the budget (peers that never
/// acknowledge, or that send unfinished fragments) cannot starve the
/// others of their quota, and what is used never passes the limit.
#[derive(Debug)]
struct Counter {
    limit: usize,
    used: AtomicUsize,
    /// Of `used`, the bytes taken within the connections' quotas.
    reserved: AtomicUsize,
    refused: AtomicU64,
    /// Connections the endpoints drawing on it may hold, in all.
    slots: AtomicUsize,
}

impl Counter {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Counter {
            limit,
            used: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            slots: AtomicUsize::new(0),
        })
    }

    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The reserve: a quarter of the limit, once an endpoint said how
    /// many connections it may hold (none before: all of it is open).
    fn reserve(&self) -> usize {
        if self.slots.load(Ordering::Relaxed) == 0 {
            0
        } else {
            self.limit / 4
        }
    }

    /// What each connection is sure to get: the reserve over the slots.
    fn quota(&self) -> usize {
        self.reserve() / self.slots.load(Ordering::Relaxed).max(1)
    }

    /// Takes `n` bytes for a connection that holds `in_quota` bytes within
    /// its quota: from its quota first, the rest from the open part if it
    /// fits there (the check and the take are separate operations, so
    /// concurrent takers can pass the open part by one take each). Returns
    /// how many came from the quota; else counts a refusal and returns the
    /// bytes used.
    fn try_take(&self, n: usize, in_quota: usize) -> Result<usize, usize> {
        let from_quota = n.min(self.quota().saturating_sub(in_quota));
        let open = n - from_quota;
        let used = self.used.load(Ordering::Relaxed);
        if open > 0 {
            let used_open = used.saturating_sub(self.reserved.load(Ordering::Relaxed));
            if used_open.saturating_add(open) > self.limit - self.reserve() {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(used);
            }
        }
        self.used.fetch_add(n, Ordering::Relaxed);
        if from_quota > 0 {
            self.reserved.fetch_add(from_quota, Ordering::Relaxed);
        }
        Ok(from_quota)
    }

    /// Takes `n` bytes from the open part whatever the limit.
    fn force_take(&self, n: usize) {
        self.used.fetch_add(n, Ordering::Relaxed);
    }

    /// Gives back `n` bytes, `from_quota` of them within a quota.
    fn give(&self, n: usize, from_quota: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
        if from_quota > 0 {
            self.reserved.fetch_sub(from_quota, Ordering::Relaxed);
        }
    }
}

/// A connection's bytes against a shared [`Counter`]: all it holds, and
/// how many of them are within its quota (given back last).
#[derive(Debug, Default)]
struct Share {
    held: usize,
    in_quota: usize,
}

impl Share {
    fn try_take(&mut self, c: &Counter, n: usize) -> Result<(), usize> {
        let q = c.try_take(n, self.in_quota)?;
        self.held += n;
        self.in_quota += q;
        Ok(())
    }

    fn force_take(&mut self, c: Option<&Counter>, n: usize) {
        if let Some(c) = c {
            c.force_take(n);
        }
        self.held += n;
    }

    fn give(&mut self, c: Option<&Counter>, n: usize) {
        let n = n.min(self.held);
        // The open part goes back first, so the quota stays held longest.
        let from_quota = n.saturating_sub(self.held - self.in_quota);
        if let Some(c) = c {
            c.give(n, from_quota);
        }
        self.held -= n;
        self.in_quota -= from_quota;
    }

    /// Moves everything held from `old` (if any) to `new`, as open bytes.
    fn rehome(&mut self, old: Option<&Counter>, new: &Counter) {
        let held = self.held;
        self.give(old, held);
        self.force_take(Some(new), held);
    }
}

/// Connections an endpoint drawing on a budget may hold: the reserve of
/// a budget is split over these, added up over its endpoints.
pub(crate) fn add_slots(c: &RecvBudget, s: &SendBudget, n: usize) {
    c.inner.slots.fetch_add(n, Ordering::Relaxed);
    s.inner.slots.fetch_add(n, Ordering::Relaxed);
}

/// An endpoint that drew on the budgets goes: its slots with it.
pub(crate) fn remove_slots(c: &RecvBudget, s: &SendBudget, n: usize) {
    c.inner.slots.fetch_sub(n, Ordering::Relaxed);
    s.inner.slots.fetch_sub(n, Ordering::Relaxed);
}

impl RecvBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        RecvBudget {
            inner: Counter::new(limit),
        }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes held now by the connections sharing it.
    pub fn used(&self) -> usize {
        self.inner.used()
    }

    /// Frames refused because it was spent, over all connections sharing it.
    pub fn refused(&self) -> u64 {
        self.inner.refused()
    }
}

/// Bytes of messages all the connections of a server hold to send: queued,
/// or sent and awaiting the peer's acknowledgement (reliable channels),
/// each message counted with its bookkeeping: its length, an eighth more,
/// and [`SEND_MESSAGE_OVERHEAD`] (a 1,024-byte message counts 1,536
/// bytes, a 16-byte one 402), so that what the connections hold in memory
/// stays within the budget whatever the size of the messages. Cloning shares the budget: every lane of a
/// `keel_rudp::Server` draws on one.
///
/// Each connection is also held to its own `max_send_buffer`
/// ([`SendError::Backpressure`](crate::SendError::Backpressure): that
/// connection is slow); this bounds their sum. When it is spent,
/// [`Connection::send`](crate::Connection::send) refuses with
/// [`SendError::BudgetSpent`](crate::SendError::BudgetSpent) (the server
/// is out of send memory, whatever the connection), queues nothing, and
/// counts it in [`Stats::send_budget_refused`](crate::Stats::send_budget_refused),
/// [`EndpointStats::send_budget_refused`](crate::EndpointStats::send_budget_refused)
/// and [`SendBudget::refused`]. Bytes come back as the peers acknowledge
/// (unreliable messages once sent) and when a connection is dropped.
/// Lanes check and take with separate atomic operations, so the budget
/// can be passed by at most one message per lane at a time.
///
/// # Examples
///
/// ```
/// use keel_rudp_proto::SendBudget;
///
/// let budget = SendBudget::new(64 << 20);
/// let shared = budget.clone();
/// assert_eq!((shared.limit(), shared.used(), shared.refused()), (64 << 20, 0, 0));
/// ```
#[derive(Debug, Clone)]
pub struct SendBudget {
    inner: Arc<Counter>,
}

impl SendBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        SendBudget {
            inner: Counter::new(limit),
        }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Bytes held now by the connections sharing it (messages counted
    /// with their bookkeeping, as above).
    pub fn used(&self) -> usize {
        self.inner.used()
    }

    /// Sends refused because it was spent, over all connections sharing it.
    pub fn refused(&self) -> u64 {
        self.inner.refused()
    }
}

/// What one connection's send queues hold against the shared
/// [`SendBudget`]. Dropping it gives its bytes back.
#[derive(Debug, Default)]
pub(crate) struct SendMem {
    share: Share,
    budget: Option<SendBudget>,
}

impl SendMem {
    /// Bytes held now (data and overhead).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.share.held
    }

    /// Draws on `budget` from now on (moving what is held onto it).
    pub(crate) fn set_budget(&mut self, budget: SendBudget) {
        let old = self.budget.take();
        self.share
            .rehome(old.as_ref().map(|b| &*b.inner), &budget.inner);
        self.budget = Some(budget);
    }

    /// Takes `n` bytes for a message about to be queued if the budget
    /// allows; else the bytes it has used and its limit.
    pub(crate) fn try_take(&mut self, n: usize) -> Result<(), (usize, usize)> {
        match &self.budget {
            Some(b) => self
                .share
                .try_take(&b.inner, n)
                .map_err(|used| (used, b.limit())),
            None => {
                self.share.held += n;
                Ok(())
            }
        }
    }

    /// Sets what is held to `total` (after acknowledgements, sends of
    /// unreliable messages): at most two atomic operations, none when
    /// nothing changed.
    pub(crate) fn set_held(&mut self, total: usize) {
        let held = self.share.held;
        if total == held {
            return;
        }
        let c = self.budget.as_ref().map(|b| &*b.inner);
        if total > held {
            self.share.force_take(c, total - held);
        } else {
            self.share.give(c, held - total);
        }
    }
}

impl Drop for SendMem {
    fn drop(&mut self) {
        let held = self.share.held;
        let c = self.budget.as_ref().map(|b| &*b.inner);
        self.share.give(c, held);
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
    share: Share,
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
    pub(crate) fn new(cap: usize, max_message: usize) -> Self {
        RecvMem {
            share: Share::default(),
            held_messages: 0,
            cap,
            exempt_cap: cap.saturating_add(max_message),
            budget: None,
        }
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> usize {
        self.share.held
    }

    /// Draws on `budget` from now on (moving what is held onto it).
    pub(crate) fn set_budget(&mut self, budget: RecvBudget) {
        let old = self.budget.take();
        self.share
            .rehome(old.as_ref().map(|b| &*b.inner), &budget.inner);
        self.budget = Some(budget);
    }

    /// Takes `n` bytes if the cap (`exempt`: the larger one) and the
    /// budget allow.
    pub(crate) fn take(&mut self, n: usize, exempt: bool) -> Result<(), Refusal> {
        if n == 0 {
            return Ok(());
        }
        let cap = if exempt { self.exempt_cap } else { self.cap };
        if self.share.held + n > cap {
            return Err(Refusal::Cap);
        }
        match &self.budget {
            Some(b) => self
                .share
                .try_take(&b.inner, n)
                .map_err(|_| Refusal::Budget),
            None => {
                self.share.held += n;
                Ok(())
            }
        }
    }

    /// Counts one more held-back message, if under [`MAX_HELD_MESSAGES`]
    /// (`force`: whatever the count, for a completed partial message).
    pub(crate) fn hold_message(&mut self, force: bool) -> bool {
        if !force && self.held_messages >= MAX_HELD_MESSAGES {
            return false;
        }
        self.held_messages += 1;
        true
    }

    /// One held-back message was delivered.
    pub(crate) fn release_message(&mut self) {
        self.held_messages = self.held_messages.saturating_sub(1);
    }

    /// Takes `n` bytes whatever the limits: for moves that free at least
    /// as much right after (a completed message leaving its partial).
    pub(crate) fn force_take(&mut self, n: usize) {
        let c = self.budget.as_ref().map(|b| &*b.inner);
        self.share.force_take(c, n);
    }

    /// Gives `n` bytes back.
    pub(crate) fn give(&mut self, n: usize) {
        debug_assert!(
            n <= self.share.held,
            "gives back {n} of {}",
            self.share.held
        );
        let c = self.budget.as_ref().map(|b| &*b.inner);
        self.share.give(c, n);
    }
}

impl Drop for RecvMem {
    fn drop(&mut self) {
        let held = self.share.held;
        let c = self.budget.as_ref().map(|b| &*b.inner);
        self.share.give(c, held);
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
        assert_eq!(a.take(15, true), Ok(()), "the exempt cap is higher");
        assert_eq!(b.take(30, false), Err(Refusal::Budget), "past the limit");
        assert_eq!(budget.refused(), 1);
        assert_eq!(
            b.take(25, false),
            Ok(()),
            "the last quarter, within its share"
        );
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 25);
        b.give(25);
        assert_eq!((b.held(), budget.used()), (0, 0));
    }

    #[test]
    fn send_budget_is_shared_and_given_back_when_dropped() {
        let budget = SendBudget::new(100);
        let mut a = SendMem::default();
        let mut b = SendMem::default();
        a.try_take(30).unwrap();
        a.set_budget(budget.clone());
        b.set_budget(budget.clone());
        assert_eq!(budget.used(), 30, "what was held moves onto it");
        assert_eq!(a.try_take(50), Ok(()));
        assert_eq!(b.try_take(30), Err((80, 100)));
        assert_eq!((b.held(), budget.refused()), (0, 1));
        assert_eq!(b.try_take(20), Ok(()));
        a.set_held(10);
        assert_eq!(budget.used(), 30);
        drop(a);
        assert_eq!(budget.used(), 20);
        b.set_held(0);
        assert_eq!(budget.used(), 0);
    }

    /// Connections that fill the budget cannot starve one that holds
    /// little: a quarter of the limit is split over the connections the
    /// endpoints may hold, each sure of its quota.
    #[test]
    fn a_connection_gets_its_quota_of_a_budget_others_spent() {
        let budget = RecvBudget::new(1000);
        // As an endpoint of 10 connections would: a reserve of 250, a
        // quota of 25 each, 750 open to all.
        budget.inner.slots.fetch_add(10, Ordering::Relaxed);
        let mut hogs: Vec<RecvMem> = (0..9).map(|_| RecvMem::new(10_000, 0)).collect();
        let mut player = RecvMem::new(10_000, 0);
        for h in &mut hogs {
            h.set_budget(budget.clone());
        }
        player.set_budget(budget.clone());
        for h in &mut hogs[..3] {
            assert_eq!(h.take(250, false), Ok(()));
        }
        assert_eq!(
            hogs[3].take(100, false),
            Ok(()),
            "the open part, to its end"
        );
        assert_eq!(
            hogs[0].take(1, false),
            Err(Refusal::Budget),
            "open part spent"
        );
        assert_eq!(player.take(25, false), Ok(()), "its quota, though spent");
        assert_eq!(
            player.take(1, false),
            Err(Refusal::Budget),
            "past its quota"
        );
        for h in &mut hogs[4..] {
            assert_eq!(h.take(25, false), Ok(()), "each its quota");
        }
        assert_eq!(budget.used(), budget.limit(), "and never past the limit");
        // A hog that goes gives its open bytes back: the player may take them.
        drop(hogs.remove(0));
        assert_eq!(player.take(100, false), Ok(()));
        player.give(125);
        assert_eq!(player.held(), 0);
        drop(hogs);
        assert_eq!(budget.used(), 0);
        assert_eq!(budget.inner.reserved.load(Ordering::Relaxed), 0);
    }
}
