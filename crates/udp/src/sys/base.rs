//! What every part of the sys layer shares: payload limits, the local
//! address type, control-message sizes, the libc return-value helper, the
//! kernel drop tracker, and socket address conversion (a leaf: it depends
//! on nothing else in `sys`).
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};

use socket2::SockAddr;

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
pub(super) const MAX_MMSG: usize = 1024;

/// Control-message space reserved per receive slot: room for every control
/// message keel enables at once. On 64-bit Linux `SO_RXQ_OVFL` needs
/// `CMSG_SPACE(4)` = 24 bytes, `IP_PKTINFO` `CMSG_SPACE(12)` = 32 and
/// `IPV6_PKTINFO` `CMSG_SPACE(20)` = 40 (a dual-stack socket gets both
/// for an IPv4 datagram): 96. The rest leaves room for a control message
/// someone enables later, so it does not truncate ours.
pub(super) const CMSG_SLOT: usize = 128;

/// Control-message space of one outgoing datagram: one `IP_PKTINFO` or
/// `IPV6_PKTINFO` (the larger: `CMSG_SPACE(20)` = 40 on 64-bit Linux).
#[cfg(target_os = "linux")]
pub(super) const CMSG_SEND: usize = 64;

/// `CMSG_SPACE(len)`: room for a control message with `len` data bytes.
#[cfg(target_os = "linux")]
pub(super) const fn cmsg_space(len: usize) -> usize {
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
/// (see [`DatagramSocketCtx::arrived_at`](crate::DatagramSocketCtx::arrived_at)). Passed back when sending, it makes the
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
pub(super) struct CmsgSlot(pub(super) [u8; CMSG_SLOT]);

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

/// An all-zero `sockaddr_storage`.
pub(super) fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is a plain C struct of integers and
    // byte arrays, for which all-zero is a valid value.
    unsafe { mem::zeroed() }
}

/// An all-zero `msghdr` (null pointers, zero lengths).
pub(super) fn zeroed_msghdr() -> libc::msghdr {
    // SAFETY: `msghdr` is a plain C struct of integers and raw pointers, for
    // which all-zero (null pointers) is a valid value. Zeroing also covers
    // the private padding fields some platforms have.
    unsafe { mem::zeroed() }
}

/// Converts a kernel-written socket address into a `SocketAddr` (socket2
/// does the conversion); `None` for another family or a length too short
/// for its family.
pub(super) fn sockaddr_to_std(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
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
pub(super) fn std_to_sockaddr(
    addr: &SocketAddr,
    storage: &mut libc::sockaddr_storage,
) -> libc::socklen_t {
    let addr = SockAddr::from(*addr);
    let len = addr.len();
    *storage = addr.as_storage();
    len
}
