//! The benchmark message and the server's per-echo work, plus sockperf's
//! UDP header for the sockperf-compatible echo mode.
//!
//! # keel-bench message
//!
//! Every datagram starts with a 16-byte header, all integers big endian:
//!
//! | bytes  | content                                   |
//! | ------ | ----------------------------------------- |
//! | 0..3   | magic [`MAGIC`] (`b"KEL"`)                |
//! | 3      | phase tag: 0 = warm-up, 1 = measured      |
//! | 4..8   | client id (`u32`)                         |
//! | 8..16  | sequence (`u64`)                          |
//!
//! The rest of the datagram is a deterministic fill that depends on the
//! client id, the sequence and the byte position, so a corrupted, truncated,
//! shifted or misdirected echo is detected byte for byte. The fill is made of
//! 64-bit words: with `seed` a splitmix64 mix of client id and sequence,
//! word `i` is `x ^ (x >> 29)` where `x = seed + (i + 1) × 0x9E3779B97F4A7C15`
//! (a Weyl sequence, so every word of a message differs from every other and
//! a shifted copy never matches), stored little endian at bytes
//! `16 + 8i ..`; a trailing partial word uses the low bytes of the next word.
//! Each word depends only on `seed` and `i`, so fill and verification
//! vectorise: they write and compare whole `u64` words, cost well under a
//! cycle per byte and never allocate.
//!
//! # sockperf
//!
//! sockperf's UDP header is 14 bytes, network order: `u64` sequence, `u16`
//! flags, `u32` length (the whole message, header included, as sockperf's
//! client sets it to its message size). Flag bits: 1 = client, 2 = pong
//! request, 4 = warm-up. sockperf's own server ignores messages without the
//! client bit, answers nothing to warm-up messages or to messages without the
//! pong-request bit, and clears the client bit in its reply (the client
//! ignores replies that still carry it). [`sockperf_classify`] and
//! [`sockperf_reply`] follow the same rules.

use std::fmt;

/// Length of the keel-bench message header in bytes.
pub const HEADER_LEN: usize = 16;

/// The 3-byte magic that starts every keel-bench message.
pub const MAGIC: [u8; 3] = *b"KEL";

/// Which phase a message belongs to (header byte 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Warm-up phase, tag 0: echoed and checked, not reported.
    Warmup = 0,
    /// Measured phase, tag 1.
    Measured = 1,
}

impl Phase {
    /// The header byte for this phase.
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The phase for a header byte, if it is a known tag.
    pub fn from_tag(tag: u8) -> Option<Phase> {
        match tag {
            0 => Some(Phase::Warmup),
            1 => Some(Phase::Measured),
            _ => None,
        }
    }
}

/// A decoded keel-bench message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Phase tag.
    pub phase: Phase,
    /// Sending client's id.
    pub client: u32,
    /// Per-client sequence number.
    pub seq: u64,
}

/// Why a datagram is not a keel-bench message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageError {
    /// Shorter than [`HEADER_LEN`].
    Short,
    /// The first three bytes are not [`MAGIC`].
    BadMagic,
    /// The phase byte is neither 0 nor 1.
    BadPhase,
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MessageError::Short => "message shorter than the 16-byte header",
            MessageError::BadMagic => "message does not start with the keel-bench magic",
            MessageError::BadPhase => "message has an unknown phase tag",
        })
    }
}

impl std::error::Error for MessageError {}

/// splitmix64 finaliser: a cheap, well-mixing bijection on `u64`.
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Weyl increment of the fill sequence (2^64 / golden ratio, odd).
const WEYL: u64 = 0x9E37_79B9_7F4A_7C15;

/// Fill word `i` of the message with fill seed `seed` (the definition;
/// [`encode`] and [`verify_fill`] step `x` by adds instead).
#[cfg(test)]
fn fill_word(seed: u64, i: u64) -> u64 {
    mix_word(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(WEYL)))
}

/// The fill word for Weyl value `x`.
#[inline(always)]
fn mix_word(x: u64) -> u64 {
    x ^ (x >> 29)
}

/// One xorshift64 step (Marsaglia 13/7/17); never maps a non-zero state to 0.
#[inline]
fn xorshift64(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// Fill seed of message (`client`, `seq`).
#[inline]
fn fill_seed(client: u32, seq: u64) -> u64 {
    splitmix64(seq ^ splitmix64(u64::from(client) | (0x4B45_4C00 << 32)))
}

/// Writes a complete message into `buf`: header plus fill up to `buf.len()`.
///
/// # Panics
///
/// If `buf` is shorter than [`HEADER_LEN`] (the benchmark's payload minimum
/// is 16 bytes, so validated configurations never hit this).
pub fn encode(buf: &mut [u8], phase: Phase, client: u32, seq: u64) {
    assert!(
        buf.len() >= HEADER_LEN,
        "keel-bench message buffer shorter than its 16-byte header"
    );
    let (header, fill) = buf.split_at_mut(HEADER_LEN);
    header[..3].copy_from_slice(&MAGIC);
    header[3] = phase.tag();
    header[4..8].copy_from_slice(&client.to_be_bytes());
    header[8..16].copy_from_slice(&seq.to_be_bytes());

    let seed = fill_seed(client, seq);
    let mut words = fill.chunks_exact_mut(8);
    // `x` steps through the Weyl sequence: word `i` is `fill_word(seed, i)`
    // with an add instead of a 64-bit multiply per word (which SSE2 has
    // not: the multiply form vectorised into three `pmuludq` per word).
    let mut x = seed;
    for word in &mut words {
        x = x.wrapping_add(WEYL);
        word.copy_from_slice(&mix_word(x).to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let len = tail.len();
        tail.copy_from_slice(&mix_word(x.wrapping_add(WEYL)).to_le_bytes()[..len]);
    }
}

/// Decodes and validates the header of `buf` (length, magic, phase).
pub fn decode_header(buf: &[u8]) -> Result<Header, MessageError> {
    if buf.len() < HEADER_LEN {
        return Err(MessageError::Short);
    }
    if buf[..3] != MAGIC {
        return Err(MessageError::BadMagic);
    }
    let phase = Phase::from_tag(buf[3]).ok_or(MessageError::BadPhase)?;
    let client = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&buf[8..16]);
    Ok(Header {
        phase,
        client,
        seq: u64::from_be_bytes(seq),
    })
}

/// Checks that every byte after the header equals the fill [`encode`] would
/// write for `header`'s client and sequence (the phase does not affect the
/// fill). Returns false for a buffer shorter than the header.
///
/// Equivalent to re-encoding and comparing byte for byte, without the copy.
pub fn verify_fill(buf: &[u8], header: &Header) -> bool {
    if buf.len() < HEADER_LEN {
        return false;
    }
    let fill = &buf[HEADER_LEN..];
    let seed = fill_seed(header.client, header.seq);
    let mut words = fill.chunks_exact(8);
    // Accumulate differences so the loop has no early exit and vectorises
    // well; a corrupted message costs the same as a good one.
    let mut diff = 0u64;
    // The Weyl sequence by adds, as in `encode`.
    let mut x = seed;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        x = x.wrapping_add(WEYL);
        diff |= u64::from_le_bytes(bytes) ^ mix_word(x);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let expected = mix_word(x.wrapping_add(WEYL)).to_le_bytes();
        for (got, want) in tail.iter().zip(expected.iter()) {
            diff |= u64::from(got ^ want);
        }
    }
    diff == 0
}

/// The server's deterministic per-echo CPU work: `rounds` steps of xorshift64
/// seeded from the message header (the first 16 bytes, or fewer if the
/// message is shorter). Returns the final state, which the caller passes to
/// [`std::hint::black_box`] so the optimiser cannot remove the loop.
/// `rounds == 0` does no work. Never allocates.
pub fn server_work(msg: &[u8], rounds: u64) -> u64 {
    let mut head = [0u8; HEADER_LEN];
    let n = msg.len().min(HEADER_LEN);
    head[..n].copy_from_slice(&msg[..n]);
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&head[..8]);
    hi.copy_from_slice(&head[8..]);
    let mut x = splitmix64(u64::from_be_bytes(lo) ^ splitmix64(u64::from_be_bytes(hi)));
    if x == 0 {
        x = 0x2545_F491_4F6C_DD1D;
    }
    for _ in 0..rounds {
        x = xorshift64(x);
    }
    x
}

/// Length of sockperf's UDP message header in bytes.
pub const SOCKPERF_HEADER_LEN: usize = 14;
/// sockperf flag bit: the message comes from a client.
pub const SOCKPERF_FLAG_CLIENT: u16 = 1;
/// sockperf flag bit: the client asks for a reply.
pub const SOCKPERF_FLAG_PONG_REQUEST: u16 = 2;
/// sockperf flag bit: warm-up message, never answered.
pub const SOCKPERF_FLAG_WARMUP: u16 = 4;

/// What a sockperf-compatible server does with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SockperfVerdict {
    /// A client message that asks for a reply: echo it with the client bit
    /// cleared.
    Reply,
    /// A well-formed client message that sockperf's server would not answer
    /// (warm-up, or no pong request).
    NoReply,
    /// Not a sockperf client message: shorter than 14 bytes, client bit
    /// clear, or a length field different from the datagram's length.
    Invalid,
}

/// Classifies a datagram received by the sockperf echo mode, without
/// changing it.
pub fn sockperf_classify(msg: &[u8]) -> SockperfVerdict {
    if msg.len() < SOCKPERF_HEADER_LEN {
        return SockperfVerdict::Invalid;
    }
    let flags = u16::from_be_bytes([msg[8], msg[9]]);
    let length = u32::from_be_bytes([msg[10], msg[11], msg[12], msg[13]]);
    if flags & SOCKPERF_FLAG_CLIENT == 0 {
        return SockperfVerdict::Invalid;
    }
    // sockperf's client sets the length to its whole message size, so for a
    // datagram it equals the datagram length exactly.
    if usize::try_from(length) != Ok(msg.len()) {
        return SockperfVerdict::Invalid;
    }
    if flags & SOCKPERF_FLAG_WARMUP != 0 || flags & SOCKPERF_FLAG_PONG_REQUEST == 0 {
        return SockperfVerdict::NoReply;
    }
    SockperfVerdict::Reply
}

/// Whether a datagram carries sockperf's warm-up flag (for a
/// [`SockperfVerdict::NoReply`] message: a warm-up one rather than one that
/// asks for no pong). False for anything shorter than the header.
pub fn sockperf_is_warmup(msg: &[u8]) -> bool {
    msg.len() >= SOCKPERF_HEADER_LEN
        && u16::from_be_bytes([msg[8], msg[9]]) & SOCKPERF_FLAG_WARMUP != 0
}

/// Turns a sockperf client request into its reply in place, by clearing the
/// client bit. Returns true iff the datagram must be echoed (verdict
/// [`SockperfVerdict::Reply`]); otherwise `msg` is left unchanged and nothing
/// is to be sent.
pub fn sockperf_reply(msg: &mut [u8]) -> bool {
    if sockperf_classify(msg) != SockperfVerdict::Reply {
        return false;
    }
    let flags = u16::from_be_bytes([msg[8], msg[9]]) & !SOCKPERF_FLAG_CLIENT;
    msg[8..10].copy_from_slice(&flags.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize, phase: Phase, client: u32, seq: u64) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        encode(&mut buf, phase, client, seq);
        buf
    }

    #[test]
    fn header_layout_is_big_endian() {
        let buf = message(16, Phase::Measured, 0x0102_0304, 0x1112_1314_1516_1718);
        assert_eq!(
            buf,
            [b'K', b'E', b'L', 1, 1, 2, 3, 4, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
        );
    }

    #[test]
    fn roundtrip_all_lengths_near_word_boundaries() {
        for len in (16..=40).chain([1024, 1031, 65507, 65527]) {
            for (phase, client, seq) in [
                (Phase::Warmup, 0, 0),
                (Phase::Measured, 7, 123_456),
                (Phase::Measured, u32::MAX, u64::MAX),
            ] {
                let buf = message(len, phase, client, seq);
                let h = decode_header(&buf).unwrap();
                assert_eq!(h, Header { phase, client, seq });
                assert!(verify_fill(&buf, &h), "len {len}");
            }
        }
    }

    #[test]
    fn any_single_flipped_fill_byte_is_detected() {
        for len in [17, 23, 24, 25, 1024, 1027] {
            let buf = message(len, Phase::Measured, 3, 99);
            let h = decode_header(&buf).unwrap();
            for pos in HEADER_LEN..len {
                for bit in [0x01u8, 0x80] {
                    let mut bad = buf.clone();
                    bad[pos] ^= bit;
                    assert!(!verify_fill(&bad, &h), "len {len} pos {pos}");
                }
            }
        }
    }

    #[test]
    fn fill_depends_on_client_sequence_and_position() {
        let a = message(1024, Phase::Measured, 1, 5);
        let b = message(1024, Phase::Measured, 2, 5);
        let c = message(1024, Phase::Measured, 1, 6);
        let ha = decode_header(&a).unwrap();
        assert!(!verify_fill(&b, &ha));
        assert_ne!(a[16..], b[16..]);
        assert_ne!(a[16..], c[16..]);
        // A copy shifted by one word is not accepted.
        let mut shifted = a.clone();
        shifted.copy_within(24..1024, 16);
        assert!(!verify_fill(&shifted, &ha));
        // The header's claims are checked against the fill.
        let wrong_client = Header { client: 2, ..ha };
        let wrong_seq = Header { seq: 6, ..ha };
        assert!(!verify_fill(&a, &wrong_client));
        assert!(!verify_fill(&a, &wrong_seq));
        // The phase does not change the fill.
        let warm = message(1024, Phase::Warmup, 1, 5);
        assert_eq!(warm[16..], a[16..]);
    }

    #[test]
    fn fill_is_not_constant() {
        let buf = message(4096, Phase::Measured, 0, 0);
        let zeros = buf[16..].iter().filter(|&&b| b == 0).count();
        assert!(zeros < 100, "{zeros} zero bytes in 4080 of fill");
    }

    /// `encode` writes the documented fill (word `i` is `fill_word(seed,
    /// i)`, the multiply form of the module docs), tail included, and a
    /// known value pins the format across changes.
    /// Fill word 0 of client 1, sequence 0, as the format defines it
    /// (computed outside this crate, in Python, from `fill_seed` and the
    /// module docs).
    const FIRST_WORD_OF_CLIENT_1_SEQ_0: u64 = 0xAC29_6E4F_A7EE_DE28;

    #[test]
    fn fill_is_the_documented_weyl_sequence() {
        for len in [16usize, 17, 23, 24, 25, 1024, 1029] {
            let mut buf = vec![0u8; len];
            encode(&mut buf, Phase::Measured, 7, 42);
            let seed = fill_seed(7, 42);
            for (i, got) in buf[HEADER_LEN..].chunks(8).enumerate() {
                let want = fill_word(seed, i as u64).to_le_bytes();
                assert_eq!(got, &want[..got.len()], "len {len}, word {i}");
            }
        }
        let mut buf = vec![0u8; 24];
        encode(&mut buf, Phase::Warmup, 1, 0);
        let first = u64::from_le_bytes(buf[16..24].try_into().unwrap());
        assert_eq!(first, fill_word(fill_seed(1, 0), 0));
        assert_eq!(first, FIRST_WORD_OF_CLIENT_1_SEQ_0);
    }

    #[test]
    fn header_errors() {
        assert_eq!(decode_header(&[]), Err(MessageError::Short));
        let good = message(32, Phase::Measured, 1, 1);
        assert_eq!(decode_header(&good[..15]), Err(MessageError::Short));
        for pos in 0..3 {
            let mut bad = good.clone();
            bad[pos] ^= 0x20;
            assert_eq!(decode_header(&bad), Err(MessageError::BadMagic));
        }
        for tag in [2u8, 0x80, 0xff] {
            let mut bad = good.clone();
            bad[3] = tag;
            assert_eq!(decode_header(&bad), Err(MessageError::BadPhase));
        }
        assert!(!verify_fill(&good[..10], &decode_header(&good).unwrap()));
    }

    #[test]
    fn header_flips_change_the_decoded_fields() {
        let good = message(64, Phase::Measured, 10, 20);
        let h = decode_header(&good).unwrap();
        for pos in 4..16 {
            let mut bad = good.clone();
            bad[pos] ^= 1;
            let hb = decode_header(&bad).unwrap();
            assert_ne!(hb, h);
            // The fill no longer matches what the header now claims.
            assert!(!verify_fill(&bad, &hb), "pos {pos}");
        }
        let mut bad = good.clone();
        bad[3] = 0;
        assert_eq!(decode_header(&bad).unwrap().phase, Phase::Warmup);
    }

    #[test]
    fn server_work_is_deterministic_and_seeded_by_the_header() {
        let a = message(64, Phase::Measured, 1, 1);
        let b = message(64, Phase::Measured, 1, 2);
        assert_eq!(server_work(&a, 1000), server_work(&a, 1000));
        assert_ne!(server_work(&a, 1000), server_work(&b, 1000));
        assert_ne!(server_work(&a, 1000), server_work(&a, 1001));
        assert_ne!(server_work(&a, 0), 0);
        assert_ne!(server_work(&[], 10), 0);
        // Only the header seeds it.
        let mut c = a.clone();
        c[40] ^= 1;
        assert_eq!(server_work(&a, 77), server_work(&c, 77));
    }

    fn sockperf(seq: u64, flags: u16, length: u32, total: usize) -> Vec<u8> {
        let mut buf = vec![0xAAu8; total.max(SOCKPERF_HEADER_LEN)];
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        buf[8..10].copy_from_slice(&flags.to_be_bytes());
        buf[10..14].copy_from_slice(&length.to_be_bytes());
        buf.truncate(total);
        buf
    }

    #[test]
    fn sockperf_reply_clears_only_the_client_bit() {
        let mut msg = sockperf(42, 0x0003, 64, 64);
        let orig = msg.clone();
        assert!(sockperf_reply(&mut msg));
        assert_eq!(u16::from_be_bytes([msg[8], msg[9]]), 0x0002);
        assert_eq!(msg[..8], orig[..8]);
        assert_eq!(msg[10..], orig[10..]);
        // Minimum message: header only.
        let mut min = sockperf(1, 0x0003, 14, 14);
        assert!(sockperf_reply(&mut min));
    }

    #[test]
    fn sockperf_rejects_and_ignores_like_sockperf_server() {
        let cases = [
            (sockperf(1, 0x0003, 13, 13), SockperfVerdict::Invalid),
            (sockperf(1, 0x0002, 64, 64), SockperfVerdict::Invalid),
            (sockperf(1, 0x0003, 63, 64), SockperfVerdict::Invalid),
            (sockperf(1, 0x0003, 65, 64), SockperfVerdict::Invalid),
            (sockperf(1, 0x0003, u32::MAX, 64), SockperfVerdict::Invalid),
            (sockperf(1, 0x0001, 64, 64), SockperfVerdict::NoReply),
            (sockperf(1, 0x0007, 64, 64), SockperfVerdict::NoReply),
            (sockperf(1, 0x0003, 64, 64), SockperfVerdict::Reply),
        ];
        for (mut msg, verdict) in cases {
            assert_eq!(sockperf_classify(&msg), verdict, "{msg:02x?}");
            let before = msg.clone();
            assert_eq!(sockperf_reply(&mut msg), verdict == SockperfVerdict::Reply);
            if verdict != SockperfVerdict::Reply {
                assert_eq!(msg, before);
            }
        }
        assert_eq!(sockperf_classify(&[]), SockperfVerdict::Invalid);
        // Of the two unanswered ones, 0x0007 is the warm-up.
        assert!(sockperf_is_warmup(&sockperf(1, 0x0007, 64, 64)));
        assert!(!sockperf_is_warmup(&sockperf(1, 0x0001, 64, 64)));
        assert!(!sockperf_is_warmup(&[0xff; 9]));
    }
}
