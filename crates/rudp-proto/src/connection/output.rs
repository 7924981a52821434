//! The send path: the hello, CLOSE, and packets of acknowledgements,
//! resent chunks, new messages and redundant copies, in priority order.

use std::time::{Duration, Instant};

use crate::channel::{ChunkState, OutMsg, Plan};
use crate::recovery::{ChunkRef, SentPacket};
use crate::scratch;
use crate::wire::{
    send_packet_number_len, ConnectionId, Frame, FrameType, Header, LongType, Writer,
    MIN_HELLO_SIZE,
};

use super::types::{Side, State};
use super::{Connection, ACK_ROOM, MAX_ACK_RANGES_SENT, PROBE_CHUNKS, REDUNDANCY_SCAN};
use crate::security::TAG_LEN;
use crate::wire::SHORT_HEADER_MAX_LEN;

/// Packets acknowledged without a loss after which a connection sends no
/// copies or parity until its first loss (about 1 s at 60 Hz; fewer
/// judge a lossy link clean too often: at 10 % loss, 16 packets in a row
/// arrive one time in five).
const PROTECT_UNTIL_ACKED: u64 = 64;

/// The longest wait between two HELLOs: a player connecting through a
/// lossy link retries at 2 Hz rather than backing off to seconds (the
/// handshake has four legs, each of which loss can take).
const HELLO_INTERVAL_MAX: Duration = Duration::from_millis(500);

impl Connection {
    /// Fills `buf` with the next datagram to send and returns its length,
    /// or `None` when nothing is due. `buf` must hold at least 1,200
    /// bytes; at most `max_datagram_size` are used.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.now_hint = now;
        let budget = buf.len().min(self.cfg.max_datagram_size);
        if budget < MIN_HELLO_SIZE {
            return None;
        }
        let buf = &mut buf[..budget];
        if self.state == State::Handshaking {
            return self.write_hello(now, buf);
        }
        // Short packets: with a key, leave room for the tag and seal.
        let pn = self.recovery.next_pn();
        let header = 1 + 8 + send_packet_number_len(pn, self.recovery.largest_acked());
        let room = if self.crypto.is_some() {
            budget - TAG_LEN
        } else {
            budget
        };
        let len = match self.state {
            State::Closing => self.write_closing(now, &mut buf[..room])?,
            State::Draining => self.write_drain_ack(now, &mut buf[..room])?,
            State::Connected => self.write_packet(now, &mut buf[..room])?,
            _ => return None,
        };
        match &self.crypto {
            None => Some(len),
            Some(c) => {
                let n = c.seal(pn, buf, header, len)?;
                self.stats.bytes_sent += TAG_LEN as u64;
                Some(n)
            }
        }
    }

    fn write_hello(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let hs = self.hs.as_deref_mut()?;
        if self.side != Side::Client || now < hs.hello_next {
            return None;
        }
        let mut w = Writer::new(buf);
        Header::Long {
            ty: LongType::Hello,
            cid: ConnectionId::default(),
        }
        .encode(&mut w)
        .ok()?;
        Frame::Hello {
            nonce: self.nonce,
            config_digest: self.digest,
            max_ack_delay_us: self.cfg.announced_ack_delay().as_micros() as u64,
            cookie: &hs.cookie,
            token: &hs.token,
        }
        .encode(&mut w)
        .ok()?;
        let pad = MIN_HELLO_SIZE.saturating_sub(w.len());
        w.zeros(pad).ok()?;
        hs.hello_next = now + hs.hello_interval;
        hs.hello_interval = (hs.hello_interval * 2).min(HELLO_INTERVAL_MAX);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += w.len() as u64;
        Some(w.len())
    }

    pub(super) fn begin_short(&self, w: &mut Writer<'_>) -> Option<u64> {
        let pn = self.recovery.next_pn();
        let pn_len = send_packet_number_len(pn, self.recovery.largest_acked());
        Header::Short {
            cid: self.cid,
            pn,
            pn_len,
        }
        .encode(w)
        .ok()?;
        Some(pn)
    }

    pub(super) fn finish(
        &mut self,
        now: Instant,
        pn: u64,
        size: usize,
        eliciting: bool,
        ack_floor_after: Option<u64>,
        chunks: Vec<ChunkRef>,
    ) {
        if eliciting {
            self.note_send_interval(now);
            self.last_eliciting_sent = now;
            self.unacked_since.get_or_insert(now);
        }
        self.recovery.on_sent(SentPacket {
            pn,
            time_sent: now,
            size,
            ack_eliciting: eliciting,
            ack_floor_after,
            chunks,
        });
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size as u64;
    }

    /// Writes an ACK frame of the packets received from the ack floor up,
    /// if there are any, and returns the floor once it is acknowledged.
    /// `beside_data`: the frame keeps to `ACK_ROOM` and the first ranges;
    /// otherwise it takes the room left (less a byte for a PING).
    pub(super) fn write_ack(
        &mut self,
        now: Instant,
        w: &mut Writer<'_>,
        beside_data: bool,
    ) -> Option<u64> {
        let mut ack_floor_after = None;
        let floor = self.ack_floor;
        let n = self.received.count_from(floor);
        if n > 0 {
            let delay = self
                .largest_recv_time
                .map_or(0, |t| now.saturating_duration_since(t).as_micros() as u64);
            // A packet with data keeps ACK_ROOM for the ACK (chunks are cut
            // to fit beside it); one without gives the ACK all its room, so
            // a receiver of reordered data reports every range it can.
            let (room, most) = if beside_data {
                (ACK_ROOM, MAX_ACK_RANGES_SENT)
            } else {
                // Less a byte for a keepalive PING.
                (w.remaining().saturating_sub(1), n)
            };
            let ranges = self.received.iter_desc_from(floor).take(most);
            if let Ok(k) = w.limited(room, |aw| Frame::encode_ack_iter(aw, delay, ranges.clone())) {
                // Once this packet is acknowledged the peer knows every
                // range written, and the floor passes them: one past the
                // largest (RFC 9000, section 13.2.4) when all fit. A frame
                // cut short moves it only to its lowest range written: the
                // ranges below it that did not fit are given up (the peer
                // resends what they carried), but packets that arrive late
                // into the gaps between the ranges written are still
                // reported, not given up with them.
                ack_floor_after = if k == n {
                    ranges.clone().next().map(|(_, hi)| hi + 1)
                } else {
                    ranges.clone().nth(k.saturating_sub(1)).map(|(lo, _)| lo)
                };
            }
            self.ack_eliciting_unacked = 0;
            self.first_unacked_at = None;
            self.ack_immediate = false;
        }
        ack_floor_after
    }

    fn ack_due(&self, now: Instant) -> bool {
        self.ack_due_at(now).is_some_and(|d| now >= d)
    }

    /// When the acknowledgement of the ack-eliciting packets received
    /// since the last ACK is due: `soon` when it is due at once (asked
    /// for, or as many packets as [`Self::ack_wait`] counts), else its
    /// deadline; `None` with nothing to acknowledge.
    pub(super) fn ack_due_at(&self, soon: Instant) -> Option<Instant> {
        if self.ack_eliciting_unacked == 0 {
            return None;
        }
        if self.ack_immediate {
            return Some(soon);
        }
        let (threshold, deadline) = self.ack_wait();
        if self.ack_eliciting_unacked >= threshold {
            Some(soon)
        } else {
            deadline
        }
    }

    /// How many ack-eliciting packets are acknowledged at once, and when
    /// the acknowledgement of fewer is due (`None` with nothing to
    /// acknowledge): both from one pass over the tick's arithmetic, which
    /// [`Self::ack_due_at`] needs whole.
    ///
    /// The count is 2 (RFC 9000, section 13.2.2), or
    /// [`TICK_ACK_PACKETS`](super::TICK_ACK_PACKETS) while the
    /// acknowledgement can ride on this end's next tick ([`Self::riding_tick`])
    /// on a clean link: nothing lost yet, or a measured loss below
    /// [`REDUNDANCY_MIN_LOSS`](crate::REDUNDANCY_MIN_LOSS).
    ///
    /// The deadline is `max_ack_delay` after the first packet not yet
    /// acknowledged arrived, or, while this end sends at a steady interval
    /// whose next packet is expected within `tick_ack_delay` of that
    /// arrival, when that packet is due and a quarter interval more (at
    /// least two timer granularities, at most `tick_ack_delay` after the
    /// arrival), so the acknowledgement rides on it. An end that stops
    /// sending acknowledges at that bound.
    fn ack_wait(&self) -> (u32, Option<Instant>) {
        let Some(first) = self.first_unacked_at else {
            return (2, None);
        };
        let base = first + self.cfg.max_ack_delay;
        let Some((tick, next, cap)) = self.riding_tick(first) else {
            return (2, Some(base));
        };
        // The average starts high (for redundancy's sake): a link that has
        // lost nothing yet is clean.
        let clean = self.stats.packets_lost == 0 || !self.loss_justifies_redundancy();
        let threshold = if clean { super::TICK_ACK_PACKETS } else { 2 };
        let slack = (tick / 4).max(crate::rtt::GRANULARITY * 2);
        (threshold, Some(base.max((next + slack).min(cap))))
    }

    /// This end's tick, while it sends at one and its next packet is due
    /// within `tick_ack_delay` of `first`, the first packet not yet
    /// acknowledged (an acknowledgement can wait for that packet): the
    /// tick, when that packet is due, and that bound.
    fn riding_tick(&self, first: Instant) -> Option<(Duration, Instant, Instant)> {
        if self.tick_us == 0 {
            return None;
        }
        let tick = Duration::from_micros(self.tick_us.into());
        let next = self.last_eliciting_sent + tick;
        let cap = first + self.cfg.tick_ack_delay;
        (next <= cap).then_some((tick, next, cap))
    }

    /// Whether the measured loss is at least
    /// [`REDUNDANCY_MIN_LOSS`](crate::REDUNDANCY_MIN_LOSS).
    fn loss_justifies_redundancy(&self) -> bool {
        f64::from(self.loss_avg) / 65536.0 >= crate::channel::REDUNDANCY_MIN_LOSS
    }

    /// Measures the interval between this end's ack-eliciting packets (one
    /// sent at `now`): packets less than the timer granularity apart are
    /// one burst; a gap longer than `tick_ack_delay` means this end is not
    /// sending at a tick an acknowledgement could wait for.
    fn note_send_interval(&mut self, now: Instant) {
        let cap = self.cfg.tick_ack_delay;
        if cap <= self.cfg.max_ack_delay {
            return;
        }
        let gap = now.saturating_duration_since(self.last_eliciting_sent);
        if gap < crate::rtt::GRANULARITY {
            return;
        }
        self.tick_us = if gap > cap {
            0
        } else {
            let us = gap.as_micros() as u32;
            match self.tick_us {
                0 => us,
                t => ((u64::from(t) * 7 + u64::from(us)) / 8) as u32,
            }
        };
    }

    fn bulk_allowed(&mut self, now: Instant, size: usize) -> bool {
        if !self.cfg.congestion_control {
            return true;
        }
        if self.recovery.bytes_in_flight + size > self.cc.window() {
            return false;
        }
        self.pacer
            .delay(now, size, self.cc.window(), self.rtt.smoothed())
            .is_none()
    }

    pub(super) fn write_packet(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let budget = buf.len();
        let ack_due = self.ack_due(now);
        let probe = self.probes_pending > 0;
        let keepalive = now >= self.last_eliciting_sent + self.cfg.keepalive_interval;
        let bulk_waiting = self.send.iter().any(|c| c.cfg.bulk && c.has_sendable());
        let bulk_ok = probe || (bulk_waiting && self.bulk_allowed(now, budget));
        let data = self
            .send
            .iter()
            .any(|c| c.has_sendable() && (!c.cfg.bulk || bulk_ok));
        // Copies of channel redundancy that did not fit in the last packet.
        let copies_waiting = std::mem::take(&mut self.copies_waiting);
        if !(ack_due || probe || keepalive || data || copies_waiting) {
            return None;
        }
        let mut w = Writer::new(buf);
        let pn = self.begin_short(&mut w)?;
        let ack_floor_after = self.write_ack(now, &mut w, data || probe || copies_waiting);
        let reported = self.write_repaired(&mut w);
        let mut chunks = self.chunk_pool.pop().unwrap_or_default();
        let mut eliciting = false;
        let mut had_data = false;
        let mut bulk_sent = false;
        if probe {
            self.probes_pending -= 1;
            self.stats.probes += 1;
            w.u8(FrameType::Ping as u8).ok()?;
            eliciting = true;
            // Repeat the oldest unacknowledged reliable chunks.
            let mut refs = scratch::take_refs();
            for p in self.recovery.outstanding() {
                let room = PROBE_CHUNKS - refs.len();
                refs.extend_from_slice(&p.chunks[..p.chunks.len().min(room)]);
                if refs.len() == PROBE_CHUNKS {
                    break;
                }
            }
            for c in &refs {
                let ch = &mut self.send[c.channel as usize];
                let Some(m) = ch.msg_mut(c.seq) else { continue };
                if !matches!(m.chunks[c.chunk as usize].state, ChunkState::Sent { .. }) {
                    continue;
                }
                if write_chunk(&mut w, c.channel, m, c.chunk) {
                    m.chunks[c.chunk as usize].state = ChunkState::Sent { last_pn: pn };
                    chunks.push(ChunkRef { first: false, ..*c });
                    bulk_sent |= ch.cfg.bulk;
                }
            }
            scratch::give_refs(refs);
        }
        // The levels' plans for high loss, while it is.
        let high = self.loss_watch.high();
        // Retransmissions first, then new messages, by channel priority.
        for k in 0..self.order.len() {
            let ci = self.order[k];
            let ch = &mut self.send[ci as usize];
            if ch.cfg.bulk && !bulk_ok {
                continue;
            }
            let again = Plan::of(ch.cfg.redundancy, high).resend_copy;
            while let Some(&(seq, chunk)) = ch.retransmit.front() {
                let Some(m) = ch.msg_mut(seq) else {
                    ch.retransmit.pop_front();
                    continue;
                };
                if m.chunks[chunk as usize].state != ChunkState::Lost {
                    ch.retransmit.pop_front();
                    continue;
                }
                if !write_chunk(&mut w, ci, m, chunk) {
                    break;
                }
                m.chunks[chunk as usize].state = ChunkState::Sent { last_pn: pn };
                if again {
                    // A resend gets copies again: its loss would cost
                    // another loss-detection delay.
                    m.copies = 1;
                    m.resent = true;
                }
                ch.retransmit.pop_front();
                chunks.push(ChunkRef {
                    channel: ci,
                    first: false,
                    chunk,
                    seq,
                });
                self.stats.retransmissions += 1;
                had_data = true;
                bulk_sent |= ch.cfg.bulk;
            }
        }
        // The newest whole message each parity-sending channel put in this
        // packet for the first time (what its parity schedule keys on).
        let mut newest = scratch::take_refs();
        for k in 0..self.order.len() {
            let ci = self.order[k];
            let ch = &mut self.send[ci as usize];
            if ch.cfg.bulk && !bulk_ok {
                continue;
            }
            let reliable = ch.cfg.kind.is_reliable();
            let parity = reliable && !ch.cfg.bulk && Plan::of(ch.cfg.redundancy, high).parity.0 > 0;
            while let Some((seq, chunk)) = ch.peek_unsent() {
                let Some(m) = ch.msg_mut(seq) else { break };
                if !write_chunk(&mut w, ci, m, chunk) {
                    break;
                }
                if reliable {
                    chunks.push(ChunkRef {
                        channel: ci,
                        first: true,
                        chunk,
                        seq,
                    });
                }
                let whole = m.chunks.len() == 1;
                let mut free = crate::scratch::take_msgs();
                ch.advance_unsent(pn, &mut free);
                crate::scratch::give_msgs(free);
                had_data = true;
                bulk_sent |= ch.cfg.bulk;
                if parity && whole {
                    match newest.last_mut() {
                        Some(r) if r.channel == ci => r.seq = seq,
                        _ => newest.push(ChunkRef {
                            channel: ci,
                            first: true,
                            chunk: 0,
                            seq,
                        }),
                    }
                }
            }
        }
        let red = self.cfg.redundancy;
        // Channel redundancy: while the measured loss justifies it.
        let lossy = self.loss_justifies_redundancy();
        // Copies and parity protect a new connection's first packets, then
        // wait for a first loss: a clean link stops paying for them after
        // PROTECT_UNTIL_ACKED packets, not when the loss average has fallen
        // from its start (about 120 packets: 6 s at 20 Hz, in which every
        // 100-byte message rode twice).
        let protect = self.stats.packets_lost > 0 || self.stats.packets_acked < PROTECT_UNTIL_ACKED;
        let lossy = lossy && protect;
        if lossy && had_data {
            self.write_parities(pn, &mut w, &newest);
        }
        let any_channel = lossy && self.send.iter().any(|c| c.cfg.redundancy > 0);
        // The small-message budget's copies whatever the loss average once
        // the link has lost a packet: on one that drops now and then (a
        // bottleneck's queue, below the 1 % the channels' levels wait for)
        // they keep a lost game message from waiting for a resend.
        let small_on = red.enabled() && protect;
        let mut copied = false;
        if (had_data || copies_waiting) && (small_on || any_channel) {
            let mut left = red.max_bytes_per_packet;
            for k in 0..self.order.len() {
                let ci = self.order[k];
                let ch = &mut self.send[ci as usize];
                if ch.cfg.bulk || !ch.cfg.kind.is_reliable() {
                    continue;
                }
                let plan = Plan::of(if lossy { ch.cfg.redundancy } else { 0 }, high);
                for m in ch.msgs.iter_mut().take(REDUNDANCY_SCAN).flatten() {
                    if m.chunks.len() != 1 {
                        continue;
                    }
                    let channel_copies = 1 + plan.extra_copies(m.resent);
                    let small = small_on && m.data.len() <= red.max_message;
                    // Copies for the small-message budget, or for the
                    // channel's knob (whatever room the packet has left).
                    let by_channel = m.copies < channel_copies;
                    let by_small = small && m.copies < red.max_copies;
                    if !by_channel && !by_small {
                        continue;
                    }
                    match m.chunks[0].state {
                        ChunkState::Sent { last_pn } if last_pn != pn => {}
                        _ => continue,
                    }
                    let cost = crate::wire::message_frame_len(m.seq, m.data.len());
                    let small_fits = by_small && cost <= left;
                    if !(small_fits || by_channel) {
                        continue;
                    }
                    if cost > w.remaining() {
                        // A copy the knob asks for goes in a packet of its
                        // own, at once, if an empty packet holds it.
                        if by_channel && cost + ACK_ROOM + SHORT_HEADER_MAX_LEN <= budget {
                            self.copies_waiting = true;
                        }
                        continue;
                    }
                    if write_chunk(&mut w, ci, m, 0) {
                        m.chunks[0].state = ChunkState::Sent { last_pn: pn };
                        m.copies += 1;
                        if small_fits && !by_channel {
                            left -= cost;
                        }
                        chunks.push(ChunkRef {
                            channel: ci,
                            first: false,
                            chunk: 0,
                            seq: m.seq,
                        });
                        self.stats.redundant_copies += 1;
                        copied = true;
                    }
                }
            }
        }
        scratch::give_refs(newest);
        self.recount_send_buffered();
        eliciting |= had_data || copied;
        if !eliciting && keepalive {
            w.u8(FrameType::Ping as u8).ok()?;
            eliciting = true;
        }
        if !eliciting && ack_floor_after.is_none() {
            self.chunk_pool.push(chunks);
            return None;
        }
        self.drop_reported(reported);
        let size = w.len();
        if bulk_sent {
            self.pacer.on_sent(size);
        }
        self.finish(now, pn, size, eliciting, ack_floor_after, chunks);
        Some(size)
    }
}

/// Writes one chunk as a MESSAGE (whole message) or FRAGMENT frame; false
/// when it does not fit.
fn write_chunk(w: &mut Writer<'_>, channel: u8, m: &OutMsg, chunk: u32) -> bool {
    let c = m.chunks[chunk as usize];
    let payload = &m.data[c.offset as usize..(c.offset + c.len) as usize];
    let frame = if m.chunks.len() == 1 {
        Frame::Message {
            channel,
            seq: m.seq,
            payload,
        }
    } else {
        Frame::Fragment {
            channel,
            seq: m.seq,
            total: m.data.len() as u32,
            offset: c.offset,
            payload,
        }
    };
    frame.encoded_len() <= w.remaining() && frame.encode(w).is_ok()
}
