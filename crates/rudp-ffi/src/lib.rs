//! keel-rudp-ffi: a C API for keel-rudp (header `include/keel_rudp.h`,
//! walk-through in `docs/c-api.md`).
//!
//! ENet and netcode.io style: plain C, poll-based, no hidden threads. A
//! client or server handle owns a non-blocking UDP socket and drives the
//! sans-IO protocol ([`keel_rudp_proto`]) on the caller's thread whenever it
//! is polled. The safe Rust layer is [`Client`] and [`Server`]; the C
//! boundary (`extern "C"` functions, the only `unsafe` of this crate) is
//! the `ffi` module.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod driver;
#[allow(unsafe_code)]
pub mod ffi;

pub use driver::{Client, Error, Event, Server};
