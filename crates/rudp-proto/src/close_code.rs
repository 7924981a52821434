//! keel-rudp's own close codes, by name.

use std::fmt;

/// The close codes keel-rudp itself sends (1 to 31): a server's refusal of
/// a handshake (a REFUSE) and the closes keel decides on its own. A game's
/// own `close` codes are its business; staying clear of 1 to 31 keeps them
/// unambiguous. The `REFUSE_*` and `CLOSE_*` constants are these codes as
/// numbers ([`CloseCode::code`]), as the wire carries them.
///
/// # Examples
///
/// ```
/// use keel_rudp_proto::{CloseCode, DisconnectReason, REFUSE_TOKEN};
///
/// let why = DisconnectReason::Remote { code: REFUSE_TOKEN, reason: "expired".into() };
/// assert_eq!(why.close_code(), Some(CloseCode::Token));
/// assert!(CloseCode::Token.is_refusal());
/// assert_eq!(CloseCode::from_code(4242), None); // the game's own
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CloseCode {
    /// Refused: the client's channels differ from the server's.
    ConfigMismatch,
    /// Refused: the server holds `max_connections`.
    Full,
    /// Refused: one side requires connect tokens and the other is insecure.
    SecurityMismatch,
    /// Refused: the connect token (forged, expired, another key or
    /// server, replayed; the reason says which).
    Token,
    /// The peer stopped its server or client.
    Stopped,
    /// Refused: the client's address holds the most connections one
    /// address may.
    AddressLimit,
    /// Refused: the client's address started handshakes too fast.
    RateLimit,
    /// Closed: a newer connection with the same connect token replaced it.
    Replaced,
    /// Closed: the server's (or client's) handler panicked.
    HandlerPanic,
    /// Closed: the peer acknowledged nothing for `ack_timeout`.
    AckTimeout,
}

impl CloseCode {
    /// Every code, in order of number.
    pub const ALL: [CloseCode; 10] = [
        CloseCode::ConfigMismatch,
        CloseCode::Full,
        CloseCode::SecurityMismatch,
        CloseCode::Token,
        CloseCode::Stopped,
        CloseCode::AddressLimit,
        CloseCode::RateLimit,
        CloseCode::Replaced,
        CloseCode::HandlerPanic,
        CloseCode::AckTimeout,
    ];

    /// The number the wire carries.
    pub const fn code(self) -> u64 {
        match self {
            CloseCode::ConfigMismatch => 1,
            CloseCode::Full => 2,
            CloseCode::SecurityMismatch => 3,
            CloseCode::Token => 4,
            CloseCode::Stopped => 5,
            CloseCode::AddressLimit => 6,
            CloseCode::RateLimit => 7,
            CloseCode::Replaced => 8,
            CloseCode::HandlerPanic => 16,
            CloseCode::AckTimeout => 17,
        }
    }

    /// The code with this number, if it is one of keel's.
    pub fn from_code(code: u64) -> Option<CloseCode> {
        CloseCode::ALL.into_iter().find(|c| c.code() == code)
    }

    /// True for a server's refusal of a handshake (a REFUSE: the
    /// connection never existed), false for the close of a connection.
    pub const fn is_refusal(self) -> bool {
        matches!(
            self,
            CloseCode::ConfigMismatch
                | CloseCode::Full
                | CloseCode::SecurityMismatch
                | CloseCode::Token
                | CloseCode::AddressLimit
                | CloseCode::RateLimit
        )
    }
}

impl fmt::Display for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CloseCode::ConfigMismatch => "refused: the channels differ from the server's",
            CloseCode::Full => "refused: the server is full",
            CloseCode::SecurityMismatch => {
                "refused: one side requires connect tokens, the other is insecure"
            }
            CloseCode::Token => "refused: the connect token",
            CloseCode::Stopped => "the peer stopped",
            CloseCode::AddressLimit => "refused: too many connections from this address",
            CloseCode::RateLimit => "refused: too many handshakes from this address",
            CloseCode::Replaced => "replaced by a newer connection with the same connect token",
            CloseCode::HandlerPanic => "the peer's handler panicked",
            CloseCode::AckTimeout => "the peer acknowledged nothing for too long",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_numbers_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for c in CloseCode::ALL {
            assert_eq!(CloseCode::from_code(c.code()), Some(c));
            assert!((1..32).contains(&c.code()), "{c:?} outside keel's range");
            assert!(seen.insert(c.code()), "{c:?} reuses {}", c.code());
        }
        assert_eq!(CloseCode::from_code(0), None);
        assert_eq!(CloseCode::from_code(4242), None);
    }
}
