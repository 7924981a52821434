//! The server: one socket per receive lane, sessions keyed by peer address.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{Flow, Handle, Lane, LaneCx, LaneHandle, Ready, SourceId, TimerId};

use crate::config::{FullPolicy, LaneSteering, ServerConfig};
use crate::counters::{bump, bump_shared, set, CounterSnapshot, Counters};
use crate::endpoint::{receive, Receiver, Rx, Timers, Tx};
use crate::error::{DisconnectReason, SendError};
use crate::sessions::Sessions;
use crate::socket::{self, SocketBuffers};
use crate::sys::{self, LocalAddr};

/// What a server does with its sessions. One handler value per lane; its
/// methods run on that lane only, so they get `&mut self` without locks.
///
/// Order per peer: `connect` (before the peer's first datagram), then
/// `datagram` for each datagram in arrival order, then at most one
/// `disconnect`.
pub trait ServerHandler: Send + 'static {
    /// Per-session state, owned by the lane.
    type Session: Send + 'static;

    /// The lane is set up (socket bound and registered): start timers here,
    /// e.g. a game tick.
    fn started(&mut self, ctx: &mut ServerCtx<'_, Self::Session>) {
        let _ = ctx;
    }

    /// A datagram came from a peer without a session: make its state. Called
    /// before that datagram is delivered.
    fn connect(
        &mut self,
        ctx: &mut ServerCtx<'_, Self::Session>,
        peer: SocketAddr,
    ) -> Self::Session;

    /// A datagram from a peer with a session. Replies sent here go out with
    /// one `sendmmsg` at the end of the receive batch.
    fn datagram(&mut self, session: &mut Session<'_, Self::Session>, data: &[u8]);

    /// A session ended; `state` is handed back.
    fn disconnect(
        &mut self,
        ctx: &mut ServerCtx<'_, Self::Session>,
        peer: SocketAddr,
        state: Self::Session,
        reason: DisconnectReason,
    ) {
        let _ = (ctx, peer, state, reason);
    }

    /// A timer made with [`ServerCtx::timer`] or [`Session::timer`] fired.
    fn timer(&mut self, ctx: &mut ServerCtx<'_, Self::Session>, timer: TimerId) {
        let _ = (ctx, timer);
    }
}

/// One session while its datagram is handled: its peer, its state, and the
/// lane's send path.
pub struct Session<'a, S> {
    peer: SocketAddr,
    /// Where the datagram being handled came to (reply source).
    local: Option<LocalAddr>,
    state: &'a mut S,
    tx: &'a mut Tx,
    timers: &'a mut dyn Timers,
    close: bool,
    lane: usize,
}

impl<S> Session<'_, S> {
    /// The peer's address (the session's key).
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The session's state.
    pub fn state(&mut self) -> &mut S {
        self.state
    }

    /// Sends a datagram to the peer (at the end of the current batch).
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`] over the family's payload limit (nothing is
    /// sent), [`SendError::QueueFull`] when the socket blocks and the queue
    /// is at its bound. Both are counted.
    pub fn send(&mut self, data: &[u8]) -> Result<(), SendError> {
        self.tx.send_from(Some(self.peer), self.local, data)
    }

    /// Sends a datagram to another address from this lane's socket.
    ///
    /// # Errors
    ///
    /// As [`Session::send`].
    pub fn send_to(&mut self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        self.tx.send(Some(peer), data)
    }

    /// Closes the session after this datagram (`disconnect` with
    /// [`DisconnectReason::Closed`]).
    pub fn close(&mut self) {
        self.close = true;
    }

    /// Schedules a timer on this lane (fires [`ServerHandler::timer`]).
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timers.add(deadline, period)
    }

    /// The index of the lane handling this session.
    pub fn lane(&self) -> usize {
        self.lane
    }
}

/// A lane's context outside a datagram: its sessions, its send path, its
/// timers.
pub struct ServerCtx<'a, S> {
    sessions: &'a mut Sessions<S>,
    tx: &'a mut Tx,
    timers: &'a mut dyn Timers,
    to_close: &'a mut Vec<SocketAddr>,
    lane: usize,
}

impl<S> ServerCtx<'_, S> {
    /// Sends a datagram to `peer` from this lane's socket.
    ///
    /// # Errors
    ///
    /// As [`Session::send`].
    pub fn send_to(&mut self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        self.tx.send(Some(peer), data)
    }

    /// Sends `data` to every session of this lane; returns how many sends
    /// were accepted (refusals are counted in the lane's counters).
    pub fn broadcast(&mut self, data: &[u8]) -> usize {
        let mut ok = 0;
        for peer in self.sessions.peers() {
            if self.tx.send(Some(peer), data).is_ok() {
                ok += 1;
            }
        }
        ok
    }

    /// Every session of this lane, with mutable state.
    pub fn sessions(&mut self) -> impl Iterator<Item = (SocketAddr, &mut S)> {
        self.sessions.iter_mut()
    }

    /// Sessions open on this lane.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Closes a session once the current handler returns.
    pub fn close(&mut self, peer: SocketAddr) {
        self.to_close.push(peer);
    }

    /// Schedules a timer on this lane (fires [`ServerHandler::timer`]).
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timers.add(deadline, period)
    }

    /// Cancels a timer of this lane; it will not fire again.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }

    /// The index of this lane.
    pub fn lane(&self) -> usize {
        self.lane
    }
}

pub(crate) struct ServerLane<H: ServerHandler> {
    handler: H,
    rx: Rx,
    tx: Tx,
    sessions: Sessions<H::Session>,
    to_close: Vec<SocketAddr>,
    idle: Vec<usize>,
    lane: usize,
    max_sessions: usize,
    policy: FullPolicy,
    idle_timeout: Option<Duration>,
    sweep: Option<TimerId>,
    /// Told when this lane's state is dropped (see `Server::stop_and_wait`).
    on_dropped: Vec<std::sync::mpsc::Sender<()>>,
}

impl<H: ServerHandler> Drop for ServerLane<H> {
    fn drop(&mut self) {
        for done in self.on_dropped.drain(..) {
            let _ = done.send(());
        }
    }
}

macro_rules! ctx {
    ($lane:expr, $cx:expr) => {
        ServerCtx {
            sessions: &mut $lane.sessions,
            tx: &mut $lane.tx,
            timers: $cx,
            to_close: &mut $lane.to_close,
            lane: $lane.lane,
        }
    };
}

/// Where the bytes of a datagram being delivered are: slot `i` of the
/// receive batch, or a buffer the receive conditioner held.
#[derive(Clone, Copy)]
enum Bytes<'b> {
    Batch(usize),
    Held(&'b [u8]),
}

impl<H: ServerHandler> ServerLane<H> {
    fn handle_batch(&mut self, cx: &mut LaneCx<'_, Self>, n: usize, now: Instant) {
        if self.rx.link.is_some() {
            self.handle_batch_impaired(cx, n, now);
            return;
        }
        for i in 0..n {
            if self.rx.batch.truncated(i) {
                bump(&self.tx.counters.truncated, 1);
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
                bump(&self.tx.counters.truncated, 1);
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

    /// Hands one datagram from `peer` to its session (opening it first, or
    /// refusing it per the full policy).
    #[inline(always)]
    fn deliver(
        &mut self,
        cx: &mut LaneCx<'_, Self>,
        peer: SocketAddr,
        bytes: Bytes<'_>,
        now: Instant,
    ) {
        let index = match self.sessions.find(&peer) {
            Some(index) => index,
            None => match self.open(cx, peer, now) {
                Some(index) => index,
                None => return,
            },
        };
        let Some(slot) = self.sessions.get_mut(index) else {
            return;
        };
        slot.last_active = now;
        let data = match bytes {
            Bytes::Batch(i) => self.rx.batch.data(i),
            Bytes::Held(data) => data,
        };
        let mut session = Session {
            peer,
            local: match bytes {
                Bytes::Batch(i) => self.rx.local(i),
                Bytes::Held(_) => None,
            },
            state: &mut slot.state,
            tx: &mut self.tx,
            timers: cx,
            close: false,
            lane: self.lane,
        };
        self.handler.datagram(&mut session, data);
        if session.close {
            self.to_close.push(peer);
        }
        if !self.to_close.is_empty() {
            self.close_requested(cx);
        }
    }

    /// Admits a new peer (or refuses it, per the full policy).
    fn open(&mut self, cx: &mut LaneCx<'_, Self>, peer: SocketAddr, now: Instant) -> Option<usize> {
        if self.sessions.len() >= self.max_sessions {
            match self.policy {
                FullPolicy::Refuse => {
                    bump(&self.tx.counters.sessions_refused, 1);
                    return None;
                }
                FullPolicy::EvictIdlest => {
                    let victim = self.sessions.sample_idlest()?;
                    let slot = self.sessions.remove_at(victim)?;
                    bump(&self.tx.counters.sessions_evicted, 1);
                    let mut ctx = ctx!(self, cx);
                    self.handler.disconnect(
                        &mut ctx,
                        slot.peer,
                        slot.state,
                        DisconnectReason::Evicted,
                    );
                }
            }
        }
        let mut ctx = ctx!(self, cx);
        let state = self.handler.connect(&mut ctx, peer);
        bump(&self.tx.counters.sessions_opened, 1);
        let index = self.sessions.insert(peer, state, now);
        set(&self.tx.counters.sessions_open, self.sessions.len() as u64);
        Some(index)
    }

    fn close_requested(&mut self, cx: &mut LaneCx<'_, Self>) {
        while let Some(peer) = self.to_close.pop() {
            if let Some(slot) = self.sessions.remove(&peer) {
                bump(&self.tx.counters.sessions_closed, 1);
                let mut ctx = ctx!(self, cx);
                self.handler
                    .disconnect(&mut ctx, slot.peer, slot.state, DisconnectReason::Closed);
            }
        }
        set(&self.tx.counters.sessions_open, self.sessions.len() as u64);
    }

    fn sweep_idle(&mut self, cx: &mut LaneCx<'_, Self>) {
        // The sweep runs every quarter of the idle timeout (at most 1 s):
        // also the moment to count drops no datagram has reported yet.
        self.rx.sync_kernel_drops(&self.tx);
        let Some(timeout) = self.idle_timeout else {
            return;
        };
        let now = Instant::now();
        let Some(cutoff) = now.checked_sub(timeout) else {
            return;
        };
        self.idle.clear();
        self.sessions.idle_before(cutoff, &mut self.idle);
        let mut idle = std::mem::take(&mut self.idle);
        for &i in &idle {
            if let Some(slot) = self.sessions.remove_at(i) {
                bump(&self.tx.counters.sessions_timed_out, 1);
                let mut ctx = ctx!(self, cx);
                self.handler.disconnect(
                    &mut ctx,
                    slot.peer,
                    slot.state,
                    DisconnectReason::IdleTimeout,
                );
            }
        }
        idle.clear();
        self.idle = idle;
        set(&self.tx.counters.sessions_open, self.sessions.len() as u64);
    }

    fn shutdown(&mut self, cx: &mut LaneCx<'_, Self>) {
        // Handle what already arrived (up to the usual per-event budget)
        // instead of closing the socket on it, then count the drops no
        // datagram reported.
        receive(self, cx, Ready::READABLE);
        self.rx.sync_kernel_drops(&self.tx);
        self.tx.finish(cx);
        for slot in self.sessions.drain() {
            let mut ctx = ctx!(self, cx);
            self.handler
                .disconnect(&mut ctx, slot.peer, slot.state, DisconnectReason::Shutdown);
        }
        set(&self.tx.counters.sessions_open, 0);
        self.tx.flush();
        cx.close();
    }
}

impl<H: ServerHandler> Receiver for ServerLane<H> {
    fn sides(&mut self) -> (&mut Rx, &mut Tx) {
        (&mut self.rx, &mut self.tx)
    }

    fn batch(&mut self, cx: &mut LaneCx<'_, Self>, n: usize) -> bool {
        self.handle_batch(cx, n, Instant::now());
        true
    }
}

impl<H: ServerHandler> Lane for ServerLane<H> {
    fn on_ready(&mut self, cx: &mut LaneCx<'_, Self>, _source: SourceId, ready: Ready) -> Flow {
        // Receive errors on the unconnected socket (ICMP errors and the
        // like) are counted and never fatal for the server.
        let flow = receive(self, cx, ready);
        self.tx.finish(cx);
        flow
    }

    fn on_timer(&mut self, cx: &mut LaneCx<'_, Self>, timer: TimerId) {
        if Some(timer) == self.sweep {
            self.sweep_idle(cx);
        } else if self.tx.release_held(timer) {
            // Held sends went to the send path; `finish` flushes them.
        } else if self.rx.owns_timer(timer) {
            self.deliver_held(cx);
        } else {
            let mut ctx = ctx!(self, cx);
            self.handler.timer(&mut ctx, timer);
            if !self.to_close.is_empty() {
                self.close_requested(cx);
            }
        }
        self.tx.finish(cx);
    }
}

struct Shared<H: ServerHandler> {
    lanes: Vec<LaneHandle<ServerLane<H>>>,
    counters: Vec<Arc<Counters>>,
    local_addr: SocketAddr,
    buffers: SocketBuffers,
}

/// A running server: `Send + Sync + Clone`, usable from any thread to send
/// to a peer, read counters, run code on a lane, and stop.
///
/// # Examples
///
/// An echo server on one lane of a shared runtime:
///
/// ```
/// use keel_reactor::{IoModel, Runtime};
/// use keel_udp::{Server, ServerConfig, ServerCtx, ServerHandler, Session};
/// use std::net::SocketAddr;
///
/// struct Echo;
/// impl ServerHandler for Echo {
///     type Session = ();
///     fn connect(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr) {}
///     fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
///         let _ = s.send(data);
///     }
/// }
///
/// let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
/// let server = Server::bind(rt.handles(), "127.0.0.1:0".parse()?, ServerConfig::default(), |_| Echo)?;
/// let client = std::net::UdpSocket::bind("127.0.0.1:0")?;
/// client.send_to(b"hi", server.local_addr())?;
/// let mut buf = [0u8; 8];
/// let n = client.recv(&mut buf)?;
/// assert_eq!(&buf[..n], b"hi");
/// server.stop();
/// rt.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Portability
///
/// Several lanes need `SO_REUSEPORT` (Linux, BSDs). Batched calls are
/// Linux-only; elsewhere `batch` is treated as 1.
pub struct Server<H: ServerHandler> {
    shared: Arc<Shared<H>>,
}

impl<H: ServerHandler> Clone for Server<H> {
    fn clone(&self) -> Self {
        Server {
            shared: self.shared.clone(),
        }
    }
}

impl<H: ServerHandler> std::fmt::Debug for Server<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.shared.local_addr)
            .field("lanes", &self.shared.lanes.len())
            .finish()
    }
}

impl<H: ServerHandler> Server<H> {
    /// Binds `config.lanes` sockets to `addr` (several with `SO_REUSEPORT`,
    /// on one port: port 0 picks one for all) and starts one lane per socket,
    /// placed round-robin over `reactors` (one reactor: all lanes on it).
    /// `handler(i)` makes lane `i`'s handler.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad config (the message names the field and what
    /// is accepted) or an empty `reactors`; the OS error of socket setup,
    /// naming the address and the step that failed.
    pub fn bind(
        reactors: &[Handle],
        addr: SocketAddr,
        config: ServerConfig,
        mut handler: impl FnMut(usize) -> H,
    ) -> io::Result<Server<H>> {
        config.validate()?;
        if reactors.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "reactors: expected at least one reactor handle",
            ));
        }
        // Bind every socket before starting any lane, so a failure leaves
        // nothing running.
        let (sockets, buffers) = socket::bind_group(addr, &config.endpoint.socket, config.lanes)?;
        let local_addr = sockets[0].local_addr()?;
        if config.lanes > 1 && config.steering == LaneSteering::PeerPort {
            sys::attach_port_steering(&sockets[0], config.lanes as u32).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("steering: attaching the peer-port program on {local_addr}: {e}"),
                )
            })?;
        }
        let mut lanes = Vec::with_capacity(config.lanes);
        let mut counters = Vec::with_capacity(config.lanes);
        for (i, sock) in sockets.into_iter().enumerate() {
            let c = Arc::new(Counters::default());
            // Lane i decides with stream i of the conditioners' seeds.
            let tx = Tx::new(sock, &config.endpoint, c.clone(), i as u64)?;
            let state = ServerLane {
                handler: handler(i),
                rx: Rx::new(&config.endpoint, &c, i as u64),
                tx,
                sessions: Sessions::new(),
                to_close: Vec::new(),
                idle: Vec::new(),
                lane: i,
                max_sessions: config.max_sessions,
                policy: config.full_policy,
                idle_timeout: config.idle_timeout,
                sweep: None,
                on_dropped: Vec::new(),
            };
            let reactor = &reactors[i % reactors.len()];
            let (lane, registered) = reactor.add_lane_with(state, |st, cx| {
                st.tx.register(cx)?;
                if let Some(t) = st.idle_timeout {
                    let every = (t / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
                    st.sweep = Some(cx.timer(Instant::now() + every, Some(every)));
                }
                let mut ctx = ctx!(st, cx);
                st.handler.started(&mut ctx);
                st.tx.finish(cx);
                Ok::<(), io::Error>(())
            });
            if let Err(e) = registered {
                lane.close();
                for l in &lanes {
                    let l: &LaneHandle<ServerLane<H>> = l;
                    l.close();
                }
                return Err(e);
            }
            lanes.push(lane);
            counters.push(c);
        }
        Ok(Server {
            shared: Arc::new(Shared {
                lanes,
                counters,
                local_addr,
                buffers,
            }),
        })
    }

    /// The address the server is bound to (with the real port).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The socket buffer sizes the kernel granted (first lane's socket).
    pub fn buffers(&self) -> SocketBuffers {
        self.shared.buffers
    }

    /// Number of receive lanes.
    pub fn lanes(&self) -> usize {
        self.shared.lanes.len()
    }

    /// The counters of every lane, summed.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared
            .counters
            .iter()
            .fold(CounterSnapshot::default(), |acc, c| acc + c.snapshot())
    }

    /// The counters of lane `lane`.
    pub fn lane_counters(&self, lane: usize) -> Option<CounterSnapshot> {
        self.shared.counters.get(lane).map(|c| c.snapshot())
    }

    /// Sends `data` to `peer` from any thread. The size is checked now; the
    /// send itself happens on a lane (chosen by the peer's address, so one
    /// peer's datagrams keep their order), where a full queue is counted.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`] (counted on lane 0), [`SendError::Closed`]
    /// after stop.
    pub fn send_to(&self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        let limit = sys::max_payload(&peer);
        if data.len() > limit {
            bump_shared(&self.shared.counters[0].send_too_large, 1);
            return Err(SendError::TooLarge {
                size: data.len(),
                limit,
            });
        }
        let lane = lane_for(&peer, self.shared.lanes.len());
        let data = data.to_vec();
        let posted = self.shared.lanes[lane].post(move |st, cx| {
            let _ = st.tx.send(Some(peer), &data);
            st.tx.finish(cx);
        });
        if posted {
            Ok(())
        } else {
            Err(SendError::Closed)
        }
    }

    /// Runs `f` on lane `lane` with its handler and context (e.g. to
    /// broadcast, or to read handler state from another thread).
    /// Returns false if there is no such lane or it is closed.
    pub fn with_lane<F>(&self, lane: usize, f: F) -> bool
    where
        F: FnOnce(&mut H, &mut ServerCtx<'_, H::Session>) + Send + 'static,
    {
        let Some(l) = self.shared.lanes.get(lane) else {
            return false;
        };
        l.post(move |st, cx| {
            let mut ctx = ctx!(st, cx);
            f(&mut st.handler, &mut ctx);
            if !st.to_close.is_empty() {
                st.close_requested(cx);
            }
            st.tx.finish(cx);
        })
    }

    /// Stops the server: each lane handles the datagrams already queued on
    /// its socket (up to one readiness budget), flushes, counts the kernel
    /// drops no datagram reported, ends every session with
    /// [`DisconnectReason::Shutdown`] and closes its socket. Asynchronous:
    /// it happens on the lanes ([`Server::stop_and_wait`] waits for it);
    /// counters stay readable.
    pub fn stop(&self) {
        for l in &self.shared.lanes {
            l.post(|st, cx| st.shutdown(cx));
        }
    }

    /// Stops the server as [`Server::stop`] does and waits until every lane
    /// has ended its sessions and closed its socket, at most `timeout`.
    /// Returns whether all lanes finished in time (false if the runtime is
    /// no longer running them).
    pub fn stop_and_wait(&self, timeout: Duration) -> bool {
        let (done, finished) = std::sync::mpsc::channel();
        let mut expected = 0;
        for l in &self.shared.lanes {
            let done = done.clone();
            if l.post(move |st, cx| {
                // Signalled when the lane drops its state, which is after it
                // is marked closed and its socket is gone.
                st.on_dropped.push(done);
                st.shutdown(cx);
            }) {
                expected += 1;
            }
        }
        drop(done);
        let deadline = Instant::now() + timeout;
        for _ in 0..expected {
            let left = deadline.saturating_duration_since(Instant::now());
            if finished.recv_timeout(left).is_err() {
                return false;
            }
        }
        true
    }

    /// Whether every lane is closed.
    pub fn is_stopped(&self) -> bool {
        self.shared.lanes.iter().all(|l| l.is_closed())
    }
}

fn lane_for(peer: &SocketAddr, lanes: usize) -> usize {
    use std::hash::{Hash, Hasher};
    if lanes == 1 {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    peer.hash(&mut h);
    (h.finish() % lanes as u64) as usize
}
