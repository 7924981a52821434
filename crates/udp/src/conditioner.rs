//! A link conditioner: seeded, deterministic loss, latency with jitter,
//! duplication and reordering on a socket's send or receive path, for
//! testing a game under a bad network on loopback.
//!
//! Configure it per socket with [`EndpointConfig::send_impairment`] and
//! [`EndpointConfig::recv_impairment`] (a [`ServerConfig`] applies its
//! endpoint settings to every lane). Both are `None` by default, and off
//! means free: the send path and each receive batch pay one branch on an
//! `Option`, and nothing is allocated.
//!
//! # What happens to a datagram
//!
//! For every datagram on a conditioned path, [`Conditioner::decide`] draws
//! from a seeded PRNG (SplitMix64, five draws per datagram whatever the
//! settings, so the loss decisions of a seed do not change when another
//! setting does):
//!
//! * **loss**: with probability `loss` it is dropped (counted in
//!   `conditioner_dropped`). A send still returns `Ok`, as on a real network.
//! * **delay and jitter**: it is held for `delay` plus a uniform offset in
//!   `[-jitter, +jitter]` (so `jitter <= delay`). Datagrams held this way are
//!   independent: a jitter larger than the gap between two datagrams
//!   reorders them, as on a real link (and as with netem).
//! * **reorder**: with probability `reorder` it is held for a further
//!   `reorder_delay`, so that datagrams sent during that time overtake it
//!   (counted in `conditioner_reordered`). A datagram is only seen out of
//!   order if another one follows within `reorder_delay`: a ping-pong with
//!   one datagram in flight is only delayed.
//! * **duplicate**: with probability `duplicate` a second copy follows with
//!   its own jitter (no reorder delay; counted in `conditioner_duplicated`).
//!
//! A copy with a total delay of zero goes on at once (through the normal
//! send path, or to the handler). Delayed copies are held in a bounded
//! store (`limit` datagrams and `limit_bytes` bytes; past either bound the
//! copy is discarded and counted in `conditioner_discarded`) and released by
//! a lane timer at their due time: sends then take the normal send path
//! (batch, `sendmmsg`, bounded queue), received datagrams reach the handler
//! exactly as if just received (on a server, through the session logic:
//! a datagram that arrives late opens its session late, and a dropped one
//! never opens one). Lane timers have millisecond resolution, so a
//! datagram is released at its due time or up to about a millisecond later,
//! never earlier. Datagrams still held when the endpoint closes are
//! discarded and counted in `conditioner_discarded`.
//!
//! The counters (see [`CounterSnapshot`]) are the socket's, summed over
//! both directions. For a send path,
//! `sends = datagrams_out + conditioner_dropped + conditioner_discarded -
//! conditioner_duplicated` once nothing is held (plus the send path's own
//! refusals).
//!
//! # Seeds and streams
//!
//! The same seed gives the same decisions: the send path of a client, cast
//! socket or server lane 0 decides exactly as `Conditioner::new` on the
//! same [`Impairment`]. Server lane `i` uses stream `i` of the seed, and a
//! socket's receive path uses streams of its own, so one seed gives
//! independent decisions per lane and per direction.
//!
//! # Examples
//!
//! The textual shape (keel-bench's `--impair` takes it):
//!
//! ```
//! use keel_udp::Impairment;
//! use std::time::Duration;
//!
//! let imp: Impairment = "loss=0.05,delay=20ms,jitter=5ms,dup=1%,reorder=0.1,seed=7".parse()?;
//! assert_eq!(imp.loss, 0.05);
//! assert_eq!(imp.delay, Duration::from_millis(20));
//! assert_eq!(imp.duplicate, 0.01);
//! assert_eq!(imp.to_string().parse::<Impairment>()?, imp);
//!
//! // Errors name the key and what it accepts.
//! let err = "loss=1.5".parse::<Impairment>().unwrap_err();
//! assert_eq!(err.key, "loss");
//! assert!(err.to_string().starts_with("loss: expected a probability"));
//! let err = "delay=20".parse::<Impairment>().unwrap_err();
//! assert!(err.to_string().contains("20ms"), "{err}");
//! # Ok::<(), keel_udp::ImpairmentError>(())
//! ```
//!
//! A cast socket whose sends lose 10% and arrive 5 ms late:
//!
//! ```
//! use keel_reactor::{IoModel, Runtime};
//! use keel_udp::{Cast, CastCtx, CastHandler, EndpointConfig, Impairment};
//! use std::net::SocketAddr;
//! use std::time::Duration;
//!
//! struct Quiet;
//! impl CastHandler for Quiet {
//!     fn datagram(&mut self, _: &mut CastCtx<'_>, _: SocketAddr, _: &[u8]) {}
//! }
//!
//! let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
//! let config = EndpointConfig {
//!     send_impairment: Some(Impairment {
//!         loss: 0.1,
//!         delay: Duration::from_millis(5),
//!         seed: 42,
//!         ..Impairment::default()
//!     }),
//!     ..EndpointConfig::default()
//! };
//! let cast = Cast::bind(rt.handle(), "127.0.0.1:0".parse()?, config, Quiet)?;
//! let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
//! peer.set_read_timeout(Some(Duration::from_secs(5)))?;
//! // Seed 42 keeps the first datagram (see the pure Conditioner below).
//! let sent = std::time::Instant::now();
//! cast.send_to(peer.local_addr()?, b"late")?;
//! let mut buf = [0u8; 8];
//! let n = peer.recv(&mut buf)?;
//! assert_eq!(&buf[..n], b"late");
//! assert!(sent.elapsed() >= Duration::from_millis(5));
//! cast.close();
//! rt.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The decisions alone, without a socket or a clock:
//!
//! ```
//! use keel_udp::{Conditioner, Impairment, Verdict};
//! use std::time::Duration;
//!
//! let imp = Impairment { loss: 0.1, delay: Duration::from_millis(5), seed: 42, ..Impairment::default() };
//! let mut a = Conditioner::new(&imp);
//! let mut b = Conditioner::new(&imp);
//! let first: Vec<Verdict> = (0..1000).map(|_| a.decide()).collect();
//! assert!((0..1000).all(|i| b.decide() == first[i]));
//! assert!(matches!(first[0], Verdict::Deliver { .. }));
//! let lost = first.iter().filter(|v| **v == Verdict::Drop).count();
//! assert!((50..150).contains(&lost), "{lost}");
//! ```
//!
//! [`EndpointConfig::send_impairment`]: crate::EndpointConfig::send_impairment
//! [`EndpointConfig::recv_impairment`]: crate::EndpointConfig::recv_impairment
//! [`ServerConfig`]: crate::ServerConfig
//! [`CounterSnapshot`]: crate::CounterSnapshot

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::TimerId;

use crate::counters::{bump, Counters};
use crate::endpoint::Timers;

/// Default bound of held datagrams per conditioned path.
pub const DEFAULT_IMPAIRMENT_LIMIT: usize = 4096;
/// Default bound of held bytes per conditioned path (16 MiB).
pub const DEFAULT_IMPAIRMENT_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// Default extra hold of a reordered datagram.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(10);
/// Longest `delay` or `reorder_delay` accepted.
pub const MAX_IMPAIRMENT_DELAY: Duration = Duration::from_secs(3600);

const MAX_LIMIT: usize = 1_000_000;
const MAX_LIMIT_BYTES: usize = 1 << 30;

/// What a conditioned path does to datagrams. [`Default`] is off (no loss,
/// no delay, nothing duplicated or reordered); see the [module
/// docs](self) for the exact semantics.
///
/// Parses from (and displays as) `loss=0.05,delay=20ms,jitter=5ms,
/// dup=0.01,reorder=0.1,reorder-delay=10ms,seed=7,limit=4096,
/// limit-bytes=16777216` (any subset of the keys, in any order) or `off`.
#[derive(Clone, Debug, PartialEq)]
pub struct Impairment {
    /// Probability that a datagram is dropped, `0.0..=1.0`.
    pub loss: f64,
    /// Base latency added to every datagram that is not dropped.
    pub delay: Duration,
    /// Uniform variation of the latency in `[-jitter, +jitter]`; at most
    /// `delay`.
    pub jitter: Duration,
    /// Probability that a second copy is delivered, `0.0..=1.0`.
    pub duplicate: f64,
    /// Probability that a datagram is held back a further `reorder_delay`,
    /// `0.0..=1.0`.
    pub reorder: f64,
    /// Extra hold of a reordered datagram; positive when `reorder > 0`.
    /// Default 10 ms.
    pub reorder_delay: Duration,
    /// Seed of the decisions: the same seed, the same decisions.
    pub seed: u64,
    /// Most datagrams held at once (delayed); past it a copy is discarded
    /// and counted. `1..=1_000_000`, default 4096.
    pub limit: usize,
    /// Most payload bytes held at once. `1..=2^30`, default 16 MiB.
    pub limit_bytes: usize,
}

impl Default for Impairment {
    fn default() -> Self {
        Impairment {
            loss: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: DEFAULT_REORDER_DELAY,
            seed: 0,
            limit: DEFAULT_IMPAIRMENT_LIMIT,
            limit_bytes: DEFAULT_IMPAIRMENT_LIMIT_BYTES,
        }
    }
}

/// A rejected [`Impairment`]: which key, and what it accepts.
///
/// Displays as `KEY: MESSAGE`, e.g.
/// `loss: expected a probability from 0 to 1 (e.g. 0.05) or a percentage
/// (e.g. 5%), got "1.5"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImpairmentError {
    /// The key (`loss`, `delay`, ...), or `impairment` for the shape of the
    /// whole text.
    pub key: String,
    /// What is accepted, and what was given.
    pub message: String,
}

impl ImpairmentError {
    fn new(key: &str, message: impl Into<String>) -> Self {
        ImpairmentError {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ImpairmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

impl std::error::Error for ImpairmentError {}

/// The keys of the textual shape, in display order.
pub const IMPAIRMENT_KEYS: &str =
    "loss, delay, jitter, dup, reorder, reorder-delay, seed, limit, limit-bytes";

const PROBABILITY: &str = "a probability from 0 to 1 (e.g. 0.05) or a percentage (e.g. 5%)";
const DURATION: &str =
    "a duration with a unit (ns, us, ms, s) such as 20ms, 1.5ms or 500us, or 0, at most 3600s";

impl Impairment {
    /// Whether this impairment does nothing (a path with it is not
    /// conditioned at all).
    pub fn is_off(&self) -> bool {
        self.loss == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
            && self.delay.is_zero()
            && self.jitter.is_zero()
    }

    /// Checks every field.
    ///
    /// # Errors
    ///
    /// An [`ImpairmentError`] naming the field (by its key in the textual
    /// shape) and what it accepts: probabilities finite in `0..=1`, delays
    /// at most 3600 s, `jitter <= delay`, a positive `reorder_delay` when
    /// `reorder > 0`, `limit` in `1..=1_000_000`, `limit_bytes` in
    /// `1..=2^30`.
    pub fn validate(&self) -> Result<(), ImpairmentError> {
        for (key, p) in [
            ("loss", self.loss),
            ("dup", self.duplicate),
            ("reorder", self.reorder),
        ] {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(ImpairmentError::new(
                    key,
                    format!("expected {PROBABILITY}, got {p}"),
                ));
            }
        }
        for (key, d) in [("delay", self.delay), ("reorder-delay", self.reorder_delay)] {
            if d > MAX_IMPAIRMENT_DELAY {
                return Err(ImpairmentError::new(
                    key,
                    format!("expected {DURATION}, got {}", DisplayDuration(d)),
                ));
            }
        }
        if self.jitter > self.delay {
            return Err(ImpairmentError::new(
                "jitter",
                format!(
                    "expected at most delay ({}), got {}: a datagram is held delay +/- jitter \
                     and never less than zero",
                    DisplayDuration(self.delay),
                    DisplayDuration(self.jitter)
                ),
            ));
        }
        if self.reorder > 0.0 && self.reorder_delay.is_zero() {
            return Err(ImpairmentError::new(
                "reorder-delay",
                "expected a positive duration when reorder > 0 (it is how long a reordered \
                 datagram is held back), got 0",
            ));
        }
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err(ImpairmentError::new(
                "limit",
                format!(
                    "expected a whole number of datagrams from 1 to {MAX_LIMIT}, got {}",
                    self.limit
                ),
            ));
        }
        if !(1..=MAX_LIMIT_BYTES).contains(&self.limit_bytes) {
            return Err(ImpairmentError::new(
                "limit-bytes",
                format!(
                    "expected a whole number of bytes from 1 to {MAX_LIMIT_BYTES}, got {}",
                    self.limit_bytes
                ),
            ));
        }
        Ok(())
    }
}

fn parse_probability(key: &str, v: &str) -> Result<f64, ImpairmentError> {
    let err = || ImpairmentError::new(key, format!("expected {PROBABILITY}, got {v:?}"));
    let (number, scale) = match v.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (v, 1.0),
    };
    if !is_plain_decimal(number) {
        return Err(err());
    }
    let p = number.parse::<f64>().map_err(|_| err())? / scale;
    if p.is_finite() && (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(err())
    }
}

/// `D+[.D*]` or `.D+`: no sign, exponent, or anything else.
fn is_plain_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    digits(int) && digits(frac) && !(int.is_empty() && frac.is_empty())
}

fn parse_duration(key: &str, v: &str) -> Result<Duration, ImpairmentError> {
    let err = || ImpairmentError::new(key, format!("expected {DURATION}, got {v:?}"));
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(err)?;
    let (number, unit) = v.split_at(split);
    let nanos_per = match unit {
        "ns" => 1.0,
        "us" | "\u{b5}s" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(err()),
    };
    if !is_plain_decimal(number) {
        return Err(err());
    }
    let nanos = number.parse::<f64>().map_err(|_| err())? * nanos_per;
    if !nanos.is_finite() || nanos > MAX_IMPAIRMENT_DELAY.as_nanos() as f64 {
        return Err(err());
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

fn parse_count(key: &str, v: &str, max: usize, what: &str) -> Result<usize, ImpairmentError> {
    let err = || {
        ImpairmentError::new(
            key,
            format!("expected a whole number of {what} from 1 to {max}, got {v:?}"),
        )
    };
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(err()),
    }
}

impl FromStr for Impairment {
    type Err = ImpairmentError;

    /// Parses `off`, or comma-separated `KEY=VALUE` pairs (no spaces), each
    /// key at most once; unnamed keys keep their defaults:
    ///
    /// * `loss`, `dup`, `reorder`: a probability, `0.05` or `5%`;
    /// * `delay`, `jitter`, `reorder-delay`: a duration with a unit
    ///   (`ns`, `us`, `ms`, `s`), e.g. `20ms`, `1.5ms`, or `0`;
    /// * `seed`: an unsigned 64-bit integer;
    /// * `limit`: datagrams held at most; `limit-bytes`: bytes held at most.
    ///
    /// The result is validated ([`Impairment::validate`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "off" {
            return Ok(Impairment::default());
        }
        if s.is_empty() {
            return Err(ImpairmentError::new(
                "impairment",
                format!("expected off or KEY=VALUE pairs separated by commas (keys: {IMPAIRMENT_KEYS}), got \"\""),
            ));
        }
        let mut imp = Impairment::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',') {
            let Some((key, value)) = item.split_once('=') else {
                return Err(ImpairmentError::new(
                    "impairment",
                    format!(
                        "expected off or KEY=VALUE pairs separated by commas \
                         (keys: {IMPAIRMENT_KEYS}), got {item:?} in {s:?}"
                    ),
                ));
            };
            match key {
                "loss" => imp.loss = parse_probability(key, value)?,
                "delay" => imp.delay = parse_duration(key, value)?,
                "jitter" => imp.jitter = parse_duration(key, value)?,
                "dup" => imp.duplicate = parse_probability(key, value)?,
                "reorder" => imp.reorder = parse_probability(key, value)?,
                "reorder-delay" => imp.reorder_delay = parse_duration(key, value)?,
                "seed" => {
                    imp.seed = value
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                        .then(|| value.parse::<u64>().ok())
                        .flatten()
                        .ok_or_else(|| {
                            ImpairmentError::new(
                                key,
                                format!(
                                    "expected an unsigned integer from 0 to {}, got {value:?}",
                                    u64::MAX
                                ),
                            )
                        })?
                }
                "limit" => imp.limit = parse_count(key, value, MAX_LIMIT, "datagrams")?,
                "limit-bytes" => {
                    imp.limit_bytes = parse_count(key, value, MAX_LIMIT_BYTES, "bytes")?
                }
                _ => {
                    return Err(ImpairmentError::new(
                        "impairment",
                        format!("unknown key {key:?} (accepted: {IMPAIRMENT_KEYS})"),
                    ))
                }
            }
            if seen.contains(&key) {
                return Err(ImpairmentError::new(
                    key,
                    "given more than once; each key takes one value",
                ));
            }
            seen.push(key);
        }
        imp.validate()?;
        Ok(imp)
    }
}

/// A duration in the textual shape's units, exactly (`20ms`, `1500us`).
struct DisplayDuration(Duration);

impl fmt::Display for DisplayDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.as_nanos();
        if n == 0 {
            write!(f, "0")
        } else if n.is_multiple_of(1_000_000) {
            write!(f, "{}ms", n / 1_000_000)
        } else if n.is_multiple_of(1_000) {
            write!(f, "{}us", n / 1_000)
        } else {
            write!(f, "{n}ns")
        }
    }
}

impl fmt::Display for Impairment {
    /// `off`, or every key with its value, in the shape [`FromStr`] parses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_off() {
            return write!(f, "off");
        }
        write!(
            f,
            "loss={},delay={},jitter={},dup={},reorder={},reorder-delay={},seed={},limit={},limit-bytes={}",
            self.loss,
            DisplayDuration(self.delay),
            DisplayDuration(self.jitter),
            self.duplicate,
            self.reorder,
            DisplayDuration(self.reorder_delay),
            self.seed,
            self.limit,
            self.limit_bytes
        )
    }
}

/// SplitMix64: tiny, fast, and good enough for test decisions.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The fate of one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Lost.
    Drop,
    /// Delivered after `delay` (zero: at once).
    Deliver {
        /// How long it is held, jitter and reorder delay included.
        delay: Duration,
        /// It was held back the reorder delay.
        reordered: bool,
        /// A second copy, delivered after this delay.
        duplicate: Option<Duration>,
    },
}

/// The decisions of a conditioned path, pure: no clock, no socket. The
/// same [`Impairment`] (seed included) gives the same sequence of
/// [`Verdict`]s.
#[derive(Clone, Debug)]
pub struct Conditioner {
    rng: SplitMix64,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    delay_ns: u64,
    jitter_ns: u64,
    reorder_delay: Duration,
}

impl Conditioner {
    /// The decisions of `impairment` (stream 0 of its seed: what the send
    /// path of a client, cast socket or server lane 0 decides).
    pub fn new(impairment: &Impairment) -> Conditioner {
        Conditioner::with_stream(impairment, 0)
    }

    /// Stream `stream` of the impairment's seed: an independent sequence.
    pub(crate) fn with_stream(imp: &Impairment, stream: u64) -> Conditioner {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Conditioner {
            rng: SplitMix64(imp.seed ^ stream.wrapping_mul(0xD6E8_FEB8_6659_FD93)),
            loss: imp.loss,
            duplicate: imp.duplicate,
            reorder: imp.reorder,
            delay_ns: nanos(imp.delay),
            jitter_ns: nanos(imp.jitter.min(imp.delay)),
            reorder_delay: imp.reorder_delay,
        }
    }

    /// The fate of the next datagram.
    pub fn decide(&mut self) -> Verdict {
        // Always five draws, so each decision's stream does not depend on
        // the other settings.
        let lost = self.rng.unit() < self.loss;
        let duplicated = self.rng.unit() < self.duplicate;
        let reordered = self.rng.unit() < self.reorder;
        let j1 = self.rng.next();
        let j2 = self.rng.next();
        if lost {
            return Verdict::Drop;
        }
        let mut delay = self.jittered(j1);
        if reordered {
            delay += self.reorder_delay;
        }
        Verdict::Deliver {
            delay,
            reordered,
            duplicate: duplicated.then(|| self.jittered(j2)),
        }
    }

    fn jittered(&self, r: u64) -> Duration {
        if self.jitter_ns == 0 {
            return Duration::from_nanos(self.delay_ns);
        }
        let span = 2 * self.jitter_ns + 1;
        Duration::from_nanos(self.delay_ns - self.jitter_ns + r % span)
    }
}

/// A datagram waiting for its due time.
struct Held {
    due: Instant,
    seq: u64,
    addr: Option<SocketAddr>,
    data: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        self.due == o.due && self.seq == o.seq
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Held {
    /// Reversed: the max-heap's top is the earliest due, first held first
    /// among equals.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

/// Most spare buffers kept for reuse.
const POOL_MAX: usize = 1024;

/// One conditioned path of an endpoint: the decisions, the bounded store of
/// held datagrams (buffers are reused, so a steady flow allocates nothing
/// once warm), and the lane timer that releases them. Time is passed in.
pub(crate) struct Link {
    cond: Conditioner,
    held: BinaryHeap<Held>,
    held_bytes: usize,
    pool: Vec<Vec<u8>>,
    seq: u64,
    limit: usize,
    limit_bytes: usize,
    /// The armed one-shot timer and its deadline.
    timer: Option<(TimerId, Instant)>,
    counters: Arc<Counters>,
}

impl Link {
    /// A link for `imp`, or `None` when there is nothing to condition.
    pub(crate) fn for_config(
        imp: Option<&Impairment>,
        counters: &Arc<Counters>,
        stream: u64,
    ) -> Option<Box<Link>> {
        let imp = imp.filter(|i| !i.is_off())?;
        Some(Box::new(Link {
            cond: Conditioner::with_stream(imp, stream),
            held: BinaryHeap::new(),
            held_bytes: 0,
            pool: Vec::new(),
            seq: 0,
            limit: imp.limit,
            limit_bytes: imp.limit_bytes,
            timer: None,
            counters: counters.clone(),
        }))
    }

    /// Decides the fate of a datagram at `now`: holds its delayed copies
    /// and returns how many copies go on at once (0, 1 or 2).
    pub(crate) fn route(&mut self, now: Instant, addr: Option<SocketAddr>, data: &[u8]) -> usize {
        match self.cond.decide() {
            Verdict::Drop => {
                bump(&self.counters.conditioner_dropped, 1);
                0
            }
            Verdict::Deliver {
                delay,
                reordered,
                duplicate,
            } => {
                if reordered {
                    bump(&self.counters.conditioner_reordered, 1);
                }
                if duplicate.is_some() {
                    bump(&self.counters.conditioner_duplicated, 1);
                }
                let mut at_once = 0;
                for d in [Some(delay), duplicate].into_iter().flatten() {
                    if d.is_zero() {
                        at_once += 1;
                    } else {
                        self.hold(now + d, addr, data);
                    }
                }
                at_once
            }
        }
    }

    fn hold(&mut self, due: Instant, addr: Option<SocketAddr>, data: &[u8]) {
        if self.held.len() >= self.limit || self.held_bytes + data.len() > self.limit_bytes {
            bump(&self.counters.conditioner_discarded, 1);
            return;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        self.held_bytes += data.len();
        self.seq += 1;
        self.held.push(Held {
            due,
            seq: self.seq,
            addr,
            data: buf,
        });
        bump(&self.counters.conditioner_delayed, 1);
    }

    /// The earliest held datagram if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Option<SocketAddr>, Vec<u8>)> {
        if self.held.peek()?.due > now {
            return None;
        }
        let h = self.held.pop()?;
        self.held_bytes -= h.data.len();
        Some((h.addr, h.data))
    }

    /// Gives a released datagram's buffer back for reuse.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX {
            self.pool.push(buf);
        }
    }

    /// The earliest due time held.
    fn next_due(&self) -> Option<Instant> {
        self.held.peek().map(|h| h.due)
    }

    /// Makes sure a timer fires by the earliest due time: one one-shot
    /// timer, moved earlier when an earlier datagram is held.
    pub(crate) fn arm(&mut self, timers: &mut dyn Timers) {
        let Some(next) = self.next_due() else {
            return;
        };
        match self.timer {
            Some((_, at)) if at <= next => {}
            Some((id, _)) => {
                timers.cancel(id);
                self.timer = Some((timers.add(next, None), next));
            }
            None => self.timer = Some((timers.add(next, None), next)),
        }
    }

    /// Whether `id` is this link's timer (which has now fired).
    pub(crate) fn take_timer(&mut self, id: TimerId) -> bool {
        match self.timer {
            Some((t, _)) if t == id => {
                self.timer = None;
                true
            }
            _ => false,
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.len()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if !self.held.is_empty() {
            bump(&self.counters.conditioner_discarded, self.held.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_the_documented_shape_and_round_trips() {
        let imp: Impairment = "loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1,seed=7"
            .parse()
            .unwrap();
        assert_eq!(
            imp,
            Impairment {
                loss: 0.05,
                delay: ms(20),
                jitter: ms(5),
                duplicate: 0.01,
                reorder: 0.1,
                seed: 7,
                ..Impairment::default()
            }
        );
        assert_eq!(imp.to_string().parse::<Impairment>().unwrap(), imp);
        let odd: Impairment =
            "delay=1.5ms,jitter=1500ns,reorder=50%,reorder-delay=2s,limit=3,limit-bytes=9"
                .parse()
                .unwrap();
        assert_eq!(odd.delay, Duration::from_micros(1500));
        assert_eq!(odd.jitter, Duration::from_nanos(1500));
        assert_eq!(odd.reorder, 0.5);
        assert_eq!(odd.to_string().parse::<Impairment>().unwrap(), odd);
        assert_eq!("off".parse::<Impairment>().unwrap(), Impairment::default());
        assert!(Impairment::default().is_off());
        assert_eq!(Impairment::default().to_string(), "off");
        assert!("delay=0".parse::<Impairment>().unwrap().is_off());
        assert_eq!(
            "delay=.5us".parse::<Impairment>().unwrap().delay,
            Duration::from_nanos(500)
        );
    }

    #[test]
    fn errors_name_the_key_and_what_it_accepts() {
        let cases = [
            ("", "impairment", "KEY=VALUE"),
            ("loss", "impairment", "KEY=VALUE"),
            ("loss=0.1,", "impairment", "KEY=VALUE"),
            ("lost=0.1", "impairment", "unknown key \"lost\""),
            ("loss=1.5", "loss", "probability"),
            ("loss=101%", "loss", "percentage"),
            ("loss=-0.1", "loss", "probability"),
            ("loss=nan", "loss", "probability"),
            ("loss=1e-3", "loss", "probability"),
            ("dup=", "dup", "probability"),
            ("delay=20", "delay", "20ms"),
            ("delay=20 ms", "delay", "unit"),
            ("delay=-1ms", "delay", "unit"),
            ("delay=3601s", "delay", "3600s"),
            ("delay=1e999ms", "delay", "unit"),
            ("delay=5ms,jitter=6ms", "jitter", "at most delay (5ms)"),
            ("reorder=0.1,reorder-delay=0", "reorder-delay", "positive"),
            ("seed=-1", "seed", "unsigned integer"),
            ("seed=18446744073709551616", "seed", "unsigned integer"),
            ("limit=0", "limit", "1 to 1000000"),
            ("limit-bytes=x", "limit-bytes", "bytes"),
            ("loss=0.1,loss=0.2", "loss", "more than once"),
        ];
        for (text, key, needle) in cases {
            let e = text.parse::<Impairment>().unwrap_err();
            assert_eq!(e.key, key, "{text:?}: {e}");
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
        }
        let bad = Impairment {
            duplicate: f64::NAN,
            ..Impairment::default()
        };
        assert_eq!(bad.validate().unwrap_err().key, "dup");
    }

    #[test]
    fn the_same_seed_gives_the_same_verdicts_and_other_seeds_differ() {
        let imp = Impairment {
            loss: 0.2,
            delay: ms(10),
            jitter: ms(3),
            duplicate: 0.1,
            reorder: 0.1,
            seed: 99,
            ..Impairment::default()
        };
        let run = |imp: &Impairment, stream| {
            let mut c = Conditioner::with_stream(imp, stream);
            (0..5000).map(|_| c.decide()).collect::<Vec<_>>()
        };
        assert_eq!(run(&imp, 0), run(&imp, 0));
        assert_eq!(
            run(&imp, 0),
            (0..5000)
                .scan(Conditioner::new(&imp), |c, _| Some(c.decide()))
                .collect::<Vec<_>>()
        );
        assert_ne!(run(&imp, 0), run(&imp, 1));
        let other = Impairment {
            seed: 100,
            ..imp.clone()
        };
        assert_ne!(run(&imp, 0), run(&other, 0));
        // Loss decisions do not depend on the other settings.
        let lossy_only = Impairment {
            loss: 0.2,
            seed: 99,
            ..Impairment::default()
        };
        let drops = |v: Vec<Verdict>| v.iter().map(|v| *v == Verdict::Drop).collect::<Vec<_>>();
        assert_eq!(drops(run(&imp, 0)), drops(run(&lossy_only, 0)));
    }

    #[test]
    fn delays_stay_within_jitter_and_reorder_adds_its_delay() {
        let imp = Impairment {
            delay: ms(20),
            jitter: ms(5),
            reorder: 0.25,
            reorder_delay: ms(100),
            duplicate: 0.5,
            seed: 3,
            ..Impairment::default()
        };
        let mut c = Conditioner::new(&imp);
        let (mut lo, mut hi, mut reordered) = (Duration::MAX, Duration::ZERO, 0);
        for _ in 0..20_000 {
            let Verdict::Deliver {
                delay,
                reordered: r,
                duplicate,
            } = c.decide()
            else {
                panic!("no loss configured");
            };
            let base = if r {
                reordered += 1;
                delay - ms(100)
            } else {
                delay
            };
            for d in [Some(base), duplicate].into_iter().flatten() {
                assert!(d >= ms(15) && d <= ms(25), "{d:?}");
                lo = lo.min(d);
                hi = hi.max(d);
            }
        }
        assert!(lo < ms(16) && hi > ms(24), "{lo:?} {hi:?}");
        assert!((4500..5500).contains(&reordered), "{reordered}");
    }

    #[test]
    fn probabilities_zero_and_one_are_exact() {
        let mut all = Conditioner::new(&Impairment {
            loss: 1.0,
            ..Impairment::default()
        });
        assert!((0..1000).all(|_| all.decide() == Verdict::Drop));
        let mut dup = Conditioner::new(&Impairment {
            duplicate: 1.0,
            ..Impairment::default()
        });
        assert!((0..1000).all(|_| dup.decide()
            == Verdict::Deliver {
                delay: Duration::ZERO,
                reordered: false,
                duplicate: Some(Duration::ZERO)
            }));
    }

    #[test]
    fn the_link_holds_within_its_bounds_and_releases_by_due_time() {
        let counters = Arc::new(Counters::default());
        let imp = Impairment {
            delay: ms(10),
            jitter: ms(5),
            limit: 100,
            seed: 5,
            ..Impairment::default()
        };
        let mut link = Link::for_config(Some(&imp), &counters, 0).unwrap();
        let t0 = Instant::now();
        for i in 0..150u32 {
            assert_eq!(link.route(t0, None, &i.to_be_bytes()), 0, "all delayed");
        }
        let s = counters.snapshot();
        assert_eq!(link.held(), 100);
        assert_eq!(s.conditioner_delayed, 100);
        assert_eq!(s.conditioner_discarded, 50, "past the bound: counted");
        assert!(link.pop_due(t0 + ms(5) - Duration::from_nanos(1)).is_none());
        let mut released = 0;
        for step in 5..=15 {
            while let Some((_, buf)) = link.pop_due(t0 + ms(step)) {
                released += 1;
                link.recycle(buf);
            }
        }
        assert_eq!((released, link.held()), (100, 0));

        // Equal delays keep the order they were held in.
        let fifo = Impairment {
            delay: ms(1),
            ..Impairment::default()
        };
        let mut link = Link::for_config(Some(&fifo), &counters, 0).unwrap();
        for i in 0..50u8 {
            link.route(t0, None, &[i]);
        }
        let order: Vec<u8> = std::iter::from_fn(|| link.pop_due(t0 + ms(1)))
            .map(|(_, b)| b[0])
            .collect();
        assert_eq!(order, (0..50).collect::<Vec<u8>>());

        // The byte bound, and what is still held when the link goes away.
        let bytes = Impairment {
            limit_bytes: 1000,
            ..fifo
        };
        let mut link = Link::for_config(Some(&bytes), &counters, 0).unwrap();
        let before = counters.snapshot().conditioner_discarded;
        for _ in 0..3 {
            link.route(t0, None, &[0u8; 600]);
        }
        assert_eq!(link.held(), 1);
        assert_eq!(counters.snapshot().conditioner_discarded, before + 2);
        drop(link);
        assert_eq!(counters.snapshot().conditioner_discarded, before + 3);
        assert!(Link::for_config(Some(&Impairment::default()), &counters, 0).is_none());
        assert!(Link::for_config(None, &counters, 0).is_none());
    }
}
