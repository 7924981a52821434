//! The clients' load: connect, open loop, measured window, drain, one JSON
//! line.
//!
//! * Every client sends `--rate` messages a second, whatever comes back
//!   (a game tick), the clients' sends spread evenly over the period:
//!   send `j` (counting all clients) is due at `start + j * period / N`,
//!   from client `j % N`. Late sends are sent at once (no send is skipped);
//!   between sends the library is pumped until the next one is due.
//! * The payload is `[u64 seq][u64 send_ns][pad]` (little endian; `seq`
//!   counts every message of the process from 0, `send_ns` is the
//!   harness's monotonic clock when `send` was called, the pad byte `k`
//!   is `(seq + k) as u8`). The echo must come back unchanged on the
//!   client that sent it: anything else is counted as `corrupt`.
//! * Warmup (`--warmup`): sent, echoes ignored. Window (`--seconds`): each
//!   message sent is outstanding until its echo; its latency (echo seen
//!   by `pump`'s callback - `send_ns`) goes to the histogram once; a
//!   second echo of it is counted in `duplicates`. Drain (`--drain`): no
//!   sends, pumping until every window message is delivered or the drain
//!   ends; what is still outstanding then is `lost`.
//! * A library whose clients send on ticks of their own (keel-rudp's
//!   `Handler::tick`: [`Clients::ticks_itself`]) runs the same schedule
//!   through [`OpenLoop`] on its own threads instead ([`Clients::run_ticks`]).
//! * CPU is the whole process (getrusage) from the window's start to the
//!   drain's end; `cpu_us_per_message` is that over the window's messages
//!   sent (each a send and, if delivered, an echo received).
//! * RSS: `rss_bytes` when the last message has been sent (every
//!   connection up, their queues in use), `rss_bytes_baseline` before the
//!   library's constructor ran, `rss_bytes_per_connection` the difference
//!   over `--clients`: the library's fixed cost (runtime, threads, TLS
//!   setup) is in it, spread over the connections, and so is the
//!   harness's own bookkeeping of the messages in flight (a hash map
//!   entry each) and delivered (a bit each).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::stats::{rss_bytes, Latency};
use crate::sys::process_cpu;
use crate::{ClientArgs, Clients, Library};

/// How long connecting may take: this plus 10 ms per client.
pub const CONNECT_BASE: Duration = Duration::from_secs(10);

/// Writes message `seq` sent at `send_ns` into `buf` (its length is the
/// payload).
pub fn fill(buf: &mut [u8], seq: u64, send_ns: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&send_ns.to_le_bytes());
    for (k, b) in buf[16..].iter_mut().enumerate() {
        *b = seq.wrapping_add(k as u64) as u8;
    }
}

/// Reads `(seq, send_ns)` of an echo if it is a whole message of
/// `payload` bytes with the right pad.
pub fn parse(msg: &[u8], payload: usize) -> Option<(u64, u64)> {
    if msg.len() != payload {
        return None;
    }
    let seq = u64::from_le_bytes(msg[..8].try_into().ok()?);
    let send_ns = u64::from_le_bytes(msg[8..16].try_into().ok()?);
    let pad_ok = msg[16..]
        .iter()
        .enumerate()
        .all(|(k, &b)| b == seq.wrapping_add(k as u64) as u8);
    pad_ok.then_some((seq, send_ns))
}

/// What the load counted.
#[derive(Default)]
pub struct Counts {
    /// Window messages sent.
    pub sent: u64,
    /// Window messages whose echo arrived (once each).
    pub delivered: u64,
    /// Echoes of window messages already delivered.
    pub duplicates: u64,
    /// Echoes that were not a message of ours, or came to another client.
    pub corrupt: u64,
    /// Warmup messages sent.
    pub warmup_sent: u64,
    /// Echoes of warmup messages.
    pub warmup_echoes: u64,
    /// Latencies of the window's messages.
    pub latency: Latency,
}

/// The bookkeeping of the open loop, apart from the library (so it can be
/// tested without one).
pub struct Recorder {
    epoch: Instant,
    payload: usize,
    /// Window messages outstanding: seq -> (client, send_ns).
    outstanding: HashMap<u64, (u32, u64)>,
    /// Window messages delivered, a bit per seq, to tell duplicates (a
    /// bitmap: 1,000 clients x 20 Hz x 10 s take 25 KB, where a hash set
    /// took megabytes, which the client's RSS per connection would count).
    delivered: Vec<u64>,
    /// First seq of the window, and the first after it.
    window: (u64, u64),
    /// The counts.
    pub counts: Counts,
}

impl Recorder {
    /// A recorder for messages of `payload` bytes on `epoch`'s clock.
    pub fn new(epoch: Instant, payload: usize) -> Self {
        Recorder {
            epoch,
            payload,
            outstanding: HashMap::new(),
            delivered: Vec::new(),
            window: (u64::MAX, u64::MAX),
            counts: Counts::default(),
        }
    }

    /// Nanoseconds on the recorder's clock.
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Notes a message sent: `measured` if it is in the window.
    pub fn sent(&mut self, client: u32, seq: u64, send_ns: u64, measured: bool) {
        if measured {
            // A library ticking its clients may send a little out of
            // order: the window is the range of what was sent in it.
            self.window.0 = self.window.0.min(seq);
            self.window.1 = if self.window.1 == u64::MAX {
                seq + 1
            } else {
                self.window.1.max(seq + 1)
            };
            self.outstanding.insert(seq, (client, send_ns));
            self.counts.sent += 1;
        } else {
            self.counts.warmup_sent += 1;
        }
    }

    /// Notes an echo received by `client` at `now_ns`.
    pub fn received(&mut self, client: u32, msg: &[u8], now_ns: u64) {
        let Some((seq, send_ns)) = parse(msg, self.payload) else {
            self.counts.corrupt += 1;
            return;
        };
        match self.outstanding.get(&seq) {
            Some(&(c, ns)) if c == client && ns == send_ns => {
                self.outstanding.remove(&seq);
                let w = (seq / 64) as usize;
                if self.delivered.len() <= w {
                    self.delivered.resize(w + 1, 0);
                }
                self.delivered[w] |= 1 << (seq % 64);
                self.counts.delivered += 1;
                self.counts.latency.record(now_ns.saturating_sub(send_ns));
            }
            Some(_) => self.counts.corrupt += 1,
            None if self.was_delivered(seq) => self.counts.duplicates += 1,
            None if seq < self.window.0 || self.window.0 == u64::MAX => {
                self.counts.warmup_echoes += 1
            }
            None => self.counts.corrupt += 1,
        }
    }

    fn was_delivered(&self, seq: u64) -> bool {
        self.delivered
            .get((seq / 64) as usize)
            .is_some_and(|w| w & (1 << (seq % 64)) != 0)
    }

    /// Window messages still outstanding.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

/// What one run measured, for the client's line.
pub(crate) struct Run {
    pub(crate) counts: Counts,
    elapsed: Duration,
    cpu: Option<Duration>,
    connect: Duration,
    rss: Option<u64>,
    stats: Option<serde_json::Value>,
}

/// The open loop's schedule and its bookkeeping: which message is due
/// when and from which client, its payload, the records of what was sent
/// and what came back, the CPU and RSS snapshots. The harness's own loop
/// ([`Clients::send`] and [`Clients::pump`]) and a library that sends on
/// ticks of its own ([`Clients::run_ticks`]) both go through it, so their
/// records mean the same.
///
/// Message `j` (counting all clients from 0) is due at `start + j *
/// period / N` from client `j % N`: client `i`'s messages are `i`, `i +
/// N`, `i + 2N`... The schedule ends with the first message due at or
/// after the window's end.
pub struct OpenLoop {
    n: u64,
    spacing_ns: f64,
    start: Instant,
    window_start: Instant,
    drain_end: Instant,
    /// Messages of the run (warmup and window): `due(j)` for `j < total`.
    total: u64,
    /// Messages sent so far.
    sent: u64,
    rec: Recorder,
    buf: Vec<u8>,
    window_started: Option<Instant>,
    cpu_start: Option<Duration>,
    rss: Option<u64>,
}

impl OpenLoop {
    /// The schedule of `args` from `start` (warmup, window, drain), on
    /// `epoch`'s clock.
    pub fn new(args: &ClientArgs, epoch: Instant, start: Instant) -> Self {
        let n = u64::from(args.clients).max(1);
        let spacing_ns = 1e9 / (f64::from(args.rate) * n as f64);
        let window_start = start + args.warmup;
        let window_end = window_start + args.seconds;
        let span = (window_end - start).as_nanos() as u64;
        let at = |j: u64| (j as f64 * spacing_ns) as u64;
        // The first j due at or after the window's end.
        let mut total = (span as f64 / spacing_ns) as u64;
        while total > 0 && at(total - 1) >= span {
            total -= 1;
        }
        while at(total) < span {
            total += 1;
        }
        OpenLoop {
            n,
            spacing_ns,
            start,
            window_start,
            drain_end: window_end + args.drain,
            total,
            sent: 0,
            rec: Recorder::new(epoch, args.payload),
            buf: vec![0u8; args.payload],
            window_started: None,
            cpu_start: None,
            rss: None,
        }
    }

    /// The number of clients.
    pub fn clients(&self) -> usize {
        self.n as usize
    }

    /// When message `j` is due; `None` past the schedule's end.
    pub fn due(&self, j: u64) -> Option<Instant> {
        (j < self.total)
            .then(|| self.start + Duration::from_nanos((j as f64 * self.spacing_ns) as u64))
    }

    /// Sends message `j` now: records it (with the harness's clock at this
    /// call as its `send_ns`), then calls `send(client, payload)` with
    /// its client `j % N`, and returns what `send` returns. Call it once
    /// per `j` with a due time ([`OpenLoop::due`]), at or after that time.
    pub fn send<R>(&mut self, j: u64, send: impl FnOnce(usize, &[u8]) -> R) -> R {
        let due = self.due(j).unwrap_or(self.start);
        let measured = due >= self.window_start;
        if measured && self.window_started.is_none() {
            self.window_started = Some(Instant::now());
            self.cpu_start = process_cpu();
        }
        let client = (j % self.n) as usize;
        let send_ns = self.rec.now_ns();
        fill(&mut self.buf, j, send_ns);
        self.rec.sent(client as u32, j, send_ns, measured);
        self.sent += 1;
        send(client, &self.buf)
    }

    /// Notes an echo that `client` received (now).
    pub fn received(&mut self, client: usize, msg: &[u8]) {
        let t = self.rec.now_ns();
        self.rec.received(client as u32, msg, t);
    }

    /// The end of the drain: no run lasts longer.
    pub fn drain_end(&self) -> Instant {
        self.drain_end
    }

    /// Whether the run is over at `now`: every message sent, and every
    /// window message delivered or the drain over. The first call that
    /// finds every message sent takes the RSS (the connections all up).
    pub fn finished(&mut self, now: Instant) -> bool {
        if self.sent < self.total {
            return now >= self.drain_end;
        }
        if self.rss.is_none() {
            self.rss = rss_bytes();
        }
        self.rec.outstanding() == 0 || now >= self.drain_end
    }

    fn into_run(mut self) -> Run {
        let window_started = self.window_started.unwrap_or_else(Instant::now);
        if self.cpu_start.is_none() {
            self.cpu_start = process_cpu();
        }
        let elapsed = window_started.elapsed();
        let cpu = process_cpu()
            .zip(self.cpu_start)
            .map(|(b, a)| b.saturating_sub(a));
        Run {
            counts: self.rec.counts,
            elapsed,
            cpu,
            connect: Duration::ZERO,
            rss: self.rss.or_else(rss_bytes),
            stats: None,
        }
    }
}

/// The harness's loop: between sends the library is pumped until the
/// next one is due; late sends are sent at once.
pub(crate) fn drive(
    clients: &mut dyn Clients,
    args: &ClientArgs,
    epoch: Instant,
) -> Result<Run, String> {
    let mut load = OpenLoop::new(args, epoch, Instant::now());
    if clients.ticks_itself() {
        return clients.run_ticks(load).map(OpenLoop::into_run);
    }
    let mut j: u64 = 0;
    while let Some(due) = load.due(j) {
        if Instant::now() < due {
            let l = &mut load;
            clients.pump(due, &mut |i, msg| l.received(i, msg))?;
            continue;
        }
        load.send(j, |i, msg| clients.send(i, msg))?;
        j += 1;
    }
    while !load.finished(Instant::now()) {
        let until = load
            .drain_end()
            .min(Instant::now() + Duration::from_millis(5));
        let l = &mut load;
        clients.pump(until, &mut |i, msg| l.received(i, msg))?;
    }
    Ok(load.into_run())
}

/// Runs `lib`'s clients as `args` says and prints the client's JSON line.
/// Returns the exit code (0 iff ok).
pub fn run(lib: &Library, args: &ClientArgs) -> i32 {
    let epoch = Instant::now();
    let deadline = epoch + CONNECT_BASE + Duration::from_millis(10) * args.clients;
    // Before the library's first connection (and its runtime, sockets...).
    let rss_baseline = rss_bytes();
    let mut desc = crate::Description::default();
    let result = (lib.clients)(args, deadline).and_then(|(mut clients, d)| {
        desc = d;
        let connect = epoch.elapsed();
        let r = drive(clients.as_mut(), args, epoch);
        let stats = clients.stats();
        clients.close();
        r.map(|mut r| {
            r.connect = connect;
            r.stats = stats;
            r
        })
    });
    let mut line = serde_json::Map::new();
    let mut put = |k: &str, v: serde_json::Value| {
        line.insert(k.to_string(), v);
    };
    put("role", json!("client"));
    put("library", json!(lib.name));
    put("settings", json!(desc.settings));
    put("tuned", json!(args.tuned));
    put("channel", json!(args.channel.name()));
    put("payload_bytes", json!(args.payload));
    put("clients", json!(args.clients));
    put("rate_hz", json!(args.rate));
    put("warmup_seconds", json!(args.warmup.as_secs_f64()));
    put("window_seconds", json!(args.seconds.as_secs_f64()));
    put("drain_seconds", json!(args.drain.as_secs_f64()));
    let mut error = None;
    match &result {
        Ok(r) => {
            let c = &r.counts;
            let l = &c.latency;
            put("connect_seconds", json!(r.connect.as_secs_f64()));
            put("elapsed_seconds", json!(r.elapsed.as_secs_f64()));
            put("messages_sent", json!(c.sent));
            put("messages_delivered", json!(c.delivered));
            put("lost", json!(c.sent - c.delivered));
            put("duplicates", json!(c.duplicates));
            put("corrupt", json!(c.corrupt));
            put("warmup_sent", json!(c.warmup_sent));
            put("warmup_echoes", json!(c.warmup_echoes));
            put("rtt_samples", json!(l.count()));
            put("rtt_min_us", json!(l.min_us()));
            put("rtt_p50_us", json!(l.quantile_us(0.50)));
            put("rtt_p99_us", json!(l.quantile_us(0.99)));
            put("rtt_p999_us", json!(l.quantile_us(0.999)));
            put("rtt_max_us", json!(l.max_us()));
            put("cpu_seconds", json!(r.cpu.map(|c| c.as_secs_f64())));
            put(
                "cpu_us_per_message",
                json!(r
                    .cpu
                    .filter(|_| c.sent > 0)
                    .map(|cpu| cpu.as_secs_f64() * 1e6 / c.sent as f64)),
            );
            put("rss_bytes", json!(r.rss));
            put("rss_bytes_baseline", json!(rss_baseline));
            put(
                "rss_bytes_per_connection",
                json!(r
                    .rss
                    .zip(rss_baseline)
                    .filter(|_| args.clients > 0)
                    .map(|(a, b)| a.saturating_sub(b) as f64 / f64::from(args.clients))),
            );
            if let Some(s) = &r.stats {
                put("library_stats", s.clone());
            }
            if c.sent == 0 {
                error = Some("no message sent in the window".to_string());
            } else if c.corrupt > 0 {
                error = Some(format!("{} echoes were not the messages sent", c.corrupt));
            }
        }
        Err(e) => error = Some(e.clone()),
    }
    put("pump", json!(desc.pump));
    put("ok", json!(error.is_none()));
    put("error", json!(error));
    println!("{}", serde_json::Value::Object(line));
    if let Some(e) = &error {
        eprintln!("keel-peer {} client: {e}", lib.name);
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_parse_round_trip() {
        let mut b = vec![0u8; 400];
        fill(&mut b, 300, 12345);
        assert_eq!(parse(&b, 400), Some((300, 12345)));
        assert_eq!(parse(&b[..399], 400), None);
        b[200] ^= 1;
        assert_eq!(parse(&b, 400), None);
    }

    #[test]
    fn recorder_counts_once_and_tells_duplicates_warmup_and_strangers() {
        let mut r = Recorder::new(Instant::now(), 32);
        let mut b = vec![0u8; 32];
        // Warmup message 0 from client 0; window messages 1, 2 from 1, 0.
        r.sent(0, 0, 100, false);
        r.sent(1, 1, 1_000, true);
        r.sent(0, 2, 2_000, true);
        fill(&mut b, 0, 100);
        r.received(0, &b, 500);
        fill(&mut b, 1, 1_000);
        r.received(1, &b, 4_000);
        r.received(1, &b, 5_000); // its duplicate
        fill(&mut b, 2, 2_000);
        r.received(1, &b, 6_000); // on the wrong client
        let c = &r.counts;
        assert_eq!((c.sent, c.delivered, c.duplicates), (2, 1, 1));
        assert_eq!((c.warmup_sent, c.warmup_echoes, c.corrupt), (1, 1, 1));
        assert_eq!(r.outstanding(), 1);
        assert_eq!(c.latency.count(), 1);
        assert_eq!(c.latency.max_us(), Some(3.0));
    }

    fn args(clients: u32, rate: u32, warmup_ms: u64, seconds_ms: u64) -> ClientArgs {
        ClientArgs {
            library: "test".into(),
            connect: "127.0.0.1:9".parse().unwrap(),
            clients,
            rate,
            payload: 32,
            seconds: Duration::from_millis(seconds_ms),
            warmup: Duration::from_millis(warmup_ms),
            drain: Duration::from_millis(500),
            channel: crate::Channel::ReliableOrdered,
            tuned: false,
            redundancy: None,
        }
    }

    #[test]
    fn open_loop_schedule_is_the_harness_loops() {
        // 8 clients at 60 Hz over 1 s + 1 s: 960 messages, message j due at
        // j * period / 8 from client j % 8, the last before the window's end.
        let start = Instant::now();
        let a = args(8, 60, 1_000, 1_000);
        let mut l = OpenLoop::new(&a, start, start);
        let spacing = 1e9 / 480.0;
        for j in [0u64, 1, 7, 8, 479, 480, 959] {
            let want = start + Duration::from_nanos((j as f64 * spacing) as u64);
            assert_eq!(l.due(j), Some(want), "message {j}");
        }
        assert_eq!(l.due(960), None);
        // Uneven spacing: the first message due at or after the end ends it.
        let b = args(3, 7, 0, 500);
        let lb = OpenLoop::new(&b, start, start);
        let last = (0..).take_while(|&j| lb.due(j).is_some()).last().unwrap();
        assert_eq!(last, 10);
        // Client j % N sends j; warmup then window, every send recorded.
        let mut from = Vec::new();
        for j in 0..960 {
            l.send(j, |c, m| {
                assert_eq!(parse(m, 32).map(|(s, _)| s), Some(j));
                from.push(c)
            });
        }
        assert_eq!(from[..9], [0, 1, 2, 3, 4, 5, 6, 7, 0]);
        assert_eq!((l.rec.counts.warmup_sent, l.rec.counts.sent), (480, 480));
        // Every message sent, 480 outstanding: done only at the drain's end.
        assert!(!l.finished(start));
        assert!(l.finished(l.drain_end()));
    }

    #[test]
    fn open_loop_is_finished_when_every_window_message_is_back() {
        let start = Instant::now();
        let mut l = OpenLoop::new(&args(2, 10, 0, 300), start, start);
        let mut sent = Vec::new();
        let mut j = 0;
        while l.due(j).is_some() {
            l.send(j, |c, m| sent.push((c, m.to_vec())));
            assert!(!l.finished(start), "not every message sent yet");
            j += 1;
        }
        assert_eq!(j, 6);
        for (c, m) in &sent[..5] {
            l.received(*c, m);
        }
        assert!(!l.finished(start));
        let (c, m) = &sent[5];
        l.received(*c, m);
        l.received(*c, m); // a duplicate
        assert!(l.finished(start));
        let c = &l.rec.counts;
        assert_eq!((c.delivered, c.duplicates, c.corrupt), (6, 1, 0));
    }
}
