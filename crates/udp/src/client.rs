//! The client: one connected socket on a lane.

use keel_reactor::PostError;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{
    Flow, Handle, Lane, LaneCtx, LaneHandle, LaneOptions, Ready, SourceId, TimerId,
};

use crate::config::EndpointConfig;
use crate::counters::{CounterSnapshot, Counters};
use crate::endpoint::{
    self, conditioner_timer, receive, ConditionerTimer, Datagram, DropSignal, Endpoint, Rx, Timers,
    Tx,
};
use crate::error::{DisconnectReason, SendError};
use crate::socket::{self, SocketBuffers};

/// Client settings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientConfig {
    /// Local address to bind; `None` binds the unspecified address of the
    /// server's family, port 0.
    pub local: Option<SocketAddr>,
    /// Socket, batch and queue settings.
    pub endpoint: EndpointConfig,
}

/// What a client does. Its methods run on the client's lane.
pub trait ClientHandler: Send + 'static {
    /// The socket is connected and registered: start sending here.
    fn started(&mut self, ctx: &mut ClientCtx<'_>) {
        let _ = ctx;
    }

    /// A datagram from the server. Replies sent here go out at the end of
    /// the receive batch.
    fn datagram(&mut self, ctx: &mut ClientCtx<'_>, data: &[u8]);

    /// The client ended: the server's port is closed
    /// ([`DisconnectReason::Refused`], from ICMP port unreachable), a socket
    /// error, [`Client::close`] or [`ClientCtx::close`]. The socket is closed
    /// after this returns.
    fn disconnected(&mut self, ctx: &mut ClientCtx<'_>, reason: DisconnectReason) {
        let _ = (ctx, reason);
    }

    /// A timer made with [`ClientCtx::timer`] fired.
    fn timer(&mut self, ctx: &mut ClientCtx<'_>, timer: TimerId) {
        let _ = (ctx, timer);
    }
}

/// The client's context: its send path and timers.
pub struct ClientCtx<'a> {
    tx: &'a mut Tx,
    timers: &'a mut dyn Timers,
    peer: SocketAddr,
    close: &'a mut bool,
}

impl ClientCtx<'_> {
    /// Sends a datagram to the server (at the end of the current batch, or
    /// when the handler returns).
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`] over the family's payload limit (nothing is
    /// sent), [`SendError::QueueFull`] when the socket blocks and the queue
    /// is at its bound. Both are counted.
    pub fn send(&mut self, data: &[u8]) -> Result<(), SendError> {
        self.tx.send(None, data)
    }

    /// Sends what is pending now instead of when the handler returns.
    pub fn flush(&mut self) {
        self.tx.flush();
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This client's counters so far.
    pub fn counters(&self) -> CounterSnapshot {
        self.tx.counters.snapshot()
    }

    /// Schedules a timer on this client's lane.
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timers.add(deadline, period)
    }

    /// Cancels a timer; it will not fire again.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }

    /// Closes the client when the handler returns
    /// ([`DisconnectReason::Closed`]).
    pub fn close(&mut self) {
        *self.close = true;
    }
}

pub(crate) struct ClientLane<H: ClientHandler> {
    handler: H,
    rx: Rx,
    tx: Tx,
    peer: SocketAddr,
    close: bool,
    /// `end` ran: the disconnect was reported and the lane is closing.
    ended: bool,
    /// Told when this client's state is gone (see `Client::close_and_wait`);
    /// the last field, so it signals after the socket closed.
    on_dropped: DropSignal,
}

macro_rules! cctx {
    ($lane:expr, $cx:expr) => {
        ClientCtx {
            tx: &mut $lane.tx,
            timers: $cx,
            peer: $lane.peer,
            close: &mut $lane.close,
        }
    };
}

impl<H: ClientHandler> ClientLane<H> {
    fn end(&mut self, cx: &mut LaneCtx<'_, Self>, reason: DisconnectReason) {
        self.ended = true;
        self.tx.flush();
        let mut ctx = cctx!(self, cx);
        self.handler.disconnected(&mut ctx, reason);
        self.tx.flush();
        // Last (it re-points the socket): no more arrivals; what is still
        // queued and the drops no datagram reported are counted.
        self.rx.close_door(&self.tx);
        cx.close();
    }

    /// One datagram (just received, or held by the receive conditioner)
    /// to the handler; false once the handler closed the client.
    #[inline(always)]
    fn deliver(
        handler: &mut H,
        tx: &mut Tx,
        cx: &mut LaneCtx<'_, Self>,
        peer: SocketAddr,
        close: &mut bool,
        d: Datagram<'_>,
    ) -> bool {
        if *close {
            return false;
        }
        let mut ctx = ClientCtx {
            tx,
            timers: cx,
            peer,
            close,
        };
        handler.datagram(&mut ctx, d.data);
        !*close
    }

    /// Flushes, then ends the client if something asked for it (a refused
    /// send, a close); returns whether it ended.
    fn finish_or_end(&mut self, cx: &mut LaneCtx<'_, Self>) -> bool {
        self.tx.finish(cx);
        if self.tx.refused {
            self.end(cx, DisconnectReason::Refused);
            return true;
        }
        if self.close {
            self.end(cx, DisconnectReason::Closed);
            return true;
        }
        false
    }
}

impl<H: ClientHandler> Endpoint for ClientLane<H> {
    fn sides(&mut self) -> (&mut Rx, &mut Tx) {
        (&mut self.rx, &mut self.tx)
    }

    fn batch(&mut self, cx: &mut LaneCtx<'_, Self>, n: usize) -> bool {
        let ClientLane {
            handler,
            rx,
            tx,
            peer,
            close,
            ..
        } = self;
        rx.deliver_batch(n, false, |d| {
            Self::deliver(handler, tx, cx, *peer, close, d)
        });
        rx.arm(cx);
        !self.close
    }

    /// ICMP port unreachable (`ECONNREFUSED`) or another socket error ends
    /// the client.
    fn recv_error(&mut self, cx: &mut LaneCtx<'_, Self>, e: io::Error) -> bool {
        let reason = if e.kind() == io::ErrorKind::ConnectionRefused {
            DisconnectReason::Refused
        } else {
            DisconnectReason::Error(e.kind())
        };
        self.end(cx, reason);
        false
    }

    fn closing(&self) -> bool {
        self.ended
    }

    fn send_remote(&mut self, _dest: Option<SocketAddr>, data: &[u8]) {
        // To the connected peer; a refusal is counted by the send path.
        let _ = self.tx.send(None, data);
    }

    fn settle(&mut self, cx: &mut LaneCtx<'_, Self>) {
        self.finish_or_end(cx);
    }
}

impl<H: ClientHandler> Lane for ClientLane<H> {
    fn on_ready(&mut self, cx: &mut LaneCtx<'_, Self>, _source: SourceId, ready: Ready) -> Flow {
        if self.ended {
            return Flow::Drained;
        }
        let flow = receive(self, cx, ready);
        if self.ended || self.finish_or_end(cx) {
            return Flow::Drained;
        }
        flow
    }

    fn on_timer(&mut self, cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
        // Ended earlier in this round: nothing more is delivered or sent.
        if self.ended {
            return;
        }
        match conditioner_timer(&mut self.rx, &mut self.tx, timer) {
            ConditionerTimer::Send => {} // `settle` below sends them
            ConditionerTimer::Receive => {
                let ClientLane {
                    handler,
                    rx,
                    tx,
                    peer,
                    close,
                    ..
                } = self;
                rx.deliver_held(|d| Self::deliver(handler, tx, cx, *peer, close, d));
                rx.arm(cx);
            }
            ConditionerTimer::None => {
                let mut ctx = cctx!(self, cx);
                self.handler.timer(&mut ctx, timer);
            }
        }
        self.settle(cx);
    }
}

/// A client: one connected UDP socket on a lane. `Send + Sync + Clone`.
///
/// # Examples
///
/// ```
/// use keel_reactor::{IoModel, Runtime};
/// use keel_udp::{Client, ClientConfig, ClientCtx, ClientHandler};
/// use std::sync::mpsc;
///
/// struct Ping(mpsc::Sender<Vec<u8>>);
/// impl ClientHandler for Ping {
///     fn started(&mut self, ctx: &mut ClientCtx<'_>) {
///         ctx.send(b"ping").unwrap();
///     }
///     fn datagram(&mut self, _ctx: &mut ClientCtx<'_>, data: &[u8]) {
///         self.0.send(data.to_vec()).unwrap();
///     }
/// }
///
/// // A plain echo peer to talk to.
/// let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
/// let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
/// let (tx, rx) = mpsc::channel();
/// let client = Client::connect(rt.handle(), peer.local_addr()?, ClientConfig::default(), Ping(tx))?;
/// let mut buf = [0u8; 16];
/// let (n, from) = peer.recv_from(&mut buf)?;
/// peer.send_to(&buf[..n], from)?;
/// assert_eq!(rx.recv()?, b"ping");
/// client.close();
/// rt.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Client<H: ClientHandler> {
    lane: LaneHandle<ClientLane<H>>,
    counters: Arc<Counters>,
    local: SocketAddr,
    peer: SocketAddr,
    buffers: SocketBuffers,
}

impl<H: ClientHandler> Clone for Client<H> {
    fn clone(&self) -> Self {
        Client {
            lane: self.lane.clone(),
            counters: self.counters.clone(),
            local: self.local,
            peer: self.peer,
            buffers: self.buffers,
        }
    }
}

impl<H: ClientHandler> std::fmt::Debug for Client<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish()
    }
}

impl<H: ClientHandler> Client<H> {
    /// Connects a socket to `server` and starts the client on `reactor`;
    /// [`ClientHandler::started`] runs before this returns.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad config; the OS error of socket setup, naming
    /// the addresses and the step that failed.
    pub fn connect(
        reactor: &Handle,
        server: SocketAddr,
        config: ClientConfig,
        handler: H,
    ) -> io::Result<Client<H>> {
        config.endpoint.validate()?;
        let (sock, buffers) = socket::connect(config.local, server, &config.endpoint.socket)?;
        let local = sock.local_addr()?;
        let counters = Arc::new(Counters::default());
        let tx = Tx::new(sock, &config.endpoint, counters.clone(), 0)?;
        let state = ClientLane {
            handler,
            rx: Rx::connected(&config.endpoint, &counters, 0),
            tx,
            peer: server,
            close: false,
            ended: false,
            on_dropped: DropSignal::default(),
        };
        let options = LaneOptions {
            max_posts: config.endpoint.inbox_capacity,
            ..LaneOptions::default()
        };
        let lane = endpoint::start(reactor, state, options, |st, cx| {
            let mut ctx = cctx!(st, cx);
            st.handler.started(&mut ctx);
        })?;
        Ok(Client {
            lane,
            counters,
            local,
            peer: server,
            buffers,
        })
    }

    /// Runs `f` on the client's lane with its handler and context.
    ///
    /// # Errors
    ///
    /// [`PostError::Full`](crate::PostError::Full) if its inbox is at its
    /// bound ([`inbox_capacity`](crate::EndpointConfig)),
    /// [`PostError::Closed`](crate::PostError::Closed) if the client is
    /// closed; `f` is dropped before this returns.
    pub fn post<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut H, &mut ClientCtx<'_>) + Send + 'static,
    {
        self.lane.post(move |st, cx| {
            if st.ended {
                return;
            }
            let mut ctx = cctx!(st, cx);
            f(&mut st.handler, &mut ctx);
            st.settle(cx);
        })
    }

    /// Sends `data` to the server from any thread (the size is checked now,
    /// the send happens on the client's lane). An accepted send that the
    /// client closes before it gets to is counted in `send_discarded`.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`], [`SendError::InboxFull`] when the lane has
    /// [`inbox_capacity`](crate::EndpointConfig) jobs waiting,
    /// [`SendError::Closed`]. All counted.
    pub fn send(&self, data: &[u8]) -> Result<(), SendError> {
        endpoint::offer_send(&self.lane, &self.counters, None, self.peer, data)
    }

    /// Closes the client: [`ClientHandler::disconnected`] runs with
    /// [`DisconnectReason::Closed`], then the socket is closed.
    pub fn close(&self) {
        let _ = self.lane.post_control(|st, cx| {
            if !st.ended {
                st.end(cx, DisconnectReason::Closed);
            }
        });
    }

    /// Closes the client as [`Client::close`] does and waits, at most
    /// `timeout`, until its socket is closed (its counters are final then,
    /// kernel drops included). Returns whether it closed in time; true if
    /// it had already ended.
    pub fn close_and_wait(&self, timeout: std::time::Duration) -> bool {
        let (done, closed) = std::sync::mpsc::channel();
        let posted = self.lane.post_control(move |st, cx| {
            st.on_dropped.push(done);
            if !st.ended {
                st.end(cx, DisconnectReason::Closed);
            }
        });
        if posted.is_err() {
            // Closed already, or its runtime stopped (nobody will close it).
            return self.lane.is_closed();
        }
        // Dropped unrun (`Disconnected`): the client was already closing
        // (done once its state is gone), or the runtime stopped.
        match closed.recv_timeout(timeout) {
            Ok(()) => true,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.lane.is_closed(),
            Err(_) => false,
        }
    }

    /// Whether the client has ended.
    pub fn is_closed(&self) -> bool {
        self.lane.is_closed()
    }

    /// The client's counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// The local address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The socket buffer sizes the kernel granted.
    pub fn buffers(&self) -> SocketBuffers {
        self.buffers
    }
}
