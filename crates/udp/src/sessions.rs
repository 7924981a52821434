//! The session table of one server lane: peers by address, bounded.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::time::Instant;

use keel_reactor::TimerId;

use crate::sys::LocalAddr;

pub(crate) struct Slot<S> {
    pub(crate) peer: SocketAddr,
    pub(crate) state: S,
    /// When the session last had a datagram (set by the lane, with
    /// [`Sessions::touch`]).
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

/// A peer address as the session index hashes it: an IPv4 peer as one
/// 64-bit word (address and port), an IPv6 peer as its address and one
/// word (port and scope). The derived `Hash` of `SocketAddr` feeds the
/// hasher four to six pieces (discriminant, length prefix, octets, port),
/// each a SipHash call: this is the one hash a server pays per datagram,
/// and the same keyed SipHash over fewer words costs about half. Equality
/// stays `SocketAddr`'s (a field the hash leaves out, such as the IPv6
/// flow info, only makes two keys collide, never equal).
#[derive(Clone, Copy, PartialEq, Eq)]
struct PeerKey(SocketAddr);

impl Hash for PeerKey {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self.0 {
            SocketAddr::V4(a) => {
                h.write_u64((u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port()));
            }
            SocketAddr::V6(a) => {
                h.write_u128(u128::from(*a.ip()));
                h.write_u64((u64::from(a.port()) << 32) | u64::from(a.scope_id()));
            }
        }
    }
}

/// No slot (the end of the activity list).
const NIL: u32 = u32::MAX;

/// A slot's neighbours in the activity list.
#[derive(Clone, Copy)]
struct Link {
    /// Less recently active.
    prev: u32,
    /// More recently active.
    next: u32,
}

/// Sessions in a slab (stable indices, no allocation per datagram) with an
/// index by peer address. std's SipHash keyed per process keeps an attacker
/// who picks source addresses from degrading the map.
///
/// The open sessions are also in a doubly linked list by activity (links
/// by slot index, beside the slab): least recently active first. A
/// datagram moves its session to the end ([`Sessions::touch`]), so the
/// session to evict ([`Sessions::evict_candidate`]) and the sessions past
/// the idle timeout ([`Sessions::idle_before`]) are found from the front,
/// each step O(1) whatever the table holds.
pub(crate) struct Sessions<S> {
    slots: Vec<Option<Slot<S>>>,
    /// Per slot: bumped each time a session leaves it.
    gens: Vec<u32>,
    /// Per slot: its place in the activity list (meaningless while free).
    links: Vec<Link>,
    /// Least recently active open session, or [`NIL`].
    oldest: u32,
    /// Most recently active open session, or [`NIL`].
    newest: u32,
    free: Vec<usize>,
    index: HashMap<PeerKey, usize>,
}

impl<S> Sessions<S> {
    pub(crate) fn new() -> Self {
        Sessions {
            slots: Vec::new(),
            gens: Vec::new(),
            links: Vec::new(),
            oldest: NIL,
            newest: NIL,
            free: Vec::new(),
            index: HashMap::new(),
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
        self.index.get(&PeerKey(*peer)).copied()
    }

    /// Opens a session for `peer`, active at `now` (the most recently
    /// active session).
    pub(crate) fn insert(&mut self, peer: SocketAddr, state: S, now: Instant) -> usize {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                self.links.push(Link {
                    prev: NIL,
                    next: NIL,
                });
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
        self.index.insert(PeerKey(peer), i);
        self.push_newest(i as u32);
        i
    }

    /// The session in slot `i` had a datagram at `now`: it becomes the most
    /// recently active. O(1).
    pub(crate) fn touch(&mut self, i: usize, now: Instant) {
        let Some(slot) = self.slots.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        slot.last_active = now;
        let i = i as u32;
        if self.newest != i {
            self.unlink(i);
            self.push_newest(i);
        }
    }

    fn push_newest(&mut self, i: u32) {
        self.links[i as usize] = Link {
            prev: self.newest,
            next: NIL,
        };
        match self.newest {
            NIL => self.oldest = i,
            n => self.links[n as usize].next = i,
        }
        self.newest = i;
    }

    fn unlink(&mut self, i: u32) {
        let Link { prev, next } = self.links[i as usize];
        match prev {
            NIL => self.oldest = next,
            p => self.links[p as usize].next = next,
        }
        match next {
            NIL => self.newest = prev,
            n => self.links[n as usize].prev = prev,
        }
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
        self.index.remove(&PeerKey(slot.peer));
        self.unlink(i as u32);
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.free.push(i);
        Some(slot)
    }

    #[cfg(test)]
    pub(crate) fn remove(&mut self, peer: &SocketAddr) -> Option<Slot<S>> {
        let i = self.find(peer)?;
        self.remove_at(i)
    }

    /// The session to evict for a newcomer when the table is full: the
    /// least recently active one (the front of the activity list). O(1).
    ///
    /// A newcomer is the most recently active session, so a flood of
    /// one-datagram sources evicts its own sessions, oldest first, and a
    /// session that had a datagram since the last `max_sessions`
    /// admissions is never the one, whatever the flood.
    pub(crate) fn evict_candidate(&self) -> Option<usize> {
        (self.oldest != NIL).then_some(self.oldest as usize)
    }

    /// Indices of sessions idle since before `cutoff`, appended to `out`,
    /// least recently active first: walks the activity list from the
    /// front, so it costs O(1 + sessions found), not a scan of the table
    /// (the lane's times only grow, so the list is in `last_active` order).
    pub(crate) fn idle_before(&self, cutoff: Instant, out: &mut Vec<usize>) {
        let mut i = self.oldest;
        while i != NIL {
            match &self.slots[i as usize] {
                Some(s) if s.last_active < cutoff => out.push(i as usize),
                _ => break,
            }
            i = self.links[i as usize].next;
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
                s.touch(i, now);
            }
            if let Some(i) = s.find(&quiet).filter(|_| step % (2 * MAX as u32) == 0) {
                s.touch(i, now);
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
        // A peer silent for a whole table of admissions does go.
        let at = quiet_evicted_at.expect("the quiet peer outlived the flood");
        assert!(at < 2 * MAX as u32, "{at}");
    }

    /// Issue 19: the candidate is exactly the least recently active
    /// session, against a model (the open sessions with the step each was
    /// last active), over random inserts, datagrams, removals and
    /// evictions. A clock (approximate LRU) picks a session heard from
    /// since its hand's last visit over an older one it has not reached.
    #[test]
    fn the_candidate_is_always_the_least_recently_active_session() {
        let t = Instant::now();
        let mut s = Sessions::new();
        // peer port -> step last active
        let mut model: HashMap<u16, u64> = HashMap::new();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for step in 0..20_000u64 {
            let now = t + Duration::from_micros(step);
            let port = (next() % 300) as u16;
            match next() % 8 {
                0 => {
                    if let Some(i) = s.find(&addr(port)) {
                        s.remove_at(i);
                        model.remove(&port);
                    }
                }
                1 => {
                    if let Some(i) = s.evict_candidate() {
                        let gone = s.remove_at(i).unwrap().peer.port();
                        let oldest = model.values().min().copied();
                        assert_eq!(Some(model[&gone]), oldest, "step {step}");
                        model.remove(&gone);
                    } else {
                        assert!(model.is_empty());
                    }
                }
                _ => match s.find(&addr(port)) {
                    Some(i) => {
                        s.touch(i, now);
                        model.insert(port, step);
                    }
                    None => {
                        s.insert(addr(port), (), now);
                        model.insert(port, step);
                    }
                },
            }
            assert_eq!(s.len(), model.len());
        }
        // What the idle sweep finds: exactly the sessions idle before the
        // cutoff, least recently active first.
        let cutoff_step = 19_000;
        let mut out = Vec::new();
        s.idle_before(t + Duration::from_micros(cutoff_step), &mut out);
        let found: Vec<u64> = out
            .iter()
            .map(|&i| model[&s.get_mut(i).unwrap().peer.port()])
            .collect();
        let mut want: Vec<u64> = model
            .values()
            .copied()
            .filter(|&v| v < cutoff_step)
            .collect();
        want.sort_unstable();
        assert_eq!(found, want);
    }

    #[test]
    fn eviction_and_the_idle_sweep_follow_activity_not_slot_order() {
        let t = Instant::now();
        let secs = |n| t + Duration::from_secs(n);
        let mut s = Sessions::new();
        for p in 0..4u16 {
            s.insert(addr(p), (), secs(u64::from(p)));
        }
        // Only their first datagrams: evicted in the order they came.
        assert_eq!(s.evict_candidate(), Some(0));
        // A datagram makes a session the most recent: 1 is now the oldest.
        s.touch(0, secs(10));
        assert_eq!(s.evict_candidate(), Some(1));
        s.touch(1, secs(11));
        s.touch(3, secs(12));
        assert_eq!(s.evict_candidate(), Some(2));
        // A newcomer takes the evicted slot and is the most recent.
        s.remove_at(2);
        assert_eq!(s.insert(addr(20), (), secs(13)), 2);
        assert_eq!(s.evict_candidate(), Some(0));
        let mut out = Vec::new();
        s.idle_before(secs(12), &mut out);
        assert_eq!(out, [0, 1]);
        // Removing the oldest and the newest keeps the list whole.
        s.remove_at(0);
        s.remove_at(2);
        assert_eq!(s.evict_candidate(), Some(1));
        s.remove_at(1);
        assert_eq!(s.evict_candidate(), Some(3));
        s.remove_at(3);
        assert_eq!(s.evict_candidate(), None);
        out.clear();
        s.idle_before(secs(100), &mut out);
        assert!(out.is_empty());
    }
}
