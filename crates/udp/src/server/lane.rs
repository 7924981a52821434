//! A server lane: its socket's receive half, and its core (the handler,
//! sessions and their timers, admission, shutdown). The datagram path
//! shared with clients and datagram sockets is in `crate::endpoint`; what
//! is particular to a server starts at [`LaneCore::deliver`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_reactor::{Flow, Lane, LaneCtx, LaneHandle, Ready, SourceId, TimerId};

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use super::ctx::{lock, Directory, Parts};
use super::handler::ServerHandler;
use super::session::{SessionJob, SessionLane, SessionTimer, Unlinked};
use crate::config::{FullPolicy, ServerConfig};
use crate::counters::{bump, set, Counters};
use crate::endpoint::{conditioner_timer, receive, ConditionerTimer, DropSignal, Endpoint, Rx, Tx};
use crate::error::{DisconnectReason, SendError};
use crate::inbox::{offer, Accepted};
use crate::sessions::{SessionKey, Sessions};
use crate::sys::LocalAddr;

/// The lane context of a server lane.
pub(super) type Cx<'a, H> = LaneCtx<'a, ServerLane<H>>;

pub(super) struct ServerLane<H: ServerHandler> {
    pub(super) rx: Rx,
    /// Declared last: its socket and drop signal go after the receive half.
    pub(super) core: LaneCore<H>,
}

/// Everything of a server lane but its receive half, so the receive walk
/// (which borrows the half) can hand each datagram to it.
pub(super) struct LaneCore<H: ServerHandler> {
    pub(super) handler: H,
    pub(super) parts: Parts<H::SessionState>,
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

impl<H: ServerHandler> Drop for LaneCore<H> {
    fn drop(&mut self) {
        lock(&self.parts.directory.lanes[self.parts.lane]).clear();
    }
}

/// A [`SessionLane`] for [`SessionHandle`](crate::SessionHandle)s: runs
/// their jobs on this server lane.
pub(super) struct LaneLink<H: ServerHandler> {
    pub(super) lane: LaneHandle<ServerLane<H>>,
    pub(super) counters: Arc<Counters>,
}

impl<H: ServerHandler> SessionLane<H::SessionState> for LaneLink<H> {
    fn post(
        &self,
        key: SessionKey,
        job: SessionJob<H::SessionState>,
        guard: Accepted,
    ) -> Result<(), SendError> {
        offer(&self.lane, &self.counters, move |st, cx| {
            st.core.run_session_job(cx, key, job, guard);
        })
    }
}

impl<H: ServerHandler> LaneCore<H> {
    /// The lane is registered: links it for session handles, starts the
    /// idle sweep, and runs the handler's `started`.
    pub(super) fn started(&mut self, cx: &mut Cx<'_, H>) {
        self.parts.link = Arc::new(LaneLink {
            lane: cx.lane(),
            counters: self.parts.tx.counters.clone(),
        });
        if let Some(t) = self.idle_timeout {
            let every = (t / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
            self.sweep = Some(cx.timer(Instant::now() + every, Some(every)));
        }
        let mut ctx = self.parts.ctx(cx);
        self.handler.started(&mut ctx);
    }

    /// Hands one datagram from `peer` to its session (admitting the peer
    /// first, or refusing it).
    #[inline(always)]
    pub(super) fn deliver(
        &mut self,
        cx: &mut Cx<'_, H>,
        peer: SocketAddr,
        local: Option<LocalAddr>,
        data: &[u8],
        now: Instant,
    ) {
        let (index, known) = match self.parts.sessions.find(&peer) {
            Some(index) => (index, true),
            None => match self.open(cx, peer, data, now) {
                Some(index) => (index, false),
                None => return,
            },
        };
        // The most recently active session now (a new one already is).
        if known {
            self.parts.sessions.touch(index, now);
        }
        // A held datagram has no local address: the session keeps its last.
        if let Some(mut session) = self.parts.session(index, cx) {
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
    /// `accept` with the first datagram.
    fn open(
        &mut self,
        cx: &mut Cx<'_, H>,
        peer: SocketAddr,
        first: &[u8],
        now: Instant,
    ) -> Option<usize> {
        let full = self.parts.sessions.len() >= self.max_sessions;
        if full && self.policy == FullPolicy::Refuse {
            bump(&self.parts.tx.counters.sessions_refused, 1);
            return None;
        }
        let admitted = {
            let mut ctx = self.parts.ctx(cx);
            self.handler.accept(&mut ctx, peer, first)
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
            if let Some(victim) = self.parts.sessions.evict_candidate() {
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
    pub(super) fn end_session(
        &mut self,
        cx: &mut Cx<'_, H>,
        index: usize,
        reason: DisconnectReason,
    ) {
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
            .disconnected(&mut ctx, slot.peer, slot.state, reason);
    }

    pub(super) fn close_requested(&mut self, cx: &mut Cx<'_, H>) {
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
    pub(super) fn session_timer(&mut self, cx: &mut Cx<'_, H>, timer: TimerId, t: SessionTimer) {
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
        cx: &mut Cx<'_, H>,
        key: SessionKey,
        job: SessionJob<H::SessionState>,
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

    /// Ends the sessions idle for longer than the idle timeout.
    pub(super) fn sweep_idle(&mut self, cx: &mut Cx<'_, H>) {
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
}

impl<H: ServerHandler> ServerLane<H> {
    /// Lane `lane` of a server, on `socket`, before it starts.
    pub(super) fn new(
        handler: H,
        lane: usize,
        socket: mio::net::UdpSocket,
        config: &ServerConfig,
        counters: &Arc<Counters>,
        directory: &Arc<Directory>,
    ) -> io::Result<ServerLane<H>> {
        // Lane i decides with stream i of the conditioners' seeds.
        let tx = Tx::new(socket, &config.endpoint, counters.clone(), lane as u64)?;
        Ok(ServerLane {
            rx: Rx::new(&config.endpoint, counters, lane as u64),
            core: LaneCore {
                handler,
                parts: Parts {
                    sessions: Sessions::new(),
                    tx,
                    session_timers: HashMap::new(),
                    to_close: Vec::new(),
                    lane,
                    link: Arc::new(Unlinked),
                    directory: directory.clone(),
                },
                idle: Vec::new(),
                max_sessions: config.max_sessions,
                policy: config.full_policy,
                idle_timeout: config.idle_timeout,
                sweep: None,
                closing: false,
                on_dropped: DropSignal::default(),
            },
        })
    }

    /// The receive conditioner's timer fired: delivers what is due, through
    /// the same session logic as a datagram just received.
    fn deliver_held(&mut self, cx: &mut Cx<'_, H>) {
        let now = Instant::now();
        let core = &mut self.core;
        self.rx.deliver_held(|d| {
            if let Some(peer) = d.source {
                core.deliver(cx, peer, d.local, d.data, now);
            }
            true
        });
        self.rx.arm(cx);
    }

    pub(super) fn shutdown(&mut self, cx: &mut Cx<'_, H>) {
        if self.core.closing {
            return;
        }
        // Handle what already arrived (up to the usual per-event budget)
        // instead of closing the socket on it.
        receive(self, cx, Ready::READABLE);
        let core = &mut self.core;
        core.closing = true;
        core.parts.tx.finish(cx);
        for index in core.parts.sessions.open_indices() {
            core.end_session(cx, index, DisconnectReason::Shutdown);
        }
        set(&core.parts.tx.counters.sessions_open, 0);
        core.parts.tx.flush();
        // Last: no more arrivals; what is still queued and the drops no
        // datagram reported are counted.
        self.rx.close_door(&core.parts.tx);
        cx.close();
    }
}

impl<H: ServerHandler> Endpoint for ServerLane<H> {
    fn sides(&mut self) -> (&mut Rx, &mut Tx) {
        (&mut self.rx, &mut self.core.parts.tx)
    }

    /// Each datagram of the batch to its session (`LaneCore::deliver`).
    #[inline(always)]
    fn batch(&mut self, cx: &mut Cx<'_, H>, n: usize) -> bool {
        let now = Instant::now();
        let core = &mut self.core;
        self.rx.deliver_batch(n, true, |d| {
            if let Some(peer) = d.source {
                core.deliver(cx, peer, d.local, d.data, now);
            }
            true
        });
        self.rx.arm(cx);
        true
    }

    fn closing(&self) -> bool {
        self.core.closing
    }

    fn send_remote(&mut self, dest: Option<SocketAddr>, data: &[u8]) {
        if let Some(peer) = dest {
            // A refusal (queue full, too large) is counted by the send path.
            let _ = self.core.parts.send_to(peer, data);
        }
    }

    fn settle(&mut self, cx: &mut Cx<'_, H>) {
        if !self.core.parts.to_close.is_empty() {
            self.core.close_requested(cx);
        }
        self.core.parts.tx.finish(cx);
    }
}

impl<H: ServerHandler> Lane for ServerLane<H> {
    fn on_ready(&mut self, cx: &mut Cx<'_, H>, _source: SourceId, ready: Ready) -> Flow {
        if self.core.closing {
            return Flow::Drained;
        }
        // Receive errors on the unconnected socket (ICMP errors and the
        // like) are counted and never fatal for the server.
        let flow = receive(self, cx, ready);
        self.core.parts.tx.finish(cx);
        flow
    }

    fn on_timer(&mut self, cx: &mut Cx<'_, H>, timer: TimerId) {
        // After shutdown in the same round: deliver nothing more (held
        // datagrams are counted as discarded when the conditioner drops).
        if self.core.closing {
            return;
        }
        match conditioner_timer(&mut self.rx, &mut self.core.parts.tx, timer) {
            ConditionerTimer::Send => {} // `finish` below sends them
            ConditionerTimer::Receive => self.deliver_held(cx),
            ConditionerTimer::None => {
                let core = &mut self.core;
                if Some(timer) == core.sweep {
                    // Every quarter of the idle timeout (at most 1 s): also
                    // the moment to count drops no datagram reported yet.
                    self.rx.sync_kernel_drops(&core.parts.tx);
                    core.sweep_idle(cx);
                } else if let Some(t) = core.parts.session_timers.get(&timer).copied() {
                    core.session_timer(cx, timer, t);
                } else {
                    let mut ctx = core.parts.ctx(cx);
                    core.handler.timer(&mut ctx, timer);
                    if !core.parts.to_close.is_empty() {
                        core.close_requested(cx);
                    }
                }
            }
        }
        self.core.parts.tx.finish(cx);
    }
}
