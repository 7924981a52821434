//! The parts every endpoint (server lane, client, cast socket) shares: the
//! receive batch, the send path with its bounded queue, timers, counters,
//! and the optional link conditioner of each path.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use keel_reactor::{Flow, Interest, Lane, LaneCx, Ready, SourceId, TimerId};
use mio::net::UdpSocket;

use crate::conditioner::Link;
use crate::config::EndpointConfig;
use crate::counters::{bump, bump_shared, Counters};
use crate::error::SendError;
use crate::sys::{self, LocalAddr, RecvBatch, SendBatch};
pub(crate) use crate::timers::Timers;

/// Seed streams of receive paths are offset by this, so that a socket's
/// two directions decide independently with one seed.
const RECV_STREAM: u64 = 1 << 32;

/// The receive side: one caller-owned batch, reused for every call, and the
/// receive path's link conditioner if one is configured.
pub(crate) struct Rx {
    pub(crate) batch: RecvBatch,
    /// `None` unless `recv_impairment` is set: lanes test it once per
    /// batch and take their plain loop when it is `None`.
    pub(crate) link: Option<Box<Link>>,
    /// The endpoint's counters (truncated datagrams are counted here).
    counters: Arc<Counters>,
}

impl Rx {
    /// `stream` selects the conditioner's seed stream (the server lane).
    pub(crate) fn new(cfg: &EndpointConfig, counters: &Arc<Counters>, stream: u64) -> Rx {
        Rx {
            batch: RecvBatch::new(cfg.batch, cfg.max_datagram),
            link: Link::for_config(
                cfg.recv_impairment.as_ref(),
                counters,
                stream.wrapping_add(RECV_STREAM),
            ),
            counters: counters.clone(),
        }
    }

    /// Hands the `n` datagrams just received to `deliver(source, bytes)` in
    /// arrival order (`source` only if `with_source`): a truncated one is
    /// counted and skipped; through the receive conditioner each is dropped,
    /// held for [`Rx::deliver_held`], or delivered once or twice. When
    /// `deliver` returns false (the endpoint is closing) nothing more is
    /// delivered; the conditioner still decides the rest of the batch, so
    /// its counters cover every datagram. Without a conditioner the cost is
    /// one branch per batch. Call [`Rx::arm`] afterwards.
    pub(crate) fn deliver_batch(
        &mut self,
        n: usize,
        with_source: bool,
        mut deliver: impl FnMut(Option<SocketAddr>, &[u8]) -> bool,
    ) {
        let Some(link) = self.link.as_deref_mut() else {
            for i in 0..n {
                if self.batch.truncated(i) {
                    bump(&self.counters.truncated, 1);
                    continue;
                }
                let source = with_source.then(|| self.batch.addr(i));
                if !deliver(source, self.batch.data(i)) {
                    return;
                }
            }
            return;
        };
        let now = Instant::now();
        let mut open = true;
        for i in 0..n {
            if self.batch.truncated(i) {
                bump(&self.counters.truncated, 1);
                continue;
            }
            let source = with_source.then(|| self.batch.addr(i));
            let copies = link.route(now, source, self.batch.data(i));
            for _ in 0..copies {
                open = open && deliver(source, self.batch.data(i));
            }
        }
    }

    /// The receive conditioner's timer fired: hands what is due to
    /// `deliver`, as if just received (nothing more once it returns
    /// false). Call [`Rx::arm`] afterwards.
    pub(crate) fn deliver_held(
        &mut self,
        mut deliver: impl FnMut(Option<SocketAddr>, &[u8]) -> bool,
    ) {
        let now = Instant::now();
        let mut open = true;
        while let Some((source, data)) = self.pop_held(now) {
            open = open && deliver(source, &data);
            self.recycle(data);
        }
    }

    /// Makes sure the receive conditioner's timer fires when its earliest
    /// held datagram is due.
    pub(crate) fn arm(&mut self, timers: &mut dyn Timers) {
        if let Some(link) = self.link.as_deref_mut() {
            link.arm(timers);
        }
    }

    /// Whether `timer` is the receive conditioner's (then it has fired and
    /// the lane delivers what [`Rx::pop_held`] gives).
    pub(crate) fn owns_timer(&mut self, timer: TimerId) -> bool {
        self.link
            .as_deref_mut()
            .is_some_and(|l| l.take_timer(timer))
    }

    /// A held datagram due at `now`: its source and bytes. Hand the buffer
    /// back with [`Rx::recycle`].
    pub(crate) fn pop_held(&mut self, now: Instant) -> Option<(Option<SocketAddr>, Vec<u8>)> {
        self.link.as_deref_mut()?.pop_due(now)
    }

    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        if let Some(link) = self.link.as_deref_mut() {
            link.recycle(buf);
        }
    }

    /// The local address datagram `i` of the last receive call came to, if
    /// the socket reports it (bound to an unspecified address; Linux): pass
    /// it to [`Tx::send_from`] to reply from that address.
    /// [`RecvBatch::local`] has the details.
    #[inline]
    pub(crate) fn local(&self, i: usize) -> Option<LocalAddr> {
        self.batch.local(i)
    }

    /// One receive call (up to `batch` datagrams); counts what came in and
    /// the kernel drops reported with it.
    pub(crate) fn recv(&mut self, tx: &Tx) -> io::Result<usize> {
        let n = sys::recv_batch(&tx.socket, &mut self.batch)?;
        let mut bytes = 0;
        for i in 0..n {
            bytes += self.batch.data(i).len() as u64;
        }
        let c = &tx.counters;
        bump(&c.datagrams_in, n as u64);
        bump(&c.bytes_in, bytes);
        let drops = self.batch.take_kernel_drops_delta();
        if drops > 0 {
            bump(&c.kernel_drops, drops);
        }
        Ok(n)
    }

    /// Reads the socket's drop counter directly and counts drops no
    /// received datagram has reported yet (`SO_RXQ_OVFL` only arrives with
    /// the next datagram that gets through: drops at the end of a burst, or
    /// just before the socket closes, would otherwise never be counted).
    /// One system call; endpoints call it when they close.
    pub(crate) fn sync_kernel_drops(&mut self, tx: &Tx) {
        if let Ok(cumulative) = sys::kernel_drops_now(&tx.socket) {
            self.batch.observe_kernel_drops(cumulative);
            let drops = self.batch.take_kernel_drops_delta();
            if drops > 0 {
                bump(&tx.counters.kernel_drops, drops);
            }
        }
    }

    /// The endpoint is stopping: makes the socket stop accepting datagrams
    /// (it is connected to its own address, so no peer's datagram is
    /// queued any more, nor dropped for a full buffer), reads and discards
    /// what is still queued (counted in `recv_discarded`), then reads the
    /// kernel's drop counter a last time. After this nothing can arrive
    /// or be dropped without a count before the socket closes. Bounded:
    /// at most `CLOSE_DRAIN_CALLS` receive calls even if the connect
    /// failed and a flood goes on.
    pub(crate) fn close_door(&mut self, tx: &Tx) {
        if let Ok(local) = tx.socket.local_addr() {
            let own = match local {
                SocketAddr::V4(a) if a.ip().is_unspecified() => {
                    SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, a.port()))
                }
                SocketAddr::V6(a) if a.ip().is_unspecified() => {
                    SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port()))
                }
                other => other,
            };
            // A failure only means peers keep arriving until the close;
            // the drain below is bounded either way.
            let _ = tx.socket.connect(own);
        }
        for _ in 0..CLOSE_DRAIN_CALLS {
            match self.recv(tx) {
                Ok(n) => bump(&tx.counters.recv_discarded, n as u64),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break, // WouldBlock: empty
            }
        }
        self.sync_kernel_drops(tx);
    }

    /// Whether the last call returned as many datagrams as one call can
    /// (more may be waiting). Judged against what the call could return,
    /// not the configured batch: on the one-datagram-per-call path every
    /// successful call is full, and a lane that stopped after it would
    /// strand a backlog until the next datagram raises a new edge.
    pub(crate) fn was_full(&self, n: usize) -> bool {
        n >= self.batch.per_call()
    }
}

/// The send side: datagrams made while a batch is handled wait in `pending`
/// and go out with one `sendmmsg` at the end of the batch; when the socket
/// would block they move to the bounded `queue`, flushed on writable.
pub(crate) struct Tx {
    pub(crate) socket: UdpSocket,
    pub(crate) source: Option<SourceId>,
    pub(crate) counters: Arc<Counters>,
    pending: SendBatch,
    queue: SendBatch,
    queue_start: usize,
    queue_bytes: usize,
    limit_datagrams: usize,
    limit_bytes: usize,
    default_limit: usize,
    /// Interest currently registered includes WRITABLE.
    writable_registered: bool,
    /// A send met ECONNREFUSED (connected sockets: ICMP port unreachable).
    pub(crate) refused: bool,
    /// The send path's link conditioner; `None` unless `send_impairment`
    /// is set (then `send` pays exactly one branch for it).
    link: Option<Box<Link>>,
}

impl Tx {
    /// `stream` selects the conditioner's seed stream (the server lane).
    pub(crate) fn new(
        socket: UdpSocket,
        cfg: &EndpointConfig,
        counters: Arc<Counters>,
        stream: u64,
    ) -> io::Result<Tx> {
        let local = socket.local_addr()?;
        let link = Link::for_config(cfg.send_impairment.as_ref(), &counters, stream);
        Ok(Tx {
            socket,
            source: None,
            counters,
            pending: SendBatch::new(cfg.batch, cfg.batch),
            // Admission keeps the queue within its bound; the extra batch
            // is room for a pending batch cut short by WouldBlock.
            queue: SendBatch::new(cfg.send_queue_datagrams + cfg.batch, cfg.batch),
            queue_start: 0,
            queue_bytes: 0,
            limit_datagrams: cfg.send_queue_datagrams,
            limit_bytes: cfg.send_queue_bytes,
            default_limit: sys::max_payload(&local),
            writable_registered: false,
            refused: false,
            link,
        })
    }

    pub(crate) fn register<L: Lane>(&mut self, cx: &mut LaneCx<'_, L>) -> io::Result<SourceId> {
        let id = cx.register(&mut self.socket, Interest::READABLE)?;
        self.source = Some(id);
        Ok(id)
    }

    fn blocked(&self) -> bool {
        self.queue_start < self.queue.len()
    }

    /// Datagrams waiting in the send queue.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len() - self.queue_start
    }

    /// Queues one datagram for `dest` (`None`: the connected peer); the
    /// kernel picks its source address.
    #[inline]
    pub(crate) fn send(&mut self, dest: Option<SocketAddr>, data: &[u8]) -> Result<(), SendError> {
        self.send_from(dest, None, data)
    }

    /// Queues one datagram for `dest` (`None`: the connected peer), sent
    /// from `src` if it is `Some` (typically [`Rx::local`] of the datagram
    /// being answered, so the reply leaves from the address the peer sent
    /// to). A source held back by the send conditioner is forgotten: a
    /// delayed datagram leaves from the kernel's choice.
    pub(crate) fn send_from(
        &mut self,
        dest: Option<SocketAddr>,
        src: Option<LocalAddr>,
        data: &[u8],
    ) -> Result<(), SendError> {
        let limit = dest.as_ref().map_or(self.default_limit, sys::max_payload);
        if data.len() > limit {
            bump_shared(&self.counters.send_too_large, 1);
            return Err(SendError::TooLarge {
                size: data.len(),
                limit,
            });
        }
        if self.link.is_some() {
            return self.send_impaired(dest, src, data);
        }
        self.enqueue(dest, src, data)
    }

    /// The send path through the link conditioner: dropped, held (released
    /// by [`Tx::release_held`]), or enqueued now, once or twice. A datagram
    /// the conditioner drops or holds is `Ok`, as on a real network.
    #[inline(never)]
    fn send_impaired(
        &mut self,
        dest: Option<SocketAddr>,
        src: Option<LocalAddr>,
        data: &[u8],
    ) -> Result<(), SendError> {
        let at_once = match self.link.as_deref_mut() {
            Some(link) => link.route(Instant::now(), dest, data),
            None => 1,
        };
        let mut result = Ok(());
        for i in 0..at_once {
            let r = self.enqueue(dest, src, data);
            if i == 0 {
                result = r;
            }
        }
        result
    }

    /// If `timer` is the send conditioner's, hands every held datagram now
    /// due to the normal send path and returns true; the caller's `finish`
    /// flushes them and re-arms the timer.
    pub(crate) fn release_held(&mut self, timer: TimerId) -> bool {
        if !self
            .link
            .as_deref_mut()
            .is_some_and(|l| l.take_timer(timer))
        {
            return false;
        }
        let now = Instant::now();
        while let Some((dest, data)) = self.link.as_deref_mut().and_then(|l| l.pop_due(now)) {
            // A refusal here (queue full) is counted like any other. The
            // conditioner keeps no source: a held datagram leaves from the
            // kernel's choice.
            let _ = self.enqueue(dest, None, &data);
            if let Some(link) = self.link.as_deref_mut() {
                link.recycle(data);
            }
        }
        true
    }

    /// The send path after the size check (and the conditioner): into the
    /// pending batch, or the bounded queue while the socket blocks.
    fn enqueue(
        &mut self,
        dest: Option<SocketAddr>,
        src: Option<LocalAddr>,
        data: &[u8],
    ) -> Result<(), SendError> {
        if self.blocked() {
            let queued = self.queued();
            if queued >= self.limit_datagrams || self.queue_bytes + data.len() > self.limit_bytes {
                bump(&self.counters.send_queue_rejections, 1);
                return Err(SendError::QueueFull {
                    queued_datagrams: queued,
                    queued_bytes: self.queue_bytes,
                    limit_datagrams: self.limit_datagrams,
                    limit_bytes: self.limit_bytes,
                });
            }
            // Fix: entries before `queue_start` were already sent but still
            // occupy the queue's storage until it drains completely. Under
            // steady pressure it never does, so `push` hit the storage's
            // capacity while `queued()` was under the bound, and the datagram
            // was dropped silently (returned Ok, counted as queued, never
            // sent). Drop the sent prefix to make room, then push.
            if !self.queue.push_from(dest, src, data) {
                self.queue.drain_front(self.queue_start);
                self.queue_start = 0;
                let pushed = self.queue.push_from(dest, src, data);
                debug_assert!(pushed, "admission keeps queued() under capacity");
            }
            self.queue_bytes += data.len();
            bump(&self.counters.send_queued, 1);
            return Ok(());
        }
        if self.pending.is_full() {
            self.flush();
            if self.blocked() {
                return self.enqueue(dest, src, data);
            }
        }
        self.pending.push_from(dest, src, data);
        Ok(())
    }

    /// Sends what is pending; what would block moves to the queue.
    pub(crate) fn flush(&mut self) {
        let len = self.pending.len();
        let mut start = 0;
        while start < len {
            match sys::send_batch(&self.socket, &mut self.pending, start) {
                Ok(n) => {
                    let mut bytes = 0;
                    for i in start..start + n {
                        bytes += self.pending.entry(i).1.len() as u64;
                    }
                    bump(&self.counters.datagrams_out, n as u64);
                    bump(&self.counters.bytes_out, bytes);
                    start += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    for i in start..len {
                        let (dest, data) = self.pending.entry(i);
                        let src = self.pending.source(i);
                        // Cannot fail: the queue has a batch of headroom and
                        // is empty whenever `pending` is used.
                        let pushed = self.queue.push_from(dest, src, data);
                        debug_assert!(pushed);
                        self.queue_bytes += data.len();
                    }
                    bump(&self.counters.send_queued, (len - start) as u64);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.note_send_error(&e);
                    start += 1;
                }
            }
        }
        self.pending.clear();
    }

    fn note_send_error(&mut self, e: &io::Error) {
        bump(&self.counters.send_errors, 1);
        if e.kind() == io::ErrorKind::ConnectionRefused {
            self.refused = true;
        }
    }

    /// The socket became writable: sends from the queue until it is empty or
    /// would block again.
    pub(crate) fn on_writable(&mut self) {
        while self.queue_start < self.queue.len() {
            match sys::send_batch(&self.socket, &mut self.queue, self.queue_start) {
                Ok(n) => {
                    let mut bytes = 0;
                    for i in self.queue_start..self.queue_start + n {
                        bytes += self.queue.entry(i).1.len();
                    }
                    bump(&self.counters.datagrams_out, n as u64);
                    bump(&self.counters.bytes_out, bytes as u64);
                    self.queue_bytes -= bytes;
                    self.queue_start += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.note_send_error(&e);
                    self.queue_bytes -= self.queue.entry(self.queue_start).1.len();
                    self.queue_start += 1;
                }
            }
        }
        self.queue.clear();
        self.queue_start = 0;
        self.queue_bytes = 0;
    }

    /// Flushes, then asks for WRITABLE readiness exactly while datagrams
    /// wait in the queue, and arms the send conditioner's timer if it holds
    /// datagrams.
    pub(crate) fn finish<L: Lane>(&mut self, cx: &mut LaneCx<'_, L>) {
        self.flush();
        if let Some(link) = self.link.as_deref_mut() {
            link.arm(cx);
        }
        let want = self.blocked();
        if want != self.writable_registered {
            if let Some(id) = self.source {
                let interest = if want {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if cx.reregister(&mut self.socket, id, interest).is_ok() {
                    self.writable_registered = want;
                }
            }
        }
    }
}

/// Tells whoever waits for an endpoint to close (`stop_and_wait`,
/// `close_and_wait`) that its state is gone. Keep it the lane state's
/// *last* field: fields are dropped in declaration order, so when it
/// signals, the socket is closed (its port free again) and the counters
/// have their final values (`Tx` counts what it discarded as it drops).
#[derive(Default)]
pub(crate) struct DropSignal(Vec<std::sync::mpsc::Sender<()>>);

impl DropSignal {
    pub(crate) fn push(&mut self, done: std::sync::mpsc::Sender<()>) {
        self.0.push(done);
    }
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        for done in self.0.drain(..) {
            let _ = done.send(());
        }
    }
}

impl Drop for Tx {
    /// The endpoint closed (stop, close, a contained panic, runtime
    /// shutdown) with datagrams it had accepted still waiting: the pending
    /// batch and the send queue die with the socket. They are counted, so
    /// nothing accepted with `Ok` is lost silently.
    fn drop(&mut self) {
        let left = self.pending.len() + self.queued();
        if left > 0 {
            bump_shared(&self.counters.send_discarded, left as u64);
        }
    }
}

/// Most receive calls [`Rx::close_door`] makes to empty a stopping socket.
const CLOSE_DRAIN_CALLS: usize = 4096;

/// Batches of datagrams one readiness event may handle before the lane
/// yields to other lanes (it is put back on the run queue).
pub(crate) const RECV_BATCHES_PER_EVENT: usize = 16;

/// What an endpoint lane (server lane, client, cast socket) does with what
/// [`receive`] reads.
pub(crate) trait Receiver: Lane {
    /// The lane's receive and send sides.
    fn sides(&mut self) -> (&mut Rx, &mut Tx);

    /// Handles the `n` datagrams just received. Returning false stops the
    /// loop (the endpoint ended).
    fn batch(&mut self, cx: &mut LaneCx<'_, Self>, n: usize) -> bool;

    /// A receive error other than `WouldBlock` and `Interrupted`, already
    /// counted in `recv_errors`. Returning false stops the loop.
    fn recv_error(&mut self, cx: &mut LaneCx<'_, Self>, e: io::Error) -> bool {
        let _ = (cx, e);
        true
    }
}

/// The receive loop every endpoint runs on readiness: flushes the send
/// queue if writable, then reads batches until the socket is drained (a
/// short batch: a datagram arriving later raises a new edge), the
/// endpoint stops, or `RECV_BATCHES_PER_EVENT` batches were read (then the
/// lane yields). What the handlers sent during a batch goes out with one
/// `sendmmsg` right after it.
pub(crate) fn receive<L: Receiver>(lane: &mut L, cx: &mut LaneCx<'_, L>, ready: Ready) -> Flow {
    if ready.is_writable() {
        lane.sides().1.on_writable();
    }
    for _ in 0..RECV_BATCHES_PER_EVENT {
        let (rx, tx) = lane.sides();
        match rx.recv(tx) {
            Ok(n) => {
                let drained = !rx.was_full(n);
                let go_on = lane.batch(cx, n);
                lane.sides().1.flush();
                if drained || !go_on {
                    return Flow::Drained;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Drained,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                bump(&tx.counters.recv_errors, 1);
                if !lane.recv_error(cx, e) {
                    return Flow::Drained;
                }
            }
        }
    }
    Flow::Yielded
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket as StdSocket};
    use std::sync::mpsc;

    use keel_reactor::{IoModel, Runtime};

    use super::*;
    use crate::socket::{bind, SocketOptions};
    use std::time::Duration;

    /// A lane that only receives and reports each batch's size.
    struct Counting {
        rx: Rx,
        tx: Tx,
        batches: mpsc::Sender<usize>,
    }

    impl Receiver for Counting {
        fn sides(&mut self) -> (&mut Rx, &mut Tx) {
            (&mut self.rx, &mut self.tx)
        }

        fn batch(&mut self, _: &mut LaneCx<'_, Self>, n: usize) -> bool {
            let _ = self.batches.send(n);
            true
        }
    }

    impl Lane for Counting {
        fn on_ready(&mut self, cx: &mut LaneCx<'_, Self>, _: SourceId, ready: Ready) -> Flow {
            receive(self, cx, ready)
        }
    }

    /// Queues `BACKLOG` datagrams on a socket before its lane registers it,
    /// so they all wait behind the lane's first (edge-triggered) readiness,
    /// then checks the lane delivers every one without another datagram
    /// arriving to raise a new edge.
    fn backlog_is_drained(batch: usize, one_per_call: bool) {
        const BACKLOG: usize = 50;
        let cfg = EndpointConfig {
            batch,
            ..EndpointConfig::default()
        };
        let opts = SocketOptions {
            recv_buffer: Some(1 << 20),
            ..SocketOptions::default()
        };
        let (socket, _) = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), &opts).unwrap();
        let to = socket.local_addr().unwrap();
        let peer = StdSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        for i in 0..BACKLOG {
            peer.send_to(&[i as u8; 32], to).unwrap();
        }
        let counters = Arc::new(Counters::default());
        let mut rx = Rx::new(&cfg, &counters, 0);
        if one_per_call {
            rx.batch.force_one_per_call();
        }
        let tx = Tx::new(socket, &cfg, counters.clone(), 0).unwrap();
        let (batches, sizes) = mpsc::channel();
        let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
        let (lane, registered) = rt
            .handle()
            .add_lane_with(Counting { rx, tx, batches }, |st, cx| {
                st.tx.register(cx).map(|_| ())
            });
        registered.unwrap();
        // Loopback queued all of them before the registration: they arrive
        // in microseconds or, if the lane stops early, never.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = 0;
        while got < BACKLOG {
            let left = deadline.saturating_duration_since(Instant::now());
            match sizes.recv_timeout(left) {
                Ok(n) => {
                    assert!(n <= batch, "a batch of {n} with batch size {batch}");
                    got += n;
                }
                Err(_) => panic!(
                    "batch {batch}, one per call {one_per_call}: only {got} of the \
                     {BACKLOG} queued datagrams were delivered; the rest stalled"
                ),
            }
        }
        assert_eq!(got, BACKLOG);
        lane.close();
        rt.stop().unwrap();
    }

    /// The portable path (one datagram per call) with the default batch:
    /// every call is "full", so the lane must keep reading.
    #[test]
    fn backlog_is_drained_one_datagram_per_call_with_a_larger_batch() {
        backlog_is_drained(crate::config::DEFAULT_BATCH, true);
    }

    #[test]
    fn backlog_is_drained_batched() {
        backlog_is_drained(crate::config::DEFAULT_BATCH, false);
        backlog_is_drained(7, false);
    }

    #[test]
    fn backlog_is_drained_with_batch_one() {
        backlog_is_drained(1, false);
    }
}
