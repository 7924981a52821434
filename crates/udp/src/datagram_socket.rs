//! The datagram socket: one unconnected socket that sends to any address and
//! reports each datagram's sender.

use keel_reactor::PostError;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{
    Flow, Handle, Lane, LaneCtx, LaneHandle, LaneOptions, Ready, SourceId, TimerError, TimerId,
};

use crate::config::EndpointConfig;
use crate::counters::{CounterSnapshot, Counters};
use crate::endpoint::{
    self, conditioner_timer, receive, ConditionerTimer, Datagram, Endpoint, Rx, Timers, Tx,
};
use crate::error::SendError;
use crate::socket::{self, SocketBuffers};
use crate::sys::LocalAddr;

/// What a datagram socket does. Its methods run on the socket's lane.
pub trait DatagramSocketHandler: Send + 'static {
    /// The socket is bound and registered.
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let _ = ctx;
    }

    /// A batch of more than one datagram was received and goes to
    /// [`datagram`](Self::datagram) next, one by one: a look-ahead for a
    /// handler that keeps state per peer, to start loading the state of the
    /// whole batch at once (keel-rudp prefetches its connections'). The
    /// bytes are those `datagram` will get, before the receive conditioner
    /// (if any) drops, delays or copies some.
    fn batch_start(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>) {
        let _ = datagrams;
    }

    /// A datagram from `from`.
    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]);

    /// A timer made with [`DatagramSocketCtx::timer`] fired.
    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, timer: TimerId) {
        let _ = (ctx, timer);
    }

    /// Every datagram of a received batch went to [`datagram`](Self::datagram):
    /// the place for work done once per batch (a protocol's acknowledgements
    /// and flushes). What it sends leaves with the batch's replies, in one
    /// `sendmmsg`.
    fn batch_end(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let _ = ctx;
    }
}

/// The datagram socket's context: send to any address, timers.
pub struct DatagramSocketCtx<'a> {
    pub(crate) tx: &'a mut Tx,
    pub(crate) timers: &'a mut dyn Timers,
    /// The socket's lane in its group (0 for a lone socket).
    pub(crate) lane: usize,
    /// Where the datagram being handled arrived (wildcard binds).
    pub(crate) local: Option<LocalAddr>,
}

impl DatagramSocketCtx<'_> {
    /// The socket's lane in its group ([`DatagramSocket::bind_lanes`]);
    /// 0 for a socket made with [`DatagramSocket::bind`].
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// The local address the datagram being handled was sent to, on a
    /// socket of [`DatagramSocket::bind_lanes`] bound to a wildcard address
    /// (`0.0.0.0`, `[::]`; Linux `IP_PKTINFO`, a group of one lane will
    /// do); `None` otherwise (a socket of [`DatagramSocket::bind`] does not
    /// ask the kernel for it) and outside
    /// [`DatagramSocketHandler::datagram`]. Pass it to
    /// [`send_from`](Self::send_from) so replies leave from the address the
    /// peer sent to.
    pub fn arrived_at(&self) -> Option<LocalAddr> {
        self.local
    }

    /// Sends a datagram to `to` from local address `from` (`None`: the
    /// kernel picks it by route), typically what
    /// [`arrived_at`](Self::arrived_at) reported for the peer's datagram.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`], [`SendError::QueueFull`]; both counted.
    pub fn send_from(
        &mut self,
        to: SocketAddr,
        from: Option<LocalAddr>,
        data: &[u8],
    ) -> Result<(), SendError> {
        self.tx.send_from(Some(to), from, data)
    }

    /// Sends a datagram to `to`.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`], [`SendError::QueueFull`]; both counted.
    pub fn send_to(&mut self, to: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        self.tx.send(Some(to), data)
    }

    /// Schedules a timer on this socket's lane.
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timers.add(deadline, period)
    }

    /// Cancels a timer.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }

    /// Makes an unarmed timer on this socket's lane that stays registered
    /// after it fires, for [`set_timer`](Self::set_timer): keel-reactor's
    /// [`LaneCtx::reusable_timer`](keel_reactor::LaneCtx::reusable_timer).
    pub fn reusable_timer(&mut self) -> TimerId {
        self.timers.reusable()
    }

    /// Arms a timer of this socket's lane at `deadline`, or moves it there
    /// (earlier or later) without adding a timer:
    /// [`LaneCtx::set_timer`](keel_reactor::LaneCtx::set_timer).
    ///
    /// # Errors
    ///
    /// [`TimerError`] if the timer is gone or not this lane's.
    pub fn set_timer(&mut self, id: TimerId, deadline: Instant) -> Result<(), TimerError> {
        self.timers.set(id, deadline)
    }

    /// Disarms a timer of this socket's lane, keeping it for
    /// [`set_timer`](Self::set_timer); returns whether it was armed:
    /// [`LaneCtx::unset_timer`](keel_reactor::LaneCtx::unset_timer).
    ///
    /// # Errors
    ///
    /// As [`set_timer`](Self::set_timer).
    pub fn unset_timer(&mut self, id: TimerId) -> Result<bool, TimerError> {
        self.timers.unset(id)
    }
}

/// A context outside a datagram (no local address).
fn ctx<'a>(tx: &'a mut Tx, timers: &'a mut dyn Timers, lane: usize) -> DatagramSocketCtx<'a> {
    DatagramSocketCtx {
        tx,
        timers,
        lane,
        local: None,
    }
}

pub(crate) struct SocketLane<H: DatagramSocketHandler> {
    handler: H,
    rx: Rx,
    tx: Tx,
    /// Index in the socket's group.
    lane: usize,
    /// `close` ran; the lane closes when this round ends.
    closing: bool,
}

impl<H: DatagramSocketHandler> SocketLane<H> {
    /// One datagram (just received, or held by the receive conditioner)
    /// to the handler.
    #[inline(always)]
    fn deliver(
        handler: &mut H,
        tx: &mut Tx,
        lane: usize,
        cx: &mut LaneCtx<'_, Self>,
        d: Datagram<'_>,
    ) -> bool {
        if let Some(from) = d.source {
            let mut ctx = DatagramSocketCtx {
                tx,
                timers: cx,
                lane,
                local: d.local,
            };
            handler.datagram(&mut ctx, from, d.data);
        }
        true
    }
}

impl<H: DatagramSocketHandler> Endpoint for SocketLane<H> {
    fn sides(&mut self) -> (&mut Rx, &mut Tx) {
        (&mut self.rx, &mut self.tx)
    }

    fn batch(&mut self, cx: &mut LaneCtx<'_, Self>, n: usize) -> bool {
        if n > 1 {
            self.handler.batch_start(&mut self.rx.batch_data(n));
        }
        let (handler, tx, lane) = (&mut self.handler, &mut self.tx, self.lane);
        self.rx
            .deliver_batch(n, true, |d| Self::deliver(handler, tx, lane, cx, d));
        self.rx.arm(cx);
        self.handler
            .batch_end(&mut ctx(&mut self.tx, cx, self.lane));
        true
    }

    fn closing(&self) -> bool {
        self.closing
    }

    fn send_remote(&mut self, dest: Option<SocketAddr>, data: &[u8]) {
        // A refusal (queue full) is counted by the send path.
        let _ = self.tx.send(dest, data);
    }

    fn settle(&mut self, cx: &mut LaneCtx<'_, Self>) {
        self.tx.finish(cx);
    }
}

impl<H: DatagramSocketHandler> Lane for SocketLane<H> {
    fn on_ready(&mut self, cx: &mut LaneCtx<'_, Self>, _source: SourceId, ready: Ready) -> Flow {
        if self.closing {
            return Flow::Drained;
        }
        let flow = receive(self, cx, ready);
        self.tx.finish(cx);
        flow
    }

    fn on_timer(&mut self, cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
        // Closed earlier in this round: held datagrams are counted as
        // discarded when the conditioner drops, never delivered.
        if self.closing {
            return;
        }
        match conditioner_timer(&mut self.rx, &mut self.tx, timer) {
            ConditionerTimer::Send => {} // `finish` below sends them
            ConditionerTimer::Receive => {
                let (handler, tx, lane) = (&mut self.handler, &mut self.tx, self.lane);
                self.rx
                    .deliver_held(|d| Self::deliver(handler, tx, lane, cx, d));
                self.rx.arm(cx);
                self.handler
                    .batch_end(&mut ctx(&mut self.tx, cx, self.lane));
            }
            ConditionerTimer::None => {
                self.handler
                    .timer(&mut ctx(&mut self.tx, cx, self.lane), timer);
            }
        }
        self.tx.finish(cx);
    }
}

/// An unconnected UDP socket on a lane. `Send + Sync + Clone`.
pub struct DatagramSocket<H: DatagramSocketHandler> {
    pub(crate) lane: LaneHandle<SocketLane<H>>,
    counters: Arc<Counters>,
    local: SocketAddr,
    buffers: SocketBuffers,
}

impl<H: DatagramSocketHandler> Clone for DatagramSocket<H> {
    fn clone(&self) -> Self {
        DatagramSocket {
            lane: self.lane.clone(),
            counters: self.counters.clone(),
            local: self.local,
            buffers: self.buffers,
        }
    }
}

impl<H: DatagramSocketHandler> std::fmt::Debug for DatagramSocket<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatagramSocket")
            .field("local", &self.local)
            .finish()
    }
}

impl<H: DatagramSocketHandler> DatagramSocket<H> {
    /// Binds `addr` and starts the socket on `reactor`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad config; the OS error of socket setup.
    pub fn bind(
        reactor: &Handle,
        addr: SocketAddr,
        config: EndpointConfig,
        handler: H,
    ) -> io::Result<DatagramSocket<H>> {
        config.validate()?;
        let (sock, buffers) = socket::bind(addr, &config.socket)?;
        Self::start(reactor, sock, buffers, &config, 0, handler)
    }

    /// Starts bound socket `sock` as lane `lane` of its group on `reactor`.
    pub(crate) fn start(
        reactor: &Handle,
        sock: mio::net::UdpSocket,
        buffers: SocketBuffers,
        config: &EndpointConfig,
        lane: usize,
        handler: H,
    ) -> io::Result<DatagramSocket<H>> {
        let local = sock.local_addr()?;
        let counters = Arc::new(Counters::default());
        // Lane i decides with stream i of the conditioners' seeds.
        let tx = Tx::new(sock, config, counters.clone(), lane as u64)?;
        let state = SocketLane {
            handler,
            rx: Rx::new(config, &counters, lane as u64),
            tx,
            lane,
            closing: false,
        };
        let options = LaneOptions {
            max_posts: config.inbox_capacity,
            ..LaneOptions::default()
        };
        let lane = endpoint::start(reactor, state, options, |st, cx| {
            st.handler.started(&mut ctx(&mut st.tx, cx, st.lane));
        })?;
        Ok(DatagramSocket {
            lane,
            counters,
            local,
            buffers,
        })
    }

    /// Runs `f` on the socket's lane with its handler and context.
    ///
    /// # Errors
    ///
    /// [`PostError::Full`](crate::PostError::Full) if its inbox is at its
    /// bound ([`inbox_capacity`](crate::EndpointConfig)),
    /// [`PostError::Closed`](crate::PostError::Closed) if the socket is
    /// closed; `f` is dropped before this returns.
    pub fn post<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut H, &mut DatagramSocketCtx<'_>) + Send + 'static,
    {
        self.lane.post(move |st, cx| {
            f(&mut st.handler, &mut ctx(&mut st.tx, cx, st.lane));
            st.tx.finish(cx);
        })
    }

    /// Runs `f` on the socket's lane like [`post`](Self::post), but is
    /// never refused for a full inbox, only when the socket is closed or
    /// closing, or its reactor stopped ([`PostError::Closed`](crate::PostError::Closed)):
    /// for rare control work (a protocol's graceful stop) that a flood of
    /// posts must not crowd out. `f` does not run if the socket starts
    /// closing before it gets to it.
    ///
    /// # Errors
    ///
    /// [`PostError::Closed`](crate::PostError::Closed).
    pub fn post_control<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut H, &mut DatagramSocketCtx<'_>) + Send + 'static,
    {
        self.lane.post_control(move |st, cx| {
            if st.closing {
                return;
            }
            f(&mut st.handler, &mut ctx(&mut st.tx, cx, st.lane));
            st.tx.finish(cx);
        })
    }

    /// Sends `data` to `to` from any thread (the size is checked now, the
    /// send happens on the socket's lane). An accepted send that the socket
    /// closes before it gets to is counted in `send_discarded`.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`], [`SendError::InboxFull`] when the lane has
    /// [`inbox_capacity`](crate::EndpointConfig) jobs waiting,
    /// [`SendError::Closed`]. All counted.
    pub fn send_to(&self, to: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        endpoint::offer_send(&self.lane, &self.counters, Some(to), to, data)
    }

    /// Closes the socket (after what already arrived is handled). A full
    /// inbox does not delay or lose it; sends still waiting are counted in
    /// `send_discarded`.
    pub fn close(&self) {
        self.close_with(|_, _| {});
    }

    /// Closes the socket like [`close`](Self::close), after running `f`
    /// with the handler and a context once what already arrived is
    /// handled: a protocol's last words (a CLOSE to each peer) leave
    /// before the socket closes. Like `close`, a full inbox does not
    /// delay or refuse it; `f` does not run if the socket is already
    /// closing or closed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use keel_reactor::{IoModel, Runtime};
    /// # use keel_udp::{DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig};
    /// # struct Quiet;
    /// # impl DatagramSocketHandler for Quiet {
    /// #     fn datagram(&mut self, _: &mut DatagramSocketCtx<'_>, _: std::net::SocketAddr, _: &[u8]) {}
    /// # }
    /// # let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
    /// let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// # peer.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    /// let to = peer.local_addr()?;
    /// let sock = DatagramSocket::bind(
    ///     rt.handle(),
    ///     "127.0.0.1:0".parse()?,
    ///     EndpointConfig::default(),
    ///     Quiet,
    /// )?;
    /// sock.close_with(move |_, ctx| {
    ///     let _ = ctx.send_to(to, b"bye");
    /// });
    /// let mut buf = [0; 8];
    /// let n = peer.recv(&mut buf)?;
    /// assert_eq!(&buf[..n], b"bye");
    /// # rt.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close_with<F>(&self, f: F)
    where
        F: FnOnce(&mut H, &mut DatagramSocketCtx<'_>) + Send + 'static,
    {
        let _ = self.lane.post_control(move |st, cx| {
            if st.closing {
                return;
            }
            // Handle what already arrived, then the last words, then stop
            // arrivals and count what is left and the unreported drops.
            receive(st, cx, Ready::READABLE);
            f(&mut st.handler, &mut ctx(&mut st.tx, cx, st.lane));
            st.closing = true;
            st.tx.flush();
            st.rx.close_door(&st.tx);
            cx.close();
        });
    }

    /// Whether the socket's lane has closed ([`close`](Self::close), or the
    /// runtime stopped).
    pub fn is_closed(&self) -> bool {
        self.lane.is_closed()
    }

    /// The socket's counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The socket buffer sizes the kernel granted.
    pub fn buffers(&self) -> SocketBuffers {
        self.buffers
    }
}
