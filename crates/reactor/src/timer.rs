//! The timer queue: deadline-ordered, cancellable, periodic timers on a
//! drift-free schedule. Time is passed in, so the logic is tested without
//! sleeping.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::slab::{Key, Slab};

/// Identifies a scheduled timer. Cancelling with an id whose timer already
/// finished (or was cancelled) is a harmless no-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId(pub(crate) Key);

struct Entry<T> {
    deadline: Instant,
    period: Option<Duration>,
    target: T,
}

/// Deadline-ordered timers. The heap may hold entries for cancelled timers;
/// they are skipped lazily when they reach the top.
pub(crate) struct TimerQueue<T> {
    entries: Slab<Entry<T>>,
    // (deadline, insertion sequence for FIFO among equal deadlines, key)
    heap: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    seq: u64,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        TimerQueue {
            entries: Slab::default(),
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T: Clone> TimerQueue<T> {
    /// Schedules a timer at `deadline`, repeating every `period` if given.
    /// A zero period is treated as one nanosecond so the queue cannot loop
    /// forever on one timer.
    pub(crate) fn insert(
        &mut self,
        deadline: Instant,
        period: Option<Duration>,
        target: T,
    ) -> TimerId {
        let period = period.map(|p| p.max(Duration::from_nanos(1)));
        let key = self.entries.insert(Entry {
            deadline,
            period,
            target,
        });
        self.push_heap(deadline, key);
        TimerId(key)
    }

    fn push_heap(&mut self, deadline: Instant, key: Key) {
        self.seq += 1;
        self.heap.push(Reverse((deadline, self.seq, key.to_u64())));
    }

    /// Cancels a timer; returns whether it was still scheduled.
    pub(crate) fn cancel(&mut self, id: TimerId) -> bool {
        self.entries.remove(id.0).is_some()
    }

    /// Whether the timer is still scheduled.
    #[cfg(test)]
    pub(crate) fn contains(&self, id: TimerId) -> bool {
        self.entries.get(id.0).is_some()
    }

    /// The earliest live deadline.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((deadline, _, raw))) = self.heap.peek().copied() {
            match self.entries.get(Key::from_u64(raw)) {
                Some(e) if e.deadline == deadline => return Some(deadline),
                _ => {
                    self.heap.pop();
                }
            }
        }
        None
    }

    /// Appends every timer due at `now` to `out`, oldest deadline first.
    /// A periodic timer is rescheduled at `deadline + period` (not
    /// `now + period`), so its schedule does not drift; if `now` is several
    /// periods late, each missed period is reported once, in order.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<(TimerId, T)>) {
        while let Some(Reverse((deadline, _, raw))) = self.heap.peek().copied() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            let key = Key::from_u64(raw);
            let Some(entry) = self.entries.get_mut(key) else {
                continue; // cancelled
            };
            if entry.deadline != deadline {
                continue; // stale heap entry
            }
            out.push((TimerId(key), entry.target.clone()));
            match entry.period {
                Some(period) => {
                    let next = deadline + period;
                    entry.deadline = next;
                    self.push_heap(next, key);
                }
                None => {
                    self.entries.remove(key);
                }
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.drain();
        self.heap.clear();
    }
}

/// The poll timeout for the next deadline: the remaining time rounded *up*
/// to a whole millisecond, because epoll counts milliseconds and a
/// sub-millisecond wait rounded down to zero would make the loop spin until
/// the deadline. A deadline already due gives zero (there is work to do).
pub(crate) fn poll_timeout(now: Instant, next: Option<Instant>) -> Option<Duration> {
    let deadline = next?;
    let left = deadline.saturating_duration_since(now);
    if left.is_zero() {
        return Some(Duration::ZERO);
    }
    let nanos = left.as_nanos();
    let millis = nanos.div_ceil(1_000_000);
    Some(Duration::from_millis(
        u64::try_from(millis).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn fires_in_deadline_order_and_fifo_on_ties() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(30), None, "c");
        q.insert(t0 + ms(10), None, "a");
        q.insert(t0 + ms(20), None, "b1");
        q.insert(t0 + ms(20), None, "b2");
        let mut out = Vec::new();
        q.expire(t0 + ms(5), &mut out);
        assert!(out.is_empty());
        q.expire(t0 + ms(25), &mut out);
        let names: Vec<_> = out.iter().map(|(_, n)| *n).collect();
        assert_eq!(names, ["a", "b1", "b2"]);
        assert_eq!(q.next_deadline(), Some(t0 + ms(30)));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn cancelled_timer_never_fires() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let a = q.insert(t0 + ms(10), None, 1);
        let b = q.insert(t0 + ms(20), Some(ms(5)), 2);
        assert!(q.cancel(a));
        assert!(!q.cancel(a), "second cancel is a no-op");
        assert_eq!(q.next_deadline(), Some(t0 + ms(20)));
        let mut out = Vec::new();
        q.expire(t0 + ms(21), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, b);
        assert!(q.cancel(b));
        out.clear();
        q.expire(t0 + ms(1000), &mut out);
        assert!(out.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn one_shot_id_is_not_reused_by_next_timer() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let a = q.insert(t0, None, 1);
        let mut out = Vec::new();
        q.expire(t0, &mut out);
        let b = q.insert(t0 + ms(1), None, 2);
        assert_ne!(a, b);
        assert!(!q.cancel(a), "the old id cannot cancel the new timer");
        assert!(q.contains(b));
    }

    /// A 60 Hz tick observed by a loop that wakes late by a varying amount
    /// (up to most of a period) still fires exactly 600 times in 10 s of
    /// simulated time, and each fire is reported at its own deadline.
    #[test]
    fn periodic_schedule_does_not_drift() {
        let t0 = Instant::now();
        let period = Duration::from_nanos(1_000_000_000 / 60);
        let mut q = TimerQueue::default();
        let id = q.insert(t0 + period, Some(period), ());
        let end = t0 + Duration::from_secs(10);
        let mut now = t0;
        let mut fired = 0u32;
        let mut out = Vec::new();
        let mut lateness = 0u64;
        loop {
            let next = q.next_deadline().unwrap();
            // Pseudo-random lateness between 0 and 15 ms.
            lateness = (lateness * 7919 + 104_729) % 15_000_000;
            now = now.max(next + Duration::from_nanos(lateness));
            if now > end {
                now = end;
            }
            out.clear();
            q.expire(now, &mut out);
            for (fid, ()) in &out {
                assert_eq!(*fid, id);
                fired += 1;
            }
            if now >= end {
                break;
            }
        }
        // Deadlines k * period for k = 1..=600 all lie within 10 s
        // (600 * period is 10 s minus rounding).
        assert_eq!(fired, 600);
    }

    #[test]
    fn missed_periods_are_each_reported() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(10), Some(ms(10)), ());
        let mut out = Vec::new();
        q.expire(t0 + ms(55), &mut out);
        assert_eq!(out.len(), 5);
        assert_eq!(q.next_deadline(), Some(t0 + ms(60)));
    }

    #[test]
    fn timeout_rounds_up_to_whole_milliseconds() {
        let t0 = Instant::now();
        assert_eq!(poll_timeout(t0, None), None);
        assert_eq!(poll_timeout(t0, Some(t0)), Some(Duration::ZERO));
        assert_eq!(poll_timeout(t0 + ms(5), Some(t0)), Some(Duration::ZERO));
        assert_eq!(
            poll_timeout(t0, Some(t0 + Duration::from_micros(500))),
            Some(ms(1))
        );
        assert_eq!(
            poll_timeout(t0, Some(t0 + Duration::from_nanos(1))),
            Some(ms(1))
        );
        assert_eq!(poll_timeout(t0, Some(t0 + ms(2))), Some(ms(2)));
        assert_eq!(
            poll_timeout(t0, Some(t0 + Duration::from_micros(2001))),
            Some(ms(3))
        );
    }
}
