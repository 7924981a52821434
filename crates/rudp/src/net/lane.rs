//! One lane of a server or a client: its connections on a keel-udp
//! datagram socket, one reactor timer for all of them (and for the
//! handler's own tick, [`Ctx::tick_at`], and a stop's deadline), and the
//! round of work that ends every batch and every timer
//! ([`LaneState::pump`]): events to the game's handler, then every
//! datagram due, then the lane's timer moved to the earliest deadline
//! ([`LaneState::arm`]).

use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use keel_reactor::TimerId;
use keel_udp::{DatagramSocketCtx, DatagramSocketHandler};

use crate::net::conns::{ClientEntry, Conns};
use crate::net::handler::{Ctx, Handler};
use crate::net::sender::{Job, Op, Post};
use crate::net::shared::ServerShared;
use crate::net::stop::{ConnectionReport, LaneStop};
use keel_rudp_proto::{ConnectionHandle, EndpointStats, CLOSE_HANDLER_PANIC};
use keel_rudp_proto::{Event, SendError, State};

/// The reason of the CLOSE sent when a lane's handler panicked.
pub(crate) const PANIC_REASON: &str = "handler panicked";

/// A stop under way on a lane.
struct LaneStopping {
    deadline: Instant,
    /// Who waits for the report (more than one if `stop` was called again).
    done: Vec<mpsc::Sender<LaneStop>>,
    connections: usize,
    undelivered: Vec<ConnectionReport>,
    finished: bool,
}

/// Events handed to the handler in one round at most (then the round ends
/// and the lane comes back at once).
const MAX_EVENTS_PER_ROUND: usize = 4096;
/// Datagrams sent in one round at most (likewise).
const MAX_DATAGRAMS_PER_ROUND: usize = 4096;

/// What a server's lane has beside a client's: where it publishes its
/// endpoint's counters, and what the server's lanes share.
pub(crate) struct ServerLane {
    pub(crate) published: Arc<Mutex<EndpointStats>>,
    pub(crate) shared: Arc<ServerShared>,
}

/// The state of a lane, run by keel-udp as a datagram socket's handler.
pub(crate) struct LaneState<H: Handler> {
    pub(crate) handler: H,
    pub(crate) conns: Conns,
    pub(crate) lane: usize,
    /// The datagram buffers' size (the buffers are the thread's: see
    /// [`take_buf`]).
    max_datagram: usize,
    /// The lane's one reactor timer (reusable: it stays registered
    /// between fires; made at the first [`LaneState::arm`]).
    timer: Option<TimerId>,
    /// The deadline `timer` is armed at, `None` while it is not armed.
    armed: Option<Instant>,
    /// When the handler asked for its [`Handler::tick`].
    tick: Option<Instant>,
    /// This lane, for [`Sender`](crate::Sender)s (set once it is running).
    pub(crate) me: Arc<OnceLock<Arc<dyn Post>>>,
    /// The endpoint's counters as of the last round (servers).
    published: Option<Arc<Mutex<EndpointStats>>>,
    /// The message of the handler's panic, once it panicked: it is never
    /// called again. Also published for the server's `failed_lanes`.
    poisoned: Option<String>,
    failure: Arc<Mutex<Option<String>>>,
    /// The code and reason new connections are closed with at once
    /// (a stop, a panic).
    ending: Option<(u64, Arc<str>)>,
    /// Boxed, like `final_report`: a lane (one per client) holds a pointer
    /// until it stops.
    stopping: Option<Box<LaneStopping>>,
    /// The stop's report and who waits for it, sent when the state drops.
    final_report: Option<Box<(LaneStop, Vec<mpsc::Sender<LaneStop>>)>>,
    /// Scratch for the handles of the lane's connections.
    handles: Vec<ConnectionHandle>,
    /// What the lanes of a server share: the map of client ids, the
    /// broadcast counters (`None` on a client).
    shared: Option<Arc<ServerShared>>,
    /// A client whose connection ended (its handler saw `disconnected`):
    /// its lane ticks no more.
    client_ended: bool,
}

impl<H: Handler> LaneState<H> {
    pub(crate) fn new(
        handler: H,
        conns: Conns,
        lane: usize,
        max_datagram: usize,
        me: Arc<OnceLock<Arc<dyn Post>>>,
        failure: Arc<Mutex<Option<String>>>,
        server: Option<ServerLane>,
    ) -> Self {
        let (published, shared) = match server {
            Some(s) => (Some(s.published), Some(s.shared)),
            None => (None, None),
        };
        LaneState {
            handler,
            conns,
            lane,
            max_datagram,
            timer: None,
            armed: None,
            tick: None,
            me,
            published,
            poisoned: None,
            failure,
            ending: None,
            stopping: None,
            final_report: None,
            handles: Vec::new(),
            shared,
            client_ended: false,
        }
    }

    /// Runs `f` with the handler and a context, unless the handler has
    /// panicked. A panic is caught here, at the lane's boundary: the
    /// handler is poisoned (never called again) and the lane's
    /// connections are closed with [`CLOSE_HANDLER_PANIC`]; the lane and
    /// the runtime go on.
    pub(crate) fn with_ctx(&mut self, now: Instant, f: impl FnOnce(&mut H, &mut Ctx<'_>)) {
        if self.poisoned.is_some() {
            return;
        }
        let mut ctx = Ctx {
            conns: &mut self.conns,
            now,
            lane: self.lane,
            post: self.me.get(),
            tick: &mut self.tick,
            ticks_off: self.client_ended,
        };
        let handler = &mut self.handler;
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(handler, &mut ctx))) {
            self.poison(now, panic_message(payload.as_ref()));
        }
    }

    /// The handler panicked: keep the message, close every connection
    /// with [`CLOSE_HANDLER_PANIC`], and close new ones as they come.
    fn poison(&mut self, now: Instant, message: String) {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert_with(|| message.clone());
        }
        self.poisoned = Some(message);
        self.tick = None;
        self.ending = Some((CLOSE_HANDLER_PANIC, PANIC_REASON.into()));
        self.close_every(now, CLOSE_HANDLER_PANIC, PANIC_REASON, None);
    }

    /// Closes every connection of the lane with `code` and `reason`, by
    /// `deadline` (else each by its `close_timeout`).
    fn close_every(&mut self, now: Instant, code: u64, reason: &str, deadline: Option<Instant>) {
        let mut handles = std::mem::take(&mut self.handles);
        self.conns.handles(&mut handles);
        for &h in &handles {
            if let Some(c) = self.conns.get_mut(h) {
                match deadline {
                    Some(d) => c.close_until(now, code, reason, d),
                    None => c.close(now, code, reason),
                }
            }
        }
        self.handles = handles;
    }

    /// Starts a graceful stop: every connection closes by `deadline`;
    /// when all are done (or at the deadline) `done` gets the lane's
    /// report and the socket closes.
    pub(crate) fn begin_stop(
        &mut self,
        udp: &mut DatagramSocketCtx<'_>,
        code: u64,
        reason: &str,
        deadline: Instant,
        done: mpsc::Sender<LaneStop>,
    ) {
        if let Some(st) = &mut self.stopping {
            match self.final_report.as_deref_mut() {
                Some((_, waiters)) => waiters.push(done),
                None => st.done.push(done),
            }
            return;
        }
        let now = Instant::now();
        self.stopping = Some(Box::new(LaneStopping {
            deadline,
            done: vec![done],
            connections: 0,
            undelivered: Vec::new(),
            finished: false,
        }));
        if self.poisoned.is_none() {
            self.ending = Some((code, reason.into()));
        }
        self.tick = None;
        self.close_every(now, code, reason, Some(deadline));
        self.arm(udp, Some(deadline));
        self.pump(udp);
    }

    /// This lane's part of the stop report, as it stands.
    fn lane_stop(&self) -> LaneStop {
        let (connections, undelivered) = match &self.stopping {
            Some(st) => (st.connections, st.undelivered.clone()),
            None => (0, Vec::new()),
        };
        LaneStop {
            lane: self.lane,
            connections,
            undelivered,
            failure: self.poisoned.clone(),
        }
    }

    /// During a stop, after a round: once no connection is still
    /// closing (or the deadline passed), report and close the socket.
    fn check_stop(&mut self, now: Instant) {
        let Some(st) = &self.stopping else { return };
        if st.finished {
            return;
        }
        if now < st.deadline {
            let mut handles = std::mem::take(&mut self.handles);
            self.conns.handles(&mut handles);
            let busy = handles.iter().any(|&h| {
                self.conns.get(h).is_some_and(|c| {
                    !matches!(c.state(), State::Closed | State::Draining) || c.has_events()
                })
            });
            self.handles = handles;
            if busy {
                return;
            }
        }
        // Out of time: connections still closing (closed before the stop,
        // with a later deadline of their own) are reported as they are.
        let mut handles = std::mem::take(&mut self.handles);
        self.conns.handles(&mut handles);
        for &h in &handles {
            let Some(c) = self.conns.get(h) else { continue };
            if matches!(c.state(), State::Closed | State::Draining) {
                continue;
            }
            let undelivered = c.undelivered();
            let peer = self.conns.peer_addr(h);
            if let Some(st) = &mut self.stopping {
                st.connections += 1;
                if undelivered.is_empty() {
                    continue;
                }
                st.undelivered.push(ConnectionReport {
                    lane: self.lane,
                    conn: h,
                    peer,
                    undelivered,
                });
            }
        }
        self.handles = handles;
        let report = self.lane_stop();
        if let Some(st) = &mut self.stopping {
            st.finished = true;
            // Sent when the lane's state is dropped, once its socket is
            // closed: whoever gets the report sees the lane stopped.
            let waiters = std::mem::take(&mut st.done);
            self.final_report = Some(Box::new((report, waiters)));
        }
        if let Some(me) = self.me.get() {
            me.close();
        }
    }

    /// A connection ended: during a stop, count it and keep what it left
    /// undelivered.
    fn record_end(&mut self, conn: ConnectionHandle) {
        let Some(st) = &mut self.stopping else { return };
        if st.finished {
            return;
        }
        st.connections += 1;
        if let Some(c) = self.conns.get(conn) {
            let undelivered = c.undelivered();
            if !undelivered.is_empty() {
                st.undelivered.push(ConnectionReport {
                    lane: self.lane,
                    conn,
                    peer: self.conns.peer_addr(conn),
                    undelivered,
                });
            }
        }
    }

    /// A server's connection with a connect token reached its handler's
    /// `connected` (`up`) or `disconnected`: the map of client ids
    /// follows.
    fn record_client(&mut self, conn: ConnectionHandle, up: bool) {
        let Some(shared) = &self.shared else { return };
        let Some(c) = self.conns.get(conn) else {
            return;
        };
        let Some(id) = c.token_claims().map(|t| t.client_id) else {
            return;
        };
        let entry = ClientEntry {
            lane: self.lane,
            conn,
            cid: c.connection_id(),
        };
        if up {
            shared.client_ids.connected(id, entry);
        } else {
            shared.client_ids.disconnected(id, entry);
        }
    }

    /// A [`Server::broadcast`](crate::Server::broadcast): `data` on
    /// `channel` of every connection of the lane in
    /// [`State::Connected`]; what a connection refuses goes to the
    /// handler's `send_failed` and the server's
    /// [`BroadcastStats`](crate::BroadcastStats). The round follows as
    /// for a job.
    pub(crate) fn broadcast(&mut self, udp: &mut DatagramSocketCtx<'_>, channel: u8, data: &[u8]) {
        let now = Instant::now();
        let mut handles = std::mem::take(&mut self.handles);
        self.conns.connected(&mut handles);
        let (mut queued, mut backpressure, mut budget, mut other) = (0, 0, 0, 0);
        for &h in &handles {
            let Some(c) = self.conns.get_mut(h) else {
                continue;
            };
            match c.send(channel, data) {
                Ok(_) => queued += 1,
                Err(e) => {
                    match e {
                        SendError::Backpressure { .. } => backpressure += 1,
                        SendError::BudgetSpent { .. } => budget += 1,
                        _ => other += 1,
                    }
                    self.with_ctx(now, |hd, ctx| hd.send_failed(ctx, h, e));
                }
            }
        }
        self.handles = handles;
        if let Some(shared) = &self.shared {
            shared.broadcasts.add(queued, backpressure, budget, other);
        }
        if self.armed.is_none_or(|at| at > now) {
            self.arm(udp, Some(now));
        }
    }

    /// A job from a [`Sender`](crate::Sender); a round follows at once.
    pub(crate) fn run_job(&mut self, udp: &mut DatagramSocketCtx<'_>, job: Job) {
        let now = Instant::now();
        let conn = job.conn;
        let current = self
            .conns
            .get(conn)
            .is_some_and(|c| job.cid.is_none_or(|id| id == c.connection_id()));
        let result = match (current, job.op) {
            (false, _) => Err(SendError::Closed),
            (true, Op::Send { channel, data }) => self
                .conns
                .get_mut(conn)
                .map_or(Err(SendError::Closed), |c| {
                    c.send(channel, &data).map(|_| ())
                }),
            (true, Op::Close { code, reason }) => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.close(now, code, &reason);
                }
                Ok(())
            }
        };
        if let Err(e) = result {
            self.with_ctx(now, |h, ctx| h.send_failed(ctx, conn, e));
        }
        // The round runs from the timer, due now, rather than here: the
        // jobs waiting in the lane's inbox all run first, so what they
        // queued shares packets instead of taking one each. A timer that
        // is due already (an earlier job's) brings that round as it is.
        if self.armed.is_none_or(|at| at > now) {
            self.arm(udp, Some(now));
        }
    }

    /// The round of work after a batch, a timer or a job: events to the
    /// handler, datagrams out, the timer re-armed.
    pub(crate) fn pump(&mut self, udp: &mut DatagramSocketCtx<'_>) {
        let now = Instant::now();
        let mut more = false;
        let mut events = 0;
        while let Some((conn, event)) = self.conns.poll_event() {
            match event {
                Event::Connected => match &self.ending {
                    // Stopping or poisoned: a new connection ends at once.
                    Some((code, reason)) => {
                        let (code, reason) = (*code, reason.clone());
                        let deadline = self.stopping.as_ref().map(|s| s.deadline);
                        if let Some(c) = self.conns.get_mut(conn) {
                            match deadline {
                                Some(d) => c.close_until(now, code, &reason, d),
                                None => c.close(now, code, &reason),
                            }
                        }
                    }
                    None => {
                        self.record_client(conn, true);
                        self.with_ctx(now, |h, ctx| h.connected(ctx, conn))
                    }
                },
                Event::Message { channel, data } => {
                    self.with_ctx(now, |h, ctx| h.message(ctx, conn, channel, &data));
                    if let Some(c) = self.conns.get_mut(conn) {
                        c.recycle(data);
                    }
                }
                Event::Disconnected(reason) => {
                    self.record_end(conn);
                    self.record_client(conn, false);
                    if matches!(self.conns, Conns::Client { .. }) {
                        // The client's one connection is over: its tick
                        // with it (and `tick_at` is ignored from now on).
                        self.client_ended = true;
                        self.tick = None;
                    }
                    self.with_ctx(now, |h, ctx| h.disconnected(ctx, conn, &reason))
                }
                // An event a newer keel-rudp-proto adds, before this
                // driver hands it to handlers.
                _ => {}
            }
            events += 1;
            if events == MAX_EVENTS_PER_ROUND {
                more = true;
                break;
            }
        }
        let mut sent = 0;
        let mut buf = take_buf(self.max_datagram);
        while let Some((to, from, n)) = self.conns.poll_transmit(now, &mut buf) {
            // A full send queue drops it (counted by keel-udp); the
            // protocol resends what was reliable.
            let _ = udp.send_from(to, from, &buf[..n]);
            sent += 1;
            if sent == MAX_DATAGRAMS_PER_ROUND {
                more = true;
                break;
            }
        }
        give_buf(buf);
        // Also removes the connections whose end the handler just saw.
        let next = if more {
            Some(now)
        } else {
            self.conns.poll_timeout()
        };
        let stop = self
            .stopping
            .as_ref()
            .filter(|st| !st.finished)
            .map(|st| st.deadline);
        let next = [next, self.tick, stop].into_iter().flatten().min();
        self.arm(udp, next);
        if let (Some(p), Conns::Server { endpoint, .. }) = (&self.published, &self.conns) {
            if let Ok(mut s) = p.lock() {
                *s = endpoint.stats();
            }
        }
        if !more {
            self.check_stop(now);
        }
    }

    /// Moves the lane's one reactor timer to `next`, the earliest of its
    /// endpoint's deadline, the handler's tick and a stop's deadline
    /// (`None`: disarmed). The timer is reusable and moved in place, so
    /// however the deadline moves (earlier at a send, later at an ack) the
    /// lane holds one timer and the reactor one entry for it; a deadline
    /// that did not change costs nothing.
    fn arm(&mut self, udp: &mut DatagramSocketCtx<'_>, next: Option<Instant>) {
        if next == self.armed && self.timer.is_some() {
            return;
        }
        let id = match self.timer {
            Some(id) => id,
            None => self.new_timer(udp),
        };
        let moved = match next {
            Some(at) => udp.set_timer(id, at),
            None => udp.unset_timer(id).map(|_| ()),
        };
        if moved.is_err() {
            // Only this lane cancels its timer, and it never does: this is
            // a guard, not a path. A new timer keeps the lane waking.
            let id = self.new_timer(udp);
            if let Some(at) = next {
                let _ = udp.set_timer(id, at);
            }
        }
        self.armed = next;
    }

    /// Makes the lane's reactor timer (unarmed).
    fn new_timer(&mut self, udp: &mut DatagramSocketCtx<'_>) -> TimerId {
        let id = udp.reusable_timer();
        self.timer = Some(id);
        id
    }

    /// Whether the client's connection has ended.
    pub(crate) fn client_closed(&self) -> bool {
        matches!(&self.conns, Conns::Client { conn, .. } if conn.state() == State::Closed)
    }
}

impl<H: Handler> Drop for LaneState<H> {
    fn drop(&mut self) {
        // Connections still held end with the lane, unseen by the map's
        // `disconnected`.
        if let Some(shared) = &self.shared {
            shared.client_ids.lane_gone(self.lane);
        }
        if let Some((report, waiters)) = self.final_report.take().map(|b| *b) {
            for w in waiters {
                let _ = w.send(LaneStop {
                    undelivered: report.undelivered.clone(),
                    failure: report.failure.clone(),
                    ..report
                });
            }
        }
    }
}

thread_local! {
    /// The datagram buffer of the lanes run on this thread: a lane needs
    /// one only within a call, and a client is a lane of its own (a
    /// thousand clients on a thread held two each, 2.9 KiB a client).
    static LANE_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's datagram buffer, at least `len` bytes long (a fresh one
/// if it is taken already).
fn take_buf(len: usize) -> Vec<u8> {
    let mut v = LANE_BUF
        .try_with(|b| std::mem::take(&mut *b.borrow_mut()))
        .unwrap_or_default();
    if v.len() < len {
        v.resize(len, 0);
    }
    v
}

/// Gives the buffer from [`take_buf`] back (the larger one is kept).
fn give_buf(v: Vec<u8>) {
    let _ = LANE_BUF.try_with(|b| {
        let mut b = b.borrow_mut();
        if v.len() > b.len() {
            *b = v;
        }
    });
}

/// A panic's message, if it was a string.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

impl<H: Handler> DatagramSocketHandler for LaneState<H> {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        self.pump(ctx);
    }

    fn batch_start(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>) {
        self.conns.prefetch(datagrams);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        let now = Instant::now();
        let local = ctx.arrived_at();
        let mut buf = take_buf(self.max_datagram);
        if let Some(n) = self.conns.datagram(now, from, local, data, &mut buf) {
            let _ = ctx.send_from(from, local, &buf[..n]);
        }
        give_buf(buf);
    }

    fn batch_end(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        self.pump(ctx);
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, timer: TimerId) {
        if self.timer != Some(timer) {
            return;
        }
        // A fire leaves the reusable timer unarmed (until `arm` below).
        self.armed = None;
        let now = Instant::now();
        self.conns.handle_timeout(now);
        if self.tick.is_some_and(|at| at <= now) {
            self.tick = None;
            if !self.client_ended {
                self.with_ctx(now, |h, ctx| h.tick(ctx));
            }
        }
        self.pump(ctx);
    }
}
