//! Forward error correction: PARITY frames out (the XOR of recent whole
//! messages of a channel, as its redundancy level plans), and in: the
//! recent messages kept to use them, the repair of a lost one, and the
//! REPAIRED frames that tell the sender it need not resend it.
//!
//! Everything a peer makes this end hold for repair is bounded (the
//! state and its bounds are in `crate::fec`): at most
//! [`FEC_KEEP`] messages and [`FEC_PENDING`] parities waiting for a second
//! lost message, together at most [`FEC_MAX_BYTES`] (also drawn from the
//! connection's receive memory and the endpoint's budget), and
//! [`FEC_REPORTS`] REPAIRED frames to send; and once
//! [`FEC_QUIET`](crate::fec::FEC_QUIET)
//! messages of a watched channel came without a parity for it, nothing of
//! that channel (the sender stopped sending it parity; keeping a copy of every message cost a
//! clean link's receiver about 5 % of its instructions a message). A parity spans at most
//! [`MAX_PARITY_SPAN`] messages, so using one costs at most that many
//! look-ups in [`FEC_KEEP`] entries and one pass over its bytes per
//! member; a repair retries the waiting parities at most [`FEC_PENDING`]
//! times (each retry that repairs consumes one).

use crate::channel::{ChunkState, Plan};
use crate::fec::{
    FecRecv, Kept, Pending, FEC_ENTRY_OVERHEAD, FEC_KEEP, FEC_MAX_BYTES, FEC_PENDING, FEC_REPORTS,
    REPORT_TIMES,
};
use crate::scratch;
use crate::wire::{parity_frame_len, Frame, Writer, MAX_PARITY_SPAN};

use super::input::Taken;
use super::Connection;

/// What a parity's members are at the receiver.
struct Census {
    missing: u32,
    /// The last missing one.
    target: u64,
    /// Members taken but no longer kept (their bytes are gone).
    unkept: u32,
}

/// What became of a parity frame.
enum Use {
    /// Nothing of it was lost (or what was is held elsewhere).
    Unneeded,
    /// A message was rebuilt.
    Repaired,
    /// Waits for one of its two or more lost messages.
    Waits,
    /// Of no use: a member's bytes are no longer kept, or the rebuilt
    /// message was not taken.
    Unusable,
    /// Contradicts itself or what was received: dropped as bogus.
    Invalid,
}

impl Connection {
    fn census(&self, f: &FecRecv, channel: u8, first: u64, count: u8) -> Census {
        let mut c = Census {
            missing: 0,
            target: 0,
            unkept: 0,
        };
        for seq in first..first + u64::from(count) {
            if f.find(channel, seq).is_some() {
                continue;
            }
            if self.recv[usize::from(channel)].has(seq) {
                c.unkept += 1;
            } else {
                c.missing += 1;
                c.target = seq;
            }
        }
        c
    }

    /// Takes `bytes` for a kept entry (evicting the oldest entries first
    /// until it fits under [`FEC_MAX_BYTES`]); false when it cannot be.
    fn fec_make_room(&mut self, f: &mut FecRecv, bytes: usize, parity: bool) -> bool {
        let cost = bytes + FEC_ENTRY_OVERHEAD;
        if cost > FEC_MAX_BYTES {
            return false;
        }
        loop {
            let over_count = if parity {
                f.pending.len() >= FEC_PENDING
            } else {
                f.kept.len() >= FEC_KEEP
            };
            if !over_count && f.held + cost <= FEC_MAX_BYTES {
                break;
            }
            // The oldest of the kind over its count, else (over the
            // bytes) the oldest kept message, then the oldest parity.
            let (data, was_parity) = if over_count && parity {
                (f.pending.pop_front().map(|p| p.data), true)
            } else if let Some(k) = f.kept.pop_front() {
                (Some(k.data), false)
            } else {
                (f.pending.pop_front().map(|p| p.data), true)
            };
            let Some(data) = data else { break };
            if was_parity {
                // A parity dropped unused.
                self.stats.parity_unusable += 1;
            }
            self.fec_forget(f, data.len());
            self.pool.give(data);
        }
        if self.recv_mem.take(cost, false).is_err() {
            self.stats.parity_unusable += 1;
            return false;
        }
        f.held += cost;
        true
    }

    fn fec_keep(&mut self, f: &mut FecRecv, channel: u8, seq: u64, data: &[u8]) {
        if !f.watches(channel) || f.find(channel, seq).is_some() {
            return;
        }
        if f.quiet_after_one_more(channel) {
            self.fec_unwatch(f, channel);
            return;
        }
        if !self.fec_make_room(f, data.len(), false) {
            return;
        }
        let mut buf = self.pool.take(data.len());
        buf.extend_from_slice(data);
        f.kept.push_back(Kept {
            channel,
            seq,
            data: buf,
        });
    }

    /// The sender stopped sending `channel` parity: the channel is no
    /// longer watched, and what was kept or waits for it goes (its bytes
    /// back to the receive memory and the pool; at most FEC_KEEP +
    /// FEC_PENDING entries looked at). REPAIRED reports still to send stay.
    fn fec_unwatch(&mut self, f: &mut FecRecv, channel: u8) {
        f.forget_channel(channel);
        let mut i = 0;
        while i < f.kept.len() {
            if f.kept[i].channel != channel {
                i += 1;
                continue;
            }
            if let Some(k) = f.kept.remove(i) {
                self.fec_forget(f, k.data.len());
                self.pool.give(k.data);
            }
        }
        let mut i = 0;
        while i < f.pending.len() {
            if f.pending[i].channel != channel {
                i += 1;
                continue;
            }
            if let Some(p) = f.pending.remove(i) {
                self.fec_forget(f, p.data.len());
                self.pool.give(p.data);
            }
        }
    }

    /// A kept message or waiting parity of `bytes` goes: what was counted
    /// for it, in `f` and in the receive memory, is given back.
    fn fec_forget(&mut self, f: &mut FecRecv, bytes: usize) {
        let n = bytes + FEC_ENTRY_OVERHEAD;
        f.held -= n;
        self.recv_mem.give(n);
    }

    /// Before a packet's frames are acted on: each channel a PARITY in it
    /// is for is watched from now on, so the messages the same packet
    /// carries are kept (a sender writes its parity after them).
    pub(super) fn fec_watch(&mut self, mut r: crate::wire::Reader<'_>) {
        while !r.is_empty() {
            let Ok(frame) = Frame::decode(&mut r) else {
                return;
            };
            if let Frame::Parity { channel, .. } = frame {
                if self.recv[usize::from(channel)].kind().is_reliable() {
                    self.fec.get_or_insert_with(Box::default).watch(channel);
                }
            }
        }
    }

    /// A whole message `seq` of `channel` was taken from a MESSAGE frame:
    /// kept for parity if one came for its channel, and the waiting
    /// parities tried again.
    pub(super) fn fec_on_message(&mut self, channel: u8, seq: u64, data: &[u8]) {
        let Some(mut f) = self.fec.take() else { return };
        self.fec_keep(&mut f, channel, seq, data);
        self.fec_retry(&mut f);
        // A connection whose sender no longer sends parity holds nothing.
        if !f.is_idle() {
            self.fec = Some(f);
        }
    }

    /// A PARITY frame of an authenticated, validated packet (`channel`
    /// exists; `payload` at most `max_message_size`).
    pub(super) fn on_parity(
        &mut self,
        channel: u8,
        first: u64,
        count: u8,
        len_xor: u32,
        payload: &[u8],
    ) {
        let mut f = self.fec.take().unwrap_or_default();
        if !self.recv[usize::from(channel)].kind().is_reliable() {
            self.stats.parity_unusable += 1;
        } else {
            f.watch(channel);
            match self.use_parity(&mut f, channel, first, count, len_xor, payload) {
                Use::Repaired => self.fec_retry(&mut f),
                Use::Waits => {
                    if self.fec_make_room(&mut f, payload.len(), true) {
                        let mut data = self.pool.take(payload.len());
                        data.extend_from_slice(payload);
                        f.pending.push_back(Pending {
                            channel,
                            first,
                            count,
                            len_xor,
                            data,
                        });
                    }
                }
                Use::Unneeded => {}
                Use::Unusable => self.stats.parity_unusable += 1,
                Use::Invalid => self.stats.parity_invalid += 1,
            }
        }
        self.fec = Some(f);
    }

    fn use_parity(
        &mut self,
        f: &mut FecRecv,
        channel: u8,
        first: u64,
        count: u8,
        len_xor: u32,
        payload: &[u8],
    ) -> Use {
        let c = self.census(f, channel, first, count);
        if c.missing == 0 {
            return Use::Unneeded;
        }
        if c.unkept > 0 {
            return Use::Unusable;
        }
        if c.missing > 1 {
            return Use::Waits;
        }
        // Rebuild: the payload XOR every other member, its length from
        // the lengths' XOR; the bytes past it must come out zero.
        let mut buf = scratch::take_bytes(payload.len());
        buf.truncate(payload.len());
        buf.copy_from_slice(payload);
        let mut len = len_xor;
        for seq in first..first + u64::from(count) {
            if seq == c.target {
                continue;
            }
            let Some(k) = f.find(channel, seq) else {
                scratch::give_bytes(buf);
                return Use::Unusable;
            };
            if k.data.len() > buf.len() {
                scratch::give_bytes(buf);
                return Use::Invalid;
            }
            for (b, x) in buf.iter_mut().zip(&k.data) {
                *b ^= x;
            }
            len ^= k.data.len() as u32;
        }
        let len = len as usize;
        if len > buf.len() || len > self.cfg.max_message_size || buf[len..].iter().any(|&b| b != 0)
        {
            scratch::give_bytes(buf);
            return Use::Invalid;
        }
        let taken = self.on_message(channel, c.target, len as u32, 0, &buf[..len]);
        let out = match taken {
            Taken::Yes => {
                self.stats.repaired_by_parity += 1;
                if f.reports.len() >= FEC_REPORTS {
                    f.reports.pop_front();
                    self.stats.repairs_unreported += 1;
                }
                f.reports.push_back((channel, c.target, 0));
                let data = &buf[..len];
                self.fec_keep(f, channel, c.target, data);
                Use::Repaired
            }
            Taken::Refused => Use::Unusable,
            Taken::Invalid => Use::Invalid,
        };
        scratch::give_bytes(buf);
        out
    }

    /// Tries the waiting parities again after a message was kept: each
    /// one that repairs (or is no longer needed) is removed, so this runs
    /// at most [`FEC_PENDING`] rounds.
    fn fec_retry(&mut self, f: &mut FecRecv) {
        for _ in 0..FEC_PENDING {
            let mut ready = None;
            for (i, p) in f.pending.iter().enumerate() {
                let c = self.census(f, p.channel, p.first, p.count);
                if c.missing <= 1 || c.unkept > 0 {
                    ready = Some(i);
                    break;
                }
            }
            let Some(i) = ready else { return };
            let Some(p) = f.pending.remove(i) else { return };
            self.fec_forget(f, p.data.len());
            match self.use_parity(f, p.channel, p.first, p.count, p.len_xor, &p.data) {
                Use::Unusable => self.stats.parity_unusable += 1,
                Use::Invalid => self.stats.parity_invalid += 1,
                Use::Repaired | Use::Unneeded | Use::Waits => {}
            }
            self.pool.give(p.data);
        }
    }

    /// Writes the REPAIRED frames waiting that fit; returns how many (to
    /// count with [`Connection::drop_reported`] once the packet is sent).
    pub(super) fn write_repaired(&mut self, w: &mut Writer<'_>) -> usize {
        let Some(f) = &self.fec else { return 0 };
        let mut n = 0;
        for &(channel, seq, _) in &f.reports {
            if (Frame::Repaired { channel, seq }).encode(w).is_err() {
                break;
            }
            n += 1;
        }
        n
    }

    /// The first `n` REPAIRED frames went out (once more): those sent
    /// [`REPORT_TIMES`] are done.
    pub(super) fn drop_reported(&mut self, n: usize) {
        if let Some(f) = &mut self.fec {
            for r in f.reports.iter_mut().take(n) {
                r.2 += 1;
            }
            while f.reports.front().is_some_and(|r| r.2 >= REPORT_TIMES) {
                f.reports.pop_front();
            }
            if f.is_idle() {
                self.fec = None;
            }
        }
    }

    /// A REPAIRED frame from the peer: the message is taken as
    /// acknowledged.
    pub(super) fn on_repaired(&mut self, channel: u8, seq: u64) {
        let Some(ch) = self.send.get_mut(usize::from(channel)) else {
            return;
        };
        if !ch.cfg.kind.is_reliable() {
            return;
        }
        let Some(m) = ch.msg_mut(seq) else { return };
        if m.chunks.len() != 1 || m.chunks[0].state == ChunkState::Acked {
            return;
        }
        let mut free = scratch::take_msgs();
        ch.on_acked(seq, 0, &mut free);
        scratch::give_msgs(free);
        self.stats.repairs_acked += 1;
        self.recount_send_buffered();
    }

    /// The parities a packet carrying new messages gets: for each channel
    /// in `newest` (with its newest whole message `n` sent first in this
    /// packet) and each `(span, interval)` of its plan with
    /// `n % interval == 0`, the XOR of the messages of `n - span .. n`
    /// still held, sent before and not in this packet (the longest such
    /// run below `n`).
    pub(super) fn write_parities(
        &mut self,
        pn: u64,
        w: &mut Writer<'_>,
        newest: &[crate::recovery::ChunkRef],
    ) {
        let high = self.loss_watch.high();
        for r in newest {
            let ch = &mut self.send[usize::from(r.channel)];
            let (span, interval) = Plan::of(ch.cfg.redundancy, high).parity;
            {
                if span == 0 || r.seq % u64::from(interval) != 0 {
                    continue;
                }
                let span = span.min(MAX_PARITY_SPAN);
                let lo_bound = r.seq.saturating_sub(u64::from(span));
                let eligible = |ch: &mut crate::channel::SendChannel, seq: u64| {
                    ch.msg_mut(seq).is_some_and(|m| {
                        m.chunks.len() == 1
                            && !matches!(m.chunks[0].state, ChunkState::Unsent | ChunkState::Acked)
                            && m.chunks[0].state != ChunkState::Sent { last_pn: pn }
                    })
                };
                let mut hi = r.seq;
                while hi > lo_bound && !eligible(ch, hi - 1) {
                    hi -= 1;
                }
                let mut lo = hi;
                while lo > lo_bound && eligible(ch, lo - 1) {
                    lo -= 1;
                }
                if lo == hi {
                    continue;
                }
                let mut len = 0;
                let mut len_xor = 0u32;
                for seq in lo..hi {
                    if let Some(m) = ch.msg_mut(seq) {
                        len = len.max(m.data.len());
                        len_xor ^= m.data.len() as u32;
                    }
                }
                if parity_frame_len(lo, len_xor, len) > w.remaining() {
                    continue;
                }
                let mut buf = scratch::take_bytes(len);
                buf.truncate(len);
                buf.fill(0);
                for seq in lo..hi {
                    if let Some(m) = ch.msg_mut(seq) {
                        for (b, x) in buf.iter_mut().zip(&m.data) {
                            *b ^= x;
                        }
                    }
                }
                let frame = Frame::Parity {
                    channel: r.channel,
                    first: lo,
                    count: (hi - lo) as u8,
                    len_xor,
                    payload: &buf,
                };
                if frame.encode(w).is_ok() {
                    self.stats.parity_sent += 1;
                }
                scratch::give_bytes(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::packets::{feeder, msg, packet, receiver};
    use crate::fec::FEC_QUIET;
    use crate::wire::{Header, Reader};

    fn parity(first: u64, count: u8, len_xor: u32, payload: &[u8]) -> Frame<'_> {
        Frame::Parity {
            channel: 0,
            first,
            count,
            len_xor,
            payload,
        }
    }

    fn fec(c: &Connection) -> &FecRecv {
        c.fec.as_deref().expect("a parity came")
    }

    #[test]
    fn kept_messages_are_bounded_in_count_and_bytes() {
        let (mut c, now) = receiver();
        let mut next = feeder(now);
        // A parity that is not needed turns keeping on for channel 0, and
        // one every eighth packet keeps it on.
        next(&[msg(0, &[1; 10]), parity(0, 1, 10, &[1; 10])], &mut c);
        for seq in 1..200u64 {
            let m = [seq as u8; 400];
            if seq % 8 == 0 {
                next(&[msg(seq, &m), parity(seq, 1, 400, &m)], &mut c);
            } else {
                next(&[msg(seq, &m)], &mut c);
            }
            let f = fec(&c);
            assert!(f.kept_len() <= FEC_KEEP, "{} kept", f.kept_len());
        }
        assert_eq!(fec(&c).kept_len(), FEC_KEEP);
        // Larger messages: the bytes bound holds first.
        for seq in 200..260u64 {
            let m = [3; 1100];
            if seq % 8 == 0 {
                next(&[msg(seq, &m), parity(seq, 1, 1100, &m)], &mut c);
            } else {
                next(&[msg(seq, &m)], &mut c);
            }
            assert!(fec(&c).held() <= FEC_MAX_BYTES, "{} bytes", fec(&c).held());
        }
        assert!(fec(&c).kept_len() < FEC_KEEP);
        // What is kept is counted in the connection's receive memory too.
        assert!(c.recv_buffered() >= fec(&c).held());
        assert_eq!(c.stats().messages_delivered, 260);
    }

    #[test]
    fn a_sender_that_stops_sending_parity_is_no_longer_kept_for() {
        let (mut c, now) = receiver();
        let mut next = feeder(now);
        next(&[msg(0, &[1; 400]), parity(0, 1, 400, &[1; 400])], &mut c);
        // Up to FEC_QUIET messages after the last parity are kept...
        for seq in 1..=u64::from(FEC_QUIET) {
            next(&[msg(seq, &[2; 400])], &mut c);
            assert_eq!(fec(&c).kept_len(), FEC_KEEP.min(seq as usize + 1));
        }
        assert!(c.recv_buffered() >= FEC_KEEP * 400);
        // ...the next lets everything go: no state, its bytes given back.
        let seq = u64::from(FEC_QUIET) + 1;
        next(&[msg(seq, &[2; 400])], &mut c);
        assert!(c.fec.is_none(), "the receive side of parity is dropped");
        assert_eq!(c.recv_buffered(), 0);
        for seq in seq + 1..seq + 100 {
            next(&[msg(seq, &[2; 400])], &mut c);
            assert!(c.fec.is_none());
        }
        // A parity again: its channel is watched, from its own packet on.
        let seq = seq + 100;
        next(
            &[msg(seq, &[4; 400]), parity(seq, 1, 400, &[4; 400])],
            &mut c,
        );
        assert_eq!(fec(&c).kept_len(), 1);
        assert_eq!(c.stats().messages_delivered, seq + 1);
    }

    #[test]
    fn messages_of_unwatched_channels_do_not_end_the_watch() {
        let (mut c, now) = receiver();
        c.handle_datagram(
            now,
            &packet(0, &[msg(0, &[1; 10]), parity(0, 1, 10, &[1; 10])]),
        );
        // Channel 1 (unreliable, never sent parity for) is busy...
        for i in 1..=4 * u64::from(FEC_QUIET) {
            let m = Frame::Message {
                channel: 1,
                seq: i,
                payload: &[5; 20],
            };
            c.handle_datagram(now, &packet(i, &[m]));
        }
        // ...and channel 0 is still watched: its next message is kept.
        let pn = 4 * u64::from(FEC_QUIET) + 1;
        c.handle_datagram(now, &packet(pn, &[msg(1, &[6; 10])]));
        assert_eq!(fec(&c).kept_len(), 2);
    }

    /// Channel 2's sender stops parity while channel 0's goes on: channel
    /// 2's copies go after FEC_QUIET of its messages, channel 0's stay.
    #[test]
    fn a_channel_whose_parity_stopped_is_let_go_while_another_keeps_it() {
        let (mut c, now) = receiver();
        let mut next = feeder(now);
        let on2 = |seq, payload| Frame::Message {
            channel: 2,
            seq,
            payload,
        };
        let parity2 = |first| Frame::Parity {
            channel: 2,
            first,
            count: 1,
            len_xor: 10,
            payload: &[3; 10],
        };
        next(&[on2(0, &[3; 10]), parity2(0)], &mut c);
        let of = |c: &Connection, ch| fec(c).kept.iter().filter(|k| k.channel == ch).count();
        for seq in 0..=u64::from(FEC_QUIET) {
            // Channel 0 with a parity in every packet, channel 2 without.
            next(
                &[
                    msg(seq, &[1; 10]),
                    parity(seq, 1, 10, &[1; 10]),
                    on2(seq + 1, &[2; 10]),
                ],
                &mut c,
            );
        }
        assert!(fec(&c).watches(0));
        assert!(!fec(&c).watches(2), "channel 2 still watched");
        assert_eq!(of(&c, 2), 0, "channel 2's copies kept");
        assert!(of(&c, 0) > 0);
        // Its messages are no longer kept...
        next(&[on2(u64::from(FEC_QUIET) + 2, &[2; 10])], &mut c);
        assert_eq!(of(&c, 2), 0);
        // ...until its next parity.
        let seq = u64::from(FEC_QUIET) + 3;
        next(&[on2(seq, &[3; 10]), parity2(seq)], &mut c);
        assert_eq!(of(&c, 2), 1);
        assert_eq!(c.stats().messages_delivered, 2 * u64::from(FEC_QUIET) + 5);
    }

    #[test]
    fn waiting_parities_are_bounded() {
        let (mut c, now) = receiver();
        // Parities over pairs of messages never sent: each waits for a
        // second loss to be repaired, at most FEC_PENDING of them.
        for i in 0..50u64 {
            let p = packet(i, &[parity(1000 + 10 * i, 2, 0, &[9; 400])]);
            c.handle_datagram(now, &p);
            assert!(fec(&c).pending_len() <= FEC_PENDING);
        }
        assert_eq!(fec(&c).pending_len(), FEC_PENDING);
        assert!(fec(&c).held() <= FEC_MAX_BYTES);
        // Every parity dropped unused is counted.
        assert_eq!(c.stats().parity_unusable, 50 - FEC_PENDING as u64);
        assert_eq!(c.stats().malformed_packets, 0);
    }

    #[test]
    fn a_parity_spans_at_most_max_parity_span_messages() {
        let (mut c, now) = receiver();
        // A count past the span is malformed: the packet is dropped whole,
        // counted, before anything of it is used.
        let mut p = packet(0, &[msg(0, b"x")]);
        p.extend_from_slice(&[0x09, 0, 0, MAX_PARITY_SPAN + 1, 0, 1, 0]);
        c.handle_datagram(now, &p);
        let s = c.stats();
        assert_eq!((s.malformed_packets, s.messages_delivered), (1, 0));
        // At the span it is taken.
        let payload = [0u8; 1];
        let p = packet(1, &[parity(0, MAX_PARITY_SPAN, 0, &payload)]);
        c.handle_datagram(now, &p);
        assert_eq!(c.stats().malformed_packets, 1);
    }

    #[test]
    fn repair_reports_are_bounded() {
        let (mut c, now) = receiver();
        let mut pn = 0;
        c.handle_datagram(now, &packet(pn, &[msg(0, &[]), parity(0, 1, 0, &[])]));
        // Message 2k + 1 arrives, 2k + 2 does not; the parity of the pair
        // rebuilds it. Nothing is sent in between, so the REPAIRED
        // reports pile up: at most FEC_REPORTS, the rest counted.
        for k in 0..40u64 {
            pn += 1;
            let a = [k as u8; 300];
            let b = [k as u8 ^ 0x5a; 200];
            let mut x = a;
            for (i, v) in b.iter().enumerate() {
                x[i] ^= v;
            }
            let p = packet(
                pn,
                &[msg(2 * k + 1, &a), parity(2 * k + 1, 2, 300 ^ 200, &x)],
            );
            c.handle_datagram(now, &p);
        }
        let s = c.stats();
        assert_eq!(s.repaired_by_parity, 40);
        assert_eq!(s.messages_delivered, 81);
        assert_eq!(fec(&c).reports.len(), FEC_REPORTS);
        assert_eq!(s.repairs_unreported, 40 - FEC_REPORTS as u64);
        let mut got = Vec::new();
        while let Some(e) = c.poll_event() {
            if let crate::connection::Event::Message { data, .. } = e {
                got.push(data);
            }
        }
        assert_eq!(got[2], vec![0x5a; 200], "the rebuilt message, its length");
        // The next packet out carries the reports that fit, and they go.
        let mut buf = [0u8; 1500];
        let n = c.poll_transmit(now, &mut buf).expect("an ACK is due");
        let mut r = Reader::new(&buf[..n]);
        Header::decode(&mut r).unwrap();
        let mut repaired = 0;
        while !r.is_empty() {
            if let Frame::Repaired { channel: 0, seq } = Frame::decode(&mut r).unwrap() {
                assert_eq!(seq % 2, 0);
                repaired += 1;
            }
        }
        assert_eq!(repaired, FEC_REPORTS);
        // Each rides in a second packet too, then goes.
        assert_eq!(fec(&c).reports.len(), FEC_REPORTS);
        c.handle_datagram(now, &packet(pn + 1, &[Frame::Ping]));
        let later = now + std::time::Duration::from_millis(200);
        c.poll_transmit(later, &mut buf).expect("an ACK is due");
        assert!(fec(&c).reports.is_empty());
    }

    #[test]
    fn bogus_parities_are_counted_and_never_used() {
        let (mut c, now) = receiver();
        c.handle_datagram(now, &packet(0, &[msg(0, &[1; 100]), parity(0, 1, 0, &[])]));
        c.handle_datagram(now, &packet(1, &[msg(1, &[1; 100])]));
        let cases: [(u32, &[u8]); 4] = [
            // The rebuilt length past the payload.
            (100 ^ 300, &[0; 100]),
            // Bytes past the rebuilt length not zero.
            (100 ^ 50, &[0xff; 100]),
            // A covered message longer than the payload.
            (100 ^ 10, &[0; 10]),
            // The length past max_message_size (and the payload).
            (100 ^ u32::MAX, &[0; 100]),
        ];
        for (i, (len_xor, payload)) in cases.iter().enumerate() {
            let p = packet(2 + i as u64, &[parity(1, 2, *len_xor, payload)]);
            c.handle_datagram(now, &p);
            assert_eq!(c.stats().parity_invalid, i as u64 + 1, "case {i}");
        }
        let s = c.stats();
        assert_eq!((s.repaired_by_parity, s.messages_delivered), (0, 2));
        // A parity for an unreliable channel is of no use; for a channel
        // not configured, the packet is malformed.
        let un = Frame::Parity {
            channel: 1,
            first: 0,
            count: 2,
            len_xor: 0,
            payload: &[0; 4],
        };
        c.handle_datagram(now, &packet(10, &[un]));
        assert_eq!(c.stats().parity_unusable, 1);
        let bad = Frame::Parity {
            channel: 9,
            first: 0,
            count: 2,
            len_xor: 0,
            payload: &[0; 4],
        };
        c.handle_datagram(now, &packet(11, &[bad]));
        assert_eq!(c.stats().malformed_packets, 1);
    }

    #[test]
    fn arbitrary_parities_never_panic() {
        // Seeded: parities of every shape over a channel that got some
        // messages, lost others, or holds them back.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut c, now) = receiver();
        let mut payload = vec![0u8; 2000];
        for pn in 0..3000u64 {
            let seq = rnd(64);
            let len = rnd(600) as usize;
            for b in payload.iter_mut().take(len) {
                *b = rnd(4) as u8;
            }
            let p = if rnd(3) == 0 {
                packet(pn, &[msg(seq, &payload[..len])])
            } else {
                let count = 1 + rnd(u64::from(MAX_PARITY_SPAN)) as u8;
                let len_xor = rnd(1024) as u32;
                packet(pn, &[parity(seq, count, len_xor, &payload[..len])])
            };
            c.handle_datagram(now, &p);
            if let Some(f) = c.fec.as_deref() {
                assert!(f.kept_len() <= FEC_KEEP && f.pending_len() <= FEC_PENDING);
                assert!(f.held() <= FEC_MAX_BYTES);
            }
        }
        let s = c.stats();
        assert_eq!(s.malformed_packets, 0);
        assert!(s.parity_invalid > 0 && s.parity_unusable > 0, "{s:?}");
    }
}
