//! Free lists that keep message buffers across messages, so the steady
//! state allocates nothing.

/// Byte buffers kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct BufPool {
    free: Vec<Vec<u8>>,
    /// The capacity of the buffers in `free`.
    bytes: usize,
}

/// At most this many buffers are kept.
const MAX_FREE: usize = 256;
/// Buffers larger than this are not kept (one huge message must not pin
/// its memory forever).
const MAX_KEPT_CAPACITY: usize = 64 * 1024;
/// Bytes kept at most, in all: the pool is fixed per-connection state,
/// whatever sizes of message the peer makes it deliver.
pub(crate) const MAX_KEPT_BYTES: usize = 256 * 1024;

impl BufPool {
    /// An empty buffer with room for `len` bytes.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        match self.free.pop() {
            Some(mut v) => {
                self.bytes -= v.capacity();
                v.clear();
                v.reserve(len);
                v
            }
            None => Vec::with_capacity(len),
        }
    }

    /// Gives a buffer back.
    pub(crate) fn give(&mut self, v: Vec<u8>) {
        if self.free.len() < MAX_FREE
            && v.capacity() <= MAX_KEPT_CAPACITY
            && v.capacity() > 0
            && self.bytes + v.capacity() <= MAX_KEPT_BYTES
        {
            self.bytes += v.capacity();
            self.free.push(v);
        }
    }
}
