//! Per-lane counters, written by the lane's thread and readable from any
//! thread. Every datagram keel drops is counted in one of them.

use std::ops::Add;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// The live counters of one lane (or one client or datagram socket).
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $( pub(crate) $name: AtomicU64, )*
        }

        /// A copy of a lane's counters at one moment. Add snapshots to sum
        /// lanes.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
pub struct CounterSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> CounterSnapshot {
                CounterSnapshot {
                    $( $name: self.$name.load(Ordering::Relaxed), )*
                }
            }
        }

        impl Add for CounterSnapshot {
            type Output = CounterSnapshot;
            fn add(self, o: CounterSnapshot) -> CounterSnapshot {
                CounterSnapshot { $( $name: self.$name + o.$name, )* }
            }
        }
    };
}

counters! {
    /// Datagrams received (including truncated and refused ones).
    datagrams_in,
    /// Payload bytes received.
    bytes_in,
    /// Datagrams handed to the kernel.
    datagrams_out,
    /// Payload bytes handed to the kernel.
    bytes_out,
    /// Datagrams the kernel dropped because the receive buffer was full
    /// (`SO_RXQ_OVFL`; reported with the next datagram that gets through).
    kernel_drops,
    /// Datagrams larger than the receive slot, cut and dropped (`MSG_TRUNC`).
    truncated,
    /// Sends refused because the bounded send queue was full.
    send_queue_rejections,
    /// Sends refused because the payload exceeded the UDP limit.
    send_too_large,
    /// Datagrams the kernel refused (other than `WouldBlock`), dropped.
    send_errors,
    /// Datagrams that met `WouldBlock` and waited in the send queue.
    send_queued,
    /// Sends that were accepted (`Ok`) but never reached the kernel: still
    /// in the send queue, the pending batch or the lane's inbox when the
    /// endpoint closed, or addressed through a session handle to a session
    /// that had ended.
    send_discarded,
    /// Sends from other threads refused because the lane's inbox was at its
    /// bound ([`SendError::QueueFull`](crate::SendError::QueueFull)).
    send_inbox_full,
    /// Receive errors other than `WouldBlock` (e.g. ICMP errors reported on
    /// an unconnected socket).
    recv_errors,
    /// Datagrams still queued on the socket when the endpoint stopped,
    /// beyond what the stop hands to the handler (one readiness budget):
    /// read and discarded, so the socket does not close on them uncounted.
    recv_discarded,
    /// Sessions open now (server lanes).
    sessions_open,
    /// Sessions opened since start.
    sessions_opened,
    /// Datagrams from new peers refused because the session table was full.
    sessions_refused,
    /// New peers the handler turned away in `accept` (admission): no
    /// session state was made and no `disconnected` follows.
    sessions_rejected,
    /// Sessions ended by the idle timeout.
    sessions_timed_out,
    /// Sessions closed by the application.
    sessions_closed,
    /// Sessions evicted to make room for a new peer.
    sessions_evicted,
    /// Link conditioner (both directions): datagrams dropped by its `loss`
    /// rate.
    conditioner_dropped,
    /// Link conditioner: extra copies made by its `duplicate` rate.
    conditioner_duplicated,
    /// Link conditioner: copies held for later delivery (delay, jitter or
    /// reorder).
    conditioner_delayed,
    /// Link conditioner: datagrams held back its reorder delay.
    conditioner_reordered,
    /// Link conditioner: copies discarded because its store was at its
    /// bound (`limit`, `limit_bytes`), or still held when the endpoint
    /// closed.
    conditioner_discarded,
}

/// Single-writer increment: only the lane's thread writes a lane's counters,
/// so a load and a store (no locked read-modify-write) suffice.
#[inline]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Increment from any thread (a caller of `Server::send_to` and the like,
/// racing with the lane and with other callers): an atomic add.
#[inline]
pub(crate) fn bump_shared(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Sets a gauge.
#[inline]
pub(crate) fn set(c: &AtomicU64, v: u64) {
    c.store(v, Ordering::Relaxed);
}
