//! Congestion control (NewReno with loss differentiation) and a pacer,
//! both for bulk channels only: a game's small traffic is never held back
//! by them.

use std::time::{Duration, Instant};

use crate::rtt::RttEstimator;

/// The queueing delay above the minimum RTT from which a loss counts as
/// congestion: a quarter of the minimum RTT, at least [`MIN_QUEUE_MARGIN`].
const QUEUE_MARGIN_DIVISOR: u32 = 4;

/// The smallest queueing margin (covers timer and scheduling noise on
/// short paths).
const MIN_QUEUE_MARGIN: Duration = Duration::from_millis(5);

/// A loss counts as congestion without a queueing delay when at least
/// this many packets were lost in the last round trip completed...
const HEAVY_LOSS_PACKETS: u32 = 4;

/// ...and they were at least `1 / HEAVY_LOSS_FRACTION` (20 %) of the
/// packets it acknowledged or lost (reordered packets, acknowledged after
/// they were declared lost, count as acknowledged)...
const HEAVY_LOSS_FRACTION: u32 = 5;

/// ...of at least this many packets: in a round trip of 20, 4 losses
/// happen by chance once in 60 at 5 % random loss (one such early in a
/// transfer left a bulk channel in congestion avoidance at a 50 KB window,
/// 4x slower), 7 of 32 once in 1,100.
const HEAVY_LOSS_MIN_ROUND: u32 = 32;

/// NewReno (RFC 9002, section 7, as for QUIC): slow start doubles the
/// window each round trip until the first loss, congestion avoidance then
/// adds one datagram per window acknowledged; a loss halves the window
/// once per round trip (a recovery period starts at the loss, and losses
/// of packets sent before it do not reduce the window again).
///
/// Loss differentiation ([`NewReno::on_lost`]): a loss halves the window
/// only when it looks like congestion, that is when the path shows a queue
/// (every RTT sample of the round trip in progress is above the minimum
/// RTT by more than a quarter of it, at least 5 ms: a standing queue delays
/// them all, a busy host's scheduling only some) or when losses are heavy
/// (at least 4 packets and 20 % of at least 32 acknowledged or lost in the
/// last round trip completed, not counting the ones acknowledged after
/// all). A
/// drop-tail bottleneck drops only once its queue is full, and a full
/// queue raises the RTT, so those losses still halve the window as
/// NewReno's do; a random loss on a path whose RTT stays at its minimum
/// (radio, a lossy hop that is not the bottleneck) is resent and does not
/// cost the window. The heavy-loss rule guards against a bottleneck whose
/// queue is too short to show in the RTT.
///
/// A reduction found spurious is undone (in the spirit of RFC 4015's
/// response to a spurious retransmission, and TCP's undo): the window and
/// slow-start threshold from before it are kept until the next reduction,
/// and when every packet declared lost since it began turns out to have
/// been acknowledged after all (only reordered), [`NewReno::undo`] puts
/// them back. One packet really lost keeps the reduction. The caller
/// (which knows what was acknowledged after being declared lost) decides;
/// [`NewReno::undo_from`] tells it which packets count.
#[derive(Debug, Clone)]
pub(crate) struct NewReno {
    window: usize,
    ssthresh: usize,
    recovery_start: Option<Instant>,
    acked_in_avoidance: usize,
    max_datagram: usize,
    undo: Option<Undo>,
    /// Packets acknowledged and lost in this round trip and the one before
    /// (the last completed).
    round: Round,
    prev_round: Round,
    /// A round trip ends when a packet sent after it began is acknowledged.
    round_start: Option<Instant>,
}

/// What one round trip acknowledged and lost (packets).
#[derive(Debug, Clone, Copy, Default)]
struct Round {
    acked: u32,
    lost: u32,
    /// The smallest RTT sample taken in it.
    min_rtt: Option<Duration>,
}

/// How [`NewReno::on_lost`] took a loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LossVerdict {
    /// Congestion: the window was halved (a new recovery period).
    Reduced,
    /// Congestion, but of a packet sent before the current recovery
    /// period began: the window was halved for it already.
    InRecovery,
    /// Not congestion (no queue, light loss): the window is kept.
    Random,
}

/// What the latest reduction replaced, while it may still be undone.
#[derive(Debug, Clone, Copy)]
struct Undo {
    window: usize,
    ssthresh: usize,
    /// The number of the packet whose loss started the reduction: losses
    /// are declared in packet-number order, so every packet declared lost
    /// since is numbered at least this.
    first_lost: u64,
}

impl NewReno {
    /// Initial window: 10 datagrams (RFC 9002 bounds it by 14,720 bytes).
    pub(crate) fn new(max_datagram: usize) -> Self {
        NewReno {
            window: (10 * max_datagram).min(14_720.max(2 * max_datagram)),
            ssthresh: usize::MAX,
            recovery_start: None,
            acked_in_avoidance: 0,
            max_datagram,
            undo: None,
            round: Round::default(),
            prev_round: Round::default(),
            round_start: None,
        }
    }

    /// The congestion window (bytes).
    pub(crate) fn window(&self) -> usize {
        self.window
    }

    /// The smallest window: two datagrams.
    pub(crate) fn min_window(&self) -> usize {
        2 * self.max_datagram
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// `bytes` of a packet sent at `sent` were acknowledged at `now`.
    pub(crate) fn on_ack(&mut self, now: Instant, sent: Instant, bytes: usize) {
        if self.round_start.is_none_or(|r| sent >= r) {
            self.prev_round = self.round;
            self.round = Round::default();
            self.round_start = Some(now);
        }
        self.round.acked = self.round.acked.saturating_add(1);
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

    /// Packet `pn`, sent at `sent`, was declared lost at `now` (losses are
    /// reported in packet-number order), with `rtt` the path's estimates:
    /// halves the window if the loss looks like congestion (see the type's
    /// documentation).
    pub(crate) fn on_lost(
        &mut self,
        pn: u64,
        sent: Instant,
        now: Instant,
        rtt: &RttEstimator,
    ) -> LossVerdict {
        self.round.lost = self.round.lost.saturating_add(1);
        if !(self.queueing(rtt) || self.heavy_loss()) {
            return LossVerdict::Random;
        }
        if self.in_recovery(sent) {
            return LossVerdict::InRecovery;
        }
        self.on_loss(pn, sent, now);
        LossVerdict::Reduced
    }

    /// An RTT sample (`latest`, ack delay included, as the minimum is)
    /// was taken.
    pub(crate) fn on_rtt_sample(&mut self, latest: Duration) {
        self.round.min_rtt = Some(self.round.min_rtt.map_or(latest, |m| m.min(latest)));
    }

    /// The RTT shows a queue: every sample of the round trip in progress
    /// (the latest if it has none yet) above the minimum by more than the
    /// margin.
    fn queueing(&self, rtt: &RttEstimator) -> bool {
        let min = rtt.min();
        let margin = (min / QUEUE_MARGIN_DIVISOR).max(MIN_QUEUE_MARGIN);
        self.round.min_rtt.unwrap_or(rtt.latest()) > min + margin
    }

    /// Losses in the last round trip completed were heavy. (The round
    /// trip in progress is not judged: its first few packets say little,
    /// and the spurious losses among its losses are not all known yet.)
    fn heavy_loss(&self) -> bool {
        let Round { lost, acked, .. } = self.prev_round;
        lost >= HEAVY_LOSS_PACKETS
            && lost.saturating_add(acked) >= HEAVY_LOSS_MIN_ROUND
            && u64::from(lost) * u64::from(HEAVY_LOSS_FRACTION)
                >= u64::from(lost) + u64::from(acked)
    }

    /// `n` packets declared lost were acknowledged after all (reordered):
    /// they count as acknowledged in the round trips' loss counts (the
    /// round trip in progress first, where they were most likely declared).
    pub(crate) fn on_spurious(&mut self, n: u64) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let here = n.min(self.round.lost);
        self.round.lost -= here;
        self.round.acked = self.round.acked.saturating_add(here);
        let before = (n - here).min(self.prev_round.lost);
        self.prev_round.lost -= before;
        self.prev_round.acked = self.prev_round.acked.saturating_add(before);
    }

    /// A congestion loss of packet `pn`, sent at `sent`, declared at `now`:
    /// halves the window unless a recovery period covers `sent` (plain
    /// NewReno, without loss differentiation).
    pub(crate) fn on_loss(&mut self, pn: u64, sent: Instant, now: Instant) {
        if self.in_recovery(sent) {
            return;
        }
        // A new reduction: only this one can be undone from now on (the
        // one before, if not undone by now, stays; keeping one is enough
        // for the common case of a reordered burst and stays simple).
        self.undo = Some(Undo {
            window: self.window,
            ssthresh: self.ssthresh,
            first_lost: pn,
        });
        self.recovery_start = Some(now);
        self.ssthresh = (self.window / 2).max(self.min_window());
        self.window = self.ssthresh;
        self.acked_in_avoidance = 0;
    }

    /// The number of the first packet declared lost in the latest
    /// reduction, while it can still be undone: if every packet declared
    /// lost from it on was acknowledged after all, call [`NewReno::undo`].
    pub(crate) fn undo_from(&self) -> Option<u64> {
        self.undo.map(|u| u.first_lost)
    }

    /// Undoes the latest reduction, found spurious: the window goes back to
    /// at least what it was before, the slow-start threshold to what it
    /// was, and the recovery period ends (as if the losses had not been
    /// declared; a later loss reduces the window again). False when there
    /// is nothing to undo.
    pub(crate) fn undo(&mut self) -> bool {
        let Some(u) = self.undo.take() else {
            return false;
        };
        self.window = self.window.max(u.window);
        self.ssthresh = u.ssthresh;
        self.recovery_start = None;
        self.acked_in_avoidance = 0;
        true
    }
}

/// How long a wait the pacer's bucket covers at its rate: the drivers wait
/// in whole milliseconds (epoll's timeout) and often oversleep on a busy
/// host, so a bucket smaller than what the rate releases in about 2 ms
/// caps the rate at the bucket per wake-up.
const PACER_BURST_TIME: Duration = Duration::from_millis(2);

/// A token bucket releasing `1.25 × window / smoothed RTT` bytes per
/// second with a burst of 10 datagrams or what that rate releases in 2 ms
/// (whichever is more), so a window is spread over the round trip instead
/// of leaving in one burst that overflows a slow link's queue.
///
/// The bucket used to hold 10 datagrams whatever the rate: with the
/// drivers' millisecond timer that capped a bulk channel at about 12 MB/s
/// (less when the host oversleeps), 30 % below the unpaced rate at 50 ms
/// RTT and 1 % loss. At a slow link's rate (1 Mbit/s: 0.3 KB per 2 ms) the
/// bucket stays at 10 datagrams.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    tokens: u64,
    /// The smallest bucket: 10 datagrams.
    min_capacity: u64,
    last: Option<Instant>,
}

impl Pacer {
    /// A full bucket of 10 datagrams.
    pub(crate) fn new(max_datagram: usize) -> Self {
        let capacity = 10 * max_datagram as u64;
        Pacer {
            tokens: capacity,
            min_capacity: capacity,
            last: None,
        }
    }

    fn rate(window: usize, srtt: Duration) -> u128 {
        // bytes per second, × 5/4
        let nanos = srtt.as_nanos().max(1);
        (window as u128 * 5 * 1_000_000_000 / 4 / nanos).max(1)
    }

    /// The bucket's size at `rate` bytes per second.
    fn capacity(&self, rate: u128) -> u128 {
        let burst = rate * PACER_BURST_TIME.as_nanos() / 1_000_000_000;
        burst.max(u128::from(self.min_capacity))
    }

    fn refill(&mut self, now: Instant, window: usize, srtt: Duration) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_nanos();
            let rate = Self::rate(window, srtt);
            let add = rate * elapsed / 1_000_000_000;
            if add > 0 {
                let full = self.capacity(rate);
                self.tokens = (u128::from(self.tokens) + add).min(full) as u64;
                self.last = Some(now);
            }
        } else {
            self.last = Some(now);
        }
    }

    /// When a packet of `size` bytes may leave: `None` for now, else the
    /// instant the bucket holds enough.
    pub(crate) fn delay(
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
    pub(crate) fn on_sent(&mut self, size: usize) {
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
        cc.on_ack(t0, t0, 1200);
        assert_eq!(cc.window(), 13_200, "slow start adds what was acked");
        cc.on_loss(1, t0 + ms(1), t0 + ms(10));
        assert_eq!(cc.window(), 6_600);
        cc.on_loss(5, t0 + ms(5), t0 + ms(12));
        assert_eq!(
            cc.window(),
            6_600,
            "a packet sent before recovery began does not halve again"
        );
        cc.on_ack(t0 + ms(5), t0 + ms(5), 1200);
        assert_eq!(cc.window(), 6_600);
        for _ in 0..6 {
            cc.on_ack(t0 + ms(20), t0 + ms(20), 1100);
        }
        assert_eq!(
            cc.window(),
            7_800,
            "avoidance: one datagram per window acked"
        );
        for i in 0..20 {
            cc.on_loss(100 + 2 * i, t0 + ms(100), t0 + ms(100));
            cc.on_loss(101 + 2 * i, t0 + ms(200), t0 + ms(200));
        }
        assert_eq!(cc.window(), cc.min_window());
    }

    #[test]
    fn a_spurious_reduction_is_undone() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut cc = NewReno::new(1200);
        assert_eq!(cc.undo_from(), None);
        assert!(!cc.undo(), "nothing to undo");
        cc.on_ack(t0, t0, 12_000);
        assert_eq!(cc.window(), 24_000);
        cc.on_loss(7, t0 + ms(1), t0 + ms(10));
        cc.on_loss(9, t0 + ms(2), t0 + ms(11));
        assert_eq!(cc.window(), 12_000);
        assert_eq!(cc.undo_from(), Some(7), "the loss that started it");
        assert!(cc.undo());
        assert_eq!(cc.window(), 24_000, "the window from before");
        assert_eq!(cc.undo_from(), None);
        assert!(!cc.undo(), "undone once");
        // The slow-start threshold is back too: still in slow start.
        cc.on_ack(t0 + ms(12), t0 + ms(12), 1200);
        assert_eq!(cc.window(), 25_200);
        // The recovery period ended with the undo: a loss of a packet sent
        // before it began reduces the window again.
        cc.on_loss(11, t0 + ms(3), t0 + ms(13));
        assert_eq!(cc.window(), 12_600);
        assert_eq!(cc.undo_from(), Some(11));
    }

    #[test]
    fn only_the_latest_reduction_is_undone_and_never_below_the_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut cc = NewReno::new(1000);
        assert_eq!(cc.window(), 10_000);
        cc.on_loss(1, t0, t0 + ms(10));
        assert_eq!(cc.window(), 5_000);
        // A loss of a packet sent after the first recovery began: a new
        // reduction, which replaces the first as the one to undo.
        cc.on_loss(30, t0 + ms(20), t0 + ms(30));
        assert_eq!(cc.window(), 2_500);
        assert_eq!(cc.undo_from(), Some(30));
        assert!(cc.undo());
        assert_eq!(cc.window(), 5_000, "what it was before the second");
        // Congestion avoidance after a reduction (acks of packets sent
        // after the recovery began) grows the window past what it was
        // before: the undo keeps the larger.
        cc.on_loss(50, t0 + ms(50), t0 + ms(60));
        assert_eq!(cc.window(), 2_500);
        for _ in 0..20 {
            cc.on_ack(t0 + ms(70), t0 + ms(70), 2_500);
        }
        let grown = cc.window();
        assert!(grown > 5_000, "{grown}");
        assert!(cc.undo());
        assert_eq!(cc.window(), grown, "an undo never shrinks the window");
    }

    /// An estimator that has seen `min` once, then `samples` of `latest`.
    fn rtt(min: Duration, latest: Duration, samples: usize) -> RttEstimator {
        let mut r = RttEstimator::new(Duration::from_millis(333));
        r.update(min, Duration::ZERO, Duration::ZERO);
        for _ in 0..samples {
            r.update(latest, Duration::ZERO, Duration::ZERO);
        }
        r
    }

    #[test]
    fn a_loss_without_a_queue_keeps_the_window_and_one_with_a_queue_halves_it() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut cc = NewReno::new(1200);
        // 100 packets acknowledged in one round trip: light loss from now.
        for _ in 0..100 {
            cc.on_ack(t0, t0, 1200);
        }
        assert_eq!(cc.window(), 132_000);
        // 50 ms at the minimum, then 60 ms: a 10 ms rise, under the margin
        // (a quarter of 50 ms).
        let flat = rtt(ms(50), ms(60), 40);
        cc.on_rtt_sample(ms(60));
        for pn in 0..3 {
            let v = cc.on_lost(pn, t0 + ms(1), t0 + ms(60), &flat);
            assert_eq!(v, LossVerdict::Random);
        }
        assert_eq!(cc.window(), 132_000, "random loss is not congestion");
        assert_eq!(cc.undo_from(), None, "nothing to undo either");
        // 50 ms at the minimum, then 80 ms: 30 ms more, but one sample of
        // this round trip was 55 ms (a hiccup delayed the others, no queue).
        let queue = rtt(ms(50), ms(80), 40);
        cc.on_rtt_sample(ms(80));
        cc.on_rtt_sample(ms(55));
        assert_eq!(
            cc.on_lost(3, t0 + ms(2), t0 + ms(61), &queue),
            LossVerdict::Random
        );
        // The next round trip (its first acknowledgement is of a packet
        // sent after this one began): every sample 80 ms or more, a queue.
        cc.on_ack(t0 + ms(120), t0 + ms(60), 1200);
        assert_eq!(cc.window(), 133_200);
        cc.on_rtt_sample(ms(81));
        cc.on_rtt_sample(ms(80));
        assert_eq!(
            cc.on_lost(4, t0 + ms(62), t0 + ms(121), &queue),
            LossVerdict::Reduced
        );
        assert_eq!(cc.window(), 66_600);
        assert_eq!(
            cc.on_lost(5, t0 + ms(62), t0 + ms(122), &queue),
            LossVerdict::InRecovery,
            "once per recovery period, as before"
        );
        assert_eq!(cc.window(), 66_600);
        // On a short path the margin is at least 5 ms: 1 ms then 4 ms is
        // no queue, 1 ms then 8 ms is.
        let mut short = NewReno::new(1200);
        for _ in 0..100 {
            short.on_ack(t0, t0, 1200);
        }
        let v = short.on_lost(0, t0, t0 + ms(5), &rtt(ms(1), ms(4), 40));
        assert_eq!(v, LossVerdict::Random);
        let v = short.on_lost(1, t0, t0 + ms(5), &rtt(ms(1), ms(8), 40));
        assert_eq!(v, LossVerdict::Reduced);
    }

    #[test]
    fn heavy_loss_is_congestion_even_without_a_queue() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let flat = rtt(ms(50), ms(50), 10);
        let mut cc = NewReno::new(1200);
        // Round 1 (packets sent before t0 + 50 ms): 28 acknowledged and 7
        // lost, 20 % of 35: judged once the round is over, not before.
        for _ in 0..28 {
            cc.on_ack(t0 + ms(50), t0, 1200);
        }
        for pn in 0..7 {
            let v = cc.on_lost(pn, t0, t0 + ms(50), &flat);
            assert_eq!(v, LossVerdict::Random);
        }
        // Round 2 starts with the first packet sent after round 1 began.
        cc.on_ack(t0 + ms(100), t0 + ms(50), 1200);
        assert_eq!(
            cc.on_lost(7, t0 + ms(50), t0 + ms(100), &flat),
            LossVerdict::Reduced
        );
        // The same, but one of round 1's losses was only reordered: 6 of
        // 35 is light.
        let mut cc = NewReno::new(1200);
        for _ in 0..28 {
            cc.on_ack(t0 + ms(50), t0, 1200);
        }
        for pn in 0..7 {
            cc.on_lost(pn, t0, t0 + ms(50), &flat);
        }
        cc.on_spurious(1);
        cc.on_ack(t0 + ms(100), t0 + ms(50), 1200);
        let v = cc.on_lost(7, t0 + ms(50), t0 + ms(100), &flat);
        assert_eq!(v, LossVerdict::Random);
        // 4 of 20 is 20 % too, but of a round trip too short to tell it
        // from chance.
        let mut cc = NewReno::new(1200);
        for _ in 0..16 {
            cc.on_ack(t0 + ms(50), t0, 1200);
        }
        for pn in 0..4 {
            cc.on_lost(pn, t0, t0 + ms(50), &flat);
        }
        cc.on_ack(t0 + ms(100), t0 + ms(50), 1200);
        let v = cc.on_lost(4, t0 + ms(50), t0 + ms(100), &flat);
        assert_eq!(v, LossVerdict::Random);
        // 1 loss in 40 each round trip: light.
        let mut cc = NewReno::new(1200);
        for round in 0..4u64 {
            let (start, end) = (t0 + ms(50 * round), t0 + ms(50 * round + 50));
            for _ in 0..39 {
                cc.on_ack(end, start, 1200);
            }
            let v = cc.on_lost(round, start, end, &flat);
            assert_eq!(v, LossVerdict::Random, "round {round}");
        }
        assert_eq!(cc.window(), 12_000 + 4 * 39 * 1200);
    }

    #[test]
    fn a_fast_pacer_holds_two_milliseconds_of_its_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let srtt = ms(50);
        // 2.4 MB per 50 ms at 5/4: 60 MB/s, 120 KB in 2 ms (100 datagrams).
        let mut p = Pacer::new(1200);
        for _ in 0..10 {
            assert_eq!(p.delay(t0, 1200, 2_400_000, srtt), None);
            p.on_sent(1200);
        }
        assert!(p.delay(t0, 1200, 2_400_000, srtt).is_some());
        // A wake-up 3 ms later (a 1 ms timer, overslept): the bucket holds
        // 2 ms of the rate, not 10 datagrams.
        let mut sent = 0;
        while p.delay(t0 + ms(3), 1200, 2_400_000, srtt).is_none() {
            p.on_sent(1200);
            sent += 1;
        }
        assert_eq!(sent, 100);
        // At a slow link's rate the bucket stays at 10 datagrams.
        let mut p = Pacer::new(1200);
        let mut sent = 0;
        while p.delay(t0 + ms(500), 1200, 40_000, ms(300)).is_none() {
            p.on_sent(1200);
            sent += 1;
        }
        assert_eq!(sent, 10);
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
