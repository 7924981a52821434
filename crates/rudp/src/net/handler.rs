//! What a game implements ([`Handler`]) and what it gets to act with
//! ([`Ctx`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::net::conns::Conns;
use crate::net::sender::{Post, Sender};
use keel_rudp_proto::ConnectionHandle;
use keel_rudp_proto::TokenClaims;
use keel_rudp_proto::{DisconnectReason, MessageId, SendError, State, Stats, Undelivered};

/// What a game does with its connections. Its methods run on the lane that
/// owns the connection (a server lane, or the client's lane), one at a
/// time; what they send leaves with the lane's next batched send.
pub trait Handler: Send + 'static {
    /// A connection finished its handshake (on a server, a new client; on a
    /// client, the server accepted).
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        let _ = (ctx, conn);
    }

    /// A message arrived on `channel`.
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]);

    /// The connection ended; `reason` says who ended it and why (a close's
    /// code and reason reach both sides). [`Ctx::undelivered`] tells, here,
    /// what the peer did not acknowledge. A close from this side comes
    /// here once it is done (flushed and its CLOSE acknowledged, or its
    /// `close_timeout` passed), a stop's too. The handle is invalid
    /// afterwards.
    ///
    /// A panic in any method of a handler is caught at the lane: the
    /// handler is not called again, and the lane's connections are
    /// closed with [`CLOSE_HANDLER_PANIC`](crate::CLOSE_HANDLER_PANIC)
    /// ([`Server::failed_lanes`](crate::Server::failed_lanes)).
    fn disconnected(
        &mut self,
        ctx: &mut Ctx<'_>,
        conn: ConnectionHandle,
        reason: &DisconnectReason,
    ) {
        let _ = (ctx, conn, reason);
    }

    /// A message from a [`Sender`] was refused on the lane (backpressure,
    /// the server's send budget spent, a closed connection, an unknown
    /// channel); nothing was queued.
    fn send_failed(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, error: SendError) {
        let _ = (ctx, conn, error);
    }

    /// The time asked for with [`Ctx::tick_at`] came: the lane's own game
    /// tick (send this tick's snapshot or input, then ask for the next).
    /// What it sends leaves with the round that follows.
    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx;
    }
}

/// A handler's view of its lane: send, close, read stats, make
/// [`Sender`]s for other threads.
pub struct Ctx<'a> {
    pub(crate) conns: &'a mut Conns,
    pub(crate) now: Instant,
    pub(crate) lane: usize,
    pub(crate) post: Option<&'a Arc<dyn Post>>,
    /// The lane's pending [`Handler::tick`], if one was asked for.
    pub(crate) tick: &'a mut Option<Instant>,
    /// A client whose connection ended: [`Ctx::tick_at`] is ignored.
    pub(crate) ticks_off: bool,
}

impl Ctx<'_> {
    /// Queues `data` on `channel` of `conn`; it leaves with the lane's
    /// next batched send.
    ///
    /// # Errors
    ///
    /// [`SendError::Closed`] also for a handle that names no connection;
    /// the others as [`Connection::send`](keel_rudp_proto::Connection::send).
    pub fn send(
        &mut self,
        conn: ConnectionHandle,
        channel: u8,
        data: &[u8],
    ) -> Result<MessageId, SendError> {
        match self.conns.get_mut(conn) {
            Some(c) => c.send(channel, data),
            None => Err(SendError::Closed),
        }
    }

    /// Closes `conn` with `code` and `reason` (cut to 128 bytes); both
    /// sides' `disconnected` see them. Its queued reliable messages are
    /// flushed first and the CLOSE repeated until acknowledged, by the
    /// connection's `close_timeout`; this side's `disconnected` comes then.
    pub fn close(&mut self, conn: ConnectionHandle, code: u64, reason: &str) {
        let now = self.now;
        if let Some(c) = self.conns.get_mut(conn) {
            c.close(now, code, reason);
        }
    }

    /// What `conn`'s peer has not acknowledged (messages per channel, the
    /// CLOSE): in [`Handler::disconnected`], what was lost with it.
    pub fn undelivered(&self, conn: ConnectionHandle) -> Option<Undelivered> {
        self.conns.get(conn).map(|c| c.undelivered())
    }

    /// `conn`'s counters and estimates (RTT, loss, queued bytes).
    pub fn stats(&self, conn: ConnectionHandle) -> Option<Stats> {
        self.conns.get(conn).map(|c| c.stats())
    }

    /// What `conn`'s connect token said (client id, user data), on a
    /// server that requires tokens; `None` in insecure mode.
    pub fn token_claims(&self, conn: ConnectionHandle) -> Option<&TokenClaims> {
        self.conns.get(conn).and_then(|c| c.token_claims())
    }

    /// The address `conn`'s packets come from (its latest, on a server).
    pub fn peer_addr(&self, conn: ConnectionHandle) -> Option<SocketAddr> {
        self.conns.peer_addr(conn)
    }

    /// Fills `out` with the handles of every connection this lane holds,
    /// closing ones included (reuse the vector: no allocation once it is
    /// large enough). A connection stays held after its close begins
    /// ([`State::Closing`], [`State::Draining`]) until its
    /// [`Handler::disconnected`] has run, and a send to it then fails
    /// with [`SendError::Closed`]: to send to the players, list them with
    /// [`Ctx::connected`].
    pub fn connections(&self, out: &mut Vec<ConnectionHandle>) {
        self.conns.handles(out);
    }

    /// Fills `out` with the handles of this lane's connections in
    /// [`State::Connected`], the ones a send can reach (reuse the vector:
    /// no allocation once it is large enough). A game tick's snapshot
    /// goes to these.
    pub fn connected(&self, out: &mut Vec<ConnectionHandle>) {
        self.conns.connected(out);
    }

    /// Where `conn` is in its life: [`State::Connected`] while messages
    /// flow, [`State::Closing`] once this side closed it (flushing, then
    /// repeating its CLOSE), [`State::Draining`] once the peer did (still
    /// held a while, to acknowledge its CLOSE), [`State::Closed`] once
    /// done; in [`Handler::disconnected`] it is one of the last two. A
    /// client's
    /// connection is [`State::Handshaking`] until `connected`. `None` for
    /// a handle that names no connection (one whose `disconnected` has
    /// run, or a stale one).
    pub fn state(&self, conn: ConnectionHandle) -> Option<State> {
        self.conns.get(conn).map(|c| c.state())
    }

    /// A [`Sender`] for `conn`, to send from other threads; `None` for a
    /// handle that names no connection (or before the lane is running).
    pub fn sender(&self, conn: ConnectionHandle) -> Option<Sender> {
        let c = self.conns.get(conn)?;
        let cid = match self.conns {
            Conns::Server { .. } => Some(c.connection_id()),
            Conns::Client { .. } => None,
        };
        Some(Sender {
            lane: self.post?.clone(),
            lane_index: self.lane,
            conn,
            cid,
        })
    }

    /// Asks for [`Handler::tick`] on this lane at `at` (at once if it has
    /// passed), replacing any earlier request: one pending tick per lane.
    /// A client's tick ends with its connection: once its
    /// [`Handler::disconnected`] runs, a pending request is dropped and
    /// this is ignored (no tick ever runs after `disconnected`).
    /// A fixed-rate game tick asks for the next one from `tick` itself;
    /// computing it from the first tick's time (`first + n × period`)
    /// keeps the rate without drift. The lane's one timer serves both its
    /// connections' deadlines and this, so a tick costs no thread hop, no
    /// allocation and no wake-up of another thread, unlike a
    /// [`Server::post`](crate::Server::post) from a game loop elsewhere.
    ///
    /// # Examples
    ///
    /// A client that sends its input 60 times a second, on its own lane:
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use keel_rudp::{ConnectionHandle, Ctx, Handler};
    ///
    /// const TICK: Duration = Duration::from_nanos(16_666_667);
    ///
    /// struct Input {
    ///     conn: Option<ConnectionHandle>,
    ///     next: Option<Instant>,
    /// }
    ///
    /// impl Handler for Input {
    ///     fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
    ///         self.conn = Some(conn);
    ///         let first = ctx.now() + TICK;
    ///         self.next = Some(first);
    ///         ctx.tick_at(first);
    ///     }
    ///
    ///     fn tick(&mut self, ctx: &mut Ctx<'_>) {
    ///         let (Some(conn), Some(due)) = (self.conn, self.next) else { return };
    ///         let _ = ctx.send(conn, 0, b"input");
    ///         let next = due + TICK;
    ///         self.next = Some(next);
    ///         ctx.tick_at(next);
    ///     }
    ///
    ///     fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
    /// }
    /// ```
    pub fn tick_at(&mut self, at: Instant) {
        if !self.ticks_off {
            *self.tick = Some(at);
        }
    }

    /// Withdraws a pending [`Ctx::tick_at`] request.
    pub fn cancel_tick(&mut self) {
        *self.tick = None;
    }

    /// This lane's index (0 on a client).
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// The time the lane took for this round of work.
    pub fn now(&self) -> Instant {
        self.now
    }
}
