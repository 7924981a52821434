//! The session table of one server lane: peers by address, bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use keel_reactor::TimerId;

use crate::sys::LocalAddr;

pub(crate) struct Slot<S> {
    pub(crate) peer: SocketAddr,
    pub(crate) state: S,
    pub(crate) last_active: Instant,
    /// This session's timers (cancelled when it ends). Empty, and so not
    /// allocated, for a session that never made one.
    pub(crate) timers: Vec<TimerId>,
    /// The generation of the slot when this session took it.
    pub(crate) gen: u32,
    /// The local address the peer's last datagram came to, when the socket
    /// is bound to a wildcard address (`IP_PKTINFO`): replies leave from it.
    pub(crate) local: Option<LocalAddr>,
}

/// Names one session across threads: its slot and the slot's generation
/// when the session opened, so a handle to an ended session never reaches
/// the next session that reuses the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey {
    pub(crate) index: u32,
    pub(crate) gen: u32,
}

/// Sessions in a slab (stable indices, no allocation per datagram) with an
/// index by peer address. std's SipHash keyed per process keeps an attacker
/// who picks source addresses from degrading the map.
pub(crate) struct Sessions<S> {
    slots: Vec<Option<Slot<S>>>,
    /// Per slot: bumped each time a session leaves it.
    gens: Vec<u32>,
    free: Vec<usize>,
    index: HashMap<SocketAddr, usize>,
    rng: u64,
}

impl<S> Sessions<S> {
    pub(crate) fn new() -> Self {
        Sessions {
            slots: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Slots in the table, open or free: session indices are below it.
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn find(&self, peer: &SocketAddr) -> Option<usize> {
        self.index.get(peer).copied()
    }

    pub(crate) fn insert(&mut self, peer: SocketAddr, state: S, now: Instant) -> usize {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                self.slots.len() - 1
            }
        };
        self.slots[i] = Some(Slot {
            peer,
            state,
            last_active: now,
            timers: Vec::new(),
            gen: self.gens[i],
            local: None,
        });
        self.index.insert(peer, i);
        i
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Slot<S>> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// The key of the session in slot `i`.
    pub(crate) fn key(&self, i: usize) -> Option<SessionKey> {
        let slot = self.slots.get(i)?.as_ref()?;
        Some(SessionKey {
            index: i as u32,
            gen: slot.gen,
        })
    }

    /// The session `key` names, if it is still open.
    pub(crate) fn by_key(&mut self, key: SessionKey) -> Option<&mut Slot<S>> {
        self.get_mut(key.index as usize)
            .filter(|slot| slot.gen == key.gen)
    }

    pub(crate) fn remove_at(&mut self, i: usize) -> Option<Slot<S>> {
        let slot = self.slots.get_mut(i)?.take()?;
        self.index.remove(&slot.peer);
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.free.push(i);
        Some(slot)
    }

    #[cfg(test)]
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

    /// Every open session with its slot index.
    pub(crate) fn slots_mut(&mut self) -> impl Iterator<Item = (usize, &mut Slot<S>)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.as_mut().map(|s| (i, s)))
    }

    /// Slot indices of every open session (for ending them all).
    pub(crate) fn open_indices(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.index.len());
        out.extend(self.index.values().copied());
        out.sort_unstable();
        out
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
        // The reused slot has a new generation: a key to the old session
        // does not reach the new one.
        let old = SessionKey {
            index: a as u32,
            gen: 0,
        };
        assert!(s.by_key(old).is_none());
        let new = s.key(c).unwrap();
        assert_eq!(s.by_key(new).unwrap().state, "c");
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
