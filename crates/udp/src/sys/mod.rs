//! Low-level socket calls: the only module of keel-udp that contains `unsafe`.
//!
//! Everything here works on a borrowed file descriptor (`&impl AsRawFd`) and
//! on caller-owned buffers ([`RecvBatch`], [`SendBatch`]) that are reused,
//! so the receive and send paths allocate nothing per call or per datagram.
//! Their per-slot state starts with 8 slots and doubles on demand up to the
//! batch size (never shrinking): after the largest burst a socket sees,
//! nothing is allocated.
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

mod base;
#[cfg(target_os = "linux")]
mod cmsg;
mod recv;
mod send;

pub use base::{max_payload, LocalAddr, MAX_PAYLOAD_V4, MAX_PAYLOAD_V6};
pub use recv::RecvBatch;
pub use send::SendBatch;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(all(target_os = "linux", test))]
pub(crate) use linux::dont_fragment;
#[cfg(target_os = "linux")]
pub(crate) use linux::{
    attach_payload_steering, attach_port_steering, enable_pktinfo, set_dont_fragment,
};
#[cfg(target_os = "linux")]
pub use linux::{enable_rxq_ovfl, kernel_drops_now, recv_batch, send_batch};

#[cfg(any(not(target_os = "linux"), test))]
// On Linux only its tests use it, so its public functions are not exported.
#[cfg_attr(all(target_os = "linux", test), allow(unreachable_pub))]
mod portable;
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::{
    attach_payload_steering, attach_port_steering, enable_pktinfo, set_dont_fragment,
};
#[cfg(not(target_os = "linux"))]
pub use portable::{enable_rxq_ovfl, kernel_drops_now, recv_batch, send_batch};

#[cfg(test)]
mod tests;
