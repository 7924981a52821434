//! The wire format: packet headers, frames and QUIC-style variable-length
//! integers, documented field by field in `docs/rudp.md`.
//!
//! Every decoder takes untrusted bytes and returns a [`DecodeError`] on
//! malformed input, never a panic (property tests feed them arbitrary
//! bytes). Encoders write into caller-owned buffers through a [`Writer`]
//! and fail with [`BufferTooSmall`] rather than overrun it.

mod base;
mod frame;
mod header;
pub mod varint;

pub use base::{BufferTooSmall, DecodeError, Reader, Writer, MIN_HELLO_SIZE, VERSION};
pub(crate) use frame::{message_frame_len, parity_frame_len};
pub use frame::{
    AckFrame, AckRangeIter, Frame, FrameType, MAX_ACK_DELAY_US, MAX_COOKIE_LEN, MAX_PARITY_SPAN,
    MAX_REASON_LEN, MAX_TOKEN_LEN,
};
pub use header::{
    decode_packet_number, encode_packet_number_len, send_packet_number_len, ConnectionId, Header,
    LongType, LONG_HEADER_BIT, LONG_HEADER_LEN, MIN_REORDER_ALLOWANCE, SHORT_HEADER_MAX_LEN,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_names_the_truncated_field() {
        let mut r = Reader::new(&[1, 2]);
        assert_eq!(r.u32("version"), Err(DecodeError::Truncated("version")));
        assert_eq!(r.u8("x"), Ok(1));
        assert_eq!(r.remaining(), 1);
    }

    #[test]
    fn writer_refuses_to_overrun() {
        let mut buf = [0u8; 3];
        let mut w = Writer::new(&mut buf);
        assert_eq!(w.u32(7), Err(BufferTooSmall));
        assert_eq!(w.len(), 0);
        w.u8(9).unwrap();
        w.varint(300).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w.u8(1), Err(BufferTooSmall));
    }
}
