//! Loss detection (RFC 9002, section 6): the record of sent packets, the
//! packet and time thresholds, and the probe timeout with backoff.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::rtt::RttEstimator;
use crate::wire::AckFrame;

/// A packet is lost once a packet sent this many later is acknowledged
/// (the starting value: a connection that sees packets acknowledged after
/// being declared lost raises its own threshold to the reordering seen).
pub const PACKET_THRESHOLD: u64 = 3;

/// Runs of declared-lost packet numbers remembered, to notice one being
/// acknowledged after all.
const LOST_MEMORY: usize = 64;

/// Round trips without a spurious loss after which a raised packet
/// threshold is halved back toward [`PACKET_THRESHOLD`].
pub(crate) const THRESHOLD_DECAY_ROUNDS: u32 = 16;

/// One chunk of a reliable message carried by a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkRef {
    pub channel: u8,
    /// The chunk's first transmission (not a resend, redundant copy or
    /// probe): its loss is what redundancy can save.
    pub first: bool,
    pub chunk: u32,
    pub seq: u64,
}

/// What the sender remembers of a packet until it is acknowledged or lost.
#[derive(Debug)]
pub(crate) struct SentPacket {
    pub pn: u64,
    pub time_sent: Instant,
    pub size: usize,
    /// Carries something other than ACK and PADDING.
    pub ack_eliciting: bool,
    /// Where the ACK frame it carried lets the receiver's ack floor move
    /// once this packet is acknowledged: one past the frame's largest
    /// number, or its lowest range's start when not every range fit.
    pub ack_floor_after: Option<u64>,
    /// Reliable chunks it carried (resent by message when lost).
    pub chunks: Vec<ChunkRef>,
}

/// Why an ACK frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckError {
    /// It acknowledges a packet number never sent.
    Unsent,
}

/// Sent packets in packet-number order and the loss-detection state.
#[derive(Debug)]
pub(crate) struct Recovery {
    /// `sent[i]` is packet `base + i`; `None` once acknowledged or lost.
    sent: VecDeque<Option<SentPacket>>,
    base: u64,
    next_pn: u64,
    largest_acked: Option<u64>,
    loss_time: Option<Instant>,
    pub pto_count: u32,
    last_ack_eliciting: Option<Instant>,
    pub bytes_in_flight: usize,
    ack_eliciting_in_flight: usize,
    pub max_ack_delay: Duration,
    /// The packet threshold in force: [`PACKET_THRESHOLD`], raised each
    /// time a packet declared lost by it is acknowledged after all, to the
    /// distance that packet was overtaken by (RFC 9002, section 6.1.1,
    /// allows adapting it; TCP does the same). A reordering path (jitter
    /// larger than the gap between packets) otherwise has most of a burst
    /// declared lost and resent while it is still arriving. Real losses
    /// are still found by the time threshold within 9/8 of an RTT.
    ///
    /// It falls back slowly: after [`THRESHOLD_DECAY_ROUNDS`] round trips
    /// in a row without a spurious loss, the excess over
    /// [`PACKET_THRESHOLD`] is halved (and again after as many more), so
    /// one burst of reordering does not slow loss detection for the rest
    /// of the connection, and a path that keeps reordering raises it again
    /// at its next spurious loss.
    reorder_threshold: u64,
    /// Round trips since the last spurious loss or decay (a round trip
    /// ends when a packet sent after the previous one ended is
    /// acknowledged).
    quiet_rounds: u32,
    /// The packet whose acknowledgement ends the current round trip.
    round_end: u64,
    /// Recently declared lost: `(first, last, largest acknowledged then)`,
    /// increasing and disjoint (losses are declared in packet-number
    /// order), at most [`LOST_MEMORY`]; a run leaves it when acknowledged.
    lost_record: VecDeque<(u64, u64, u64)>,
    /// The largest packet number declared lost and forgotten without being
    /// acknowledged (the record was full): whether it was spurious is
    /// unknown.
    lost_forgotten: Option<u64>,
    /// Packets acknowledged after they were declared lost.
    pub spurious_losses: u64,
}

impl Recovery {
    pub(crate) fn new(max_ack_delay: Duration) -> Self {
        Recovery {
            // Grown to the flight (an idle connection's is a packet or two).
            sent: VecDeque::new(),
            base: 0,
            next_pn: 0,
            largest_acked: None,
            loss_time: None,
            pto_count: 0,
            last_ack_eliciting: None,
            bytes_in_flight: 0,
            ack_eliciting_in_flight: 0,
            max_ack_delay,
            reorder_threshold: PACKET_THRESHOLD,
            quiet_rounds: 0,
            round_end: 0,
            lost_record: VecDeque::new(),
            lost_forgotten: None,
            spurious_losses: 0,
        }
    }

    /// Prefetches the sent table's oldest and newest entries: what the
    /// next acknowledgement most likely reads.
    pub(crate) fn prefetch_ends(&self) {
        if let Some(p) = self.sent.front() {
            crate::sys::prefetch_lines(p);
        }
        if let Some(p) = self.sent.back() {
            crate::sys::prefetch_lines(p);
        }
    }

    /// Prefetches the chunk lists of the sent table's oldest and newest
    /// packets (after [`prefetch_ends`](Self::prefetch_ends)).
    pub(crate) fn prefetch_chunks(&self) {
        for p in [self.sent.front(), self.sent.back()]
            .into_iter()
            .flatten()
            .flatten()
        {
            crate::sys::prefetch(p.chunks.as_ptr());
        }
    }

    /// The number the next packet gets.
    pub(crate) fn next_pn(&self) -> u64 {
        self.next_pn
    }

    /// The largest packet number the peer acknowledged.
    pub(crate) fn largest_acked(&self) -> Option<u64> {
        self.largest_acked
    }

    /// Records a sent packet (its number must be [`Recovery::next_pn`]).
    pub(crate) fn on_sent(&mut self, p: SentPacket) {
        debug_assert_eq!(p.pn, self.next_pn);
        self.next_pn += 1;
        if p.ack_eliciting {
            self.bytes_in_flight += p.size;
            self.ack_eliciting_in_flight += 1;
            self.last_ack_eliciting = Some(p.time_sent);
        }
        if self.sent.is_empty() {
            self.base = p.pn;
        }
        self.sent.push_back(Some(p));
    }

    fn remove(&mut self, idx: usize) -> Option<SentPacket> {
        let p = self.sent.get_mut(idx)?.take()?;
        if p.ack_eliciting {
            self.bytes_in_flight -= p.size;
            self.ack_eliciting_in_flight -= 1;
        }
        Some(p)
    }

    fn trim(&mut self) {
        while let Some(None) = self.sent.front() {
            self.sent.pop_front();
            self.base += 1;
        }
        if self.sent.is_empty() {
            self.base = self.next_pn;
        }
    }

    /// Processes an ACK frame: newly acknowledged packets go to `acked`
    /// (largest first), packets now lost to `lost`, and the RTT takes a
    /// sample when the largest acknowledged packet is newly acknowledged
    /// and something newly acknowledged was ack-eliciting.
    pub(crate) fn on_ack(
        &mut self,
        ack: &AckFrame<'_>,
        now: Instant,
        rtt: &mut RttEstimator,
        acked: &mut Vec<SentPacket>,
        lost: &mut Vec<SentPacket>,
    ) -> Result<(), AckError> {
        if ack.largest >= self.next_pn {
            return Err(AckError::Unsent);
        }
        self.largest_acked = Some(
            self.largest_acked
                .map_or(ack.largest, |l| l.max(ack.largest)),
        );
        let first = acked.len();
        reserve_for_in_flight(acked, &self.sent);
        let end = self.base + self.sent.len() as u64;
        if !self.lost_record.is_empty() {
            for (lo, hi) in ack.ranges() {
                self.on_acked_after_loss(lo, hi);
            }
        }
        for (lo, hi) in ack.ranges() {
            if hi < self.base {
                break;
            }
            let lo = lo.max(self.base);
            let hi = hi.min(end.saturating_sub(1));
            for pn in (lo..=hi).rev() {
                if let Some(p) = self.remove((pn - self.base) as usize) {
                    acked.push(p);
                }
            }
        }
        let newly = &acked[first..];
        if let Some(largest) = newly.first() {
            if largest.pn == ack.largest && newly.iter().any(|p| p.ack_eliciting) {
                let sample = now.saturating_duration_since(largest.time_sent);
                rtt.update(
                    sample,
                    Duration::from_micros(ack.delay_us),
                    self.max_ack_delay,
                );
            }
            self.pto_count = 0;
            if ack.largest >= self.round_end {
                self.on_round_trip();
            }
        }
        self.detect_lost(now, rtt, lost);
        self.trim();
        Ok(())
    }

    /// Moves packets lost by the packet or time threshold to `lost` and
    /// arms the loss timer for the earliest that is not lost yet.
    pub(crate) fn detect_lost(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        lost: &mut Vec<SentPacket>,
    ) {
        self.loss_time = None;
        let Some(largest) = self.largest_acked else {
            return;
        };
        let delay = rtt.loss_delay();
        reserve_for_in_flight(lost, &self.sent);
        for i in 0..self.sent.len() {
            let pn = self.base + i as u64;
            if pn > largest {
                break;
            }
            let Some(p) = &self.sent[i] else { continue };
            let lost_by_time = now.saturating_duration_since(p.time_sent) >= delay;
            if lost_by_time || largest >= pn + self.reorder_threshold {
                if let Some(p) = self.remove(i) {
                    if p.ack_eliciting {
                        self.record_lost(pn, largest);
                    }
                    lost.push(p);
                }
            } else {
                let at = p.time_sent + delay;
                self.loss_time = Some(self.loss_time.map_or(at, |t| t.min(at)));
            }
        }
        self.trim();
    }

    /// The packet threshold in force.
    #[cfg(test)]
    pub(crate) fn reorder_threshold(&self) -> u64 {
        self.reorder_threshold
    }

    /// A round trip ended (a packet sent after the last one ended was
    /// acknowledged): decays the packet threshold after enough of them
    /// without a spurious loss.
    fn on_round_trip(&mut self) {
        self.round_end = self.next_pn;
        if self.reorder_threshold == PACKET_THRESHOLD {
            self.quiet_rounds = 0;
            return;
        }
        self.quiet_rounds += 1;
        if self.quiet_rounds >= THRESHOLD_DECAY_ROUNDS {
            self.quiet_rounds = 0;
            self.reorder_threshold =
                PACKET_THRESHOLD + (self.reorder_threshold - PACKET_THRESHOLD) / 2;
        }
    }

    fn forget_lost(&mut self, last: u64) {
        self.lost_forgotten = Some(self.lost_forgotten.map_or(last, |f| f.max(last)));
    }

    fn record_lost(&mut self, pn: u64, largest: u64) {
        if let Some(last) = self.lost_record.back_mut() {
            if pn <= last.1 {
                // Not in order: not remembered.
                self.forget_lost(pn);
                return;
            }
            if pn == last.1 + 1 && largest == last.2 {
                last.1 = pn;
                return;
            }
        }
        if self.lost_record.len() == LOST_MEMORY {
            if let Some((_, last, _)) = self.lost_record.pop_front() {
                self.forget_lost(last);
            }
        }
        self.lost_record.push_back((pn, pn, largest));
    }

    /// Whether a packet numbered in `from..until` was declared lost and
    /// not acknowledged since (or forgotten, so not known to be). When
    /// none was, every loss declared in that span was spurious.
    pub(crate) fn lost_unacked_in(&self, from: u64, until: u64) -> bool {
        if self.lost_forgotten.is_some_and(|f| f >= from) {
            return true;
        }
        let i = self.lost_record.partition_point(|r| r.1 < from);
        self.lost_record.get(i).is_some_and(|r| r.0 < until)
    }

    /// Packets `lo..=hi` were acknowledged: any of them declared lost was
    /// not (reordered, or its acknowledgement was): raise the packet
    /// threshold past the distance it was overtaken by, and forget them.
    fn on_acked_after_loss(&mut self, lo: u64, hi: u64) {
        let mut i = self.lost_record.partition_point(|r| r.1 < lo);
        while let Some(&(a, b, largest)) = self.lost_record.get(i) {
            if a > hi {
                break;
            }
            let (from, to) = (a.max(lo), b.min(hi));
            self.spurious_losses += to - from + 1;
            self.quiet_rounds = 0;
            self.reorder_threshold = self.reorder_threshold.max(largest - from + 1);
            // Keep what is left of the run on either side.
            match (a < from, to < b) {
                (false, false) => {
                    self.lost_record.remove(i);
                    continue;
                }
                (true, false) => self.lost_record[i].1 = from - 1,
                (false, true) => self.lost_record[i].0 = to + 1,
                (true, true) => {
                    self.lost_record[i].1 = from - 1;
                    if self.lost_record.len() < LOST_MEMORY {
                        self.lost_record.insert(i + 1, (to + 1, b, largest));
                    } else {
                        self.forget_lost(b);
                    }
                }
            }
            i += 1;
        }
    }

    /// When the loss-detection timer fires: the time-threshold timer if
    /// armed, else the probe timeout while ack-eliciting packets are in
    /// flight.
    pub(crate) fn timeout(&self, rtt: &RttEstimator) -> Option<Instant> {
        if self.loss_time.is_some() {
            return self.loss_time;
        }
        if self.ack_eliciting_in_flight == 0 {
            return None;
        }
        let pto = rtt.pto(self.max_ack_delay) * (1u32 << self.pto_count.min(16));
        self.last_ack_eliciting.map(|t| t + pto)
    }

    /// Runs the timer at `now`: declares losses by time, or returns true
    /// when the probe timeout expired (the caller sends probes; the backoff
    /// doubles).
    pub(crate) fn on_timeout(
        &mut self,
        now: Instant,
        rtt: &RttEstimator,
        lost: &mut Vec<SentPacket>,
    ) -> bool {
        let Some(at) = self.timeout(rtt) else {
            return false;
        };
        if at > now {
            return false;
        }
        if self.loss_time.is_some() {
            self.detect_lost(now, rtt, lost);
            false
        } else {
            self.pto_count += 1;
            // The next PTO counts from now.
            self.last_ack_eliciting = Some(now);
            true
        }
    }

    /// Unacknowledged packets, oldest first (for probes).
    pub(crate) fn outstanding(&self) -> impl Iterator<Item = &SentPacket> {
        self.sent.iter().flatten()
    }

    /// How many packets are remembered.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.sent.len()
    }
}

/// Makes room in a caller's scratch (`acked` or `lost`) for every packet in
/// flight, sized by the sent table's own capacity: the scratch then grows
/// only when the sent table does, not when one ACK happens to cover more
/// packets than any before (which, under CPU pressure, made the steady
/// state allocate).
fn reserve_for_in_flight<T, U>(scratch: &mut Vec<T>, sent: &VecDeque<U>) {
    if scratch.capacity() - scratch.len() < sent.len() {
        scratch.reserve(sent.capacity());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::NewReno;
    use crate::wire::{Frame, Reader, Writer};

    fn sent(pn: u64, t: Instant) -> SentPacket {
        SentPacket {
            pn,
            time_sent: t,
            size: 100,
            ack_eliciting: true,
            ack_floor_after: None,
            chunks: Vec::new(),
        }
    }

    fn with_ack(ranges: &[(u64, u64)], f: impl FnOnce(&AckFrame<'_>)) {
        let mut buf = [0u8; 128];
        let mut w = Writer::new(&mut buf);
        Frame::encode_ack(&mut w, 0, ranges).unwrap();
        let n = w.len();
        let Frame::Ack(a) = Frame::decode(&mut Reader::new(&buf[..n])).unwrap() else {
            unreachable!()
        };
        f(&a);
    }

    const fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn packet_threshold_declares_the_third_older_packet_lost() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        for pn in 0..5 {
            r.on_sent(sent(pn, t0 + ms(pn)));
        }
        assert_eq!(r.bytes_in_flight, 500);
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        // Ack 2..=3: packet 0 is 3 below 3 -> lost; 1 only 2 below -> not yet.
        with_ack(&[(2, 3)], |a| {
            r.on_ack(a, t0 + ms(20), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(acked.iter().map(|p| p.pn).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(lost.iter().map(|p| p.pn).collect::<Vec<_>>(), [0]);
        assert_eq!(rtt.latest(), ms(17), "sample from packet 3, sent at 3 ms");
        // Packet 1 gets a time-threshold timer at sent + 9/8 × 17 ms.
        let at = r.timeout(&rtt).unwrap();
        assert_eq!(at, t0 + ms(1) + rtt.loss_delay());
        lost.clear();
        assert!(!r.on_timeout(at, &rtt, &mut lost));
        assert_eq!(lost.iter().map(|p| p.pn).collect::<Vec<_>>(), [1]);
        assert_eq!(r.bytes_in_flight, 100, "packet 4 is still in flight");
    }

    #[test]
    fn a_lost_packet_acknowledged_after_all_raises_the_packet_threshold() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        for pn in 0..10 {
            r.on_sent(sent(pn, t0));
        }
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        // 5..=9 overtook 0..=4: with the threshold of 3, 0..=4 are lost.
        with_ack(&[(5, 9)], |a| {
            r.on_ack(a, t0 + ms(10), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(lost.len(), 5);
        assert_eq!(r.reorder_threshold(), PACKET_THRESHOLD);
        // They arrive after all: packet 0 was overtaken by 9 packets.
        lost.clear();
        with_ack(&[(0, 9)], |a| {
            r.on_ack(a, t0 + ms(12), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(r.spurious_losses, 5);
        assert_eq!(r.reorder_threshold(), 10);
        // The same ACK again counts nothing twice.
        with_ack(&[(0, 9)], |a| {
            r.on_ack(a, t0 + ms(13), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(r.spurious_losses, 5);
        // Now 10..=14 overtaken by 5 packets are not declared lost, until
        // the time threshold says so.
        for pn in 10..20 {
            r.on_sent(sent(pn, t0 + ms(14)));
        }
        with_ack(&[(15, 19)], |a| {
            r.on_ack(a, t0 + ms(20), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert!(lost.is_empty());
        let at = r.timeout(&rtt).unwrap();
        assert!(!r.on_timeout(at, &rtt, &mut lost));
        assert_eq!(
            lost.iter().map(|p| p.pn).collect::<Vec<_>>(),
            [10, 11, 12, 13, 14]
        );
        // Part of a run acknowledged: the rest stays remembered.
        with_ack(&[(15, 19), (12, 12)], |a| {
            r.on_ack(a, at, &mut rtt, &mut acked, &mut lost).unwrap()
        });
        assert_eq!(r.spurious_losses, 6);
        with_ack(&[(10, 19)], |a| {
            r.on_ack(a, at, &mut rtt, &mut acked, &mut lost).unwrap()
        });
        assert_eq!(r.spurious_losses, 10);
        assert_eq!(r.reorder_threshold(), 10, "lost by time, not by count");
    }

    /// Processes an ACK of `ranges` as the connection does: an undo of the
    /// congestion window when every loss `cc` was told of since its
    /// latest reduction was spurious, then this ACK's losses. Returns the
    /// packets it declared lost.
    fn ack_with_cc(
        r: &mut Recovery,
        cc: &mut NewReno,
        rtt: &mut RttEstimator,
        ranges: &[(u64, u64)],
        now: Instant,
    ) -> Vec<u64> {
        let lost = ack(r, rtt, ranges, now);
        let until = lost.first().map_or(u64::MAX, |p: &SentPacket| p.pn);
        if cc.undo_from().is_some_and(|f| !r.lost_unacked_in(f, until)) {
            assert!(cc.undo());
        }
        for p in &lost {
            cc.on_loss(p.pn, p.time_sent, now);
        }
        lost.iter().map(|p| p.pn).collect()
    }

    #[test]
    fn a_reduction_is_undone_only_when_all_its_losses_were_spurious() {
        for real_loss in [false, true] {
            let t0 = Instant::now();
            let mut r = Recovery::new(ms(5));
            let mut rtt = RttEstimator::new(ms(100));
            let mut cc = NewReno::new(1000);
            for pn in 0..30 {
                r.on_sent(sent(pn, t0));
            }
            let full = cc.window();
            // 5..=9 overtook 0..=4: lost by the packet threshold, and the
            // window halves.
            let lost = ack_with_cc(&mut r, &mut cc, &mut rtt, &[(5, 9)], t0 + ms(10));
            assert_eq!(lost, [0, 1, 2, 3, 4]);
            assert_eq!(cc.window(), full / 2);
            // In the same recovery period (sent before it began) 10..=14.
            let lost = ack_with_cc(&mut r, &mut cc, &mut rtt, &[(15, 19), (5, 9)], t0 + ms(11));
            assert_eq!(lost, [10, 11, 12, 13, 14]);
            assert_eq!(cc.window(), full / 2, "once per recovery period");
            // All arrive after all, but for 12 when it was really lost.
            let late: &[(u64, u64)] = if real_loss {
                &[(13, 19), (0, 11)]
            } else {
                &[(0, 19)]
            };
            assert!(ack_with_cc(&mut r, &mut cc, &mut rtt, late, t0 + ms(12)).is_empty());
            assert_eq!(r.spurious_losses, if real_loss { 9 } else { 10 });
            assert_eq!(r.lost_unacked_in(0, u64::MAX), real_loss);
            if real_loss {
                assert_eq!(cc.window(), full / 2, "a real loss: no undo");
                // Nor later, once the rest is acknowledged too.
                let lost =
                    ack_with_cc(&mut r, &mut cc, &mut rtt, &[(13, 29), (0, 11)], t0 + ms(13));
                assert!(lost.is_empty());
                assert_eq!(cc.window(), full / 2);
                assert_eq!(cc.undo_from(), Some(0), "still waiting for 12");
            } else {
                assert_eq!(cc.window(), full, "spurious: undone");
                assert_eq!(cc.undo_from(), None);
            }
        }
    }

    #[test]
    fn an_ack_ending_a_spurious_reduction_and_declaring_a_loss_undoes_first() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        let mut cc = NewReno::new(1000);
        for pn in 0..5 {
            r.on_sent(sent(pn, t0));
        }
        let full = cc.window();
        assert_eq!(
            ack_with_cc(&mut r, &mut cc, &mut rtt, &[(3, 4)], t0 + ms(10)),
            [0, 1]
        );
        assert_eq!(cc.window(), full / 2);
        // Sent after the recovery began.
        for pn in 5..20 {
            r.on_sent(sent(pn, t0 + ms(15)));
        }
        // 0 and 1 arrive (spurious: the threshold is 5 now), and 15..=19
        // overtake 5..=14 by at least that: lost, a new reduction, from the
        // full window again.
        let lost = ack_with_cc(&mut r, &mut cc, &mut rtt, &[(15, 19), (0, 4)], t0 + ms(20));
        assert_eq!(r.reorder_threshold(), 5);
        assert_eq!(lost, (5..15).collect::<Vec<_>>());
        assert_eq!(cc.window(), full / 2, "undone, then halved once");
        assert_eq!(cc.undo_from(), Some(5));
        assert!(r.lost_unacked_in(5, u64::MAX));
        assert!(!r.lost_unacked_in(0, 5));
    }

    #[test]
    fn forgotten_losses_are_never_taken_for_spurious() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        // 70 lost packets each in a run of its own (every other one acked,
        // one at a time): more runs than remembered.
        let n = 2 * (LOST_MEMORY as u64 + 6);
        for pn in 0..n + 3 {
            r.on_sent(sent(pn, t0));
        }
        for pn in (1..n + 3).step_by(2) {
            with_ack(&[(pn, pn)], |a| {
                r.on_ack(a, t0 + ms(10), &mut rtt, &mut acked, &mut lost)
                    .unwrap()
            });
        }
        assert_eq!(lost.len() as u64, n / 2);
        assert!(r.lost_unacked_in(0, u64::MAX));
        // All acknowledged after all; the first six were forgotten.
        with_ack(&[(0, n + 2)], |a| {
            r.on_ack(a, t0 + ms(12), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(r.spurious_losses, n / 2 - 6);
        assert!(r.lost_unacked_in(0, u64::MAX), "six unknown");
        assert!(!r.lost_unacked_in(12, u64::MAX), "those after are known");
    }

    /// Acknowledges `ranges` at `now`; returns the packets that declared
    /// lost.
    fn ack(
        r: &mut Recovery,
        rtt: &mut RttEstimator,
        ranges: &[(u64, u64)],
        now: Instant,
    ) -> Vec<SentPacket> {
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        with_ack(ranges, |a| {
            r.on_ack(a, now, rtt, &mut acked, &mut lost).unwrap()
        });
        lost
    }

    /// [`ack`], counting the packets it declared lost.
    fn ack_at(
        r: &mut Recovery,
        rtt: &mut RttEstimator,
        ranges: &[(u64, u64)],
        now: Instant,
    ) -> usize {
        ack(r, rtt, ranges, now).len()
    }

    /// `k` round trips: one packet each, sent and acknowledged.
    fn round_trips(r: &mut Recovery, rtt: &mut RttEstimator, k: u32, now: Instant) {
        for _ in 0..k {
            let pn = r.next_pn();
            r.on_sent(sent(pn, now));
            assert_eq!(ack_at(r, rtt, &[(pn, pn)], now + ms(1)), 0);
        }
    }

    #[test]
    fn a_raised_packet_threshold_decays_after_quiet_round_trips() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        for pn in 0..20 {
            r.on_sent(sent(pn, t0));
        }
        // 19 overtakes 0..=16: lost, then acknowledged after all.
        assert_eq!(ack_at(&mut r, &mut rtt, &[(19, 19)], t0 + ms(1)), 17);
        ack_at(&mut r, &mut rtt, &[(0, 19)], t0 + ms(2));
        assert_eq!(r.reorder_threshold(), 20);
        let t = t0 + ms(3);
        round_trips(&mut r, &mut rtt, THRESHOLD_DECAY_ROUNDS - 1, t);
        assert_eq!(r.reorder_threshold(), 20);
        round_trips(&mut r, &mut rtt, 1, t);
        assert_eq!(r.reorder_threshold(), 3 + 17 / 2, "the excess halved");
        round_trips(&mut r, &mut rtt, THRESHOLD_DECAY_ROUNDS, t);
        assert_eq!(r.reorder_threshold(), 3 + 8 / 2);
        round_trips(&mut r, &mut rtt, 3 * THRESHOLD_DECAY_ROUNDS, t);
        assert_eq!(
            r.reorder_threshold(),
            PACKET_THRESHOLD,
            "down to the default"
        );
        round_trips(&mut r, &mut rtt, 3 * THRESHOLD_DECAY_ROUNDS, t);
        assert_eq!(r.reorder_threshold(), PACKET_THRESHOLD, "and not below");
    }

    #[test]
    fn a_spurious_loss_restarts_the_threshold_decay() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        for pn in 0..10 {
            r.on_sent(sent(pn, t0));
        }
        ack_at(&mut r, &mut rtt, &[(9, 9)], t0 + ms(1));
        ack_at(&mut r, &mut rtt, &[(0, 9)], t0 + ms(1));
        assert_eq!(r.reorder_threshold(), 10);
        round_trips(&mut r, &mut rtt, THRESHOLD_DECAY_ROUNDS / 2, t0);
        // Halfway to a decay, 11 packets overtake one: lost, then
        // acknowledged after all.
        let pn = r.next_pn();
        for k in 0..12 {
            r.on_sent(sent(pn + k, t0));
        }
        assert_eq!(
            ack_at(&mut r, &mut rtt, &[(pn + 11, pn + 11)], t0 + ms(1)),
            2
        );
        ack_at(&mut r, &mut rtt, &[(pn, pn + 11)], t0 + ms(1));
        assert_eq!(r.reorder_threshold(), 12, "raised");
        // The count of quiet round trips started over.
        round_trips(&mut r, &mut rtt, THRESHOLD_DECAY_ROUNDS - 1, t0);
        assert_eq!(r.reorder_threshold(), 12);
        round_trips(&mut r, &mut rtt, 1, t0);
        assert_eq!(r.reorder_threshold(), 3 + 9 / 2);
    }

    #[test]
    fn probe_timeout_backs_off_and_resets_on_ack() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let rtt = RttEstimator::new(ms(100));
        r.on_sent(sent(0, t0));
        let pto = rtt.pto(ms(5));
        assert_eq!(r.timeout(&rtt), Some(t0 + pto));
        let mut lost = Vec::new();
        assert!(!r.on_timeout(t0 + pto - ms(1), &rtt, &mut lost));
        assert!(r.on_timeout(t0 + pto, &rtt, &mut lost));
        assert_eq!(r.timeout(&rtt), Some(t0 + pto + pto * 2));
        let (mut acked, mut rtt2) = (Vec::new(), rtt);
        with_ack(&[(0, 0)], |a| {
            r.on_ack(a, t0 + pto * 2, &mut rtt2, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(r.pto_count, 0);
        assert_eq!(r.timeout(&rtt2), None, "nothing in flight");
        assert!(lost.is_empty());
    }

    #[test]
    fn refuses_acks_of_unsent_packets_and_ignores_duplicates() {
        let t0 = Instant::now();
        let mut r = Recovery::new(ms(5));
        let mut rtt = RttEstimator::new(ms(100));
        r.on_sent(sent(0, t0));
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        with_ack(&[(0, 1)], |a| {
            assert_eq!(
                r.on_ack(a, t0, &mut rtt, &mut acked, &mut lost),
                Err(AckError::Unsent)
            )
        });
        with_ack(&[(0, 0)], |a| {
            r.on_ack(a, t0 + ms(10), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        with_ack(&[(0, 0)], |a| {
            r.on_ack(a, t0 + ms(30), &mut rtt, &mut acked, &mut lost)
                .unwrap()
        });
        assert_eq!(acked.len(), 1);
        assert_eq!(rtt.latest(), ms(10), "a duplicate ack takes no sample");
        assert_eq!(r.tracked(), 0);
    }
}
