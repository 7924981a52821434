//! Portable path (non-Linux Unix): one datagram per system call with
//! `recvmsg`/`sendto`, no kernel drop counter.
//!
//! On Linux this module is compiled only for tests, which check it gives the
//! same results as the batched path.
#![allow(unsafe_code)]
// On Linux only the tests call this module; elsewhere the lanes will.
#![allow(dead_code)]

use std::io;
use std::os::fd::AsRawFd;

use super::recv::{recv_one, RecvBatch};
use super::send::{send_one, SendBatch};

/// `SO_RXQ_OVFL` does not exist here: returns `ErrorKind::Unsupported`
/// (socket setup ignores it), and drop deltas stay 0.
pub fn enable_rxq_ovfl(fd: &impl AsRawFd) -> io::Result<()> {
    let _ = fd.as_raw_fd();
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SO_RXQ_OVFL is only available on Linux",
    ))
}

/// There is no per-socket drop counter to read here.
pub fn kernel_drops_now(fd: &impl AsRawFd) -> io::Result<u32> {
    let _ = fd.as_raw_fd();
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the socket drop counter is only available on Linux",
    ))
}

/// The local address of each datagram is only read on Linux: returns
/// `ErrorKind::Unsupported` (socket setup ignores it), and
/// `RecvBatch::local` stays `None`.
pub(crate) fn enable_pktinfo(fd: &impl AsRawFd, _ipv6: bool) -> io::Result<()> {
    let _ = fd.as_raw_fd();
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "IP_PKTINFO is only read on Linux",
    ))
}

/// Don't Fragment is only set on Linux here: returns
/// `ErrorKind::Unsupported` (socket setup reports it for a socket that
/// asked for it).
pub(crate) fn set_dont_fragment(fd: &impl AsRawFd, _ipv6: bool) -> io::Result<()> {
    let _ = fd.as_raw_fd();
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "Don't Fragment (IP_MTU_DISCOVER) is only set on Linux",
    ))
}

/// Steering a reuseport group by port needs Linux's
/// `SO_ATTACH_REUSEPORT_CBPF`: returns `ErrorKind::Unsupported`.
pub(crate) fn attach_port_steering(fd: &impl AsRawFd, _lanes: u32) -> io::Result<()> {
    let _ = fd.as_raw_fd();
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "lane steering by peer port needs Linux (SO_ATTACH_REUSEPORT_CBPF)",
    ))
}

pub(crate) fn attach_payload_steering(
    fd: &impl AsRawFd,
    _offset: u16,
    _hash_if_first_byte_has: u8,
    _hash_source_ip: Option<u8>,
    _lanes: u32,
) -> io::Result<()> {
    let _ = fd.as_raw_fd();
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "lane steering by payload byte needs Linux (SO_ATTACH_REUSEPORT_CBPF)",
    ))
}

/// Receives one datagram with `recvmsg(MSG_DONTWAIT)` into slot 0 whatever
/// the batch size: returns `Ok(1)` or the error (`WouldBlock` when nothing
/// is queued).
pub fn recv_batch(fd: &impl AsRawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    recv_one(fd, batch)
}

/// Sends queued datagram `start` with one `sendto(MSG_DONTWAIT)`: returns
/// `Ok(1)`, `Ok(0)` if `start >= batch.len()`, or its error. Same contract
/// as the Linux `send_batch`: resume with `start += n`.
pub fn send_batch(fd: &impl AsRawFd, batch: &mut SendBatch, start: usize) -> io::Result<usize> {
    if start >= batch.len() {
        return Ok(0);
    }
    send_one(fd, batch, start)
}
