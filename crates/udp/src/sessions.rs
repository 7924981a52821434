//! The session table of one server lane: peers by address, bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

pub(crate) struct Slot<S> {
    pub(crate) peer: SocketAddr,
    pub(crate) state: S,
    pub(crate) last_active: Instant,
}

/// Sessions in a slab (stable indices, no allocation per datagram) with an
/// index by peer address. std's SipHash keyed per process keeps an attacker
/// who picks source addresses from degrading the map.
pub(crate) struct Sessions<S> {
    slots: Vec<Option<Slot<S>>>,
    free: Vec<usize>,
    index: HashMap<SocketAddr, usize>,
    rng: u64,
}

impl<S> Sessions<S> {
    pub(crate) fn new() -> Self {
        Sessions {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn find(&self, peer: &SocketAddr) -> Option<usize> {
        self.index.get(peer).copied()
    }

    pub(crate) fn insert(&mut self, peer: SocketAddr, state: S, now: Instant) -> usize {
        let slot = Slot {
            peer,
            state,
            last_active: now,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.index.insert(peer, i);
        i
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Slot<S>> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    pub(crate) fn remove_at(&mut self, i: usize) -> Option<Slot<S>> {
        let slot = self.slots.get_mut(i)?.take()?;
        self.index.remove(&slot.peer);
        self.free.push(i);
        Some(slot)
    }

    pub(crate) fn remove(&mut self, peer: &SocketAddr) -> Option<Slot<S>> {
        let i = self.find(peer)?;
        self.remove_at(i)
    }

    /// The idlest of up to eight randomly sampled sessions (approximate LRU
    /// in O(1), so a flood cannot make eviction expensive).
    pub(crate) fn sample_idlest(&mut self) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        let mut best: Option<(usize, Instant)> = None;
        let mut tries = 0;
        while tries < 64 && (best.is_none() || tries < 8) {
            tries += 1;
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let i = (self.rng % self.slots.len() as u64) as usize;
            if let Some(s) = &self.slots[i] {
                if best.is_none_or(|(_, t)| s.last_active < t) {
                    best = Some((i, s.last_active));
                }
            }
        }
        best.map(|(i, _)| i)
            .or_else(|| self.slots.iter().position(Option::is_some))
    }

    /// Indices of sessions idle since before `cutoff`, appended to `out`.
    pub(crate) fn idle_before(&self, cutoff: Instant, out: &mut Vec<usize>) {
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(s) = s {
                if s.last_active < cutoff {
                    out.push(i);
                }
            }
        }
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (SocketAddr, &mut S)> {
        self.slots
            .iter_mut()
            .filter_map(|s| s.as_mut().map(|s| (s.peer, &mut s.state)))
    }

    pub(crate) fn peers(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.slots.iter().filter_map(|s| s.as_ref().map(|s| s.peer))
    }

    pub(crate) fn drain(&mut self) -> Vec<Slot<S>> {
        self.index.clear();
        self.free.clear();
        self.slots.drain(..).flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn insert_find_remove_reuses_slots() {
        let t = Instant::now();
        let mut s = Sessions::new();
        let a = s.insert(addr(1), "a", t);
        s.insert(addr(2), "b", t);
        assert_eq!(s.find(&addr(1)), Some(a));
        assert_eq!(s.remove(&addr(1)).unwrap().state, "a");
        assert_eq!(s.find(&addr(1)), None);
        let c = s.insert(addr(3), "c", t);
        assert_eq!(c, a, "freed slot reused");
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn idlest_sample_prefers_old_sessions_and_idle_scan_is_exact() {
        let t = Instant::now();
        let mut s = Sessions::new();
        s.insert(addr(1), (), t);
        for p in 2..6 {
            s.insert(addr(p), (), t + Duration::from_secs(10));
        }
        let mut hits = 0;
        for _ in 0..100 {
            let i = s.sample_idlest().unwrap();
            if s.get_mut(i).unwrap().peer == addr(1) {
                hits += 1;
            }
        }
        assert!(
            hits > 50,
            "the oldest session should usually be chosen: {hits}"
        );
        let mut out = Vec::new();
        s.idle_before(t + Duration::from_secs(5), &mut out);
        assert_eq!(out.len(), 1);
    }
}
