//! What every part of the wire format shares (a leaf): the version, the
//! errors, and the bounded reader and writer.

use std::fmt;

use super::varint;

/// The protocol version carried in every long header: `"kr"` then the
/// revision (`0x6b72_0003`: each end announces its max ack delay in the
/// handshake; `0002` added connect tokens and sealed packets). A peer that
/// speaks another version is refused
/// ([`DecodeError::UnsupportedVersion`]).
pub const VERSION: u32 = 0x6b72_0003;

/// The smallest datagram a client hello is padded to (bytes). A server
/// never sends more than a hello's size to an unvalidated address, so it
/// never amplifies.
pub const MIN_HELLO_SIZE: usize = 1200;

/// Why bytes from the network were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside the named field.
    Truncated(&'static str),
    /// A frame type this version does not define.
    UnknownFrameType(u64),
    /// A long header with a version other than [`VERSION`].
    UnsupportedVersion(u32),
    /// Reserved header bits were set (first byte shown); they must be zero
    /// in this version.
    ReservedBits(u8),
    /// A field held a value outside its accepted range (field named).
    Invalid(&'static str),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated(what) => write!(f, "packet ends inside {what}"),
            DecodeError::UnknownFrameType(t) => {
                write!(
                    f,
                    "unknown frame type {t:#x} (this version defines 0x00..=0x08)"
                )
            }
            DecodeError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "unsupported version {v:#010x} (this peer speaks {VERSION:#010x})"
                )
            }
            DecodeError::ReservedBits(b) => {
                write!(
                    f,
                    "reserved header bits set in first byte {b:#04x} (must be zero)"
                )
            }
            DecodeError::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// An encoder ran out of room in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferTooSmall;

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("output buffer too small for the encoded packet")
    }
}

impl std::error::Error for BufferTooSmall {}

/// A cursor over untrusted input. Every read checks bounds and names the
/// field in its error.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes left to read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when everything was read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The next byte without consuming it.
    pub fn peek_u8(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let b = self.peek_u8().ok_or(DecodeError::Truncated(what))?;
        self.pos += 1;
        Ok(b)
    }

    /// `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N, what)?);
        Ok(a)
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// A variable-length integer ([`varint`]).
    pub fn varint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let (v, n) = varint::decode(&self.buf[self.pos..]).ok_or(DecodeError::Truncated(what))?;
        self.pos += n;
        Ok(v)
    }

    /// A varint that must be at most `max`.
    pub fn varint_max(&mut self, max: u64, what: &'static str) -> Result<u64, DecodeError> {
        let v = self.varint(what)?;
        if v > max {
            return Err(DecodeError::Invalid(what));
        }
        Ok(v)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}

/// A cursor writing into a caller-owned buffer.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// Room left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Forget everything after `len` bytes (undo a partial write).
    pub fn truncate(&mut self, len: usize) {
        self.pos = self.pos.min(len);
    }

    /// Runs `f` on a writer over at most `max` bytes of the room left and
    /// keeps what it wrote.
    pub fn limited<R>(&mut self, max: usize, f: impl FnOnce(&mut Writer<'_>) -> R) -> R {
        let end = self.pos + max.min(self.remaining());
        let mut sub = Writer::new(&mut self.buf[self.pos..end]);
        let r = f(&mut sub);
        self.pos += sub.pos;
        r
    }

    /// One byte.
    pub fn u8(&mut self, v: u8) -> Result<(), BufferTooSmall> {
        self.bytes(&[v])
    }

    /// A slice.
    pub fn bytes(&mut self, b: &[u8]) -> Result<(), BufferTooSmall> {
        if self.remaining() < b.len() {
            return Err(BufferTooSmall);
        }
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
        Ok(())
    }

    /// `n` zero bytes (PADDING frames are zero bytes).
    pub fn zeros(&mut self, n: usize) -> Result<(), BufferTooSmall> {
        if self.remaining() < n {
            return Err(BufferTooSmall);
        }
        self.buf[self.pos..self.pos + n].fill(0);
        self.pos += n;
        Ok(())
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self, v: u16) -> Result<(), BufferTooSmall> {
        self.bytes(&v.to_be_bytes())
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self, v: u32) -> Result<(), BufferTooSmall> {
        self.bytes(&v.to_be_bytes())
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self, v: u64) -> Result<(), BufferTooSmall> {
        self.bytes(&v.to_be_bytes())
    }

    /// A variable-length integer; values above [`varint::MAX`] are a bug
    /// of the caller and are clamped (debug builds assert).
    pub fn varint(&mut self, v: u64) -> Result<(), BufferTooSmall> {
        debug_assert!(v <= varint::MAX, "varint {v} over 2^62 - 1");
        let v = v.min(varint::MAX);
        let end = self.pos + varint::len(v);
        let Some(out) = self.buf.get_mut(self.pos..end) else {
            return Err(BufferTooSmall);
        };
        self.pos += varint::encode(v, out);
        Ok(())
    }
}
