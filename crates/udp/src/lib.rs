//! keel-udp: UDP transport on keel-reactor (work in progress).
//!
//! So far this crate holds the low-level socket layer: socket setup
//! ([`SocketOptions`], [`SocketBuffers`]) and the batched system calls the
//! receive and send paths are built on. The payload limits
//! [`MAX_PAYLOAD_V4`], [`MAX_PAYLOAD_V6`] and [`max_payload`] are public so
//! that callers can check a datagram before handing it over.
//!
//! `unsafe` is denied in the whole crate except the private `sys` module
//! (batched system calls and control-message parsing), where every unsafe
//! block carries a `// SAFETY:` comment.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod socket;
mod sys;

pub use socket::{SocketBuffers, SocketOptions};
pub use sys::{max_payload, MAX_PAYLOAD_V4, MAX_PAYLOAD_V6};
