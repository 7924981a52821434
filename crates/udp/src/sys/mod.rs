//! Low-level socket calls: the only module of keel-udp that contains `unsafe`.
//!
//! Everything here works on a borrowed file descriptor (`&impl AsRawFd`) and
//! on caller-owned buffers ([`RecvBatch`], [`SendBatch`]) that are allocated
//! once and reused, so the receive and send paths allocate nothing per call
//! or per datagram.
//!
//! * On Linux (`linux.rs`) a batch of datagrams costs one `recvmmsg` or
//!   `sendmmsg`; with a batch size of 1 the portable one-datagram-per-call
//!   path (`recvmsg` / `sendto`) is used instead. Both receive paths parse the
//!   `SO_RXQ_OVFL` control message (kernel receive-buffer drops) and, on
//!   sockets that asked for it ([`enable_pktinfo`]), read the address each
//!   datagram came to (`IP_PKTINFO`/`IPV6_PKTINFO`, [`RecvBatch::local`]);
//!   the send paths attach a source address per datagram the same way.
//! * Elsewhere (`portable.rs`) only the one-datagram-per-call path exists and
//!   there is no kernel drop counter and no per-datagram local address.
//!
//! Every call makes exactly one system call: a caller that wants to drain a
//! socket (or flush a whole [`SendBatch`]) loops until `WouldBlock`.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::ptr;

use socket2::SockAddr;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::{
    attach_port_steering, enable_pktinfo, enable_rxq_ovfl, kernel_drops_now, recv_batch, send_batch,
};

#[cfg(any(not(target_os = "linux"), test))]
mod portable;
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::{
    attach_port_steering, enable_pktinfo, enable_rxq_ovfl, kernel_drops_now, recv_batch, send_batch,
};

/// Largest UDP payload that fits in one IPv4 datagram:
/// 65,535 (IPv4 total length) − 20 (IPv4 header) − 8 (UDP header).
pub const MAX_PAYLOAD_V4: usize = 65_507;

/// Largest UDP payload that fits in one IPv6 datagram without jumbograms:
/// 65,535 (IPv6 payload length) − 8 (UDP header).
pub const MAX_PAYLOAD_V6: usize = 65_527;

/// Largest UDP payload that can be sent to (or from) `addr`'s family:
/// [`MAX_PAYLOAD_V4`] or [`MAX_PAYLOAD_V6`].
///
/// A larger payload is rejected by the kernel with `EMSGSIZE`; checking it
/// before the system call lets the caller reject it cheaply and keep going.
pub fn max_payload(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => MAX_PAYLOAD_V4,
        // An IPv4-mapped address (`::ffff:a.b.c.d`, a dual-stack socket's
        // IPv4 peer) is reached over IPv4: the kernel refuses more than the
        // IPv4 limit with EMSGSIZE.
        SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_some() => MAX_PAYLOAD_V4,
        SocketAddr::V6(_) => MAX_PAYLOAD_V6,
    }
}

/// The most datagrams one `recvmmsg`/`sendmmsg` call accepts (`UIO_MAXIOV`).
const MAX_MMSG: usize = 1024;

/// Control-message space reserved per receive slot: room for every control
/// message keel enables at once. On 64-bit Linux `SO_RXQ_OVFL` needs
/// `CMSG_SPACE(4)` = 24 bytes, `IP_PKTINFO` `CMSG_SPACE(12)` = 32 and
/// `IPV6_PKTINFO` `CMSG_SPACE(20)` = 40 (a dual-stack socket gets both
/// for an IPv4 datagram): 96. The rest leaves room for a control message
/// someone enables later, so it does not truncate ours.
const CMSG_SLOT: usize = 128;

/// Control-message space of one outgoing datagram: one `IP_PKTINFO` or
/// `IPV6_PKTINFO` (the larger: `CMSG_SPACE(20)` = 40 on 64-bit Linux).
#[cfg(target_os = "linux")]
const CMSG_SEND: usize = 64;

/// `CMSG_SPACE(len)`: room for a control message with `len` data bytes.
#[cfg(target_os = "linux")]
const fn cmsg_space(len: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(len as libc::c_uint) as usize }
}

#[cfg(target_os = "linux")]
const _: () = {
    let rxq_ovfl = cmsg_space(mem::size_of::<u32>());
    let v4 = cmsg_space(mem::size_of::<libc::in_pktinfo>());
    let v6 = cmsg_space(mem::size_of::<libc::in6_pktinfo>());
    assert!(rxq_ovfl + v4 + v6 <= CMSG_SLOT);
    assert!(v4 <= CMSG_SEND && v6 <= CMSG_SEND);
};

/// Where a datagram arrived: the local address it was sent to and the
/// interface it came in on, as `IP_PKTINFO`/`IPV6_PKTINFO` report them
/// (see [`RecvBatch::local`]). Passed back when sending, it makes the
/// reply leave from that address (a host with several addresses would
/// otherwise pick the source by its routing table, and a peer that talks
/// to one address only accepts replies from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocalAddr {
    /// The local address the datagram was sent to. On an IPv6 socket an
    /// IPv4 datagram's shows as IPv4-mapped (`::ffff:a.b.c.d`), like its
    /// peer's.
    pub ip: IpAddr,
    /// Index of the interface the datagram came in on (0: unknown).
    pub ifindex: u32,
}

/// Control-message buffer for one slot, aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgSlot([u8; CMSG_SLOT]);

const _: () = assert!(mem::align_of::<libc::cmsghdr>() <= mem::align_of::<CmsgSlot>());

/// Return values of libc calls that signal an error with `-1`.
pub(crate) trait IsMinusOne: Copy {
    /// Whether this value is the error sentinel `-1`.
    fn is_minus_one(self) -> bool;
}

impl IsMinusOne for libc::c_int {
    fn is_minus_one(self) -> bool {
        self == -1
    }
}

impl IsMinusOne for libc::ssize_t {
    fn is_minus_one(self) -> bool {
        self == -1
    }
}

/// Turns a libc return value into an `io::Result`: `-1` becomes the current
/// `errno` as an [`io::Error`], anything else is returned as is.
pub(crate) fn cvt<T: IsMinusOne>(ret: T) -> io::Result<T> {
    if ret.is_minus_one() {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Tracks the kernel's cumulative receive-buffer drop counter of one socket
/// (`SO_RXQ_OVFL`) and accumulates the drops seen since the last
/// [`take_delta`](Self::take_delta).
///
/// The kernel attaches to each received datagram the socket's drop counter
/// as it was when that datagram was queued: a wrapping `u32` that starts at 0
/// when the socket is created (the control message is omitted while it is 0).
/// Drops that happen after the last queued datagram therefore show up with
/// the next datagram that gets through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelDrops {
    last: u32,
    pending: u64,
}

impl KernelDrops {
    /// Records one cumulative counter value read from a control message.
    ///
    /// Wrapping-safe. A value that is behind the last one seen (by less than
    /// half the `u32` range) is stale and ignored, so the total never goes
    /// backwards.
    pub(crate) fn observe(&mut self, cumulative: u32) {
        let delta = cumulative.wrapping_sub(self.last);
        if delta < 1 << 31 {
            self.pending += u64::from(delta);
            self.last = cumulative;
        }
    }

    /// Drops observed since the previous call; resets the pending count.
    pub(crate) fn take_delta(&mut self) -> u64 {
        mem::take(&mut self.pending)
    }
}

/// What the last receive call recorded about one slot.
#[derive(Clone, Copy, Debug, Default)]
struct SlotMeta {
    /// Bytes copied into the slot (never more than the slot size).
    len: usize,
    /// `MSG_TRUNC`: the datagram was larger than the slot.
    truncated: bool,
    /// Length of the source address the kernel wrote.
    addr_len: libc::socklen_t,
    /// Length of the control messages the kernel wrote if they include a
    /// local address (`IP_PKTINFO`/`IPV6_PKTINFO`), else 0. Parsed only
    /// when asked ([`RecvBatch::local`]), so sockets without pktinfo pay
    /// nothing for it.
    pktinfo_len: u16,
}

/// Caller-owned receive buffers for up to `batch` datagrams of at most
/// `slot_size` bytes each.
///
/// Everything (one contiguous data buffer, the source addresses, the control
/// message space and, on Linux, the `mmsghdr`/`iovec` arrays) is allocated
/// once in [`new`](Self::new); [`recv_batch`] rebuilds the pointers into it
/// on each call and allocates nothing.
///
/// After a successful `recv_batch` returning `n`, datagrams `0..n` can be
/// read with [`data`](Self::data), [`addr`](Self::addr),
/// [`truncated`](Self::truncated) and [`local`](Self::local) until the next
/// call.
///
/// Use one `RecvBatch` per socket: it also tracks that socket's kernel drop
/// counter ([`take_kernel_drops_delta`](Self::take_kernel_drops_delta)).
pub(crate) struct RecvBatch {
    batch: usize,
    /// The most datagrams one receive call returns: `batch` for
    /// `recvmmsg`, 1 on the one-datagram-per-call path.
    per_call: usize,
    slot_size: usize,
    /// `batch * slot_size` bytes; slot `i` starts at `i * slot_size`.
    buf: Box<[u8]>,
    addrs: Box<[libc::sockaddr_storage]>,
    cmsgs: Box<[CmsgSlot]>,
    meta: Box<[SlotMeta]>,
    /// How many slots the last call filled.
    filled: usize,
    /// Leading slots whose headers must be rebuilt before the next batched
    /// call (all of them at first).
    #[cfg(target_os = "linux")]
    dirty: usize,
    drops: KernelDrops,
    #[cfg(target_os = "linux")]
    iovs: Box<[libc::iovec]>,
    #[cfg(target_os = "linux")]
    hdrs: Box<[libc::mmsghdr]>,
}

// SAFETY: the raw pointers inside `iovs`/`hdrs` only ever point into this
// struct's own boxed storage (which does not move when the struct moves);
// they are rewritten before every system call and never dereferenced
// anywhere else, so moving the whole batch to another thread is sound.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Allocates buffers for `batch` datagrams of up to `slot_size` bytes.
    ///
    /// A `batch` of 1 selects the portable one-datagram-per-call path. A
    /// datagram larger than `slot_size` is truncated and flagged (use
    /// [`MAX_PAYLOAD_V6`] to never truncate).
    ///
    /// # Panics
    ///
    /// If `batch` is 0 or larger than 1024 (`UIO_MAXIOV`), or if
    /// `batch * slot_size` overflows `usize`.
    pub(crate) fn new(batch: usize, slot_size: usize) -> Self {
        assert!(
            (1..=MAX_MMSG).contains(&batch),
            "receive batch must be 1..={MAX_MMSG}, got {batch}"
        );
        let total = batch
            .checked_mul(slot_size)
            .expect("receive batch * slot size overflows usize");
        RecvBatch {
            batch,
            // Only Linux has a batched receive call.
            per_call: if cfg!(target_os = "linux") { batch } else { 1 },
            slot_size,
            buf: vec![0u8; total].into_boxed_slice(),
            addrs: vec![zeroed_storage(); batch].into_boxed_slice(),
            cmsgs: vec![CmsgSlot([0; CMSG_SLOT]); batch].into_boxed_slice(),
            meta: vec![SlotMeta::default(); batch].into_boxed_slice(),
            filled: 0,
            #[cfg(target_os = "linux")]
            dirty: batch,
            drops: KernelDrops::default(),
            #[cfg(target_os = "linux")]
            iovs: vec![
                libc::iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0,
                };
                batch
            ]
            .into_boxed_slice(),
            #[cfg(target_os = "linux")]
            hdrs: (0..batch)
                .map(|_| libc::mmsghdr {
                    msg_hdr: zeroed_msghdr(),
                    msg_len: 0,
                })
                .collect(),
        }
    }

    /// The most datagrams the buffers hold (the configured batch).
    #[cfg(test)]
    pub(crate) fn batch(&self) -> usize {
        self.batch
    }

    /// The most datagrams one [`recv_batch`] call can return: the batch
    /// size on Linux, 1 on the one-datagram-per-call path (a batch of 1,
    /// or any batch where `recvmmsg` does not exist). A call that returned
    /// this many may have left more datagrams queued; fewer means the
    /// socket was drained.
    pub(crate) fn per_call(&self) -> usize {
        self.per_call
    }

    /// Makes [`recv_batch`] take the portable one-datagram-per-call path
    /// whatever the batch size, as it does where `recvmmsg` does not
    /// exist, so that path can be tested on Linux.
    #[cfg(test)]
    pub(crate) fn force_one_per_call(&mut self) {
        self.per_call = 1;
    }

    /// How many datagrams the last successful call received (0 before any,
    /// or after a call that failed).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.filled
    }

    /// The bytes of datagram `i` (at most the slot size; see
    /// [`truncated`](Self::truncated)).
    ///
    /// # Panics
    ///
    /// If `i` is not below the count the last call returned.
    pub(crate) fn data(&self, i: usize) -> &[u8] {
        let meta = self.meta(i);
        let start = i * self.slot_size;
        &self.buf[start..start + meta.len.min(self.slot_size)]
    }

    /// The source address of datagram `i` (IPv4 or IPv6; an IPv4 peer of a
    /// dual-stack IPv6 socket shows as an IPv4-mapped IPv6 address).
    ///
    /// An address family the kernel never reports for a UDP socket would
    /// read as `0.0.0.0:0`.
    ///
    /// # Panics
    ///
    /// If `i` is not below the count the last call returned.
    pub(crate) fn addr(&self, i: usize) -> SocketAddr {
        let meta = self.meta(i);
        let addr = sockaddr_to_std(&self.addrs[i], meta.addr_len);
        debug_assert!(addr.is_some(), "unexpected source address family");
        addr.unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
    }

    /// The local address datagram `i` was sent to, if the socket reports
    /// it ([`enable_pktinfo`]; only sockets bound to an unspecified
    /// address enable it) and it can be a reply's source: `None` for a
    /// datagram sent to a multicast or broadcast address (for IPv4 the
    /// kernel already gives the receiving interface's address instead).
    ///
    /// Costs one branch per call on a socket without pktinfo: the control
    /// messages are only parsed when they include a local address.
    ///
    /// # Panics
    ///
    /// If `i` is not below the count the last call returned.
    pub(crate) fn local(&self, i: usize) -> Option<LocalAddr> {
        let meta = self.meta(i);
        if meta.pktinfo_len == 0 {
            return None;
        }
        let v6_socket = libc::c_int::from(self.addrs[i].ss_family) == libc::AF_INET6;
        parse_local(&self.cmsgs[i], usize::from(meta.pktinfo_len), v6_socket)
    }

    /// Whether datagram `i` was larger than the slot and got cut
    /// (`MSG_TRUNC`): [`data`](Self::data) holds only its first
    /// `slot_size` bytes.
    ///
    /// # Panics
    ///
    /// If `i` is not below the count the last call returned.
    pub(crate) fn truncated(&self, i: usize) -> bool {
        self.meta(i).truncated
    }

    /// Kernel receive-buffer drops (`SO_RXQ_OVFL`) reported since the
    /// previous call of this method. Always 0 where the counter does not
    /// exist or was not enabled ([`enable_rxq_ovfl`]).
    pub(crate) fn take_kernel_drops_delta(&mut self) -> u64 {
        self.drops.take_delta()
    }

    /// Feeds a cumulative drop count read directly from the socket
    /// ([`kernel_drops_now`]) to the tracker, so drops that no later
    /// datagram reported are counted too.
    pub(crate) fn observe_kernel_drops(&mut self, cumulative: u32) {
        self.drops.observe(cumulative);
    }

    fn meta(&self, i: usize) -> &SlotMeta {
        assert!(
            i < self.filled,
            "datagram {i} out of range: last call received {}",
            self.filled
        );
        &self.meta[i]
    }

    /// Raw pointers to the start of the data, address and control storage,
    /// taken once per call so that the per-slot pointers handed to the
    /// kernel all derive from one borrow of each buffer.
    fn ptrs(&mut self) -> RecvPtrs {
        RecvPtrs {
            buf: self.buf.as_mut_ptr(),
            slot_size: self.slot_size,
            addrs: self.addrs.as_mut_ptr(),
            cmsgs: self.cmsgs.as_mut_ptr(),
        }
    }

    /// Records what the kernel wrote into `msg` for slot `i` (`len` bytes
    /// received) and feeds its control messages to the drop tracker.
    // `msg_controllen` is `size_t` on glibc but `socklen_t` on musl.
    #[allow(clippy::unnecessary_cast)]
    fn complete_slot(&mut self, i: usize, len: usize, msg: &libc::msghdr) {
        let found = scan_cmsgs(msg);
        self.meta[i] = SlotMeta {
            len: len.min(self.slot_size),
            truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
            addr_len: msg.msg_namelen,
            // Never more than the CMSG_SLOT bytes offered.
            pktinfo_len: if found.pktinfo {
                (msg.msg_controllen as usize).min(CMSG_SLOT) as u16
            } else {
                0
            },
        };
        if let Some(counter) = found.drops {
            self.drops.observe(counter);
        }
    }
}

/// Base pointers into a [`RecvBatch`]'s storage for one system call.
struct RecvPtrs {
    buf: *mut u8,
    slot_size: usize,
    addrs: *mut libc::sockaddr_storage,
    cmsgs: *mut CmsgSlot,
}

impl RecvPtrs {
    /// The `iovec` covering slot `i`'s data.
    fn iovec(&self, i: usize) -> libc::iovec {
        libc::iovec {
            iov_base: self.buf.wrapping_add(i * self.slot_size).cast(),
            iov_len: self.slot_size,
        }
    }

    /// A `msghdr` receiving into slot `i`: data through `iov` (which must
    /// describe slot `i`), source address and control space of slot `i`.
    fn msghdr(&self, i: usize, iov: *mut libc::iovec) -> libc::msghdr {
        let mut msg = zeroed_msghdr();
        msg.msg_name = self.addrs.wrapping_add(i).cast();
        msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_iov = iov;
        msg.msg_iovlen = 1;
        msg.msg_control = self.cmsgs.wrapping_add(i).cast();
        msg.msg_controllen = CMSG_SLOT as _;
        msg
    }
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("batch", &self.batch)
            .field("slot_size", &self.slot_size)
            .field("filled", &self.filled)
            .field("drops", &self.drops)
            .finish_non_exhaustive()
    }
}

/// Receives one datagram into slot 0 with `recvmsg` (the portable path).
///
/// Used by both platform modules; on Linux it also reads `SO_RXQ_OVFL`.
fn recv_one(fd: &impl AsRawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    batch.filled = 0;
    let ptrs = batch.ptrs();
    let mut iov = ptrs.iovec(0);
    let mut msg = ptrs.msghdr(0, &mut iov);
    // SAFETY: `msg` points at valid, writable buffers owned by `batch` (slot 0
    // data through `iov`, address storage, control space) with the lengths
    // the kernel is told; all of them outlive the call.
    let n = cvt(unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) })?;
    batch.complete_slot(0, n as usize, &msg);
    batch.filled = 1;
    Ok(1)
}

/// What one pass over a received datagram's control messages found.
#[derive(Clone, Copy, Default)]
struct Cmsgs {
    /// The `SO_RXQ_OVFL` counter.
    drops: Option<u32>,
    /// Whether an `IP_PKTINFO` or `IPV6_PKTINFO` message is there (parsed
    /// later, only if asked for: [`RecvBatch::local`]).
    pktinfo: bool,
}

/// Reads the `SO_RXQ_OVFL` counter from the control messages of a
/// received `msg`, if present, and notes whether a local address is there.
/// Without control messages (the usual case) this is one comparison.
// `msg_controllen`/`cmsg_len` are `size_t` on glibc but `socklen_t` on musl.
#[allow(clippy::unnecessary_cast)]
fn scan_cmsgs(msg: &libc::msghdr) -> Cmsgs {
    #[cfg(target_os = "linux")]
    {
        let mut found = Cmsgs::default();
        if msg.msg_control.is_null()
            || (msg.msg_controllen as usize) < mem::size_of::<libc::cmsghdr>()
        {
            return found;
        }
        // SAFETY: CMSG_LEN is pure arithmetic on its argument.
        let min_len = unsafe { libc::CMSG_LEN(mem::size_of::<u32>() as libc::c_uint) } as usize;
        // SAFETY: `msg` came back from recvmsg/recvmmsg: `msg_control` points
        // at our aligned control buffer and `msg_controllen` is the length the
        // kernel filled in (checked above to hold at least one header).
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
        while !cmsg.is_null() {
            // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR only return non-null pointers
            // to a complete `cmsghdr` inside the control buffer.
            let hdr = unsafe { &*cmsg };
            if hdr.cmsg_level == libc::SOL_SOCKET
                && hdr.cmsg_type == libc::SO_RXQ_OVFL
                && hdr.cmsg_len as usize >= min_len
            {
                // SAFETY: the header says its data holds at least 4 bytes
                // (checked just above), all within the control buffer; the
                // data may be unaligned for u32, hence read_unaligned.
                found.drops =
                    Some(unsafe { ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<u32>()) });
            } else if (hdr.cmsg_level, hdr.cmsg_type) == (libc::IPPROTO_IP, libc::IP_PKTINFO)
                || (hdr.cmsg_level, hdr.cmsg_type) == (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
            {
                found.pktinfo = true;
            }
            // SAFETY: `cmsg` is a valid header of `msg`'s control buffer.
            cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
        }
        found
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = msg;
        Cmsgs::default()
    }
}

/// The reply source in the control messages of one received datagram:
/// the first `ctrl_len` bytes of `slot`, from a socket of the IPv6 family
/// if `v6_socket`. See [`RecvBatch::local`].
fn parse_local(slot: &CmsgSlot, ctrl_len: usize, v6_socket: bool) -> Option<LocalAddr> {
    #[cfg(target_os = "linux")]
    {
        linux::parse_local(&slot.0[..ctrl_len.min(CMSG_SLOT)], v6_socket)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (slot, ctrl_len, v6_socket);
        None
    }
}

/// One queued outgoing datagram: its destination, its source if one is
/// pinned, and where its payload lives in the arena.
#[derive(Clone, Copy, Debug)]
struct SendEntry {
    dest: Option<SocketAddr>,
    src: Option<LocalAddr>,
    start: usize,
    len: usize,
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
    capacity: usize,
    per_call: usize,
    arena: Vec<u8>,
    entries: Vec<SendEntry>,
    /// Scratch for one `sendmmsg` call, `min(per_call, capacity)` long.
    #[cfg(target_os = "linux")]
    scratch: linux::MmsgScratch,
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
            scratch: linux::MmsgScratch::new(if per_call > 1 { per_call } else { 0 }),
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
fn send_one(fd: &impl AsRawFd, batch: &SendBatch, i: usize) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    if let Some(src) = batch.entries[i].src {
        return linux::send_one_from(fd, batch, i, &src);
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

/// An all-zero `sockaddr_storage`.
fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is a plain C struct of integers and
    // byte arrays, for which all-zero is a valid value.
    unsafe { mem::zeroed() }
}

/// An all-zero `msghdr` (null pointers, zero lengths).
fn zeroed_msghdr() -> libc::msghdr {
    // SAFETY: `msghdr` is a plain C struct of integers and raw pointers, for
    // which all-zero (null pointers) is a valid value. Zeroing also covers
    // the private padding fields some platforms have.
    unsafe { mem::zeroed() }
}

/// Converts a kernel-written socket address into a `SocketAddr` (socket2
/// does the conversion); `None` for another family or a length too short
/// for its family.
fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let need = match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => mem::size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    if (len as usize) < need {
        return None;
    }
    // SAFETY: the family and the length were checked just above: the
    // storage holds a complete `sockaddr_in`/`sockaddr_in6` (the kernel
    // wrote it), which is what `SockAddr::new` requires.
    let addr = unsafe { SockAddr::new(*storage, len) };
    addr.as_socket()
}

/// Writes `addr` into `storage` as a `sockaddr_in`/`sockaddr_in6` (socket2
/// builds it, platform fields such as `sin_len` included); returns its
/// length.
fn std_to_sockaddr(addr: &SocketAddr, storage: &mut libc::sockaddr_storage) -> libc::socklen_t {
    let addr = SockAddr::from(*addr);
    let len = addr.len();
    *storage = addr.as_storage();
    len
}

#[cfg(test)]
mod tests;
