//! The end of a connection: a close that loses nothing silently, the
//! acknowledgement of the peer's CLOSE, and the peer that never
//! acknowledges.
//!
//! A local close has two phases in [`State::Closing`]. First the flush:
//! the send path runs as when connected (new chunks, resends, probes), so
//! the reliable messages queued before the close reach the peer, until
//! every one is acknowledged or half of `close_timeout` has passed. Then
//! the CLOSE, in a packet of its own, repeated with a backoff from the
//! probe timeout (at most an eighth of `close_timeout` apart) until the peer acknowledges a packet carrying it or
//! `close_timeout` has passed. Only then does this side's
//! [`Event::Disconnected`] come, and [`Connection::undelivered`] tells
//! what was not acknowledged.
//!
//! The receiver of a CLOSE acknowledges the packet that carried it, each
//! time it comes again, while it drains.

use std::time::{Duration, Instant};

use crate::wire::{Frame, Reader, Writer, MAX_REASON_LEN};

use super::types::{ChannelUndelivered, Closing, DisconnectReason, Event, State, Undelivered};
use super::Connection;

/// CLOSE code sent once to a peer that acknowledged nothing for the
/// connection's `ack_timeout`
/// ([`DisconnectReason::AckTimeout`](crate::DisconnectReason::AckTimeout)
/// on this side).
pub const CLOSE_ACK_TIMEOUT: u64 = crate::close_code::CloseCode::AckTimeout.code();

impl Connection {
    /// The close's state, made at its first use.
    fn end_mut(&mut self) -> &mut Closing {
        let now = self.now_hint;
        self.end.get_or_insert_with(|| {
            Box::new(Closing {
                deadline: None,
                flush_until: now,
                phase: false,
                sent: None,
                acked: false,
                next: now,
                repeats: 0,
                once: false,
                event: None,
                drain_ack: false,
                ack_timed_out: false,
                pending: false,
                code: 0,
                reason: Vec::new(),
            })
        })
    }

    /// Closes the connection: the queued reliable messages are flushed
    /// first, then the peer's [`Event::Disconnected`] carries `code` and
    /// `reason` (cut to 128 bytes); the CLOSE is repeated until the peer
    /// acknowledges it or `close_timeout` passes. This side's
    /// `Disconnected` comes when that is done; then
    /// [`Connection::undelivered`] tells what the peer did not
    /// acknowledge. A connection still in its handshake ends at once.
    pub fn close(&mut self, now: Instant, code: u64, reason: &str) {
        let deadline = now + self.cfg.close_timeout;
        self.close_until(now, code, reason, deadline);
    }

    /// [`Connection::close`] with the end of the close at `deadline`
    /// rather than `close_timeout` from now (a server's stop gives all
    /// its connections one, and so would any driver that stops with a
    /// deadline). At least one CLOSE is sent, even if `deadline` has
    /// passed.
    pub fn close_until(&mut self, now: Instant, code: u64, reason: &str, deadline: Instant) {
        self.now_hint = now;
        let local = DisconnectReason::Local {
            code,
            reason: reason.to_owned(),
        };
        match self.state {
            State::Connected => {
                self.set_close_frame(code, reason);
                self.state = State::Closing;
                let e = self.end_mut();
                e.deadline = Some(deadline);
                e.flush_until = now + deadline.saturating_duration_since(now) / 2;
                e.event = Some(local);
                if deadline <= now {
                    e.once = true;
                    self.begin_close_phase();
                }
            }
            State::Handshaking => {
                self.state = State::Closed;
                self.events.push_back(Event::Disconnected(local));
            }
            _ => {}
        }
    }

    fn set_close_frame(&mut self, code: u64, reason: &str) {
        let r = &reason.as_bytes()[..reason.len().min(MAX_REASON_LEN)];
        let e = self.end_mut();
        e.reason.clear();
        e.reason.extend_from_slice(r);
        e.code = code;
    }

    fn begin_close_phase(&mut self) {
        let e = self.end_mut();
        e.phase = true;
        e.pending = true;
    }

    /// Every message handed to `send` has left the queues: reliable ones
    /// acknowledged, unreliable ones sent.
    pub(super) fn flush_done(&self) -> bool {
        self.send.iter().all(|c| c.msgs.iter().all(Option::is_none))
    }

    /// What the peer has not acknowledged: messages per channel and
    /// whether a CLOSE this end sent was acknowledged. Cheap enough to ask
    /// once per connection at its end (it walks the send queues); a
    /// `keel_rudp::Handler` asks with
    /// `keel_rudp::Ctx::undelivered` in `disconnected`.
    pub fn undelivered(&self) -> Undelivered {
        let mut u = Undelivered::default();
        for (i, ch) in self.send.iter().enumerate() {
            let mut c = ChannelUndelivered {
                channel: i as u8,
                messages: 0,
                bytes: 0,
                first_seq: 0,
            };
            for m in ch.msgs.iter().flatten() {
                if c.messages == 0 {
                    c.first_seq = m.seq;
                }
                c.messages += 1;
                c.bytes += m.data.len() as u64;
            }
            if c.messages > 0 {
                u.messages += c.messages;
                u.bytes += c.bytes;
                u.channels.push(c);
            }
        }
        u.close_unacknowledged = self
            .end
            .as_ref()
            .is_some_and(|e| e.sent.is_some() && !e.acked);
        u
    }

    /// The deadlines of a closing connection.
    pub(super) fn closing_timeout(&self, soon: Instant) -> Option<Instant> {
        let e = self.end.as_deref()?;
        if e.pending {
            return Some(soon);
        }
        let end = e.deadline?;
        if !e.phase {
            if self.flush_done() {
                return Some(soon);
            }
            let flow = self.flow_timeout(soon);
            let t = flow.map_or(e.flush_until, |f| f.min(e.flush_until));
            return Some(t.min(end));
        }
        Some(e.next.min(end))
    }

    /// The timers of a closing connection: its end (once a CLOSE has
    /// gone), the flush's loss detection, the CLOSE's repeats.
    pub(super) fn closing_handle_timeout(&mut self, now: Instant) {
        let e = self.end_mut();
        if e.deadline.is_some_and(|d| now >= d) && !e.pending {
            self.end_close();
            return;
        }
        if !e.phase {
            if now >= e.flush_until || self.flush_done() {
                self.begin_close_phase();
            } else {
                self.run_recovery_timer(now);
            }
        } else if e.sent.is_some() && now >= e.next {
            e.pending = true;
        }
    }

    /// The closing connection ends: acknowledged, or out of time.
    fn end_close(&mut self) {
        self.state = State::Closed;
        if let Some(e) = self.end.as_mut().and_then(|e| e.event.take()) {
            self.events.push_back(Event::Disconnected(e));
        }
    }

    /// The datagram to send while closing: flush packets, then the CLOSE.
    pub(super) fn write_closing(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let (phase, flush_until) = {
            let e = self.end_mut();
            (e.phase, e.flush_until)
        };
        if !phase && (self.flush_done() || now >= flush_until) {
            self.begin_close_phase();
        } else if !phase {
            return self.write_packet(now, buf);
        }
        if !self.end_mut().pending {
            return None;
        }
        let mut w = Writer::new(buf);
        let pn = self.begin_short(&mut w)?;
        // Acknowledges the peer's own CLOSE, if it closes too.
        let ack_floor_after = if self.ack_eliciting_unacked > 0 {
            self.write_ack(now, &mut w, true)
        } else {
            None
        };
        let e = self.end_mut();
        Frame::Close {
            code: e.code,
            reason: &e.reason,
        }
        .encode(&mut w)
        .ok()?;
        e.pending = false;
        // Not ack-eliciting for loss recovery (no probes: the repeats are
        // the CLOSE's own), but the peer acknowledges it.
        self.finish(now, pn, w.len(), false, ack_floor_after, Vec::new());
        // Every probe timeout, doubling, but at least eight times in a
        // close's time: the estimate may still be the initial RTT's.
        let pto = self.rtt.pto(self.recovery.max_ack_delay);
        let most = (self.cfg.close_timeout / 8).max(Duration::from_millis(1));
        let e = self.end_mut();
        e.sent.get_or_insert(pn);
        e.next = now + (pto * (1 << e.repeats.min(16))).min(most);
        e.repeats += 1;
        if e.once {
            self.end_close();
        }
        Some(w.len())
    }

    /// The ACK of a CLOSE the peer sent (again) while this end drains.
    pub(super) fn write_drain_ack(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let e = self.end_mut();
        if !e.drain_ack {
            return None;
        }
        e.drain_ack = false;
        if self.received.count_from(self.ack_floor) == 0 {
            return None;
        }
        let mut w = Writer::new(buf);
        let pn = self.begin_short(&mut w)?;
        let floor = self.write_ack(now, &mut w, false);
        self.finish(now, pn, w.len(), false, floor, Vec::new());
        Some(w.len())
    }

    /// After a datagram: a closing connection whose CLOSE was acknowledged
    /// is done.
    pub(super) fn after_input(&mut self) {
        if self.state != State::Closing {
            return;
        }
        let largest = self.recovery.largest_acked();
        if let Some(e) = self.end.as_mut() {
            if e.sent.is_some_and(|pn| largest.is_some_and(|l| l >= pn)) {
                e.acked = true;
                self.end_close();
            }
        }
    }

    /// The peer's CLOSE, connected or flushing: drain, acknowledging it.
    pub(super) fn on_peer_close(&mut self, now: Instant, code: u64, reason: &[u8]) {
        if !matches!(self.state, State::Connected | State::Closing) {
            return;
        }
        self.state = State::Draining;
        let deadline = self.closing_deadline(now);
        let e = self.end_mut();
        e.deadline = Some(deadline);
        e.drain_ack = true;
        // A close of this end's own, still flushing, ends with its own
        // event; otherwise the peer's code and reason.
        let reason = match e.event.take() {
            Some(local) => local,
            None => DisconnectReason::Remote {
                code,
                reason: String::from_utf8_lossy(reason).into_owned(),
            },
        };
        self.events.push_back(Event::Disconnected(reason));
    }

    /// A packet (authenticated, new) while the CLOSE is being repeated, or
    /// while draining: only ACK and CLOSE frames count. A packet carrying
    /// a CLOSE and no message is recorded so that it is acknowledged (a
    /// packet with messages is not: they are not delivered any more).
    pub(super) fn on_packet_at_end(&mut self, now: Instant, pn: u64, mut r: Reader<'_>) {
        let mut close = false;
        let mut data = false;
        let closing = self.state == State::Closing;
        while !r.is_empty() {
            let Ok(frame) = Frame::decode(&mut r) else {
                break;
            };
            match frame {
                Frame::Ack(a) if closing => self.on_ack_frame(now, &a),
                Frame::Close { .. } => close = true,
                Frame::Message { .. } | Frame::Fragment { .. } => data = true,
                _ => {}
            }
        }
        self.stats.packets_received += 1;
        if !close || data {
            return;
        }
        self.received.insert(pn);
        self.largest_recv_time = Some(now);
        if closing {
            // Both ends close: answer with CLOSE and the ACK at once.
            self.ack_eliciting_unacked += 1;
            self.end_mut().pending = true;
        } else {
            let deadline = self.closing_deadline(now);
            let e = self.end_mut();
            e.drain_ack = true;
            e.deadline = Some(deadline);
        }
    }

    /// Connected: the peer acknowledged nothing for `ack_timeout` while
    /// packets awaited it. One CLOSE says why; the connection ends now.
    pub(super) fn ack_timed_out(&mut self) {
        let reason = format!(
            "no acknowledgement for {} ms",
            self.cfg.ack_timeout.as_millis()
        );
        self.set_close_frame(CLOSE_ACK_TIMEOUT, &reason);
        self.state = State::Closing;
        let now = self.now_hint;
        let e = self.end_mut();
        e.ack_timed_out = true;
        e.deadline = Some(now);
        e.once = true;
        e.event = None;
        self.begin_close_phase();
        self.events
            .push_back(Event::Disconnected(DisconnectReason::AckTimeout));
    }

    /// Whether the connection ended on its ack timeout.
    pub(crate) fn ended_by_ack_timeout(&self) -> bool {
        self.end.as_ref().is_some_and(|e| e.ack_timed_out)
    }

    /// When the ack timeout would fire, if packets await acknowledgement.
    pub(super) fn ack_timeout_at(&self) -> Option<Instant> {
        self.unacked_since.map(|t| t + self.cfg.ack_timeout)
    }
}
