//! What keel-udp's endpoints do over loopback sockets, one test binary
//! (one link instead of ten), a module per topic: echo through every IO
//! model and the payload limits, the client, datagram sockets, the game
//! API, sessions, lanes, one server per port, the reply's source address,
//! Don't Fragment on a small-MTU path, and a handler's panic contained to
//! its server.

#[path = "../common/mod.rs"]
mod common;

mod client;
mod containment;
mod datagram_socket;
mod dont_fragment;
mod echo;
mod game_api;
mod lanes;
mod reply_source;
mod reuseport_group;
mod sessions;
