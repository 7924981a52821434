//! Admission limits: connections and handshakes per source address, so
//! that one attacker (one token, one host with many sockets) cannot fill
//! an endpoint's connection table. The settings ([`Admission`]) and their
//! bookkeeping (the source key, the bounded table of handshake-rate
//! buckets); the endpoint applies them after the cookie round trip.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use crate::config::ConfigError;
#[cfg(doc)]
use crate::endpoint::{EndpointStats, CLOSE_REPLACED, REFUSE_ADDRESS_LIMIT, REFUSE_RATE_LIMIT};

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
/// Each limit is per lane (the kernel spreads handshakes over the lanes
/// by address and port): with `L` lanes a source may hold up to `L` times
/// as much, and a token one live connection per lane.
///
/// Besides these limits, and not configurable: a connect token buys one
/// live connection. A new connection made with the token of a connected
/// one (from the same IP, any port: a client that crashed and came back;
/// from another IP it is refused as replayed) replaces it, and the old one
/// is closed with [`CLOSE_REPLACED`]. An attacker holding one token thus
/// holds one live connection, however many hellos it sends.
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
/// use keel_rudp::Admission;
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
    /// REFUSE with [`REFUSE_ADDRESS_LIMIT`]. At least 1.
    pub max_connections_per_ip: usize,
    /// IPv6 sources are grouped by this many leading bits (default 64: one
    /// subscriber's LAN). 32 to 128; 128 counts every IPv6 address alone.
    pub ipv6_prefix_len: u8,
    /// Handshakes one source address may start per second, sustained
    /// (default 4): a token bucket refilled at this rate. Each validated
    /// hello that asks for a new connection takes one, whatever its
    /// outcome; past it the hello gets a REFUSE with [`REFUSE_RATE_LIMIT`].
    /// At least 1.
    pub handshakes_per_sec: u32,
    /// Handshakes one source address may start at once: the bucket's size
    /// (default 16). At least 1.
    pub handshake_burst: u32,
    /// Source addresses whose handshake rate is remembered at once
    /// (default 4,096, about 64 bytes each): when full, the one tracked
    /// longest is forgotten (counted in
    /// [`EndpointStats::rate_table_evictions`]) and starts again with a
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
