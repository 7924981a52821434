//! One conditioned path of an endpoint: the decisions, the bounded store
//! of held datagrams and the lane timer that releases them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use keel_reactor::TimerId;

use crate::counters::{bump, Counters};
use crate::timers::Timers;
use keel_impair::{Conditioner, Impairment, Verdict};

/// A datagram waiting for its due time.
struct Held {
    due: Instant,
    seq: u64,
    addr: Option<SocketAddr>,
    data: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        self.due == o.due && self.seq == o.seq
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Held {
    /// Reversed: the max-heap's top is the earliest due, first held first
    /// among equals.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

/// Most spare buffers kept for reuse.
const POOL_MAX: usize = 1024;

/// One conditioned path of an endpoint: the decisions, the bounded store of
/// held datagrams (buffers are reused, so a steady flow allocates nothing
/// once warm), and the lane timer that releases them. Time is passed in.
pub(crate) struct Link {
    cond: Conditioner,
    held: BinaryHeap<Held>,
    held_bytes: usize,
    pool: Vec<Vec<u8>>,
    seq: u64,
    limit: usize,
    limit_bytes: usize,
    /// The armed one-shot timer and its deadline.
    timer: Option<(TimerId, Instant)>,
    counters: Arc<Counters>,
}

impl Link {
    /// A link for `imp`, or `None` when there is nothing to condition.
    pub(crate) fn for_config(
        imp: Option<&Impairment>,
        counters: &Arc<Counters>,
        stream: u64,
    ) -> Option<Box<Link>> {
        let imp = imp.filter(|i| !i.is_off())?;
        Some(Box::new(Link {
            cond: Conditioner::with_stream(imp, stream),
            held: BinaryHeap::new(),
            held_bytes: 0,
            pool: Vec::new(),
            seq: 0,
            limit: imp.limit,
            limit_bytes: imp.limit_bytes,
            timer: None,
            counters: counters.clone(),
        }))
    }

    /// Decides the fate of a datagram at `now`: holds its delayed copies
    /// and returns how many copies go on at once (0, 1 or 2).
    pub(crate) fn route(&mut self, now: Instant, addr: Option<SocketAddr>, data: &[u8]) -> usize {
        match self.cond.decide() {
            Verdict::Drop => {
                bump(&self.counters.conditioner_dropped, 1);
                0
            }
            Verdict::Deliver {
                delay,
                reordered,
                duplicate,
            } => {
                if reordered {
                    bump(&self.counters.conditioner_reordered, 1);
                }
                if duplicate.is_some() {
                    bump(&self.counters.conditioner_duplicated, 1);
                }
                let mut at_once = 0;
                for d in [Some(delay), duplicate].into_iter().flatten() {
                    if d.is_zero() {
                        at_once += 1;
                    } else {
                        self.hold(now + d, addr, data);
                    }
                }
                at_once
            }
        }
    }

    fn hold(&mut self, due: Instant, addr: Option<SocketAddr>, data: &[u8]) {
        if self.held.len() >= self.limit || self.held_bytes + data.len() > self.limit_bytes {
            bump(&self.counters.conditioner_discarded, 1);
            return;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        self.held_bytes += data.len();
        self.seq += 1;
        self.held.push(Held {
            due,
            seq: self.seq,
            addr,
            data: buf,
        });
        bump(&self.counters.conditioner_delayed, 1);
    }

    /// The earliest held datagram if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Option<SocketAddr>, Vec<u8>)> {
        if self.held.peek()?.due > now {
            return None;
        }
        let h = self.held.pop()?;
        self.held_bytes -= h.data.len();
        Some((h.addr, h.data))
    }

    /// Gives a released datagram's buffer back for reuse.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX {
            self.pool.push(buf);
        }
    }

    /// The earliest due time held.
    fn next_due(&self) -> Option<Instant> {
        self.held.peek().map(|h| h.due)
    }

    /// Makes sure a timer fires by the earliest due time: one one-shot
    /// timer, moved earlier when an earlier datagram is held.
    pub(crate) fn arm(&mut self, timers: &mut dyn Timers) {
        let Some(next) = self.next_due() else {
            return;
        };
        match self.timer {
            Some((_, at)) if at <= next => {}
            Some((id, _)) => {
                timers.cancel(id);
                self.timer = Some((timers.add(next, None), next));
            }
            None => self.timer = Some((timers.add(next, None), next)),
        }
    }

    /// Whether `id` is this link's timer (which has now fired).
    pub(crate) fn take_timer(&mut self, id: TimerId) -> bool {
        match self.timer {
            Some((t, _)) if t == id => {
                self.timer = None;
                true
            }
            _ => false,
        }
    }

    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.held.len()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if !self.held.is_empty() {
            bump(&self.counters.conditioner_discarded, self.held.len() as u64);
        }
    }
}
