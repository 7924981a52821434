//! Channels: per-channel send queues (messages kept as chunks until
//! acknowledged) and receive state (reassembly, ordering, staleness).

use std::collections::{BTreeMap, VecDeque};

use crate::budget::{RecvMem, Refusal};
use crate::pool::BufPool;

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
    pub const fn is_reliable(self) -> bool {
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
/// use keel_rudp_proto::{ChannelConfig, ChannelKind};
///
/// let chat = ChannelConfig::new(ChannelKind::ReliableOrdered);
/// let map = ChannelConfig::new(ChannelKind::ReliableOrdered).bulk().with_priority(200);
/// assert!(map.bulk && !chat.bulk);
/// assert!(map.priority > chat.priority); // sent after chat when both wait
///
/// // Game events of 400 bytes on a lossy link: every packet also carries
/// // the parity of the two messages before its own (about twice the wire
/// // bytes; a loss costs a tick instead of loss detection and a resend).
/// let events = ChannelConfig::new(ChannelKind::ReliableOrdered).with_redundancy(4);
/// assert_eq!(events.redundancy, 4);
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
    /// The latency/overhead knob of a reliable, non-bulk channel, a level
    /// from 0 to [`MAX_REDUNDANCY`] (default [`DEFAULT_REDUNDANCY`]): what
    /// rides in the next packets besides each message, to repair a loss
    /// without waiting for loss detection and a resend. Two tools: a
    /// *copy* (the MESSAGE frame again, a whole payload of wire bytes) and
    /// a *parity* (a PARITY frame: the XOR of the `span` messages before
    /// the one a packet carries, about one payload of wire bytes, which
    /// repairs one lost message among them; sent in every `interval`-th
    /// packet, so each message costs `1 / interval` payloads). Unreliable
    /// and bulk channels send neither (they accept 0 or the default, which
    /// does nothing there). Only whole messages (those that fit in one
    /// packet) get copies or parity. From the least wire bytes to the
    /// most (at 10 % loss each way, see docs/performance/rudp.md):
    ///
    #[doc = include_str!("redundancy_levels.md")]
    ///
    /// Copies and parity are sent only while the connection's measured
    /// packet loss is at least [`REDUNDANCY_MIN_LOSS`] (a new connection
    /// starts out assuming loss), so a clean link pays nothing after its
    /// first 64 packets acknowledged without a loss, until a loss. While the measured loss is high (a slower average at
    /// least [`REDUNDANCY_HIGH_LOSS`], until it falls below
    /// [`REDUNDANCY_HIGH_LOSS_END`]) each level but 0 sends its plan for
    /// high loss (the last column): the same level's p99 at 20 % loss
    /// each way then stays near its p99 at 10 %, at more wire bytes.
    /// Only the sender reads it: the two ends may differ (a
    /// receiver always uses the parity it gets, and tells the sender which
    /// messages it repaired, so they are not resent). A packet carrying
    /// several new messages of the channel at once (a burst) is covered
    /// less well: XOR parity rebuilds one lost message, not a lost packet's
    /// several.
    pub redundancy: u8,
}

/// The default [`ChannelConfig::redundancy`].
pub const DEFAULT_REDUNDANCY: u8 = 2;

/// The largest [`ChannelConfig::redundancy`].
pub const MAX_REDUNDANCY: u8 = (LEVELS.len() - 1) as u8;

/// The measured packet loss (a moving average over about the last 64
/// packets judged) below which [`ChannelConfig::redundancy`] sends no
/// copies and no parity: 1 %.
pub const REDUNDANCY_MIN_LOSS: f64 = 0.01;

/// What one level of [`ChannelConfig::redundancy`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// A message resent after a loss rides once more.
    pub(crate) resend_copy: bool,
    /// Extra copies of every message.
    pub(crate) copies: u8,
    /// Parity as `(span, interval)` (`span` 0: none): the packet carrying
    /// new message `n` with `n % interval == 0` also carries the XOR of
    /// messages `n - span .. n` (those the sender still holds).
    pub(crate) parity: (u8, u8),
}

const fn plan(resend_copy: bool, copies: u8, parity: (u8, u8)) -> Plan {
    Plan {
        resend_copy,
        copies,
        parity,
    }
}

/// The levels of [`ChannelConfig::redundancy`], by index (the table in
/// `redundancy_levels.md`). A second parity per packet would not fit
/// beside a 400-byte message and its first parity in a 1,200-byte
/// datagram, so each level has one.
const LEVELS: [Plan; 6] = [
    plan(false, 0, (0, 0)),
    plan(true, 0, (0, 0)),
    plan(true, 0, (3, 3)),
    plan(true, 0, (4, 2)),
    plan(true, 0, (2, 1)),
    plan(true, 1, (2, 1)),
];

/// The levels' plans while the connection's measured loss is high (from
/// [`REDUNDANCY_HIGH_LOSS`] until it falls below
/// [`REDUNDANCY_HIGH_LOSS_END`]): each level but 0 adds a copy of every
/// message, level 5 a second one, so a level's p99 at 20 % loss stays
/// near its p99 at 10 % (the table in `redundancy_levels.md`).
const LEVELS_HIGH: [Plan; 6] = [
    plan(false, 0, (0, 0)),
    plan(true, 1, (0, 0)),
    plan(true, 1, (3, 3)),
    plan(true, 1, (4, 2)),
    plan(true, 1, (2, 1)),
    plan(true, 2, (2, 1)),
];

/// The packet loss above which [`ChannelConfig::redundancy`] sends its
/// level's denser plan for high loss: 13 %. The loss is judged high once
/// a slow average of it (a plain average of the first 512 packets judged,
/// then a moving average over about 512; at least 64 judged) is above
/// this by two standard errors (about 16 % after 512 packets, 19 % after
/// 150) and the usual average (over about 64 packets, the one
/// [`REDUNDANCY_MIN_LOSS`] is compared with) at least
/// [`REDUNDANCY_HIGH_LOSS_END`]; so a link at 10 % loss almost never is,
/// and one at 20 % is within its first few hundred packets.
pub const REDUNDANCY_HIGH_LOSS: f64 = 0.13;

/// The loss is no longer judged high ([`REDUNDANCY_HIGH_LOSS`]) once the
/// usual average falls below this, 12 % (the loss dropped: within a few
/// dozen packets), or the slow one below 14 %.
pub const REDUNDANCY_HIGH_LOSS_END: f64 = 0.12;

impl Plan {
    /// The plan of `level` (clamped to [`MAX_REDUNDANCY`]); `high`: while
    /// the connection's loss is high ([`REDUNDANCY_HIGH_LOSS`]).
    pub(crate) fn of(level: u8, high: bool) -> Plan {
        let table = if high { &LEVELS_HIGH } else { &LEVELS };
        table[usize::from(level.min(MAX_REDUNDANCY))]
    }

    /// Extra copies message `seq` gets (`resent`: after a loss).
    pub(crate) fn extra_copies(&self, resent: bool) -> u8 {
        self.copies.max(u8::from(resent && self.resend_copy))
    }
}

impl ChannelConfig {
    /// A channel of `kind`, priority 100, not bulk, redundancy
    /// [`DEFAULT_REDUNDANCY`] if reliable (0 if not).
    pub const fn new(kind: ChannelKind) -> Self {
        ChannelConfig {
            kind,
            priority: 100,
            bulk: false,
            redundancy: if kind.is_reliable() {
                DEFAULT_REDUNDANCY
            } else {
                0
            },
        }
    }

    /// The same with redundancy `level` ([`ChannelConfig::redundancy`], 0
    /// to [`MAX_REDUNDANCY`]; checked by
    /// [`Config::validate`](crate::Config::validate)).
    pub const fn with_redundancy(mut self, level: u8) -> Self {
        self.redundancy = level;
        self
    }

    /// The same with `priority` (lower goes first).
    pub const fn with_priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// The same, marked bulk (congestion-controlled and paced; no channel
    /// redundancy).
    pub const fn bulk(mut self) -> Self {
        self.bulk = true;
        self.redundancy = 0;
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
    /// Resent after a loss (channel redundancy gives it copies again).
    pub resent: bool,
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
    /// What those messages count for in the send budget
    /// ([`send_cost`](crate::budget::send_cost)).
    pub queued_cost: usize,
}

impl SendChannel {
    pub(crate) fn new(cfg: ChannelConfig) -> Self {
        SendChannel {
            cfg,
            next_seq: 0,
            msgs: VecDeque::new(),
            base: 0,
            next_unsent: 0,
            next_chunk: 0,
            retransmit: VecDeque::new(),
            queued_bytes: 0,
            queued_cost: 0,
        }
    }

    /// Prefetches the oldest message's slot and, once that is loaded, what
    /// it points to (its chunk states): what an acknowledgement of it
    /// reads.
    pub(crate) fn prefetch_oldest(&self) {
        if let Some(slot) = self.msgs.front() {
            crate::sys::prefetch_lines(slot);
            if let Some(m) = slot {
                crate::sys::prefetch(m.chunks.as_ptr());
            }
        }
    }

    /// Queues a message cut into chunks of at most `chunk_size` bytes;
    /// returns its sequence number.
    pub(crate) fn push(&mut self, data: &[u8], chunk_size: usize, free: &mut Vec<OutMsg>) -> u64 {
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
        m.resent = false;
        m.first_lost = false;
        if self.msgs.is_empty() {
            self.base = self.next_seq;
        }
        self.msgs.push_back(Some(m));
        self.queued_bytes += data.len();
        self.queued_cost += crate::budget::send_cost(data.len());
        self.next_seq += 1;
        self.next_seq - 1
    }

    pub(crate) fn msg_mut(&mut self, seq: u64) -> Option<&mut OutMsg> {
        let idx = seq.checked_sub(self.base)?;
        self.msgs.get_mut(usize::try_from(idx).ok()?)?.as_mut()
    }

    /// True when a chunk was never sent or waits for retransmission.
    pub(crate) fn has_sendable(&self) -> bool {
        !self.retransmit.is_empty() || self.has_unsent()
    }

    pub(crate) fn has_unsent(&self) -> bool {
        self.next_unsent < self.next_seq
    }

    /// The next never-sent chunk: `(seq, chunk index)`.
    pub(crate) fn peek_unsent(&self) -> Option<(u64, u32)> {
        self.has_unsent()
            .then_some((self.next_unsent, self.next_chunk))
    }

    /// Marks the chunk from [`SendChannel::peek_unsent`] sent in `pn`; for
    /// an unreliable channel a message whose last chunk went is freed.
    pub(crate) fn advance_unsent(&mut self, pn: u64, free: &mut Vec<OutMsg>) {
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
                self.queued_cost -= crate::budget::send_cost(m.data.len());
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
    pub(crate) fn on_acked(&mut self, seq: u64, chunk: u32, free: &mut Vec<OutMsg>) -> bool {
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
    pub(crate) fn on_lost(&mut self, seq: u64, chunk: u32, pn: u64, first: bool) -> bool {
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
    /// Not taken (no memory under the connection's cap or the endpoint's
    /// budget, or too far ahead of the channel's window); the packet must
    /// not be acknowledged so the sender resends it.
    Refused(Refusal),
    /// Contradicts what was received before (total length changed), or a
    /// fragment no sender cuts (a sliver of new bytes left open on both
    /// sides).
    Invalid,
}

/// Partial messages kept per unreliable channel; older ones are evicted.
const MAX_UNRELIABLE_PARTIALS: usize = 4;
/// How far ahead of the next expected message an ordered channel buffers.
pub(crate) const MAX_ORDER_WINDOW: u64 = 1 << 16;
/// How far ahead of its lowest undelivered message a reliable-unordered
/// channel takes messages: the bits of its de-duplication window. A
/// message further ahead is refused unacknowledged (the sender resends it
/// once the window moved).
pub(crate) const UNORDERED_WINDOW: u64 = 4096;
const WINDOW_WORDS: usize = (UNORDERED_WINDOW / 64) as usize;
/// Bytes counted for an unordered channel's window while messages above
/// its floor are delivered (the bitmap and its box).
pub(crate) const WINDOW_BYTES: usize = WINDOW_WORDS * 8 + 32;
/// The fewest bytes a fragment frame must carry to open a partial
/// message, and per sliver it leaves: new bytes under this, not
/// contiguous with what was received on one side, that do not extend the
/// received prefix or end the message. A sender cuts messages into chunks
/// of at least 1,088 bytes (the smallest datagram, 1,200, less overheads)
/// except the last, so its frames always pass, however other cuts left
/// the bytes around them; and memory per received byte stays under 2 (a
/// piece's bookkeeping is paid for by the bytes that came with it;
/// bytes filling a hole exactly are bounded by the pieces that made the
/// holes). A frame breaking this is invalid; a message's first frame
/// under it is refused (the sender resends it after the others).
pub(crate) const MIN_PIECE: usize = 512;
/// Bytes counted per partial message besides its data: the struct (64
/// bytes) and the key in a map leaf of 11 slots that is about half full,
/// the allocator's header of its buffer. Measured (examples/hostile_recv):
/// RSS within a few percent of what is counted.
pub(crate) const PARTIAL_OVERHEAD: usize = 288;
/// Bytes counted per out-of-order piece besides its data (a 28-byte slot
/// of a half-full map leaf, the allocator's header).
pub(crate) const PIECE_OVERHEAD: usize = 96;
/// Bytes counted per whole message held back for ordering besides its
/// data (a 32-byte slot of a half-full map leaf, the allocator's header
/// and rounding).
pub(crate) const HELD_OVERHEAD: usize = 96;

/// The capacity the contiguous prefix of a partial message grows to when
/// it must hold `need` bytes: 1.5x (so reallocation copies are amortized
/// O(1) per byte and the slack stays under half of what was received),
/// never past the message's length.
fn head_target(cap: usize, need: usize, total: usize) -> usize {
    if need <= cap {
        cap
    } else {
        (cap + cap / 2).max(need).min(total.max(need))
    }
}

/// A message received in part. Memory is taken as bytes arrive: the
/// received prefix in one buffer, everything past a gap as pieces keyed
/// by offset (disjoint; overlaps trimmed on the way in). Inserting a
/// frame costs O(log pieces + pieces it overlaps); each byte moves from a
/// piece into the prefix once.
#[derive(Debug)]
struct Partial {
    total: u32,
    /// Bytes `0..head.len()`.
    head: Vec<u8>,
    /// Received bytes past the head, each starting past `head.len()`.
    pieces: BTreeMap<u32, Vec<u8>>,
    /// Bytes counted for it in the connection's [`RecvMem`].
    held: usize,
}

impl Partial {
    /// The new bytes of `offset..end` (ranges not yet received, in order)
    /// into `segs`, and what they cost; `Err` for a sliver no sender cuts.
    fn plan(&self, offset: u32, end: u32, segs: &mut Vec<(u32, u32)>) -> Result<usize, ()> {
        segs.clear();
        let hl = self.head.len() as u32;
        let mut cur = offset.max(hl);
        if cur >= end {
            return Ok(0);
        }
        // Whether what precedes `cur` was received.
        let mut closed = cur == hl;
        if let Some((&k, v)) = self.pieces.range(..=cur).next_back() {
            let e = k + v.len() as u32;
            if e >= cur {
                closed = true;
                cur = e;
            }
        }
        if cur < end {
            for (&k, v) in self.pieces.range(cur..end) {
                if k > cur {
                    segs.push((cur, k));
                }
                cur = k + v.len() as u32;
            }
            if cur < end {
                segs.push((cur, end));
            }
        }
        let mut cost = 0;
        let mut slivers = 0;
        let last = segs.len().saturating_sub(1);
        for (i, &(a, b)) in segs.iter().enumerate() {
            let left = i > 0 || closed;
            let right = i < last || b == self.total || self.pieces.contains_key(&b);
            if a == hl {
                let need = b as usize;
                cost += head_target(self.head.capacity(), need, self.total as usize)
                    - self.head.capacity();
                continue;
            }
            if !((b - a) as usize >= MIN_PIECE || b == self.total || (left && right)) {
                slivers += 1;
            }
            cost += (b - a) as usize + PIECE_OVERHEAD;
        }
        // A sliver (new bytes under MIN_PIECE, open on a side) is paid for
        // by MIN_PIECE bytes of the frame that brings it (at most two a
        // frame: its first and last new bytes).
        if slivers * MIN_PIECE > (end - offset) as usize {
            return Err(());
        }
        Ok(cost)
    }

    /// Stores the planned segments of `payload` (at `offset`), then moves
    /// pieces that became contiguous into the head.
    fn apply(&mut self, offset: u32, payload: &[u8], segs: &[(u32, u32)], mem: &mut RecvMem) {
        for &(a, b) in segs {
            let bytes = &payload[(a - offset) as usize..(b - offset) as usize];
            if a as usize == self.head.len() {
                self.grow_head(b as usize);
                self.head.extend_from_slice(bytes);
            } else {
                self.pieces.insert(a, bytes.to_vec());
            }
        }
        while let Some(e) = self.pieces.first_entry() {
            if *e.key() as usize != self.head.len() {
                break;
            }
            let piece = e.remove();
            let before = self.head.capacity();
            self.grow_head(self.head.len() + piece.len());
            let grown = self.head.capacity() - before;
            mem.force_take(grown);
            self.held += grown;
            self.head.extend_from_slice(&piece);
            let freed = piece.len() + PIECE_OVERHEAD;
            mem.give(freed);
            self.held -= freed;
        }
    }

    fn grow_head(&mut self, need: usize) {
        let target = head_target(self.head.capacity(), need, self.total as usize);
        if target > self.head.capacity() {
            self.head.reserve_exact(target - self.head.len());
        }
    }
}

/// A reliable-unordered channel's record of delivered messages: all
/// below `floor`, and a bitmap of [`UNORDERED_WINDOW`] sequence numbers
/// above it (a ring indexed by `seq % UNORDERED_WINDOW`), allocated only
/// while something above the floor was delivered. O(1) per message
/// (the floor's advance is amortized: each bit is cleared once).
#[derive(Debug, Default)]
struct Window {
    floor: u64,
    bits: Option<Box<[u64; WINDOW_WORDS]>>,
    marked: u32,
}

impl Window {
    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % UNORDERED_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn contains(&self, seq: u64) -> bool {
        if seq < self.floor {
            return true;
        }
        if seq - self.floor >= UNORDERED_WINDOW {
            return false;
        }
        let (w, b) = Window::slot(seq);
        self.bits.as_ref().is_some_and(|bits| bits[w] & b != 0)
    }

    /// Records `seq` (at or above the floor, inside the window; the bitmap
    /// exists unless `seq` is the floor). Returns true when the bitmap
    /// emptied and was freed.
    fn mark(&mut self, seq: u64) -> bool {
        if seq != self.floor {
            if let Some(bits) = self.bits.as_mut() {
                let (w, b) = Window::slot(seq);
                bits[w] |= b;
                self.marked += 1;
            }
            return false;
        }
        self.floor += 1;
        let Some(bits) = self.bits.as_mut() else {
            return false;
        };
        loop {
            let (w, b) = Window::slot(self.floor);
            if bits[w] & b == 0 {
                break;
            }
            bits[w] &= !b;
            self.marked -= 1;
            self.floor += 1;
        }
        if self.marked == 0 {
            self.bits = None;
            return true;
        }
        false
    }
}

const ORDER_WORDS: usize = (MAX_ORDER_WINDOW / 64) as usize;
/// Bytes counted for a reliable-ordered channel's bitmap of held-back
/// messages (kept while it holds back at least [`HELD_BITS_FROM`]).
pub(crate) const HELD_BITS_BYTES: usize = ORDER_WORDS * 8 + 32;
/// Held-back messages from which an ordered channel keeps a bitmap of
/// them too (freed below half of it): 8 KiB against at least 97 KiB
/// counted for the messages.
const HELD_BITS_FROM: usize = 1024;

/// A reliable-ordered channel's whole messages waiting for the ones
/// before them, by sequence number (all in the window past the next
/// expected). Past [`HELD_BITS_FROM`] of them, also a bit per sequence
/// number of the window (a ring), so that telling a duplicate costs one
/// cache line instead of a walk of a large map.
#[derive(Debug, Default)]
struct HeldBack {
    map: BTreeMap<u64, Vec<u8>>,
    bits: Option<Box<[u64; ORDER_WORDS]>>,
}

impl HeldBack {
    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % MAX_ORDER_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn contains(&self, seq: u64) -> bool {
        match &self.bits {
            Some(bits) => {
                let (w, b) = HeldBack::slot(seq);
                bits[w] & b != 0
            }
            None => self.map.contains_key(&seq),
        }
    }

    /// Holds `buf` (not [`HeldBack::contains`]; its bytes already counted).
    fn insert(&mut self, seq: u64, buf: Vec<u8>, mem: &mut RecvMem) {
        self.map.insert(seq, buf);
        if let Some(bits) = &mut self.bits {
            let (w, b) = HeldBack::slot(seq);
            bits[w] |= b;
        } else if self.map.len() >= HELD_BITS_FROM {
            mem.force_take(HELD_BITS_BYTES);
            let mut bits = Box::new([0u64; ORDER_WORDS]);
            for &k in self.map.keys() {
                let (w, b) = HeldBack::slot(k);
                bits[w] |= b;
            }
            self.bits = Some(bits);
        }
    }

    /// Message `seq` if it is the first held.
    fn pop(&mut self, seq: u64, mem: &mut RecvMem) -> Option<Vec<u8>> {
        let e = self.map.first_entry()?;
        if *e.key() != seq {
            return None;
        }
        let buf = e.remove();
        mem.release_message();
        if let Some(bits) = &mut self.bits {
            let (w, b) = HeldBack::slot(seq);
            bits[w] &= !b;
            if self.map.len() < HELD_BITS_FROM / 2 {
                self.bits = None;
                mem.give(HELD_BITS_BYTES);
            }
        }
        Some(buf)
    }
}

/// The receiving half of a channel.
#[derive(Debug)]
pub(crate) struct RecvChannel {
    kind: ChannelKind,
    /// Ordered: the next message to deliver.
    next_expected: u64,
    /// Ordered: whole messages waiting for the ones before them.
    pending: HeldBack,
    /// Unordered: what was delivered.
    window: Window,
    /// Sequenced: the latest delivered.
    last_delivered: Option<u64>,
    partials: BTreeMap<u64, Partial>,
    /// Reused by [`Partial::plan`].
    segs: Vec<(u32, u32)>,
    /// Unreliable partial messages dropped for newer ones.
    pub evicted: u64,
}

/// Limits and shared state an incoming frame is checked against.
pub(crate) struct RecvCtx<'a> {
    pub pool: &'a mut BufPool,
    /// What the whole connection holds, its cap and the endpoint's budget.
    pub mem: &'a mut RecvMem,
    pub deliver: &'a mut dyn FnMut(Vec<u8>),
}

impl RecvChannel {
    pub(crate) fn new(kind: ChannelKind) -> Self {
        RecvChannel {
            kind,
            next_expected: 0,
            pending: HeldBack::default(),
            window: Window::default(),
            last_delivered: None,
            partials: BTreeMap::new(),
            segs: Vec::new(),
            evicted: 0,
        }
    }

    /// The channel's kind.
    pub(crate) fn kind(&self) -> ChannelKind {
        self.kind
    }

    /// True when message `seq` was taken whole (delivered or held back
    /// for ordering): parity cannot be needed for it.
    pub(crate) fn has(&self, seq: u64) -> bool {
        self.is_done(seq)
            || (self.kind == ChannelKind::ReliableOrdered
                && seq > self.next_expected
                && seq - self.next_expected < MAX_ORDER_WINDOW
                && self.pending.contains(seq))
    }

    fn is_done(&self, seq: u64) -> bool {
        match self.kind {
            // Held back (`pending`): checked past the window's check.
            ChannelKind::ReliableOrdered => seq < self.next_expected,
            ChannelKind::ReliableUnordered => self.window.contains(seq),
            ChannelKind::UnreliableSequenced => self.last_delivered.is_some_and(|l| seq <= l),
            ChannelKind::Unreliable => false,
        }
    }

    /// A MESSAGE (offset 0, whole) or FRAGMENT frame arrived. Every step
    /// is O(log n) in what the channel holds, plus the bytes of the frame.
    pub(crate) fn on_frame(
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
        // The next message a reliable channel waits for is always taken
        // (up to the larger exempt cap): it unblocks the channel and frees
        // memory, so the cap cannot deadlock the connection.
        let exempt = match self.kind {
            ChannelKind::ReliableOrdered => {
                if seq - self.next_expected >= MAX_ORDER_WINDOW {
                    return RecvOutcome::Refused(Refusal::Window);
                }
                seq == self.next_expected
            }
            ChannelKind::ReliableUnordered => {
                if seq - self.window.floor >= UNORDERED_WINDOW {
                    return RecvOutcome::Refused(Refusal::Window);
                }
                let exempt = seq == self.window.floor;
                if !exempt && self.window.bits.is_none() {
                    if let Err(e) = cx.mem.take(WINDOW_BYTES, false) {
                        return RecvOutcome::Refused(e);
                    }
                    self.window.bits = Some(Box::new([0; WINDOW_WORDS]));
                }
                exempt
            }
            _ => false,
        };
        let whole = offset == 0 && payload.len() == total as usize;
        if ordered && !exempt && self.pending.contains(seq) {
            return RecvOutcome::Duplicate;
        }
        let known = self.partials.get(&seq).map(|p| p.total);
        if known.is_some_and(|t| t != total) {
            return RecvOutcome::Invalid;
        }
        if whole {
            let held_back = ordered && !exempt;
            if held_back {
                if !cx.mem.hold_message(false) {
                    return RecvOutcome::Refused(Refusal::Cap);
                }
                if let Err(e) = cx.mem.take(payload.len() + HELD_OVERHEAD, false) {
                    cx.mem.release_message();
                    return RecvOutcome::Refused(e);
                }
                // Exact, not pooled: it is counted by its capacity.
                self.pending.insert(seq, payload.to_vec(), cx.mem);
                if let Some(p) = self.partials.remove(&seq) {
                    cx.mem.give(p.held);
                    cx.pool.give(p.head);
                }
            } else {
                if let Some(p) = self.partials.remove(&seq) {
                    cx.mem.give(p.held);
                    cx.pool.give(p.head);
                }
                let mut buf = cx.pool.take(payload.len());
                buf.extend_from_slice(payload);
                self.complete(seq, buf, cx);
            }
            return RecvOutcome::Accepted;
        }
        let is_new = known.is_none();
        if is_new {
            if payload.len() < MIN_PIECE {
                return RecvOutcome::Refused(Refusal::Small);
            }
            if !self.kind.is_reliable() && self.partials.len() >= MAX_UNRELIABLE_PARTIALS {
                if let Some(e) = self.partials.first_entry() {
                    if *e.key() > seq {
                        return RecvOutcome::Stale;
                    }
                    let p = e.remove();
                    cx.mem.give(p.held);
                    self.evicted += 1;
                }
            }
        }
        let end = offset + payload.len() as u32;
        let p = self.partials.entry(seq).or_insert_with(|| Partial {
            total,
            head: Vec::new(),
            pieces: BTreeMap::new(),
            held: 0,
        });
        let cost = match p.plan(offset, end, &mut self.segs) {
            Ok(c) => c + if is_new { PARTIAL_OVERHEAD } else { 0 },
            Err(()) => return RecvOutcome::Invalid,
        };
        if self.segs.is_empty() {
            return RecvOutcome::Duplicate;
        }
        if let Err(e) = cx.mem.take(cost, exempt) {
            if is_new {
                self.partials.remove(&seq);
            }
            return RecvOutcome::Refused(e);
        }
        p.held += cost;
        p.apply(offset, payload, &self.segs, cx.mem);
        if p.head.len() == total as usize {
            if let Some(p) = self.partials.remove(&seq) {
                let held = p.held;
                if ordered && !exempt {
                    // Moves from the partial to the held-back messages:
                    // counted less than before.
                    cx.mem.force_take(p.head.capacity() + HELD_OVERHEAD);
                    cx.mem.hold_message(true);
                    cx.mem.give(held);
                    self.pending.insert(seq, p.head, cx.mem);
                } else {
                    cx.mem.give(held);
                    self.complete(seq, p.head, cx);
                }
            }
        }
        RecvOutcome::Accepted
    }

    /// A whole message `seq` that is delivered now (in order, or on a
    /// channel that does not hold back).
    fn complete(&mut self, seq: u64, buf: Vec<u8>, cx: &mut RecvCtx<'_>) {
        match self.kind {
            ChannelKind::ReliableOrdered => {
                (cx.deliver)(buf);
                self.next_expected += 1;
                while let Some(b) = self.pending.pop(self.next_expected, cx.mem) {
                    cx.mem.give(b.capacity() + HELD_OVERHEAD);
                    (cx.deliver)(b);
                    self.next_expected += 1;
                }
            }
            ChannelKind::ReliableUnordered => {
                if self.window.mark(seq) {
                    cx.mem.give(WINDOW_BYTES);
                }
                (cx.deliver)(buf);
            }
            ChannelKind::UnreliableSequenced => {
                self.last_delivered = Some(seq);
                // Partials older than what was just delivered can never be
                // (at most MAX_UNRELIABLE_PARTIALS).
                let keep = self.partials.split_off(&seq);
                for (_, p) in std::mem::replace(&mut self.partials, keep) {
                    cx.mem.give(p.held);
                    cx.pool.give(p.head);
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
        let mut mem = RecvMem::new(cap, 1 << 20);
        let r = run_mem(ch, frames, &mut mem);
        (r.0, r.1)
    }

    fn run_mem(
        ch: &mut RecvChannel,
        frames: &[(u64, u32, u32, &[u8])],
        mem: &mut RecvMem,
    ) -> (Vec<RecvOutcome>, Vec<Vec<u8>>) {
        let mut pool = BufPool;
        let mut got = Vec::new();
        let mut outcomes = Vec::new();
        for &(seq, total, off, p) in frames {
            let mut deliver = |b: Vec<u8>| got.push(b);
            let mut cx = RecvCtx {
                pool: &mut pool,
                mem: &mut *mem,
                deliver: &mut deliver,
            };
            outcomes.push(ch.on_frame(seq, total, off, p, &mut cx));
        }
        (outcomes, got)
    }

    #[test]
    fn ordered_holds_back_until_the_gap_fills() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableOrdered);
        let mut mem = RecvMem::new(1 << 20, 1 << 20);
        let (o, got) = run_mem(
            &mut ch,
            &[
                (1, 1, 0, b"b"),
                (2, 1, 0, b"c"),
                (1, 1, 0, b"b"),
                (0, 1, 0, b"a"),
            ],
            &mut mem,
        );
        use RecvOutcome::*;
        assert_eq!(o, [Accepted, Accepted, Duplicate, Accepted]);
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(mem.held(), 0);
    }

    #[test]
    fn fragments_reassemble_in_any_order_and_cut() {
        let msg: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let mut ch = RecvChannel::new(ChannelKind::ReliableUnordered);
        let mut mem = RecvMem::new(1 << 20, 1 << 20);
        let (o, got) = run_mem(
            &mut ch,
            &[
                (0, 3000, 1800, &msg[1800..]),
                (0, 3000, 0, &msg[..1000]),
                (0, 3000, 900, &msg[900..1800]), // overlaps the head: trimmed
                (0, 3000, 0, &msg[..900]),
                (0, 3001, 0, &msg[..1]),
            ],
            &mut mem,
        );
        assert_eq!(o[..3], [RecvOutcome::Accepted; 3]);
        assert_eq!(o[3..], [RecvOutcome::Duplicate, RecvOutcome::Duplicate]);
        assert_eq!(got, [msg]);
        assert_eq!(mem.held(), 0);
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
        let mut mem = RecvMem::new(1000, 1 << 20);
        let (o, got) = run_mem(
            &mut ch,
            &[
                (1, 3000, 0, &[1; 1000]),
                (0, 3000, 0, &[0; 1000]),
                (0, 3000, 1000, &[0; 2000]),
            ],
            &mut mem,
        );
        use RecvOutcome::*;
        assert_eq!(o, [Refused(Refusal::Cap), Accepted, Accepted]);
        assert_eq!(got.len(), 1);
        assert_eq!(mem.held(), 0);
    }

    #[test]
    fn a_fragment_header_claiming_a_megabyte_holds_only_what_arrived() {
        // The old code reserved `total` bytes on the first fragment.
        for kind in [ChannelKind::ReliableOrdered, ChannelKind::ReliableUnordered] {
            let mut ch = RecvChannel::new(kind);
            let mut mem = RecvMem::new(4 << 20, 1 << 20);
            let (o, _) = run_mem(
                &mut ch,
                &[(3, 1 << 20, 0, &[7; 640]), (3, 1 << 20, 4096, &[7; 640])],
                &mut mem,
            );
            assert_eq!(o, [RecvOutcome::Accepted; 2]);
            let window = if kind == ChannelKind::ReliableUnordered {
                WINDOW_BYTES
            } else {
                0
            };
            assert!(
                mem.held() - window <= 2 * 1280,
                "{kind:?}: {} bytes held for 1,280 received",
                mem.held()
            );
        }
    }

    #[test]
    fn slivers_cannot_multiply_pieces() {
        // 1-byte fragments at alternating offsets: a sliver left open on
        // both sides is invalid; the first frame of a message under
        // MIN_PIECE is refused; so pieces stay under bytes / MIN_PIECE.
        let mut ch = RecvChannel::new(ChannelKind::ReliableOrdered);
        let mut mem = RecvMem::new(4 << 20, 1 << 20);
        let big = [1u8; MIN_PIECE];
        let mut frames: Vec<(u64, u32, u32, &[u8])> = vec![(5, 1 << 20, 1, b"x")];
        frames.push((5, 1 << 20, 4000, &big));
        for i in 0..2000u32 {
            frames.push((5, 1 << 20, 2 * i, b"x"));
            frames.push((5, 1 << 20, 8000 + 2 * i, b"x"));
        }
        let (o, _) = run_mem(&mut ch, &frames, &mut mem);
        assert_eq!(o[0], RecvOutcome::Refused(Refusal::Small));
        assert_eq!(o[1], RecvOutcome::Accepted);
        let p = &ch.partials[&5];
        assert!(p.pieces.len() <= 2, "{} pieces", p.pieces.len());
        // The in-order slivers extend the head (one byte each).
        assert_eq!(p.head.len(), 1);
        assert!(mem.held() <= 2 * (MIN_PIECE + 8 * 4000));
    }

    #[test]
    fn the_unordered_window_is_bounded_and_freed_when_the_gap_fills() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableUnordered);
        let mut mem = RecvMem::new(4 << 20, 1 << 20);
        let mut frames: Vec<(u64, u32, u32, &[u8])> = (1..UNORDERED_WINDOW)
            .map(|s| (s, 1, 0, &b"m"[..]))
            .collect();
        frames.push((UNORDERED_WINDOW, 1, 0, b"m"));
        frames.push((u64::MAX / 2, 1, 0, b"m"));
        let (o, got) = run_mem(&mut ch, &frames, &mut mem);
        assert_eq!(got.len() as u64, UNORDERED_WINDOW - 1);
        let n = o.len();
        assert_eq!(o[n - 2..], [RecvOutcome::Refused(Refusal::Window); 2]);
        assert_eq!(mem.held(), WINDOW_BYTES, "the old RangeSet grew per gap");
        let (o, _) = run_mem(&mut ch, &[(0, 1, 0, b"m"), (7, 1, 0, b"m")], &mut mem);
        assert_eq!(o, [RecvOutcome::Accepted, RecvOutcome::Duplicate]);
        assert_eq!(ch.window.floor, UNORDERED_WINDOW);
        assert_eq!(mem.held(), 0, "the window's bitmap is freed");
    }

    #[test]
    fn a_far_ordered_message_costs_its_bytes_not_its_distance() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableOrdered);
        let mut mem = RecvMem::new(4 << 20, 1 << 20);
        let (o, _) = run_mem(
            &mut ch,
            &[
                (MAX_ORDER_WINDOW - 1, 1, 0, b"z"),
                (MAX_ORDER_WINDOW, 1, 0, b"z"),
            ],
            &mut mem,
        );
        assert_eq!(
            o,
            [RecvOutcome::Accepted, RecvOutcome::Refused(Refusal::Window)]
        );
        assert_eq!(mem.held(), 1 + HELD_OVERHEAD);
        assert_eq!(ch.pending.map.len(), 1);
    }

    #[test]
    fn many_held_back_messages_keep_a_bitmap_and_give_everything_back() {
        let mut ch = RecvChannel::new(ChannelKind::ReliableOrdered);
        let mut mem = RecvMem::new(4 << 20, 1 << 20);
        let mut frames: Vec<(u64, u32, u32, &[u8])> =
            (1..=2000).map(|s| (s, 1, 0, &b"h"[..])).collect();
        frames.push((1500, 1, 0, b"h"));
        let (o, got) = run_mem(&mut ch, &frames, &mut mem);
        assert!(got.is_empty());
        assert_eq!(o[2000], RecvOutcome::Duplicate);
        assert!(ch.pending.bits.is_some());
        assert_eq!(mem.held(), 2000 * (1 + HELD_OVERHEAD) + HELD_BITS_BYTES);
        let (_, got) = run_mem(&mut ch, &[(0, 1, 0, b"h"), (7, 1, 0, b"h")], &mut mem);
        assert_eq!(got.len(), 2001);
        assert!(ch.pending.bits.is_none());
        assert_eq!(mem.held(), 0);
    }

    #[test]
    fn random_fragments_reassemble_and_give_back_all_memory() {
        // Chunks of a sender's size, in a shuffled order with repeats.
        let msg: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
        let chunk = 1088;
        let mut order: Vec<usize> = (0..msg.len().div_ceil(chunk)).collect();
        let mut x = 12345u64;
        for i in (1..order.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        order.insert(3, order[0]);
        for kind in [
            ChannelKind::ReliableOrdered,
            ChannelKind::ReliableUnordered,
            ChannelKind::Unreliable,
        ] {
            let mut ch = RecvChannel::new(kind);
            let mut mem = RecvMem::new(1 << 20, 1 << 20);
            let frames: Vec<(u64, u32, u32, &[u8])> = order
                .iter()
                .map(|&c| {
                    let end = ((c + 1) * chunk).min(msg.len());
                    (
                        0,
                        msg.len() as u32,
                        (c * chunk) as u32,
                        &msg[c * chunk..end],
                    )
                })
                .collect();
            let (_, got) = run_mem(&mut ch, &frames, &mut mem);
            assert_eq!(got, std::slice::from_ref(&msg), "{kind:?}");
            assert_eq!(mem.held(), 0, "{kind:?}");
        }
    }

    #[test]
    fn held_back_messages_are_counted_per_connection() {
        use crate::budget::MAX_HELD_MESSAGES;
        let mut a = RecvChannel::new(ChannelKind::ReliableOrdered);
        let mut b = RecvChannel::new(ChannelKind::ReliableOrdered);
        let mut mem = RecvMem::new(64 << 20, 1 << 20);
        let half = MAX_HELD_MESSAGES as u64 / 2;
        let frames: Vec<(u64, u32, u32, &[u8])> =
            (1..=half).map(|s| (s, 1, 0, &b"h"[..])).collect();
        run_mem(&mut a, &frames, &mut mem);
        run_mem(&mut b, &frames, &mut mem);
        let (o, _) = run_mem(&mut a, &[(half + 1, 1, 0, b"h")], &mut mem);
        assert_eq!(o, [RecvOutcome::Refused(Refusal::Cap)]);
        // The gap fills: one packet's release is bounded by the count.
        let (_, got) = run_mem(&mut a, &[(0, 1, 0, b"h")], &mut mem);
        assert_eq!(got.len() as u64, half + 1);
        let (o, _) = run_mem(&mut b, &[(half + 1, 1, 0, b"h")], &mut mem);
        assert_eq!(o, [RecvOutcome::Accepted]);
    }

    proptest::proptest! {
        #[test]
        fn reassembly_matches_the_message_and_holds_at_most_twice_what_came(
            len in 1usize..12_000,
            cuts in proptest::collection::vec(512usize..2500, 1..30),
            extra in proptest::collection::vec((0usize..12_000, 1usize..3000), 0..12),
            order in proptest::collection::vec(0u32..1000, 0..50),
            kind in 0u8..3,
        ) {
            let msg: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            // A sender's chunks (at least 512 bytes but the last), other
            // cuts of the same bytes, in a shuffled order with repeats.
            let mut frames: Vec<(usize, usize)> = Vec::new();
            let mut off = 0;
            for c in cuts.iter().cycle() {
                if off >= len {
                    break;
                }
                frames.push((off, (off + c).min(len)));
                off += c;
            }
            let base = frames.clone();
            for &(a, l) in &extra {
                let a = a % len;
                frames.push((a, (a + l).min(len)));
            }
            for (i, &k) in order.iter().enumerate() {
                let n = frames.len();
                frames.swap(i % n, k as usize % n);
            }
            let kind = [
                ChannelKind::ReliableOrdered,
                ChannelKind::ReliableUnordered,
                ChannelKind::Unreliable,
            ][kind as usize];
            let mut ch = RecvChannel::new(kind);
            let mut mem = RecvMem::new(1 << 20, 1 << 20);
            let mut fed = 0;
            let mut got = Vec::new();
            // Then the sender's chunks again, in order: they always complete it.
            for &(a, b) in frames.iter().chain(&base) {
                let f = [(0, len as u32, a as u32, &msg[a..b])];
                let (_, g) = run_mem(&mut ch, &f, &mut mem);
                got.extend(g);
                fed += b - a;
                proptest::prop_assert!(
                    mem.held() <= 2 * fed + PARTIAL_OVERHEAD + 2 * PIECE_OVERHEAD,
                    "{} held for {} bytes", mem.held(), fed
                );
            }
            // Unreliable channels do not de-duplicate (packet numbers do).
            let once = kind != ChannelKind::Unreliable;
            proptest::prop_assert!(got.len() == 1 || (!once && !got.is_empty()));
            proptest::prop_assert!(got.iter().all(|g| *g == msg));
            // (An unreliable channel takes the repeats for a new copy.)
            proptest::prop_assert!(mem.held() == 0 || !once);
        }
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
