//! The protocol's behaviour on a virtual clock (the sans-IO endpoints and
//! the simulated link, no sockets), one test binary (one link instead of
//! four): closing ([`close`]), the handshake ([`handshake`]), delivery,
//! recovery and congestion through loss ([`sim`]), and malformed input,
//! send errors and config errors ([`robustness`]).

mod close;
mod handshake;
mod robustness;
mod sim;
