//! The receive half of an endpoint: one caller-owned batch reused for
//! every call, the receive conditioner, and the walk that hands each
//! datagram of a batch to the handler.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use keel_reactor::TimerId;

use super::tx::Tx;
use crate::conditioner::Link;
use crate::config::EndpointConfig;
use crate::counters::{bump, Counters};
use crate::sys::{self, LocalAddr, RecvBatch};
use crate::timers::Timers;

/// One datagram as the receive path hands it to an endpoint.
#[derive(Clone, Copy)]
pub(crate) struct Datagram<'a> {
    /// Its sender (for unconnected sockets).
    pub(crate) source: Option<SocketAddr>,
    /// The local address it came to, on a socket bound to a wildcard
    /// address (`IP_PKTINFO`); `None` otherwise.
    pub(crate) local: Option<LocalAddr>,
    /// Its bytes.
    pub(crate) data: &'a [u8],
}

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

    /// The receive side of a connected socket: like [`Rx::new`], but the
    /// kernel is not asked for each datagram's source (always the peer), so
    /// [`Rx::deliver_batch`] must be called with `with_source` false.
    pub(crate) fn connected(cfg: &EndpointConfig, counters: &Arc<Counters>, stream: u64) -> Rx {
        let mut rx = Rx::new(cfg, counters, stream);
        rx.batch = rx.batch.without_sources();
        rx
    }

    /// Hands the `n` datagrams just received to `deliver` in arrival order
    /// (each with its source if `with_source`, and the local address it
    /// came to where known): a truncated one is counted and skipped;
    /// through the receive conditioner each is dropped, held for
    /// [`Rx::deliver_held`], or delivered once or twice. When `deliver`
    /// returns false (the endpoint is closing) nothing more is delivered;
    /// the conditioner still decides the rest of the batch, so its counters
    /// cover every datagram. Without a conditioner the cost is one branch
    /// per batch. Call [`Rx::arm`] afterwards.
    #[inline(always)]
    pub(crate) fn deliver_batch(
        &mut self,
        n: usize,
        with_source: bool,
        mut deliver: impl FnMut(Datagram<'_>) -> bool,
    ) {
        let Some(link) = self.link.as_deref_mut() else {
            for i in 0..n {
                if self.batch.truncated(i) {
                    bump(&self.counters.truncated, 1);
                    continue;
                }
                let datagram = Datagram {
                    source: with_source.then(|| self.batch.addr(i)),
                    local: self.batch.local(i),
                    data: self.batch.data(i),
                };
                if !deliver(datagram) {
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
                open = open
                    && deliver(Datagram {
                        source,
                        local: self.batch.local(i),
                        data: self.batch.data(i),
                    });
            }
        }
    }

    /// The bytes of the first `n` datagrams of the batch just received,
    /// truncated ones left out, before the conditioner (if any) decides
    /// them: what [`deliver_batch`](Self::deliver_batch) will hand on, for
    /// a handler's look-ahead.
    pub(crate) fn batch_data(&self, n: usize) -> impl Iterator<Item = &[u8]> + '_ {
        (0..n)
            .filter(|&i| !self.batch.truncated(i))
            .map(|i| self.batch.data(i))
    }

    /// The receive conditioner's timer fired: hands what is due to
    /// `deliver`, as if just received (without its local address: a held
    /// datagram does not keep it), nothing more once it returns false.
    /// Call [`Rx::arm`] afterwards.
    pub(crate) fn deliver_held(&mut self, mut deliver: impl FnMut(Datagram<'_>) -> bool) {
        let now = Instant::now();
        let mut open = true;
        while let Some((source, data)) = self.pop_held(now) {
            open = open
                && deliver(Datagram {
                    source,
                    local: None,
                    data: &data,
                });
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
    /// the lane delivers what is due with [`Rx::deliver_held`]).
    pub(crate) fn owns_timer(&mut self, timer: TimerId) -> bool {
        self.link
            .as_deref_mut()
            .is_some_and(|l| l.take_timer(timer))
    }

    /// A held datagram due at `now`: its source and bytes. Hand the buffer
    /// back with [`Rx::recycle`].
    fn pop_held(&mut self, now: Instant) -> Option<(Option<SocketAddr>, Vec<u8>)> {
        self.link.as_deref_mut()?.pop_due(now)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if let Some(link) = self.link.as_deref_mut() {
            link.recycle(buf);
        }
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

/// Most receive calls [`Rx::close_door`] makes to empty a stopping socket.
const CLOSE_DRAIN_CALLS: usize = 4096;
