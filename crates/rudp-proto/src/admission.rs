//! Admission limits: connections and handshakes per source address, so
//! that one attacker (one token, one host with many sockets) cannot fill
//! an endpoint's connection table. The settings ([`Admission`]) and their
//! bookkeeping (the source key, the bounded table of handshake-rate
//! buckets, the replay cache that binds a connect token to an IP); the
//! endpoint applies them after the cookie round trip.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::ConfigError;

/// Tokens the replay cache ([`ReplayCache`]) of one endpoint remembers at
/// most by default (oldest forgotten first); a `keel_rudp::Server`'s
/// shared cache holds this many per lane.
pub const REPLAY_CACHE: usize = 8192;

/// Limits on admission: how many connections, and how many handshakes a
/// second, one source address gets on one endpoint (a server lane), so
/// that one attacker cannot fill the connection table. `docs/security.md`
/// ("Limits: admission") has the figures.
///
/// A source address is its IP, not IP and port (64 sockets of one host
/// share an IP), with an IPv4-mapped IPv6 address counted as its IPv4
/// address and an IPv6 address by its first [`ipv6_prefix_len`] bits (one
/// subscriber usually gets a whole /64). The limits count only sources
/// that returned their cookie (they receive at that address), so a spoofer
/// cannot spend a victim's share; RETRY stays stateless and unlimited.
/// Each endpoint (lane) counts its own sources; on a multi-lane
/// `keel_rudp::Server` the limits still hold server-wide, because
/// its lanes' steering program sends every handshake of one source address
/// (an IPv6 one by its prefix, up to /64) to one lane, whatever the port.
///
/// Besides these limits, and not configurable: a connect token buys one
/// live connection. A new connection made with the token of a connected
/// one (from the same IP, any port: a client that crashed and came back;
/// from another IP it is refused as replayed) replaces it, and the old one
/// is closed with [`CLOSE_REPLACED`](crate::CLOSE_REPLACED). An attacker holding one token thus
/// holds one live connection, however many hellos it sends. On a server
/// this too is server-wide: the same IP reaches the same lane, which
/// replaces; another IP is refused on every lane, as the lanes share one
/// [`ReplayCache`].
///
/// The trade-off: players behind one NAT (a LAN party, a campus, carrier
/// NAT) share one address and so one share. Raise
/// [`max_connections_per_ip`] for a server that expects them; an attacker
/// then holds that many too.
///
/// [`ipv6_prefix_len`]: Admission::ipv6_prefix_len
/// [`max_connections_per_ip`]: Admission::max_connections_per_ip
///
/// # Examples
///
/// ```
/// use keel_rudp_proto::Admission;
///
/// let mut a = Admission::default();
/// assert_eq!(a.max_connections_per_ip, 16);
/// a.max_connections_per_ip = 64; // a LAN-party server
/// a.validate().unwrap();
/// a.handshake_burst = 0;
/// assert_eq!(
///     a.validate().unwrap_err().to_string(),
///     "handshake_burst: 0, 1 or more accepted"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Connections one source address holds at most (default 16), closing
    /// ones included until they are removed; past it a hello gets a
    /// REFUSE with [`REFUSE_ADDRESS_LIMIT`](crate::REFUSE_ADDRESS_LIMIT). At least 1.
    pub max_connections_per_ip: usize,
    /// IPv6 sources are grouped by this many leading bits (default 64: one
    /// subscriber's LAN). 32 to 128; 128 counts every IPv6 address alone.
    pub ipv6_prefix_len: u8,
    /// Handshakes one source address may start per second, sustained
    /// (default 4): a token bucket refilled at this rate. Each validated
    /// hello that asks for a new connection takes one, whatever its
    /// outcome; past it the hello gets a REFUSE with [`REFUSE_RATE_LIMIT`](crate::REFUSE_RATE_LIMIT).
    /// At least 1.
    pub handshakes_per_sec: u32,
    /// Handshakes one source address may start at once: the bucket's size
    /// (default 16). At least 1.
    pub handshake_burst: u32,
    /// Source addresses whose handshake rate is remembered at once
    /// (default 4,096, about 64 bytes each): when full, the one tracked
    /// longest is forgotten (counted in
    /// [`EndpointStats::rate_table_evictions`](crate::EndpointStats::rate_table_evictions)) and starts again with a
    /// full bucket when it comes back. At least 1.
    pub rate_table_size: usize,
}

impl Admission {
    /// No admission limits (each at its largest; the rate table keeps one
    /// address, as with no rate there is nothing to remember): for
    /// benchmarks and tests that open many connections from one address.
    /// A connect token still holds one live connection. A server facing
    /// the internet should not use it: one host can then fill the table.
    pub const OFF: Admission = Admission {
        max_connections_per_ip: usize::MAX,
        ipv6_prefix_len: 128,
        handshakes_per_sec: u32::MAX,
        handshake_burst: u32::MAX,
        rate_table_size: 1,
    };

    /// Checks every setting, naming the first one out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting: &'static str, value: u64, accepted: &'static str| {
            Err(ConfigError::Admission {
                setting,
                value,
                accepted,
            })
        };
        if self.max_connections_per_ip == 0 {
            return bad("max_connections_per_ip", 0, "1 or more");
        }
        if !(32..=128).contains(&self.ipv6_prefix_len) {
            return bad(
                "ipv6_prefix_len",
                u64::from(self.ipv6_prefix_len),
                "32 to 128",
            );
        }
        if self.handshakes_per_sec == 0 {
            return bad("handshakes_per_sec", 0, "1 or more");
        }
        if self.handshake_burst == 0 {
            return bad("handshake_burst", 0, "1 or more");
        }
        if self.rate_table_size == 0 {
            return bad("rate_table_size", 0, "1 or more");
        }
        Ok(())
    }
}

impl Default for Admission {
    /// 16 connections per address, 4 handshakes per second after a burst
    /// of 16, 4,096 addresses' rates remembered, IPv6 grouped by /64.
    fn default() -> Self {
        Admission {
            max_connections_per_ip: 16,
            ipv6_prefix_len: 64,
            handshakes_per_sec: 4,
            handshake_burst: 16,
            rate_table_size: 4096,
        }
    }
}

/// The connect tokens in use, each bound to the client IP that used it
/// first, so that a token copied off the wire is refused
/// ([`REFUSE_TOKEN`](crate::REFUSE_TOKEN), "connect token in use from another address") from
/// any other IP until it expires. Clones share one cache: a
/// `keel_rudp::Server` makes one and gives it to every lane's
/// endpoint ([`EndpointConfig::replay_cache`](crate::EndpointConfig::replay_cache)), so a token taken on one
/// lane is refused on all; [`EndpointConfig::new`](crate::EndpointConfig::new) makes each endpoint its
/// own.
///
/// Only a hello with a fresh cookie and a valid token reaches it (one lock,
/// held for one map lookup and insert); the data path never does. Bounded:
/// at most its capacity of tokens ([`REPLAY_CACHE`] per lane by default,
/// about 60 bytes each), the oldest forgotten first; an entry stays until
/// pushed out, which its token outlives only if that many newer tokens
/// came since (dropping expired entries first would cost a scan).
///
/// # Examples
///
/// ```
/// use keel_rudp_proto::ReplayCache;
///
/// let shared = ReplayCache::with_capacity(2 * keel_rudp_proto::REPLAY_CACHE);
/// let lane_1 = shared.clone(); // the same cache
/// assert_eq!((shared.len(), lane_1.capacity()), (0, 16_384));
/// ```
#[derive(Clone)]
pub struct ReplayCache(Arc<Mutex<ReplayEntries>>);

struct ReplayEntries {
    /// Each token's tag: the IP that used it and when it expires (unix s).
    by_tag: HashMap<[u8; 16], (IpAddr, u64)>,
    /// Tags in the order they came, to forget the oldest.
    order: VecDeque<[u8; 16]>,
    capacity: usize,
}

impl ReplayCache {
    /// An empty cache of [`REPLAY_CACHE`] tokens.
    pub fn new() -> Self {
        Self::with_capacity(REPLAY_CACHE)
    }

    /// An empty cache of `tokens` tokens at most (at least 1).
    pub fn with_capacity(tokens: usize) -> Self {
        ReplayCache(Arc::new(Mutex::new(ReplayEntries {
            by_tag: HashMap::new(),
            order: VecDeque::new(),
            capacity: tokens.max(1),
        })))
    }

    /// Tokens remembered.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether no token is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens remembered at most.
    pub fn capacity(&self) -> usize {
        self.lock().capacity
    }

    /// Whether these are clones of one cache.
    pub fn is_shared_with(&self, other: &ReplayCache) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplayEntries> {
        // The critical sections only touch the maps and never panic
        // midway; a poisoned lock still holds a consistent cache.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Binds token `tag` (valid until `expires_at`) to `ip` at `unix_now`
    /// unless an unexpired entry binds it to another IP: then false (a
    /// replay). Check and insert are one step under the lock, so two lanes
    /// cannot both take a token for two IPs.
    pub(crate) fn claim(&self, tag: [u8; 16], ip: IpAddr, expires_at: u64, unix_now: u64) -> bool {
        let mut e = self.lock();
        match e.by_tag.get(&tag) {
            Some(&(held, exp)) if exp > unix_now && held != ip => return false,
            Some(_) => {
                e.by_tag.insert(tag, (ip, expires_at));
            }
            None => {
                e.by_tag.insert(tag, (ip, expires_at));
                e.order.push_back(tag);
                if e.order.len() > e.capacity {
                    if let Some(old) = e.order.pop_front() {
                        e.by_tag.remove(&old);
                    }
                }
            }
        }
        true
    }
}

impl Default for ReplayCache {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.lock();
        f.debug_struct("ReplayCache")
            .field("tokens", &e.order.len())
            .field("capacity", &e.capacity)
            .finish()
    }
}

/// A source address as the admission limits count it: an IPv4 address as
/// its IPv4-mapped IPv6 form, an IPv6 address cut to its prefix.
pub(crate) type SourceKey = u128;

pub(crate) fn source_key(addr: SocketAddr, ipv6_prefix_len: u8) -> SourceKey {
    match addr.ip() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => u128::from(v4.to_ipv6_mapped()),
            None => {
                let keep = u32::from(ipv6_prefix_len.min(128));
                let mask = u128::MAX.checked_shl(128 - keep).unwrap_or(0);
                u128::from(v6) & mask
            }
        },
    }
}

/// Handshakes one source may start: a token bucket per source, in a table
/// of fixed size (a ring: when full, the source tracked longest is
/// forgotten), so the limiter's own memory is bounded.
pub(crate) struct RateTable {
    index: HashMap<SourceKey, usize>,
    /// Each source's bucket: its level in millionths of a handshake and
    /// the time (µs since the endpoint's epoch) it was last refilled.
    ring: Vec<(SourceKey, u64, u64)>,
    /// The next entry of `ring` to reuse once it is full.
    next: usize,
}

/// One handshake in a bucket's units.
const HANDSHAKE: u64 = 1_000_000;

impl RateTable {
    pub(crate) fn new() -> Self {
        RateTable {
            index: HashMap::new(),
            ring: Vec::new(),
            next: 0,
        }
    }

    /// Takes one handshake from `key`'s bucket at `now_us`; false if it is
    /// empty. `evicted` is set if another source was forgotten for it.
    pub(crate) fn take(
        &mut self,
        key: SourceKey,
        now_us: u64,
        a: &Admission,
        evicted: &mut bool,
    ) -> bool {
        let full = u64::from(a.handshake_burst) * HANDSHAKE;
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let entry = (key, full, now_us);
                let i = if self.ring.len() < a.rate_table_size {
                    self.ring.push(entry);
                    self.ring.len() - 1
                } else {
                    let i = self.next;
                    self.next = (i + 1) % self.ring.len();
                    self.index.remove(&self.ring[i].0);
                    self.ring[i] = entry;
                    *evicted = true;
                    i
                };
                self.index.insert(key, i);
                i
            }
        };
        let (_, level, at) = &mut self.ring[i];
        let refill = now_us
            .saturating_sub(*at)
            .saturating_mul(u64::from(a.handshakes_per_sec));
        *level = level.saturating_add(refill).min(full);
        *at = (*at).max(now_us);
        if *level >= HANDSHAKE {
            *level -= HANDSHAKE;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, prefix: u8) -> SourceKey {
        source_key(s.parse().unwrap(), prefix)
    }

    #[test]
    fn sources_are_ips_with_ipv6_grouped_by_prefix() {
        // Ports do not matter; an IPv4-mapped IPv6 address is its IPv4.
        assert_eq!(key("192.0.2.1:1", 64), key("192.0.2.1:2", 64));
        assert_eq!(key("192.0.2.1:1", 64), key("[::ffff:192.0.2.1]:3", 64));
        assert_ne!(key("192.0.2.1:1", 64), key("192.0.2.2:1", 64));
        // One /64 is one source; the next /64 is another.
        assert_eq!(key("[2001:db8::1]:1", 64), key("[2001:db8::ffff:2]:1", 64));
        assert_ne!(key("[2001:db8::1]:1", 64), key("[2001:db8:0:1::1]:1", 64));
        // /128 counts every address; /32 a whole allocation.
        assert_ne!(key("[2001:db8::1]:1", 128), key("[2001:db8::2]:1", 128));
        assert_eq!(key("[2001:db8::1]:1", 32), key("[2001:db8:ff::1]:1", 32));
    }

    #[test]
    fn the_rate_table_is_bounded_and_forgets_the_oldest_first() {
        let a = Admission {
            rate_table_size: 8,
            handshake_burst: 2,
            handshakes_per_sec: 1,
            ..Admission::default()
        };
        let mut t = RateTable::new();
        let mut evictions = 0;
        for k in 0..100u128 {
            let mut evicted = false;
            assert!(t.take(k, 0, &a, &mut evicted));
            evictions += u32::from(evicted);
            assert!(t.ring.len() <= 8 && t.index.len() <= 8);
        }
        assert_eq!(evictions, 92);
        // Source 99 is tracked: one handshake left of its burst of 2, then
        // none until a second has passed.
        let mut evicted = false;
        assert!(t.take(99, 0, &a, &mut evicted));
        assert!(!t.take(99, 999_999, &a, &mut evicted));
        assert!(t.take(99, 2_000_000, &a, &mut evicted));
        assert!(!evicted);
        // A forgotten source starts again with a full bucket.
        assert!(t.take(0, 2_000_000, &a, &mut evicted));
        assert!(evicted);
    }

    #[test]
    fn the_replay_cache_binds_a_token_to_one_ip_and_is_bounded() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let cache = ReplayCache::with_capacity(4);
        let other_lane = cache.clone();
        assert!(cache.is_shared_with(&other_lane));
        assert!(!cache.is_shared_with(&ReplayCache::new()));
        assert!(cache.claim([1; 16], ip("192.0.2.1"), 100, 10));
        // The same IP again (another port, another lane): yes; another IP,
        // on any clone: no, until the token expires.
        assert!(other_lane.claim([1; 16], ip("192.0.2.1"), 100, 11));
        assert!(!other_lane.claim([1; 16], ip("192.0.2.2"), 100, 12));
        assert!(!cache.claim([1; 16], ip("192.0.2.2"), 100, 99));
        assert!(cache.claim([1; 16], ip("192.0.2.2"), 100, 100));
        assert_eq!(cache.len(), 1);
        // Full: the oldest is forgotten first.
        for t in 2..=6u8 {
            assert!(cache.claim([t; 16], ip("192.0.2.1"), 100, 10));
            assert!(cache.len() <= 4);
        }
        assert_eq!((cache.len(), cache.capacity()), (4, 4));
        assert!(cache.claim([1; 16], ip("192.0.2.9"), 100, 10));
        assert!(!cache.claim([6; 16], ip("192.0.2.9"), 100, 10));
        assert_eq!(ReplayCache::with_capacity(0).capacity(), 1);
    }

    #[test]
    fn the_largest_limits_do_not_overflow() {
        let a = Admission::OFF;
        let mut t = RateTable::new();
        let mut evicted = false;
        for now in [0, 1, u64::MAX / 2, u64::MAX] {
            for _ in 0..1000 {
                assert!(t.take(1, now, &a, &mut evicted));
            }
        }
    }
}
