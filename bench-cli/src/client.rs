//! One benchmark client: a closed-loop window of messages over a keel-udp
//! [`Client`](keel_udp::Client), every echo checked byte for byte.

use std::collections::{HashMap, HashSet};
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
/// need for SipHash's cost on every echo): a Fibonacci multiply.
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

type SeqMap<V> = HashMap<u64, V, BuildHasherDefault<SeqHasher>>;
type SeqSet = HashSet<u64, BuildHasherDefault<SeqHasher>>;

/// Most given-up sequence numbers remembered, so memory stays bounded on a
/// very lossy path; a late echo beyond that counts as unexpected.
const GIVEN_UP_LIMIT: usize = 1 << 20;

/// The client handler.
pub struct BenchClient {
    id: u32,
    window: u32,
    buf: Vec<u8>,
    schedule: Option<Schedule>,
    next_seq: u64,
    outstanding: SeqMap<(Instant, Phase)>,
    given_up: SeqSet,
    highest: [Option<u64>; 2],
    /// Measured-phase RTTs (shared by the run's clients, one histogram per
    /// runtime thread).
    rtt: Arc<RttShards>,
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
        BenchClient {
            id,
            window,
            buf: vec![0u8; payload],
            schedule: None,
            next_seq: 0,
            outstanding: SeqMap::with_capacity_and_hasher(window as usize * 2, Default::default()),
            given_up: SeqSet::default(),
            highest: [None, None],
            rtt,
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

    fn send_next(&mut self, ctx: &mut ClientCtx<'_>, now: Instant) {
        let Some(s) = self.schedule else { return };
        if now >= s.measure_end {
            return;
        }
        let phase = if now < s.measure_start {
            Phase::Warmup
        } else {
            Phase::Measured
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        encode(&mut self.buf, phase, self.id, seq);
        // RTT runs from just before the send is submitted.
        let sent_at = Instant::now();
        match ctx.send(&self.buf) {
            Ok(()) => {
                self.outstanding.insert(seq, (sent_at, phase));
                match phase {
                    Phase::Measured => self.tally.messages_sent += 1,
                    Phase::Warmup => self.tally.warmup_sent += 1,
                }
            }
            Err(_) => match phase {
                Phase::Measured => self.tally.send_rejections += 1,
                Phase::Warmup => self.tally.warmup_errors += 1,
            },
        }
    }

    fn error(&mut self, phase: Phase, kind: fn(&mut ClientTally) -> &mut u64) {
        match phase {
            Phase::Measured => *kind(&mut self.tally) += 1,
            Phase::Warmup => self.tally.warmup_errors += 1,
        }
    }

    fn check_drained(&mut self, now: Instant) {
        let Some(s) = self.schedule else { return };
        if !self.drained && now >= s.measure_end && self.outstanding.is_empty() {
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
        for (_, (_, phase)) in self.outstanding.drain() {
            self.tally.count_lost(phase);
        }
        self.schedule = None;
    }
}

impl ClientHandler for BenchClient {
    fn datagram(&mut self, ctx: &mut ClientCtx<'_>, data: &[u8]) {
        let now = Instant::now();
        let header = match decode_header(data) {
            Ok(h) if h.client == self.id => h,
            _ => {
                self.tally.unexpected += 1;
                return;
            }
        };
        let Some((sent_at, phase)) = self.outstanding.remove(&header.seq) else {
            if self.given_up.remove(&header.seq) {
                self.tally.late_echoes += 1;
            } else {
                self.tally.unexpected += 1;
            }
            return;
        };
        let mut good = true;
        if header.phase != phase || data.len() != self.buf.len() || !verify_fill(data, &header) {
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
                    self.rtt.record(now.saturating_duration_since(sent_at));
                }
                Phase::Warmup => self.tally.warmup_done += 1,
            }
        }
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
        let given_up = &mut self.given_up;
        let tally = &mut self.tally;
        self.outstanding.retain(|seq, (sent_at, phase)| {
            if now.saturating_duration_since(*sent_at) < limit {
                return true;
            }
            tally.count_lost(*phase);
            if given_up.len() < GIVEN_UP_LIMIT {
                given_up.insert(*seq);
            }
            expired += 1;
            false
        });
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
