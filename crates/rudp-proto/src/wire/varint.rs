//! QUIC variable-length integers (RFC 9000, section 16): the two high bits
//! of the first byte give the length (1, 2, 4 or 8 bytes), the rest is the
//! value in network byte order, so values up to 2^62 - 1 fit.

/// The largest value a varint holds: 2^62 - 1.
pub const MAX: u64 = (1 << 62) - 1;

/// Bytes needed to encode `v` (1, 2, 4 or 8).
pub fn len(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// Encodes `v` (at most [`MAX`]) into the front of `out`, returns the length.
///
/// # Panics
///
/// If `out` is shorter than [`len`]`(v)`: callers size it (8 bytes always fit).
pub fn encode(v: u64, out: &mut [u8]) -> usize {
    // Fixed-size stores per length: a copy of a variable length would be a
    // call to memcpy, and a packet writes a dozen varints.
    if v < 1 << 6 {
        out[0] = v as u8;
        1
    } else if v < 1 << 14 {
        out[..2].copy_from_slice(&(v as u16 | 0x4000).to_be_bytes());
        2
    } else if v < 1 << 30 {
        out[..4].copy_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes());
        4
    } else {
        out[..8].copy_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
        8
    }
}

/// Decodes a varint from the front of `buf`: the value and its length, or
/// `None` when `buf` ends inside it.
pub fn decode(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let n = 1usize << (first >> 6);
    let bytes = buf.get(..n)?;
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = v << 8 | u64::from(b);
    }
    Some((v, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc9000_examples() {
        // RFC 9000, appendix A.1 sample encodings.
        assert_eq!(
            decode(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(decode(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(decode(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(decode(&[0x25]), Some((37, 1)));
        assert_eq!(decode(&[0x40, 0x25]), Some((37, 2)));
        let mut out = [0u8; 8];
        assert_eq!(encode(15_293, &mut out), 2);
        assert_eq!(&out[..2], &[0x7b, 0xbd]);
    }

    #[test]
    fn truncated_is_none() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x40]), None);
        assert_eq!(decode(&[0xc0, 0, 0, 0, 0, 0, 0]), None);
    }

    proptest! {
        #[test]
        fn round_trip(v in 0..=MAX) {
            let mut out = [0u8; 8];
            let n = encode(v, &mut out);
            prop_assert_eq!(n, len(v));
            prop_assert_eq!(decode(&out[..n]), Some((v, n)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..10)) {
            if let Some((v, n)) = decode(&bytes) {
                prop_assert!(v <= MAX);
                prop_assert!(n <= bytes.len());
            }
        }
    }
}
