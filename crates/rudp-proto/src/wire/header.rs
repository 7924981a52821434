//! Packet headers: a long header for the handshake, a short one after it.

use super::base::{BufferTooSmall, DecodeError, Reader, Writer, VERSION};
use std::fmt;

/// Bytes of a long header: first byte, version, connection ID.
pub const LONG_HEADER_LEN: usize = 1 + 4 + 8;

/// The most bytes a short header takes: first byte, connection ID, a
/// 4-byte packet number.
pub const SHORT_HEADER_MAX_LEN: usize = 1 + 8 + 4;

/// Bit 7 of the first byte: set in a long header (handshake, no
/// connection ID yet), clear in a short one. A lane-steering program
/// spreads packets with it set by the kernel's hash.
pub const LONG_HEADER_BIT: u8 = 0x80;
const LONG_BIT: u8 = LONG_HEADER_BIT;
const FIXED_BIT: u8 = 0x40;

/// A connection ID: 8 bytes chosen by the server. Byte 0 is the index of
/// the server lane that owns the connection (so a reuseport steering
/// program can route by it), the other 7 are unpredictable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct ConnectionId(pub [u8; 8]);

impl ConnectionId {
    /// The server lane this connection lives on (byte 0).
    pub fn lane(&self) -> u8 {
        self.0[0]
    }
}

impl fmt::Debug for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The kind of a long-header packet (bits 5..4 of the first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongType {
    /// Client to server: HELLO frame, padded to at least 1,200 bytes.
    Hello = 0,
    /// Server to client, stateless: RETRY frame carrying a cookie.
    Retry = 1,
    /// Server to client: ACCEPT frame; the header carries the new
    /// connection ID.
    Accept = 2,
    /// Server to client after a valid cookie: CLOSE frame (the hello was
    /// refused, e.g. the channel configuration differs).
    Refuse = 3,
}

/// A decoded packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Handshake packets.
    Long {
        /// Which handshake packet.
        ty: LongType,
        /// The connection ID (zero in HELLO and RETRY, the new one in ACCEPT).
        cid: ConnectionId,
    },
    /// Packets of an established connection.
    Short {
        /// The connection ID the server assigned.
        cid: ConnectionId,
        /// The packet number: full when encoding, the truncated low
        /// `pn_len` bytes when decoded (expand with [`decode_packet_number`]).
        pn: u64,
        /// Bytes of packet number on the wire (1 to 4).
        pn_len: usize,
    },
}

impl Header {
    /// Bytes this header takes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Header::Long { .. } => LONG_HEADER_LEN,
            Header::Short { pn_len, .. } => 1 + 8 + pn_len,
        }
    }

    /// Never empty; present for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The connection ID.
    pub fn cid(&self) -> ConnectionId {
        match self {
            Header::Long { cid, .. } | Header::Short { cid, .. } => *cid,
        }
    }

    /// Writes the header.
    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), BufferTooSmall> {
        match *self {
            Header::Long { ty, cid } => {
                w.u8(LONG_BIT | FIXED_BIT | (ty as u8) << 4)?;
                w.u32(VERSION)?;
                w.bytes(&cid.0)
            }
            Header::Short { cid, pn, pn_len } => {
                debug_assert!((1..=4).contains(&pn_len));
                w.u8(FIXED_BIT | (pn_len as u8 - 1))?;
                w.bytes(&cid.0)?;
                w.bytes(&pn.to_be_bytes()[8 - pn_len..])
            }
        }
    }

    /// Reads a header from untrusted input.
    pub fn decode(r: &mut Reader<'_>) -> Result<Header, DecodeError> {
        let first = r.u8("first byte")?;
        if first & FIXED_BIT == 0 {
            return Err(DecodeError::Invalid("fixed bit (must be 1)"));
        }
        if first & LONG_BIT != 0 {
            if first & 0x0f != 0 {
                return Err(DecodeError::ReservedBits(first));
            }
            let ty = match (first >> 4) & 0x03 {
                0 => LongType::Hello,
                1 => LongType::Retry,
                2 => LongType::Accept,
                _ => LongType::Refuse,
            };
            let version = r.u32("version")?;
            if version != VERSION {
                return Err(DecodeError::UnsupportedVersion(version));
            }
            let cid = ConnectionId(r.array("connection id")?);
            Ok(Header::Long { ty, cid })
        } else {
            if first & 0x3c != 0 {
                return Err(DecodeError::ReservedBits(first));
            }
            let pn_len = usize::from(first & 0x03) + 1;
            let cid = ConnectionId(r.array("connection id")?);
            let bytes = r.bytes(pn_len, "packet number")?;
            let pn = bytes.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b));
            Ok(Header::Short { cid, pn, pn_len })
        }
    }
}

/// Bytes of packet number to send for `pn` when the peer has acknowledged
/// up to `largest_acked` (RFC 9000, appendix A.2): enough that the receiver's
/// window of twice the unacknowledged span holds it; 1 to 4.
pub fn encode_packet_number_len(pn: u64, largest_acked: Option<u64>) -> usize {
    let unacked = match largest_acked {
        Some(l) => pn.saturating_sub(l),
        None => pn + 1,
    };
    let range = unacked.saturating_mul(2);
    match range {
        r if r < 1 << 8 => 1,
        r if r < 1 << 16 => 2,
        r if r < 1 << 24 => 3,
        _ => 4,
    }
}

/// How far ahead of a packet's number the receiver's largest received
/// number can be, at the least, with the packet still expanded correctly:
/// [`send_packet_number_len`] never writes fewer than 2 bytes.
pub const MIN_REORDER_ALLOWANCE: u64 = (1 << 15) - 2;

/// Bytes of packet number a connection writes for `pn` when the peer has
/// acknowledged up to `largest_acked`: 2 to 4, so that the receiver expands
/// it correctly both when it has not seen the packets before it (back to
/// `largest_acked`, as in [`encode_packet_number_len`]) and when packets
/// sent after it arrived first (reordering).
///
/// The receiver expands relative to the largest number it has received,
/// which is ahead of `pn` by every packet sent after it that overtook it;
/// past half the window the packet expands to a number `2^(8 * length)`
/// too high (RFC 9000, section 17.1, asks for room for this; the RFC's
/// minimum does not leave any). The window here allows a packet to be
/// overtaken by twice the unacknowledged span less one, and by at least
/// [`MIN_REORDER_ALLOWANCE`] packets: after a quiet moment (`pn` one past
/// `largest_acked`) the 1-byte window of the RFC's minimum takes 127, and
/// a large message leaves in a burst of hundreds of packets.
pub fn send_packet_number_len(pn: u64, largest_acked: Option<u64>) -> usize {
    let unacked = match largest_acked {
        Some(l) => pn.saturating_sub(l),
        None => pn + 1,
    };
    // Half the window must exceed twice the unacknowledged span.
    let len = match unacked.saturating_mul(4) {
        r if r < 1 << 16 => 2,
        r if r < 1 << 24 => 3,
        _ => 4,
    };
    debug_assert!(len >= encode_packet_number_len(pn, largest_acked));
    len
}

/// Expands a truncated packet number (RFC 9000, appendix A.3): the value
/// nearest to `largest_received + 1` whose low `pn_len` bytes are
/// `truncated`.
pub fn decode_packet_number(largest_received: Option<u64>, truncated: u64, pn_len: usize) -> u64 {
    let expected = largest_received.map_or(0, |l| l + 1);
    let bits = 8 * pn_len as u32;
    let win = 1u64 << bits;
    let hwin = win / 2;
    let mask = win - 1;
    let candidate = (expected & !mask) | (truncated & mask);
    if candidate + hwin <= expected && candidate < (1u64 << 62) - win {
        candidate + win
    } else if candidate > expected + hwin && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(h: Header) -> Header {
        let mut buf = [0u8; 32];
        let mut w = Writer::new(&mut buf);
        h.encode(&mut w).unwrap();
        let n = w.len();
        assert_eq!(n, h.len());
        let mut r = Reader::new(&buf[..n]);
        let d = Header::decode(&mut r).unwrap();
        assert!(r.is_empty());
        d
    }

    #[test]
    fn headers_round_trip() {
        let cid = ConnectionId([3, 1, 2, 3, 4, 5, 6, 7]);
        for ty in [
            LongType::Hello,
            LongType::Retry,
            LongType::Accept,
            LongType::Refuse,
        ] {
            assert_eq!(
                round_trip(Header::Long { ty, cid }),
                Header::Long { ty, cid }
            );
        }
        let h = Header::Short {
            cid,
            pn: 0xa1b2c3,
            pn_len: 2,
        };
        assert_eq!(
            round_trip(h),
            Header::Short {
                cid,
                pn: 0xb2c3,
                pn_len: 2
            }
        );
        assert_eq!(cid.lane(), 3);
    }

    #[test]
    fn rejects_other_versions_and_reserved_bits() {
        let mut buf = [0xc0u8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Header::decode(&mut Reader::new(&buf)),
            Err(DecodeError::UnsupportedVersion(1))
        );
        buf[0] = 0xc1;
        assert_eq!(
            Header::decode(&mut Reader::new(&buf)),
            Err(DecodeError::ReservedBits(0xc1))
        );
        assert_eq!(
            Header::decode(&mut Reader::new(&[0x00])),
            Err(DecodeError::Invalid("fixed bit (must be 1)"))
        );
        assert_eq!(
            Header::decode(&mut Reader::new(&[0x44, 0])),
            Err(DecodeError::ReservedBits(0x44))
        );
    }

    #[test]
    fn rfc9000_packet_number_example() {
        // RFC 9000, A.3: largest 0xa82f30ea, 2-byte 0x9b32 decodes to 0xa82f9b32.
        assert_eq!(
            decode_packet_number(Some(0xa82f30ea), 0x9b32, 2),
            0xa82f9b32
        );
        // A.2: with 0xabe8b3 acked, sending 0xac5c02 needs 2 bytes.
        assert_eq!(encode_packet_number_len(0xac5c02, Some(0xabe8b3)), 2);
        assert_eq!(encode_packet_number_len(0xace8fe, Some(0xabe8b3)), 3);
    }

    #[test]
    fn a_packet_overtaken_by_a_burst_expands_to_its_own_number() {
        // Packet 415 leaves when 370 is acknowledged; 141 packets sent
        // after it arrive first. With the RFC's minimum (1 byte, a window
        // of 256) it expands to 671, a packet not yet sent.
        let (pn, acked, largest) = (415, 370, 556);
        let rfc = encode_packet_number_len(pn, Some(acked));
        assert_eq!(rfc, 1);
        assert_eq!(decode_packet_number(Some(largest), pn & 0xff, rfc), 671);
        let n = send_packet_number_len(pn, Some(acked));
        assert_eq!(n, 2);
        assert_eq!(decode_packet_number(Some(largest), pn & 0xffff, n), pn);
        // The allowance is exact: one more and the 2-byte window wraps.
        let edge = pn + MIN_REORDER_ALLOWANCE;
        assert_eq!(decode_packet_number(Some(edge), pn & 0xffff, n), pn);
        assert_ne!(decode_packet_number(Some(edge + 1), pn & 0xffff, n), pn);
    }

    proptest! {
        #[test]
        fn packet_numbers_expand_back(largest in 0u64..1 << 40, ahead in 1u64..1 << 20, back in 0u64..1000) {
            // The sender knows `acked` <= what the receiver has; the receiver
            // has seen `largest`, which may be ahead of `pn` (reordering).
            let pn = largest + ahead;
            let acked = largest.saturating_sub(back);
            let n = encode_packet_number_len(pn, Some(acked));
            let truncated = pn & ((1u64 << (8 * n)) - 1);
            prop_assert_eq!(decode_packet_number(Some(largest), truncated, n), pn);
        }

        #[test]
        fn sent_packet_numbers_expand_back_after_being_overtaken(
            acked in 0u64..1 << 40,
            span in 1u64..1 << 22,
            overtaken in 0u64..1 << 24,
            behind in 0u64..1 << 22,
        ) {
            // Sent with `span` unacknowledged; the receiver has anything from
            // `acked` (behind) to the allowance past `pn` (overtaken).
            let pn = acked + span;
            let n = send_packet_number_len(pn, Some(acked));
            let truncated = pn & ((1u64 << (8 * n)) - 1);
            let allowance = (2 * span - 1).max(MIN_REORDER_ALLOWANCE);
            let largest = pn + overtaken.min(allowance);
            prop_assert_eq!(decode_packet_number(Some(largest), truncated, n), pn);
            let largest = pn - behind.min(span);
            prop_assert_eq!(decode_packet_number(Some(largest), truncated, n), pn);
        }

        #[test]
        fn arbitrary_headers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            let _ = Header::decode(&mut Reader::new(&bytes));
        }
    }
}
