//! Receiving: [`RecvBatch`], the caller-owned buffers of one socket's
//! receive calls, the one-datagram path, and the control messages read
//! with each datagram (the drop counter, the local address).
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::ptr;

use super::base::{
    cvt, sockaddr_to_std, zeroed_msghdr, zeroed_storage, CmsgSlot, KernelDrops, LocalAddr,
    CMSG_SLOT, MAX_MMSG,
};

/// What the last receive call recorded about one slot.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SlotMeta {
    /// Bytes copied into the slot (never more than the slot size).
    pub(super) len: usize,
    /// `MSG_TRUNC`: the datagram was larger than the slot.
    pub(super) truncated: bool,
    /// Length of the source address the kernel wrote.
    pub(super) addr_len: libc::socklen_t,
    /// Length of the control messages the kernel wrote if they include a
    /// local address (`IP_PKTINFO`/`IPV6_PKTINFO`), else 0. Parsed only
    /// when asked ([`RecvBatch::local`]), so sockets without pktinfo pay
    /// nothing for it.
    pub(super) pktinfo_len: u16,
}

/// Caller-owned receive buffers for up to `batch` datagrams of at most
/// `slot_size` bytes each.
///
/// The per-slot state (the source addresses, the control message space,
/// what each call recorded and, on Linux, the `mmsghdr`/`iovec` arrays)
/// starts with 8 slots (or `batch` if smaller) and grows on demand: when a
/// call fills every slot, the next call first doubles the slots, up to
/// `batch`. It never shrinks, so once a socket has seen its largest burst
/// [`recv_batch`](crate::batch::recv_batch) only rebuilds pointers into it
/// and allocates nothing. A socket that seldom gets more than a few
/// datagrams per call (a client) so never pays for 64 slots.
///
/// The data buffer (`batch * slot_size` bytes, one contiguous block) is
/// allocated once at its full size: it is zeroed memory, whose pages cost
/// no resident memory until the kernel writes a datagram into them, so
/// slots never used cost nothing. (Replacing it as the slots grow would
/// free large blocks, which makes glibc raise its mmap threshold, after
/// which every later socket's data buffer comes from the heap and is
/// resident: measured, that cost each of 1,000 clients 35 KiB more.)
///
/// After a successful `recv_batch` returning `n`, datagrams `0..n` can be
/// read with [`data`](Self::data), [`addr`](Self::addr),
/// [`truncated`](Self::truncated) and [`local`](Self::local) until the next
/// call.
///
/// Use one `RecvBatch` per socket: it also tracks that socket's kernel drop
/// counter ([`take_kernel_drops_delta`](Self::take_kernel_drops_delta)).
pub struct RecvBatch {
    /// The most slots the buffers grow to (the configured batch).
    pub(super) batch: usize,
    /// How many slots are allocated now (`1..=batch`).
    pub(super) slots: usize,
    /// Whether the batched call exists (`recvmmsg`): false on the
    /// one-datagram-per-call path, which only ever uses slot 0.
    pub(super) batched: bool,
    pub(super) slot_size: usize,
    /// Whether the kernel is asked for each datagram's source address
    /// (false for a connected socket: see [`without_sources`](Self::without_sources)).
    pub(super) sources: bool,
    /// `batch * slot_size` bytes, allocated once; slot `i` starts at
    /// `i * slot_size`.
    pub(super) buf: Box<[u8]>,
    pub(super) addrs: Box<[libc::sockaddr_storage]>,
    pub(super) cmsgs: Box<[CmsgSlot]>,
    pub(super) meta: Box<[SlotMeta]>,
    /// How many slots the last call filled.
    pub(super) filled: usize,
    /// Leading slots whose headers must be rebuilt before the next batched
    /// call (all of them at first and after the slots grew).
    #[cfg(target_os = "linux")]
    pub(super) dirty: usize,
    pub(super) drops: KernelDrops,
    #[cfg(target_os = "linux")]
    pub(super) iovs: Box<[libc::iovec]>,
    #[cfg(target_os = "linux")]
    pub(super) hdrs: Box<[libc::mmsghdr]>,
}

/// How many slots a [`RecvBatch`] (and a [`SendBatch`](super::SendBatch)'s
/// `sendmmsg` headers) start with before growing on demand.
pub(super) const INITIAL_SLOTS: usize = 8;

// SAFETY: the raw pointers inside `iovs`/`hdrs` only ever point into this
// struct's own boxed storage (which does not move when the struct moves);
// they are rewritten before every system call and never dereferenced
// anywhere else, so moving the whole batch to another thread is sound.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Buffers for up to `batch` datagrams of up to `slot_size` bytes,
    /// allocated for 8 of them (or `batch` if smaller) and
    /// grown on demand (see the type's documentation).
    ///
    /// A `batch` of 1 selects the portable one-datagram-per-call path. A
    /// datagram larger than `slot_size` is truncated and flagged (use
    /// [`MAX_PAYLOAD_V6`](crate::MAX_PAYLOAD_V6) to never truncate).
    ///
    /// # Panics
    ///
    /// If `batch` is 0 or larger than 1024 (`UIO_MAXIOV`), or if
    /// `batch * slot_size` overflows `usize`.
    pub fn new(batch: usize, slot_size: usize) -> Self {
        assert!(
            (1..=MAX_MMSG).contains(&batch),
            "receive batch must be 1..={MAX_MMSG}, got {batch}"
        );
        let total = batch
            .checked_mul(slot_size)
            .expect("receive batch * slot size overflows usize");
        // Only Linux has a batched receive call.
        let batched = cfg!(target_os = "linux") && batch > 1;
        let slots = if batched { batch.min(INITIAL_SLOTS) } else { 1 };
        let mut rb = RecvBatch {
            batch,
            slots: 0,
            batched,
            slot_size,
            sources: true,
            // Zeroed (calloc): untouched pages cost no resident memory. On
            // the one-datagram path only slot 0 is ever used.
            buf: vec![0u8; if batched { total } else { slot_size }].into_boxed_slice(),
            addrs: Box::default(),
            cmsgs: Box::default(),
            meta: Box::default(),
            filled: 0,
            #[cfg(target_os = "linux")]
            dirty: 0,
            drops: KernelDrops::default(),
            #[cfg(target_os = "linux")]
            iovs: Box::default(),
            #[cfg(target_os = "linux")]
            hdrs: Box::default(),
        };
        rb.allocate(slots);
        rb
    }

    /// Replaces every per-slot array (all but the data buffer, which has
    /// room for `batch` slots from the start) with fresh storage for
    /// `slots` slots. What the last call received is forgotten (`filled`
    /// becomes 0), and every header is marked for rebuilding: the old
    /// pointers point into the freed storage.
    fn allocate(&mut self, slots: usize) {
        debug_assert!((1..=self.batch).contains(&slots));
        debug_assert!(self.buf.len() >= slots * self.slot_size);
        // Fresh, not copied: no slot's contents are needed any more.
        self.addrs = vec![zeroed_storage(); slots].into_boxed_slice();
        self.cmsgs = vec![CmsgSlot([0; CMSG_SLOT]); slots].into_boxed_slice();
        self.meta = vec![SlotMeta::default(); slots].into_boxed_slice();
        #[cfg(target_os = "linux")]
        {
            self.iovs = vec![
                libc::iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0,
                };
                slots
            ]
            .into_boxed_slice();
            self.hdrs = (0..slots)
                .map(|_| libc::mmsghdr {
                    msg_hdr: zeroed_msghdr(),
                    msg_len: 0,
                })
                .collect();
            self.dirty = slots;
        }
        self.slots = slots;
        self.filled = 0;
    }

    /// Called before each batched receive: if the last call filled every
    /// slot and the slots can still grow, doubles them (up to `batch`).
    /// Returns whether they grew.
    pub(super) fn grow_if_filled(&mut self) -> bool {
        if self.filled < self.slots || self.slots >= self.batch || !self.batched {
            return false;
        }
        self.allocate((self.slots * 2).min(self.batch));
        true
    }

    /// Stops asking the kernel for each datagram's source address, for a
    /// connected socket (it only receives from its peer): the kernel then
    /// skips copying the address out on every datagram. [`addr`](Self::addr)
    /// must not be called on such a batch.
    pub fn without_sources(mut self) -> Self {
        self.sources = false;
        #[cfg(target_os = "linux")]
        {
            self.dirty = self.slots;
        }
        self
    }

    /// The most datagrams the buffers grow to (the configured batch).
    #[cfg(test)]
    pub(crate) fn batch(&self) -> usize {
        self.batch
    }

    /// How many slots are allocated now (grown on demand up to the batch).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// The most datagrams the last [`recv_batch`](crate::batch::recv_batch)
    /// call could return: the slots allocated for it on Linux (growing on
    /// demand up to the batch size), 1 on the one-datagram-per-call path
    /// (a batch of 1, or any batch where `recvmmsg` does not exist). A call
    /// that returned this many may have left more datagrams queued (and the
    /// next call has more slots, if they can still grow); fewer means the
    /// socket was drained.
    pub fn per_call(&self) -> usize {
        if self.batched {
            self.slots
        } else {
            1
        }
    }

    /// Makes [`recv_batch`](crate::batch::recv_batch) take the portable one-datagram-per-call path
    /// whatever the batch size, as it does where `recvmmsg` does not
    /// exist, so that path can be tested on Linux.
    #[cfg(test)]
    pub(crate) fn force_one_per_call(&mut self) {
        self.batched = false;
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
    #[inline]
    pub fn data(&self, i: usize) -> &[u8] {
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
    #[inline]
    pub fn addr(&self, i: usize) -> SocketAddr {
        let meta = self.meta(i);
        let addr = sockaddr_to_std(&self.addrs[i], meta.addr_len);
        debug_assert!(self.sources, "addr() on a batch without sources");
        debug_assert!(addr.is_some(), "unexpected source address family");
        addr.unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
    }

    /// The local address datagram `i` was sent to, if the socket reports
    /// it (`enable_pktinfo`; only sockets bound to an unspecified
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
    #[inline]
    pub fn local(&self, i: usize) -> Option<LocalAddr> {
        let len = self.meta(i).pktinfo_len;
        if len == 0 {
            return None;
        }
        self.parse_local(i, len)
    }

    /// The control-message walk behind [`local`](Self::local), kept out of
    /// line: every receive walk asks for the local address, and only
    /// sockets bound to a wildcard address have one to parse.
    #[inline(never)]
    fn parse_local(&self, i: usize, len: u16) -> Option<LocalAddr> {
        let v6_socket = libc::c_int::from(self.addrs[i].ss_family) == libc::AF_INET6;
        parse_local(&self.cmsgs[i], usize::from(len), v6_socket)
    }

    /// Whether datagram `i` was larger than the slot and got cut
    /// (`MSG_TRUNC`): [`data`](Self::data) holds only its first
    /// `slot_size` bytes.
    ///
    /// # Panics
    ///
    /// If `i` is not below the count the last call returned.
    #[inline]
    pub fn truncated(&self, i: usize) -> bool {
        self.meta(i).truncated
    }

    /// Kernel receive-buffer drops (`SO_RXQ_OVFL`) reported since the
    /// previous call of this method. Always 0 where the counter does not
    /// exist or was not enabled ([`enable_rxq_ovfl`](crate::batch::enable_rxq_ovfl)).
    pub fn take_kernel_drops_delta(&mut self) -> u64 {
        self.drops.take_delta()
    }

    /// Feeds a cumulative drop count read directly from the socket
    /// ([`kernel_drops_now`]) to the tracker, so drops that no later
    /// datagram reported are counted too.
    pub(crate) fn observe_kernel_drops(&mut self, cumulative: u32) {
        self.drops.observe(cumulative);
    }

    #[inline]
    pub(super) fn meta(&self, i: usize) -> &SlotMeta {
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
    pub(super) fn ptrs(&mut self) -> RecvPtrs {
        RecvPtrs {
            buf: self.buf.as_mut_ptr(),
            slot_size: self.slot_size,
            sources: self.sources,
            addrs: self.addrs.as_mut_ptr(),
            cmsgs: self.cmsgs.as_mut_ptr(),
        }
    }

    /// Records what the kernel wrote into `msg` for slot `i` (`len` bytes
    /// received) and feeds its control messages to the drop tracker.
    // `msg_controllen` is `size_t` on glibc but `socklen_t` on musl.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn complete_slot(&mut self, i: usize, len: usize, msg: &libc::msghdr) {
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
pub(super) struct RecvPtrs {
    pub(super) buf: *mut u8,
    pub(super) slot_size: usize,
    pub(super) sources: bool,
    pub(super) addrs: *mut libc::sockaddr_storage,
    pub(super) cmsgs: *mut CmsgSlot,
}

impl RecvPtrs {
    /// The `iovec` covering slot `i`'s data.
    pub(super) fn iovec(&self, i: usize) -> libc::iovec {
        libc::iovec {
            iov_base: self.buf.wrapping_add(i * self.slot_size).cast(),
            iov_len: self.slot_size,
        }
    }

    /// A `msghdr` receiving into slot `i`: data through `iov` (which must
    /// describe slot `i`), source address and control space of slot `i`.
    pub(super) fn msghdr(&self, i: usize, iov: *mut libc::iovec) -> libc::msghdr {
        let mut msg = zeroed_msghdr();
        if self.sources {
            msg.msg_name = self.addrs.wrapping_add(i).cast();
            msg.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
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
            .field("slots", &self.slots)
            .field("slot_size", &self.slot_size)
            .field("filled", &self.filled)
            .field("drops", &self.drops)
            .finish_non_exhaustive()
    }
}

/// Receives one datagram into slot 0 with `recvmsg` (the portable path).
///
/// Used by both platform modules; on Linux it also reads `SO_RXQ_OVFL`.
pub(super) fn recv_one(fd: &impl AsRawFd, batch: &mut RecvBatch) -> io::Result<usize> {
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
pub(super) struct Cmsgs {
    /// The `SO_RXQ_OVFL` counter.
    pub(super) drops: Option<u32>,
    /// Whether an `IP_PKTINFO` or `IPV6_PKTINFO` message is there (parsed
    /// later, only if asked for: [`RecvBatch::local`]).
    pub(super) pktinfo: bool,
}

/// Reads the `SO_RXQ_OVFL` counter from the control messages of a
/// received `msg`, if present, and notes whether a local address is there.
/// Without control messages (the usual case) this is one comparison.
// `msg_controllen`/`cmsg_len` are `size_t` on glibc but `socklen_t` on musl.
#[allow(clippy::unnecessary_cast)]
pub(super) fn scan_cmsgs(msg: &libc::msghdr) -> Cmsgs {
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
pub(super) fn parse_local(slot: &CmsgSlot, ctrl_len: usize, v6_socket: bool) -> Option<LocalAddr> {
    #[cfg(target_os = "linux")]
    {
        super::cmsg::parse_local(&slot.0[..ctrl_len.min(CMSG_SLOT)], v6_socket)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (slot, ctrl_len, v6_socket);
        None
    }
}
