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
    set_int(fd, level, name, 1)
}

/// `setsockopt(level, name, value)` for an `int` option.
fn set_int(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size;
    // the kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::addr_of!(value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `getsockopt(level, name)` for an `int` option.
#[cfg(test)]
fn get_int(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and `len` holds `value`'s size;
    // the kernel writes at most that many bytes and the length back.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::addr_of_mut!(value).cast(),
            ptr::addr_of_mut!(len),
        )
    })?;
    Ok(value)
}

/// Sets the Don't Fragment bit on every IPv4 datagram the socket sends
/// and forbids IPv6 fragmentation by this host: `IP_MTU_DISCOVER` (and on
/// an IPv6 socket also `IPV6_MTU_DISCOVER`, for both families of a
/// dual-stack socket) set to `PMTUDISC_PROBE`, which sets DF but sizes by
/// the interface MTU, not by the kernel's path-MTU cache (which a forged
/// ICMP message could shrink): a datagram larger than the interface MTU
/// fails with `EMSGSIZE` instead of leaving in fragments. With DF the
/// kernel also skips the IPv4 identification generator (a keyed hash and
/// an atomic on a table shared by every socket) on each send.
pub(crate) fn set_dont_fragment(fd: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
        )?;
    }
    set_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_PROBE,
    )
}

/// Whether [`set_dont_fragment`] is in effect (IPv4's setting).
#[cfg(test)]
pub(crate) fn dont_fragment(fd: &impl AsRawFd) -> io::Result<bool> {
    Ok(get_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)? == libc::IP_PMTUDISC_PROBE)
}

/// Asks the kernel to attach the socket's cumulative receive-buffer drop
/// counter to received datagrams (`setsockopt(SOL_SOCKET, SO_RXQ_OVFL, 1)`);
/// [`RecvBatch::take_kernel_drops_delta`] then reports the drops.
pub fn enable_rxq_ovfl(fd: &impl AsRawFd) -> io::Result<()> {
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
pub fn recv_batch(fd: &impl AsRawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    if !batch.batched {
        return recv_one(fd, batch);
    }
    // The last call filled every slot: more may come in bursts this large,
    // so the slots double (up to the batch) before this call. Growing
    // replaces the storage and marks every header dirty, so the pointers
    // below are all re-derived from the new buffers.
    batch.grow_if_filled();
    batch.filled = 0;
    let n = batch.slots;
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
    // SAFETY: `hdrs` holds `n` (= `slots`) headers, each pointing (through
    // `iovs`) at its own slot of `buf` (which has room for `batch >= n`
    // slots and is never reallocated), its own `sockaddr_storage` and its
    // own control buffer, all owned by `batch`, with the sizes the kernel
    // is told. Headers not rebuilt above were built after the last growth
    // (growing marks them all dirty), so none points into freed storage.
    // None of them is touched by Rust until the call returns. A null
    // timeout is allowed.
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
pub fn send_batch(fd: &impl AsRawFd, batch: &mut SendBatch, start: usize) -> io::Result<usize> {
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
    // Grown (replaced) before any pointer into it is taken below.
    batch.scratch.reserve(n, batch.per_call);
    let arena = batch.arena.as_ptr();
    let s = &mut batch.scratch;
    debug_assert!(s.len() >= n);
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
/// first byte has no bit of `mask` set, and `payload[offset] < lanes`.
/// Any other datagram is not steered by the byte: with `by_source_ip`
/// `None` the program returns [`STEER_BY_HASH`] for it (the kernel's hash
/// of addresses and ports); with `Some(bits)`, the lane of its source IP,
/// an IPv6 one by its first `bits` bits ([`source_ip_lane`]).
///
/// In a `SO_REUSEPORT` UDP program the packet data starts at the UDP
/// payload and its length is the payload's (see [`steering_program`]), so
/// absolute loads read the payload. A load past the end would end the
/// program with 0 (lane 0), so the length is checked before any load.
fn payload_byte_program(
    offset: u16,
    mask: u8,
    lanes: u32,
    by_source_ip: Option<u8>,
) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_A, BPF_ABS, BPF_B, BPF_JGE, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_LEN,
        BPF_RET, BPF_W,
    };
    let offset = u32::from(offset);
    let mut program = vec![
        // 0: A = payload length; not longer than `offset` -> 7 (unsteered).
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
    ];
    match by_source_ip {
        // 7: the lane of the source IP.
        Some(bits) => program.extend_from_slice(&source_ip_lane(lanes, bits)),
        // 7: let the kernel hash it.
        None => program.push(insn(BPF_RET | BPF_K, 0, 0, STEER_BY_HASH)),
    }
    program
}

/// Multiplier of the source-IP hash (Fibonacci hashing: 2^32 divided by
/// the golden ratio, odd), so that neighbouring addresses spread.
const SOURCE_IP_MIX: u32 = 0x9e37_79b1;

/// The masks of the two 32-bit words that keep an IPv6 address's first
/// `bits` bits (at most 64).
fn ipv6_prefix_masks(bits: u8) -> (u32, u32) {
    let keep = |n: u32| u32::MAX.checked_shl(32 - n.min(32)).unwrap_or(0);
    let bits = u32::from(bits.min(64));
    (keep(bits), keep(bits.saturating_sub(32)))
}

/// The tail of a steering program that returns the lane of the datagram's
/// source IP: `((ip * SOURCE_IP_MIX) >> 16) % lanes`, where `ip` is the
/// IPv4 source address, or for IPv6 the two 32-bit words of the source
/// address's first 64 bits, cut to its first `ipv6_bits` bits (at most
/// 64), xored: one prefix, one source. [`STEER_BY_HASH`] for a network
/// header that is neither.
///
/// Like [`steering_program`] it reads the network header through
/// `SKF_NET_OFF`, branching on the version nibble (a dual-stack `[::]`
/// socket gets IPv4 datagrams with an IPv4 header), and loads only bytes
/// the kernel has checked: the source address lies in the fixed part of
/// either header (IPv4 bytes 12..16 of at least 20; IPv6 bytes 8..24 of
/// 40), so neither IP options nor IPv6 extension headers matter. Jumps are
/// relative to the next instruction.
fn source_ip_lane(lanes: u32, ipv6_bits: u8) -> [libc::sock_filter; 17] {
    use libc::{
        BPF_A, BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_JA, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_MISC,
        BPF_MOD, BPF_MUL, BPF_RET, BPF_RSH, BPF_TAX, BPF_W, BPF_X, BPF_XOR,
    };
    let net = libc::SKF_NET_OFF as u32;
    let (high, low) = ipv6_prefix_masks(ipv6_bits);
    [
        // 0: A = version nibble of the network header.
        insn(BPF_LD | BPF_B | BPF_ABS, 0, 0, net),
        insn(BPF_ALU | BPF_RSH | BPF_K, 0, 0, 4),
        // 2: IPv4 -> 11, else 3.
        insn(BPF_JMP | BPF_JEQ | BPF_K, 8, 0, 4),
        // 3: IPv6 -> 4, else -> 16 (by hash).
        insn(BPF_JMP | BPF_JEQ | BPF_K, 0, 12, 6),
        // 4: IPv6: A = the prefix's first word ^ its second.
        insn(BPF_LD | BPF_W | BPF_ABS, 0, 0, net + 8),
        insn(BPF_ALU | BPF_AND | BPF_K, 0, 0, high),
        insn(BPF_MISC | BPF_TAX, 0, 0, 0),
        insn(BPF_LD | BPF_W | BPF_ABS, 0, 0, net + 12),
        insn(BPF_ALU | BPF_AND | BPF_K, 0, 0, low),
        insn(BPF_ALU | BPF_XOR | BPF_X, 0, 0, 0),
        // 10: -> 12.
        insn(BPF_JMP | BPF_JA, 0, 0, 1),
        // 11: IPv4: A = the source address.
        insn(BPF_LD | BPF_W | BPF_ABS, 0, 0, net + 12),
        // 12: lane = ((A * mix) >> 16) % lanes.
        insn(BPF_ALU | BPF_MUL | BPF_K, 0, 0, SOURCE_IP_MIX),
        insn(BPF_ALU | BPF_RSH | BPF_K, 0, 0, 16),
        insn(BPF_ALU | BPF_MOD | BPF_K, 0, 0, lanes),
        insn(BPF_RET | BPF_A, 0, 0, 0),
        // 16: not recognised: let the kernel hash it.
        insn(BPF_RET | BPF_K, 0, 0, STEER_BY_HASH),
    ]
}

/// Steers each datagram arriving at `fd`'s `SO_REUSEPORT` group to socket
/// number `payload[offset]` (in the order the sockets joined the group)
/// with a classic BPF program ([`payload_byte_program`]); short datagrams,
/// those whose first byte has a bit of `mask` set and those whose byte is
/// not a lane are spread by the kernel's hash, or with `by_source_ip` by
/// their source IP (one IPv4 address, one IPv6 prefix of that many bits:
/// one lane).
///
/// Applies to the whole group, so call it once, on any member, after all
/// `lanes` sockets are bound.
pub(crate) fn attach_payload_steering(
    fd: &impl AsRawFd,
    offset: u16,
    mask: u8,
    by_source_ip: Option<u8>,
    lanes: u32,
) -> io::Result<()> {
    if lanes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "lanes: expected at least 1",
        ));
    }
    attach_reuseport_program(
        fd,
        &mut payload_byte_program(offset, mask, lanes, by_source_ip),
    )
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
pub fn kernel_drops_now(fd: &impl AsRawFd) -> io::Result<u32> {
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

#[cfg(test)]
mod program_tests {
    //! The steering programs run on made-up packets by a small classic BPF
    //! interpreter (the instructions they use, with the kernel's rules: a
    //! load outside the packet ends the program with 0), for headers the
    //! loopback tests cannot send: IPv6 prefixes, IPv4 options, a network
    //! header that is neither.

    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// Runs `program` on a datagram whose network header (IP and UDP
    /// headers) is `net` and whose UDP payload is `payload`.
    fn run(program: &[libc::sock_filter], net: &[u8], payload: &[u8]) -> u32 {
        use libc::*;
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let load = |k: u32, size: usize| -> Option<u32> {
            let (data, at) = match (k as i32).checked_sub(SKF_NET_OFF) {
                Some(off) if (k as i32) < 0 => (net, off as usize),
                _ => (payload, k as usize),
            };
            let bytes = data.get(at..at.checked_add(size)?)?;
            Some(bytes.iter().fold(0u32, |v, &b| v << 8 | u32::from(b)))
        };
        loop {
            let i = program[pc];
            pc += 1;
            let code = u32::from(i.code);
            let size = |code: u32| match code & 0x18 {
                BPF_W => 4,
                BPF_H => 2,
                _ => 1,
            };
            match code & 0x07 {
                BPF_LD => {
                    let got = match code & 0xe0 {
                        BPF_LEN => Some(payload.len() as u32),
                        BPF_ABS => load(i.k, size(code)),
                        BPF_IND => load(x.wrapping_add(i.k), size(code)),
                        other => panic!("load mode {other:#x}"),
                    };
                    match got {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                BPF_ALU => {
                    let v = if code & BPF_X != 0 { x } else { i.k };
                    a = match code & 0xf0 {
                        BPF_RSH => a >> v,
                        BPF_LSH => a << v,
                        BPF_AND => a & v,
                        BPF_XOR => a ^ v,
                        BPF_MUL => a.wrapping_mul(v),
                        BPF_MOD => a % v,
                        other => panic!("alu op {other:#x}"),
                    };
                }
                BPF_MISC => {
                    assert_eq!(code & 0xf8, BPF_TAX);
                    x = a;
                }
                BPF_JMP => {
                    let taken = match code & 0xf0 {
                        BPF_JA => {
                            pc += i.k as usize;
                            continue;
                        }
                        BPF_JEQ => a == i.k,
                        BPF_JGT => a > i.k,
                        BPF_JGE => a >= i.k,
                        BPF_JSET => a & i.k != 0,
                        other => panic!("jump {other:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                BPF_RET => return if code & 0x18 == BPF_A { a } else { i.k },
                other => panic!("class {other:#x}"),
            }
        }
    }

    /// An IPv4 header (with `options` words of options) and a UDP header.
    fn v4(src: Ipv4Addr, sport: u16, options: u8) -> Vec<u8> {
        let mut h = vec![0u8; 20 + 4 * usize::from(options)];
        h[0] = 0x40 | (5 + options);
        h[9] = libc::IPPROTO_UDP as u8;
        h[12..16].copy_from_slice(&src.octets());
        h.extend_from_slice(&sport.to_be_bytes());
        h.extend_from_slice(&[0; 6]);
        h
    }

    /// A fixed IPv6 header and a UDP header.
    fn v6(src: Ipv6Addr, sport: u16) -> Vec<u8> {
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[6] = libc::IPPROTO_UDP as u8;
        h[8..24].copy_from_slice(&src.octets());
        h.extend_from_slice(&sport.to_be_bytes());
        h.extend_from_slice(&[0; 6]);
        h
    }

    /// The lane `source_ip_lane` should give, computed in Rust: an IPv6
    /// address's first 64 bits, xored (the prefix cut before).
    fn expected(ip: IpAddr, lanes: u32) -> u32 {
        let word = match ip {
            IpAddr::V4(v4) => u32::from(v4),
            IpAddr::V6(v6) => {
                let o = v6.octets();
                u32::from_be_bytes([o[0], o[1], o[2], o[3]])
                    ^ u32::from_be_bytes([o[4], o[5], o[6], o[7]])
            }
        };
        (word.wrapping_mul(SOURCE_IP_MIX) >> 16) % lanes
    }

    #[test]
    fn ipv6_prefix_masks_keep_the_first_bits() {
        assert_eq!(ipv6_prefix_masks(0), (0, 0));
        assert_eq!(ipv6_prefix_masks(16), (0xffff_0000, 0));
        assert_eq!(ipv6_prefix_masks(32), (u32::MAX, 0));
        assert_eq!(ipv6_prefix_masks(48), (u32::MAX, 0xffff_0000));
        assert_eq!(ipv6_prefix_masks(64), (u32::MAX, u32::MAX));
        assert_eq!(ipv6_prefix_masks(128), (u32::MAX, u32::MAX));
    }

    #[test]
    fn an_ipv6_prefix_shorter_than_64_bits_is_one_source() {
        let ip6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        let p = payload_byte_program(1, 0x80, 7, Some(48));
        let lane = |s: &str| run(&p, &v6(ip6(s), 1), MARKED);
        assert_eq!(
            lane("2001:db8:1::1"),
            expected(ip6("2001:db8:1::").into(), 7)
        );
        assert_eq!(lane("2001:db8:1:ffff::1"), lane("2001:db8:1::1"));
        assert_eq!(
            lane("2001:db8:2::1"),
            expected(ip6("2001:db8:2::").into(), 7)
        );
        // IPv4 is not cut.
        let v4lane = run(&p, &v4(Ipv4Addr::new(192, 0, 2, 1), 1, 0), MARKED);
        assert_eq!(v4lane, expected(Ipv4Addr::new(192, 0, 2, 1).into(), 7));
    }

    const MARKED: &[u8] = &[0xc0, 1, 0, 0];

    #[test]
    fn unsteered_datagrams_go_by_source_ip_with_ipv6_by_its_64_bits() {
        for lanes in [2, 3, 4, 7, 256] {
            let p = payload_byte_program(1, 0x80, lanes, Some(64));
            for i in 0..64u8 {
                let ip = Ipv4Addr::new(192, 0, 2, i);
                let lane = expected(ip.into(), lanes);
                for (port, options) in [(1, 0), (40_000, 0), (2, 10)] {
                    assert_eq!(run(&p, &v4(ip, port, options), MARKED), lane);
                    // Too short, a byte that is no lane: the same.
                    assert_eq!(run(&p, &v4(ip, port, options), &[0x40]), lane);
                    if lanes < 256 {
                        assert_eq!(run(&p, &v4(ip, port, options), &[0x40, 255]), lane);
                    }
                    assert_eq!(run(&p, &v4(ip, port, options), &[]), lane);
                }
                // A lane byte still decides.
                assert_eq!(run(&p, &v4(ip, 9, 0), &[0x40, 1]), 1);
            }
            let ip6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
            let p64 = |s: &str, port| run(&p, &v6(ip6(s), port), MARKED);
            let lane = p64("2001:db8::1", 1);
            assert_eq!(lane, expected(ip6("2001:db8::1").into(), lanes));
            // Anything in the /64, any port: the same lane.
            assert_eq!(p64("2001:db8::ffff:2", 2), lane);
            assert_eq!(p64("2001:db8::ffff:ffff:ffff:ffff", 3), lane);
            assert_eq!(
                p64("2001:db8:0:1::1", 1),
                expected(ip6("2001:db8:0:1::").into(), lanes)
            );
            // IPv4 on a dual-stack socket has an IPv4 header; a header of
            // another version is left to the kernel.
            let mut odd = v4(Ipv4Addr::new(192, 0, 2, 1), 1, 0);
            odd[0] = 0x50;
            assert_eq!(run(&p, &odd, MARKED), STEER_BY_HASH);
        }
        // 64 neighbouring addresses spread over every one of 4 lanes.
        let p = payload_byte_program(1, 0x80, 4, Some(64));
        let mut count = [0u32; 4];
        for i in 0..64u8 {
            count[run(&p, &v4(Ipv4Addr::new(192, 0, 2, i), 1, 0), MARKED) as usize] += 1;
        }
        assert!(count.iter().all(|&n| n >= 8), "{count:?}");
    }

    #[test]
    fn without_source_ip_unsteered_datagrams_are_left_to_the_kernel() {
        let p = payload_byte_program(1, 0x80, 4, None);
        let net = v4(Ipv4Addr::new(192, 0, 2, 1), 1, 0);
        for payload in [MARKED, &[0x40], &[0x40, 4], &[]] {
            assert_eq!(run(&p, &net, payload), STEER_BY_HASH, "{payload:?}");
        }
        assert_eq!(run(&p, &net, &[0x40, 3]), 3);
    }

    #[test]
    fn peer_port_steering_reads_the_udp_source_port() {
        let p = steering_program(4);
        assert_eq!(run(&p, &v4(Ipv4Addr::new(192, 0, 2, 1), 4001, 0), &[]), 1);
        assert_eq!(run(&p, &v4(Ipv4Addr::new(192, 0, 2, 1), 4002, 3), &[]), 2);
        assert_eq!(run(&p, &v6(Ipv6Addr::LOCALHOST, 4003), &[]), 3);
    }
}
