//! Forward error correction's receive state, per connection: the recent
//! whole messages kept to use PARITY frames with, the parities waiting
//! for a second lost message, the REPAIRED reports to send, and their
//! bounds. What a connection does with them is in `connection::fec`.

use std::collections::VecDeque;

/// Whole messages kept per connection to use parity with (the latest).
pub(crate) const FEC_KEEP: usize = 16;
/// Parities kept per connection that wait for one of two lost messages
/// they cover to be repaired by another (the latest).
pub(crate) const FEC_PENDING: usize = 4;
/// Bytes of kept messages and waiting parities per connection at most
/// (each also counted with [`FEC_ENTRY_OVERHEAD`]); a larger message is
/// not kept.
pub(crate) const FEC_MAX_BYTES: usize = 16 * 1024;
/// Bytes counted per kept message or parity besides its data.
pub(crate) const FEC_ENTRY_OVERHEAD: usize = 64;
/// REPAIRED frames waiting to be sent per connection at most (the oldest
/// is dropped, and counted, past it: the sender then resends that
/// message).
pub(crate) const FEC_REPORTS: usize = 32;
/// Packets each REPAIRED frame rides in (four bytes each time, against a
/// resent message when the one packet carrying it is lost).
pub(crate) const REPORT_TIMES: u8 = 2;

#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) channel: u8,
    pub(crate) seq: u64,
    pub(crate) data: Vec<u8>,
}

#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) channel: u8,
    pub(crate) first: u64,
    pub(crate) count: u8,
    pub(crate) len_xor: u32,
    pub(crate) data: Vec<u8>,
}

/// A connection's receive side of forward error correction, made when
/// the first PARITY frame arrives (a peer that sends none costs nothing).
#[derive(Debug, Default)]
pub(crate) struct FecRecv {
    /// Channels a parity came for (only their messages are kept).
    pub(crate) channels: [u64; 4],
    pub(crate) kept: VecDeque<Kept>,
    pub(crate) pending: VecDeque<Pending>,
    /// Bytes counted for `kept` and `pending` (with their overhead), also
    /// taken from the connection's receive memory.
    pub(crate) held: usize,
    /// REPAIRED frames to send: `(channel, seq, times sent)`; each goes
    /// in [`REPORT_TIMES`] packets (a lost one costs the sender a resend).
    pub(crate) reports: VecDeque<(u8, u64, u8)>,
}

impl FecRecv {
    pub(crate) fn watches(&self, channel: u8) -> bool {
        self.channels[usize::from(channel / 64)] & (1 << (channel % 64)) != 0
    }

    pub(crate) fn find(&self, channel: u8, seq: u64) -> Option<&Kept> {
        self.kept
            .iter()
            .find(|k| k.channel == channel && k.seq == seq)
    }

    /// Messages kept now (tests).
    #[cfg(test)]
    pub(crate) fn kept_len(&self) -> usize {
        self.kept.len()
    }

    /// Parities waiting now (tests).
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Bytes held now (tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}
