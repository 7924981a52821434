//! The public types of a connection: its side and state, its events,
//! why it ended, why a send was refused, and its stats.

use std::fmt;
use std::time::{Duration, Instant};

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Sent the hello.
    Client,
    /// Accepted it.
    Server,
}

/// Where a connection is in its life (see the state machine in docs/rudp.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The client's hello is out; no ACCEPT yet.
    Handshaking,
    /// Messages flow.
    Connected,
    /// Closed locally: queued reliable messages are flushed, then the
    /// CLOSE is repeated until the peer acknowledges it or
    /// `close_timeout` passes.
    Closing,
    /// Closed by the peer: its repeated CLOSEs are acknowledged, stray
    /// packets waited out.
    Draining,
    /// Done: nothing is sent or received.
    Closed,
}

/// Why a connection ended; both sides see the code and reason of a close.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectReason {
    /// This side called `close`.
    Local {
        /// The code given.
        code: u64,
        /// The reason given.
        reason: String,
    },
    /// The peer closed (or the server refused the hello).
    Remote {
        /// The peer's code.
        code: u64,
        /// The peer's reason.
        reason: String,
    },
    /// Nothing arrived for `idle_timeout`.
    IdleTimeout,
    /// No ACCEPT within `handshake_timeout`.
    HandshakeTimeout,
    /// The peer acknowledged nothing for `ack_timeout` while packets
    /// awaited its acknowledgement (it may still be sending). A CLOSE
    /// with [`CLOSE_ACK_TIMEOUT`](crate::CLOSE_ACK_TIMEOUT) was sent once.
    AckTimeout,
}

impl DisconnectReason {
    /// keel's own close code ([`CloseCode`](crate::CloseCode)) behind a local or remote
    /// close, if its code is one of them (`None` for a game's own codes
    /// and for the timeouts).
    pub fn close_code(&self) -> Option<crate::CloseCode> {
        match self {
            DisconnectReason::Local { code, .. } | DisconnectReason::Remote { code, .. } => {
                crate::CloseCode::from_code(*code)
            }
            _ => None,
        }
    }
}

/// What a connection had not delivered when it was asked
/// ([`Connection::undelivered`](super::Connection::undelivered)), e.g.
/// once it ended: messages queued or sent and not acknowledged (reliable
/// channels; they may or may not have arrived), or never sent
/// (unreliable channels), and whether the peer acknowledged the CLOSE.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Undelivered {
    /// Messages not acknowledged, over all channels.
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Per channel, only the channels with something left, by channel.
    pub channels: Vec<ChannelUndelivered>,
    /// This end sent a CLOSE and the peer never acknowledged it: the peer
    /// may not have seen the code and reason (it then ends at its idle
    /// timeout), or only its acknowledgement was lost.
    pub close_unacknowledged: bool,
}

impl Undelivered {
    /// Nothing left: every message acknowledged and, if a CLOSE was sent,
    /// its acknowledgement received.
    pub fn is_empty(&self) -> bool {
        self.messages == 0 && !self.close_unacknowledged
    }
}

/// One channel's part of [`Undelivered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelUndelivered {
    /// The channel.
    pub channel: u8,
    /// Messages not acknowledged (or, unreliable, never sent).
    pub messages: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The sequence number of the oldest of them ([`MessageId::seq`]): on
    /// an ordered channel, everything before it was acknowledged.
    pub first_seq: u64,
}

/// Something that happened on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handshake finished.
    Connected,
    /// A message arrived. Give `data` back with [`Connection::recycle`](super::Connection::recycle)
    /// to let its buffer serve a later message.
    Message {
        /// The channel it came on.
        channel: u8,
        /// The message.
        data: Vec<u8>,
    },
    /// The connection ended.
    Disconnected(DisconnectReason),
}

/// A queued message: its channel and sequence number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId {
    /// The channel.
    pub channel: u8,
    /// Its sequence number on the channel (from 0).
    pub seq: u64,
}

/// Why `send` refused a message. Nothing was queued.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// No such channel.
    UnknownChannel {
        /// The channel asked for.
        channel: u8,
        /// How many are configured.
        channels: usize,
    },
    /// Over `max_message_size`.
    MessageTooLarge {
        /// The message's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Queueing it would pass `max_send_buffer`: wait for acknowledgements
    /// (the queue drains as the peer acknowledges) and send again.
    Backpressure {
        /// Bytes queued or unacknowledged now.
        queued: usize,
        /// The message's length.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// Queueing it would pass the endpoint's shared
    /// [`SendBudget`](crate::SendBudget) (`EndpointConfig::send_budget`,
    /// `ServerConfig::send_budget`): the server as a whole holds that much
    /// unacknowledged data, whatever this connection holds. Retry after
    /// acknowledgements; if it lasts, the connections holding the most
    /// ([`Connection::send_buffered`](super::Connection::send_buffered))
    /// are the peers that do not acknowledge.
    BudgetSpent {
        /// Bytes the connections sharing the budget hold now (each message
        /// counted with its bookkeeping, see [`SendBudget`](crate::SendBudget)).
        used: usize,
        /// The message's length.
        len: usize,
        /// The budget's limit.
        limit: usize,
    },
    /// The connection is closing or closed.
    Closed,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::UnknownChannel { channel, channels } => {
                write!(f, "channel {channel} does not exist (channels 0 to {} are configured)", channels - 1)
            }
            SendError::MessageTooLarge { len, max } => {
                write!(f, "message of {len} bytes is over max_message_size ({max} bytes)")
            }
            SendError::Backpressure { queued, len, cap } => write!(
                f,
                "send buffer full: {queued} bytes queued + {len} would pass max_send_buffer ({cap} bytes); retry after acknowledgements"
            ),
            SendError::BudgetSpent { used, len, limit } => write!(
                f,
                "server send budget spent: its connections hold {used} bytes; {len} more would pass send_budget ({limit} bytes); retry after acknowledgements"
            ),
            SendError::Closed => f.write_str("connection is closing or closed"),
        }
    }
}

impl std::error::Error for SendError {}

/// Counters and estimates of one connection.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Smoothed RTT.
    pub smoothed_rtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// Minimum RTT.
    pub min_rtt: Duration,
    /// Latest RTT sample.
    pub latest_rtt: Duration,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets received and accepted (not counting duplicates or malformed).
    pub packets_received: u64,
    /// Ack-eliciting packets acknowledged.
    pub packets_acked: u64,
    /// Ack-eliciting packets declared lost.
    pub packets_lost: u64,
    /// `packets_lost / (packets_acked + packets_lost)`.
    pub loss_rate: f64,
    /// Ack-eliciting packets acknowledged after they were declared lost
    /// (reordered, not lost); each raises the packet threshold.
    pub spurious_losses: u64,
    /// Congestion window reductions undone because every packet whose
    /// loss caused them was acknowledged after all (see Rate control in
    /// docs/rudp.md).
    pub congestion_undos: u64,
    /// Ack-eliciting packets declared lost that the congestion controller
    /// did not take as congestion (no queue in the RTT, light loss; see
    /// Rate control in docs/rudp.md): the window was kept.
    pub random_losses: u64,
    /// Chunks resent after their packet was declared lost.
    pub retransmissions: u64,
    /// Extra copies of small reliable messages sent as redundancy.
    pub redundant_copies: u64,
    /// Reliable chunks whose first transmission was declared lost but
    /// which needed no resend: another copy (redundancy's, or a probe's)
    /// had already been acknowledged, or the peer had rebuilt the message
    /// from parity ([`Stats::repairs_acked`]). What redundancy saved.
    pub recovered_by_redundancy: u64,
    /// PARITY frames sent (forward error correction, by the channels'
    /// redundancy levels).
    pub parity_sent: u64,
    /// Messages rebuilt from PARITY frames and taken (delivered or held
    /// for ordering) without waiting for a resend.
    pub repaired_by_parity: u64,
    /// PARITY frames of no use and dropped: a covered message's bytes no
    /// longer kept, the rebuilt message refused (receive memory), a
    /// parity for an unreliable channel, or one evicted while it waited
    /// for a second lost message (see docs/rudp.md, Forward error
    /// correction, for the bounds).
    pub parity_unusable: u64,
    /// PARITY frames dropped as bogus: the rebuilt length past the
    /// parity's payload or the message size, bytes past it not zero, or
    /// a covered message longer than the payload.
    pub parity_invalid: u64,
    /// Messages the peer reported repaired (REPAIRED frames) and this end
    /// took as acknowledged, so they were not resent.
    pub repairs_acked: u64,
    /// REPAIRED reports dropped before they were sent (more than 32
    /// waiting): the peer resends those messages.
    pub repairs_unreported: u64,
    /// Probe packets sent on probe timeout.
    pub probes: u64,
    /// Bytes in ack-eliciting packets not yet acknowledged or lost.
    pub bytes_in_flight: usize,
    /// The congestion window (bytes).
    pub congestion_window: usize,
    /// Bytes queued or unacknowledged, per channel.
    pub queued_bytes: Vec<usize>,
    /// Bytes sent and received in datagrams.
    pub bytes_sent: u64,
    /// Bytes received in datagrams.
    pub bytes_received: u64,
    /// Messages delivered to the application.
    pub messages_delivered: u64,
    /// Datagrams rejected by a decoder (or contradicting earlier data).
    pub malformed_packets: u64,
    /// Packets received twice (or too old to tell).
    pub duplicate_packets: u64,
    /// Packets for another connection ID or unexpected in this state.
    pub dropped_packets: u64,
    /// Packets that failed authentication (forged, altered, wrong key):
    /// dropped, never acted on.
    pub auth_failures: u64,
    /// Authentic packets received again (the replay window): dropped.
    pub replayed_packets: u64,
    /// Packets not acknowledged for lack of receive memory, or because a
    /// message was too far ahead of its channel's window (the peer
    /// resends).
    pub refused_packets: u64,
    /// Bytes of receive state held now (partly received messages, messages
    /// held back for ordering, de-duplication windows), counted as bytes
    /// arrive with their bookkeeping; at most `max_recv_buffer` (plus one
    /// `max_message_size` for the next message a reliable channel waits
    /// for).
    pub recv_buffered: usize,
    /// Message frames refused because the endpoint's shared receive budget
    /// ([`RecvBudget`](crate::RecvBudget)) was spent.
    pub budget_refused: u64,
    /// Message frames refused as too far ahead of their channel's window
    /// (65,536 messages past the next expected on a reliable-ordered
    /// channel, 4,096 past the lowest undelivered on a reliable-unordered
    /// one).
    pub window_refused: u64,
    /// Sends refused because the endpoint's shared send budget
    /// ([`SendBudget`](crate::SendBudget)) was spent
    /// ([`SendError::BudgetSpent`]).
    pub send_budget_refused: u64,
    /// Partly received unreliable messages dropped for newer ones (at most
    /// 4 are kept per unreliable channel).
    pub partials_evicted: u64,
    /// Messages dropped as older than one delivered (sequenced channels).
    pub stale_messages: u64,
    /// Message copies received again (redundancy and resends).
    pub duplicate_messages: u64,
}

/// The counters of [`Stats`] a connection keeps (the estimates and sizes
/// in `Stats` are read from their owners when it is made): a connection
/// holds 24 words of them, not all of `Stats` (328 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub(crate) packets_sent: u64,
    pub(crate) packets_received: u64,
    pub(crate) packets_acked: u64,
    pub(crate) packets_lost: u64,
    pub(crate) congestion_undos: u64,
    pub(crate) random_losses: u64,
    pub(crate) retransmissions: u64,
    pub(crate) redundant_copies: u64,
    pub(crate) recovered_by_redundancy: u64,
    pub(crate) probes: u64,
    pub(crate) bytes_sent: u64,
    pub(crate) bytes_received: u64,
    pub(crate) messages_delivered: u64,
    pub(crate) malformed_packets: u64,
    pub(crate) duplicate_packets: u64,
    pub(crate) dropped_packets: u64,
    pub(crate) auth_failures: u64,
    pub(crate) replayed_packets: u64,
    pub(crate) refused_packets: u64,
    pub(crate) budget_refused: u64,
    pub(crate) window_refused: u64,
    pub(crate) send_budget_refused: u64,
    pub(crate) stale_messages: u64,
    pub(crate) duplicate_messages: u64,
    pub(crate) parity_sent: u64,
    pub(crate) repaired_by_parity: u64,
    pub(crate) parity_unusable: u64,
    pub(crate) parity_invalid: u64,
    pub(crate) repairs_acked: u64,
    pub(crate) repairs_unreported: u64,
}

impl Counters {
    /// `Stats` with these counters, the rest left at their defaults.
    pub(crate) fn to_stats(self) -> Stats {
        Stats {
            packets_sent: self.packets_sent,
            packets_received: self.packets_received,
            packets_acked: self.packets_acked,
            packets_lost: self.packets_lost,
            congestion_undos: self.congestion_undos,
            random_losses: self.random_losses,
            retransmissions: self.retransmissions,
            redundant_copies: self.redundant_copies,
            recovered_by_redundancy: self.recovered_by_redundancy,
            probes: self.probes,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            messages_delivered: self.messages_delivered,
            malformed_packets: self.malformed_packets,
            duplicate_packets: self.duplicate_packets,
            dropped_packets: self.dropped_packets,
            auth_failures: self.auth_failures,
            replayed_packets: self.replayed_packets,
            refused_packets: self.refused_packets,
            budget_refused: self.budget_refused,
            window_refused: self.window_refused,
            send_budget_refused: self.send_budget_refused,
            stale_messages: self.stale_messages,
            duplicate_messages: self.duplicate_messages,
            parity_sent: self.parity_sent,
            repaired_by_parity: self.repaired_by_parity,
            parity_unusable: self.parity_unusable,
            parity_invalid: self.parity_invalid,
            repairs_acked: self.repairs_acked,
            repairs_unreported: self.repairs_unreported,
            ..Stats::default()
        }
    }
}

/// A close under way or a connection draining: the end of the close (or of
/// draining), the end of its flush, whether the CLOSE phase began, the
/// first packet that carried the CLOSE, the next repeat, and the event to
/// emit. Boxed in the connection, made when a close or draining begins (the
/// close path, `close.rs`, runs it).
pub(super) struct Closing {
    pub(super) deadline: Option<Instant>,
    pub(super) flush_until: Instant,
    pub(super) phase: bool,
    pub(super) sent: Option<u64>,
    pub(super) acked: bool,
    pub(super) next: Instant,
    pub(super) repeats: u32,
    /// Closed as soon as the CLOSE is written (ack timeout, no time).
    pub(super) once: bool,
    pub(super) event: Option<DisconnectReason>,
    /// Draining: the peer's CLOSE is to be acknowledged.
    pub(super) drain_ack: bool,
    /// Ended by `ack_timeout`.
    pub(super) ack_timed_out: bool,
    pub(super) pending: bool,
    pub(super) code: u64,
    /// At most `MAX_REASON_LEN` bytes.
    pub(super) reason: Vec<u8>,
}
