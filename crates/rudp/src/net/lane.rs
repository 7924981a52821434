//! One lane of a server or a client: its connections on a keel-udp
//! datagram socket, one timer for all of them (and for the handler's own
//! tick, [`Ctx::tick_at`]), and the round of work that
//! ends every batch and every timer ([`LaneState::pump`]): events to the
//! game's handler, then every datagram due, then the lane's wake-up made
//! sure of at the earliest deadline ([`LaneState::arm`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use keel_reactor::TimerId;
use keel_udp::{DatagramSocketCtx, DatagramSocketHandler};

use crate::connection::{Event, SendError, State};
use crate::endpoint::EndpointStats;
use crate::net::conns::Conns;
use crate::net::handler::{Ctx, Handler};
use crate::net::sender::{Job, Op, Post};

/// Events handed to the handler in one round at most (then the round ends
/// and the lane comes back at once).
const MAX_EVENTS_PER_ROUND: usize = 4096;
/// Datagrams sent in one round at most (likewise).
const MAX_DATAGRAMS_PER_ROUND: usize = 4096;
/// Reactor timers a lane keeps armed at most (see [`LaneState::arm`]).
const MAX_ARMED: usize = 4;

/// The state of a lane, run by keel-udp as a datagram socket's handler.
pub(crate) struct LaneState<H: Handler> {
    pub(crate) handler: H,
    pub(crate) conns: Conns,
    pub(crate) lane: usize,
    buf: Vec<u8>,
    reply: Vec<u8>,
    /// The lane's timer: the reactor timers armed (at most
    /// `MAX_ARMED`) and their deadlines; see [`LaneState::arm`].
    armed: [Option<(TimerId, Instant)>; MAX_ARMED],
    /// When the handler asked for its [`Handler::tick`].
    tick: Option<Instant>,
    /// This lane, for [`Sender`](crate::Sender)s (set once it is running).
    pub(crate) me: Arc<OnceLock<Arc<dyn Post>>>,
    /// The endpoint's counters as of the last round (servers).
    published: Option<Arc<Mutex<EndpointStats>>>,
}

impl<H: Handler> LaneState<H> {
    pub(crate) fn new(
        handler: H,
        conns: Conns,
        lane: usize,
        max_datagram: usize,
        me: Arc<OnceLock<Arc<dyn Post>>>,
        published: Option<Arc<Mutex<EndpointStats>>>,
    ) -> Self {
        LaneState {
            handler,
            conns,
            lane,
            buf: vec![0; max_datagram],
            reply: vec![0; max_datagram],
            armed: [None; MAX_ARMED],
            tick: None,
            me,
            published,
        }
    }

    /// Runs `f` with the handler and a context.
    pub(crate) fn with_ctx<R>(
        &mut self,
        now: Instant,
        f: impl FnOnce(&mut H, &mut Ctx<'_>) -> R,
    ) -> R {
        let mut ctx = Ctx {
            conns: &mut self.conns,
            now,
            lane: self.lane,
            post: self.me.get(),
            tick: &mut self.tick,
        };
        f(&mut self.handler, &mut ctx)
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
        // The round runs from a timer due now rather than here: the jobs
        // waiting in the lane's inbox all run first, so what they queued
        // shares packets instead of taking one each.
        self.arm(udp, Some(now));
    }

    /// The round of work after a batch, a timer or a job: events to the
    /// handler, datagrams out, the timer re-armed.
    pub(crate) fn pump(&mut self, udp: &mut DatagramSocketCtx<'_>) {
        let now = Instant::now();
        let mut more = false;
        let mut events = 0;
        while let Some((conn, event)) = self.conns.poll_event() {
            match event {
                Event::Connected => self.with_ctx(now, |h, ctx| h.connected(ctx, conn)),
                Event::Message { channel, data } => {
                    self.with_ctx(now, |h, ctx| h.message(ctx, conn, channel, &data));
                    if let Some(c) = self.conns.get_mut(conn) {
                        c.recycle(data);
                    }
                }
                Event::Disconnected(reason) => {
                    self.with_ctx(now, |h, ctx| h.disconnected(ctx, conn, &reason))
                }
            }
            events += 1;
            if events == MAX_EVENTS_PER_ROUND {
                more = true;
                break;
            }
        }
        let mut sent = 0;
        while let Some((to, from, n)) = self.conns.poll_transmit(now, &mut self.buf) {
            // A full send queue drops it (counted by keel-udp); the
            // protocol resends what was reliable.
            let _ = udp.send_from(to, from, &self.buf[..n]);
            sent += 1;
            if sent == MAX_DATAGRAMS_PER_ROUND {
                more = true;
                break;
            }
        }
        // Also removes the connections whose end the handler just saw.
        let next = if more {
            Some(now)
        } else {
            self.conns.poll_timeout()
        };
        let next = match (next, self.tick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.arm(udp, next);
        if let (Some(p), Conns::Server { endpoint, .. }) = (&self.published, &self.conns) {
            if let Ok(mut s) = p.lock() {
                *s = endpoint.stats();
            }
        }
    }

    /// Makes sure the lane wakes by `next`: the lane's one timing need is
    /// its endpoint's earliest deadline. A reactor timer already armed at
    /// or before `next` does (it may fire early: the round then finds
    /// nothing due and arms again). Otherwise a new one is added and the
    /// later ones are left to fire (cheap, empty rounds) rather than
    /// cancelled: the reactor keeps a cancelled timer's entry in its heap
    /// until its deadline, so cancelling a keepalive a second away at
    /// every packet would grow that heap with the packet rate. Only with
    /// `MAX_ARMED` timers out is the latest cancelled.
    fn arm(&mut self, udp: &mut DatagramSocketCtx<'_>, next: Option<Instant>) {
        let Some(next) = next else { return };
        if self.armed.iter().flatten().any(|&(_, at)| at <= next) {
            return;
        }
        let slot = match self.armed.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                let (latest, _) = self
                    .armed
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, a)| a.map(|(_, at)| at))
                    .expect("MAX_ARMED > 0");
                if let Some((id, _)) = self.armed[latest].take() {
                    udp.cancel_timer(id);
                }
                latest
            }
        };
        self.armed[slot] = Some((udp.timer(next, None), next));
    }

    /// Closes every connection of the lane with `code` and `reason` and
    /// sends their CLOSE packets now: the lane's last round before its
    /// socket closes. The handler sees no `disconnected` for them (it
    /// asked for the end).
    pub(crate) fn close_all(&mut self, udp: &mut DatagramSocketCtx<'_>, code: u64, reason: &str) {
        let now = Instant::now();
        let mut handles = Vec::new();
        self.conns.handles(&mut handles);
        for h in handles {
            if let Some(c) = self.conns.get_mut(h) {
                c.close(now, code, reason);
            }
        }
        while let Some((to, from, n)) = self.conns.poll_transmit(now, &mut self.buf) {
            let _ = udp.send_from(to, from, &self.buf[..n]);
        }
    }

    /// Whether the client's connection has ended.
    pub(crate) fn client_closed(&self) -> bool {
        matches!(&self.conns, Conns::Client { conn, .. } if conn.state() == State::Closed)
    }
}

impl<H: Handler> DatagramSocketHandler for LaneState<H> {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        self.pump(ctx);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        let now = Instant::now();
        let local = ctx.arrived_at();
        if let Some(n) = self.conns.datagram(now, from, local, data, &mut self.reply) {
            let _ = ctx.send_from(from, local, &self.reply[..n]);
        }
    }

    fn batch_end(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        self.pump(ctx);
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, timer: TimerId) {
        let Some(fired) = self
            .armed
            .iter_mut()
            .find(|a| a.is_some_and(|(id, _)| id == timer))
        else {
            return;
        };
        *fired = None;
        let now = Instant::now();
        self.conns.handle_timeout(now);
        if self.tick.is_some_and(|at| at <= now) {
            self.tick = None;
            self.with_ctx(now, |h, ctx| h.tick(ctx));
        }
        self.pump(ctx);
    }
}
