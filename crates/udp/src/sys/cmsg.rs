//! Linux control messages of the pktinfo kind: reading the address a
//! datagram came to, and writing the source a datagram leaves from.
#![allow(unsafe_code)]

use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ptr;

use super::base::{zeroed_msghdr, LocalAddr, CMSG_SEND};

/// Reads the reply source from a received datagram's control messages
/// (`ctrl`, the bytes the kernel wrote; see [`RecvBatch::local`]).
///
/// `IP_PKTINFO` wins when present: its `ipi_spec_dst` is the datagram's
/// destination for unicast and the receiving interface's address for a
/// broadcast or multicast one, so it is always a valid source (shown
/// IPv4-mapped on an IPv6 socket). `IPV6_PKTINFO` gives the destination
/// itself: unusable as a source (`None`) if it is multicast.
// `cmsg_len` is `size_t` on glibc but `socklen_t` on musl.
#[allow(clippy::unnecessary_cast)]
pub(super) fn parse_local(ctrl: &[u8], v6_socket: bool) -> Option<LocalAddr> {
    if ctrl.len() < mem::size_of::<libc::cmsghdr>() {
        return None;
    }
    let mut msg = zeroed_msghdr();
    // The CMSG_* macros only read through these pointers.
    msg.msg_control = ctrl.as_ptr().cast_mut().cast();
    msg.msg_controllen = ctrl.len() as _;
    // SAFETY: CMSG_LEN is pure arithmetic on its argument.
    let v4_len = unsafe { libc::CMSG_LEN(mem::size_of::<libc::in_pktinfo>() as _) } as usize;
    // SAFETY: as above.
    let v6_len = unsafe { libc::CMSG_LEN(mem::size_of::<libc::in6_pktinfo>() as _) } as usize;
    let mut from_v4: Option<Option<LocalAddr>> = None;
    let mut from_v6 = None;
    // SAFETY: `msg` describes `ctrl`, control messages the kernel wrote
    // into an aligned buffer (`CmsgSlot`), `ctrl.len()` bytes long
    // (checked above to hold at least one header).
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR only return non-null pointers
        // to a complete `cmsghdr` inside the control buffer.
        let hdr = unsafe { &*cmsg };
        // SAFETY: pointer arithmetic within the same control message.
        let data = unsafe { libc::CMSG_DATA(cmsg) };
        let len = hdr.cmsg_len as usize;
        match (hdr.cmsg_level, hdr.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) if len >= v4_len => {
                // SAFETY: the header says its data holds an `in_pktinfo`
                // (length checked just above), inside the control buffer;
                // it may be unaligned, hence read_unaligned.
                let info = unsafe { ptr::read_unaligned(data.cast::<libc::in_pktinfo>()) };
                let ip = Ipv4Addr::from(info.ipi_spec_dst.s_addr.to_ne_bytes());
                from_v4 = Some(usable_v4(ip).then(|| LocalAddr {
                    ip: if v6_socket {
                        IpAddr::V6(ip.to_ipv6_mapped())
                    } else {
                        IpAddr::V4(ip)
                    },
                    ifindex: info.ipi_ifindex as u32,
                }));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if len >= v6_len => {
                // SAFETY: as above, for an `in6_pktinfo`.
                let info = unsafe { ptr::read_unaligned(data.cast::<libc::in6_pktinfo>()) };
                let ip = Ipv6Addr::from(info.ipi6_addr.s6_addr);
                let usable = match ip.to_ipv4_mapped() {
                    Some(v4) => usable_v4(v4),
                    None => !ip.is_multicast() && !ip.is_unspecified(),
                };
                from_v6 = usable.then_some(LocalAddr {
                    ip: IpAddr::V6(ip),
                    ifindex: info.ipi6_ifindex,
                });
            }
            _ => {}
        }
        // SAFETY: `cmsg` is a valid header of `msg`'s control buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    from_v4.unwrap_or(from_v6)
}

/// Whether an IPv4 destination can be a reply's source.
fn usable_v4(ip: Ipv4Addr) -> bool {
    !ip.is_unspecified() && !ip.is_broadcast() && !ip.is_multicast()
}

/// Control-message buffer for one outgoing datagram, aligned for
/// `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(super) struct CmsgSend([u8; CMSG_SEND]);

const _: () = assert!(mem::align_of::<libc::cmsghdr>() <= mem::align_of::<CmsgSend>());

impl CmsgSend {
    pub(super) const fn new() -> Self {
        CmsgSend([0; CMSG_SEND])
    }
}

/// Writes the control message that makes a datagram leave from `src` into
/// `buf`; returns its length (`msg_controllen`).
///
/// IPv4: `IP_PKTINFO` with `ipi_spec_dst` = the address and no interface
/// (routing picks it, as for any datagram). IPv6: `IPV6_PKTINFO` with the
/// address (IPv4-mapped for an IPv4 peer of a dual-stack socket: the
/// kernel accepts it as the IPv4 source) and the interface only for a
/// link-local address, which means nothing without it.
pub(super) fn write_pktinfo(buf: &mut CmsgSend, src: &LocalAddr) -> usize {
    match src.ip {
        IpAddr::V4(ip) => write_cmsg(
            buf,
            libc::IPPROTO_IP,
            libc::IP_PKTINFO,
            libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            },
        ),
        IpAddr::V6(ip) => write_cmsg(
            buf,
            libc::IPPROTO_IPV6,
            libc::IPV6_PKTINFO,
            libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: if ip.is_unicast_link_local() {
                    src.ifindex
                } else {
                    0
                },
            },
        ),
    }
}

/// Writes one control message (`level`, `kind`, `data`) at the start of
/// `buf`; returns `CMSG_SPACE` of it.
fn write_cmsg<T: Copy>(
    buf: &mut CmsgSend,
    level: libc::c_int,
    kind: libc::c_int,
    data: T,
) -> usize {
    // SAFETY: CMSG_LEN and CMSG_SPACE are pure arithmetic.
    let (len, space) = unsafe {
        (
            libc::CMSG_LEN(mem::size_of::<T>() as _) as usize,
            libc::CMSG_SPACE(mem::size_of::<T>() as _) as usize,
        )
    };
    // Checked at compile time for both pktinfo types (sys/mod.rs).
    debug_assert!(space <= CMSG_SEND);
    // SAFETY: all-zero is a valid `cmsghdr` (integers, and padding on
    // some targets).
    let mut hdr: libc::cmsghdr = unsafe { mem::zeroed() };
    hdr.cmsg_len = len as _;
    hdr.cmsg_level = level;
    hdr.cmsg_type = kind;
    let base = buf.0.as_mut_ptr().cast::<libc::cmsghdr>();
    // SAFETY: `buf` is CMSG_SEND bytes aligned for `cmsghdr` (checked at
    // compile time); the header at its start and the data at CMSG_DATA
    // (CMSG_LEN(0) bytes in) end within `space <= CMSG_SEND` bytes. The
    // data offset is aligned for the header's size only, so the data is
    // written unaligned.
    unsafe {
        ptr::write(base, hdr);
        ptr::write_unaligned(libc::CMSG_DATA(base).cast::<T>(), data);
    }
    space
}
