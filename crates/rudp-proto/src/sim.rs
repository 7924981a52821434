//! A deterministic simulated network for tests and experiments: seeded
//! loss, delay, jitter, duplicates, reordering and an optional bottleneck
//! (bandwidth with a drop-tail queue), driving two [`Connection`]s with a
//! virtual clock. Nothing sleeps: a minute of simulated time takes
//! milliseconds.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use keel_rudp_proto::sim::{LinkConfig, Pair};
//! use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Event};
//!
//! let config = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
//! let link = LinkConfig { loss: 0.2, delay: Duration::from_millis(30), ..LinkConfig::default() };
//! let mut pair = Pair::new(config.clone(), config, link.clone(), link, 7);
//! for i in 0..100u32 {
//!     pair.a.send(0, &i.to_be_bytes()).unwrap();
//! }
//! pair.run_for(Duration::from_secs(5));
//! let got: Vec<u32> = pair.b_events.iter().filter_map(|(_, e)| match e {
//!     Event::Message { data, .. } => Some(u32::from_be_bytes(data[..4].try_into().unwrap())),
//!     _ => None,
//! }).collect();
//! assert_eq!(got, (0..100).collect::<Vec<_>>());
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::connection::{Connection, Event, Side};
use crate::wire::ConnectionId;
use crate::Config;

/// SplitMix64: small, seeded, good enough for test decisions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }
}

/// One direction of a simulated link.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Uniform extra delay in `[0, jitter]` per datagram (reorders when
    /// larger than the gap between datagrams).
    pub jitter: Duration,
    /// Probability a datagram arrives twice.
    pub duplicate: f64,
    /// Probability a datagram is held a further `reorder_delay`.
    pub reorder: f64,
    /// Extra delay of reordered datagrams.
    pub reorder_delay: Duration,
    /// Bottleneck rate in bytes per second (`None`: unlimited).
    pub bandwidth: Option<u64>,
    /// Bytes the bottleneck queue holds; beyond, datagrams are dropped.
    pub queue_limit: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            delay: Duration::from_millis(20),
            jitter: Duration::ZERO,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(10),
            bandwidth: None,
            queue_limit: 64 * 1024,
        }
    }
}

/// Counters of a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered.
    pub sent: u64,
    /// Dropped at random.
    pub lost: u64,
    /// Dropped by a full bottleneck queue.
    pub overflowed: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Delivered (copies included).
    pub delivered: u64,
}

/// One direction of a simulated link.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    queue: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    order: u64,
    busy_until: Option<Instant>,
    /// Set to drop everything (a peer gone silent, a cable pulled).
    pub cut: bool,
    /// Counters.
    pub stats: LinkStats,
}

impl Link {
    /// A link with its own seed.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        Link {
            cfg,
            rng: Rng::new(seed),
            queue: BinaryHeap::new(),
            order: 0,
            busy_until: None,
            cut: false,
            stats: LinkStats::default(),
        }
    }

    /// Offers a datagram at `now`.
    pub fn send(&mut self, now: Instant, data: &[u8]) {
        self.stats.sent += 1;
        // Fixed number of draws per datagram keeps decisions stable.
        let (lost, dup, reorder) = (
            self.rng.chance(self.cfg.loss),
            self.rng.chance(self.cfg.duplicate),
            self.rng.chance(self.cfg.reorder),
        );
        let (j1, j2) = (self.rng.f64(), self.rng.f64());
        if self.cut {
            self.stats.lost += 1;
            return;
        }
        let mut depart = now;
        if let Some(bw) = self.cfg.bandwidth {
            let start = self.busy_until.map_or(now, |b| b.max(now));
            let backlog = start.saturating_duration_since(now).as_secs_f64() * bw as f64;
            if backlog + data.len() as f64 > self.cfg.queue_limit as f64 {
                self.stats.overflowed += 1;
                return;
            }
            depart = start + Duration::from_secs_f64(data.len() as f64 / bw as f64);
            self.busy_until = Some(depart);
        }
        if lost {
            self.stats.lost += 1;
            return;
        }
        let mut at = depart + self.cfg.delay + self.cfg.jitter.mul_f64(j1);
        if reorder {
            at += self.cfg.reorder_delay;
        }
        self.push(at, data);
        if dup {
            self.stats.duplicated += 1;
            self.push(depart + self.cfg.delay + self.cfg.jitter.mul_f64(j2), data);
        }
    }

    fn push(&mut self, at: Instant, data: &[u8]) {
        self.order += 1;
        self.queue.push(Reverse((at, self.order, data.to_vec())));
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((t, _, _))| *t)
    }

    /// A datagram that has arrived by `now`.
    pub fn receive(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_arrival()? > now {
            return None;
        }
        self.stats.delivered += 1;
        self.queue.pop().map(|Reverse((_, _, d))| d)
    }
}

/// Two established connections joined by two links, on a virtual clock.
/// Events are collected with the virtual time they were emitted.
#[derive(Debug)]
pub struct Pair {
    /// The client end.
    pub a: Connection,
    /// The server end.
    pub b: Connection,
    /// Datagrams from `a` to `b`.
    pub ab: Link,
    /// Datagrams from `b` to `a`.
    pub ba: Link,
    /// The virtual clock.
    pub now: Instant,
    /// When true, `b` is no longer driven at all (a peer gone silent).
    pub b_frozen: bool,
    /// Events of `a`, with when they were emitted.
    pub a_events: Vec<(Instant, Event)>,
    /// Events of `b`.
    pub b_events: Vec<(Instant, Event)>,
    buf: Vec<u8>,
}

impl Pair {
    /// Two connected ends (no handshake; each knows the other's
    /// `max_ack_delay` as if it had one), links seeded from `seed`.
    pub fn new(a: Config, b: Config, ab: LinkConfig, ba: LinkConfig, seed: u64) -> Self {
        let now = Instant::now();
        let cid = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);
        // What the handshake would have told each end.
        let (a_delay, b_delay) = (a.max_ack_delay, b.max_ack_delay);
        let mut a = Connection::established(a, Side::Client, cid, now).expect("valid config for a");
        let mut b = Connection::established(b, Side::Server, cid, now).expect("valid config for b");
        a.set_peer_max_ack_delay(b_delay);
        b.set_peer_max_ack_delay(a_delay);
        Pair {
            a,
            b,
            ab: Link::new(ab, seed),
            ba: Link::new(ba, seed ^ 0x5555_5555_5555_5555),
            now,
            b_frozen: false,
            a_events: Vec::new(),
            b_events: Vec::new(),
            buf: vec![0; 65_536],
        }
    }

    fn flush(&mut self) {
        while let Some(n) = self.a.poll_transmit(self.now, &mut self.buf) {
            self.ab.send(self.now, &self.buf[..n]);
        }
        if !self.b_frozen {
            while let Some(n) = self.b.poll_transmit(self.now, &mut self.buf) {
                self.ba.send(self.now, &self.buf[..n]);
            }
        }
        while let Some(e) = self.a.poll_event() {
            self.a_events.push((self.now, e));
        }
        while let Some(e) = self.b.poll_event() {
            self.b_events.push((self.now, e));
        }
    }

    /// Runs until the virtual clock reaches `until`.
    pub fn run_until(&mut self, until: Instant) {
        let mut spins = 0u32;
        loop {
            self.flush();
            let mut next = until;
            for t in [
                self.a.poll_timeout(),
                if self.b_frozen {
                    None
                } else {
                    self.b.poll_timeout()
                },
                self.ab.next_arrival(),
                self.ba.next_arrival(),
            ]
            .into_iter()
            .flatten()
            {
                next = next.min(t);
            }
            if next <= self.now {
                spins += 1;
                assert!(
                    spins < 10_000,
                    "simulation stuck at one instant (a timer that never clears)"
                );
            } else {
                spins = 0;
            }
            self.now = self.now.max(next);
            while let Some(d) = self.ab.receive(self.now) {
                if !self.b_frozen {
                    self.b.handle_datagram(self.now, &d);
                }
            }
            while let Some(d) = self.ba.receive(self.now) {
                self.a.handle_datagram(self.now, &d);
            }
            if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
                self.a.handle_timeout(self.now);
            }
            if !self.b_frozen && self.b.poll_timeout().is_some_and(|t| t <= self.now) {
                self.b.handle_timeout(self.now);
            }
            if self.now >= until {
                self.flush();
                return;
            }
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }
}
