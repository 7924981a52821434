//! What the lanes of one server share with each other and with the
//! server handle: the client-id map and the broadcast counters (lanes and
//! the server both use this module; it uses neither).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::net::conns::ClientIds;

/// What the lanes of one server share.
#[derive(Debug, Default)]
pub(crate) struct ServerShared {
    /// The live connection of each token's client id.
    pub(crate) client_ids: ClientIds,
    /// [`BroadcastStats`], as the lanes count them.
    pub(crate) broadcasts: BroadcastCounters,
}

/// The counters behind [`BroadcastStats`] (relaxed: each is a count on
/// its own).
#[derive(Debug, Default)]
pub(crate) struct BroadcastCounters {
    pub(crate) lanes_taken: AtomicU64,
    pub(crate) lanes_refused: AtomicU64,
    queued: AtomicU64,
    backpressure: AtomicU64,
    budget_spent: AtomicU64,
    other_refused: AtomicU64,
}

impl BroadcastCounters {
    /// One lane's broadcast done: what its connections took and refused.
    pub(crate) fn add(&self, queued: u64, backpressure: u64, budget: u64, other: u64) {
        self.queued.fetch_add(queued, Ordering::Relaxed);
        self.backpressure.fetch_add(backpressure, Ordering::Relaxed);
        self.budget_spent.fetch_add(budget, Ordering::Relaxed);
        self.other_refused.fetch_add(other, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> BroadcastStats {
        BroadcastStats {
            lanes_taken: self.lanes_taken.load(Ordering::Relaxed),
            lanes_refused: self.lanes_refused.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
            backpressure: self.backpressure.load(Ordering::Relaxed),
            budget_spent: self.budget_spent.load(Ordering::Relaxed),
            other_refused: self.other_refused.load(Ordering::Relaxed),
        }
    }
}

/// What [`Server::broadcast`](crate::Server::broadcast) did, summed over every broadcast since the
/// server started ([`Server::broadcast_stats`](crate::Server::broadcast_stats)). A broadcast is one job per
/// lane; each lane queues the message on each of its connections in
/// [`State::Connected`](crate::State::Connected) and counts what they
/// refused here (each refusal also reaches that lane's
/// [`Handler::send_failed`](crate::Handler::send_failed)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BroadcastStats {
    /// Lanes that took a broadcast (one per lane per broadcast).
    pub lanes_taken: u64,
    /// Lanes that did not: their inbox was full (keel-udp's
    /// `inbox_capacity`) or they were closed. Their connections did not
    /// get the message.
    pub lanes_refused: u64,
    /// Messages queued on connections.
    pub queued: u64,
    /// Messages a connection refused with [`SendError::Backpressure`](crate::SendError::Backpressure)
    /// (its `max_send_buffer` was full: a peer that does not keep up).
    pub backpressure: u64,
    /// Messages refused with [`SendError::BudgetSpent`](crate::SendError::BudgetSpent) (the server's
    /// `send_budget` was spent).
    pub budget_spent: u64,
    /// Messages refused otherwise (none is expected: the channel and the
    /// size are checked before the broadcast is posted).
    pub other_refused: u64,
}
