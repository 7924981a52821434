//! What an impaired path does, as a value: [`Impairment`] (loss, delay,
//! jitter, duplicates, reordering, seed, bounds), its validation, and its
//! textual form (`loss=0.05,delay=20ms,...`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Default bound of held datagrams per impaired path.
pub const DEFAULT_IMPAIRMENT_LIMIT: usize = 4096;
/// Default bound of held bytes per impaired path (16 MiB).
pub const DEFAULT_IMPAIRMENT_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// Default extra hold of a reordered datagram.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(10);
/// Longest `delay` or `reorder_delay` accepted.
pub const MAX_IMPAIRMENT_DELAY: Duration = Duration::from_secs(3600);

const MAX_LIMIT: usize = 1_000_000;
const MAX_LIMIT_BYTES: usize = 1 << 30;

/// What an impaired path does to datagrams. [`Default`] is off (no loss,
/// no delay, nothing duplicated or reordered); see the [crate
/// docs](crate) for the exact semantics.
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
    /// Most datagrams a path holds at once (delayed); past it a copy is
    /// discarded, and the path counts it. `1..=1_000_000`, default 4096.
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
    /// An error about `key` (a setting's key, as in the textual shape),
    /// saying what it accepts and what it got. A user of [`Impairment`]
    /// with settings of its own (a simulator's bandwidth) reports them the
    /// same way.
    pub fn new(key: &str, message: impl Into<String>) -> Self {
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

/// Whether `s` is a number in the grammar of the textual shape: digits
/// with an optional fraction (`D+[.D*]` or `.D+`: `1`, `0.25`, `1.`, `.5`),
/// no sign, exponent, unit, `inf` or `nan`.
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
