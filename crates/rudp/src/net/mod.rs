//! keel-rudp on keel-udp lanes: a [`Server`](crate::Server) (one
//! [`Endpoint`](keel_rudp_proto::Endpoint) per lane of a keel-udp datagram socket
//! group, packets steered to their lane by the lane byte of their
//! connection ID) and a [`Client`](crate::Client), both driving the
//! sans-IO core for a game's [`Handler`](crate::Handler).
//!
//! Each lane has one timer, armed at its endpoint's earliest deadline;
//! every received batch, timer and job from another thread ends with one
//! round: events to the handler, then every datagram due, sent with
//! keel-udp's batched send.

pub(crate) mod client;
pub(crate) mod conns;
pub(crate) mod handler;
pub(crate) mod lane;
pub(crate) mod sender;
pub(crate) mod server;
pub(crate) mod shared;
pub(crate) mod stop;
