//! The receive path: a datagram's header and frames, acknowledgements,
//! messages to their channels, and the handshake packets.

use std::time::{Duration, Instant};

use crate::budget::Refusal;
use crate::cc::LossVerdict;
use crate::channel::{RecvCtx, RecvOutcome};
use crate::recovery::SentPacket;
use crate::scratch;
use crate::wire::{
    decode_packet_number, ConnectionId, DecodeError, Frame, Header, LongType, Reader,
    MAX_COOKIE_LEN,
};

use super::types::{DisconnectReason, Event, Side, State};
use super::Connection;
use crate::security::PacketCrypto;

/// Frames of a packet its validation pass keeps for acting on, so each is
/// decoded once: most packets carry a few (an ACK, a message or two, a
/// parity). Frames past the first [`KEPT_FRAMES`] are decoded again.
const KEPT_FRAMES: usize = 6;

/// A validated packet's frames, in order: the kept ones, then the rest
/// decoded from the packet.
struct PacketFrames<'a> {
    kept: [Frame<'a>; KEPT_FRAMES],
    len: usize,
    next: usize,
    /// The packet after the last kept frame.
    rest: Reader<'a>,
}

impl<'a> PacketFrames<'a> {
    fn new(packet: Reader<'a>) -> Self {
        PacketFrames {
            kept: [Frame::Ping; KEPT_FRAMES],
            len: 0,
            next: 0,
            rest: packet,
        }
    }

    /// `frame` was decoded; `after` is the packet after it.
    fn keep(&mut self, frame: Frame<'a>, after: &Reader<'a>) {
        if self.len < KEPT_FRAMES {
            self.kept[self.len] = frame;
            self.len += 1;
            self.rest = after.clone();
        }
    }

    fn next(&mut self) -> Option<Frame<'a>> {
        if self.next < self.len {
            self.next += 1;
            return Some(self.kept[self.next - 1]);
        }
        if self.rest.is_empty() {
            return None;
        }
        // Validated already: an error here cannot happen, and would end
        // the packet as a truncated one did before.
        Frame::decode(&mut self.rest).ok()
    }
}

impl Connection {
    /// Processes one datagram from the peer. Malformed input is counted in
    /// [`Stats::malformed_packets`](super::Stats::malformed_packets) and otherwise ignored.
    pub fn handle_datagram(&mut self, now: Instant, data: &[u8]) {
        self.now_hint = now;
        self.stats.bytes_received += data.len() as u64;
        if self.state == State::Closed {
            self.stats.dropped_packets += 1;
            return;
        }
        if let Err(e) = self.process(now, data) {
            match e {
                Drop::Malformed(_) => self.stats.malformed_packets += 1,
                Drop::Unexpected => self.stats.dropped_packets += 1,
            }
        }
        self.after_input();
    }

    fn process(&mut self, now: Instant, data: &[u8]) -> Result<(), Drop> {
        let mut r = Reader::new(data);
        match Header::decode(&mut r)? {
            Header::Long { ty, cid } => self.on_long(now, ty, cid, r),
            Header::Short { cid, pn, pn_len } => {
                if self.state == State::Handshaking || cid != self.cid {
                    return Err(Drop::Unexpected);
                }
                let Some(crypto) = &self.crypto else {
                    return self.on_short_packet(now, pn, pn_len, r);
                };
                // Sealed: the replay window first (cheap), then the tag;
                // nothing of a packet is acted on before both pass.
                let full = decode_packet_number(self.received.largest(), pn, pn_len);
                if !crypto.window.is_new(full) {
                    self.stats.replayed_packets += 1;
                    return Ok(());
                }
                let mut buf = scratch::take_bytes(
                    self.cfg.max_datagram_size.max(crate::wire::MIN_HELLO_SIZE),
                );
                let res = match crypto.open(full, data, 1 + 8 + pn_len, &mut buf) {
                    None => {
                        self.stats.auth_failures += 1;
                        Ok(())
                    }
                    Some(n) => {
                        if let Some(c) = self.crypto.as_mut() {
                            c.window.mark(full);
                        }
                        self.on_short_packet(now, pn, pn_len, Reader::new(&buf[..n]))
                    }
                };
                scratch::give_bytes(buf);
                res
            }
        }
    }

    fn on_short_packet(
        &mut self,
        now: Instant,
        pn: u64,
        pn_len: usize,
        r: Reader<'_>,
    ) -> Result<(), Drop> {
        {
            {
                // Validate every frame before acting on any.
                let mut check = r.clone();
                let mut parity = false;
                let mut frames = PacketFrames::new(r.clone());
                while !check.is_empty() {
                    let frame = Frame::decode(&mut check)?;
                    frames.keep(frame, &check);
                    match frame {
                        Frame::Hello { .. } | Frame::Retry { .. } | Frame::Accept { .. } => {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "handshake frame in a short packet",
                            )));
                        }
                        Frame::Ack(a) if a.largest >= self.recovery.next_pn() => {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "ack of a packet never sent",
                            )));
                        }
                        Frame::Message {
                            channel, payload, ..
                        } if channel as usize >= self.recv.len()
                            || payload.len() > self.cfg.max_message_size =>
                        {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "message channel or length",
                            )));
                        }
                        Frame::Fragment { channel, total, .. }
                            if channel as usize >= self.recv.len()
                                || total as usize > self.cfg.max_message_size =>
                        {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "fragment channel or total length",
                            )));
                        }
                        Frame::Parity {
                            channel, payload, ..
                        } if channel as usize >= self.recv.len()
                            || payload.len() > self.cfg.max_message_size =>
                        {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "parity channel or length",
                            )));
                        }
                        Frame::Parity { .. } => parity = true,
                        Frame::Repaired { channel, .. } if channel as usize >= self.send.len() => {
                            return Err(Drop::Malformed(DecodeError::Invalid("repaired channel")));
                        }
                        _ => {}
                    }
                }
                let pn = decode_packet_number(self.received.largest(), pn, pn_len);
                if self.received.contains(pn) {
                    self.stats.duplicate_packets += 1;
                    return Ok(());
                }
                if parity {
                    self.fec_watch(r.clone());
                }
                self.last_recv = now;
                if self.state == State::Draining
                    || (self.state == State::Closing && self.end.as_ref().is_some_and(|e| e.phase))
                {
                    // Only a CLOSE (to acknowledge) and ACKs count now.
                    self.on_packet_at_end(now, pn, r);
                    return Ok(());
                }
                self.on_short(now, pn, frames);
                Ok(())
            }
        }
    }

    fn on_short(&mut self, now: Instant, pn: u64, mut frames: PacketFrames<'_>) {
        let mut eliciting = false;
        let mut ping = false;
        let mut refuse = false;
        let mut invalid = false;
        while let Some(frame) = frames.next() {
            match frame {
                Frame::Padding { .. } => {}
                Frame::Ping => {
                    eliciting = true;
                    ping = true;
                }
                Frame::Ack(a) => self.on_ack_frame(now, &a),
                Frame::Message {
                    channel,
                    seq,
                    payload,
                } => {
                    eliciting = true;
                    match self.on_message(channel, seq, payload.len() as u32, 0, payload) {
                        Taken::Yes => self.fec_on_message(channel, seq, payload),
                        Taken::Refused => refuse = true,
                        Taken::Invalid => invalid = true,
                    }
                }
                Frame::Parity {
                    channel,
                    first,
                    count,
                    len_xor,
                    payload,
                } => {
                    eliciting = true;
                    self.on_parity(channel, first, count, len_xor, payload);
                }
                Frame::Repaired { channel, seq } => self.on_repaired(channel, seq),
                Frame::Fragment {
                    channel,
                    seq,
                    total,
                    offset,
                    payload,
                } => {
                    eliciting = true;
                    match self.on_message(channel, seq, total, offset, payload) {
                        Taken::Yes => {}
                        Taken::Refused => refuse = true,
                        Taken::Invalid => invalid = true,
                    }
                }
                Frame::Close { code, reason } => self.on_peer_close(now, code, reason),
                Frame::Hello { .. } | Frame::Retry { .. } | Frame::Accept { .. } => {}
            }
        }
        if invalid {
            // Contradicts what came before (a message's total changed):
            // counted once, as malformed, and not acknowledged.
            self.stats.malformed_packets += 1;
            return;
        }
        self.stats.packets_received += 1;
        if refuse {
            self.stats.refused_packets += 1;
            return;
        }
        let prev = self.received.largest();
        self.received.insert(pn);
        if prev.is_none_or(|l| pn > l) {
            self.largest_recv_time = Some(now);
        }
        if eliciting {
            if self.ack_eliciting_unacked == 0 {
                self.first_unacked_at = Some(now);
            }
            self.ack_eliciting_unacked += 1;
            // Out of order (a loss), or a PING (a probe, whose answer the
            // peer's loss recovery waits for, or a keepalive, which has no
            // packet to ride on): acknowledged at once, whatever the ack
            // policy would wait for.
            if ping || prev.map_or(pn != 0, |l| pn != l + 1) {
                self.ack_immediate = true;
            }
        }
    }

    /// What became of a message frame, for its packet.
    pub(super) fn on_message(
        &mut self,
        channel: u8,
        seq: u64,
        total: u32,
        offset: u32,
        payload: &[u8],
    ) -> Taken {
        let events = &mut self.events;
        let delivered = &mut self.stats.messages_delivered;
        let mut deliver = |data: Vec<u8>| {
            *delivered += 1;
            events.push_back(Event::Message { channel, data });
        };
        let mut cx = RecvCtx {
            pool: &mut self.pool,
            mem: &mut self.recv_mem,
            deliver: &mut deliver,
        };
        match self.recv[channel as usize].on_frame(seq, total, offset, payload, &mut cx) {
            RecvOutcome::Accepted => Taken::Yes,
            RecvOutcome::Duplicate => {
                self.stats.duplicate_messages += 1;
                Taken::Yes
            }
            RecvOutcome::Stale => {
                self.stats.stale_messages += 1;
                Taken::Yes
            }
            RecvOutcome::Refused(why) => {
                match why {
                    Refusal::Budget => self.stats.budget_refused += 1,
                    Refusal::Window => self.stats.window_refused += 1,
                    Refusal::Cap | Refusal::Small => {}
                }
                Taken::Refused
            }
            RecvOutcome::Invalid => Taken::Invalid,
        }
    }

    pub(super) fn on_ack_frame(&mut self, now: Instant, a: &crate::wire::AckFrame<'_>) {
        let mut acked = scratch::take_packets();
        let mut lost = scratch::take_packets();
        let spurious = self.recovery.spurious_losses;
        if self
            .recovery
            .on_ack(a, now, &mut self.rtt, &mut acked, &mut lost)
            .is_ok()
        {
            self.cc
                .on_spurious(self.recovery.spurious_losses.saturating_sub(spurious));
            // Losses this ACK declared are numbered above all declared
            // before; the reduction to undo counts only those before.
            self.undo_if_spurious(lost.first().map_or(u64::MAX, |p| p.pn));
            let sampled = !acked.is_empty();
            let mut free = crate::scratch::take_msgs();
            for mut p in acked.drain(..) {
                if p.ack_eliciting {
                    self.stats.packets_acked += 1;
                    self.loss_avg -= self.loss_avg / super::LOSS_AVERAGE;
                    self.loss_watch.on_judged(false, self.loss_avg);
                    self.cc.on_ack(now, p.time_sent, p.size);
                    // The peer acknowledges: the ack timeout starts over.
                    self.unacked_since = None;
                }
                if let Some(f) = p.ack_floor_after {
                    self.ack_floor = self.ack_floor.max(f);
                }
                for c in &p.chunks {
                    if self.send[c.channel as usize].on_acked(c.seq, c.chunk, &mut free) {
                        self.stats.recovered_by_redundancy += 1;
                    }
                }
                p.chunks.clear();
                self.chunk_pool.push(std::mem::take(&mut p.chunks));
            }
            crate::scratch::give_msgs(free);
            self.recount_send_buffered();
            if sampled {
                self.cc.on_rtt_sample(self.rtt.latest());
            }
        }
        self.on_lost(now, &mut lost);
        scratch::give_packets(acked);
        scratch::give_packets(lost);
    }

    /// Undoes the latest window reduction if every packet declared lost
    /// from its start (below `until`) was acknowledged after all.
    fn undo_if_spurious(&mut self, until: u64) {
        if let Some(from) = self.cc.undo_from() {
            if !self.recovery.lost_unacked_in(from, until) && self.cc.undo() {
                self.stats.congestion_undos += 1;
            }
        }
    }

    pub(super) fn on_lost(&mut self, now: Instant, lost: &mut Vec<SentPacket>) {
        for mut p in lost.drain(..) {
            if p.ack_eliciting {
                self.stats.packets_lost += 1;
                self.loss_avg += ((1 << 16) - self.loss_avg) / super::LOSS_AVERAGE;
                self.loss_watch.on_judged(true, self.loss_avg);
                if self.cc.on_lost(p.pn, p.time_sent, now, &self.rtt) == LossVerdict::Random {
                    self.stats.random_losses += 1;
                }
            }
            for c in &p.chunks {
                if self.send[c.channel as usize].on_lost(c.seq, c.chunk, p.pn, c.first) {
                    self.stats.recovered_by_redundancy += 1;
                }
            }
            p.chunks.clear();
            self.chunk_pool.push(std::mem::take(&mut p.chunks));
        }
    }

    fn on_long(
        &mut self,
        now: Instant,
        ty: LongType,
        cid: ConnectionId,
        mut r: Reader<'_>,
    ) -> Result<(), Drop> {
        if self.side != Side::Client || self.state != State::Handshaking {
            return Err(Drop::Unexpected);
        }
        let first = Frame::decode(&mut r)?;
        match (ty, first) {
            (LongType::Retry, Frame::Retry { nonce, cookie }) if nonce == self.nonce => {
                let Some(hs) = self.hs.as_mut() else {
                    return Err(Drop::Unexpected);
                };
                hs.cookie.clear();
                hs.cookie
                    .extend_from_slice(&cookie[..cookie.len().min(MAX_COOKIE_LEN)]);
                // Answer at once; the RETRY shows the path works, so the
                // backoff starts over.
                hs.hello_next = now;
                hs.hello_interval = self.cfg.initial_rtt;
                Ok(())
            }
            (
                LongType::Accept,
                Frame::Accept {
                    nonce,
                    max_ack_delay_us,
                },
            ) if nonce == self.nonce => {
                self.cid = cid;
                self.set_peer_max_ack_delay(Duration::from_micros(max_ack_delay_us));
                // The handshake's state ends here (its keys become the
                // packet AEAD's).
                if let Some(keys) = self.hs.take().and_then(|h| h.keys) {
                    self.crypto = Some(Box::new(PacketCrypto::new(&keys, true, &self.nonce, cid)));
                }
                self.state = State::Connected;
                self.last_recv = now;
                self.last_eliciting_sent = now;
                self.events.push_back(Event::Connected);
                Ok(())
            }
            (LongType::Refuse, Frame::Accept { nonce, .. }) if nonce == self.nonce => {
                let Frame::Close { code, reason } = Frame::decode(&mut r)? else {
                    return Err(Drop::Malformed(DecodeError::Invalid(
                        "refuse without close",
                    )));
                };
                self.state = State::Closed;
                self.hs = None;
                let reason = String::from_utf8_lossy(reason).into_owned();
                self.events
                    .push_back(Event::Disconnected(DisconnectReason::Remote {
                        code,
                        reason,
                    }));
                Ok(())
            }
            _ => Err(Drop::Unexpected),
        }
    }
}

/// What a message frame means for the packet that carried it.
pub(super) enum Taken {
    /// Taken, a duplicate or stale: the packet may be acknowledged.
    Yes,
    /// No room for it: the packet must not be acknowledged (resent later).
    Refused,
    /// It contradicts what came before: the packet is malformed.
    Invalid,
}

/// Why a datagram was dropped.
enum Drop {
    Malformed(#[allow(dead_code)] DecodeError),
    Unexpected,
}

impl From<DecodeError> for Drop {
    fn from(e: DecodeError) -> Self {
        Drop::Malformed(e)
    }
}

#[cfg(test)]
mod tests {
    use super::super::packets::{msg, packet, receiver};
    use super::super::Event;
    use super::KEPT_FRAMES;
    use crate::wire::Frame;

    /// The messages `c` delivered, in order.
    fn delivered(c: &mut super::Connection) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while let Some(e) = c.poll_event() {
            if let Event::Message { data, .. } = e {
                got.push(data);
            }
        }
        got
    }

    #[test]
    fn every_frame_of_a_packet_is_acted_on_once_in_order() {
        // Fewer frames than are kept, exactly as many, and more: the ones
        // past KEPT_FRAMES are decoded again.
        let (mut c, now) = receiver();
        let mut seq = 0u64;
        for (pn, n) in [1, KEPT_FRAMES, KEPT_FRAMES + 1, 3 * KEPT_FRAMES + 2]
            .into_iter()
            .enumerate()
        {
            let bodies: Vec<[u8; 3]> = (seq..seq + n as u64).map(|s| [s as u8; 3]).collect();
            let mut frames: Vec<Frame<'_>> = vec![Frame::Ping];
            for (i, b) in bodies.iter().enumerate() {
                frames.push(msg(seq + i as u64, b));
            }
            c.handle_datagram(now, &packet(pn as u64, &frames));
            let got = delivered(&mut c);
            let want: Vec<Vec<u8>> = bodies.iter().map(|b| b.to_vec()).collect();
            assert_eq!(got, want, "a packet of {} frames", n + 1);
            seq += n as u64;
        }
        let s = c.stats();
        assert_eq!(s.messages_delivered, seq);
        assert_eq!(s.duplicate_messages, 0, "a frame acted on twice");
        assert_eq!((s.packets_received, s.malformed_packets), (4, 0));
    }

    #[test]
    fn a_malformed_frame_past_the_kept_ones_drops_the_whole_packet() {
        let (mut c, now) = receiver();
        let bodies = [[1u8; 3]; KEPT_FRAMES + 2];
        let mut frames: Vec<Frame<'_>> = Vec::new();
        for (i, b) in bodies.iter().enumerate() {
            frames.push(msg(i as u64, b));
        }
        let mut p = packet(0, &frames);
        // A message frame for a channel that does not exist, last.
        p.extend_from_slice(&[0x03, 9, 0, 1, 0xaa]);
        c.handle_datagram(now, &p);
        assert!(delivered(&mut c).is_empty(), "nothing of it is acted on");
        let s = c.stats();
        assert_eq!((s.malformed_packets, s.messages_delivered), (1, 0));
    }
}
