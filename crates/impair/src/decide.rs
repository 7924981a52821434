//! The fate of each datagram, pure: a seeded [`Rng`] turns an
//! [`Impairment`] into one [`Verdict`] per datagram.

use std::time::Duration;

use crate::impairment::Impairment;
use crate::rng::Rng;

/// The fate of one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Lost.
    Drop,
    /// Delivered after `delay` (zero: at once).
    Deliver {
        /// How long it is held: `delay` with its jitter, plus
        /// `reorder_delay` when `reordered`.
        delay: Duration,
        /// It was held back the reorder delay.
        reordered: bool,
        /// A second copy, delivered after this delay (its own jitter, never
        /// the reorder delay).
        duplicate: Option<Duration>,
    },
}

/// The decisions of one impaired path, pure: no clock, no socket, no
/// buffer. The same [`Impairment`] (seed included) and stream give the same
/// sequence of [`Verdict`]s; see the [crate docs](crate) for the exact
/// rules.
///
/// # Examples
///
/// ```
/// use keel_impair::{Conditioner, Impairment, Verdict};
/// use std::time::Duration;
///
/// let imp = Impairment { loss: 0.1, delay: Duration::from_millis(5), seed: 42, ..Impairment::default() };
/// let mut a = Conditioner::new(&imp);
/// let mut b = Conditioner::new(&imp);
/// let first: Vec<Verdict> = (0..1000).map(|_| a.decide()).collect();
/// assert!((0..1000).all(|i| b.decide() == first[i]));
/// assert!(matches!(first[0], Verdict::Deliver { .. }));
/// let lost = first.iter().filter(|v| **v == Verdict::Drop).count();
/// assert!((50..150).contains(&lost), "{lost}");
/// ```
#[derive(Clone, Debug)]
pub struct Conditioner {
    rng: Rng,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    delay_ns: u64,
    jitter_ns: u64,
    reorder_delay: Duration,
}

impl Conditioner {
    /// The decisions of `impairment`: stream 0 of its seed.
    pub fn new(impairment: &Impairment) -> Conditioner {
        Conditioner::with_stream(impairment, 0)
    }

    /// Stream `stream` of the impairment's seed ([`Rng::with_stream`]): an
    /// independent sequence, for another lane or direction with the same
    /// settings.
    ///
    /// The impairment is taken as it is (call [`Impairment::validate`]
    /// first): a probability outside `0..=1` acts as the nearer bound
    /// (NaN as 0), and a `jitter` larger than `delay` as `delay`.
    pub fn with_stream(imp: &Impairment, stream: u64) -> Conditioner {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let delay_ns = nanos(imp.delay);
        Conditioner {
            rng: Rng::with_stream(imp.seed, stream),
            loss: imp.loss,
            duplicate: imp.duplicate,
            reorder: imp.reorder,
            delay_ns,
            // Keeps `2 * jitter + 1` (the span below) within a u64.
            jitter_ns: nanos(imp.jitter).min(delay_ns).min(u64::MAX / 4),
            reorder_delay: imp.reorder_delay,
        }
    }

    /// The fate of the next datagram.
    pub fn decide(&mut self) -> Verdict {
        // Always five draws, in this order, so each decision's stream does
        // not depend on the other settings.
        let lost = self.rng.chance(self.loss);
        let duplicated = self.rng.chance(self.duplicate);
        let reordered = self.rng.chance(self.reorder);
        let j1 = self.rng.next_u64();
        let j2 = self.rng.next_u64();
        if lost {
            return Verdict::Drop;
        }
        let mut delay = self.jittered(j1);
        if reordered {
            delay = delay.saturating_add(self.reorder_delay);
        }
        Verdict::Deliver {
            delay,
            reordered,
            duplicate: duplicated.then(|| self.jittered(j2)),
        }
    }

    /// `delay - jitter + r mod (2 jitter + 1)` nanoseconds: uniform over
    /// the whole nanoseconds of `[delay - jitter, delay + jitter]`.
    fn jittered(&self, r: u64) -> Duration {
        if self.jitter_ns == 0 {
            return Duration::from_nanos(self.delay_ns);
        }
        let span = 2 * self.jitter_ns + 1;
        Duration::from_nanos((self.delay_ns - self.jitter_ns).saturating_add(r % span))
    }
}
