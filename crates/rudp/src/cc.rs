//! Congestion control (NewReno, loss-based) and a pacer, both for bulk
//! channels only: a game's small traffic is never held back by them.

use std::time::{Duration, Instant};

/// NewReno (RFC 9002, section 7, as for QUIC): slow start doubles the
/// window each round trip until the first loss, congestion avoidance then
/// adds one datagram per window acknowledged; a loss halves the window
/// once per round trip (a recovery period starts at the loss, and losses
/// of packets sent before it do not reduce the window again).
#[derive(Debug, Clone)]
pub struct NewReno {
    window: usize,
    ssthresh: usize,
    recovery_start: Option<Instant>,
    acked_in_avoidance: usize,
    max_datagram: usize,
}

impl NewReno {
    /// Initial window: 10 datagrams (RFC 9002 bounds it by 14,720 bytes).
    pub fn new(max_datagram: usize) -> Self {
        NewReno {
            window: (10 * max_datagram).min(14_720.max(2 * max_datagram)),
            ssthresh: usize::MAX,
            recovery_start: None,
            acked_in_avoidance: 0,
            max_datagram,
        }
    }

    /// The congestion window (bytes).
    pub fn window(&self) -> usize {
        self.window
    }

    /// The smallest window: two datagrams.
    pub fn min_window(&self) -> usize {
        2 * self.max_datagram
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// `bytes` of a packet sent at `sent` were acknowledged.
    pub fn on_ack(&mut self, sent: Instant, bytes: usize) {
        if self.in_recovery(sent) {
            return;
        }
        if self.window < self.ssthresh {
            self.window += bytes;
        } else {
            self.acked_in_avoidance += bytes;
            if self.acked_in_avoidance >= self.window {
                self.acked_in_avoidance -= self.window;
                self.window += self.max_datagram;
            }
        }
    }

    /// A packet sent at `sent` was declared lost at `now`.
    pub fn on_loss(&mut self, sent: Instant, now: Instant) {
        if self.in_recovery(sent) {
            return;
        }
        self.recovery_start = Some(now);
        self.ssthresh = (self.window / 2).max(self.min_window());
        self.window = self.ssthresh;
        self.acked_in_avoidance = 0;
    }
}

/// A token bucket releasing `1.25 × window / smoothed RTT` bytes per
/// second with a burst of 10 datagrams, so a window is spread over the
/// round trip instead of leaving in one burst that overflows a slow link's
/// queue.
#[derive(Debug, Clone)]
pub struct Pacer {
    tokens: u64,
    capacity: u64,
    last: Option<Instant>,
}

impl Pacer {
    /// A full bucket of 10 datagrams.
    pub fn new(max_datagram: usize) -> Self {
        let capacity = 10 * max_datagram as u64;
        Pacer {
            tokens: capacity,
            capacity,
            last: None,
        }
    }

    fn rate(window: usize, srtt: Duration) -> u128 {
        // bytes per second, × 5/4
        let nanos = srtt.as_nanos().max(1);
        (window as u128 * 5 * 1_000_000_000 / 4 / nanos).max(1)
    }

    fn refill(&mut self, now: Instant, window: usize, srtt: Duration) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_nanos();
            let add = Self::rate(window, srtt) * elapsed / 1_000_000_000;
            if add > 0 {
                self.tokens = (self.tokens as u128 + add).min(self.capacity as u128) as u64;
                self.last = Some(now);
            }
        } else {
            self.last = Some(now);
        }
    }

    /// When a packet of `size` bytes may leave: `None` for now, else the
    /// instant the bucket holds enough.
    pub fn delay(
        &mut self,
        now: Instant,
        size: usize,
        window: usize,
        srtt: Duration,
    ) -> Option<Instant> {
        self.refill(now, window, srtt);
        let size = size as u64;
        if self.tokens >= size {
            return None;
        }
        let missing = u128::from(size - self.tokens);
        let nanos = (missing * 1_000_000_000).div_ceil(Self::rate(window, srtt));
        Some(self.last.unwrap_or(now) + Duration::from_nanos(nanos as u64))
    }

    /// A paced packet of `size` bytes left.
    pub fn on_sent(&mut self, size: usize) {
        self.tokens = self.tokens.saturating_sub(size as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_halving_once_per_recovery() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut cc = NewReno::new(1200);
        assert_eq!(cc.window(), 12_000);
        cc.on_ack(t0, 1200);
        assert_eq!(cc.window(), 13_200, "slow start adds what was acked");
        cc.on_loss(t0 + ms(1), t0 + ms(10));
        assert_eq!(cc.window(), 6_600);
        cc.on_loss(t0 + ms(5), t0 + ms(12));
        assert_eq!(
            cc.window(),
            6_600,
            "a packet sent before recovery began does not halve again"
        );
        cc.on_ack(t0 + ms(5), 1200);
        assert_eq!(cc.window(), 6_600);
        for _ in 0..6 {
            cc.on_ack(t0 + ms(20), 1100);
        }
        assert_eq!(
            cc.window(),
            7_800,
            "avoidance: one datagram per window acked"
        );
        for _ in 0..20 {
            cc.on_loss(t0 + ms(100), t0 + ms(100));
            cc.on_loss(t0 + ms(200), t0 + ms(200));
        }
        assert_eq!(cc.window(), cc.min_window());
    }

    #[test]
    fn pacer_spreads_a_window_over_the_round_trip() {
        let t0 = Instant::now();
        let srtt = Duration::from_millis(100);
        let mut p = Pacer::new(1000);
        // Window 100,000 bytes per 100 ms at 5/4: 1.25 MB/s, 1000 bytes per 800 µs.
        for _ in 0..10 {
            assert_eq!(p.delay(t0, 1000, 100_000, srtt), None);
            p.on_sent(1000);
        }
        let at = p.delay(t0, 1000, 100_000, srtt).unwrap();
        assert_eq!(at - t0, Duration::from_micros(800));
        assert_eq!(p.delay(at, 1000, 100_000, srtt), None);
    }
}
