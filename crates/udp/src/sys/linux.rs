//! Linux: batched receive and send with `recvmmsg`/`sendmmsg`, and the
//! `SO_RXQ_OVFL` kernel drop counter.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::os::fd::AsRawFd;
use std::ptr;

use super::base::{cvt, std_to_sockaddr, zeroed_msghdr};
use super::cmsg::write_pktinfo;
use super::recv::{recv_one, RecvBatch};
use super::send::{send_one, SendBatch};

/// `setsockopt(level, name, 1)`.
fn enable(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live c_int and the length passed is its size; the
    // kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::addr_of!(one).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Asks the kernel to attach the socket's cumulative receive-buffer drop
/// counter to received datagrams (`setsockopt(SOL_SOCKET, SO_RXQ_OVFL, 1)`);
/// [`RecvBatch::take_kernel_drops_delta`] then reports the drops.
pub(crate) fn enable_rxq_ovfl(fd: &impl AsRawFd) -> io::Result<()> {
    enable(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL)
}

/// Asks the kernel to report with each received datagram the local address
/// it was sent to ([`RecvBatch::local`]): `IPV6_RECVPKTINFO` on an IPv6
/// socket, and `IP_PKTINFO` on both families (on an IPv6 socket it covers
/// the IPv4 datagrams a dual-stack socket receives; its `ipi_spec_dst` is
/// the right reply source even for a datagram sent to a broadcast
/// address). Meant for sockets bound to an unspecified address: on one
/// bound to a specific address every datagram came to that address.
pub(crate) fn enable_pktinfo(fd: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        enable(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)?;
    }
    enable(fd, libc::IPPROTO_IP, libc::IP_PKTINFO)
}

/// Receives up to `batch.per_call()` datagrams with one system call,
/// without blocking: `recvmmsg(MSG_DONTWAIT)`, or `recvmsg` when that is 1
/// (a batch size of 1).
///
/// Returns how many datagrams arrived (at least 1); read them with
/// [`RecvBatch::data`], [`RecvBatch::addr`] and [`RecvBatch::truncated`].
/// Returns `Err(WouldBlock)` when nothing is queued. Control messages are
/// parsed for `SO_RXQ_OVFL` on both paths.
pub(crate) fn recv_batch(fd: &impl AsRawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    if batch.per_call == 1 {
        return recv_one(fd, batch);
    }
    batch.filled = 0;
    let n = batch.batch;
    // Only the headers the kernel wrote last time (the datagrams received,
    // plus the slot it tried next) need resetting: rebuilding all of them
    // for a call that gets one datagram was most of a client's user time.
    let reset = batch.dirty.min(n);
    let ptrs = batch.ptrs();
    for (i, iov) in batch.iovs[..reset].iter_mut().enumerate() {
        *iov = ptrs.iovec(i);
    }
    let iovs = batch.iovs.as_mut_ptr();
    for (i, hdr) in batch.hdrs[..reset].iter_mut().enumerate() {
        hdr.msg_hdr = ptrs.msghdr(i, iovs.wrapping_add(i));
        hdr.msg_len = 0;
    }
    // A failed call wrote back nothing; it at most looked at slot 0.
    batch.dirty = 1;
    // SAFETY: `hdrs` holds `n` headers, each pointing (through `iovs`) at its
    // own slot of `buf`, its own `sockaddr_storage` and its own control
    // buffer, all owned by `batch`, with the sizes the kernel is told. None
    // of them is touched by Rust until the call returns. A null timeout is
    // allowed.
    let got = cvt(unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            batch.hdrs.as_mut_ptr(),
            n as _,
            libc::MSG_DONTWAIT as _,
            ptr::null_mut(),
        )
    })? as usize;
    for i in 0..got {
        let hdr = batch.hdrs[i];
        batch.complete_slot(i, hdr.msg_len as usize, &hdr.msg_hdr);
    }
    batch.filled = got;
    // recvmmsg writes a header back only for a datagram it received; the
    // slot after the last one was at most offered.
    batch.dirty = got + 1;
    Ok(got)
}

/// Sends queued datagrams `start..` of `batch` with one system call, without
/// blocking: `sendmmsg(MSG_DONTWAIT)` of up to `batch.per_call()` datagrams,
/// or one `sendto` when that is 1 (`sendmsg` for a datagram with a source
/// attached). Entries with no destination go to the connected peer; entries
/// with a source ([`SendBatch::push_from`]) leave from it.
///
/// Returns how many datagrams were sent, counted from `start` (at least 1;
/// 0 only if `start >= batch.len()`), or the error of datagram `start` if
/// none was sent (`WouldBlock` when the send buffer is full, `EMSGSIZE`,
/// `ECONNREFUSED` after an ICMP port unreachable, ...).
///
/// A partial send is normal: resume with `start += n`. After an error that
/// is not `WouldBlock`, datagram `start` will fail the same way again; count
/// it and resume with `start + 1`.
pub(crate) fn send_batch(
    fd: &impl AsRawFd,
    batch: &mut SendBatch,
    start: usize,
) -> io::Result<usize> {
    let len = batch.entries.len();
    if start >= len {
        return Ok(0);
    }
    // One datagram: sendto skips sendmmsg's header import, which is most of
    // what a closed-loop client sends.
    if batch.per_call == 1 || len - start == 1 {
        return send_one(fd, batch, start);
    }
    let n = (len - start).min(batch.per_call);
    let arena = batch.arena.as_ptr();
    let s = &mut batch.scratch;
    for (k, e) in batch.entries[start..start + n].iter().enumerate() {
        s.iovs[k] = libc::iovec {
            // The kernel only reads through this pointer (sendmmsg).
            iov_base: arena.wrapping_add(e.start).cast_mut().cast(),
            iov_len: e.len,
        };
        s.addr_lens[k] = match &e.dest {
            Some(addr) => std_to_sockaddr(addr, &mut s.addrs[k]),
            None => 0,
        };
        s.ctrl_lens[k] = match &e.src {
            Some(src) => write_pktinfo(&mut s.ctrls[k], src),
            None => 0,
        };
    }
    let iovs = s.iovs.as_mut_ptr();
    let addrs = s.addrs.as_mut_ptr();
    let ctrls = s.ctrls.as_mut_ptr();
    for (k, hdr) in s.hdrs[..n].iter_mut().enumerate() {
        let mut msg = zeroed_msghdr();
        if s.addr_lens[k] != 0 {
            msg.msg_name = addrs.wrapping_add(k).cast();
            msg.msg_namelen = s.addr_lens[k];
        }
        if s.ctrl_lens[k] != 0 {
            msg.msg_control = ctrls.wrapping_add(k).cast();
            msg.msg_controllen = s.ctrl_lens[k] as _;
        }
        msg.msg_iov = iovs.wrapping_add(k);
        msg.msg_iovlen = 1;
        hdr.msg_hdr = msg;
        hdr.msg_len = 0;
    }
    // SAFETY: the first `n` headers each point at one `iovec` describing a
    // live range of `batch.arena` (not modified during the call), at a
    // filled `sockaddr_storage` of the given length or a null name for the
    // connected peer, and at a written control buffer of the given length
    // or none. All of it is owned by `batch` and outlives the call; the
    // kernel writes only `msg_len`.
    let sent = cvt(unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            s.hdrs.as_mut_ptr(),
            n as _,
            libc::MSG_DONTWAIT as _,
        )
    })?;
    Ok(sent as usize)
}

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic value; libc does not export it
/// for every target).
#[cfg(not(target_arch = "sparc64"))]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
#[cfg(target_arch = "sparc64")]
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 0x35;

/// The lane-steering program's answer for a datagram it does not
/// recognise: an index no reuseport group reaches (groups hold at most
/// 65,535 sockets), so the kernel finds no socket at it and picks one by
/// its hash instead (`run_bpf_filter` returns NULL for `index >= socks`;
/// `reuseport_select_sock` then falls back to `select_by_hash`). Returning
/// `lanes` would do the same for our own group, but would pick a real
/// socket if the group ever held more than `lanes`.
const STEER_BY_HASH: u32 = u32::MAX;

/// One classic BPF instruction.
const fn insn(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The peer-port steering program for a group of `lanes` sockets: returns
/// `UDP source port % lanes` for IPv4 (any header length) and for IPv6
/// whose next header is UDP; [`STEER_BY_HASH`] for anything else.
///
/// For a `SO_REUSEPORT` UDP group the kernel runs the program with the
/// packet's data pointer already past the UDP header (`run_bpf_filter`
/// pulls `hdr_len`): absolute offset 0 is the payload, so the headers are
/// read relative to the network header (`SKF_NET_OFF`). What the header
/// looks like depends on the datagram, not on the socket: a dual-stack
/// `[::]` socket gets IPv4 datagrams with an IPv4 header, so the program
/// branches on the version nibble.
///
/// A classic BPF load outside the packet ends the program with 0 (lane 0,
/// not the kernel's hash), so every load stays inside the headers the
/// kernel has already checked: the IPv4 header (its IHL included, options
/// and all), the fixed IPv6 header, and the UDP header after them (pulled
/// into the linear area before the socket lookup).
fn steering_program(lanes: u32) -> [libc::sock_filter; 16] {
    use libc::{
        BPF_A, BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_H, BPF_IND, BPF_JA, BPF_JEQ, BPF_JMP, BPF_K,
        BPF_LD, BPF_LSH, BPF_MISC, BPF_MOD, BPF_RET, BPF_RSH, BPF_TAX,
    };
    let net = libc::SKF_NET_OFF as u32;
    [
        // 0: A = version nibble of the network header.
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, net),
        insn(BPF_ALU | BPF_RSH | BPF_K, 0, 0, 4),
        // 2: IPv4 -> 4, else 3.
        insn(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 4),
        // 3: IPv6 -> 10, else -> 15 (by hash).
        insn(BPF_JMP | BPF_JEQ | BPF_K, 6, 11, 6),
        // 4: IPv4: X = IHL * 4, the UDP header's offset.
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, net),
        insn(BPF_ALU | BPF_AND | BPF_K, 0, 0, 0xf),
        insn(BPF_ALU | BPF_LSH | BPF_K, 0, 0, 2),
        insn(BPF_MISC | BPF_TAX, 0, 0, 0),
        // 8: A = source port at network header + X; -> 13.
        insn(BPF_LD | BPF_H | BPF_IND, 0, 0, net),
        insn(BPF_JMP | BPF_JA, 0, 0, 3),
        // 10: IPv6: next header must be UDP (no extension headers).
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, net + 6),
        insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, libc::IPPROTO_UDP as u32),
        // 12: A = source port, 40 bytes past the network header.
        insn(BPF_LD | BPF_H | BPF_ABS, 0, 0, net + 40),
        // 13: lane = port % lanes.
        insn(BPF_ALU | BPF_MOD | BPF_K, 0, 0, lanes),
        insn(BPF_RET | BPF_A, 0, 0, 0),
        // 15: not recognised: let the kernel hash it.
        insn(BPF_RET | BPF_K, 0, 0, STEER_BY_HASH),
    ]
}

/// Steers each datagram arriving at `fd`'s `SO_REUSEPORT` group to socket
/// number `UDP source port % lanes` (in the order the sockets joined the
/// group) with a classic BPF program ([`steering_program`]).
///
/// Works for IPv4 datagrams (with or without IP options, also on a
/// dual-stack IPv6 socket) and IPv6 datagrams without extension headers.
/// Any other datagram (an IPv6 extension header before UDP) is spread by
/// the kernel's hash, as without a program: it still reaches a lane, the
/// same one for the same peer, just not necessarily `port % lanes`.
///
/// Applies to the whole group, so call it once, on any member, after all
/// `lanes` sockets are bound.
pub(crate) fn attach_port_steering(fd: &impl AsRawFd, lanes: u32) -> io::Result<()> {
    if lanes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "lanes: expected at least 1",
        ));
    }
    let mut program = steering_program(lanes);
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `prog` points at `program`, valid instructions that live
    // until the call returns (the kernel copies the program); the length
    // passed is the size of `prog`.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            ptr::addr_of!(prog).cast(),
            mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// The payload-byte steering program for a group of `lanes` sockets:
/// returns `payload[offset]` when the payload is longer than `offset`, its
/// first byte has no bit of `mask` set, and `payload[offset] < lanes`;
/// [`STEER_BY_HASH`] otherwise.
///
/// In a `SO_REUSEPORT` UDP program the packet data starts at the UDP
/// payload and its length is the payload's (see [`steering_program`]), so
/// absolute loads read the payload. A load past the end would end the
/// program with 0 (lane 0), so the length is checked before any load.
fn payload_byte_program(offset: u16, mask: u8, lanes: u32) -> [libc::sock_filter; 8] {
    use libc::{
        BPF_A, BPF_ABS, BPF_B, BPF_JGE, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_LEN,
        BPF_RET, BPF_W,
    };
    let offset = u32::from(offset);
    [
        // 0: A = payload length; not longer than `offset` -> 7 (by hash).
        insn(BPF_LD | BPF_W | BPF_LEN, 0, 0, 0),
        insn(BPF_JMP | BPF_JGT | BPF_K, 0, 5, offset),
        // 2: A = first byte; any bit of `mask` -> 7.
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, 0),
        insn(BPF_JMP | BPF_JSET | BPF_K, 3, 0, u32::from(mask)),
        // 4: A = the lane byte; not below `lanes` -> 7.
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, offset),
        insn(BPF_JMP | BPF_JGE | BPF_K, 1, 0, lanes),
        // 6: lane = the byte.
        insn(BPF_RET | BPF_A, 0, 0, 0),
        // 7: let the kernel hash it.
        insn(BPF_RET | BPF_K, 0, 0, STEER_BY_HASH),
    ]
}

/// Steers each datagram arriving at `fd`'s `SO_REUSEPORT` group to socket
/// number `payload[offset]` (in the order the sockets joined the group)
/// with a classic BPF program ([`payload_byte_program`]); short datagrams,
/// those whose first byte has a bit of `mask` set and those whose byte is
/// not a lane are spread by the kernel's hash.
///
/// Applies to the whole group, so call it once, on any member, after all
/// `lanes` sockets are bound.
pub(crate) fn attach_payload_steering(
    fd: &impl AsRawFd,
    offset: u16,
    mask: u8,
    lanes: u32,
) -> io::Result<()> {
    if lanes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "lanes: expected at least 1",
        ));
    }
    attach_reuseport_program(fd, &mut payload_byte_program(offset, mask, lanes))
}

/// Attaches `program` to `fd`'s reuseport group (`SO_ATTACH_REUSEPORT_CBPF`).
fn attach_reuseport_program(
    fd: &impl AsRawFd,
    program: &mut [libc::sock_filter],
) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `prog` points at `program`, valid instructions that live
    // until the call returns (the kernel copies the program); the length
    // passed is the size of `prog`.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            ptr::addr_of!(prog).cast(),
            mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `SO_MEMINFO` (asm-generic value; libc does not export it for every
/// target).
#[cfg(not(target_arch = "sparc64"))]
const SO_MEMINFO: libc::c_int = 55;
#[cfg(target_arch = "sparc64")]
const SO_MEMINFO: libc::c_int = 0x39;

/// The socket's cumulative receive-buffer drop counter, read directly
/// (`getsockopt(SO_MEMINFO)`, entry `SK_MEMINFO_DROPS`): the same counter
/// `SO_RXQ_OVFL` attaches to received datagrams, but available when no
/// datagram follows the drops (the end of a burst, a socket about to close).
pub(crate) fn kernel_drops_now(fd: &impl AsRawFd) -> io::Result<u32> {
    // SK_MEMINFO_VARS is 9 on current kernels; ask for more room so a
    // kernel with more entries still fits (it writes at most `len`).
    let mut info = [0u32; 16];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live, writable buffer of `len` bytes and `len`
    // is a live socklen_t; the kernel writes at most `len` bytes and
    // stores the length it wrote back into `len`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let index = libc::SK_MEMINFO_DROPS as usize;
    if (len as usize) < (index + 1) * mem::size_of::<u32>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SO_MEMINFO returned no drop counter",
        ));
    }
    Ok(info[index])
}
