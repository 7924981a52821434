//! keel-udp: UDP transport on keel-reactor, for game servers first.
//!
//! * [`Server`]: binds one socket per receive lane (one by default; several
//!   share a port with `SO_REUSEPORT`). Each lane drains its socket with
//!   `recvmmsg` and hands datagrams to its [`ServerHandler`] in arrival
//!   order, with sessions keyed by the peer's address: `accept` before a
//!   peer's first datagram, `datagram`, `disconnected` with a
//!   [`DisconnectReason`]. Replies made during a batch go out with one
//!   `sendmmsg` at its end.
//! * [`Client`]: one connected socket; an ICMP port unreachable ends it with
//!   [`DisconnectReason::Refused`], never a panic.
//! * [`DatagramSocket`]: one unconnected socket that sends anywhere and reports each
//!   sender; [`DatagramSocket::bind_lanes`] binds a group of them on one port,
//!   one lane each ([`DatagramSockets`]), for protocols that route by their
//!   own connection IDs ([`LaneSteering::PayloadByte`]).
//!
//! Every endpoint has a bounded send queue (used only when the kernel says
//! `WouldBlock`; past its bound sends fail with [`SendError::QueueFull`])
//! and counters readable from any thread ([`CounterSnapshot`]): every
//! datagram keel drops is counted, and kernel receive-buffer drops are read
//! from `SO_RXQ_OVFL`. A payload over 65,507 bytes (IPv4) or 65,527 (IPv6)
//! is refused before any system call ([`SendError::TooLarge`]).
//!
//! A link conditioner ([`conditioner`]) impairs a socket's send or receive
//! path for testing under a bad network: seeded, deterministic loss,
//! latency with jitter, duplicates and reordering, configured per socket
//! with [`EndpointConfig::send_impairment`] and
//! [`EndpointConfig::recv_impairment`] ([`Impairment`], which also parses
//! from `loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1,seed=7`).
//! It is off by default, and off it costs one branch. The fate of each
//! datagram comes from keel's one impairment model, the keel-impair crate,
//! which keel-rudp's simulator uses too.
//!
//! The steady-state receive and echo path allocates nothing: buffers are
//! caller-owned and reused, sessions live in a slab.
//!
//! `unsafe` is denied in the whole crate except the private `sys` module
//! (batched system calls and control-message parsing), where every unsafe
//! block carries a `// SAFETY:` comment.
//!
//! # Portability
//!
//! Linux is the measured platform (`recvmmsg`/`sendmmsg`, `SO_RXQ_OVFL`).
//! Elsewhere the one-datagram-per-call path is used and there is no kernel
//! drop counter. Several lanes need `SO_REUSEPORT`.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod client;
pub mod conditioner;
mod config;
mod counters;
mod datagram_lanes;
mod datagram_socket;
mod endpoint;
mod error;
mod inbox;
mod server;
mod sessions;
mod socket;
mod sys;
mod timers;

/// keel-udp's batched system calls on any UDP socket (a `mio` or std one),
/// for a program that runs its own event loop: `recvmmsg` into a
/// caller-owned [`RecvBatch`](batch::RecvBatch), `sendmmsg` from a
/// caller-owned [`SendBatch`](batch::SendBatch). Both are reused, their
/// per-slot state growing on demand up to the batch size (starting at 8
/// slots, never shrinking), so neither path allocates per datagram. Each call makes one
/// system call and never blocks; a caller drains a socket by calling
/// [`recv_batch`](batch::recv_batch) until it returns fewer than
/// [`RecvBatch::per_call`](batch::RecvBatch::per_call) datagrams (or
/// `WouldBlock`), and flushes a batch by resuming
/// [`send_batch`](batch::send_batch) from the first datagram not sent.
/// Elsewhere than Linux, one datagram per call.
///
/// `SO_RXQ_OVFL` reports the kernel's drops only with a later datagram;
/// [`kernel_drops_now`](batch::kernel_drops_now) reads the same cumulative
/// counter directly, for drops no datagram has reported yet.
///
/// # Examples
///
/// Two datagrams out in one `sendmmsg`, in again with `recvmmsg`:
///
/// ```
/// use std::net::UdpSocket;
/// use keel_udp::batch::{enable_rxq_ovfl, recv_batch, send_batch, RecvBatch, SendBatch};
///
/// # fn main() -> std::io::Result<()> {
/// let rx = UdpSocket::bind("127.0.0.1:0")?;
/// let tx = UdpSocket::bind("127.0.0.1:0")?;
/// enable_rxq_ovfl(&rx)?; // count what the kernel drops on a full buffer
///
/// // Up to 32 datagrams, up to 32 per system call.
/// let mut out = SendBatch::new(32, 32);
/// assert!(out.push(Some(rx.local_addr()?), b"first"));
/// assert!(out.push(Some(rx.local_addr()?), b"second"));
/// let mut sent = 0;
/// while sent < out.len() {
///     // A partial send resumes from the first datagram not sent.
///     sent += send_batch(&tx, &mut out, sent)?;
/// }
/// out.clear();
///
/// // Up to 32 slots of 2 KiB, reused by every call (8 at first, more when
/// // a call fills them all).
/// let mut batch = RecvBatch::new(32, 2048);
/// let mut got = Vec::new();
/// while got.len() < 2 {
///     // An event loop waits for readiness; this example waits in a
///     // blocking peek, since recv_batch itself never blocks.
///     rx.peek_from(&mut [0u8; 1])?;
///     let n = recv_batch(&rx, &mut batch)?;
///     for i in 0..n {
///         assert_eq!(batch.addr(i), tx.local_addr()?);
///         got.push(batch.data(i).to_vec());
///     }
/// }
/// assert_eq!(got, [b"first".to_vec(), b"second".to_vec()]);
/// assert_eq!(batch.take_kernel_drops_delta(), 0);
/// # Ok(())
/// # }
/// ```
pub mod batch {
    pub use crate::sys::{
        enable_rxq_ovfl, kernel_drops_now, recv_batch, send_batch, RecvBatch, SendBatch,
    };
}

pub use client::{Client, ClientConfig, ClientCtx, ClientHandler};
pub use conditioner::{Impairment, ImpairmentError};
pub use config::{
    EndpointConfig, FullPolicy, LaneSteering, LanesConfig, ServerConfig, DEFAULT_BATCH,
    DEFAULT_INBOX_CAPACITY, DEFAULT_MAX_DATAGRAM, DEFAULT_SEND_QUEUE_BYTES,
    DEFAULT_SEND_QUEUE_DATAGRAMS,
};
pub use counters::CounterSnapshot;
pub use datagram_lanes::DatagramSockets;
pub use datagram_socket::{DatagramSocket, DatagramSocketCtx, DatagramSocketHandler};
pub use error::{DisconnectReason, SendError};
/// Why a `post` refused a closure (keel-reactor's, the same type).
pub use keel_reactor::PostError;
pub use server::{Server, ServerCtx, ServerHandler, ServerStatus, Session, SessionHandle};
pub use socket::{SocketBuffers, SocketOptions};
pub use sys::{max_payload, LocalAddr, MAX_PAYLOAD_V4, MAX_PAYLOAD_V6};

/// The guide, `docs/guide.md`: each of its Rust blocks is a doctest, so the
/// guide compiles and runs against this crate as it is
/// (`cargo test -p keel-udp --doc`); `tests/guide.rs` makes sure none is
/// skipped.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
pub struct Guide;
