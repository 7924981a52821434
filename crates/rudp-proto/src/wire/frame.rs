//! Frames: what a packet carries after its header, one after another to
//! the end of the datagram. Each starts with its type as a varint.

use super::base::{BufferTooSmall, DecodeError, Reader, Writer};
use super::varint;

/// The longest CLOSE reason (bytes).
pub const MAX_REASON_LEN: usize = 128;
/// The longest cookie a RETRY or HELLO may carry (bytes).
pub const MAX_COOKIE_LEN: usize = 64;
/// The largest max-ack-delay a HELLO or ACCEPT may announce: 1 s, in µs
/// (a peer that holds acknowledgements longer would look dead to loss
/// detection).
pub const MAX_ACK_DELAY_US: u64 = 1_000_000;
/// Bytes of a sealed connect token at most (what a HELLO carries): key id,
/// expiry, nonce, then sealed client id, timeout, up to 8 addresses, two
/// keys, up to 256 bytes of user data, and the tag.
pub const MAX_TOKEN_LEN: usize = 4 + 8 + 24 + (8 + 4 + 1 + 8 * 18 + 64 + 2 + 256) + 16;
/// The most additional ranges an ACK frame may carry.
const MAX_ACK_RANGES: u64 = 256;
/// The most messages one PARITY frame covers: a receiver's work per
/// parity (and what it must keep to use one) is bounded by it.
pub const MAX_PARITY_SPAN: u8 = 8;

/// Frame type codes (the varint that starts each frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// One zero byte; runs of them fill a packet.
    Padding = 0x00,
    /// Asks for an acknowledgement; carries nothing.
    Ping = 0x01,
    /// Acknowledged packet numbers as ranges, with the ack delay.
    Ack = 0x02,
    /// A whole message.
    Message = 0x03,
    /// A piece of a message larger than one packet.
    Fragment = 0x04,
    /// The connection ends: reason code and text.
    Close = 0x05,
    /// Client hello (long header only).
    Hello = 0x06,
    /// Server retry with a cookie (long header only).
    Retry = 0x07,
    /// Server accepts the hello (long header only).
    Accept = 0x08,
    /// XOR parity over consecutive whole messages of a channel (forward
    /// error correction: repairs one of them lost).
    Parity = 0x09,
    /// A message this end repaired from parity: the sender stops
    /// resending it.
    Repaired = 0x0a,
}

/// A decoded frame, borrowing its payload from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A run of PADDING bytes.
    Padding {
        /// How many.
        len: usize,
    },
    /// PING.
    Ping,
    /// ACK.
    Ack(AckFrame<'a>),
    /// MESSAGE: a whole message on a channel.
    Message {
        /// Channel index (configured at both ends).
        channel: u8,
        /// The message's sequence number on its channel.
        seq: u64,
        /// The message.
        payload: &'a [u8],
    },
    /// FRAGMENT: bytes `offset..offset + payload.len()` of a message of
    /// `total` bytes.
    Fragment {
        /// Channel index.
        channel: u8,
        /// The message's sequence number on its channel.
        seq: u64,
        /// The whole message's length.
        total: u32,
        /// Where this piece starts.
        offset: u32,
        /// The piece (never empty).
        payload: &'a [u8],
    },
    /// CLOSE.
    Close {
        /// Application or protocol reason code.
        code: u64,
        /// Short text, at most [`MAX_REASON_LEN`] bytes (UTF-8 by convention).
        reason: &'a [u8],
    },
    /// HELLO.
    Hello {
        /// The client's random nonce, echoed by RETRY and ACCEPT.
        nonce: [u8; 16],
        /// A digest of the client's channel configuration; the server
        /// refuses a hello whose digest differs from its own.
        config_digest: u64,
        /// The longest the client holds an acknowledgement back, in µs
        /// (at most [`MAX_ACK_DELAY_US`]); the server's loss detection
        /// waits that much longer for the client's ACKs.
        max_ack_delay_us: u64,
        /// The cookie from a RETRY, empty on the first hello.
        cookie: &'a [u8],
        /// The sealed part of the client's connect token, empty in
        /// insecure mode (at most [`MAX_TOKEN_LEN`](crate::MAX_TOKEN_LEN)).
        token: &'a [u8],
    },
    /// RETRY.
    Retry {
        /// The hello's nonce.
        nonce: [u8; 16],
        /// The cookie to return in the next hello.
        cookie: &'a [u8],
    },
    /// ACCEPT.
    Accept {
        /// The hello's nonce.
        nonce: [u8; 16],
        /// The longest the server holds an acknowledgement back, in µs
        /// (at most [`MAX_ACK_DELAY_US`]).
        max_ack_delay_us: u64,
    },
    /// PARITY: the XOR of messages `first..first + count` of a channel,
    /// each zero-padded to the longest, and the XOR of their lengths. A
    /// receiver that has all of them but one rebuilds that one.
    Parity {
        /// Channel index.
        channel: u8,
        /// The first message covered.
        first: u64,
        /// How many consecutive messages are covered, 1 to
        /// [`MAX_PARITY_SPAN`].
        count: u8,
        /// The XOR of the covered messages' lengths.
        len_xor: u32,
        /// The XOR of their bytes, as long as the longest.
        payload: &'a [u8],
    },
    /// REPAIRED: message `seq` of `channel` was rebuilt from parity and
    /// taken; its sender may treat it as acknowledged.
    Repaired {
        /// Channel index.
        channel: u8,
        /// The message's sequence number on its channel.
        seq: u64,
    },
}

/// An ACK frame as received: validated at decode time, so iterating its
/// ranges cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFrame<'a> {
    /// The largest packet number acknowledged.
    pub largest: u64,
    /// Microseconds between receiving `largest` and sending this ACK.
    pub delay_us: u64,
    first_range: u64,
    range_count: u64,
    ranges: &'a [u8],
}

impl<'a> AckFrame<'a> {
    /// Acknowledged ranges `(smallest, largest)`, inclusive, largest first.
    pub fn ranges(&self) -> AckRangeIter<'a> {
        AckRangeIter {
            r: Reader::new(self.ranges),
            next: Some((self.largest - self.first_range, self.largest)),
            left: self.range_count,
        }
    }
}

/// Iterator over the ranges of an [`AckFrame`].
#[derive(Debug, Clone)]
pub struct AckRangeIter<'a> {
    r: Reader<'a>,
    next: Option<(u64, u64)>,
    left: u64,
}

impl Iterator for AckRangeIter<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let cur = self.next.take()?;
        if self.left > 0 {
            self.left -= 1;
            // Validated in decode; a failure here only ends the iteration.
            if let (Ok(gap), Ok(len)) = (self.r.varint("gap"), self.r.varint("range")) {
                let hi = cur.0 - gap - 2;
                self.next = Some((hi - len, hi));
            }
        }
        Some(cur)
    }
}

impl<'a> Frame<'a> {
    /// Decodes one frame from untrusted input.
    pub fn decode(r: &mut Reader<'a>) -> Result<Frame<'a>, DecodeError> {
        let ty = r.varint("frame type")?;
        Ok(match ty {
            0x00 => {
                let mut len = 1;
                while r.peek_u8() == Some(0) {
                    r.u8("padding")?;
                    len += 1;
                }
                Frame::Padding { len }
            }
            0x01 => Frame::Ping,
            0x02 => {
                let largest = r.varint("ack largest")?;
                let delay_us = r.varint("ack delay")?;
                let range_count = r.varint_max(MAX_ACK_RANGES, "ack range count")?;
                let first_range = r.varint("ack first range")?;
                if first_range > largest {
                    return Err(DecodeError::Invalid("ack first range (past packet 0)"));
                }
                let start = r.position();
                let mut rest = r.clone();
                let mut smallest = largest - first_range;
                for _ in 0..range_count {
                    let gap = rest.varint("ack gap")?;
                    let len = rest.varint("ack range")?;
                    let hi = smallest
                        .checked_sub(gap)
                        .and_then(|v| v.checked_sub(2))
                        .ok_or(DecodeError::Invalid("ack gap (past packet 0)"))?;
                    smallest = hi
                        .checked_sub(len)
                        .ok_or(DecodeError::Invalid("ack range (past packet 0)"))?;
                }
                let used = rest.position() - start;
                let ranges = r.bytes(used, "ack ranges")?;
                Frame::Ack(AckFrame {
                    largest,
                    delay_us,
                    first_range,
                    range_count,
                    ranges,
                })
            }
            0x03 => {
                let channel = r.u8("message channel")?;
                let seq = r.varint("message sequence")?;
                let len = r.varint("message length")?;
                let len =
                    usize::try_from(len).map_err(|_| DecodeError::Invalid("message length"))?;
                let payload = r.bytes(len, "message payload")?;
                Frame::Message {
                    channel,
                    seq,
                    payload,
                }
            }
            0x04 => {
                let channel = r.u8("fragment channel")?;
                let seq = r.varint("fragment sequence")?;
                let total = r.varint_max(u64::from(u32::MAX), "fragment total length")? as u32;
                let offset = r.varint_max(u64::from(u32::MAX), "fragment offset")? as u32;
                let len = r.varint_max(u64::from(u32::MAX), "fragment length")? as u32;
                if len == 0 || u64::from(offset) + u64::from(len) > u64::from(total) {
                    return Err(DecodeError::Invalid(
                        "fragment bounds (empty or past total)",
                    ));
                }
                let payload = r.bytes(len as usize, "fragment payload")?;
                Frame::Fragment {
                    channel,
                    seq,
                    total,
                    offset,
                    payload,
                }
            }
            0x05 => {
                let code = r.varint("close code")?;
                let len = r.varint_max(MAX_REASON_LEN as u64, "close reason length")? as usize;
                let reason = r.bytes(len, "close reason")?;
                Frame::Close { code, reason }
            }
            0x06 => {
                let nonce = r.array("hello nonce")?;
                let config_digest = r.u64("hello config digest")?;
                let max_ack_delay_us = r.varint_max(MAX_ACK_DELAY_US, "hello max ack delay")?;
                let len = r.varint_max(MAX_COOKIE_LEN as u64, "hello cookie length")? as usize;
                let cookie = r.bytes(len, "hello cookie")?;
                let len = r.varint_max(MAX_TOKEN_LEN as u64, "hello token length")? as usize;
                let token = r.bytes(len, "hello token")?;
                Frame::Hello {
                    nonce,
                    config_digest,
                    max_ack_delay_us,
                    cookie,
                    token,
                }
            }
            0x07 => {
                let nonce = r.array("retry nonce")?;
                let len = r.varint_max(MAX_COOKIE_LEN as u64, "retry cookie length")? as usize;
                let cookie = r.bytes(len, "retry cookie")?;
                Frame::Retry { nonce, cookie }
            }
            0x08 => Frame::Accept {
                nonce: r.array("accept nonce")?,
                max_ack_delay_us: r.varint_max(MAX_ACK_DELAY_US, "accept max ack delay")?,
            },
            0x09 => {
                let channel = r.u8("parity channel")?;
                let first = r.varint("parity first")?;
                let count = r.varint_max(u64::from(MAX_PARITY_SPAN), "parity count")? as u8;
                if count == 0 {
                    return Err(DecodeError::Invalid("parity count"));
                }
                let len_xor = r.varint_max(u64::from(u32::MAX), "parity length xor")? as u32;
                let len = r.varint_max(u64::from(u32::MAX), "parity length")? as usize;
                let payload = r.bytes(len, "parity payload")?;
                Frame::Parity {
                    channel,
                    first,
                    count,
                    len_xor,
                    payload,
                }
            }
            0x0a => Frame::Repaired {
                channel: r.u8("repaired channel")?,
                seq: r.varint("repaired sequence")?,
            },
            t => return Err(DecodeError::UnknownFrameType(t)),
        })
    }

    /// Bytes this frame takes on the wire (ACK frames: see [`Frame::encode_ack`]).
    pub fn encoded_len(&self) -> usize {
        match *self {
            Frame::Padding { len } => len,
            Frame::Ping => 1,
            Frame::Ack(a) => {
                1 + varint::len(a.largest)
                    + varint::len(a.delay_us)
                    + varint::len(a.range_count)
                    + varint::len(a.first_range)
                    + a.ranges.len()
            }
            Frame::Message { seq, payload, .. } => {
                message_overhead(seq, payload.len()) + payload.len()
            }
            Frame::Fragment {
                seq,
                total,
                offset,
                payload,
                ..
            } => fragment_overhead(seq, total, offset, payload.len()) + payload.len(),
            Frame::Close { code, reason } => {
                1 + varint::len(code) + varint::len(reason.len() as u64) + reason.len()
            }
            Frame::Hello {
                max_ack_delay_us,
                cookie,
                token,
                ..
            } => {
                1 + 16
                    + 8
                    + varint::len(max_ack_delay_us)
                    + varint::len(cookie.len() as u64)
                    + cookie.len()
                    + varint::len(token.len() as u64)
                    + token.len()
            }
            Frame::Retry { cookie, .. } => 1 + 16 + varint::len(cookie.len() as u64) + cookie.len(),
            Frame::Accept {
                max_ack_delay_us, ..
            } => 1 + 16 + varint::len(max_ack_delay_us),
            Frame::Parity {
                first,
                len_xor,
                payload,
                ..
            } => parity_frame_len(first, len_xor, payload.len()),
            Frame::Repaired { seq, .. } => 1 + 1 + varint::len(seq),
        }
    }

    /// Writes the frame (ACK frames are written with [`Frame::encode_ack`]).
    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), BufferTooSmall> {
        if w.remaining() < self.encoded_len() {
            return Err(BufferTooSmall);
        }
        match *self {
            Frame::Padding { len } => w.zeros(len),
            Frame::Ping => w.u8(FrameType::Ping as u8),
            Frame::Ack(a) => {
                w.u8(FrameType::Ack as u8)?;
                w.varint(a.largest)?;
                w.varint(a.delay_us)?;
                w.varint(a.range_count)?;
                w.varint(a.first_range)?;
                w.bytes(a.ranges)
            }
            Frame::Message {
                channel,
                seq,
                payload,
            } => {
                w.u8(FrameType::Message as u8)?;
                w.u8(channel)?;
                w.varint(seq)?;
                w.varint(payload.len() as u64)?;
                w.bytes(payload)
            }
            Frame::Fragment {
                channel,
                seq,
                total,
                offset,
                payload,
            } => {
                w.u8(FrameType::Fragment as u8)?;
                w.u8(channel)?;
                w.varint(seq)?;
                w.varint(u64::from(total))?;
                w.varint(u64::from(offset))?;
                w.varint(payload.len() as u64)?;
                w.bytes(payload)
            }
            Frame::Close { code, reason } => {
                let reason = &reason[..reason.len().min(MAX_REASON_LEN)];
                w.u8(FrameType::Close as u8)?;
                w.varint(code)?;
                w.varint(reason.len() as u64)?;
                w.bytes(reason)
            }
            Frame::Hello {
                nonce,
                config_digest,
                max_ack_delay_us,
                cookie,
                token,
            } => {
                w.u8(FrameType::Hello as u8)?;
                w.bytes(&nonce)?;
                w.u64(config_digest)?;
                w.varint(max_ack_delay_us)?;
                w.varint(cookie.len() as u64)?;
                w.bytes(cookie)?;
                w.varint(token.len() as u64)?;
                w.bytes(token)
            }
            Frame::Retry { nonce, cookie } => {
                w.u8(FrameType::Retry as u8)?;
                w.bytes(&nonce)?;
                w.varint(cookie.len() as u64)?;
                w.bytes(cookie)
            }
            Frame::Accept {
                nonce,
                max_ack_delay_us,
            } => {
                w.u8(FrameType::Accept as u8)?;
                w.bytes(&nonce)?;
                w.varint(max_ack_delay_us)
            }
            Frame::Parity {
                channel,
                first,
                count,
                len_xor,
                payload,
            } => {
                w.u8(FrameType::Parity as u8)?;
                w.u8(channel)?;
                w.varint(first)?;
                w.varint(u64::from(count))?;
                w.varint(u64::from(len_xor))?;
                w.varint(payload.len() as u64)?;
                w.bytes(payload)
            }
            Frame::Repaired { channel, seq } => {
                w.u8(FrameType::Repaired as u8)?;
                w.u8(channel)?;
                w.varint(seq)
            }
        }
    }

    /// Writes an ACK frame for `ranges` (inclusive `(smallest, largest)`,
    /// largest first, disjoint and not adjacent), keeping as many ranges
    /// as fit in `w`. Returns how many were written; `Err` when not even
    /// the first fits.
    pub fn encode_ack(
        w: &mut Writer<'_>,
        delay_us: u64,
        ranges: &[(u64, u64)],
    ) -> Result<usize, BufferTooSmall> {
        Frame::encode_ack_iter(w, delay_us, ranges.iter().copied())
    }

    /// [`Frame::encode_ack`] over an iterator of ranges (walked twice: to
    /// count what fits, then to write it), so a caller writes from its own
    /// range set without copying it first.
    pub fn encode_ack_iter<I>(
        w: &mut Writer<'_>,
        delay_us: u64,
        ranges: I,
    ) -> Result<usize, BufferTooSmall>
    where
        I: Iterator<Item = (u64, u64)> + Clone,
    {
        let mut rest = ranges.clone();
        let Some((lo, hi)) = rest.next() else {
            return Ok(0);
        };
        let start = w.len();
        // Count the ranges that fit before writing the count.
        let fixed = 1 + varint::len(hi) + varint::len(delay_us) + varint::len(hi - lo);
        let mut n = 1;
        let mut used = fixed + 1;
        let mut prev_lo = lo;
        for (l, h) in rest {
            let gap = prev_lo - h - 2;
            let more = varint::len(gap) + varint::len(h - l);
            let count_len = varint::len(n as u64) - varint::len(n as u64 - 1);
            if used + more + count_len > w.remaining() || n as u64 >= MAX_ACK_RANGES {
                break;
            }
            used += more + count_len;
            n += 1;
            prev_lo = l;
        }
        if used > w.remaining() {
            return Err(BufferTooSmall);
        }
        w.u8(FrameType::Ack as u8)?;
        w.varint(hi)?;
        w.varint(delay_us)?;
        w.varint(n as u64 - 1)?;
        w.varint(hi - lo)?;
        let mut prev_lo = lo;
        for (l, h) in ranges.skip(1).take(n - 1) {
            w.varint(prev_lo - h - 2)?;
            w.varint(h - l)?;
            prev_lo = l;
        }
        debug_assert!(w.len() - start <= used);
        Ok(n)
    }
}

/// Bytes of a MESSAGE frame besides its payload.
pub(crate) fn message_overhead(seq: u64, len: usize) -> usize {
    1 + 1 + varint::len(seq) + varint::len(len as u64)
}

/// Bytes of a FRAGMENT frame besides its payload.
pub(crate) fn fragment_overhead(seq: u64, total: u32, offset: u32, len: usize) -> usize {
    1 + 1
        + varint::len(seq)
        + varint::len(u64::from(total))
        + varint::len(u64::from(offset))
        + varint::len(len as u64)
}

/// Bytes of a PARITY frame (its count is one byte: at most
/// [`MAX_PARITY_SPAN`]).
pub(crate) fn parity_frame_len(first: u64, len_xor: u32, len: usize) -> usize {
    1 + 1 + varint::len(first) + 1 + varint::len(u64::from(len_xor)) + varint::len(len as u64) + len
}

/// Bytes of a MESSAGE frame carrying `len` bytes as message `seq`.
pub(crate) fn message_frame_len(seq: u64, len: usize) -> usize {
    message_overhead(seq, len) + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(f: Frame<'_>) {
        let mut buf = [0u8; 256];
        let mut w = Writer::new(&mut buf);
        f.encode(&mut w).unwrap();
        let n = w.len();
        assert_eq!(n, f.encoded_len(), "{f:?}");
        let mut r = Reader::new(&buf[..n]);
        assert_eq!(Frame::decode(&mut r).unwrap(), f);
        assert!(r.is_empty());
    }

    #[test]
    fn frames_round_trip() {
        round_trip(Frame::Padding { len: 7 });
        round_trip(Frame::Ping);
        round_trip(Frame::Message {
            channel: 3,
            seq: 70_000,
            payload: b"hello",
        });
        round_trip(Frame::Fragment {
            channel: 0,
            seq: 1,
            total: 5000,
            offset: 1100,
            payload: &[9; 100],
        });
        round_trip(Frame::Close {
            code: 42,
            reason: b"server full",
        });
        round_trip(Frame::Hello {
            nonce: [7; 16],
            config_digest: 0xdead_beef,
            max_ack_delay_us: 25_000,
            cookie: &[1; 20],
            token: &[3; 100],
        });
        round_trip(Frame::Retry {
            nonce: [7; 16],
            cookie: &[2; 20],
        });
        round_trip(Frame::Accept {
            nonce: [8; 16],
            max_ack_delay_us: MAX_ACK_DELAY_US,
        });
        round_trip(Frame::Parity {
            channel: 2,
            first: 70_000,
            count: MAX_PARITY_SPAN,
            len_xor: 400 ^ 399,
            payload: &[5; 100],
        });
        round_trip(Frame::Repaired {
            channel: 1,
            seq: 1 << 40,
        });
    }

    #[test]
    fn rejects_bad_parity_frames() {
        // A span past MAX_PARITY_SPAN, an empty one, a truncated payload.
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x09, 0, 0, MAX_PARITY_SPAN + 1, 0, 0])),
            Err(DecodeError::Invalid("parity count"))
        );
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x09, 0, 0, 0, 0, 0])),
            Err(DecodeError::Invalid("parity count"))
        );
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x09, 0, 0, 2, 0, 4, 1, 2])),
            Err(DecodeError::Truncated("parity payload"))
        );
    }

    #[test]
    fn ack_ranges_round_trip() {
        let ranges = [(90, 100), (50, 80), (10, 10), (0, 5)];
        let mut buf = [0u8; 64];
        let mut w = Writer::new(&mut buf);
        assert_eq!(Frame::encode_ack(&mut w, 1234, &ranges).unwrap(), 4);
        let n = w.len();
        let f = Frame::decode(&mut Reader::new(&buf[..n])).unwrap();
        let Frame::Ack(a) = f else { panic!("{f:?}") };
        assert_eq!(a.largest, 100);
        assert_eq!(a.delay_us, 1234);
        assert_eq!(a.ranges().collect::<Vec<_>>(), ranges);
        assert_eq!(f.encoded_len(), n);
    }

    #[test]
    fn ack_keeps_the_ranges_that_fit() {
        let ranges: Vec<(u64, u64)> = (0..20).rev().map(|i| (i * 10, i * 10 + 5)).collect();
        let mut buf = [0u8; 20];
        let mut w = Writer::new(&mut buf);
        let n = Frame::encode_ack(&mut w, 0, &ranges).unwrap();
        assert!(n > 1 && n < 20, "{n}");
        let len = w.len();
        let Frame::Ack(a) = Frame::decode(&mut Reader::new(&buf[..len])).unwrap() else {
            panic!()
        };
        assert_eq!(a.ranges().collect::<Vec<_>>(), ranges[..n]);
    }

    #[test]
    fn rejects_bad_frames() {
        // ACK whose first range goes below packet 0.
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x02, 5, 0, 0, 6])),
            Err(DecodeError::Invalid("ack first range (past packet 0)"))
        );
        // ACK gap below 0.
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x02, 5, 0, 1, 2, 2, 0])),
            Err(DecodeError::Invalid("ack gap (past packet 0)"))
        );
        // Fragment past its total.
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x04, 0, 0, 10, 8, 3, 1, 2, 3])),
            Err(DecodeError::Invalid(
                "fragment bounds (empty or past total)"
            ))
        );
        // ACCEPT announcing a max ack delay past 1 s.
        let mut buf = [0u8; 32];
        let mut w = Writer::new(&mut buf);
        w.u8(0x08).unwrap();
        w.bytes(&[1; 16]).unwrap();
        w.varint(MAX_ACK_DELAY_US + 1).unwrap();
        let n = w.len();
        assert_eq!(
            Frame::decode(&mut Reader::new(&buf[..n])),
            Err(DecodeError::Invalid("accept max ack delay"))
        );
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x0b])),
            Err(DecodeError::UnknownFrameType(11))
        );
        assert_eq!(
            Frame::decode(&mut Reader::new(&[0x03, 0, 1, 10, 1])),
            Err(DecodeError::Truncated("message payload"))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while !r.is_empty() {
                match Frame::decode(&mut r) {
                    Ok(Frame::Ack(a)) => { let _ = a.ranges().count(); }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }

        #[test]
        fn arbitrary_ack_sets_round_trip(mut points in proptest::collection::btree_set(0u64..10_000, 1..60)) {
            // Build disjoint, non-adjacent ranges from a set, largest first.
            let mut ranges: Vec<(u64, u64)> = Vec::new();
            while let Some(&hi) = points.iter().next_back() {
                points.remove(&hi);
                let mut lo = hi;
                while lo > 0 && points.remove(&(lo - 1)) { lo -= 1; }
                ranges.push((lo, hi));
            }
            let mut buf = [0u8; 1200];
            let mut w = Writer::new(&mut buf);
            let n = Frame::encode_ack(&mut w, 5, &ranges).unwrap();
            prop_assert_eq!(n, ranges.len());
            let len = w.len();
            let Frame::Ack(a) = Frame::decode(&mut Reader::new(&buf[..len])).unwrap() else { unreachable!() };
            prop_assert_eq!(a.ranges().collect::<Vec<_>>(), ranges);
        }
    }
}
