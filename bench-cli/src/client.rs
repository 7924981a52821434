//! One benchmark client: a closed-loop window of messages over a keel-udp
//! [`Client`](keel_udp::Client), every echo checked byte for byte.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::TimerId;
use keel_udp::{ClientCtx, ClientHandler, DisconnectReason};

use crate::message::{decode_header, encode, verify_fill, Phase};
use crate::stats::RttShards;

/// The run's schedule, shared by every client.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Start of the measured phase (end of the warm-up).
    pub measure_start: Instant,
    /// End of the measured phase: no message is sent after it.
    pub measure_end: Instant,
    /// `--loss-timeout`: an echo not back within this is counted lost and
    /// its slot reused.
    pub loss_timeout: Option<Duration>,
}

/// Counts clients that have nothing in flight after the measured phase.
#[derive(Debug, Default)]
pub struct DrainLatch {
    done: Mutex<(u32, Option<Instant>)>,
    cv: Condvar,
}

impl DrainLatch {
    fn arrive(&self, at: Instant) {
        let mut d = self.done.lock().unwrap_or_else(|p| p.into_inner());
        d.0 += 1;
        d.1 = Some(d.1.map_or(at, |t| t.max(at)));
        self.cv.notify_all();
    }

    /// Waits until `clients` clients drained or `deadline` passes. Returns
    /// the instant the last one drained, if all did.
    pub fn wait(&self, clients: u32, deadline: Instant) -> Option<Instant> {
        let mut d = self.done.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if d.0 >= clients {
                return d.1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            d = self
                .cv
                .wait_timeout(d, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// What one client counted; summed over clients for the report.
#[derive(Clone, Debug, Default)]
pub struct ClientTally {
    /// Measured-phase messages sent.
    pub messages_sent: u64,
    /// Measured-phase echoes received and correct.
    pub messages: u64,
    /// Sends refused by keel (queue full, too large).
    pub send_rejections: u64,
    /// Echoes with wrong size, phase or bytes.
    pub content_errors: u64,
    /// Echoes whose sequence is not above the highest seen in the phase.
    pub order_errors: u64,
    /// Datagrams that are not an outstanding message of this client.
    pub unexpected: u64,
    /// Echoes of messages already given up by `--loss-timeout`.
    pub late_echoes: u64,
    /// Measured-phase messages given up (loss timeout) or outstanding at
    /// the end (arknet: anything outstanding after the drain is lost). Each
    /// was counted in `messages_sent` when it was sent, so `lost <=
    /// messages_sent` whatever the window.
    pub lost: u64,
    /// Warm-up messages lost the same way: counted apart, against
    /// `warmup_sent` (and in `warmup_errors`, as arknet counts a warm-up
    /// phase's lost messages among its errors), never in `lost`.
    pub warmup_lost: u64,
    /// Disconnect events (e.g. ICMP port unreachable).
    pub disconnects: u64,
    /// Why the first of them happened, so the report can say it (e.g.
    /// [`DisconnectReason::Refused`]: nothing listens at the server's
    /// address).
    pub disconnect_reason: Option<DisconnectReason>,
    /// Warm-up messages sent and completed.
    pub warmup_sent: u64,
    /// Warm-up echoes received and correct.
    pub warmup_done: u64,
    /// Content, order and send errors during the warm-up, and its lost
    /// messages (`warmup_lost`).
    pub warmup_errors: u64,
}

impl ClientTally {
    /// One message of `phase` lost: a measured one in `lost` (it is in
    /// `messages_sent`), a warm-up one in `warmup_lost` and `warmup_errors`
    /// (it is in `warmup_sent`).
    fn count_lost(&mut self, phase: Phase) {
        match phase {
            Phase::Measured => self.lost += 1,
            Phase::Warmup => {
                self.warmup_lost += 1;
                self.warmup_errors += 1;
            }
        }
    }

    /// Adds another client's counts.
    pub fn add(&mut self, o: &ClientTally) {
        self.messages_sent += o.messages_sent;
        self.messages += o.messages;
        self.send_rejections += o.send_rejections;
        self.content_errors += o.content_errors;
        self.order_errors += o.order_errors;
        self.unexpected += o.unexpected;
        self.late_echoes += o.late_echoes;
        self.lost += o.lost;
        self.warmup_lost += o.warmup_lost;
        self.disconnects += o.disconnects;
        if self.disconnect_reason.is_none() {
            self.disconnect_reason.clone_from(&o.disconnect_reason);
        }
        self.warmup_sent += o.warmup_sent;
        self.warmup_done += o.warmup_done;
        self.warmup_errors += o.warmup_errors;
    }
}

/// Hashes the client's own sequence numbers (not attacker-chosen, so no
/// need for SipHash's cost): a Fibonacci multiply. Only the loss path uses
/// it (the given-up set); echoes find their message by slot index.
#[derive(Default)]
pub struct SeqHasher(u64);

impl Hasher for SeqHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type SeqSet = HashSet<u64, BuildHasherDefault<SeqHasher>>;

/// Most given-up sequence numbers remembered, so memory stays bounded on a
/// very lossy path; a late echo beyond that counts as unexpected.
const GIVEN_UP_LIMIT: usize = 1 << 20;

/// Largest window x payload (bytes) for which a client keeps a copy of
/// every message in flight and checks each echo against it with one
/// `memcmp`; above it the client keeps one buffer and recomputes the fill
/// ([`verify_fill`]). 1 MiB per client: 16 clients at window 1 and 1024 B
/// keep 1 KiB each.
const COPY_LIMIT: usize = 1 << 20;

/// One of a client's `window` slots: a message in flight, or free.
#[derive(Clone, Copy)]
struct Slot {
    /// The message's sequence (`seq % window` is this slot's index).
    seq: u64,
    /// When its send was submitted (see [`BenchClient`] on the clock).
    sent_at: Instant,
    phase: Phase,
    busy: bool,
}

/// The sequence of the `n`-th message a client sends, from slot `slot` of
/// `window`: `n * window + slot`. Sequences rise with every send (the
/// order check needs that) and an echo's slot is `seq % window`, so an
/// echo finds its message by index, never by hashing.
fn slot_seq(n: u64, window: u32, slot: u32) -> u64 {
    n * u64::from(window) + u64::from(slot)
}

/// The client handler.
///
/// Its messages in flight sit in `window` indexed slots (an echo's slot is
/// its sequence modulo the window, see `slot_seq`): no hashing per echo.
/// Up to `COPY_LIMIT` (1 MiB) of window, each slot keeps the bytes it sent
/// and an echo is checked against them with one `memcmp` (every byte, as
/// before; the bytes were made by [`encode`], so a match is also a correct
/// fill); above it one buffer is reused and [`verify_fill`] recomputes the
/// fill.
///
/// The clock is read once per echo: the instant an echo's handler starts
/// ends that echo's RTT and is also the send time of the message that
/// replaces it (sent from the same handler after the check and the
/// encoding, so each RTT includes that handler work, a fraction of a
/// microsecond). `start` reads it once for the whole window.
pub struct BenchClient {
    id: u32,
    window: u32,
    payload: usize,
    /// Per-slot message bytes (`window * payload`) when `copies`, else one
    /// message buffer.
    bufs: Vec<u8>,
    copies: bool,
    schedule: Option<Schedule>,
    /// Messages sent so far (the `n` of [`slot_seq`]).
    sent: u64,
    slots: Vec<Slot>,
    /// Free slot indices.
    free: Vec<u32>,
    /// Busy slots.
    in_flight: usize,
    given_up: SeqSet,
    highest: [Option<u64>; 2],
    /// Measured-phase RTTs (shared by the run's clients, one histogram per
    /// runtime thread).
    rtt: Arc<RttShards>,
    /// RTTs not yet in `rtt`: handed over [`RTT_BATCH`] at a time (one lock
    /// of the shard instead of one per echo) and the rest when the client
    /// reports.
    rtt_pending: Vec<Duration>,
    /// Counts so far.
    pub tally: ClientTally,
    latch: Arc<DrainLatch>,
    drained: bool,
    /// Where the tally goes if the client ends early (its lane, and the
    /// handler with it, are gone by the time the run collects).
    last_words: Arc<Mutex<Option<ClientTally>>>,
    reported: bool,
    loss_timer: Option<TimerId>,
}

/// RTTs a client collects before it records them into the shared
/// histogram.
const RTT_BATCH: usize = 64;

impl BenchClient {
    /// A client with id `id` sending `payload`-byte messages, `window` in
    /// flight.
    pub fn new(
        id: u32,
        payload: usize,
        window: u32,
        latch: Arc<DrainLatch>,
        rtt: Arc<RttShards>,
        last_words: Arc<Mutex<Option<ClientTally>>>,
    ) -> BenchClient {
        let window = window.max(1);
        let copies = (window as usize).saturating_mul(payload) <= COPY_LIMIT;
        let bufs = vec![
            0u8;
            if copies {
                window as usize * payload
            } else {
                payload
            }
        ];
        let now = Instant::now();
        BenchClient {
            id,
            window,
            payload,
            bufs,
            copies,
            schedule: None,
            sent: 0,
            slots: vec![
                Slot {
                    seq: 0,
                    sent_at: now,
                    phase: Phase::Warmup,
                    busy: false,
                };
                window as usize
            ],
            // Popped from the end: slot 0 first.
            free: (0..window).rev().collect(),
            in_flight: 0,
            given_up: SeqSet::default(),
            highest: [None, None],
            rtt,
            rtt_pending: Vec::with_capacity(RTT_BATCH),
            tally: ClientTally::default(),
            latch,
            drained: false,
            last_words,
            reported: false,
            loss_timer: None,
        }
    }

    /// Ends the measured phase at `at` if that is earlier than planned (an
    /// interrupt): no new message after it, and the drain starts.
    pub fn end_at(&mut self, at: Instant) {
        if let Some(s) = &mut self.schedule {
            s.measure_end = s.measure_end.min(at);
        }
        self.check_drained(Instant::now());
    }

    /// Starts the closed loop: `window` messages now, one more per echo.
    pub fn start(&mut self, ctx: &mut ClientCtx<'_>, schedule: Schedule) {
        self.schedule = Some(schedule);
        if let Some(t) = schedule.loss_timeout {
            let every = (t / 4).clamp(Duration::from_millis(1), Duration::from_millis(250));
            self.loss_timer = Some(ctx.timer(Instant::now() + every, Some(every)));
        }
        let now = Instant::now();
        for _ in 0..self.window {
            self.send_next(ctx, now);
        }
        self.check_drained(now);
    }

    /// Where slot `slot`'s message bytes start in `bufs`.
    fn offset(&self, slot: u32) -> usize {
        if self.copies {
            slot as usize * self.payload
        } else {
            0
        }
    }

    /// Sends the next message from a free slot, its send time `now` (the
    /// caller's one clock read).
    fn send_next(&mut self, ctx: &mut ClientCtx<'_>, now: Instant) {
        let Some(s) = self.schedule else { return };
        if now >= s.measure_end {
            return;
        }
        let Some(slot) = self.free.pop() else { return };
        let phase = if now < s.measure_start {
            Phase::Warmup
        } else {
            Phase::Measured
        };
        let seq = slot_seq(self.sent, self.window, slot);
        self.sent += 1;
        let at = self.offset(slot);
        let buf = &mut self.bufs[at..at + self.payload];
        encode(buf, phase, self.id, seq);
        match ctx.send(buf) {
            Ok(()) => {
                self.slots[slot as usize] = Slot {
                    seq,
                    sent_at: now,
                    phase,
                    busy: true,
                };
                self.in_flight += 1;
                match phase {
                    Phase::Measured => self.tally.messages_sent += 1,
                    Phase::Warmup => self.tally.warmup_sent += 1,
                }
            }
            Err(_) => {
                self.free.push(slot);
                match phase {
                    Phase::Measured => self.tally.send_rejections += 1,
                    Phase::Warmup => self.tally.warmup_errors += 1,
                }
            }
        }
    }

    /// Frees slot `slot` (its message was echoed or given up).
    fn release(&mut self, slot: u32) {
        self.slots[slot as usize].busy = false;
        self.in_flight -= 1;
        self.free.push(slot);
    }

    fn error(&mut self, phase: Phase, kind: fn(&mut ClientTally) -> &mut u64) {
        match phase {
            Phase::Measured => *kind(&mut self.tally) += 1,
            Phase::Warmup => self.tally.warmup_errors += 1,
        }
    }

    fn check_drained(&mut self, now: Instant) {
        let Some(s) = self.schedule else { return };
        if !self.drained && now >= s.measure_end && self.in_flight == 0 {
            self.drained = true;
            self.latch.arrive(now);
        }
    }

    /// Ends the run for this client and hands over its tally, once (later
    /// calls return `None`). Its RTTs are in the shared [`RttShards`].
    pub fn report(&mut self) -> Option<ClientTally> {
        if self.reported {
            return None;
        }
        self.reported = true;
        self.finish();
        Some(self.tally.clone())
    }

    /// Ends the run for this client: whatever is still outstanding is lost,
    /// in the phase it was sent in.
    fn finish(&mut self) {
        self.flush_rtts();
        for i in 0..self.window {
            let slot = self.slots[i as usize];
            if slot.busy {
                self.tally.count_lost(slot.phase);
                self.release(i);
            }
        }
        self.schedule = None;
    }

    /// Records the pending RTTs into the shared histogram.
    fn flush_rtts(&mut self) {
        self.rtt.record_all(&self.rtt_pending);
        self.rtt_pending.clear();
    }

    /// The busy slot whose message has sequence `seq`, if any.
    fn slot_of(&self, seq: u64) -> Option<u32> {
        let i = (seq % u64::from(self.window)) as u32;
        let slot = &self.slots[i as usize];
        (slot.busy && slot.seq == seq).then_some(i)
    }
}

impl ClientHandler for BenchClient {
    fn datagram(&mut self, ctx: &mut ClientCtx<'_>, data: &[u8]) {
        // The one clock read of this echo (see `BenchClient`).
        let now = Instant::now();
        let header = match decode_header(data) {
            Ok(h) if h.client == self.id => h,
            _ => {
                self.tally.unexpected += 1;
                return;
            }
        };
        let Some(index) = self.slot_of(header.seq) else {
            if self.given_up.remove(&header.seq) {
                self.tally.late_echoes += 1;
            } else {
                self.tally.unexpected += 1;
            }
            return;
        };
        let Slot { sent_at, phase, .. } = self.slots[index as usize];
        // Size, then every byte: against the bytes sent (header included,
        // so the phase too), or the recomputed fill.
        let intact = data.len() == self.payload
            && if self.copies {
                let at = self.offset(index);
                data == &self.bufs[at..at + self.payload]
            } else {
                header.phase == phase && verify_fill(data, &header)
            };
        let mut good = true;
        if !intact {
            self.error(phase, |t| &mut t.content_errors);
            good = false;
        }
        let highest = self.highest[phase as usize];
        if highest.is_some_and(|h| header.seq <= h) {
            self.error(phase, |t| &mut t.order_errors);
            good = false;
        }
        self.highest[phase as usize] = Some(highest.map_or(header.seq, |h| h.max(header.seq)));
        if good {
            match phase {
                Phase::Measured => {
                    self.tally.messages += 1;
                    self.rtt_pending
                        .push(now.saturating_duration_since(sent_at));
                    if self.rtt_pending.len() >= RTT_BATCH {
                        self.flush_rtts();
                    }
                }
                Phase::Warmup => self.tally.warmup_done += 1,
            }
        }
        self.release(index);
        self.send_next(ctx, now);
        self.check_drained(now);
    }

    fn timer(&mut self, ctx: &mut ClientCtx<'_>, timer: TimerId) {
        if Some(timer) != self.loss_timer {
            return;
        }
        let Some(limit) = self.schedule.and_then(|s| s.loss_timeout) else {
            return;
        };
        let now = Instant::now();
        let mut expired = 0;
        for i in 0..self.window {
            let slot = self.slots[i as usize];
            if !slot.busy || now.saturating_duration_since(slot.sent_at) < limit {
                continue;
            }
            self.tally.count_lost(slot.phase);
            if self.given_up.len() < GIVEN_UP_LIMIT {
                self.given_up.insert(slot.seq);
            }
            self.release(i);
            expired += 1;
        }
        // Reuse the slots: the run keeps measuring on a lossy path.
        for _ in 0..expired {
            self.send_next(ctx, now);
        }
        self.check_drained(now);
    }

    fn disconnected(&mut self, _ctx: &mut ClientCtx<'_>, reason: DisconnectReason) {
        if reason == DisconnectReason::Closed {
            return; // the run closing it after collecting
        }
        self.tally.disconnects += 1;
        self.tally.disconnect_reason.get_or_insert(reason);
        if let Some(words) = self.report() {
            *self.last_words.lock().unwrap_or_else(|p| p.into_inner()) = Some(words);
        }
        if !self.drained {
            self.drained = true;
            self.latch.arrive(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sequences rise with every send whatever slot it takes, and a
    /// sequence names its slot (`seq % window`), so an echo finds its
    /// message by index.
    #[test]
    fn slot_sequences_rise_and_name_their_slot() {
        for window in [1u32, 2, 3, 16, 1024] {
            let mut last = None;
            // Slots taken in an arbitrary order, as echoes free them.
            for n in 0..5000u64 {
                let slot = ((n * 7919) % u64::from(window)) as u32;
                let seq = slot_seq(n, window, slot);
                assert!(last.is_none_or(|l| seq > l), "window {window}, send {n}");
                assert_eq!(seq % u64::from(window), u64::from(slot));
                last = Some(seq);
            }
        }
    }
}
