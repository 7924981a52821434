//! Scratch space a connection needs only within one call (the packets an
//! ACK acknowledges or declares lost, the chunks a probe repeats, the
//! buffer a sealed packet is opened into), kept per thread instead of per
//! connection: a server's thousands of connections on one thread share a
//! few instead of each holding its own (they were 12 KiB of an idle
//! connection's 24). Taken at the start of the call and given back at its
//! end, so the steady state still allocates nothing once the first
//! connections on a thread have grown them; at most [`KEPT`] of each kind
//! are kept, each no larger than the largest a connection on the thread
//! needed (bounded as that connection's state is).

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::channel::OutMsg;
use crate::recovery::{ChunkRef, SentPacket};

/// Most chunks a probe repeats (the oldest unacknowledged ones).
pub(crate) const PROBE_CHUNKS: usize = 64;

/// Spent outgoing messages kept per thread at most (each of at most
/// [`MAX_KEPT_CAPACITY`](crate::pool::MAX_KEPT_CAPACITY) bytes: the send side keeps no larger one).
const MAX_FREE_MSGS: usize = 1024;

/// Buffers of each kind kept per thread (calls nest at most two deep: an
/// ACK's acknowledged and lost packets).
const KEPT: usize = 4;

type Stack<T> = RefCell<Vec<Vec<T>>>;

thread_local! {
    static PACKETS: Stack<SentPacket> = const { RefCell::new(Vec::new()) };
    static REFS: Stack<ChunkRef> = const { RefCell::new(Vec::new()) };
    static BYTES: Stack<u8> = const { RefCell::new(Vec::new()) };
    static MSGS: RefCell<Vec<OutMsg>> = const { RefCell::new(Vec::new()) };
}

fn take<T: 'static>(key: &'static LocalKey<Stack<T>>) -> Vec<T> {
    key.try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn give<T: 'static>(key: &'static LocalKey<Stack<T>>, v: Vec<T>) {
    if v.capacity() == 0 {
        return;
    }
    let _ = key.try_with(move |s| {
        let mut s = s.borrow_mut();
        if s.len() < KEPT {
            s.push(v);
        }
    });
}

/// An empty list of sent packets (for an ACK's or a timer's outcome).
/// Also makes sure the thread has a chunk list with room for a probe's
/// [`PROBE_CHUNKS`]: every connection handles ACKs before its first probe,
/// so a probe (rare: a stall, a loss) allocates nothing.
pub(crate) fn take_packets() -> Vec<SentPacket> {
    let _ = REFS.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.is_empty() {
            s.push(Vec::with_capacity(PROBE_CHUNKS));
        }
    });
    take(&PACKETS)
}

/// Gives a list from [`take_packets`] back (emptied; its packets' chunk
/// lists must have been taken out by then).
pub(crate) fn give_packets(mut v: Vec<SentPacket>) {
    v.clear();
    give(&PACKETS, v);
}

/// An empty list of chunk references.
pub(crate) fn take_refs() -> Vec<ChunkRef> {
    take(&REFS)
}

/// Gives a list from [`take_refs`] back.
pub(crate) fn give_refs(mut v: Vec<ChunkRef>) {
    v.clear();
    give(&REFS, v);
}

/// A buffer of at least `len` bytes (its contents whatever an earlier
/// user left: zeroed only where it grows).
pub(crate) fn take_bytes(len: usize) -> Vec<u8> {
    let mut v = take(&BYTES);
    if v.len() < len {
        v.resize(len, 0);
    }
    v
}

/// Gives a buffer from [`take_bytes`] back (its length kept, so the next
/// taker does not zero it again).
pub(crate) fn give_bytes(v: Vec<u8>) {
    give(&BYTES, v);
}

/// The thread's spent outgoing messages, for a connection's sends and
/// acknowledgements to take from and add to; give it back with
/// [`give_msgs`] at the end of the call.
pub(crate) fn take_msgs() -> Vec<OutMsg> {
    MSGS.try_with(|m| std::mem::take(&mut *m.borrow_mut()))
        .unwrap_or_default()
}

/// Gives back what [`take_msgs`] returned, with what was added to it, to
/// at most [`MAX_FREE_MSGS`].
pub(crate) fn give_msgs(mut v: Vec<OutMsg>) {
    v.truncate(MAX_FREE_MSGS);
    let _ = MSGS.try_with(move |m| {
        let mut m = m.borrow_mut();
        if m.is_empty() {
            *m = v;
        } else {
            let room = MAX_FREE_MSGS.saturating_sub(m.len());
            m.extend(v.into_iter().take(room));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_messages_are_bounded() {
        let mut msgs = take_msgs();
        msgs.extend((0..2 * MAX_FREE_MSGS).map(|_| OutMsg::default()));
        give_msgs(msgs);
        assert_eq!(MSGS.with(|m| m.borrow().len()), MAX_FREE_MSGS);
    }

    #[test]
    fn buffers_are_reused_and_bounded() {
        let v = take_bytes(1500);
        assert!(v.len() >= 1500);
        let p = v.as_ptr();
        give_bytes(v);
        let w = take_bytes(100);
        assert_eq!(w.as_ptr(), p, "the buffer given back is taken again");
        assert!(w.len() >= 1500, "its length is kept");
        give_bytes(w);
        let many: Vec<_> = (0..2 * KEPT).map(|_| take_bytes(8)).collect();
        for v in many {
            give_bytes(v);
        }
        assert_eq!(BYTES.with(|s| s.borrow().len()), KEPT);
    }
}
