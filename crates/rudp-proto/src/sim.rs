//! A deterministic simulated network for tests and experiments: seeded
//! loss, delay, jitter, duplicates, reordering and an optional bottleneck
//! (bandwidth with a drop-tail queue), driving two [`Connection`]s with a
//! virtual clock. Nothing sleeps: a minute of simulated time takes
//! milliseconds.
//!
//! What a link does to each datagram is keel's one impairment model, the
//! keel-impair crate ([`Impairment`], [`keel_impair::Conditioner`]): the
//! same settings, textual form, generator and verdicts as keel-udp's link
//! conditioner on a real socket, so `loss=5%,delay=25ms,jitter=3ms` means
//! the same here and in `keel-bench --impair`. In particular a datagram is
//! held `delay +/- jitter` (mean `delay`, so `jitter <= delay`). What only
//! a simulated link has is here: the bottleneck ([`LinkConfig::bandwidth`])
//! and a cut cable ([`Link::cut`]).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use keel_rudp_proto::sim::{Impairment, LinkConfig, Pair};
//! use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Event};
//!
//! let config = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
//! let link = LinkConfig::new(Impairment { loss: 0.2, delay: Duration::from_millis(30), ..Impairment::default() });
//! // The same link, as keel-bench's --impair writes it:
//! assert_eq!(LinkConfig::new("loss=20%,delay=30ms".parse()?), link);
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
//! # Ok::<(), keel_rudp_proto::sim::ImpairmentError>(())
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use keel_impair::{Conditioner, Verdict};
pub use keel_impair::{Impairment, ImpairmentError, Rng};

use crate::connection::{Connection, Event, Side};
use crate::wire::ConnectionId;
use crate::Config;

/// One direction of a simulated link: what it does to each datagram, and
/// an optional bottleneck.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Loss, delay, jitter, duplicates, reordering and the bound of held
    /// datagrams (keel-impair's model). Its `seed` is not read: a link's
    /// seed is the one given to [`Link::new`] or [`Pair::new`].
    pub impairment: Impairment,
    /// Bottleneck rate in bytes per second (`None`: unlimited). Datagrams
    /// cross it one after another before the impairment (a datagram lost
    /// at random still took its time on the bottleneck).
    pub bandwidth: Option<u64>,
    /// Bytes the bottleneck queue holds; beyond, datagrams are dropped
    /// (counted in [`LinkStats::overflowed`]).
    pub queue_limit: usize,
}

impl Default for LinkConfig {
    /// 20 ms one way, nothing else: no loss, no bottleneck.
    fn default() -> Self {
        LinkConfig::new(Impairment {
            delay: Duration::from_millis(20),
            ..Impairment::default()
        })
    }
}

impl LinkConfig {
    /// A link that does `impairment` and has no bottleneck.
    pub fn new(impairment: Impairment) -> Self {
        LinkConfig {
            impairment,
            bandwidth: None,
            queue_limit: 64 * 1024,
        }
    }

    /// Checks every setting.
    ///
    /// # Errors
    ///
    /// The impairment's error ([`Impairment::validate`]), or one naming
    /// `bandwidth` (at least 1 byte per second) or `queue-limit` (at least
    /// 1 byte).
    pub fn validate(&self) -> Result<(), ImpairmentError> {
        self.impairment.validate()?;
        if self.bandwidth == Some(0) {
            return Err(ImpairmentError::new(
                "bandwidth",
                "expected None (unlimited) or at least 1 byte per second, got 0",
            ));
        }
        if self.queue_limit == 0 {
            return Err(ImpairmentError::new(
                "queue-limit",
                "expected at least 1 byte, got 0",
            ));
        }
        Ok(())
    }
}

/// Counters of a link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Datagrams offered.
    pub sent: u64,
    /// Dropped at random, or by a cut link.
    pub lost: u64,
    /// Dropped by a full bottleneck queue.
    pub overflowed: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Held back the reorder delay.
    pub reordered: u64,
    /// Copies dropped because the link held `limit` datagrams or
    /// `limit_bytes` bytes already.
    pub discarded: u64,
    /// Delivered (copies included).
    pub delivered: u64,
}

/// One direction of a simulated link.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    fates: Conditioner,
    queue: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    held_bytes: usize,
    order: u64,
    busy_until: Option<Instant>,
    /// Set to drop everything (a peer gone silent, a cable pulled).
    pub cut: bool,
    /// Counters.
    pub stats: LinkStats,
}

impl Link {
    /// A link whose fates are stream 0 of `seed`.
    ///
    /// # Panics
    ///
    /// If `cfg` is invalid ([`LinkConfig::validate`]), with the error.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        Link::with_stream(cfg, seed, 0)
    }

    fn with_stream(cfg: LinkConfig, seed: u64, stream: u64) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("sim::LinkConfig: {e}");
        }
        let imp = Impairment {
            seed,
            ..cfg.impairment.clone()
        };
        Link {
            fates: Conditioner::with_stream(&imp, stream),
            cfg,
            queue: BinaryHeap::new(),
            held_bytes: 0,
            order: 0,
            busy_until: None,
            cut: false,
            stats: LinkStats::default(),
        }
    }

    /// Offers a datagram at `now`.
    pub fn send(&mut self, now: Instant, data: &[u8]) {
        self.stats.sent += 1;
        // One verdict per datagram offered, whatever happens to it, so a
        // cut or a full queue does not shift the fates of the next ones.
        let verdict = self.fates.decide();
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
        let Verdict::Deliver {
            delay,
            reordered,
            duplicate,
        } = verdict
        else {
            self.stats.lost += 1;
            return;
        };
        if reordered {
            self.stats.reordered += 1;
        }
        self.push(depart + delay, data);
        if let Some(d) = duplicate {
            self.stats.duplicated += 1;
            self.push(depart + d, data);
        }
    }

    fn push(&mut self, at: Instant, data: &[u8]) {
        let imp = &self.cfg.impairment;
        if self.queue.len() >= imp.limit || self.held_bytes + data.len() > imp.limit_bytes {
            self.stats.discarded += 1;
            return;
        }
        self.order += 1;
        self.held_bytes += data.len();
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
        let Reverse((_, _, d)) = self.queue.pop()?;
        self.held_bytes -= d.len();
        self.stats.delivered += 1;
        Some(d)
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
    /// announced ack delay as if it had one), joined by links seeded from
    /// `seed`: `ab` decides with stream 0 of it, `ba` with stream 1.
    ///
    /// # Panics
    ///
    /// If a config is invalid (`a`, `b`, or a link's: see
    /// [`LinkConfig::validate`]).
    pub fn new(a: Config, b: Config, ab: LinkConfig, ba: LinkConfig, seed: u64) -> Self {
        let now = Instant::now();
        let cid = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);
        // What the handshake would have told each end.
        let (a_delay, b_delay) = (a.announced_ack_delay(), b.announced_ack_delay());
        let mut a = Connection::established(a, Side::Client, cid, now).expect("valid config for a");
        let mut b = Connection::established(b, Side::Server, cid, now).expect("valid config for b");
        a.set_peer_max_ack_delay(b_delay);
        b.set_peer_max_ack_delay(a_delay);
        Pair {
            a,
            b,
            ab: Link::with_stream(ab, seed, 0),
            ba: Link::with_stream(ba, seed, 1),
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
