//! The decisions of a conditioned path, pure: a seeded PRNG turns an
//! [`Impairment`] into one [`Verdict`] per datagram.

use std::time::Duration;

use super::impairment::Impairment;

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
    /// path of a client, datagram socket or server lane 0 decides).
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
