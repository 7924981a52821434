//! A server lane: its socket's receive loop, admission, sessions and their
//! timers, and shutdown.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_reactor::{Flow, Lane, LaneCx, Ready, SourceId, TimerId};

use super::ctx::{lock, Parts};
use super::session::{SessionJob, SessionTimer};
use super::ServerHandler;
use crate::config::FullPolicy;
use crate::counters::{bump, set};
use crate::endpoint::{receive, DropSignal, Receiver, Rx, Tx};
use crate::error::DisconnectReason;
use crate::inbox::Accepted;
use crate::sessions::SessionKey;
use crate::sys::LocalAddr;

pub(super) struct ServerLane<H: ServerHandler> {
    pub(super) handler: H,
    pub(super) rx: Rx,
    pub(super) parts: Parts<H::Session>,
    pub(super) idle: Vec<usize>,
    pub(super) max_sessions: usize,
    pub(super) policy: FullPolicy,
    pub(super) idle_timeout: Option<Duration>,
    pub(super) sweep: Option<TimerId>,
    /// `shutdown` ran: nothing more is received, delivered or started; the
    /// lane closes when the current round ends.
    pub(super) closing: bool,
    /// Told when this lane's state is gone (see `Server::stop_and_wait`);
    /// the last field, so it signals after the socket closed.
    pub(super) on_dropped: DropSignal,
}

impl<H: ServerHandler> Drop for ServerLane<H> {
    fn drop(&mut self) {
        lock(&self.parts.directory.lanes[self.parts.lane]).clear();
    }
}

/// Where the bytes of a datagram being delivered are: slot `i` of the
/// receive batch, or a buffer the receive conditioner held.
#[derive(Clone, Copy)]
enum Bytes<'b> {
    Batch(usize),
    Held(&'b [u8]),
}

impl<'b> Bytes<'b> {
    /// The datagram's bytes, and the local address it came to if known (a
    /// held datagram's is not kept: its session keeps its last one).
    #[inline(always)]
    fn read<'r>(self, rx: &'r Rx) -> (&'r [u8], Option<LocalAddr>)
    where
        'b: 'r,
    {
        match self {
            Bytes::Batch(i) => (rx.batch.data(i), rx.local(i)),
            Bytes::Held(data) => (data, None),
        }
    }
}

impl<H: ServerHandler> ServerLane<H> {
    fn handle_batch(&mut self, cx: &mut LaneCx<'_, Self>, n: usize, now: Instant) {
        if self.rx.link.is_some() {
            self.handle_batch_impaired(cx, n, now);
            return;
        }
        for i in 0..n {
            if self.rx.batch.truncated(i) {
                bump(&self.parts.tx.counters.truncated, 1);
                continue;
            }
            let peer = self.rx.batch.addr(i);
            self.deliver(cx, peer, Bytes::Batch(i), now);
        }
    }

    /// The batch loop through the receive conditioner: each datagram is
    /// dropped, held (delivered later by [`Self::deliver_held`]), or
    /// delivered now, once or twice.
    #[inline(never)]
    fn handle_batch_impaired(&mut self, cx: &mut LaneCx<'_, Self>, n: usize, now: Instant) {
        for i in 0..n {
            if self.rx.batch.truncated(i) {
                bump(&self.parts.tx.counters.truncated, 1);
                continue;
            }
            let peer = self.rx.batch.addr(i);
            let at_once = match self.rx.link.as_deref_mut() {
                Some(link) => link.route(now, Some(peer), self.rx.batch.data(i)),
                None => 1,
            };
            for _ in 0..at_once {
                self.deliver(cx, peer, Bytes::Batch(i), now);
            }
        }
        self.rx.arm(cx);
    }

    /// The receive conditioner's timer fired: delivers what is due, through
    /// the same session logic as a datagram just received.
    fn deliver_held(&mut self, cx: &mut LaneCx<'_, Self>) {
        let now = Instant::now();
        while let Some((peer, data)) = self.rx.pop_held(now) {
            if let Some(peer) = peer {
                self.deliver(cx, peer, Bytes::Held(&data), now);
            }
            self.rx.recycle(data);
        }
        self.rx.arm(cx);
    }

    /// Hands one datagram from `peer` to its session (admitting the peer
    /// first, or refusing it).
    #[inline(always)]
    fn deliver(
        &mut self,
        cx: &mut LaneCx<'_, Self>,
        peer: SocketAddr,
        bytes: Bytes<'_>,
        now: Instant,
    ) {
        let index = match self.parts.sessions.find(&peer) {
            Some(index) => index,
            None => match self.open(cx, peer, bytes, now) {
                Some(index) => index,
                None => return,
            },
        };
        let (data, local) = bytes.read(&self.rx);
        if let Some(mut session) = self.parts.session(index, cx) {
            session.slot.last_active = now;
            if local.is_some() {
                session.slot.local = local;
            }
            self.handler.datagram(&mut session, data);
        }
        if !self.parts.to_close.is_empty() {
            self.close_requested(cx);
        }
    }

    /// Admission of a new peer: the table's policy, then the handler's
    /// `connect` with the first datagram.
    fn open(
        &mut self,
        cx: &mut LaneCx<'_, Self>,
        peer: SocketAddr,
        bytes: Bytes<'_>,
        now: Instant,
    ) -> Option<usize> {
        let full = self.parts.sessions.len() >= self.max_sessions;
        if full && self.policy == FullPolicy::Refuse {
            bump(&self.parts.tx.counters.sessions_refused, 1);
            return None;
        }
        let (first, _) = bytes.read(&self.rx);
        let admitted = {
            let mut ctx = self.parts.ctx(cx);
            self.handler.connect(&mut ctx, peer, first)
        };
        let Some(state) = admitted else {
            bump(&self.parts.tx.counters.sessions_rejected, 1);
            if !self.parts.to_close.is_empty() {
                self.close_requested(cx);
            }
            return None;
        };
        // Evict only for a peer the handler admitted: a flood of bad join
        // tokens must not push out players.
        if self.parts.sessions.len() >= self.max_sessions {
            if let Some(victim) = self.parts.sessions.sample_idlest() {
                self.end_session(cx, victim, DisconnectReason::Evicted);
            }
        }
        let index = self.parts.sessions.insert(peer, state, now);
        let c = &self.parts.tx.counters;
        bump(&c.sessions_opened, 1);
        set(&c.sessions_open, self.parts.sessions.len() as u64);
        if let Some(key) = self.parts.sessions.key(index) {
            lock(&self.parts.directory.lanes[self.parts.lane]).insert(peer, key);
        }
        Some(index)
    }

    /// Ends the session in slot `index`: cancels its timers, forgets it,
    /// counts why, and tells the handler.
    fn end_session(&mut self, cx: &mut LaneCx<'_, Self>, index: usize, reason: DisconnectReason) {
        let Some(slot) = self.parts.sessions.remove_at(index) else {
            return;
        };
        for id in &slot.timers {
            self.parts.session_timers.remove(id);
            cx.cancel_timer(*id);
        }
        lock(&self.parts.directory.lanes[self.parts.lane]).remove(&slot.peer);
        let c = &self.parts.tx.counters;
        match reason {
            DisconnectReason::Closed => bump(&c.sessions_closed, 1),
            DisconnectReason::IdleTimeout => bump(&c.sessions_timed_out, 1),
            DisconnectReason::Evicted => bump(&c.sessions_evicted, 1),
            _ => {}
        }
        set(&c.sessions_open, self.parts.sessions.len() as u64);
        let mut ctx = self.parts.ctx(cx);
        self.handler
            .disconnect(&mut ctx, slot.peer, slot.state, reason);
    }

    pub(super) fn close_requested(&mut self, cx: &mut LaneCx<'_, Self>) {
        // A disconnect handler may close more sessions: loop until none.
        while let Some(peer) = self.parts.to_close.pop() {
            if let Some(index) = self.parts.sessions.find(&peer) {
                self.end_session(cx, index, DisconnectReason::Closed);
            }
        }
    }

    /// A session timer fired: hands it to the handler with its session
    /// (a timer of an ended session was cancelled; this also skips a fire
    /// already under way when it ended).
    fn session_timer(&mut self, cx: &mut LaneCx<'_, Self>, timer: TimerId, t: SessionTimer) {
        if !t.periodic {
            self.parts.session_timers.remove(&timer);
        }
        let index = t.key.index as usize;
        let Some(slot) = self.parts.sessions.by_key(t.key) else {
            return;
        };
        if !t.periodic {
            slot.timers.retain(|x| *x != timer);
        }
        if let Some(mut session) = self.parts.session(index, cx) {
            self.handler.session_timer(&mut session, timer);
        }
        if !self.parts.to_close.is_empty() {
            self.close_requested(cx);
        }
    }

    /// A job from a [`SessionHandle`].
    pub(super) fn run_session_job(
        &mut self,
        cx: &mut LaneCx<'_, Self>,
        key: SessionKey,
        job: SessionJob<H::Session>,
        guard: Accepted,
    ) {
        if self.closing {
            return; // `guard` counts the send as discarded
        }
        let index = key.index as usize;
        let open = self.parts.sessions.by_key(key).is_some();
        match self.parts.session(index, cx).filter(|_| open) {
            Some(mut session) => {
                guard.done();
                job(Some(&mut session));
            }
            None => job(None), // the session ended: `guard` counts it
        }
        if !self.parts.to_close.is_empty() {
            self.close_requested(cx);
        }
        self.parts.tx.finish(cx);
    }

    fn sweep_idle(&mut self, cx: &mut LaneCx<'_, Self>) {
        // The sweep runs every quarter of the idle timeout (at most 1 s):
        // also the moment to count drops no datagram has reported yet.
        self.rx.sync_kernel_drops(&self.parts.tx);
        let Some(timeout) = self.idle_timeout else {
            return;
        };
        let now = Instant::now();
        let Some(cutoff) = now.checked_sub(timeout) else {
            return;
        };
        self.idle.clear();
        self.parts.sessions.idle_before(cutoff, &mut self.idle);
        let mut idle = std::mem::take(&mut self.idle);
        for &i in &idle {
            self.end_session(cx, i, DisconnectReason::IdleTimeout);
        }
        idle.clear();
        self.idle = idle;
    }

    pub(super) fn shutdown(&mut self, cx: &mut LaneCx<'_, Self>) {
        if self.closing {
            return;
        }
        // Handle what already arrived (up to the usual per-event budget)
        // instead of closing the socket on it.
        receive(self, cx, Ready::READABLE);
        self.closing = true;
        self.parts.tx.finish(cx);
        for index in self.parts.sessions.open_indices() {
            self.end_session(cx, index, DisconnectReason::Shutdown);
        }
        set(&self.parts.tx.counters.sessions_open, 0);
        self.parts.tx.flush();
        // Last: no more arrivals; what is still queued and the drops no
        // datagram reported are counted.
        self.rx.close_door(&self.parts.tx);
        cx.close();
    }
}

impl<H: ServerHandler> Receiver for ServerLane<H> {
    fn sides(&mut self) -> (&mut Rx, &mut Tx) {
        (&mut self.rx, &mut self.parts.tx)
    }

    fn batch(&mut self, cx: &mut LaneCx<'_, Self>, n: usize) -> bool {
        self.handle_batch(cx, n, Instant::now());
        true
    }
}

impl<H: ServerHandler> Lane for ServerLane<H> {
    fn on_ready(&mut self, cx: &mut LaneCx<'_, Self>, _source: SourceId, ready: Ready) -> Flow {
        if self.closing {
            return Flow::Drained;
        }
        // Receive errors on the unconnected socket (ICMP errors and the
        // like) are counted and never fatal for the server.
        let flow = receive(self, cx, ready);
        self.parts.tx.finish(cx);
        flow
    }

    fn on_timer(&mut self, cx: &mut LaneCx<'_, Self>, timer: TimerId) {
        // After shutdown in the same round: deliver nothing more (held
        // datagrams are counted as discarded when the conditioner drops).
        if self.closing {
            return;
        }
        if Some(timer) == self.sweep {
            self.sweep_idle(cx);
        } else if self.parts.tx.release_held(timer) {
            // Held sends went to the send path; `finish` flushes them.
        } else if self.rx.owns_timer(timer) {
            self.deliver_held(cx);
        } else if let Some(t) = self.parts.session_timers.get(&timer).copied() {
            self.session_timer(cx, timer, t);
        } else {
            let mut ctx = self.parts.ctx(cx);
            self.handler.timer(&mut ctx, timer);
            if !self.parts.to_close.is_empty() {
                self.close_requested(cx);
            }
        }
        self.parts.tx.finish(cx);
    }
}
