//! Errors of the send path and the reasons a session or client ends.

use std::fmt;
use std::io;

/// Why a send was refused. The datagram was not sent and is counted in the
/// lane's counters; the next send is unaffected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The payload is larger than UDP allows for the destination's family
    /// (65,507 bytes for IPv4, 65,527 for IPv6). Refused before any system
    /// call.
    TooLarge {
        /// The payload size that was refused.
        size: usize,
        /// The largest payload for the destination's family.
        limit: usize,
    },
    /// The socket would block and the bounded send queue is full.
    QueueFull {
        /// Datagrams waiting to be sent.
        queued_datagrams: usize,
        /// Bytes waiting to be sent.
        queued_bytes: usize,
        /// The queue's datagram bound.
        limit_datagrams: usize,
        /// The queue's byte bound.
        limit_bytes: usize,
    },
    /// A send from another thread found the lane's inbox at its bound
    /// ([`EndpointConfig::inbox_capacity`](crate::EndpointConfig)): the
    /// lane is not keeping up with what other threads hand it. Nothing was
    /// queued; retry later or send less. Counted in `send_inbox_full`.
    InboxFull {
        /// The inbox's bound (closures waiting for the lane).
        capacity: usize,
    },
    /// The lane or endpoint is closed.
    Closed,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::TooLarge { size, limit } => write!(
                f,
                "datagram of {size} bytes is larger than the UDP payload limit of {limit} bytes"
            ),
            SendError::QueueFull {
                queued_datagrams,
                queued_bytes,
                limit_datagrams,
                limit_bytes,
            } => write!(
                f,
                "send queue full: {queued_datagrams} datagrams / {queued_bytes} bytes queued \
                 (bounds: {limit_datagrams} datagrams, {limit_bytes} bytes)"
            ),
            SendError::InboxFull { capacity } => write!(
                f,
                "the lane's inbox is full ({capacity} sends and posts waiting): \
                 the lane is not keeping up with other threads; retry later"
            ),
            SendError::Closed => write!(f, "the endpoint is closed"),
        }
    }
}

impl std::error::Error for SendError {}

impl From<SendError> for io::Error {
    fn from(e: SendError) -> io::Error {
        let kind = match e {
            SendError::TooLarge { .. } => io::ErrorKind::InvalidInput,
            SendError::QueueFull { .. } | SendError::InboxFull { .. } => io::ErrorKind::WouldBlock,
            SendError::Closed => io::ErrorKind::NotConnected,
        };
        io::Error::new(kind, e)
    }
}

/// Why a session (server side) or a client ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectReason {
    /// No datagram from the peer within the idle timeout.
    IdleTimeout,
    /// The application closed it.
    Closed,
    /// The session table was full and this session was evicted to make room
    /// for a new peer ([`FullPolicy::EvictIdlest`](crate::FullPolicy)).
    Evicted,
    /// The peer's port is closed: an ICMP port unreachable came back
    /// (`ECONNREFUSED`). Clients only.
    Refused,
    /// The socket reported another error.
    Error(io::ErrorKind),
    /// The server or client was stopped.
    Shutdown,
}

impl fmt::Display for DisconnectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DisconnectReason::IdleTimeout => write!(f, "idle timeout"),
            DisconnectReason::Closed => write!(f, "closed by the application"),
            DisconnectReason::Evicted => write!(f, "evicted: session table full"),
            DisconnectReason::Refused => write!(f, "peer port unreachable (connection refused)"),
            DisconnectReason::Error(kind) => write!(f, "socket error: {kind}"),
            DisconnectReason::Shutdown => write!(f, "shut down"),
        }
    }
}
