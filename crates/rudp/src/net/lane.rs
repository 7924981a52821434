//! One lane of a server or a client: its connections on a keel-udp
//! datagram socket, one timer for all of them, and the round of work that
//! ends every batch and every timer ([`LaneState::pump`]): events to the
//! game's handler, then every datagram due, then the timer re-armed at the
//! earliest deadline.

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

/// The state of a lane, run by keel-udp as a datagram socket's handler.
pub(crate) struct LaneState<H: Handler> {
    pub(crate) handler: H,
    pub(crate) conns: Conns,
    pub(crate) lane: usize,
    buf: Vec<u8>,
    reply: Vec<u8>,
    /// The lane's one timer and the deadline it is armed for.
    timer: Option<(TimerId, Instant)>,
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
            timer: None,
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
        };
        f(&mut self.handler, &mut ctx)
    }

    /// A job from a [`Sender`](crate::Sender), then a round.
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
        self.pump(udp);
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
        self.arm(udp, next);
        if let (Some(p), Conns::Server { endpoint, .. }) = (&self.published, &self.conns) {
            if let Ok(mut s) = p.lock() {
                *s = endpoint.stats();
            }
        }
    }

    /// Keeps the lane's one timer at or before `next`. A timer armed for
    /// an earlier instant is left alone: when it fires early the round
    /// finds nothing due and re-arms, which costs less than moving the
    /// timer at every batch.
    fn arm(&mut self, udp: &mut DatagramSocketCtx<'_>, next: Option<Instant>) {
        let Some(next) = next else { return };
        match self.timer {
            Some((_, at)) if at <= next => {}
            old => {
                if let Some((id, _)) = old {
                    udp.cancel_timer(id);
                }
                self.timer = Some((udp.timer(next, None), next));
            }
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
        if self.timer.is_some_and(|(id, _)| id == timer) {
            self.timer = None;
            self.conns.handle_timeout(Instant::now());
            self.pump(ctx);
        }
    }
}
