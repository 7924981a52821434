//! Sending: [`SendBatch`], the caller-owned arena of outgoing datagrams
//! flushed with `sendmmsg`, and the one-datagram path.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::ptr;

#[cfg(target_os = "linux")]
use super::base::zeroed_msghdr;
use super::base::{cvt, std_to_sockaddr, zeroed_storage, LocalAddr, MAX_MMSG};
#[cfg(target_os = "linux")]
use super::cmsg::{write_pktinfo, CmsgSend};
#[cfg(target_os = "linux")]
use super::recv::INITIAL_SLOTS;

/// Entries a [`SendBatch`] reserves at first; more are allocated (and
/// kept) the first time more are queued at once.
const INITIAL_ENTRIES: usize = 8;

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
/// [`send_batch`](crate::batch::send_batch).
///
/// [`push_from`](Self::push_from) copies the payload into one reusable byte arena;
/// [`clear`](Self::clear) empties it but keeps every allocation, so after
/// warm-up queuing and sending allocate nothing. Room for 8 entries is
/// reserved at first and grows (and stays grown) the first time more are
/// queued at once, up to `capacity`.
///
/// `per_call` is how many datagrams one system call may send: with 1, each
/// [`send_batch`](crate::batch::send_batch) call sends one datagram with `sendto` (the portable path);
/// above 1 it uses `sendmmsg` on Linux. The `sendmmsg` headers start with
/// room for 8 datagrams (or `per_call` if smaller) and double on demand,
/// up to `per_call`, the first time a call has more queued; they never
/// shrink, so steady state allocates nothing.
pub struct SendBatch {
    pub(super) capacity: usize,
    pub(super) per_call: usize,
    pub(super) arena: Vec<u8>,
    pub(super) entries: Vec<SendEntry>,
    /// Scratch for one `sendmmsg` call: starts `min(per_call, 8)` long
    /// (empty on the portable path) and grows on demand up to `per_call`.
    #[cfg(target_os = "linux")]
    pub(super) scratch: MmsgScratch,
}

impl SendBatch {
    /// Creates an empty batch holding up to `capacity` datagrams, sending up
    /// to `per_call` datagrams per system call (1 = one per call).
    ///
    /// # Panics
    ///
    /// If `capacity` or `per_call` is 0.
    pub fn new(capacity: usize, per_call: usize) -> Self {
        assert!(capacity > 0, "send batch capacity must be > 0");
        assert!(per_call > 0, "datagrams per send call must be > 0");
        let per_call = per_call.min(capacity).min(MAX_MMSG);
        SendBatch {
            capacity,
            per_call,
            arena: Vec::new(),
            // Grown on demand (doubling, kept): a queue of 1,024 entries
            // reserved up front is 78 KB a socket that a client sending one
            // datagram a tick never fills.
            entries: Vec::with_capacity(capacity.min(INITIAL_ENTRIES)),
            #[cfg(target_os = "linux")]
            scratch: MmsgScratch::new(if per_call > 1 {
                per_call.min(INITIAL_SLOTS)
            } else {
                0
            }),
        }
    }

    /// [`push_from`](Self::push_from) without a source.
    pub fn push(&mut self, dest: Option<SocketAddr>, payload: &[u8]) -> bool {
        self.push_from(dest, None, payload)
    }

    /// Queues a copy of `payload` for `dest` (`None`: the connected peer),
    /// sent from `src` if it is `Some`: the datagram leaves from that local
    /// address (an `IP_PKTINFO` or `IPV6_PKTINFO` control message; Linux
    /// only, ignored elsewhere). `None` lets the kernel pick the source.
    ///
    /// Returns `false`, queuing nothing, if the batch already holds
    /// `capacity` datagrams. The payload size is not checked here (see
    /// [`max_payload`](crate::max_payload)); an oversized one fails in [`send_batch`](crate::batch::send_batch) with
    /// `EMSGSIZE`.
    pub fn push_from(
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
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the batch holds `capacity` datagrams.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    /// Forgets all queued datagrams, keeping the allocations.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.entries.clear();
    }

    /// Forgets datagrams `0..n` (already sent), keeping the others in order
    /// and every allocation. Used to reclaim a send queue's storage when it
    /// is refilled before it ever drains completely.
    pub fn drain_front(&mut self, n: usize) {
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
    pub fn entry(&self, i: usize) -> (Option<SocketAddr>, &[u8]) {
        let e = self.entries[i];
        (e.dest, &self.arena[e.start..e.start + e.len])
    }

    /// The source queued datagram `i` is sent from (`None`: the kernel
    /// picks it).
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn source(&self, i: usize) -> Option<LocalAddr> {
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
        return send_one_from(fd, batch, i, &src);
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

#[cfg(target_os = "linux")]
/// Sends queued datagram `i` of `batch` from `src` with one `sendmsg`
/// (the one-datagram path when a source is attached).
fn send_one_from(
    fd: &impl AsRawFd,
    batch: &SendBatch,
    i: usize,
    src: &LocalAddr,
) -> io::Result<usize> {
    let (dest, payload) = batch.entry(i);
    let mut storage = zeroed_storage();
    let mut ctrl = CmsgSend::new();
    let ctrl_len = write_pktinfo(&mut ctrl, src);
    let mut iov = libc::iovec {
        // The kernel only reads through this pointer (sendmsg).
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    let mut msg = zeroed_msghdr();
    if let Some(addr) = dest {
        msg.msg_namelen = std_to_sockaddr(&addr, &mut storage);
        msg.msg_name = ptr::addr_of_mut!(storage).cast();
    }
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ptr::addr_of_mut!(ctrl).cast();
    msg.msg_controllen = ctrl_len as _;
    // SAFETY: `msg` points at live locals: one `iovec` over `payload` (read
    // only), a sockaddr of `msg_namelen` bytes or none (connected peer),
    // and `ctrl_len` bytes of control messages; all outlive the call.
    cvt(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) })?;
    Ok(1)
}

#[cfg(target_os = "linux")]
/// Header scratch space for one `sendmmsg` call, grown on demand and never
/// shrunk.
pub(super) struct MmsgScratch {
    pub(super) addrs: Box<[libc::sockaddr_storage]>,
    pub(super) addr_lens: Box<[libc::socklen_t]>,
    /// Per-datagram control messages (a pinned source), written only for
    /// datagrams that have one.
    pub(super) ctrls: Box<[CmsgSend]>,
    pub(super) ctrl_lens: Box<[usize]>,
    pub(super) iovs: Box<[libc::iovec]>,
    pub(super) hdrs: Box<[libc::mmsghdr]>,
}

#[cfg(target_os = "linux")]
// SAFETY: the raw pointers in `iovs`/`hdrs` point only into `MmsgScratch`'s
// own boxed storage or the owning `SendBatch`'s arena; they are rewritten
// before every `sendmmsg` and never dereferenced by Rust code, so moving the
// scratch to another thread is sound.
unsafe impl Send for MmsgScratch {}

#[cfg(target_os = "linux")]
impl MmsgScratch {
    /// Scratch for up to `n` datagrams per call (0 for the portable path).
    pub(super) fn new(n: usize) -> Self {
        MmsgScratch {
            addrs: vec![zeroed_storage(); n].into_boxed_slice(),
            addr_lens: vec![0; n].into_boxed_slice(),
            ctrls: vec![CmsgSend::new(); n].into_boxed_slice(),
            ctrl_lens: vec![0; n].into_boxed_slice(),
            iovs: vec![
                libc::iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0,
                };
                n
            ]
            .into_boxed_slice(),
            hdrs: (0..n)
                .map(|_| libc::mmsghdr {
                    msg_hdr: zeroed_msghdr(),
                    msg_len: 0,
                })
                .collect(),
        }
    }

    /// How many datagrams one call can take now.
    pub(super) fn len(&self) -> usize {
        self.hdrs.len()
    }

    /// Makes room for `n` datagrams (at most `max`), doubling from the
    /// current size: replaces every array (their contents are rewritten
    /// before each call anyway), so no pointer into the old ones survives.
    pub(super) fn reserve(&mut self, n: usize, max: usize) {
        let mut size = self.len().max(1);
        if size >= n {
            return;
        }
        while size < n {
            size *= 2;
        }
        *self = MmsgScratch::new(size.min(max));
    }
}
