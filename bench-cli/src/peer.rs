//! What `--protocol rudp`, `--protocol kcp` and `--protocol udp --rate`
//! share: the client's side of the echo ([`Driver`]: what to send when,
//! and the check of every echo), the phases of a run ([`drive`];
//! [`drive_sockets`] for clients on keel-udp sockets, kcp's and udp's),
//! the clients' tallies ([`collect_tallies`]) and how a tally becomes the
//! report ([`record`]). The transports live in `crate::rudp`, `crate::kcp`
//! and `crate::udp_rate`.
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
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bulk::{check_transfer, ClientShape, RECEIPT_LEN};
use crate::flags::{ChannelChoice, RunConfig};
use crate::loopback::{runtime_for, sleep_until};
use crate::message::{decode_header, encode, verify_fill, Phase};
use crate::output::RunReport;
use crate::procstats::{cpu_percent, peak_rss_bytes, process_cpu_time, rss_bytes, ThreadSet};
use crate::stats::Rtt;
use keel_reactor::Runtime;
use keel_udp::CounterSnapshot;

/// How long a message on an unreliable channel may go unanswered before it
/// counts as lost and (closed loop) frees its window slot.
pub(crate) const UNRELIABLE_LOSS_TIMEOUT: Duration = Duration::from_secs(1);
/// How long every client has to finish its handshake: keel-rudp's own
/// default `handshake_timeout`, after which a client gives up anyway (at
/// 20 % loss each way a handshake, two round trips with backoff, can take
/// over 5 s).
pub(crate) const HANDSHAKE: Duration = Duration::from_secs(10);
/// Upper bound on collecting tallies and stats after the drain.
pub(crate) const COLLECT: Duration = Duration::from_secs(2);
/// How often the main thread ticks the clients.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// When the phases start and end.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    /// Start of the warm-up.
    pub start: Instant,
    /// Start of the measured phase.
    pub measure_start: Instant,
    /// End of the measured phase.
    pub measure_end: Instant,
}

/// One client's counts, added up over the clients at the end.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
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
    pub(crate) fn add(&mut self, o: &Tally) {
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
pub(crate) struct Driver {
    id: u32,
    /// How many clients share the rate's period (client `id` sends at
    /// `id / clients` of it, so the clients' sends spread out).
    clients: u32,
    payload: usize,
    /// Bytes of each answer: `payload` (echo) or a bulk receipt.
    answer: usize,
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
    /// Measured-phase round trips, one histogram for every client of the
    /// run (a histogram is ~60 KB; the scale case runs thousands of
    /// clients, all on one thread, so the lock is never contended).
    rtt: SharedRtt,
    drained: Arc<AtomicUsize>,
    done: bool,
}

impl Driver {
    /// Client `id` of `cfg`; counts itself in `drained` when it has nothing
    /// in flight after the measured phase.
    pub(crate) fn new(cfg: &RunConfig, id: u32, drained: Arc<AtomicUsize>, rtt: SharedRtt) -> Self {
        // The echo's, or the bulk case's (`crate::bulk`).
        let shape = ClientShape::of(cfg);
        Driver {
            id,
            clients: cfg.clients.max(1),
            payload: shape.message,
            answer: shape.answer,
            window: shape.window,
            rate: cfg.rate_hz,
            channel: cfg.channel,
            schedule: None,
            outstanding: HashMap::with_capacity(shape.window * 2),
            next_seq: 0,
            highest: [None, None],
            buf: vec![0; shape.message],
            tally: Tally::default(),
            rtt,
            drained,
            done: false,
        }
    }

    /// Treats the transport as lossy (plain UDP): echoes are not ordered
    /// and a message unanswered for [`UNRELIABLE_LOSS_TIMEOUT`] is lost.
    pub(crate) fn lossy(mut self) -> Self {
        self.channel = ChannelChoice::Unreliable;
        self
    }

    /// The run starts.
    pub(crate) fn start(&mut self, schedule: Schedule) {
        self.schedule = Some(schedule);
    }

    /// The measured phase ends at `at` if that is earlier than planned (an
    /// interrupt); the next pump sees it.
    pub(crate) fn end_at(&mut self, at: Instant) {
        if let Some(s) = &mut self.schedule {
            s.measure_end = s.measure_end.min(at);
        }
    }

    /// Gives up on lost unreliable messages.
    pub(crate) fn expire(&mut self, now: Instant) {
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
    pub(crate) fn pump(&mut self, send: &mut dyn FnMut(&[u8]) -> bool) {
        let Some(s) = self.schedule else {
            return;
        };
        let now = Instant::now();
        if now < s.measure_end {
            let due = match self.rate {
                None => u64::MAX,
                Some(hz) => {
                    // Periods of this client's sends so far; the epsilon
                    // (16 ns at 60 Hz) keeps a wake-up at `next_wake`,
                    // rounded to whole nanoseconds, from computing one
                    // send fewer.
                    let t =
                        now.duration_since(s.start).as_secs_f64() * f64::from(hz) - self.phase();
                    if t < -1e-6 {
                        0
                    } else {
                        (t + 1e-6) as u64 + 1
                    }
                }
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

    /// Where in the period this client sends: client `i` of `n` at
    /// `(k + i / n) / rate` for k = 0, 1, …, so the clients' sends spread
    /// evenly over the period, as independent players' would.
    fn phase(&self) -> f64 {
        f64::from(self.id) / f64::from(self.clients)
    }

    /// When this client next needs a tick (open loop; `None` closed loop,
    /// before the start and once done): its next send while the measured
    /// phase lasts; then the phase's end (to see it has drained); then,
    /// on a lossy transport with messages outstanding, when the oldest
    /// is given up.
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        let (s, hz) = (self.schedule?, self.rate?);
        if self.done {
            return None;
        }
        let periods = self.next_seq as f64 + self.phase();
        let send = s.start + Duration::from_secs_f64(periods / f64::from(hz));
        if send < s.measure_end {
            return Some(send);
        }
        if now < s.measure_end {
            return Some(s.measure_end);
        }
        if self.channel.reliable() {
            return None;
        }
        let oldest = self.outstanding.values().map(|(at, _)| *at).min()?;
        Some(oldest + UNRELIABLE_LOSS_TIMEOUT)
    }

    /// This client is done (drained, or its connection ended).
    pub(crate) fn finished(&mut self) {
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
    pub(crate) fn echo(&mut self, data: &[u8], now: Instant) {
        let Ok(h) = decode_header(data) else {
            self.tally.content_errors += 1;
            return;
        };
        if h.client != self.id || data.len() != self.answer || !verify_fill(data, &h) {
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
                lock(&self.rtt).record(now.saturating_duration_since(sent));
            }
        }
    }

    /// The final tally (what is still outstanding counts as lost).
    pub(crate) fn take(&mut self) -> Tally {
        let mut t = std::mem::take(&mut self.tally);
        for (_, phase) in self.outstanding.values() {
            match phase {
                Phase::Measured => t.lost += 1,
                Phase::Warmup => t.warmup_lost += 1,
            }
        }
        self.outstanding.clear();
        t
    }
}

/// The round trips of every client of a run.
pub(crate) type SharedRtt = Arc<Mutex<Rtt>>;

/// A new, empty [`SharedRtt`].
pub(crate) fn shared_rtt() -> SharedRtt {
    Arc::new(Mutex::new(Rtt::new()))
}

/// Locks `m`, whatever a panicking holder left (a histogram stays valid).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the main thread asks of every client.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Job {
    /// The run starts.
    Start(Schedule),
    /// Ctrl-C: the measured phase ends at this instant instead.
    End(Instant),
    /// Time to send what is due (open loop: this client's send time came;
    /// closed loop: a millisecond passed) and give up on lost messages.
    Tick,
}

/// The runtimes of a run: the server's (`--io-model`, `--io-threads`),
/// the threads it runs on, and the clients' (a reactor per CPU, at most
/// one per client), so the server's CPU time is measured apart from the
/// load that drives it.
pub(crate) fn runtimes(cfg: &RunConfig) -> Result<(Runtime, ThreadSet, Runtime), String> {
    let server = runtime_for(cfg.io_model, cfg.io_threads)
        .map_err(|e| format!("starting the server's runtime: {e}"))?;
    // Before the clients' runtime exists, every runtime thread is the
    // server's; each names itself once it runs.
    let names = ["keel-shared-", "keel-shard-"];
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut threads = ThreadSet::named(&names);
    let expected = server.model().threads();
    while threads.len() < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        threads = ThreadSet::named(&names);
    }
    if threads.len() != expected {
        // Not what the runtime started: measure nothing rather than wrong.
        threads = ThreadSet::default();
    }
    // One reactor per CPU: thousands of clients are a load the server's
    // thread must not wait on.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let reactors = cpus.min(cfg.clients as usize).max(1);
    let clients = Runtime::new(keel_reactor::IoModel::Sharded { reactors })
        .map_err(|e| format!("starting the clients' runtime: {e}"))?;
    Ok((server, threads, clients))
}

/// What [`drive`] measured besides the report's own fields.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Measured {
    /// From the measured phase's start to the end of the drain.
    pub elapsed: Duration,
    /// CPU time of the server's threads in the measured phase.
    pub server_cpu: Option<Duration>,
    /// Wall time of the measured phase as `drive` saw it.
    pub wall: Duration,
    /// Messages the server received in the measured phase (by the
    /// `server_received` counter).
    pub server_messages: u64,
    /// RSS once every handshake was done.
    pub rss_connected: Option<u64>,
}

/// The server's side of a run, as [`drive`] measures it.
pub(crate) struct ServerProbe<'a> {
    /// The threads the server runs on (empty: not measured).
    pub threads: &'a ThreadSet,
    /// Messages the server has received so far, any phase.
    pub received: &'a dyn Fn() -> u64,
}

/// Waits for `n` handshakes (`connected`), then ticks the clients (through
/// `post`, by client index) through the warm-up, the measured phase and
/// the drain (until `drained` reaches `n`), measuring CPU and wall time
/// into `report` and the server's CPU through `server`.
///
/// Closed loop, every client is ticked each millisecond. Open loop
/// (`--rate`), each client ticks itself on its own lane at
/// [`Driver::next_wake`] (keel-rudp's `Ctx::tick_at`, a keel-udp timer
/// for kcp and udp): a post from here per send would cost a boxed closure
/// and a wake-up each, a core's worth at 1,000 clients and 60 Hz.
pub(crate) fn drive(
    cfg: &RunConfig,
    report: &mut RunReport,
    n: usize,
    connected: &AtomicUsize,
    drained: &AtomicUsize,
    server: &ServerProbe<'_>,
    post: &dyn Fn(usize, Job),
) -> Result<Measured, String> {
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
    let rss_connected = rss_bytes();
    let start = Instant::now();
    let measure_start = start + Duration::from_secs_f64(cfg.warmup);
    let measure_end = measure_start + Duration::from_secs_f64(cfg.seconds);
    let schedule = Schedule {
        start,
        measure_start,
        measure_end,
    };
    for i in 0..n {
        post(i, Job::Start(schedule));
    }
    let mut measure_end = measure_end;
    let mut drain_deadline = measure_end + Duration::from_secs_f64(cfg.drain);
    let mut interrupted = None;
    let mut cpu_start = None;
    let mut server_start = None;
    let mut received_start = 0;
    let mut server_end = None;
    let mut received_end = 0;
    let mut wall_start = None;
    let mut wall = Duration::ZERO;
    let mut next = start;
    let drained_at = loop {
        let now = Instant::now();
        // Ctrl-C ends the measured phase now; the clients drain.
        if interrupted.is_none() && now < measure_end {
            if let Some(t) = crate::interrupt::interrupted() {
                interrupted = Some(t);
                measure_end = t.max(measure_start).min(measure_end);
                drain_deadline = measure_end + Duration::from_secs_f64(cfg.drain);
                for i in 0..n {
                    post(i, Job::End(measure_end));
                }
            }
        }
        if wall_start.is_none() && now >= measure_start {
            cpu_start = process_cpu_time();
            server_start = server.threads.cpu_time();
            received_start = (server.received)();
            wall_start = Some(now);
        }
        if server_end.is_none() && now >= measure_end {
            server_end = server.threads.cpu_time();
            received_end = (server.received)();
            wall = wall_start.map_or(Duration::ZERO, |w| now.duration_since(w));
        }
        if now >= measure_end && drained.load(Ordering::Acquire) >= n {
            break Some(now);
        }
        if now >= drain_deadline {
            break None;
        }
        if cfg.rate_hz.is_none() {
            for i in 0..n {
                post(i, Job::Tick);
            }
        }
        next += TICK;
        sleep_until(next.max(Instant::now()));
    };
    let cpu_end = process_cpu_time();
    let process_wall = wall_start.map_or(Duration::ZERO, |w| w.elapsed());
    if drained_at.is_none() {
        report.checks.drain_timeouts = 1;
    }
    if let Some(t) = interrupted {
        report.error = Some(crate::interrupt::error(t, measure_start, cfg.seconds));
    }
    let end = drained_at.unwrap_or(drain_deadline);
    if let (Some(a), Some(b)) = (cpu_start, cpu_end) {
        report.set_cpu(b.saturating_sub(a), process_wall);
    }
    report.cpu.peak_rss_bytes = peak_rss_bytes();
    Ok(Measured {
        elapsed: end.saturating_duration_since(measure_start),
        server_cpu: server_start
            .zip(server_end)
            .map(|(a, b)| b.saturating_sub(a)),
        wall,
        server_messages: received_end.saturating_sub(received_start),
        rss_connected,
    })
}

/// The socket counters of the clients (summed) and of the server into
/// `report`.
/// `server_messages`: the messages the server's handler received over the
/// whole run (warm-up included, as the socket counters are), for
/// `server_datagrams_per_message`.
pub(crate) fn record_sockets(
    report: &mut RunReport,
    clients: CounterSnapshot,
    server: CounterSnapshot,
    server_messages: u64,
) {
    report.peer.server_datagrams_per_message =
        (server_messages > 0).then(|| server.datagrams_in as f64 / server_messages as f64);
    report.drops.kernel_rcvbuf_drops = Some(clients.kernel_drops + server.kernel_drops);
    report.impair.conditioner_dropped =
        Some(clients.conditioner_dropped + server.conditioner_dropped);
    report.impair.conditioner_duplicated =
        Some(clients.conditioner_duplicated + server.conditioner_duplicated);
    report.checks.client_send_completion_errors = clients.send_errors;
    report.checks.server_send_completion_errors = Some(server.send_errors);
}

/// Asks each of `n` clients for what it reports (`ask(i, tx)` posts a
/// closure to client `i` that sends it on `tx`) and returns what came back
/// within [`COLLECT`], in any order: fewer than `n` if a client's lane did
/// not answer.
pub(crate) fn collect<T: Send + 'static>(n: usize, ask: impl Fn(usize, mpsc::Sender<T>)) -> Vec<T> {
    let (tx, rx) = mpsc::channel();
    for i in 0..n {
        ask(i, tx.clone());
    }
    drop(tx);
    let deadline = Instant::now() + COLLECT;
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(t) => got.push(t),
            Err(_) => break,
        }
    }
    got
}

/// Asks each of `n` clients for its final [`Tally`] and what else its
/// transport reports (`X`), as [`collect`] asks: the tallies summed, and
/// the `X` of each answer, in the order they came (fewer than `n` if a
/// client's lane did not answer).
pub(crate) fn collect_tallies<X: Send + 'static>(
    n: usize,
    ask: impl Fn(usize, mpsc::Sender<(Tally, X)>),
) -> (Tally, Vec<X>) {
    let mut tally = Tally::default();
    let mut rest = Vec::with_capacity(n);
    for (t, x) in collect(n, ask) {
        tally.add(&t);
        rest.push(x);
    }
    (tally, rest)
}

/// The clients of a run on keel-udp sockets (`--protocol kcp`, `--protocol
/// udp --rate`, `--protocol rudp --client-sockets shared`), each with a
/// [`Driver`] that makes the messages, as [`drive_sockets`] drives them
/// (`crate::socket_client::BoundClients`).
pub(crate) trait ClientSet {
    /// How many clients.
    fn len(&self) -> usize;
    /// Has client `i` do `job`.
    fn post_job(&self, i: usize, job: Job);
    /// Has client `i` send its final tally ([`Driver::take`], with the
    /// sends its socket refused) to `tx`.
    fn post_take(&self, i: usize, tx: mpsc::Sender<(Tally, ())>);
    /// Closes the sockets; their counters, summed.
    fn close(&self) -> CounterSnapshot;
}

/// What the clients of a run on keel-udp sockets reported to
/// [`drive_sockets`].
pub(crate) struct SocketClients {
    /// What [`drive`] measured, or why it could not.
    pub measured: Result<Measured, String>,
    /// The tallies of the clients that reported, summed.
    pub tally: Tally,
    /// Clients that reported.
    pub reported: usize,
    /// Clients of the run.
    pub clients: usize,
    /// The round trips of every client.
    pub rtt: Rtt,
    /// The clients' socket counters, summed once closed.
    pub udp: CounterSnapshot,
}

impl SocketClients {
    /// How the run ended, once recorded: [`drive`]'s error, else clients
    /// that did not report, else a handler that failed (`stopped`, the
    /// runtimes' stop; counted in `callback_exceptions`).
    pub(crate) fn outcome(
        self,
        report: &mut RunReport,
        stopped: Result<(), keel_reactor::Error>,
    ) -> Result<(), String> {
        self.measured?;
        if self.reported < self.clients {
            return Err(format!(
                "{} of {} clients did not report",
                self.clients - self.reported,
                self.clients
            ));
        }
        stopped.map_err(|e| {
            report.checks.callback_exceptions += 1;
            format!("a handler failed: {e}")
        })
    }
}

/// Runs `clients` through the run ([`drive`], each posted its [`Job`]s;
/// `connected`, `drained` and `server` as there), then collects their
/// tallies, takes the run's round trips from `rtt` and closes them.
pub(crate) fn drive_sockets(
    cfg: &RunConfig,
    report: &mut RunReport,
    clients: &dyn ClientSet,
    connected: &AtomicUsize,
    drained: &AtomicUsize,
    server: &ServerProbe<'_>,
    rtt: &SharedRtt,
) -> SocketClients {
    let post = |i: usize, job: Job| clients.post_job(i, job);
    let measured = drive(
        cfg,
        report,
        clients.len(),
        connected,
        drained,
        server,
        &post,
    );
    let (tally, reported) = collect_tallies(clients.len(), |i, tx| clients.post_take(i, tx));
    let rtt = lock(rtt).clone();
    let udp = clients.close();
    SocketClients {
        measured,
        tally,
        reported: reported.len(),
        clients: clients.len(),
        rtt,
        udp,
    }
}

/// What the echo server of a run counted.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ServerTally {
    /// Measured-phase messages received.
    pub delivered: u64,
    /// Messages with a bad header.
    pub invalid: u64,
    /// Echoes the transport refused.
    pub send_rejections: u64,
}

/// The clients' and the server's tallies into `report`.
pub(crate) fn record(report: &mut RunReport, tally: &Tally, server: ServerTally, rtt: &Rtt) {
    report.throughput.messages_sent = tally.messages_sent;
    report.throughput.messages = tally.messages;
    report.checks.client_send_rejections = tally.send_rejections;
    report.checks.content_errors = tally.content_errors;
    report.checks.order_errors = tally.order_errors;
    report.checks.unexpected_messages = tally.unexpected + server.invalid;
    report.checks.disconnect_errors = tally.disconnects;
    report.checks.udp_lost_messages = tally.lost;
    report.drops.late_echoes = Some(tally.late);
    report.drops.udp_lost_warmup_messages = Some(tally.warmup_lost);
    report.checks.warmup_errors = tally.warmup_errors;
    report.checks.warmup_ok = tally.warmup_errors == 0;
    report.checks.server_send_rejections = Some(server.send_rejections);
    report.delivery.messages_delivered = Some(server.delivered);
    report.set_rtt_of(rtt);
}

/// The server's CPU per message and the memory per connection into
/// `report`: `rss_before` was read before the server and the clients were
/// made, so the difference holds both ends of every connection.
pub(crate) fn record_server(
    report: &mut RunReport,
    m: &Measured,
    rss_before: Option<u64>,
    n: usize,
) {
    report.scale.server_cpu_us_per_message = Some(
        m.server_cpu
            .filter(|_| m.server_messages > 0)
            .map(|c| c.as_secs_f64() * 1e6 / m.server_messages as f64),
    );
    report.scale.server_cpu_percent = Some(m.server_cpu.map(|c| cpu_percent(c, m.wall)));
    report.scale.rss_bytes_per_connection = Some(
        rss_before
            .zip(m.rss_connected)
            .filter(|_| n > 0)
            .map(|(a, b)| b.saturating_sub(a) as f64 / n as f64),
    );
}

/// What an echo server (keel-rudp's or KCP's) counts, shared with the run.
#[derive(Default)]
pub(crate) struct ServerCounts {
    /// Measured-phase messages received.
    pub(crate) delivered: std::sync::atomic::AtomicU64,
    /// Messages received, any phase (valid or not).
    pub(crate) received: std::sync::atomic::AtomicU64,
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
        self.received.fetch_add(1, Ordering::Relaxed);
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

    /// The bulk case's [`ServerCounts::receive`]: checks the whole transfer
    /// of `transfer` bytes ([`check_transfer`]) and returns its receipt; one
    /// that does not check counts in `invalid` and gets none.
    pub(crate) fn receive_transfer(
        &self,
        msg: &[u8],
        transfer: u64,
        work: u64,
    ) -> Option<[u8; RECEIPT_LEN]> {
        let Some(receipt) = check_transfer(msg, transfer) else {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        self.receive(msg, work).then_some(receipt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_sends_are_due_at_its_share_of_the_period() {
        // Client 1 of 4 at 10 Hz sends at 25, 125, 225 ms...
        let cfg = RunConfig {
            clients: 4,
            rate_hz: Some(10),
            payload: 64,
            ..RunConfig::default()
        };
        let mut d = Driver::new(&cfg, 1, Arc::new(AtomicUsize::new(0)), shared_rtt());
        let start = Instant::now() - Duration::from_millis(130);
        d.start(Schedule {
            start,
            measure_start: start,
            measure_end: start + Duration::from_secs(60),
        });
        let mut sent = 0;
        d.pump(&mut |_| {
            sent += 1;
            true
        });
        assert_eq!(sent, 2, "the sends due at 25 and 125 ms");
        assert_eq!(d.tally.messages_sent, 2);
        let now = Instant::now();
        assert_eq!(d.next_wake(now), Some(start + Duration::from_millis(225)));
        // At that instant exactly, the third send is due.
        d.pump(&mut |_| {
            sent += 1;
            true
        });
        assert_eq!(sent, 2, "not before 225 ms");
    }

    #[test]
    fn after_the_phase_a_lossy_client_wakes_to_give_up_its_oldest() {
        let cfg = RunConfig {
            clients: 2,
            rate_hz: Some(10),
            payload: 64,
            ..RunConfig::default()
        };
        let mut d = Driver::new(&cfg, 0, Arc::new(AtomicUsize::new(0)), shared_rtt()).lossy();
        let start = Instant::now() - Duration::from_millis(250);
        let end = start + Duration::from_millis(200);
        d.start(Schedule {
            start,
            measure_start: start,
            measure_end: end,
        });
        assert_eq!(d.next_wake(start), Some(start), "the first send");
        // Both sends of the phase (0 and 100 ms) made and echoed: the
        // phase is over and nothing is outstanding.
        d.next_seq = 2;
        assert_eq!(d.next_wake(Instant::now()), None);
        assert_eq!(d.next_wake(start + Duration::from_millis(199)), Some(end));
        d.outstanding.insert(7, (start, Phase::Measured));
        d.next_seq = 8;
        assert_eq!(
            d.next_wake(Instant::now()),
            Some(start + UNRELIABLE_LOSS_TIMEOUT)
        );
    }
}
