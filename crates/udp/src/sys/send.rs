//! Sending: [`SendBatch`], the caller-owned arena of outgoing datagrams
//! flushed with `sendmmsg`, and the one-datagram path.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::ptr;

use super::{cvt, std_to_sockaddr, zeroed_storage, LocalAddr, MAX_MMSG};

/// One queued outgoing datagram: its destination, its source if one is
/// pinned, and where its payload lives in the arena.
#[derive(Clone, Copy, Debug)]
pub(super) struct SendEntry {
    pub(super) dest: Option<SocketAddr>,
    pub(super) src: Option<LocalAddr>,
    pub(super) start: usize,
    pub(super) len: usize,
}

/// Caller-owned arena for up to `capacity` outgoing datagrams, flushed with
/// [`send_batch`].
///
/// [`push_from`](Self::push_from) copies the payload into one reusable byte arena;
/// [`clear`](Self::clear) empties it but keeps every allocation, so after
/// warm-up queuing and sending allocate nothing.
///
/// `per_call` is how many datagrams one system call may send: with 1, each
/// [`send_batch`] call sends one datagram with `sendto` (the portable path);
/// above 1 it uses `sendmmsg` on Linux.
pub(crate) struct SendBatch {
    pub(super) capacity: usize,
    pub(super) per_call: usize,
    pub(super) arena: Vec<u8>,
    pub(super) entries: Vec<SendEntry>,
    /// Scratch for one `sendmmsg` call, `min(per_call, capacity)` long.
    #[cfg(target_os = "linux")]
    pub(super) scratch: super::linux::MmsgScratch,
}

impl SendBatch {
    /// Creates an empty batch holding up to `capacity` datagrams, sending up
    /// to `per_call` datagrams per system call (1 = one per call).
    ///
    /// # Panics
    ///
    /// If `capacity` or `per_call` is 0.
    pub(crate) fn new(capacity: usize, per_call: usize) -> Self {
        assert!(capacity > 0, "send batch capacity must be > 0");
        assert!(per_call > 0, "datagrams per send call must be > 0");
        let per_call = per_call.min(capacity).min(MAX_MMSG);
        SendBatch {
            capacity,
            per_call,
            arena: Vec::new(),
            entries: Vec::with_capacity(capacity),
            #[cfg(target_os = "linux")]
            scratch: super::linux::MmsgScratch::new(if per_call > 1 { per_call } else { 0 }),
        }
    }

    /// [`push_from`](Self::push_from) without a source.
    #[cfg(test)]
    pub(crate) fn push(&mut self, dest: Option<SocketAddr>, payload: &[u8]) -> bool {
        self.push_from(dest, None, payload)
    }

    /// Queues a copy of `payload` for `dest` (`None`: the connected peer),
    /// sent from `src` if it is `Some`: the datagram leaves from that local
    /// address (an `IP_PKTINFO` or `IPV6_PKTINFO` control message; Linux
    /// only, ignored elsewhere). `None` lets the kernel pick the source.
    ///
    /// Returns `false`, queuing nothing, if the batch already holds
    /// `capacity` datagrams. The payload size is not checked here (see
    /// [`max_payload`]); an oversized one fails in [`send_batch`] with
    /// `EMSGSIZE`.
    pub(crate) fn push_from(
        &mut self,
        dest: Option<SocketAddr>,
        src: Option<LocalAddr>,
        payload: &[u8],
    ) -> bool {
        if self.entries.len() >= self.capacity {
            return false;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(payload);
        self.entries.push(SendEntry {
            dest,
            src,
            start,
            len: payload.len(),
        });
        true
    }

    /// Number of queued datagrams.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is queued.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the batch holds `capacity` datagrams.
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    /// Forgets all queued datagrams, keeping the allocations.
    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.entries.clear();
    }

    /// Forgets datagrams `0..n` (already sent), keeping the others in order
    /// and every allocation. Used to reclaim a send queue's storage when it
    /// is refilled before it ever drains completely.
    pub(crate) fn drain_front(&mut self, n: usize) {
        let n = n.min(self.entries.len());
        if n == 0 {
            return;
        }
        // Payloads are appended in order, so the kept ones start at `cut`.
        let cut = self.entries.get(n).map_or(self.arena.len(), |e| e.start);
        self.arena.drain(..cut);
        self.entries.drain(..n);
        for e in &mut self.entries {
            e.start -= cut;
        }
    }

    /// Destination and payload of queued datagram `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub(crate) fn entry(&self, i: usize) -> (Option<SocketAddr>, &[u8]) {
        let e = self.entries[i];
        (e.dest, &self.arena[e.start..e.start + e.len])
    }

    /// The source queued datagram `i` is sent from (`None`: the kernel
    /// picks it).
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub(crate) fn source(&self, i: usize) -> Option<LocalAddr> {
        self.entries[i].src
    }
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("capacity", &self.capacity)
            .field("per_call", &self.per_call)
            .field("len", &self.entries.len())
            .field("arena_bytes", &self.arena.len())
            .finish_non_exhaustive()
    }
}

/// Sends queued datagram `i` with one `sendto` (the portable path), or
/// `sendmsg` when it has a source to attach (Linux).
pub(super) fn send_one(fd: &impl AsRawFd, batch: &SendBatch, i: usize) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    if let Some(src) = batch.entries[i].src {
        return super::linux::send_one_from(fd, batch, i, &src);
    }
    let (dest, payload) = batch.entry(i);
    let mut storage = zeroed_storage();
    let (name, name_len) = match dest {
        Some(addr) => (
            ptr::addr_of!(storage).cast::<libc::sockaddr>(),
            std_to_sockaddr(&addr, &mut storage),
        ),
        None => (ptr::null(), 0),
    };
    // SAFETY: `payload` is a live slice of `payload.len()` readable bytes;
    // `name` is null (connected socket) or points at `storage`, which holds
    // a sockaddr of `name_len` bytes and outlives the call.
    cvt(unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            payload.as_ptr().cast(),
            payload.len(),
            libc::MSG_DONTWAIT,
            name,
            name_len,
        )
    })?;
    Ok(1)
}
