//! Round-trip time estimation (RFC 6298 as refined by RFC 9002, section 5).

use std::time::Duration;

/// Timer granularity assumed by loss detection and the probe timeout.
pub const GRANULARITY: Duration = Duration::from_millis(1);

/// Smoothed RTT, variance, minimum and latest sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RttEstimator {
    latest: Duration,
    /// The latest sample less the ack delay taken off it (the latest
    /// itself when none was).
    adjusted: Duration,
    smoothed: Duration,
    var: Duration,
    min: Duration,
    has_sample: bool,
}

impl RttEstimator {
    /// An estimator that assumes `initial` until the first sample.
    pub(crate) fn new(initial: Duration) -> Self {
        RttEstimator {
            latest: initial,
            adjusted: initial,
            smoothed: initial,
            var: initial / 2,
            min: initial,
            has_sample: false,
        }
    }

    /// Takes a sample: `latest` from send to acknowledgement, `ack_delay`
    /// as the peer reported it, capped at `max_ack_delay`.
    pub(crate) fn update(
        &mut self,
        latest: Duration,
        ack_delay: Duration,
        max_ack_delay: Duration,
    ) {
        self.latest = latest;
        self.adjusted = latest;
        if !self.has_sample {
            self.has_sample = true;
            self.min = latest;
            self.smoothed = latest;
            self.var = latest / 2;
            return;
        }
        self.min = self.min.min(latest);
        let ack_delay = ack_delay.min(max_ack_delay);
        let adjusted = if latest >= self.min + ack_delay {
            latest - ack_delay
        } else {
            latest
        };
        self.adjusted = adjusted;
        let diff = self.smoothed.abs_diff(adjusted);
        self.var = self.var * 3 / 4 + diff / 4;
        self.smoothed = self.smoothed * 7 / 8 + adjusted / 8;
    }

    /// Smoothed RTT.
    pub(crate) fn smoothed(&self) -> Duration {
        self.smoothed
    }

    /// RTT variation.
    pub(crate) fn var(&self) -> Duration {
        self.var
    }

    /// Minimum RTT seen (the initial RTT before any sample).
    pub(crate) fn min(&self) -> Duration {
        self.min
    }

    /// The latest sample.
    pub(crate) fn latest(&self) -> Duration {
        self.latest
    }

    /// The probe timeout before backoff:
    /// `smoothed + max(4 × var, granularity) + max_ack_delay`.
    pub(crate) fn pto(&self, max_ack_delay: Duration) -> Duration {
        self.smoothed + (self.var * 4).max(GRANULARITY) + max_ack_delay
    }

    /// How long after a later packet's acknowledgement a packet counts as
    /// lost: `9/8 × max(smoothed, latest)`, at least the granularity, with
    /// the latest sample less the ack delay the peer reported (as far as
    /// `update` took it off): every packet an ACK frame covers waited as
    /// long for it, so the wait says nothing of a packet's loss, and a
    /// peer whose acknowledgements ride on its next tick (the ack policy)
    /// would otherwise delay loss detection by up to that tick.
    pub(crate) fn loss_delay(&self) -> Duration {
        (self.smoothed.max(self.adjusted) * 9 / 8).max(GRANULARITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn ack_delay_is_not_subtracted_below_min_rtt() {
        let mut r = RttEstimator::new(ms(333));
        r.update(ms(50), ms(0), ms(25));
        // 55 - 20 would be 35 < min 50: the delay is not trusted.
        r.update(ms(55), ms(20), ms(25));
        assert_eq!(r.smoothed(), ms(50) * 7 / 8 + ms(55) / 8);
        // The delay is capped at max_ack_delay: 100 - 25, not 100 - 40.
        let before = r.smoothed();
        r.update(ms(100), ms(40), ms(25));
        assert_eq!(r.smoothed(), before * 7 / 8 + ms(75) / 8);
        assert_eq!(r.min(), ms(50));
        assert_eq!(r.latest(), ms(100));
    }

    #[test]
    fn loss_delay_leaves_out_the_reported_ack_delay() {
        let mut r = RttEstimator::new(ms(333));
        for _ in 0..50 {
            r.update(ms(50), ms(0), ms(60));
        }
        // An acknowledgement that waited 16 ms for the peer's next tick:
        // 66 ms from send, 50 of them the path.
        r.update(ms(66), ms(16), ms(60));
        assert_eq!(r.latest(), ms(66));
        assert_eq!(r.loss_delay(), ms(50) * 9 / 8);
        // An ack delay not taken off (below min_rtt) counts.
        r.update(ms(60), ms(20), ms(60));
        assert_eq!(r.loss_delay(), r.smoothed().max(ms(60)) * 9 / 8);
    }

    #[test]
    fn pto_and_loss_delay() {
        let mut r = RttEstimator::new(ms(333));
        assert_eq!(r.pto(ms(25)), ms(333) + ms(666) + ms(25));
        r.update(ms(80), ms(0), ms(0));
        r.update(ms(80), ms(0), ms(0));
        assert_eq!(r.loss_delay(), ms(90));
        // Variance decays but the granularity floor holds.
        for _ in 0..200 {
            r.update(ms(80), ms(0), ms(0));
        }
        assert_eq!(r.pto(ms(5)), ms(80) + GRANULARITY + ms(5));
    }
}

#[cfg(test)]
mod example {
    use super::*;

    #[test]
    fn samples_update_smoothed_var_and_min() {
        let ms = Duration::from_millis;
        let mut rtt = RttEstimator::new(ms(333));
        rtt.update(ms(100), ms(0), ms(10));
        assert_eq!(
            (rtt.smoothed(), rtt.var(), rtt.min()),
            (ms(100), ms(50), ms(100))
        );
        // 10 ms of the 120 ms sample was the peer holding its ack: 110 ms counts.
        rtt.update(ms(120), ms(10), ms(25));
        assert_eq!(rtt.smoothed(), ms(100) * 7 / 8 + ms(110) / 8);
    }
}
