//! The driver over loopback sockets, one test binary (one link instead of
//! four): echo on every IO model and garbage ([`net`]), stops that deliver
//! what was queued ([`stop`]), the lane tick ([`tick`]), and delivery
//! through keel-udp's conditioner ([`impaired`]).

#[path = "../common/mod.rs"]
mod common;

mod impaired;
mod net;
mod stop;
mod tick;
