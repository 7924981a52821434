//! keel-rudp: connections, channels and reliable delivery over datagrams.
//!
//! This crate is the driver a game uses: [`Server`] and [`Client`] run the
//! keel-rudp protocol on keel-udp lanes for a game's [`Handler`]: one
//! endpoint and one timer per server lane, packets steered to their lane
//! by their connection ID, [`Sender`]s to send from other threads (also
//! found by a token's client id, [`Server::sender_for_client`]), a
//! broadcast to every connection of every lane ([`Server::broadcast`]), a
//! lane's own game tick ([`Ctx::tick_at`]), sends flushed with keel-udp's
//! batched calls; a stop that reports what was not delivered
//! ([`StopReport`]); a handler panic contained to its lane
//! ([`Server::failed_lanes`]). `docs/rudp-guide.md` walks through it.
//!
//! The protocol itself is the crate keel-rudp-proto, sans-IO (as smoltcp
//! and quinn-proto): no clocks, sockets or threads; its `Connection` and
//! `Endpoint` take `now`, are fed datagrams and fill buffers to send. What
//! this crate's API uses of it is re-exported here, so a game using
//! [`Server`] and [`Client`] depends on this crate alone; a game with a
//! transport of its own, the C API (keel-rudp-ffi) and other drivers use
//! keel-rudp-proto directly.
//!
//! * Channels ([`ChannelKind`]: reliable-ordered, reliable-unordered,
//!   unreliable-sequenced, unreliable) with per-channel ordering,
//!   priorities, fragmentation up to `max_message_size` with memory caps
//!   and backpressure ([`SendError::Backpressure`] per connection,
//!   [`SendError::BudgetSpent`] for the server-wide [`SendBudget`]),
//!   receive memory taken as bytes arrive against a per-connection cap and
//!   a server-wide [`RecvBudget`]; acks as ranges piggybacked on every
//!   packet; RTT and loss detection per RFC 6298 / RFC 9002; redundancy for
//!   small reliable messages ([`Redundancy`]); NewReno congestion control
//!   and pacing for bulk channels; keepalive, idle and ack timeouts, close
//!   with a reason both sides see, which flushes what was queued and
//!   repeats its CLOSE until acknowledged, then tells what was not
//!   ([`Ctx::undelivered`]).
//! * The server side of the handshake, with stateless cookies (nothing
//!   allocated for a source before it proves it receives at its address,
//!   never more bytes out than in before that), admission limits
//!   ([`Admission`]) and routing by connection ID, so a client survives a
//!   change of address.
//! * Security ([`TokenMinter`], [`ServerSecurity`], [`ClientSecurity`]):
//!   connect tokens minted by the game's backend and sealed with
//!   XChaCha20-Poly1305, checked after the cookie round trip; every packet
//!   after the handshake sealed with ChaCha20-Poly1305 under per-direction
//!   keys, behind a replay window; insecure mode only by name.
//!   `docs/security.md` has the threat model.
//! * The versioned wire format is documented in `docs/rudp.md`.
//!
//! Network input never panics: every decoder returns an error and the
//! connection or endpoint counts it ([`Stats::malformed_packets`]).
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod net;

pub use keel_rudp_proto::ConnectionId;
pub use keel_rudp_proto::{Admission, ReplayCache, REPLAY_CACHE};
pub use keel_rudp_proto::{ChannelConfig, ChannelKind, CloseCode};
pub use keel_rudp_proto::{
    ChannelUndelivered, DisconnectReason, MessageId, SendError, State, Stats, Undelivered,
};
pub use keel_rudp_proto::{
    ClientSecurity, ConnectToken, ServerSecurity, TokenClaims, TokenError, TokenMinter,
    TokenParseError, TokenSpec, MAX_TOKEN_ADDRS, MAX_TOKEN_LEN, MAX_USER_DATA, REPLAY_WINDOW,
    TAG_LEN, TOKEN_MAGIC,
};
pub use keel_rudp_proto::{
    Config, ConfigError, Redundancy, DEFAULT_MAX_DATAGRAM, DEFAULT_TICK_ACK_DELAY,
};
pub use keel_rudp_proto::{
    ConnectionHandle, EndpointStats, CLOSE_ACK_TIMEOUT, CLOSE_HANDLER_PANIC, CLOSE_REPLACED,
    CLOSE_STOPPED, REFUSE_ADDRESS_LIMIT, REFUSE_CONFIG_MISMATCH, REFUSE_FULL, REFUSE_RATE_LIMIT,
    REFUSE_SECURITY_MISMATCH, REFUSE_TOKEN,
};
pub use keel_rudp_proto::{
    RecvBudget, SendBudget, DEFAULT_RECV_BUDGET, DEFAULT_SEND_BUDGET, SEND_MESSAGE_OVERHEAD,
};
pub use keel_rudp_proto::{
    DEFAULT_REDUNDANCY, MAX_REDUNDANCY, REDUNDANCY_HIGH_LOSS, REDUNDANCY_HIGH_LOSS_END,
    REDUNDANCY_MIN_LOSS,
};

/// Why a `post` or a [`Sender`] refused work (keel-reactor's type).
pub use keel_reactor::PostError;
pub use net::client::{Client, ClientConfig};
pub use net::handler::{Ctx, Handler};
pub use net::sender::Sender;
pub use net::server::{BroadcastStats, Server, ServerConfig, ServerStatus, SERVER_MAX_ACK_DELAY};
pub use net::stop::{ConnectionReport, LaneFailure, StopReport, Stopping};

/// The guide, `docs/rudp-guide.md`: each of its Rust blocks is a doctest,
/// so the guide compiles and runs against this crate as it is
/// (`cargo test -p keel-rudp --doc`); `tests/guide.rs` makes sure none is
/// skipped.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rudp-guide.md")]
pub struct Guide;

/// `docs/security.md`: its example of minting a token is a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/security.md")]
pub struct SecurityDoc;
