//! Channels: per-channel send queues (messages kept as chunks until
//! acknowledged) and receive state (reassembly, ordering, staleness).

use std::collections::VecDeque;

use crate::pool::BufPool;
use crate::ranges::RangeSet;

/// How a channel delivers its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChannelKind {
    /// Resent until acknowledged; delivered exactly once, in order. A gap
    /// holds back later messages of this channel only.
    ReliableOrdered,
    /// Resent until acknowledged; delivered exactly once, as soon as whole.
    ReliableUnordered,
    /// Never resent; a message older than one already delivered is dropped.
    UnreliableSequenced,
    /// Never resent; delivered at most once, as it arrives.
    Unreliable,
}

impl ChannelKind {
    /// True for the kinds that resend until acknowledged.
    pub fn is_reliable(self) -> bool {
        matches!(
            self,
            ChannelKind::ReliableOrdered | ChannelKind::ReliableUnordered
        )
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ChannelKind::ReliableOrdered => 0,
            ChannelKind::ReliableUnordered => 1,
            ChannelKind::UnreliableSequenced => 2,
            ChannelKind::Unreliable => 3,
        }
    }
}

/// One channel of a connection; both ends configure the same list.
///
/// # Examples
///
/// ```
/// use keel_rudp::{ChannelConfig, ChannelKind};
///
/// let chat = ChannelConfig::new(ChannelKind::ReliableOrdered);
/// let map = ChannelConfig::new(ChannelKind::ReliableOrdered).bulk().with_priority(200);
/// assert!(map.bulk && !chat.bulk);
/// assert!(map.priority > chat.priority); // sent after chat when both wait
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelConfig {
    /// Delivery mode.
    pub kind: ChannelKind,
    /// Lower goes first: when several channels have data for a packet, the
    /// one with the lowest priority value fills it first (strict priority;
    /// equal priorities go by channel index). Default 100.
    pub priority: u8,
    /// Bulk channels are held back by congestion control and the pacer;
    /// the others (a game's small, latency-sensitive traffic) are not, and
    /// their small reliable messages get redundancy. Default false.
    pub bulk: bool,
}

impl ChannelConfig {
    /// A channel of `kind`, priority 100, not bulk.
    pub const fn new(kind: ChannelKind) -> Self {
        ChannelConfig {
            kind,
            priority: 100,
            bulk: false,
        }
    }

    /// The same with `priority` (lower goes first).
    pub const fn with_priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// The same, marked bulk (congestion-controlled and paced).
    pub const fn bulk(mut self) -> Self {
        self.bulk = true;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkState {
    Unsent,
    Sent { last_pn: u64 },
    Lost,
    Acked,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk {
    pub offset: u32,
    pub len: u32,
    pub state: ChunkState,
}

/// A message waiting to be sent or acknowledged.
#[derive(Debug, Default)]
pub(crate) struct OutMsg {
    pub seq: u64,
    pub data: Vec<u8>,
    pub chunks: Vec<Chunk>,
    pub unacked: u32,
    pub copies: u8,
    /// Its first transmission was lost while another copy was in flight:
    /// if that copy arrives, redundancy saved a resend.
    pub first_lost: bool,
}

/// The sending half of a channel.
#[derive(Debug)]
pub(crate) struct SendChannel {
    pub cfg: ChannelConfig,
    next_seq: u64,
    /// `msgs[i]` is message `base + i`; `None` once fully acknowledged.
    pub msgs: VecDeque<Option<OutMsg>>,
    base: u64,
    /// The first message with an unsent chunk, and that chunk.
    next_unsent: u64,
    next_chunk: u32,
    pub retransmit: VecDeque<(u64, u32)>,
    pub queued_bytes: usize,
}

impl SendChannel {
    pub fn new(cfg: ChannelConfig) -> Self {
        SendChannel {
            cfg,
            next_seq: 0,
            msgs: VecDeque::new(),
            base: 0,
            next_unsent: 0,
            next_chunk: 0,
            retransmit: VecDeque::new(),
            queued_bytes: 0,
        }
    }

    /// Queues a message cut into chunks of at most `chunk_size` bytes;
    /// returns its sequence number.
    pub fn push(&mut self, data: &[u8], chunk_size: usize, free: &mut Vec<OutMsg>) -> u64 {
        let mut m = free.pop().unwrap_or_default();
        m.seq = self.next_seq;
        m.data.clear();
        m.data.extend_from_slice(data);
        m.chunks.clear();
        let mut off = 0;
        loop {
            let len = (data.len() - off).min(chunk_size);
            m.chunks.push(Chunk {
                offset: off as u32,
                len: len as u32,
                state: ChunkState::Unsent,
            });
            off += len;
            if off >= data.len() {
                break;
            }
        }
        m.unacked = m.chunks.len() as u32;
        m.copies = 0;
        m.first_lost = false;
        if self.msgs.is_empty() {
            self.base = self.next_seq;
        }
        self.msgs.push_back(Some(m));
        self.queued_bytes += data.len();
        self.next_seq += 1;
        self.next_seq - 1
    }

    pub fn msg_mut(&mut self, seq: u64) -> Option<&mut OutMsg> {
        let idx = seq.checked_sub(self.base)?;
        self.msgs.get_mut(usize::try_from(idx).ok()?)?.as_mut()
    }

    /// True when a chunk was never sent or waits for retransmission.
    pub fn has_sendable(&self) -> bool {
        !self.retransmit.is_empty() || self.has_unsent()
    }

    pub fn has_unsent(&self) -> bool {
        self.next_unsent < self.next_seq
    }

    /// The next never-sent chunk: `(seq, chunk index)`.
    pub fn peek_unsent(&self) -> Option<(u64, u32)> {
        self.has_unsent()
            .then_some((self.next_unsent, self.next_chunk))
    }

    /// Marks the chunk from [`SendChannel::peek_unsent`] sent in `pn`; for
    /// an unreliable channel a message whose last chunk went is freed.
    pub fn advance_unsent(&mut self, pn: u64, free: &mut Vec<OutMsg>) {
        let (seq, chunk) = (self.next_unsent, self.next_chunk);
        let reliable = self.cfg.kind.is_reliable();
        let Some(m) = self.msg_mut(seq) else { return };
        m.chunks[chunk as usize].state = ChunkState::Sent { last_pn: pn };
        m.copies = 1;
        let done = chunk as usize + 1 == m.chunks.len();
        if done {
            self.next_unsent += 1;
            self.next_chunk = 0;
            if !reliable {
                // Unreliable messages are sent in order: this is the front.
                self.release(seq, free);
            }
        } else {
            self.next_chunk += 1;
        }
    }

    fn release(&mut self, seq: u64, free: &mut Vec<OutMsg>) {
        let Some(idx) = seq.checked_sub(self.base) else {
            return;
        };
        if let Some(slot) = self.msgs.get_mut(idx as usize) {
            if let Some(m) = slot.take() {
                self.queued_bytes -= m.data.len();
                if m.data.capacity() <= 64 * 1024 {
                    free.push(m);
                }
            }
        }
        while let Some(None) = self.msgs.front() {
            self.msgs.pop_front();
            self.base += 1;
        }
    }

    /// A packet carrying the chunk was acknowledged.
    /// Returns true when this completes a message whose first
    /// transmission was lost and that no resend was needed for.
    pub fn on_acked(&mut self, seq: u64, chunk: u32, free: &mut Vec<OutMsg>) -> bool {
        let Some(m) = self.msg_mut(seq) else {
            return false;
        };
        let Some(c) = m.chunks.get_mut(chunk as usize) else {
            return false;
        };
        if c.state == ChunkState::Acked {
            return false;
        }
        c.state = ChunkState::Acked;
        m.unacked -= 1;
        let recovered = m.unacked == 0 && m.first_lost;
        if m.unacked == 0 {
            self.release(seq, free);
        }
        recovered
    }

    /// Packet `pn` carrying the chunk was lost: queue the chunk again
    /// unless a later copy is still in flight.
    /// `first`: the packet carried the chunk's first transmission.
    /// Returns true when the message had already been acknowledged through
    /// another copy (redundancy's or a probe's): nothing to resend, a loss
    /// recovered. When another copy is still in flight,
    /// [`SendChannel::on_acked`] tells later.
    pub fn on_lost(&mut self, seq: u64, chunk: u32, pn: u64, first: bool) -> bool {
        let Some(m) = self.msg_mut(seq) else {
            return first;
        };
        let single = m.chunks.len() == 1;
        let Some(c) = m.chunks.get_mut(chunk as usize) else {
            return false;
        };
        match c.state {
            ChunkState::Sent { last_pn } if last_pn == pn => {
                // The last copy is gone: a resend, not a recovery.
                c.state = ChunkState::Lost;
                m.first_lost = false;
                self.retransmit.push_back((seq, chunk));
            }
            ChunkState::Sent { .. } if first && single => m.first_lost = true,
            _ => {}
        }
        false
    }
}

/// What became of an incoming message frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvOutcome {
    /// Taken (maybe delivered, maybe buffered).
    Accepted,
    /// Already delivered or buffered.
    Duplicate,
    /// Older than a delivered message on a sequenced channel.
    Stale,
    /// No memory for it under the connection's cap; the packet must not be
    /// acknowledged so the sender resends it.
    Refused,
    /// Contradicts what was received before (total length changed).
    Invalid,
}

#[derive(Debug)]
struct Partial {
    seq: u64,
    total: u32,
    buf: Vec<u8>,
    /// Received byte ranges, sorted, half-open, merged.
    ranges: Vec<(u32, u32)>,
}

impl Partial {
    fn add(&mut self, offset: u32, payload: &[u8]) {
        let end = offset + payload.len() as u32;
        self.buf[offset as usize..end as usize].copy_from_slice(payload);
        let (mut lo, mut hi) = (offset, end);
        self.ranges.retain(|&(a, b)| {
            if b < lo || a > hi {
                true
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
                false
            }
        });
        let idx = self.ranges.partition_point(|&(a, _)| a < lo);
        self.ranges.insert(idx, (lo, hi));
    }

    fn complete(&self) -> bool {
        self.ranges.len() == 1 && self.ranges[0] == (0, self.total)
    }
}

/// Partial messages kept per unreliable channel; older ones are evicted.
const MAX_UNRELIABLE_PARTIALS: usize = 4;
/// How far ahead of the next expected message an ordered channel buffers.
pub(crate) const MAX_ORDER_WINDOW: u64 = 1 << 16;

/// The receiving half of a channel.
#[derive(Debug)]
pub(crate) struct RecvChannel {
    kind: ChannelKind,
    next_expected: u64,
    pending: VecDeque<Option<Vec<u8>>>,
    delivered: RangeSet,
    last_delivered: Option<u64>,
    partials: Vec<Partial>,
    /// Bytes held in partials and pending messages.
    pub buffered: usize,
    pub evicted: u64,
}

/// Limits and shared state an incoming frame is checked against.
pub(crate) struct RecvCtx<'a> {
    pub pool: &'a mut BufPool,
    /// Bytes buffered by the whole connection, and its cap.
    pub conn_buffered: usize,
    pub cap: usize,
    pub deliver: &'a mut dyn FnMut(Vec<u8>),
}

impl RecvChannel {
    pub fn new(kind: ChannelKind) -> Self {
        RecvChannel {
            kind,
            next_expected: 0,
            pending: VecDeque::new(),
            delivered: RangeSet::new(usize::MAX),
            last_delivered: None,
            partials: Vec::new(),
            buffered: 0,
            evicted: 0,
        }
    }

    fn is_done(&self, seq: u64) -> bool {
        match self.kind {
            ChannelKind::ReliableOrdered => {
                seq < self.next_expected
                    || self
                        .pending
                        .get((seq - self.next_expected) as usize)
                        .is_some_and(|s| s.is_some())
            }
            ChannelKind::ReliableUnordered => self.delivered.contains(seq),
            ChannelKind::UnreliableSequenced => self.last_delivered.is_some_and(|l| seq <= l),
            ChannelKind::Unreliable => false,
        }
    }

    /// A MESSAGE (offset 0, whole) or FRAGMENT frame arrived.
    pub fn on_frame(
        &mut self,
        seq: u64,
        total: u32,
        offset: u32,
        payload: &[u8],
        cx: &mut RecvCtx<'_>,
    ) -> RecvOutcome {
        if self.is_done(seq) {
            return if self.kind == ChannelKind::UnreliableSequenced {
                RecvOutcome::Stale
            } else {
                RecvOutcome::Duplicate
            };
        }
        let ordered = self.kind == ChannelKind::ReliableOrdered;
        if ordered && seq - self.next_expected >= MAX_ORDER_WINDOW {
            return RecvOutcome::Refused;
        }
        // The next expected message of an ordered channel is always taken:
        // it unblocks the channel and frees memory, so the cap cannot
        // deadlock the connection.
        let exempt = ordered && seq == self.next_expected;
        if offset == 0 && payload.len() == total as usize {
            if let Some(p) = self.partials.iter().position(|p| p.seq == seq) {
                if self.partials[p].total != total {
                    return RecvOutcome::Invalid;
                }
                let p = self.partials.swap_remove(p);
                self.buffered -= p.total as usize;
                cx.pool.give(p.buf);
            }
            if ordered && !exempt && cx.conn_buffered + payload.len() > cx.cap {
                return RecvOutcome::Refused;
            }
            let mut buf = cx.pool.take(payload.len());
            buf.extend_from_slice(payload);
            self.complete(seq, buf, cx);
            return RecvOutcome::Accepted;
        }
        let idx = match self.partials.iter().position(|p| p.seq == seq) {
            Some(i) => {
                if self.partials[i].total != total {
                    return RecvOutcome::Invalid;
                }
                i
            }
            None => {
                if !exempt && cx.conn_buffered + total as usize > cx.cap {
                    return RecvOutcome::Refused;
                }
                if !self.kind.is_reliable() && self.partials.len() >= MAX_UNRELIABLE_PARTIALS {
                    let oldest = (0..self.partials.len())
                        .min_by_key(|&i| self.partials[i].seq)
                        .unwrap_or(0);
                    if self.partials[oldest].seq > seq {
                        return RecvOutcome::Stale;
                    }
                    let p = self.partials.swap_remove(oldest);
                    self.buffered -= p.total as usize;
                    self.evicted += 1;
                    cx.pool.give(p.buf);
                }
                let mut buf = cx.pool.take(total as usize);
                buf.resize(total as usize, 0);
                self.buffered += total as usize;
                self.partials.push(Partial {
                    seq,
                    total,
                    buf,
                    ranges: Vec::new(),
                });
                self.partials.len() - 1
            }
        };
        self.partials[idx].add(offset, payload);
        if self.partials[idx].complete() {
            let p = self.partials.swap_remove(idx);
            self.buffered -= p.total as usize;
            self.complete(seq, p.buf, cx);
        }
        RecvOutcome::Accepted
    }

    fn complete(&mut self, seq: u64, buf: Vec<u8>, cx: &mut RecvCtx<'_>) {
        match self.kind {
            ChannelKind::ReliableOrdered => {
                if seq != self.next_expected {
                    let i = (seq - self.next_expected) as usize;
                    if self.pending.len() <= i {
                        self.pending.resize_with(i + 1, || None);
                    }
                    self.buffered += buf.len();
                    self.pending[i] = Some(buf);
                    return;
                }
                (cx.deliver)(buf);
                self.next_expected += 1;
                self.pending.pop_front();
                while let Some(Some(_)) = self.pending.front() {
                    if let Some(Some(b)) = self.pending.pop_front() {
                        self.buffered -= b.len();
                        (cx.deliver)(b);
                    }
                    self.next_expected += 1;
                }
            }
            ChannelKind::ReliableUnordered => {
                self.delivered.insert(seq);
                (cx.deliver)(buf);
            }
            ChannelKind::UnreliableSequenced => {
                self.last_delivered = Some(seq);
                // Partials older than what was just delivered can never be.
                let mut i = 0;
                while i < self.partials.len() {
                    if self.partials[i].seq < seq {
                        let p = self.partials.swap_remove(i);
                        self.buffered -= p.total as usize;
                        cx.pool.give(p.buf);
                    } else {
                        i += 1;
                    }
                }
                (cx.deliver)(buf);
            }
            ChannelKind::Unreliable => (cx.deliver)(buf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        ch: &mut RecvChannel,
        frames: &[(u64, u32, u32, &[u8])],
        cap: usize,
    ) -> (Vec<RecvOutcome>, Vec<Vec<u8>>) {
        let mut pool = BufPool::default();
        let mut got = Vec::new();
        let mut outcomes = Vec::new();
        for &(seq, total, off, p) in frames {
            let buffered = ch.buffered;
            let mut deliver = |b: Vec<u8>| got.push(b);
            let mut cx = RecvCtx {
                pool: &mut pool,
                conn_buffered: buffered,
                cap,
                deliver: &mut deliver,
            };
            outcomes.push(ch.on_frame(seq, total, off, p, &mut cx));
        }
        (outcomes, got)
    }

    #[test]
    fn ordered_holds_back_until_the_gap_fills() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableOrdered);
        let (o, got) = run(
            &mut ch,
            &[
                (1, 1, 0, b"b"),
                (2, 1, 0, b"c"),
                (1, 1, 0, b"b"),
                (0, 1, 0, b"a"),
            ],
            1 << 20,
        );
        use RecvOutcome::*;
        assert_eq!(o, [Accepted, Accepted, Duplicate, Accepted]);
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(ch.buffered, 0);
    }

    #[test]
    fn fragments_reassemble_in_any_order_and_cut() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableUnordered);
        let (o, got) = run(
            &mut ch,
            &[
                (0, 10, 6, b"ghij"),
                (0, 10, 0, b"abc"),
                (0, 10, 2, b"cdef"),
                (0, 10, 0, b"ab"),
                (0, 11, 0, b"x"),
            ],
            1 << 20,
        );
        assert_eq!(o[..3], [RecvOutcome::Accepted; 3]);
        assert_eq!(o[3..], [RecvOutcome::Duplicate, RecvOutcome::Duplicate]);
        assert_eq!(got, [b"abcdefghij".to_vec()]);
    }

    #[test]
    fn sequenced_drops_older_messages() {
        let mut ch = RecvChannel::new(ChannelKind::UnreliableSequenced);
        let (o, got) = run(
            &mut ch,
            &[
                (5, 1, 0, b"5"),
                (3, 1, 0, b"3"),
                (6, 1, 0, b"6"),
                (6, 1, 0, b"6"),
            ],
            1 << 20,
        );
        use RecvOutcome::*;
        assert_eq!(o, [Accepted, Stale, Accepted, Stale]);
        assert_eq!(got, [b"5".to_vec(), b"6".to_vec()]);
    }

    #[test]
    fn the_memory_cap_refuses_but_never_blocks_the_next_ordered_message() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableOrdered);
        let (o, got) = run(
            &mut ch,
            &[
                (1, 100, 0, &[1; 10]),
                (0, 100, 0, &[0; 10]),
                (0, 100, 10, &[0; 90]),
            ],
            50,
        );
        use RecvOutcome::*;
        assert_eq!(o, [Refused, Accepted, Accepted]);
        assert_eq!(got.len(), 1);
        assert_eq!(ch.buffered, 0);
    }

    #[test]
    fn send_side_frees_messages_when_every_chunk_is_acked() {
        let mut free = Vec::new();
        let mut s = SendChannel::new(ChannelConfig::new(ChannelKind::ReliableOrdered));
        assert_eq!(s.push(&[7; 25], 10, &mut free), 0);
        assert_eq!(s.msg_mut(0).unwrap().chunks.len(), 3);
        for pn in 0..3 {
            assert_eq!(s.peek_unsent(), Some((0, pn as u32)));
            s.advance_unsent(pn, &mut free);
        }
        assert!(!s.has_sendable());
        s.on_lost(0, 1, 1, true);
        assert_eq!(s.retransmit.front(), Some(&(0, 1)));
        s.on_lost(0, 2, 99, true); // not the packet that carries it now
        assert_eq!(s.retransmit.len(), 1);
        for c in 0..3 {
            s.on_acked(0, c, &mut free);
        }
        assert_eq!(s.queued_bytes, 0);
        assert!(s.msgs.is_empty());
        assert_eq!(free.len(), 1, "the message's buffers are kept for reuse");
    }
}
