//! Free lists that keep message buffers across messages, so the steady
//! state allocates nothing.

use std::cell::RefCell;

/// Byte buffers kept for reuse: a handle on the thread's free list, so
/// a thread's connections share it (an idle connection holds none; they
/// kept one each, about a message's size a connection). The bounds below
/// are the thread's, so they hold for each of its connections as before.
#[derive(Debug, Default)]
pub(crate) struct BufPool;

/// The thread's free byte buffers.
struct Free {
    free: Vec<Vec<u8>>,
    /// The capacity of the buffers in `free`.
    bytes: usize,
}

thread_local! {
    static BUFS: RefCell<Free> = const { RefCell::new(Free { free: Vec::new(), bytes: 0 }) };
}

/// At most this many buffers are kept.
const MAX_FREE: usize = 256;
/// Buffers larger than this are not kept (one huge message must not pin
/// its memory forever).
pub(crate) const MAX_KEPT_CAPACITY: usize = 64 * 1024;
/// Bytes kept at most, in all: the pool is fixed per-thread state,
/// whatever sizes of message the peers make it deliver.
pub(crate) const MAX_KEPT_BYTES: usize = 256 * 1024;

impl BufPool {
    /// An empty buffer with room for `len` bytes.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        let reused = BUFS
            .try_with(|f| {
                let mut f = f.borrow_mut();
                let v = f.free.pop()?;
                f.bytes -= v.capacity();
                Some(v)
            })
            .ok()
            .flatten();
        match reused {
            Some(mut v) => {
                v.clear();
                v.reserve(len);
                v
            }
            None => Vec::with_capacity(len),
        }
    }

    /// Gives a buffer back.
    pub(crate) fn give(&mut self, v: Vec<u8>) {
        let _ = BUFS.try_with(move |f| {
            let mut f = f.borrow_mut();
            if f.free.len() < MAX_FREE
                && v.capacity() <= MAX_KEPT_CAPACITY
                && v.capacity() > 0
                && f.bytes + v.capacity() <= MAX_KEPT_BYTES
            {
                f.bytes += v.capacity();
                f.free.push(v);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_shared_and_bounded() {
        let mut a = BufPool;
        let mut b = BufPool;
        let v = a.take(400);
        let p = v.as_ptr();
        a.give(v);
        let w = b.take(100);
        assert_eq!(w.as_ptr(), p, "another connection reuses it");
        for _ in 0..2 * MAX_FREE {
            a.give(Vec::with_capacity(16));
        }
        assert_eq!(BUFS.with(|f| f.borrow().free.len()), MAX_FREE);
    }
}
