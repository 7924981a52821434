//! One timing structure for all the connections of an endpoint: a min-heap
//! of (deadline, slot) with lazy deletion. Each slot has at most one
//! current deadline; entries superseded by a later `set` stay in the heap
//! until they reach its top (then they are skipped) or the heap is
//! compacted. Finding the earliest deadline costs O(log n) amortized
//! instead of a scan of every connection.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Deadlines of the slots of an endpoint.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    /// The current deadline of each slot.
    at: Vec<Option<Instant>>,
    live: usize,
    /// Rebuilds so far (tests check they stay rare).
    #[cfg(test)]
    compactions: u64,
}

impl Deadlines {
    /// Sets slot `slot`'s deadline (`None`: none).
    pub(crate) fn set(&mut self, slot: usize, t: Option<Instant>) {
        if slot >= self.at.len() {
            self.at.resize(slot + 1, None);
        }
        let old = std::mem::replace(&mut self.at[slot], t);
        if old == t {
            return;
        }
        match (old.is_some(), t.is_some()) {
            (false, true) => self.live += 1,
            (true, false) => self.live -= 1,
            _ => {}
        }
        if let Some(t) = t {
            // A full heap at least half stale drops its stale entries
            // instead of growing. Less stale, it grows (to at most about
            // twice the live count, by the rule below): compacting a full
            // heap with a few stale entries would rebuild it every few
            // pushes, O(live) each (4 % of a 1,000-connection server's
            // CPU). In a steady state (a fixed set of connections) the
            // heap then stops reallocating once it has that room.
            if self.heap.len() == self.heap.capacity() && 2 * self.live <= self.heap.len() {
                self.compact();
            }
            self.heap.push(Reverse((t, slot)));
            // Stale entries: rebuild once they outnumber the live ones
            // (keeping the heap's capacity: no allocation).
            if self.heap.len() > 2 * self.live + 64 {
                self.compact();
            }
        }
    }

    fn compact(&mut self) {
        #[cfg(test)]
        {
            self.compactions += 1;
        }
        let mut v = std::mem::take(&mut self.heap).into_vec();
        v.clear();
        v.extend(
            self.at
                .iter()
                .enumerate()
                .filter_map(|(s, t)| t.map(|t| Reverse((t, s)))),
        );
        self.heap = BinaryHeap::from(v);
    }

    fn is_current(&self, t: Instant, slot: usize) -> bool {
        self.at.get(slot).copied().flatten() == Some(t)
    }

    /// The earliest deadline.
    pub(crate) fn next(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, s))) = self.heap.peek() {
            if self.is_current(t, s) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// A slot whose deadline is at or before `now`; its deadline is
    /// cleared (set it again after running its timers).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let t = self.next()?;
        if t > now {
            return None;
        }
        let Reverse((_, s)) = self.heap.pop()?;
        self.set(s, None);
        Some(s)
    }

    /// Entries in the heap, stale ones included (for tests).
    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn earliest_first_and_superseded_entries_skipped() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut d = Deadlines::default();
        d.set(0, Some(ms(30)));
        d.set(1, Some(ms(10)));
        d.set(2, Some(ms(20)));
        d.set(1, Some(ms(40))); // supersedes 10
        assert_eq!(d.next(), Some(ms(20)));
        assert_eq!(d.pop_due(ms(25)), Some(2));
        assert_eq!(d.pop_due(ms(25)), None);
        d.set(0, None);
        assert_eq!(d.next(), Some(ms(40)));
        assert_eq!(d.pop_due(ms(100)), Some(1));
        assert_eq!(d.next(), None);
    }

    /// Seeded random sets, clears and pops against a scan of every slot.
    #[test]
    fn agrees_with_a_scan_of_every_slot() {
        let t0 = Instant::now();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut d = Deadlines::default();
        let mut model: Vec<Option<Instant>> = vec![None; 40];
        let mut now = t0;
        for step in 0..200_000 {
            let slot = rand(40) as usize;
            match rand(10) {
                0 => {
                    d.set(slot, None);
                    model[slot] = None;
                }
                1..=6 => {
                    let t = now + Duration::from_micros(rand(5_000));
                    d.set(slot, Some(t));
                    model[slot] = Some(t);
                }
                7 => now += Duration::from_micros(rand(1_000)),
                _ => {
                    let due = d.pop_due(now);
                    let earliest = model.iter().flatten().min().copied();
                    match due {
                        Some(s) => {
                            assert_eq!(
                                model[s], earliest,
                                "step {step}: slot {s} not the earliest"
                            );
                            assert!(earliest.is_some_and(|t| t <= now), "step {step}");
                            model[s] = None;
                        }
                        None => assert!(earliest.is_none_or(|t| t > now), "step {step}: missed"),
                    }
                }
            }
            assert_eq!(
                d.next(),
                model.iter().flatten().min().copied(),
                "step {step}"
            );
            assert!(
                d.heap_len() <= 2 * 40 + 64 + 1,
                "step {step}: {}",
                d.heap_len()
            );
        }
    }

    #[test]
    fn stale_entries_stay_bounded() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        for i in 0..10_000u64 {
            d.set((i % 3) as usize, Some(t0 + Duration::from_micros(i)));
        }
        assert!(d.heap_len() <= 2 * 3 + 64 + 1, "{}", d.heap_len());
        assert_eq!(d.next(), Some(t0 + Duration::from_micros(9_997)));
    }

    #[test]
    fn many_connections_rebuild_rarely_and_stop_reallocating() {
        // 1,000 connections each pushing its deadline later, in turn, as a
        // server's do with every packet.
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        let step = |d: &mut Deadlines, i: u64| {
            d.set((i % 1000) as usize, Some(t0 + Duration::from_micros(i)));
        };
        for i in 0..50_000 {
            step(&mut d, i);
        }
        let (capacity, compactions) = (d.heap.capacity(), d.compactions);
        for i in 50_000..150_000 {
            step(&mut d, i);
        }
        assert_eq!(
            d.heap.capacity(),
            capacity,
            "reallocated in the steady state"
        );
        // A rebuild costs O(1,000); one per ~1,000 pushes keeps it O(1).
        let rebuilds = d.compactions - compactions;
        assert!(rebuilds <= 100, "{rebuilds} rebuilds in 100,000 pushes");
        assert_eq!(d.next(), Some(t0 + Duration::from_micros(149_000)));
    }
}
