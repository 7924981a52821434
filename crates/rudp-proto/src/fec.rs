//! Forward error correction's receive state, per connection: the recent
//! whole messages kept to use PARITY frames with, the parities waiting
//! for a second lost message, the REPAIRED reports to send, and their
//! bounds. What a connection does with them is in `connection::fec`.
//! Also the sender's judgement of whether its loss is high enough for
//! the redundancy levels' denser plans ([`LossWatch`]).

use std::collections::VecDeque;

/// Whole messages kept per connection to use parity with (the latest).
pub(crate) const FEC_KEEP: usize = 16;
/// Parities kept per connection that wait for one of two lost messages
/// they cover to be repaired by another (the latest).
pub(crate) const FEC_PENDING: usize = 4;
/// Bytes of kept messages and waiting parities per connection at most
/// (each also counted with [`FEC_ENTRY_OVERHEAD`]); a larger message is
/// not kept.
pub(crate) const FEC_MAX_BYTES: usize = 16 * 1024;
/// Bytes counted per kept message or parity besides its data.
pub(crate) const FEC_ENTRY_OVERHEAD: usize = 64;
/// Messages of a watched channel taken with no PARITY frame for it
/// arriving, after which a connection stops keeping that channel's
/// messages and lets their bytes go (other channels' parities do not
/// count): the sender has stopped sending it parity (on a clean link, once a new
/// connection's first packets are through). Four times the most messages
/// a parity covers ([`MAX_PARITY_SPAN`](crate::wire::MAX_PARITY_SPAN)); a
/// sender packing more messages than that between two parities covers
/// only the last few before each, in the parity's own packet, and the
/// parity watches its channel again before that packet's messages are
/// taken.
pub(crate) const FEC_QUIET: u32 = 4 * crate::wire::MAX_PARITY_SPAN as u32;
/// REPAIRED frames waiting to be sent per connection at most (the oldest
/// is dropped, and counted, past it: the sender then resends that
/// message).
pub(crate) const FEC_REPORTS: usize = 32;
/// Packets each REPAIRED frame rides in (four bytes each time, against a
/// resent message when the one packet carrying it is lost).
pub(crate) const REPORT_TIMES: u8 = 2;

/// Packets the slow loss average spans (its weight is 1/512 a packet once
/// that many were judged; before, a plain average of those judged).
const HIGH_AVERAGE: u32 = 512;
/// Packets judged before the loss can be judged high.
const HIGH_MIN_JUDGED: u32 = 64;
/// Standard errors the slow average must be above
/// [`crate::REDUNDANCY_HIGH_LOSS`] by.
const HIGH_ERRORS: f64 = 2.0;
/// [`crate::REDUNDANCY_HIGH_LOSS_END`] in units of 2^-16.
const HIGH_LEAVE: u32 = (crate::channel::REDUNDANCY_HIGH_LOSS_END * 65536.0) as u32;
/// The slow average below which the loss is no longer high:
/// [`crate::REDUNDANCY_HIGH_LOSS`] and 1 %, 14 % (it moves slowly: a link
/// whose first packets were unlucky leaves soon after it comes down).
const HIGH_LEAVE_SLOW: u32 = ((crate::channel::REDUNDANCY_HIGH_LOSS + 0.01) * 65536.0) as u32;

/// Whether a connection's packet loss is high: a slower average than the
/// one that turns redundancy on, judged high only once it is above
/// [`crate::REDUNDANCY_HIGH_LOSS`] by two standard errors (so a link at
/// 10 % loss almost never is, whatever luck its first packets had, while
/// one at 20 % is after 100 to 200 packets), and no longer with
/// hysteresis.
#[derive(Debug, Default, Clone)]
pub(crate) struct LossWatch {
    /// The average, in units of 2^-16.
    avg: u32,
    /// Packets judged, up to [`HIGH_AVERAGE`].
    judged: u32,
    high: bool,
}

impl LossWatch {
    /// An ack-eliciting packet was judged: `lost` or acknowledged;
    /// `fast`: the connection's loss average after it (over about 64
    /// packets, units of 2^-16).
    pub(crate) fn on_judged(&mut self, lost: bool, fast: u32) {
        if self.judged < HIGH_AVERAGE {
            self.judged += 1;
        }
        let sample: i64 = if lost { 1 << 16 } else { 0 };
        let avg = i64::from(self.avg);
        self.avg = (avg + (sample - avg) / i64::from(self.judged)) as u32;
        // High once the slow average m of n packets is above the bound b
        // by two standard errors, m - b >= 2 sqrt(m (1 - m) / n), and the
        // fast one at least the lower bound; no longer when the fast one
        // falls below that (the loss dropped: within a few dozen packets)
        // or the slow one below b + 1 %.
        if self.high {
            self.high = fast >= HIGH_LEAVE && self.avg >= HIGH_LEAVE_SLOW;
        } else if self.judged >= HIGH_MIN_JUDGED && fast >= HIGH_LEAVE {
            let m = f64::from(self.avg) / 65536.0;
            let above = m - crate::channel::REDUNDANCY_HIGH_LOSS;
            let n = f64::from(self.judged);
            self.high =
                above > 0.0 && above * above * n >= HIGH_ERRORS * HIGH_ERRORS * m * (1.0 - m);
        }
    }

    /// The loss is high: the levels' plans for high loss apply.
    pub(crate) fn high(&self) -> bool {
        self.high
    }
}

#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) channel: u8,
    pub(crate) seq: u64,
    pub(crate) data: Vec<u8>,
}

#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) channel: u8,
    pub(crate) first: u64,
    pub(crate) count: u8,
    pub(crate) len_xor: u32,
    pub(crate) data: Vec<u8>,
}

/// A connection's receive side of forward error correction, made when
/// the first PARITY frame arrives (a peer that sends none costs nothing).
#[derive(Debug, Default)]
pub(crate) struct FecRecv {
    /// Channels a parity came for (only their messages are kept).
    pub(crate) channels: [u64; 4],
    pub(crate) kept: VecDeque<Kept>,
    pub(crate) pending: VecDeque<Pending>,
    /// Bytes counted for `kept` and `pending` (with their overhead), also
    /// taken from the connection's receive memory.
    pub(crate) held: usize,
    /// Per watched channel, its messages taken since its last PARITY
    /// frame (see [`FEC_QUIET`]): one entry per channel in `channels`, so
    /// at most the connection's configured channels.
    pub(crate) quiet: Vec<(u8, u32)>,
    /// REPAIRED frames to send: `(channel, seq, times sent)`; each goes
    /// in [`REPORT_TIMES`] packets (a lost one costs the sender a resend).
    pub(crate) reports: VecDeque<(u8, u64, u8)>,
}

impl FecRecv {
    pub(crate) fn watches(&self, channel: u8) -> bool {
        self.channels[usize::from(channel / 64)] & (1 << (channel % 64)) != 0
    }

    /// A parity came for `channel`: its messages are kept, its quiet count
    /// starts over.
    pub(crate) fn watch(&mut self, channel: u8) {
        self.channels[usize::from(channel / 64)] |= 1 << (channel % 64);
        match self.quiet.iter_mut().find(|(c, _)| *c == channel) {
            Some((_, n)) => *n = 0,
            None => self.quiet.push((channel, 0)),
        }
    }

    /// One more message of watched `channel` without a parity; true once
    /// that makes more than [`FEC_QUIET`] (its sender stopped parity).
    pub(crate) fn quiet_after_one_more(&mut self, channel: u8) -> bool {
        match self.quiet.iter_mut().find(|(c, _)| *c == channel) {
            Some((_, n)) => {
                *n += 1;
                *n > FEC_QUIET
            }
            None => false,
        }
    }

    /// `channel` is no longer watched (its entries are the caller's to
    /// drop).
    pub(crate) fn forget_channel(&mut self, channel: u8) {
        self.channels[usize::from(channel / 64)] &= !(1 << (channel % 64));
        self.quiet.retain(|(c, _)| *c != channel);
    }

    /// Nothing kept, waiting or to report, no channel watched: the state
    /// can go.
    pub(crate) fn is_idle(&self) -> bool {
        self.channels == [0; 4]
            && self.kept.is_empty()
            && self.pending.is_empty()
            && self.reports.is_empty()
    }

    pub(crate) fn find(&self, channel: u8, seq: u64) -> Option<&Kept> {
        self.kept
            .iter()
            .find(|k| k.channel == channel && k.seq == seq)
    }

    /// Messages kept now (tests).
    #[cfg(test)]
    pub(crate) fn kept_len(&self) -> usize {
        self.kept.len()
    }

    /// Parities waiting now (tests).
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Bytes held now (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Judges `n` packets, one in `every` lost; true if the watch was
    /// high after each of the last `tail` of them.
    fn judge(w: &mut LossWatch, fast: &mut u32, n: u32, every: u32, tail: u32) -> bool {
        let mut high_all = true;
        for i in 0..n {
            let lost = i % every == every - 1;
            if lost {
                *fast += ((1 << 16) - *fast) / 64;
            } else {
                *fast -= *fast / 64;
            }
            w.on_judged(lost, *fast);
            if i >= n - tail {
                high_all &= w.high();
            }
        }
        high_all
    }

    #[test]
    fn high_loss_needs_enough_packets_and_both_averages() {
        // Every packet lost: not high before HIGH_MIN_JUDGED packets.
        let mut w = LossWatch::default();
        let mut fast = 1 << 12;
        for _ in 1..HIGH_MIN_JUDGED {
            fast += ((1 << 16) - fast) / 64;
            w.on_judged(true, fast);
            assert!(!w.high());
        }
        w.on_judged(true, fast);
        assert!(w.high(), "after {HIGH_MIN_JUDGED} packets");
        // The slow average high, the fast one low: not high.
        let mut w = LossWatch::default();
        for _ in 0..HIGH_MIN_JUDGED * 2 {
            w.on_judged(true, HIGH_LEAVE - 1);
        }
        assert!(!w.high());
    }

    #[test]
    fn high_loss_needs_the_average_above_the_bound_by_two_standard_errors() {
        // 1 in 6 lost (16.7 %): after 150 packets the average is 2.4 %
        // under the bound and two standard errors (6.1 %): not high; after
        // 600 (1.6 % each), high.
        let (mut w, mut fast) = (LossWatch::default(), 1 << 12);
        let mut ever = false;
        for _ in 0..25 {
            judge(&mut w, &mut fast, 6, 6, 6);
            ever |= w.high();
        }
        assert!(!ever, "not after 150 packets");
        assert!(judge(&mut w, &mut fast, 450, 6, 1), "after 600");
    }

    #[test]
    fn high_loss_is_judged_with_hysteresis() {
        let (mut w, mut fast) = (LossWatch::default(), 1 << 12);
        // 10 %: never high.
        let mut ever = false;
        for _ in 0..50 {
            judge(&mut w, &mut fast, 100, 10, 100);
            ever |= w.high();
        }
        assert!(!ever);
        // 20 %: high, and it stays.
        assert!(judge(&mut w, &mut fast, 3000, 5, 1000));
        // 1 in 7 (14 %), between the bounds: stays high.
        let (mut w14, mut fast14) = (w.clone(), fast);
        assert!(
            judge(&mut w14, &mut fast14, 3000, 7, 3000),
            "at 14 % it stays"
        );
        // 5 %: no longer.
        judge(&mut w, &mut fast, 3000, 20, 1);
        assert!(!w.high());
        // And at 14 % from there, not high again.
        let mut ever = false;
        for _ in 0..300 {
            judge(&mut w, &mut fast, 7, 7, 7);
            ever |= w.high();
        }
        assert!(!ever, "at 14 % it does not become high");
    }
}
