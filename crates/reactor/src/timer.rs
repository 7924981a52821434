//! The timer queue: deadline-ordered, cancellable, movable, periodic timers
//! on a drift-free schedule. Time is passed in, so the logic is tested
//! without sleeping.

use std::fmt;
use std::time::{Duration, Instant};

use crate::slab::{Key, Slab};

/// Identifies a scheduled timer. Cancelling with an id whose timer already
/// finished (or was cancelled) is a harmless no-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId(pub(crate) Key);

/// Why a timer could not be moved or disarmed
/// ([`LaneCtx::set_timer`](crate::LaneCtx::set_timer),
/// [`LaneCtx::unset_timer`](crate::LaneCtx::unset_timer)). Nothing was
/// changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimerError {
    /// No timer has this id any more: it was cancelled, or it was a
    /// one-shot timer made by [`LaneCtx::timer`](crate::LaneCtx::timer)
    /// that has fired (a timer made by
    /// [`LaneCtx::reusable_timer`](crate::LaneCtx::reusable_timer)
    /// outlives its fires). Make a new timer.
    Gone(TimerId),
    /// The timer belongs to another lane, or is a closure timer of
    /// [`Handle::timer`](crate::Handle::timer): a lane moves and disarms
    /// only its own timers.
    OtherLane(TimerId),
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimerError::Gone(id) => write!(
                f,
                "timer {id:?} is gone (cancelled, or a one-shot timer that fired); \
                 only a live timer can be moved or disarmed"
            ),
            TimerError::OtherLane(id) => write!(
                f,
                "timer {id:?} belongs to another lane; a lane moves and disarms \
                 only its own timers"
            ),
        }
    }
}

impl std::error::Error for TimerError {}

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

/// The heap index of a timer that is not armed.
const UNARMED: usize = usize::MAX;

struct Entry<T> {
    /// The timer's place in the heap, or [`UNARMED`]. The heap holds
    /// exactly the armed timers, so moving or cancelling one updates its
    /// place instead of leaving a stale copy behind.
    pos: usize,
    period: Option<Duration>,
    missed: MissedTicks,
    /// Fires made in this expiry pass while already behind (Burst).
    behind: u32,
    /// Stays registered (unarmed) when its one-shot fire is taken, to be
    /// armed again by `set`; otherwise a one-shot fire ends the timer.
    reusable: bool,
    target: T,
}

/// One armed timer in the heap: ordered by deadline, then by when it was
/// armed (FIFO among equal deadlines).
#[derive(Clone, Copy)]
struct Slot {
    deadline: Instant,
    seq: u64,
    key: Key,
}

impl Slot {
    fn before(&self, other: &Slot) -> bool {
        (self.deadline, self.seq) < (other.deadline, other.seq)
    }
}

/// A timer fire: which timer, for whom, and whether it is periodic.
pub(crate) type Fire<T> = (TimerId, T, bool);

/// Deadline-ordered timers: a slab of timers and a binary min-heap of the
/// armed ones in which each timer knows its index. So the heap holds one
/// slot per armed timer, never more: a timer moved (earlier or later) is
/// sifted in place and a cancelled one is taken out at once, in
/// O(log n), however often that happens.
pub(crate) struct TimerQueue<T> {
    entries: Slab<Entry<T>>,
    heap: Vec<Slot>,
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
            heap: Vec::with_capacity(INITIAL_TIMERS),
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
            pos: UNARMED,
            period,
            missed,
            behind: 0,
            reusable: false,
            target,
        });
        self.push_heap(key, deadline);
        TimerId(key)
    }

    /// Registers a one-shot timer that is not armed and stays registered
    /// after it fires; [`TimerQueue::set`] arms and moves it.
    pub(crate) fn insert_reusable(&mut self, target: T) -> TimerId {
        let key = self.entries.insert(Entry {
            pos: UNARMED,
            period: None,
            missed: MissedTicks::default(),
            behind: 0,
            reusable: true,
            target,
        });
        TimerId(key)
    }

    /// Arms the timer at `deadline`, or moves it there if it is armed (a
    /// periodic timer's schedule continues from `deadline`). Among timers
    /// due at the same instant it fires after those armed before.
    /// `owns` says whether the caller may touch a timer of this target.
    pub(crate) fn set(
        &mut self,
        id: TimerId,
        deadline: Instant,
        owns: impl FnOnce(&T) -> bool,
    ) -> Result<(), TimerError> {
        let pos = self.owned(id, owns)?;
        if pos == UNARMED {
            self.push_heap(id.0, deadline);
        } else {
            self.seq += 1;
            self.heap[pos].deadline = deadline;
            self.heap[pos].seq = self.seq;
            self.resift(pos);
        }
        Ok(())
    }

    /// Disarms the timer, keeping it registered; returns whether it was
    /// armed.
    pub(crate) fn unset(
        &mut self,
        id: TimerId,
        owns: impl FnOnce(&T) -> bool,
    ) -> Result<bool, TimerError> {
        let pos = self.owned(id, owns)?;
        if pos == UNARMED {
            return Ok(false);
        }
        self.remove_heap(pos);
        Ok(true)
    }

    /// The heap place of a live timer the caller owns (resetting its
    /// catch-up count: it is about to be moved or disarmed).
    fn owned(&mut self, id: TimerId, owns: impl FnOnce(&T) -> bool) -> Result<usize, TimerError> {
        let entry = self.entries.get_mut(id.0).ok_or(TimerError::Gone(id))?;
        if !owns(&entry.target) {
            return Err(TimerError::OtherLane(id));
        }
        entry.behind = 0;
        Ok(entry.pos)
    }

    /// Cancels a timer (armed or not): it is gone, and its id with it.
    /// Returns whether it was still registered.
    pub(crate) fn cancel(&mut self, id: TimerId) -> bool {
        match self.entries.remove(id.0) {
            Some(entry) => {
                if entry.pos != UNARMED {
                    self.remove_heap(entry.pos);
                }
                true
            }
            None => false,
        }
    }

    /// Whether the timer is still registered.
    #[cfg(test)]
    pub(crate) fn contains(&self, id: TimerId) -> bool {
        self.entries.get(id.0).is_some()
    }

    /// The earliest deadline of an armed timer.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.heap.first().map(|s| s.deadline)
    }

    /// Appends every timer due at `now` to `out`, oldest deadline first,
    /// and returns how many ticks of periodic timers were missed and not
    /// fired. A periodic timer is rescheduled at `deadline + period` (not
    /// `now + period`), so its schedule does not drift; if `now` is several
    /// periods late, its [`MissedTicks`] policy decides: under `Burst`
    /// each missed period is reported once, in order, up to
    /// [`MAX_CATCH_UP`] fires per call. A reusable timer is left
    /// registered and unarmed by its fire.
    pub(crate) fn expire(&mut self, now: Instant, out: &mut Vec<Fire<T>>) -> u64 {
        let mut skipped = 0u64;
        while let Some(&top) = self.heap.first() {
            if top.deadline > now {
                break;
            }
            let (key, deadline) = (top.key, top.deadline);
            let Some(entry) = self.entries.get_mut(key) else {
                // Cannot happen (a cancelled timer leaves the heap at once);
                // dropping the slot keeps the queue going if it did.
                self.remove_heap(0);
                continue;
            };
            out.push((TimerId(key), entry.target.clone(), entry.period.is_some()));
            // A deadline past Instant's range ends the timer.
            let next = match entry
                .period
                .and_then(|p| Some((p, deadline.checked_add(p)?)))
            {
                Some((period, next)) => Some(if next > now {
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
                }),
                None => None,
            };
            let reusable = entry.reusable;
            match next {
                Some(next) => {
                    self.seq += 1;
                    self.heap[0].deadline = next;
                    self.heap[0].seq = self.seq;
                    self.sift_down(0);
                }
                None => {
                    self.remove_heap(0);
                    if !reusable {
                        self.entries.remove(key);
                    }
                }
            }
        }
        skipped
    }

    /// Timers registered (armed or not).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.drain();
        self.heap.clear();
    }

    /// Arms an unarmed timer at `deadline`.
    fn push_heap(&mut self, key: Key, deadline: Instant) {
        self.seq += 1;
        self.heap.push(Slot {
            deadline,
            seq: self.seq,
            key,
        });
        self.sift_up(self.heap.len() - 1);
    }

    /// Takes the slot at `pos` out of the heap; its timer is unarmed.
    fn remove_heap(&mut self, pos: usize) {
        let removed = self.heap.swap_remove(pos);
        if let Some(e) = self.entries.get_mut(removed.key) {
            e.pos = UNARMED;
        }
        if pos < self.heap.len() {
            self.resift(pos);
        }
    }

    /// Restores heap order around `pos` after its slot changed.
    fn resift(&mut self, pos: usize) {
        if self.sift_up(pos) == pos {
            self.sift_down(pos);
        }
    }

    /// Moves the slot at `pos` up to its place; returns where it ended.
    fn sift_up(&mut self, mut pos: usize) -> usize {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !self.heap[pos].before(&self.heap[parent]) {
                break;
            }
            self.heap.swap(pos, parent);
            self.note_pos(pos);
            pos = parent;
        }
        self.note_pos(pos);
        pos
    }

    /// Moves the slot at `pos` down to its place.
    fn sift_down(&mut self, mut pos: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].before(&self.heap[left]) {
                right
            } else {
                left
            };
            if !self.heap[child].before(&self.heap[pos]) {
                break;
            }
            self.heap.swap(pos, child);
            self.note_pos(pos);
            pos = child;
        }
        self.note_pos(pos);
    }

    /// Tells the timer in heap slot `pos` where it is.
    fn note_pos(&mut self, pos: usize) {
        let key = self.heap[pos].key;
        if let Some(e) = self.entries.get_mut(key) {
            e.pos = pos;
        }
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

    /// Any owner may touch any timer (the lane check is the caller's).
    fn anyone<T>(_: &T) -> bool {
        true
    }

    /// Moving one timer back and forth 100,000 times keeps the queue at one
    /// timer and one heap slot: a move never leaves a stale copy behind.
    #[test]
    fn a_timer_moved_100_000_times_keeps_one_entry() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let other = q.insert(t0 + ms(500), None, MissedTicks::Burst, 0);
        let id = q.insert(t0 + ms(1), None, MissedTicks::Burst, 1);
        let heap = q.heap.capacity();
        for i in 0..100_000u64 {
            // Alternately later and earlier than the other timer.
            let at = if i % 2 == 0 {
                ms(1000 + i)
            } else {
                ms(i % 400)
            };
            q.set(id, t0 + at, anyone).unwrap();
            assert_eq!((q.len(), q.heap.len()), (2, 2), "after move {i}");
        }
        assert_eq!(q.heap.capacity(), heap, "the heap grew");
        // The last move (i = 99,999) was to 399 ms, before `other`.
        let mut out = Vec::new();
        q.expire(t0 + ms(10_000), &mut out);
        let fired: Vec<_> = out.iter().map(|(id, ..)| *id).collect();
        assert_eq!(fired, [id, other]);
        assert_eq!((q.len(), q.heap.len()), (0, 0));
    }

    /// The pattern rudp's lane used before timers could move: cancel the
    /// armed timer and add another at the new deadline. A cancelled timer
    /// leaves the heap at once, so the heap holds one slot, not the up to
    /// `INITIAL_TIMERS` stale ones it kept before.
    #[test]
    fn cancel_and_add_100_000_times_keeps_one_heap_slot() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let mut id = q.insert(t0 + ms(1), None, MissedTicks::Burst, ());
        for i in 0..100_000u64 {
            assert!(q.cancel(id));
            id = q.insert(t0 + ms(i % 977), None, MissedTicks::Burst, ());
            assert!(
                q.len() <= 1 && q.heap.len() <= 1,
                "after {i}: {} timers, {} heap slots",
                q.len(),
                q.heap.len()
            );
        }
    }

    #[test]
    fn a_moved_timer_fires_once_at_its_new_deadline_not_its_old_one() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let later = q.insert(t0 + ms(10), None, MissedTicks::Burst, "later");
        let earlier = q.insert(t0 + ms(50), None, MissedTicks::Burst, "earlier");
        q.set(later, t0 + ms(40), anyone).unwrap();
        q.set(earlier, t0 + ms(20), anyone).unwrap();
        let mut out = Vec::new();
        // The old deadline of `later` passes: nothing.
        q.expire(t0 + ms(15), &mut out);
        assert!(out.is_empty(), "fired at its old deadline");
        assert_eq!(q.next_deadline(), Some(t0 + ms(20)));
        q.expire(t0 + ms(20), &mut out);
        q.expire(t0 + ms(39), &mut out);
        q.expire(t0 + ms(40), &mut out);
        // And the old deadline of `earlier` passes: nothing more.
        q.expire(t0 + ms(1000), &mut out);
        let names: Vec<_> = out.iter().map(|(_, n, _)| *n).collect();
        assert_eq!(names, ["earlier", "later"]);
        assert_eq!(q.len(), 0, "one-shot timers end when they fire");
    }

    #[test]
    fn a_reusable_timer_outlives_its_fires_and_can_be_disarmed() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let id = q.insert_reusable(7);
        assert_eq!((q.len(), q.next_deadline()), (1, None), "made unarmed");
        let mut out = Vec::new();
        for round in 1..=3u64 {
            q.set(id, t0 + ms(10 * round), anyone).unwrap();
            q.expire(t0 + ms(10 * round), &mut out);
            assert_eq!(out.len() as u64, round);
            assert!(q.contains(id), "still registered after fire {round}");
            assert_eq!(q.next_deadline(), None, "unarmed after its fire");
            assert_eq!(q.unset(id, anyone), Ok(false));
        }
        q.set(id, t0 + ms(100), anyone).unwrap();
        assert_eq!(q.unset(id, anyone), Ok(true));
        q.expire(t0 + ms(1000), &mut out);
        assert_eq!(out.len(), 3, "a disarmed timer fired");
        assert!(q.cancel(id));
        assert_eq!(q.set(id, t0, anyone), Err(TimerError::Gone(id)));
        assert_eq!(q.unset(id, anyone), Err(TimerError::Gone(id)));
    }

    #[test]
    fn only_the_owner_moves_a_timer_and_a_fired_one_shot_is_gone() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let id = q.insert(t0 + ms(10), None, MissedTicks::Burst, 1);
        let err = q.set(id, t0 + ms(1), |owner| *owner == 2);
        assert_eq!(err, Err(TimerError::OtherLane(id)));
        assert!(err.unwrap_err().to_string().contains("another lane"));
        assert_eq!(q.next_deadline(), Some(t0 + ms(10)), "unchanged");
        let mut out = Vec::new();
        q.expire(t0 + ms(10), &mut out);
        let err = q.set(id, t0 + ms(20), |owner| *owner == 1);
        assert_eq!(err, Err(TimerError::Gone(id)));
        assert!(err.unwrap_err().to_string().contains("gone"));
    }

    #[test]
    fn a_moved_periodic_timer_keeps_its_period_from_the_new_deadline() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        let id = q.insert(t0 + ms(10), Some(ms(10)), MissedTicks::Burst, ());
        q.set(id, t0 + ms(15), anyone).unwrap();
        assert_eq!(expire_at(&mut q, t0 + ms(14)), (0, 0));
        assert_eq!(expire_at(&mut q, t0 + ms(15)), (1, 0));
        assert_eq!(q.next_deadline(), Some(t0 + ms(25)));
    }

    /// Random arms, moves, disarms, cancels and expiries against a plain
    /// list: the heap fires exactly what the list says, in its order.
    #[test]
    fn random_operations_match_a_simple_model() {
        let t0 = Instant::now();
        let mut q = TimerQueue::default();
        // (id, name, (deadline, arming order) if armed, reusable)
        type Timer = (TimerId, u32, Option<(Instant, u64)>, bool);
        let mut model: Vec<Timer> = Vec::new();
        let mut seq = 0u64;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = t0;
        let mut out = Vec::new();
        for step in 0..20_000u32 {
            let at = now + ms(next() % 50);
            match next() % 6 {
                0 if model.len() < 40 => {
                    let id = q.insert(at, None, MissedTicks::Burst, step);
                    seq += 1;
                    model.push((id, step, Some((at, seq)), false));
                }
                1 if model.len() < 40 => {
                    let id = q.insert_reusable(step);
                    model.push((id, step, None, true));
                }
                2 | 3 if !model.is_empty() => {
                    let i = (next() % model.len() as u64) as usize;
                    q.set(model[i].0, at, anyone).unwrap();
                    seq += 1;
                    model[i].2 = Some((at, seq));
                }
                4 if !model.is_empty() => {
                    let i = (next() % model.len() as u64) as usize;
                    if next() % 2 == 0 {
                        let was = q.unset(model[i].0, anyone).unwrap();
                        assert_eq!(was, model[i].2.take().is_some());
                    } else {
                        assert!(q.cancel(model[i].0));
                        model.remove(i);
                    }
                }
                _ => {
                    now += ms(next() % 20);
                    out.clear();
                    q.expire(now, &mut out);
                    let mut due: Vec<_> = model
                        .iter()
                        .filter_map(|&(id, name, armed, _)| {
                            armed.filter(|(d, _)| *d <= now).map(|a| (a, id, name))
                        })
                        .collect();
                    due.sort_by_key(|&(a, _, _)| a);
                    let fired: Vec<_> = out.iter().map(|&(id, name, _)| (id, name)).collect();
                    let expected: Vec<_> = due.iter().map(|&(_, id, name)| (id, name)).collect();
                    assert_eq!(fired, expected, "step {step}");
                    for (_, id, _) in due {
                        let i = model.iter().position(|m| m.0 == id).unwrap();
                        if model[i].3 {
                            model[i].2 = None;
                        } else {
                            model.remove(i);
                        }
                    }
                }
            }
            let armed = model.iter().filter(|m| m.2.is_some()).count();
            assert_eq!((q.len(), q.heap.len()), (model.len(), armed), "step {step}");
            let first = model.iter().filter_map(|m| m.2).min().map(|(d, _)| d);
            assert_eq!(q.next_deadline(), first, "step {step}");
        }
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
