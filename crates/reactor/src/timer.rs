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

/// The most fires one periodic timer makes in one expiry pass under
/// [`MissedTicks::Burst`]. Small lateness is caught up fire by fire (a
/// 60 Hz tick late by a few periods reports each one); a timer further
/// behind jumps to its next future tick, and the ticks passed over are
/// counted by [`Handle::skipped_ticks`](crate::Handle::skipped_ticks).
pub const MAX_CATCH_UP: u32 = 64;

/// The shortest period a periodic timer gets: shorter periods (0 and 1 ns
/// included) are raised to it. Even so, such a timer is due at every turn,
/// so the loop polls without sleeping while it runs.
pub const MIN_PERIOD: Duration = Duration::from_micros(1);

/// What a periodic timer does when it is late by a period or more, i.e.
/// when ticks were missed (the loop was busy, or the lane fell behind).
/// Lateness under one period changes nothing under any policy: the next
/// tick stays on the original schedule. Modelled on tokio's
/// `MissedTickBehavior`.
///
/// With a period of 10 ms, deadlines at 10, 20, 30, ... ms, and the loop
/// first looking at 45 ms:
///
/// * `Burst` fires for 10, 20, 30 and 40 back to back; next tick at 50.
/// * `Skip` fires once (for 10); next tick at 50.
/// * `Delay` fires once (for 10); next tick at 55 (now + period), and the
///   schedule continues from there.
///
/// Missed ticks that are not fired are counted by
/// [`Handle::skipped_ticks`](crate::Handle::skipped_ticks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MissedTicks {
    /// Fire the missed ticks back to back, at most [`MAX_CATCH_UP`] per
    /// pass; a timer further behind jumps to its next future tick on the
    /// original schedule. Keeps a drift-free count of ticks for a loop that
    /// is late now and then. The default.
    #[default]
    Burst,
    /// Fire once, then continue at the original schedule's next future
    /// tick; the missed ones are dropped.
    Skip,
    /// Fire once, then schedule the next tick a full period from now: the
    /// schedule shifts by the lateness.
    Delay,
}

struct Entry<T> {
    deadline: Instant,
    period: Option<Duration>,
    missed: MissedTicks,
    /// Fires made in this expiry pass while already behind (Burst).
    behind: u32,
    target: T,
}

/// A timer fire: which timer, for whom, and whether it is periodic.
pub(crate) type Fire<T> = (TimerId, T, bool);

/// Deadline-ordered timers. The heap may hold entries for cancelled timers;
/// they are skipped lazily when they reach the top.
pub(crate) struct TimerQueue<T> {
    entries: Slab<Entry<T>>,
    // (deadline, insertion sequence for FIFO among equal deadlines, key)
    heap: BinaryHeap<Reverse<(Instant, u64, u64)>>,
    seq: u64,
}

/// Timers a queue holds before its heap or slab first allocates. Lanes
/// keep a few timers each; without room made up front, the first moment
/// that more than ever before are live at once (a loaded machine running
/// overdue timers late) grew the heap in an otherwise allocation-free
/// steady state.
pub(crate) const INITIAL_TIMERS: usize = 64;

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        TimerQueue {
            entries: Slab::with_capacity(INITIAL_TIMERS),
            heap: BinaryHeap::with_capacity(INITIAL_TIMERS),
            seq: 0,
        }
    }
}

impl<T: Clone> TimerQueue<T> {
    /// Schedules a timer at `deadline`, repeating every `period` if given
    /// (at least [`MIN_PERIOD`]), late ticks handled as `missed` says.
    pub(crate) fn insert(
        &mut self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
        target: T,
    ) -> TimerId {
        let period = period.map(|p| p.max(MIN_PERIOD));
        let key = self.entries.insert(Entry {
            deadline,
            period,
            missed,
            behind: 0,
            target,
        });
        self.push_heap(deadline, key);
        TimerId(key)
    }

    fn push_heap(&mut self, deadline: Instant, key: Key) {
        // A full heap that holds entries of cancelled or rescheduled timers
        // drops them instead of growing: a steady arm-and-cancel pattern
        // then never reallocates (the order of the live ones is kept).
        if self.heap.len() == self.heap.capacity() && self.entries.len() < self.heap.len() {
            let mut v = std::mem::take(&mut self.heap).into_vec();
            let entries = &self.entries;
            v.retain(|Reverse((d, _, raw))| {
                entries
                    .get(Key::from_u64(*raw))
                    .is_some_and(|e| e.deadline == *d)
            });
            self.heap = BinaryHeap::from(v);
        }
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

    /// Appends every timer due at `now` to `out`, oldest deadline first,
    /// and returns how many ticks of periodic timers were missed and not
    /// fired. A periodic timer is rescheduled at `deadline + period` (not
    /// `now + period`), so its schedule does not drift; if `now` is several
    /// periods late, its [`MissedTicks`] policy decides: under `Burst`
    /// each missed period is reported once, in order, up to
    /// [`MAX_CATCH_UP`] fires per call.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<Fire<T>>) -> u64 {
        let mut skipped = 0u64;
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
            out.push((TimerId(key), entry.target.clone(), entry.period.is_some()));
            // A deadline past Instant's range ends the timer.
            match entry
                .period
                .and_then(|p| Some((p, deadline.checked_add(p)?)))
            {
                Some((period, next)) => {
                    let next = if next > now {
                        entry.behind = 0;
                        next
                    } else {
                        match entry.missed {
                            MissedTicks::Burst if entry.behind + 1 < MAX_CATCH_UP => {
                                entry.behind += 1;
                                next
                            }
                            MissedTicks::Burst | MissedTicks::Skip => {
                                entry.behind = 0;
                                let (ahead, passed) = skip_past(next, period, now);
                                skipped = skipped.saturating_add(passed);
                                ahead
                            }
                            MissedTicks::Delay => {
                                let (_, passed) = skip_past(next, period, now);
                                skipped = skipped.saturating_add(passed);
                                now.checked_add(period).unwrap_or(next)
                            }
                        }
                    };
                    entry.deadline = next;
                    self.push_heap(next, key);
                }
                None => {
                    self.entries.remove(key);
                }
            }
        }
        skipped
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

/// For a periodic tick `next` already due at `now`: the first tick on the
/// same schedule after `now`, and how many ticks (from `next` on) that
/// passes over.
fn skip_past(next: Instant, period: Duration, now: Instant) -> (Instant, u64) {
    let p = period.as_nanos().max(1);
    let passed = (now - next).as_nanos() / p + 1;
    let ahead = u64::try_from(passed * p)
        .ok()
        .and_then(|n| next.checked_add(Duration::from_nanos(n)))
        .unwrap_or(now + period);
    (ahead, u64::try_from(passed).unwrap_or(u64::MAX))
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
    fn up_to_initial_timers_live_at_once_never_grow_the_queue() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let (heap, slots) = (q.heap.capacity(), q.entries.capacity());
        assert!(heap >= INITIAL_TIMERS && slots >= INITIAL_TIMERS);
        let ids: Vec<_> = (0..INITIAL_TIMERS as u64)
            .map(|i| q.insert(t0 + ms(i), None, MissedTicks::Burst, i))
            .collect();
        for id in ids {
            q.cancel(id);
        }
        assert_eq!((q.heap.capacity(), q.entries.capacity()), (heap, slots));
    }

    #[test]
    fn fires_in_deadline_order_and_fifo_on_ties() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(30), None, MissedTicks::Burst, "c");
        q.insert(t0 + ms(10), None, MissedTicks::Burst, "a");
        q.insert(t0 + ms(20), None, MissedTicks::Burst, "b1");
        q.insert(t0 + ms(20), None, MissedTicks::Burst, "b2");
        let mut out = Vec::new();
        q.expire(t0 + ms(5), &mut out);
        assert!(out.is_empty());
        q.expire(t0 + ms(25), &mut out);
        let names: Vec<_> = out.iter().map(|(_, n, _)| *n).collect();
        assert_eq!(names, ["a", "b1", "b2"]);
        assert_eq!(q.next_deadline(), Some(t0 + ms(30)));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn cancelled_timer_never_fires() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let a = q.insert(t0 + ms(10), None, MissedTicks::Burst, 1);
        let b = q.insert(t0 + ms(20), Some(ms(5)), MissedTicks::Burst, 2);
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
        let a = q.insert(t0, None, MissedTicks::Burst, 1);
        let mut out = Vec::new();
        q.expire(t0, &mut out);
        let b = q.insert(t0 + ms(1), None, MissedTicks::Burst, 2);
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
        let id = q.insert(t0 + period, Some(period), MissedTicks::Burst, ());
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
            for (fid, (), _) in &out {
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
        q.insert(t0 + ms(10), Some(ms(10)), MissedTicks::Burst, ());
        let mut out = Vec::new();
        q.expire(t0 + ms(55), &mut out);
        assert_eq!(out.len(), 5);
        assert_eq!(q.next_deadline(), Some(t0 + ms(60)));
    }

    /// Expires at `now`; returns (fires, skipped ticks).
    fn expire_at<T: Clone>(q: &mut TimerQueue<T>, now: Instant) -> (usize, u64) {
        let mut out = Vec::new();
        let skipped = q.expire(now, &mut out);
        (out.len(), skipped)
    }

    #[test]
    fn burst_catch_up_is_capped_per_call_and_keeps_the_grid() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(1), Some(ms(1)), MissedTicks::Burst, ());
        // 1000 ticks due (1 ms ..= 1000 ms): 64 fire, the rest are skipped.
        assert_eq!(expire_at(&mut q, t0 + ms(1000)), (64, 1000 - 64));
        assert_eq!(q.next_deadline(), Some(t0 + ms(1001)));
        assert_eq!(expire_at(&mut q, t0 + ms(1001)), (1, 0));
        // Exactly the cap behind: all fire, nothing skipped.
        assert_eq!(expire_at(&mut q, t0 + ms(1065)), (64, 0));
        assert_eq!(q.next_deadline(), Some(t0 + ms(1066)));
    }

    #[test]
    fn burst_interleaves_catch_up_with_other_timers_in_deadline_order() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(10), Some(ms(10)), MissedTicks::Burst, "p");
        q.insert(t0 + ms(25), None, MissedTicks::Burst, "o");
        let mut out = Vec::new();
        q.expire(t0 + ms(35), &mut out);
        let names: Vec<_> = out.iter().map(|(_, n, _)| *n).collect();
        assert_eq!(names, ["p", "p", "o", "p"]);
        let periodic: Vec<_> = out.iter().map(|(_, _, p)| *p).collect();
        assert_eq!(periodic, [true, true, false, true]);
    }

    #[test]
    fn skip_fires_once_and_keeps_the_original_schedule() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(10), Some(ms(10)), MissedTicks::Skip, ());
        // Due: 10, 20, 30, 40, 50. One fires; 20..=50 are skipped.
        assert_eq!(expire_at(&mut q, t0 + ms(55)), (1, 4));
        assert_eq!(q.next_deadline(), Some(t0 + ms(60)));
        assert_eq!(expire_at(&mut q, t0 + ms(60)), (1, 0));
        assert_eq!(q.next_deadline(), Some(t0 + ms(70)));
    }

    #[test]
    fn delay_fires_once_and_restarts_the_schedule_from_now() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        q.insert(t0 + ms(10), Some(ms(10)), MissedTicks::Delay, ());
        assert_eq!(expire_at(&mut q, t0 + ms(55)), (1, 4));
        assert_eq!(q.next_deadline(), Some(t0 + ms(65)));
        assert_eq!(expire_at(&mut q, t0 + ms(66)), (1, 0));
        assert_eq!(q.next_deadline(), Some(t0 + ms(75)));
    }

    #[test]
    fn lateness_under_a_period_keeps_every_policy_on_schedule() {
        for missed in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
            let t0 = Instant::now();
            let mut q = TimerQueue::default();
            q.insert(t0 + ms(10), Some(ms(10)), missed, ());
            assert_eq!(expire_at(&mut q, t0 + ms(19)), (1, 0), "{missed:?}");
            assert_eq!(q.next_deadline(), Some(t0 + ms(20)), "{missed:?}");
        }
    }

    #[test]
    fn tiny_periods_are_raised_to_min_period_and_bounded_per_call() {
        for period in [Duration::ZERO, Duration::from_nanos(1)] {
            let t0 = Instant::now();
            let mut q = TimerQueue::default();
            q.insert(t0, Some(period), MissedTicks::Burst, ());
            assert_eq!(expire_at(&mut q, t0), (1, 0));
            assert_eq!(q.next_deadline(), Some(t0 + MIN_PERIOD));
            // A second late: a million ticks due, 64 fire.
            let (fires, skipped) = expire_at(&mut q, t0 + Duration::from_secs(1));
            assert_eq!(fires, MAX_CATCH_UP as usize);
            assert_eq!(fires as u64 + skipped, 1_000_000);
            assert_eq!(
                q.next_deadline(),
                Some(t0 + Duration::from_secs(1) + MIN_PERIOD)
            );
        }
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
