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
    /// A datagram came since the eviction hand last visited this slot
    /// ([`Sessions::evict_candidate`]); a session's first datagram, the one
    /// that opened it, does not count.
    pub(crate) heard: bool,
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
    /// The slot the eviction hand visits next.
    hand: usize,
}

impl<S> Sessions<S> {
    pub(crate) fn new() -> Self {
        Sessions {
            slots: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            hand: 0,
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
            heard: false,
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

    /// The session to evict for a newcomer when the table is full: a clock
    /// (approximate LRU). The hand visits the slots in turn; a session heard
    /// from since the hand's last visit is spared (its mark cleared), and the
    /// first one not heard from is the one. If every session was heard from,
    /// the idlest of them goes.
    ///
    /// A newcomer takes the slot just evicted (the free list is empty when
    /// the table is full), behind the hand, unmarked: it has a whole turn to
    /// send again. So a flood of one-datagram sources evicts its own oldest
    /// sessions, and a session that sends at least once per turn of the hand
    /// (about `max_sessions` admissions under such a flood) is not evicted,
    /// whatever share of the table opened after its last datagram. Taking
    /// the idlest of a few random sessions instead (as this did before)
    /// evicts it whenever the sample holds only sessions younger than it:
    /// with half the table younger, one in 128 samples that include it.
    ///
    /// At most one turn; amortized O(1), since every slot passed over had
    /// its mark set by a datagram (a flood cannot make eviction expensive).
    pub(crate) fn evict_candidate(&mut self) -> Option<usize> {
        let n = self.slots.len();
        let mut idlest: Option<(usize, Instant)> = None;
        for _ in 0..n {
            let i = if self.hand < n { self.hand } else { 0 };
            self.hand = i + 1;
            let Some(s) = &mut self.slots[i] else {
                continue;
            };
            if !s.heard {
                return Some(i);
            }
            s.heard = false;
            if idlest.is_none_or(|(_, t)| s.last_active < t) {
                idlest = Some((i, s.last_active));
            }
        }
        idlest.map(|(i, _)| i)
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

    /// What a server lane does with a datagram for an open session.
    fn heard_from<S>(s: &mut Sessions<S>, i: usize, now: Instant) {
        let slot = s.get_mut(i).unwrap();
        slot.last_active = now;
        slot.heard = true;
    }

    /// A full table, one new peer per step (each sends only its first
    /// datagram), and two peers that keep talking: `live` once every 750
    /// admissions (so up to three quarters of the table is younger than it:
    /// the idlest of a few random sessions would often be `live`), `quiet`
    /// once every two turns of the table. The eviction is what a server lane
    /// does: the candidate goes, the newcomer comes in.
    #[test]
    fn a_flood_of_new_peers_evicts_its_own_not_a_peer_that_keeps_talking() {
        const MAX: usize = 1000;
        const STEPS: u32 = 50_000;
        let t = Instant::now();
        let at = |step: u32| t + Duration::from_micros(u64::from(step));
        let (live, quiet) = (addr(1), addr(2));
        let mut s = Sessions::new();
        s.insert(live, (), t);
        s.insert(quiet, (), t);
        let mut quiet_evicted_at = None;
        for step in 0..STEPS {
            let now = at(step);
            if let Some(i) = s.find(&live).filter(|_| step % 750 == 0) {
                heard_from(&mut s, i, now);
            }
            if let Some(i) = s.find(&quiet).filter(|_| step % (2 * MAX as u32) == 0) {
                heard_from(&mut s, i, now);
            }
            if s.len() >= MAX {
                let victim = s.evict_candidate().unwrap();
                let gone = s.remove_at(victim).unwrap().peer;
                assert_ne!(gone, live, "evicted at step {step}");
                if gone == quiet {
                    quiet_evicted_at.get_or_insert(step);
                }
            }
            let ip = 0x0A00_0000 + step;
            s.insert(SocketAddr::from((ip.to_be_bytes(), 9)), (), now);
            assert!(s.len() <= MAX);
        }
        assert!(s.find(&live).is_some());
        // The hand does evict a peer silent for a whole turn.
        let at = quiet_evicted_at.expect("the quiet peer outlived the flood");
        assert!(at < 3 * MAX as u32, "{at}");
    }

    #[test]
    fn the_hand_spares_sessions_heard_from_and_takes_the_idlest_when_all_were() {
        let t = Instant::now();
        let mut s = Sessions::new();
        for p in 0..4u16 {
            s.insert(addr(p), (), t);
        }
        // Only their first datagrams: evicted in slot order, each newcomer
        // into the slot just freed, behind the hand.
        for (p, expect) in (10..14u16).zip(0..4) {
            let i = s.evict_candidate().unwrap();
            assert_eq!(i, expect);
            s.remove_at(i);
            assert_eq!(s.insert(addr(p), (), t), i);
        }
        // Heard from since the hand's last visit: spared.
        let secs = |n| t + Duration::from_secs(n);
        heard_from(&mut s, 0, secs(3));
        heard_from(&mut s, 1, secs(1));
        assert_eq!(s.evict_candidate(), Some(2), "the first not heard from");
        s.remove_at(2);
        s.insert(addr(20), (), secs(2));
        // Every one heard from: after a whole turn the idlest goes, every
        // mark is cleared, and the hand is where it started.
        for (i, n) in [(0, 4), (1, 2), (2, 5), (3, 6)] {
            heard_from(&mut s, i, secs(n));
        }
        assert_eq!(s.evict_candidate(), Some(1));
        assert!(s.slots_mut().all(|(_, slot)| !slot.heard));
        assert_eq!(s.evict_candidate(), Some(3));

        let mut out = Vec::new();
        s.idle_before(secs(5), &mut out);
        assert_eq!(out, [0, 1]);
    }
}
