//! Connection configuration and its errors.

use std::fmt;
use std::time::Duration;

use crate::channel::ChannelConfig;
use crate::wire::{MAX_ACK_DELAY_US, MIN_HELLO_SIZE, VERSION};

/// The default datagram budget: 1,200 bytes fits any path (IPv6 minimum
/// MTU 1,280 less headers).
pub const DEFAULT_MAX_DATAGRAM: usize = 1200;

/// The default [`Config::tick_ack_delay`]: 60 ms, so that the
/// acknowledgements of an end sending at 20 Hz or faster ride on its next
/// packet (a 50 ms period and a quarter of it for a late tick).
pub const DEFAULT_TICK_ACK_DELAY: Duration = Duration::from_millis(60);

/// Redundancy for small reliable messages: each rides again in the next
/// packets that carry data until it is acknowledged, so a lost packet
/// costs one send interval rather than a loss-detection delay. Applied
/// once the connection has lost a packet (any loss: a bottleneck's queue
/// drops now and then, below the channels' levels'
/// [`REDUNDANCY_MIN_LOSS`](crate::REDUNDANCY_MIN_LOSS)), and while a new
/// connection assumes loss (until 64 packets are acknowledged): on a link
/// that has lost nothing the copies would be wire bytes for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redundancy {
    /// Bytes of repeated messages one packet may carry (0 turns it off).
    pub max_bytes_per_packet: usize,
    /// Only messages of at most this many bytes are repeated.
    pub max_message: usize,
    /// Copies of one message sent in all, the first included.
    pub max_copies: u8,
}

impl Redundancy {
    /// No redundancy: a lost message waits for loss detection.
    pub const OFF: Redundancy = Redundancy {
        max_bytes_per_packet: 0,
        max_message: 0,
        max_copies: 1,
    };

    fn is_on(&self) -> bool {
        self.max_bytes_per_packet > 0 && self.max_copies > 1 && self.max_message > 0
    }

    pub(crate) fn enabled(&self) -> bool {
        self.is_on()
    }
}

impl Default for Redundancy {
    /// 256 bytes per packet, messages up to 128 bytes, 4 copies.
    fn default() -> Self {
        Redundancy {
            max_bytes_per_packet: 256,
            max_message: 128,
            max_copies: 4,
        }
    }
}

/// A connection's settings; both ends must configure the same channels.
///
/// # Examples
///
/// ```
/// use keel_rudp_proto::{ChannelConfig, ChannelKind, Config};
///
/// let config = Config::new(vec![
///     ChannelConfig::new(ChannelKind::UnreliableSequenced), // snapshots
///     ChannelConfig::new(ChannelKind::ReliableOrdered),     // chat
/// ]);
/// assert_eq!(config.max_datagram_size, 1200);
/// config.validate().unwrap();
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The channels, numbered from 0 in this order (1 to 256).
    pub channels: Vec<ChannelConfig>,
    /// The largest datagram sent (1,200 to 65,527 bytes; default 1,200).
    pub max_datagram_size: usize,
    /// The largest message accepted by `send` and from the peer (default 1 MiB).
    pub max_message_size: usize,
    /// Bytes of messages queued or awaiting acknowledgement over all
    /// channels; past it `send` fails with `SendError::Backpressure`
    /// (default 4 MiB). The connections of a server together are held to
    /// its send budget too ([`SendBudget`](crate::SendBudget),
    /// `SendError::BudgetSpent`).
    pub max_send_buffer: usize,
    /// Bytes of partly received or held-back messages; past it incoming
    /// packets are refused unacknowledged so the peer resends them later
    /// (default 4 MiB).
    pub max_recv_buffer: usize,
    /// Disconnect when nothing valid arrived for this long (default 10 s).
    pub idle_timeout: Duration,
    /// Send a PING when nothing ack-eliciting was sent for this long (default 1 s).
    pub keepalive_interval: Duration,
    /// The longest this end holds an acknowledgement back waiting for a
    /// packet of its own to ride on (default 5 ms, at most 1 s). Each end
    /// announces it in the handshake, and the peer's loss detection waits
    /// that much longer for acknowledgements. A client that sends every
    /// game tick can set it a little above the tick period (17 ms at
    /// 60 Hz, 51 ms at 20 Hz): its acknowledgements then ride on its next
    /// message instead of a packet of their own, which halves the packets
    /// the server receives. Losses are still reported at once: a packet
    /// arriving out of order is acknowledged without delay.
    pub max_ack_delay: Duration,
    /// The longest an acknowledgement waits for this end's next packet
    /// while this end sends at a steady interval (a game tick): default
    /// [`DEFAULT_TICK_ACK_DELAY`] (60 ms), at most 1 s; at or below
    /// `max_ack_delay` it does nothing. Each end measures the interval
    /// between its packets of data (a moving average); when the next one
    /// is due within this bound of the first packet left unacknowledged,
    /// the acknowledgement waits for it (until that time and a quarter of
    /// the interval more, at most this bound) instead of leaving alone
    /// after `max_ack_delay`. So a client ticking at 20-60 Hz sends no
    /// packets of acknowledgements alone, and a server receives one
    /// datagram per message. An end that stops sending falls back to
    /// `max_ack_delay` within one interval. What loss recovery needs is
    /// still acknowledged at once (a packet out of order, one after a gap,
    /// every second packet; every third while waiting for the tick on a
    /// link whose measured loss is below 1 %). The handshake announces the larger of this
    /// and `max_ack_delay` as this end's max ack delay, so the peer's probe
    /// timeout allows for it (RFC 9000, section 13.2.1: an end acknowledges
    /// within the delay it announced).
    pub tick_ack_delay: Duration,
    /// The RTT assumed before the first sample (default 333 ms, RFC 9002).
    pub initial_rtt: Duration,
    /// A client gives up connecting after this long (default 10 s).
    pub handshake_timeout: Duration,
    /// Redundancy for small reliable messages.
    pub redundancy: Redundancy,
    /// Congestion control and pacing of bulk channels (default on).
    pub congestion_control: bool,
    /// How long a close (and so a `stop`) may take (default 2 s): queued
    /// reliable messages are flushed (and resent) until acknowledged, for
    /// at most half of it, then the CLOSE is repeated until the peer
    /// acknowledges it or the time is up. What was not acknowledged is
    /// reported ([`Connection::undelivered`](crate::Connection::undelivered)).
    /// Zero: one CLOSE at once, nothing flushed.
    pub close_timeout: Duration,
    /// Disconnect ([`DisconnectReason::AckTimeout`](crate::DisconnectReason::AckTimeout))
    /// when packets that need an acknowledgement have gone unacknowledged
    /// this long (default 15 s, past the default `idle_timeout`, so that a
    /// peer gone silent is reported as idle): a peer that keeps sending
    /// but never acknowledges is not caught by `idle_timeout`, and would
    /// make this end hold and resend its data forever. Must exceed
    /// `keepalive_interval`.
    pub ack_timeout: Duration,
}

impl Config {
    /// Defaults with these channels.
    pub fn new(channels: Vec<ChannelConfig>) -> Self {
        Config {
            channels,
            max_datagram_size: DEFAULT_MAX_DATAGRAM,
            max_message_size: 1 << 20,
            max_send_buffer: 4 << 20,
            max_recv_buffer: 4 << 20,
            idle_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(1),
            max_ack_delay: Duration::from_millis(5),
            tick_ack_delay: DEFAULT_TICK_ACK_DELAY,
            initial_rtt: Duration::from_millis(333),
            handshake_timeout: Duration::from_secs(10),
            redundancy: Redundancy::default(),
            congestion_control: true,
            close_timeout: Duration::from_secs(2),
            ack_timeout: Duration::from_secs(15),
        }
    }

    /// Checks every setting, naming the first one out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.channels.is_empty() || self.channels.len() > 256 {
            return Err(ConfigError::Channels(self.channels.len()));
        }
        if !(MIN_HELLO_SIZE..=65_527).contains(&self.max_datagram_size) {
            return Err(ConfigError::DatagramSize(self.max_datagram_size));
        }
        if self.max_message_size == 0 || self.max_message_size > u32::MAX as usize {
            return Err(ConfigError::MessageSize(self.max_message_size));
        }
        if self.max_send_buffer < self.max_message_size {
            return Err(ConfigError::SendBuffer {
                buffer: self.max_send_buffer,
                message: self.max_message_size,
            });
        }
        if self.max_ack_delay > Duration::from_micros(MAX_ACK_DELAY_US) {
            return Err(ConfigError::AckDelay(self.max_ack_delay));
        }
        if self.tick_ack_delay > Duration::from_micros(MAX_ACK_DELAY_US) {
            return Err(ConfigError::TickAckDelay(self.tick_ack_delay));
        }
        if self.idle_timeout <= self.keepalive_interval {
            return Err(ConfigError::IdleTimeout {
                idle: self.idle_timeout,
                keepalive: self.keepalive_interval,
            });
        }
        for (i, c) in self.channels.iter().enumerate() {
            let usable = c.kind.is_reliable() && !c.bulk;
            // On unreliable and bulk channels the default level (1) means
            // nothing and is let be (a channel made bulk by setting the
            // field keeps it); a level above it is a mistake.
            let most = if usable {
                crate::channel::MAX_REDUNDANCY
            } else {
                crate::channel::DEFAULT_REDUNDANCY
            };
            if c.redundancy > most {
                return Err(ConfigError::ChannelRedundancy {
                    channel: i,
                    value: c.redundancy,
                });
            }
        }
        if self.ack_timeout <= self.keepalive_interval {
            return Err(ConfigError::AckTimeout {
                ack: self.ack_timeout,
                keepalive: self.keepalive_interval,
            });
        }
        Ok(())
    }

    /// The max ack delay the handshake announces: the longest this end
    /// holds an acknowledgement back, `max_ack_delay` or, when larger,
    /// `tick_ack_delay`.
    pub fn announced_ack_delay(&self) -> Duration {
        self.max_ack_delay.max(self.tick_ack_delay)
    }

    /// A digest of what both ends must agree on (version and channel
    /// kinds), FNV-1a; sent in the hello.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |b: u8| {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        };
        VERSION.to_be_bytes().into_iter().for_each(&mut eat);
        eat(self.channels.len() as u8);
        for c in &self.channels {
            eat(c.kind.code());
        }
        h
    }
}

/// A [`Config`] setting out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `channels` must hold 1 to 256 channels.
    Channels(usize),
    /// `max_datagram_size` must be 1,200 to 65,527 bytes.
    DatagramSize(usize),
    /// `max_message_size` must be 1 to 2^32 - 1 bytes.
    MessageSize(usize),
    /// `max_send_buffer` must hold at least one message of `max_message_size`.
    SendBuffer {
        /// The buffer size given.
        buffer: usize,
        /// The message size given.
        message: usize,
    },
    /// `max_ack_delay` must be at most 1 s.
    AckDelay(Duration),
    /// `tick_ack_delay` must be at most 1 s.
    TickAckDelay(Duration),
    /// `idle_timeout` must exceed `keepalive_interval`.
    IdleTimeout {
        /// The idle timeout given.
        idle: Duration,
        /// The keepalive interval given.
        keepalive: Duration,
    },
    /// A setting of [`Admission`](crate::Admission) out of range.
    Admission {
        /// The setting's name (a field of `Admission`).
        setting: &'static str,
        /// The value given.
        value: u64,
        /// What is accepted.
        accepted: &'static str,
    },
    /// An endpoint's `send_budget` must hold at least one message of
    /// `max_message_size`.
    SendBudget {
        /// The budget given.
        budget: usize,
        /// The message size given.
        message: usize,
    },
    /// A channel's `redundancy` must be 0 to
    /// [`MAX_REDUNDANCY`](crate::channel::MAX_REDUNDANCY), and at most
    /// [`DEFAULT_REDUNDANCY`](crate::channel::DEFAULT_REDUNDANCY) (which
    /// does nothing there) on unreliable and bulk channels.
    ChannelRedundancy {
        /// The channel's index.
        channel: usize,
        /// The value given.
        value: u8,
    },
    /// `ack_timeout` must exceed `keepalive_interval`.
    AckTimeout {
        /// The ack timeout given.
        ack: Duration,
        /// The keepalive interval given.
        keepalive: Duration,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Channels(n) => write!(f, "channels: {n} configured, 1 to 256 accepted"),
            ConfigError::DatagramSize(n) => {
                write!(f, "max_datagram_size: {n} bytes, 1200 to 65527 accepted")
            }
            ConfigError::MessageSize(n) => write!(f, "max_message_size: {n} bytes, 1 to 4294967295 accepted"),
            ConfigError::SendBuffer { buffer, message } => write!(
                f,
                "max_send_buffer: {buffer} bytes cannot hold one message of max_message_size ({message} bytes)"
            ),
            ConfigError::AckDelay(d) => {
                write!(f, "max_ack_delay: {d:?}, 0 to 1 s accepted")
            }
            ConfigError::TickAckDelay(d) => {
                write!(f, "tick_ack_delay: {d:?}, 0 to 1 s accepted")
            }
            ConfigError::IdleTimeout { idle, keepalive } => write!(
                f,
                "idle_timeout ({idle:?}) must be longer than keepalive_interval ({keepalive:?})"
            ),
            ConfigError::Admission {
                setting,
                value,
                accepted,
            } => write!(f, "{setting}: {value}, {accepted} accepted"),
            ConfigError::SendBudget { budget, message } => write!(
                f,
                "send_budget: {budget} bytes cannot hold one message of max_message_size ({message} bytes)"
            ),
            ConfigError::ChannelRedundancy { channel, value } => write!(
                f,
                "channels[{channel}].redundancy: {value}, 0 to {} accepted on reliable channels that are not bulk, 0 to {} (nothing sent) on the others",
                crate::channel::MAX_REDUNDANCY,
                crate::channel::DEFAULT_REDUNDANCY
            ),
            ConfigError::AckTimeout { ack, keepalive } => write!(
                f,
                "ack_timeout ({ack:?}) must be longer than keepalive_interval ({keepalive:?})"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::ChannelKind;

    #[test]
    fn max_ack_delay_past_one_second_is_refused_by_name() {
        let mut c = Config::new(vec![ChannelConfig::new(ChannelKind::Unreliable)]);
        c.max_ack_delay = Duration::from_secs(1);
        assert_eq!(c.validate(), Ok(()));
        c.max_ack_delay = Duration::from_millis(1001);
        let e = c.validate().unwrap_err();
        assert_eq!(e, ConfigError::AckDelay(Duration::from_millis(1001)));
        assert_eq!(e.to_string(), "max_ack_delay: 1.001s, 0 to 1 s accepted");
    }

    #[test]
    fn tick_ack_delay_past_one_second_is_refused_by_name() {
        let mut c = Config::new(vec![ChannelConfig::new(ChannelKind::Unreliable)]);
        assert_eq!(c.announced_ack_delay(), DEFAULT_TICK_ACK_DELAY);
        c.tick_ack_delay = Duration::from_secs(1);
        assert_eq!(c.validate(), Ok(()));
        c.tick_ack_delay = Duration::from_millis(1500);
        let e = c.validate().unwrap_err();
        assert_eq!(e, ConfigError::TickAckDelay(Duration::from_millis(1500)));
        assert_eq!(e.to_string(), "tick_ack_delay: 1.5s, 0 to 1 s accepted");
        // Off (at or below max_ack_delay): the handshake announces max_ack_delay.
        c.tick_ack_delay = Duration::ZERO;
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.announced_ack_delay(), c.max_ack_delay);
    }

    #[test]
    fn channel_redundancy_is_checked_by_name() {
        let ok = ChannelConfig::new(ChannelKind::ReliableOrdered).with_redundancy(3);
        assert_eq!(Config::new(vec![ok]).validate(), Ok(()));
        let high = ChannelConfig::new(ChannelKind::ReliableOrdered).with_redundancy(6);
        let e = Config::new(vec![ok, high]).validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "channels[1].redundancy: 6, 0 to 5 accepted on reliable channels that are not bulk, 0 to 2 (nothing sent) on the others"
        );
        let unreliable = ChannelConfig::new(ChannelKind::Unreliable).with_redundancy(3);
        assert!(Config::new(vec![unreliable]).validate().is_err());
        let bulk = ChannelConfig::new(ChannelKind::ReliableOrdered)
            .bulk()
            .with_redundancy(3);
        assert!(Config::new(vec![bulk]).validate().is_err());
        // A channel made bulk through the field keeps the default level.
        let mut field = ChannelConfig::new(ChannelKind::ReliableOrdered);
        field.bulk = true;
        assert_eq!(Config::new(vec![field]).validate(), Ok(()));
        // The defaults: on for reliable channels, off for the others.
        let defaults = [
            ChannelConfig::new(ChannelKind::Unreliable),
            ChannelConfig::new(ChannelKind::UnreliableSequenced),
            ChannelConfig::new(ChannelKind::ReliableOrdered).bulk(),
            ChannelConfig::new(ChannelKind::ReliableUnordered),
        ];
        assert_eq!(Config::new(defaults.to_vec()).validate(), Ok(()));
        assert_eq!(defaults[3].redundancy, crate::channel::DEFAULT_REDUNDANCY);
    }

    #[test]
    fn ack_timeout_must_exceed_the_keepalive_interval() {
        let mut c = Config::new(vec![ChannelConfig::new(ChannelKind::Unreliable)]);
        c.ack_timeout = c.keepalive_interval;
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "ack_timeout (1s) must be longer than keepalive_interval (1s)"
        );
    }
}
