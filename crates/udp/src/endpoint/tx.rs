//! The send half of an endpoint: the pending batch flushed with one
//! `sendmmsg`, the bounded queue used while the socket would block, and
//! the send conditioner.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use keel_reactor::{Interest, Lane, LaneCtx, SourceId, TimerId};
use mio::net::UdpSocket;

use crate::conditioner::Link;
use crate::config::EndpointConfig;
use crate::counters::{bump, bump_shared, Counters};
use crate::error::SendError;
use crate::sys::{self, LocalAddr, SendBatch};

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

    pub(crate) fn register<L: Lane>(&mut self, cx: &mut LaneCtx<'_, L>) -> io::Result<SourceId> {
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
    pub(crate) fn finish<L: Lane>(&mut self, cx: &mut LaneCtx<'_, L>) {
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
