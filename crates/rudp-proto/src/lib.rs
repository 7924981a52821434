//! keel-rudp-proto: the keel-rudp protocol, sans-IO.
//!
//! This crate is the protocol and nothing else (as smoltcp and
//! quinn-proto): no clocks, sockets or threads, and no IO dependency.
//! Every entry point takes `now: Instant`; the caller feeds datagrams in
//! ([`Connection::handle_datagram`], [`Endpoint::handle`]), sends what
//! [`Connection::poll_transmit`] fills, and wakes the core at
//! [`Connection::poll_timeout`]. Tests drive two ends with a virtual clock
//! through a seeded simulated link (`sim`, behind the `sim` feature: a
//! test tool, not the protocol's API) and never sleep; what the link
//! does to each datagram is keel's one impairment model (the keel-impair
//! crate, pure like this one), the model keel-udp's link conditioner uses.
//!
//! The drivers live elsewhere: keel-rudp runs this protocol on keel-udp
//! lanes (its `Server`, `Client` and `Handler`) and re-exports all of this
//! crate, so a game depends on keel-rudp alone; the C API and any other
//! driver build on this crate the same way. What a driver needs besides the
//! protocol is here too: [`os_random`] for keys and connection IDs.
//!
//! * [`Connection`]: channels ([`ChannelKind`]: reliable-ordered,
//!   reliable-unordered, unreliable-sequenced, unreliable) with per-channel
//!   ordering, priorities, fragmentation up to `max_message_size` with
//!   memory caps and backpressure ([`SendError::Backpressure`] per
//!   connection, [`SendError::BudgetSpent`] for the server-wide
//!   [`SendBudget`]), receive memory taken as bytes arrive against a
//!   per-connection cap and a server-wide [`RecvBudget`]; acks as
//!   ranges piggybacked on every packet; RTT and loss detection per
//!   RFC 6298 / RFC 9002; redundancy for small reliable messages
//!   ([`Redundancy`]) and, per channel, for messages of any size
//!   ([`ChannelConfig::redundancy`]: copies and XOR parity, forward error
//!   correction that rebuilds a lost message without a resend); NewReno congestion control and pacing for bulk
//!   channels; keepalive, idle and ack timeouts, close with a reason both
//!   sides see, which flushes what was queued and repeats its CLOSE until
//!   acknowledged, then tells what was not ([`Connection::undelivered`]).
//! * [`Endpoint`]: the server side of the handshake, with stateless cookies
//!   (nothing allocated for a source before it proves it receives at its
//!   address, never more bytes out than in before that) and routing by
//!   connection ID, so a client survives a change of address.
//! * Security ([`TokenMinter`], [`ServerSecurity`], [`ClientSecurity`]):
//!   connect tokens minted by the game's backend and sealed with
//!   XChaCha20-Poly1305, checked after the cookie round trip; every packet
//!   after the handshake sealed with ChaCha20-Poly1305 under per-direction
//!   keys, behind a replay window; insecure mode only by name.
//!   `docs/security.md` has the threat model.
//! * [`wire`]: the versioned wire format, documented in `docs/rudp.md`.
//!
//! Network input never panics: every decoder returns an error and the
//! connection or endpoint counts it ([`Stats::malformed_packets`]).
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod admission;
mod budget;
mod cc;
mod channel;
mod close_code;
mod config;
mod connection;
mod deadlines;
mod endpoint;
mod fec;
#[cfg(test)]
mod fuzz;
mod pool;
mod ranges;
mod recovery;
mod rtt;
mod scratch;
mod security;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
mod sys;
mod token_format;
#[cfg(test)]
mod vectors;
pub mod wire;

pub use admission::{Admission, ReplayCache, REPLAY_CACHE};
pub use budget::{
    RecvBudget, SendBudget, DEFAULT_RECV_BUDGET, DEFAULT_SEND_BUDGET, SEND_MESSAGE_OVERHEAD,
};
pub use channel::{
    ChannelConfig, ChannelKind, DEFAULT_REDUNDANCY, MAX_REDUNDANCY, REDUNDANCY_HIGH_LOSS,
    REDUNDANCY_HIGH_LOSS_END, REDUNDANCY_MIN_LOSS,
};
pub use close_code::CloseCode;
pub use config::{Config, ConfigError, Redundancy, DEFAULT_MAX_DATAGRAM, DEFAULT_TICK_ACK_DELAY};
pub use connection::{
    ChannelUndelivered, Connection, DisconnectReason, Event, MessageId, SendError, Side, State,
    Stats, Undelivered, CLOSE_ACK_TIMEOUT,
};
pub use endpoint::{
    ConnectionHandle, Endpoint, EndpointConfig, EndpointStats, Handled, CLOSE_HANDLER_PANIC,
    CLOSE_REPLACED, CLOSE_STOPPED, COOKIE_LEN, PREFETCH_BATCH, REFUSE_ADDRESS_LIMIT,
    REFUSE_CONFIG_MISMATCH, REFUSE_FULL, REFUSE_RATE_LIMIT, REFUSE_SECURITY_MISMATCH, REFUSE_TOKEN,
};
pub use recovery::PACKET_THRESHOLD;
pub use rtt::GRANULARITY;
pub use security::{
    os_random, ClientSecurity, ConnectToken, ServerSecurity, TokenClaims, TokenError, TokenMinter,
    TokenSpec, MAX_TOKEN_ADDRS, MAX_TOKEN_LEN, MAX_USER_DATA, REPLAY_WINDOW, TAG_LEN,
};
pub use token_format::{TokenParseError, TOKEN_MAGIC};
pub use wire::ConnectionId;
