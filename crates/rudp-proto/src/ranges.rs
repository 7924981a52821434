//! A set of `u64`s kept as sorted, disjoint inclusive ranges: received
//! packet numbers (for ACK frames and duplicate detection) and delivered
//! message sequence numbers.

use std::collections::VecDeque;

/// Sorted, disjoint, non-adjacent inclusive ranges, bounded to
/// `max_ranges`: past it the lowest range is forgotten and every number
/// below the new floor counts as present (a late packet that old is taken
/// for a duplicate and dropped, which reliability repairs).
///
/// The highest range is kept in place (`top`), the others in a
/// `VecDeque`: numbers that arrive in order (a connection's packets, as a
/// rule) only extend `top`, so a connection without gaps never allocates
/// the deque, and a server handling such a packet once a tick does not
/// fetch a second allocation (out of the cache by then) for it.
#[derive(Debug, Clone)]
pub(crate) struct RangeSet {
    /// The ranges below `top`, ascending.
    ranges: VecDeque<(u64, u64)>,
    /// The highest range (`None`: the set is empty above the floor).
    top: Option<(u64, u64)>,
    max_ranges: usize,
    floor: u64,
}

impl RangeSet {
    /// An empty set keeping at most `max_ranges` ranges (at least 1).
    pub(crate) fn new(max_ranges: usize) -> Self {
        RangeSet {
            // Grown as ranges come (most connections see one or two).
            ranges: VecDeque::new(),
            top: None,
            max_ranges: max_ranges.max(1),
            floor: 0,
        }
    }

    /// Adds `v`; false when it was already present (or below the floor).
    pub(crate) fn insert(&mut self, v: u64) -> bool {
        if v < self.floor {
            return false;
        }
        // `top` is `None` only when the set is empty above the floor.
        let Some((lo, hi)) = self.top else {
            self.top = Some((v, v));
            return true;
        };
        if v >= lo {
            if v <= hi {
                return false;
            }
            if v == hi + 1 {
                self.top = Some((lo, v));
            } else {
                self.ranges.push_back((lo, hi));
                self.top = Some((v, v));
                self.bound();
            }
            return true;
        }
        // Below `top` (a late number: rare): the whole set in the deque,
        // as it was kept before `top`.
        self.ranges.push_back((lo, hi));
        self.top = None;
        let new = self.insert_in_deque(v);
        self.top = self.ranges.pop_back();
        new
    }

    /// Forgets the lowest range while there are more than `max_ranges`.
    fn bound(&mut self) {
        while self.ranges.len() + usize::from(self.top.is_some()) > self.max_ranges {
            match self.ranges.pop_front() {
                Some((_, hi)) => self.floor = hi + 1,
                None => break,
            }
        }
    }

    /// [`RangeSet::insert`] with every range in `ranges`.
    fn insert_in_deque(&mut self, v: u64) -> bool {
        insert_sorted(&mut self.ranges, &mut self.floor, self.max_ranges, v)
    }

    /// True when `v` is in the set or below the floor.
    pub(crate) fn contains(&self, v: u64) -> bool {
        if v < self.floor {
            return true;
        }
        if let Some((lo, hi)) = self.top {
            if v >= lo {
                return v <= hi;
            }
        }
        sorted_contains(&self.ranges, v)
    }

    /// The largest number in the set.
    pub(crate) fn largest(&self) -> Option<u64> {
        self.top.map(|(_, hi)| hi)
    }

    /// Numbers below this are treated as present.
    #[cfg(test)]
    pub(crate) fn floor(&self) -> u64 {
        self.floor
    }

    /// How many ranges are kept.
    #[cfg(test)]
    pub(crate) fn range_count(&self) -> usize {
        self.ranges.len() + usize::from(self.top.is_some())
    }

    /// Ranges, largest first.
    pub(crate) fn iter_desc(&self) -> impl Iterator<Item = (u64, u64)> + Clone + '_ {
        self.top
            .into_iter()
            .chain(self.ranges.iter().rev().copied())
    }

    /// The ranges at or above `min`, largest first, the lowest one clipped
    /// at `min`.
    pub(crate) fn iter_desc_from(&self, min: u64) -> impl Iterator<Item = (u64, u64)> + Clone + '_ {
        self.iter_desc()
            .take_while(move |&(_, hi)| hi >= min)
            .map(move |(lo, hi)| (lo.max(min), hi))
    }

    /// How many ranges reach `min` or above.
    pub(crate) fn count_from(&self, min: u64) -> usize {
        usize::from(self.top.is_some_and(|(_, hi)| hi >= min)) + self.ranges.len()
            - self.ranges.partition_point(|&(_, hi)| hi < min)
    }

    /// Fills `out` with the ranges at or above `min`, largest first, the
    /// lowest one clipped at `min`; returns how many.
    #[cfg(test)]
    pub(crate) fn fill_desc(&self, min: u64, out: &mut [(u64, u64)]) -> usize {
        let mut n = 0;
        for (lo, hi) in self.iter_desc() {
            if n == out.len() || hi < min {
                break;
            }
            out[n] = (lo.max(min), hi);
            n += 1;
        }
        n
    }
}

/// Adds `v` to ascending, disjoint, non-adjacent `ranges` holding at most
/// `max_ranges` (past it the lowest is forgotten and `floor` raised);
/// false when it was already present or below `floor`.
fn insert_sorted(
    ranges: &mut VecDeque<(u64, u64)>,
    floor: &mut u64,
    max_ranges: usize,
    v: u64,
) -> bool {
    if v < *floor {
        return false;
    }
    let idx = ranges.partition_point(|&(lo, _)| lo <= v);
    let joins_prev = if idx > 0 {
        let (_, hi) = ranges[idx - 1];
        if hi >= v {
            return false;
        }
        hi + 1 == v
    } else {
        false
    };
    let joins_next = idx < ranges.len() && ranges[idx].0 == v + 1;
    match (joins_prev, joins_next) {
        (true, true) => {
            let hi = ranges[idx].1;
            ranges[idx - 1].1 = hi;
            ranges.remove(idx);
        }
        (true, false) => ranges[idx - 1].1 = v,
        (false, true) => ranges[idx].0 = v,
        (false, false) => ranges.insert(idx, (v, v)),
    }
    if ranges.len() > max_ranges {
        if let Some((_, hi)) = ranges.pop_front() {
            *floor = hi + 1;
        }
    }
    true
}

/// Whether one of ascending `ranges` holds `v`.
fn sorted_contains(ranges: &VecDeque<(u64, u64)>, v: u64) -> bool {
    let idx = ranges.partition_point(|&(lo, _)| lo <= v);
    idx > 0 && ranges[idx - 1].1 >= v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn merges_neighbours() {
        let mut s = RangeSet::new(8);
        for v in [5, 7, 6, 1, 2, 9] {
            assert!(s.insert(v));
        }
        assert!(!s.insert(6));
        assert_eq!(s.iter_desc().collect::<Vec<_>>(), [(9, 9), (5, 7), (1, 2)]);
        assert!(s.contains(1) && s.contains(7) && !s.contains(8) && !s.contains(0));
        let mut out = [(0, 0); 4];
        assert_eq!(s.fill_desc(6, &mut out), 2);
        assert_eq!(out[..2], [(9, 9), (6, 7)]);
        assert_eq!(s.iter_desc_from(6).collect::<Vec<_>>(), [(9, 9), (6, 7)]);
        assert_eq!(
            (s.count_from(6), s.count_from(8), s.count_from(0)),
            (2, 1, 3)
        );
        assert_eq!(s.count_from(10), 0);
    }

    #[test]
    fn forgets_the_lowest_range_past_the_bound() {
        let mut s = RangeSet::new(2);
        s.insert(1);
        s.insert(3);
        s.insert(5);
        assert_eq!(s.range_count(), 2);
        assert_eq!(s.floor(), 2);
        assert!(s.contains(0), "below the floor counts as present");
        assert!(!s.insert(1));
        assert!(!s.contains(4));
    }

    proptest! {
        #[test]
        fn matches_a_btreeset(values in proptest::collection::vec(0u64..200, 0..300)) {
            let mut s = RangeSet::new(usize::MAX);
            let mut model = BTreeSet::new();
            for v in values {
                prop_assert_eq!(s.insert(v), model.insert(v));
            }
            for v in 0..210 {
                prop_assert_eq!(s.contains(v), model.contains(&v));
            }
            let mut prev: Option<(u64, u64)> = None;
            for (lo, hi) in s.iter_desc() {
                prop_assert!(lo <= hi);
                if let Some((plo, _)) = prev { prop_assert!(hi + 1 < plo, "disjoint, not adjacent"); }
                prev = Some((lo, hi));
            }
        }

        /// Bounded, mostly in order with gaps and late numbers (as packet
        /// numbers come): every answer as the set kept wholly in a deque
        /// (the layout before the highest range moved in place).
        #[test]
        fn matches_the_deque_layout(
            steps in proptest::collection::vec((0u64..6, 0u64..40), 0..300),
            max_ranges in 1usize..6,
        ) {
            let mut s = RangeSet::new(max_ranges);
            let mut m = Model { ranges: VecDeque::new(), max_ranges, floor: 0 };
            let mut next = 0u64;
            for (kind, x) in steps {
                // Mostly the next number; sometimes a jump ahead, or one
                // from the past.
                let v = match kind {
                    0..=2 => next,
                    3 => next + x / 8 + 1,
                    _ => next.saturating_sub(x),
                };
                next = next.max(v + 1);
                prop_assert_eq!(s.insert(v), m.insert(v));
                prop_assert_eq!(s.largest(), m.ranges.back().map(|r| r.1));
                prop_assert_eq!(s.floor(), m.floor);
                prop_assert_eq!(s.range_count(), m.ranges.len());
            }
            let desc: Vec<_> = m.ranges.iter().rev().copied().collect();
            prop_assert_eq!(s.iter_desc().collect::<Vec<_>>(), desc);
            for v in 0..next + 2 {
                prop_assert_eq!(s.contains(v), m.contains(v));
                prop_assert_eq!(s.count_from(v), m.ranges.iter().filter(|r| r.1 >= v).count());
            }
        }
    }

    /// The set as it was kept before `top`: every range in the deque (the
    /// same deque operations, so what the test checks is `top`'s split).
    struct Model {
        ranges: VecDeque<(u64, u64)>,
        max_ranges: usize,
        floor: u64,
    }

    impl Model {
        fn insert(&mut self, v: u64) -> bool {
            insert_sorted(&mut self.ranges, &mut self.floor, self.max_ranges, v)
        }

        fn contains(&self, v: u64) -> bool {
            v < self.floor || sorted_contains(&self.ranges, v)
        }
    }

    #[test]
    fn in_order_numbers_allocate_nothing() {
        let mut s = RangeSet::new(8);
        for v in 0..1000 {
            assert!(s.insert(v));
        }
        assert_eq!(s.iter_desc().collect::<Vec<_>>(), [(0, 999)]);
        assert_eq!(s.ranges.capacity(), 0, "the highest range is in place");
    }
}
