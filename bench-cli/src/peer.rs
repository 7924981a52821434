//! What `--protocol rudp` and `--protocol kcp` share: the client's side of
//! the echo ([`Driver`]: what to send when, and the check of every echo),
//! the phases of a run ([`drive`]) and how a tally becomes the report
//! ([`record`]). The transports live in `crate::rudp` and `crate::kcp`.
//!
//! A client keeps `--window` messages in flight (closed loop) or sends
//! `--rate` messages per second whatever comes back (open loop, a game
//! tick). Messages are the UDP mode's (`crate::message`): header,
//! deterministic fill, checked byte for byte on the way back. The main
//! thread ticks every client each millisecond (sends due in open loop;
//! unreliable channels give a message up after [`UNRELIABLE_LOSS_TIMEOUT`])
//! until the measured phase and its drain are over.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::flags::{ChannelChoice, RunConfig};
use crate::loopback::sleep_until;
use crate::message::{decode_header, encode, verify_fill, Phase};
use crate::output::RunReport;
use crate::procstats::{peak_rss_bytes, process_cpu_time};
use crate::stats::Rtt;

/// How long a message on an unreliable channel may go unanswered before it
/// counts as lost and (closed loop) frees its window slot.
pub const UNRELIABLE_LOSS_TIMEOUT: Duration = Duration::from_secs(1);
/// How long every client has to finish its handshake.
pub const HANDSHAKE: Duration = Duration::from_secs(5);
/// Upper bound on collecting tallies and stats after the drain.
pub const COLLECT: Duration = Duration::from_secs(2);
/// How often the main thread ticks the clients.
pub const TICK: Duration = Duration::from_millis(1);

/// When the phases start and end.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Start of the warm-up.
    pub start: Instant,
    /// Start of the measured phase.
    pub measure_start: Instant,
    /// End of the measured phase.
    pub measure_end: Instant,
}

/// One client's counts, added up over the clients at the end.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub messages_sent: u64,
    pub messages: u64,
    pub send_rejections: u64,
    pub content_errors: u64,
    pub order_errors: u64,
    pub unexpected: u64,
    pub late: u64,
    pub lost: u64,
    pub warmup_lost: u64,
    pub warmup_errors: u64,
    pub disconnects: u64,
    pub disconnect_reason: Option<String>,
    /// Message bytes sent, whole run.
    pub sent_bytes: u64,
}

impl Tally {
    /// Adds `o` to this tally.
    pub fn add(&mut self, o: &Tally) {
        self.messages_sent += o.messages_sent;
        self.messages += o.messages;
        self.send_rejections += o.send_rejections;
        self.content_errors += o.content_errors;
        self.order_errors += o.order_errors;
        self.unexpected += o.unexpected;
        self.late += o.late;
        self.lost += o.lost;
        self.warmup_lost += o.warmup_lost;
        self.warmup_errors += o.warmup_errors;
        self.disconnects += o.disconnects;
        self.sent_bytes += o.sent_bytes;
        if self.disconnect_reason.is_none() {
            self.disconnect_reason.clone_from(&o.disconnect_reason);
        }
    }
}

/// The client's side of the echo, whatever carries it.
pub struct Driver {
    id: u32,
    payload: usize,
    window: usize,
    rate: Option<u32>,
    channel: ChannelChoice,
    schedule: Option<Schedule>,
    /// Sequence → (sent at, phase).
    outstanding: HashMap<u64, (Instant, Phase)>,
    next_seq: u64,
    /// Highest sequence echoed, per phase (order checks).
    highest: [Option<u64>; 2],
    buf: Vec<u8>,
    /// The counts so far.
    pub tally: Tally,
    /// Measured-phase round trips.
    pub rtt: Rtt,
    drained: Arc<AtomicUsize>,
    done: bool,
}

impl Driver {
    /// Client `id` of `cfg`; counts itself in `drained` when it has nothing
    /// in flight after the measured phase.
    pub fn new(cfg: &RunConfig, id: u32, drained: Arc<AtomicUsize>) -> Self {
        Driver {
            id,
            payload: cfg.payload as usize,
            window: cfg.window as usize,
            rate: cfg.rate_hz,
            channel: cfg.channel,
            schedule: None,
            outstanding: HashMap::with_capacity(cfg.window as usize * 2),
            next_seq: 0,
            highest: [None, None],
            buf: vec![0; cfg.payload as usize],
            tally: Tally::default(),
            rtt: Rtt::new(),
            drained,
            done: false,
        }
    }

    /// The run starts.
    pub fn start(&mut self, schedule: Schedule) {
        self.schedule = Some(schedule);
    }

    /// Gives up on lost unreliable messages.
    pub fn expire(&mut self, now: Instant) {
        if self.channel.reliable() {
            return;
        }
        let tally = &mut self.tally;
        self.outstanding.retain(|_, (at, phase)| {
            let keep = now.saturating_duration_since(*at) < UNRELIABLE_LOSS_TIMEOUT;
            if !keep {
                match phase {
                    Phase::Measured => tally.lost += 1,
                    Phase::Warmup => tally.warmup_lost += 1,
                }
            }
            keep
        });
    }

    /// Sends what is due through `send` (false: refused), and says when
    /// this client has nothing left in flight after the phase.
    pub fn pump(&mut self, send: &mut dyn FnMut(&[u8]) -> bool) {
        let Some(s) = self.schedule else {
            return;
        };
        let now = Instant::now();
        if now < s.measure_end {
            let due = match self.rate {
                None => u64::MAX,
                Some(hz) => (now.duration_since(s.start).as_secs_f64() * f64::from(hz)) as u64 + 1,
            };
            while self.next_seq < due
                && (self.rate.is_some() || self.outstanding.len() < self.window)
            {
                if !self.send_one(send, now, s) {
                    break;
                }
            }
        } else if self.outstanding.is_empty() {
            self.finished();
        }
    }

    /// This client is done (drained, or its connection ended).
    pub fn finished(&mut self) {
        if !self.done {
            self.done = true;
            self.drained.fetch_add(1, Ordering::Release);
        }
    }

    fn send_one(&mut self, send: &mut dyn FnMut(&[u8]) -> bool, now: Instant, s: Schedule) -> bool {
        let phase = if now < s.measure_start {
            Phase::Warmup
        } else {
            Phase::Measured
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        encode(&mut self.buf, phase, self.id, seq);
        if send(&self.buf) {
            self.outstanding.insert(seq, (now, phase));
            self.tally.sent_bytes += self.payload as u64;
            if phase == Phase::Measured {
                self.tally.messages_sent += 1;
            }
            true
        } else {
            match phase {
                Phase::Measured => self.tally.send_rejections += 1,
                Phase::Warmup => self.tally.warmup_errors += 1,
            }
            false
        }
    }

    /// Checks an echo and counts it.
    pub fn echo(&mut self, data: &[u8], now: Instant) {
        let Ok(h) = decode_header(data) else {
            self.tally.content_errors += 1;
            return;
        };
        if h.client != self.id || data.len() != self.payload || !verify_fill(data, &h) {
            self.tally.content_errors += 1;
            return;
        }
        let Some((sent, phase)) = self.outstanding.remove(&h.seq) else {
            if h.seq < self.next_seq {
                self.tally.late += 1;
            } else {
                self.tally.unexpected += 1;
            }
            return;
        };
        let slot = usize::from(phase == Phase::Measured);
        let in_order = self.highest[slot].is_none_or(|hi| h.seq > hi);
        if in_order {
            self.highest[slot] = Some(h.seq);
        }
        let order_error = !in_order && self.channel.ordered();
        match phase {
            Phase::Warmup => self.tally.warmup_errors += u64::from(order_error),
            Phase::Measured => {
                self.tally.order_errors += u64::from(order_error);
                self.tally.messages += 1;
                self.rtt.record(now.saturating_duration_since(sent));
            }
        }
    }

    /// The final tally (what is still outstanding counts as lost) and the
    /// RTT samples.
    pub fn take(&mut self) -> (Tally, Rtt) {
        let mut t = std::mem::take(&mut self.tally);
        for (_, phase) in self.outstanding.values() {
            match phase {
                Phase::Measured => t.lost += 1,
                Phase::Warmup => t.warmup_lost += 1,
            }
        }
        self.outstanding.clear();
        (t, std::mem::take(&mut self.rtt))
    }
}

/// What the main thread asks of every client.
#[derive(Clone, Copy, Debug)]
pub enum Job {
    /// The run starts.
    Start(Schedule),
    /// A millisecond passed.
    Tick,
}

/// Waits for `n` handshakes (`connected`), then ticks the clients (through
/// `post`) through the warm-up, the measured phase and the drain (until
/// `drained` reaches `n`), measuring CPU and wall time into `report`.
/// Returns the elapsed time from the measured phase's start to the end of
/// the drain.
pub fn drive(
    cfg: &RunConfig,
    report: &mut RunReport,
    n: usize,
    connected: &AtomicUsize,
    drained: &AtomicUsize,
    post: &dyn Fn(Job),
) -> Result<Duration, String> {
    let handshake_deadline = Instant::now() + HANDSHAKE;
    while connected.load(Ordering::Acquire) < n {
        if Instant::now() >= handshake_deadline {
            return Err(format!(
                "{} of {n} clients finished the handshake within {HANDSHAKE:?}",
                connected.load(Ordering::Acquire)
            ));
        }
        std::thread::sleep(TICK);
    }
    let start = Instant::now();
    let measure_start = start + Duration::from_secs_f64(cfg.warmup);
    let measure_end = measure_start + Duration::from_secs_f64(cfg.seconds);
    post(Job::Start(Schedule {
        start,
        measure_start,
        measure_end,
    }));
    let drain_deadline = measure_end + Duration::from_secs_f64(cfg.drain);
    let mut cpu_start = None;
    let mut wall_start = None;
    let mut next = start;
    let drained_at = loop {
        let now = Instant::now();
        if wall_start.is_none() && now >= measure_start {
            cpu_start = process_cpu_time();
            wall_start = Some(now);
        }
        if now >= measure_end && drained.load(Ordering::Acquire) >= n {
            break Some(now);
        }
        if now >= drain_deadline {
            break None;
        }
        post(Job::Tick);
        next += TICK;
        sleep_until(next.max(Instant::now()));
    };
    let cpu_end = process_cpu_time();
    let wall = wall_start.map_or(Duration::ZERO, |w| w.elapsed());
    if drained_at.is_none() {
        report.drain_timeouts = 1;
    }
    let end = drained_at.unwrap_or(drain_deadline);
    if let (Some(a), Some(b)) = (cpu_start, cpu_end) {
        report.set_cpu(b.saturating_sub(a), wall);
    }
    report.peak_rss_bytes = peak_rss_bytes();
    Ok(end.saturating_duration_since(measure_start))
}

/// What the echo server of a run counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerTally {
    /// Measured-phase messages received.
    pub delivered: u64,
    /// Messages with a bad header.
    pub invalid: u64,
    /// Echoes the transport refused.
    pub send_rejections: u64,
}

/// The clients' and the server's tallies into `report`.
pub fn record(report: &mut RunReport, tally: &Tally, server: ServerTally, rtt: &Rtt) {
    report.messages_sent = tally.messages_sent;
    report.messages = tally.messages;
    report.client_send_rejections = tally.send_rejections;
    report.content_errors = tally.content_errors;
    report.order_errors = tally.order_errors;
    report.unexpected_messages = tally.unexpected + server.invalid;
    report.disconnect_errors = tally.disconnects;
    report.udp_lost_messages = tally.lost;
    report.late_echoes = Some(tally.late);
    report.udp_lost_warmup_messages = Some(tally.warmup_lost);
    report.warmup_errors = tally.warmup_errors;
    report.warmup_ok = tally.warmup_errors == 0;
    report.server_send_rejections = Some(server.send_rejections);
    report.messages_delivered = Some(server.delivered);
    report.set_rtt(&rtt.summary());
}

/// What an echo server (keel-rudp's or KCP's) counts, shared with the run.
#[derive(Default)]
pub(crate) struct ServerCounts {
    /// Measured-phase messages received.
    pub(crate) delivered: std::sync::atomic::AtomicU64,
    /// Messages with a bad header.
    pub(crate) invalid: std::sync::atomic::AtomicU64,
    /// Echoes the transport refused.
    pub(crate) send_rejections: std::sync::atomic::AtomicU64,
    /// Message bytes echoed (whole run).
    pub(crate) echoed_bytes: std::sync::atomic::AtomicU64,
    /// Sink of the server's work.
    pub(crate) sink: std::sync::atomic::AtomicU64,
}

impl ServerCounts {
    /// Checks and counts one message the server received, doing `work`
    /// rounds of server work on it; false if it is not a benchmark message
    /// (counted in `invalid`; no echo).
    pub(crate) fn receive(&self, msg: &[u8], work: u64) -> bool {
        match crate::message::decode_header(msg) {
            Ok(h) if h.phase == crate::message::Phase::Measured => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                self.invalid.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        if work > 0 {
            let r = crate::message::server_work(msg, work);
            self.sink.fetch_xor(r, Ordering::Relaxed);
        }
        true
    }
}
