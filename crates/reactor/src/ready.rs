//! Readiness as reported to a lane, decoupled from mio's event type.

use std::fmt;

/// Which readiness a source reported. Edge-triggered: a bit is reported
/// once per transition, so the handler must drain until `WouldBlock`.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Ready(u8);

impl Ready {
    /// Data can be read.
    pub const READABLE: Ready = Ready(1);
    /// Data can be written.
    pub const WRITABLE: Ready = Ready(1 << 1);
    /// The source has a pending error (e.g. ICMP port unreachable on UDP).
    pub const ERROR: Ready = Ready(1 << 2);
    /// The read half was closed by the peer.
    pub const READ_CLOSED: Ready = Ready(1 << 3);
    /// The write half was closed.
    pub const WRITE_CLOSED: Ready = Ready(1 << 4);

    pub(crate) fn from_event(event: &mio::event::Event) -> Ready {
        let mut r = 0;
        if event.is_readable() {
            r |= Self::READABLE.0;
        }
        if event.is_writable() {
            r |= Self::WRITABLE.0;
        }
        if event.is_error() {
            r |= Self::ERROR.0;
        }
        if event.is_read_closed() {
            r |= Self::READ_CLOSED.0;
        }
        if event.is_write_closed() {
            r |= Self::WRITE_CLOSED.0;
        }
        Ready(r)
    }

    /// Whether every bit of `other` is set in `self`.
    pub fn contains(self, other: Ready) -> bool {
        self.0 & other.0 == other.0
    }

    /// Readable (or closed/errored, which a read will report).
    pub fn is_readable(self) -> bool {
        self.0 & (Self::READABLE.0 | Self::READ_CLOSED.0 | Self::ERROR.0) != 0
    }

    /// Writable (or errored, which a write will report).
    pub fn is_writable(self) -> bool {
        self.0 & (Self::WRITABLE.0 | Self::WRITE_CLOSED.0 | Self::ERROR.0) != 0
    }

    /// An error is pending on the source.
    pub fn is_error(self) -> bool {
        self.0 & Self::ERROR.0 != 0
    }

    /// No bit set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl std::ops::BitOr for Ready {
    type Output = Ready;
    fn bitor(self, rhs: Ready) -> Ready {
        Ready(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for Ready {
    fn bitor_assign(&mut self, rhs: Ready) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::READABLE, "READABLE"),
            (Self::WRITABLE, "WRITABLE"),
            (Self::ERROR, "ERROR"),
            (Self::READ_CLOSED, "READ_CLOSED"),
            (Self::WRITE_CLOSED, "WRITE_CLOSED"),
        ];
        let mut first = true;
        write!(f, "Ready(")?;
        for (bit, name) in names {
            if self.contains(bit) && !bit.is_empty() {
                if !first {
                    write!(f, " | ")?;
                }
                write!(f, "{name}")?;
                first = false;
            }
        }
        write!(f, ")")
    }
}
