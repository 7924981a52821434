//! A seeded fuzzer of the sans-IO endpoint and the frame decoder, on
//! stable Rust: no cargo-fuzz, no coverage feedback, but inputs shaped like
//! an attacker's (valid frames with hostile field values, mutated real
//! packets, random bytes), in insecure mode and with connect tokens.
//!
//! It lives inside the crate so that, in token mode, it can seal the
//! frames it makes with the attacker's own session keys (the test hook:
//! `PacketCrypto`, which only the crate sees): mutated frames then reach
//! the frame decoder and the channels *after* authentication, as they
//! would from a player holding a valid token, rather than dying at the tag.
//!
//! Each run is a sequence of steps from one seed, so a failure is replayed
//! by its seed. A run fails on a panic (with the seed and step), on a step
//! that takes longer than the step limit three times over (the sequence is
//! replayed from its seed to time the step again, so one preemption on a
//! busy machine does not fail it), and on receive memory held beyond the
//! endpoint's budget.
//!
//! The suite runs a short seeded run of each mode (`fuzz::tests`); the long
//! run is `scripts/fuzz.sh` (release, `KEEL_FUZZ_INPUTS`, `KEEL_FUZZ_SEED`),
//! its figures in docs/security.md.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::channel::{ChannelConfig, ChannelKind};
use crate::config::Config;
use crate::connection::Connection;
use crate::endpoint::{ConnectionHandle, Endpoint, EndpointConfig, Handled};
use crate::security::{ClientSecurity, PacketCrypto, ServerSecurity, SessionKeys, TokenMinter};
use crate::security::{TokenSpec, TAG_LEN};
use crate::sim::Rng;
use crate::wire::{ConnectionId, Frame, Header, LongType, Reader, Writer, MIN_HELLO_SIZE};

/// Security mode of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Insecure,
    Tokens,
}

/// What a run found.
#[derive(Debug, Default, Clone)]
pub(crate) struct Report {
    pub inputs: u64,
    /// The slowest step as first timed, and which.
    pub worst_step: Duration,
    pub worst_step_index: u64,
    /// Steps first timed over the limit (then timed twice more).
    pub slow_steps: u64,
    /// The slowest step once each slow one keeps its least of three
    /// times (the others were under the limit when first timed).
    pub worst_step_retimed: Duration,
    /// Of the steps re-timed (those over the limit and the slowest
    /// others), the slowest: its least of three times, and which input.
    pub worst_slow_retimed: Option<(Duration, u64)>,
    /// Resident memory of the process at the start and at most (sampled
    /// every 65,536 steps).
    pub rss_start: usize,
    pub rss_peak: usize,
    /// The most receive bytes the endpoint held after any step.
    pub peak_held: usize,
    /// Frames its connections refused for the budget or a window.
    pub budget_refused: u64,
    /// Packets the attackers' connections accepted (decoded and
    /// authenticated): shows the inputs got past the header and the tag.
    pub packets_accepted: u64,
    pub messages_delivered: u64,
}

/// Why a run failed (read through `Debug`, in the test's panic).
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) enum Failure {
    Panic {
        step: u64,
        message: String,
    },
    /// The least of its three times, over the limit; or, with one time,
    /// the step that passed the limit after `MAX_SLOW_STEPS` others did.
    Slow {
        step: u64,
        times: Vec<Duration>,
    },
    OverBudget {
        step: u64,
        held: usize,
        budget: usize,
    },
}

const SERVER_KEY: [u8; 32] = [0x5e; 32];
const TOKEN_KEY: [u8; 32] = [0x70; 32];
/// Real packets kept to mutate.
const CORPUS: usize = 256;
/// The endpoint's receive budget in a run.
const FUZZ_RECV_BUDGET: usize = 384 << 10;
/// How much the process's RSS may grow in a long run: the budget, the
/// connections' fixed state, the corpus and the allocator's slack are a
/// few MiB; state that escaped the budget grows without end.
const FUZZ_RSS_GROWTH: usize = 64 << 20;
/// Attacker connections per run, each from its own address.
const ATTACKERS: usize = 3;
/// Well-behaved clients per run, whose real packets are also mutated.
const PLAYERS: usize = 2;

fn server_addr() -> SocketAddr {
    "192.0.2.1:4000".parse().expect("literal")
}

fn config() -> Config {
    let mut c = Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
        ChannelConfig::new(ChannelKind::Unreliable),
        ChannelConfig::new(ChannelKind::ReliableOrdered).bulk(),
    ]);
    // Small enough that a short run reaches it.
    c.max_recv_buffer = 256 << 10;
    c.max_message_size = 128 << 10;
    c.max_send_buffer = 256 << 10;
    c
}

/// An attacker's connection: the fuzzer writes its packets by hand.
struct Attacker {
    addr: SocketAddr,
    handle: ConnectionHandle,
    cid: ConnectionId,
    crypto: Option<PacketCrypto>,
    next_pn: u64,
    /// When a refused reconnect may be tried again (virtual time).
    retry_at: Instant,
}

/// A player: a real client connection, driven normally.
struct Player {
    addr: SocketAddr,
    conn: Connection,
}

struct Target {
    mode: Mode,
    rng: Rng,
    now: Instant,
    ep: Endpoint,
    attackers: Vec<Attacker>,
    players: Vec<Player>,
    /// Real packets seen on the wire (client and server side), to mutate.
    corpus: Vec<Vec<u8>>,
    reply: Vec<u8>,
    buf: Vec<u8>,
    /// Packets the attackers' connections accepted (decoded and, in
    /// token mode, authenticated), over every connection they had.
    accepted: u64,
    /// The longest single endpoint call (one datagram in, or one timer
    /// run) of the current step: the cost the step limit bounds.
    max_call: Duration,
}

/// Runs `f`, keeping in `max` the longest time any such call took.
fn timed<R>(max: &mut Duration, f: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let r = f();
    *max = (*max).max(start.elapsed());
    r
}

fn token_for(rng: &mut Rng) -> crate::security::ConnectToken {
    let mut nonce = [0u8; 24];
    let mut c2s = [0u8; 32];
    let mut s2c = [0u8; 32];
    for b in nonce.iter_mut().chain(&mut c2s).chain(&mut s2c) {
        *b = rng.next_u64() as u8;
    }
    TokenMinter::new(TOKEN_KEY)
        .mint_with(
            &TokenSpec {
                server_addrs: vec![server_addr()],
                expires_at: u64::MAX / 2,
                client_id: rng.next_u64(),
                timeout_secs: 10,
                user_data: vec![1, 2, 3],
            },
            nonce,
            c2s,
            s2c,
        )
        .expect("a valid spec")
}

fn nonce16(rng: &mut Rng) -> [u8; 16] {
    let mut n = [0u8; 16];
    for b in &mut n {
        *b = rng.next_u64() as u8;
    }
    n
}

impl Target {
    fn new(mode: Mode, seed: u64) -> Target {
        let now = Instant::now();
        let security = match mode {
            Mode::Insecure => ServerSecurity::Insecure,
            Mode::Tokens => ServerSecurity::Tokens {
                key: TOKEN_KEY,
                public_addrs: vec![server_addr()],
            },
        };
        let mut ecfg = EndpointConfig::new(0, SERVER_KEY, config(), security);
        ecfg.unix_time_at_start = 1_000_000;
        // Less than the connections' caps together, so runs reach it.
        ecfg.recv_budget = crate::RecvBudget::new(FUZZ_RECV_BUDGET);
        let ep = Endpoint::new(ecfg, now).expect("a valid config");
        let mut t = Target {
            mode,
            rng: Rng::new(seed),
            now,
            ep,
            attackers: Vec::new(),
            players: Vec::new(),
            corpus: Vec::new(),
            reply: vec![0; 1500],
            buf: vec![0; 1500],
            accepted: 0,
            max_call: Duration::ZERO,
        };
        for i in 0..ATTACKERS + PLAYERS {
            let addr: SocketAddr = format!("192.0.2.{}:{}", 10 + i, 5000 + i)
                .parse()
                .expect("literal");
            let (conn, attacker) = t
                .connect(addr)
                .expect("fuzz setup: the handshake completes");
            if i < ATTACKERS {
                t.attackers.push(attacker);
            } else {
                t.players.push(Player { addr, conn });
            }
        }
        t
    }

    /// A new connection from `addr`, as a real client and as an attacker
    /// who writes its own packets with its keys.
    /// `None` when the endpoint refused it (its admission limits).
    fn connect(&mut self, addr: SocketAddr) -> Option<(Connection, Attacker)> {
        let t = self;
        {
            let mode = t.mode;
            let (sec, keys) = match mode {
                Mode::Insecure => (ClientSecurity::Insecure, None),
                Mode::Tokens => {
                    let tok = token_for(&mut t.rng);
                    let keys = SessionKeys {
                        c2s: tok.client_to_server_key,
                        s2c: tok.server_to_client_key,
                    };
                    (ClientSecurity::Token(tok), Some(keys))
                }
            };
            let nonce = nonce16(&mut t.rng);
            let mut conn = Connection::connect(config(), sec, nonce, t.now).expect("config");
            let handle = t.handshake(&mut conn, addr)?;
            let cid = conn.connection_id();
            let attacker = Attacker {
                addr,
                handle,
                cid,
                crypto: keys.map(|k| PacketCrypto::new(&k, true, &nonce, cid)),
                next_pn: 0,
                retry_at: t.now,
            };
            Some((conn, attacker))
        }
    }

    /// Attackers whose connection the endpoint closed or removed connect
    /// again, so the run keeps reaching live connections.
    fn reconnect_attackers(&mut self) {
        for i in 0..self.attackers.len() {
            let a = &self.attackers[i];
            let live = self.ep.connection(a.handle).is_some_and(|c| {
                c.connection_id() == a.cid && c.state() == crate::connection::State::Connected
            });
            if !live && self.now >= a.retry_at {
                // Refused (the address's handshake rate): try again a
                // quarter of a second later.
                match self.connect(a.addr) {
                    Some((_, attacker)) => self.attackers[i] = attacker,
                    None => self.attackers[i].retry_at = self.now + Duration::from_millis(250),
                }
            }
        }
    }

    fn handshake(&mut self, conn: &mut Connection, addr: SocketAddr) -> Option<ConnectionHandle> {
        let mut handle = None;
        for _ in 0..4 {
            let Some(n) = conn.poll_transmit(self.now, &mut self.buf) else {
                break;
            };
            let d = self.buf[..n].to_vec();
            self.keep(d);
            match timed(&mut self.max_call, || {
                self.ep
                    .handle(self.now, addr, &self.buf[..n], &mut self.reply)
            }) {
                Handled::Reply(m) => conn.handle_datagram(self.now, &self.reply[..m]),
                Handled::Accepted(h, m) => {
                    handle = Some(h);
                    conn.handle_datagram(self.now, &self.reply[..m]);
                }
                _ => break,
            }
        }
        while conn.poll_event().is_some() {}
        handle
    }

    /// Receive bytes held beyond a bound: the most any connection holds
    /// over its cap (the next message a reliable channel waits for may
    /// pass `max_recv_buffer` by one message), or the endpoint's budget
    /// over its limit. `(held, limit)` of the worse; `held <= limit` when
    /// every bound holds.
    fn held(&self) -> (usize, usize) {
        let cfg = config();
        let per_conn = cfg.max_recv_buffer + cfg.max_message_size;
        let worst_conn = self
            .ep
            .handles()
            .filter_map(|h| self.ep.connection(h))
            .map(|c| c.recv_buffered())
            .max()
            .unwrap_or(0);
        let budget = self.ep.recv_budget();
        // One lane: no other lane's frame can be in flight past the check.
        let (used, limit) = (budget.used(), budget.limit());
        if worst_conn > per_conn {
            (worst_conn, per_conn)
        } else {
            (used, limit)
        }
    }

    /// Adds a real packet to the corpus: the first `CORPUS` as they come,
    /// then each in place of a random one (a reservoir), so the corpus
    /// keeps changing and stays bounded.
    fn keep(&mut self, d: Vec<u8>) {
        if self.corpus.len() < CORPUS {
            self.corpus.push(d);
        } else if self.rng.chance(0.05) {
            let i = (self.rng.next_u64() as usize) % CORPUS;
            self.corpus[i] = d;
        }
    }

    fn attackers_received(&self) -> u64 {
        self.attackers
            .iter()
            .filter_map(|a| self.ep.connection(a.handle))
            .map(|c| c.packets_received())
            .sum()
    }

    /// One input; returns its longest endpoint call.
    fn step(&mut self) -> Duration {
        self.max_call = Duration::ZERO;
        let before = self.attackers_received();
        match self.rng.next_u64() % 16 {
            0 => self.random_bytes(),
            1 => self.mutated_corpus(),
            2 => self.hello(),
            3 => self.advance(),
            4 => self.players_send(),
            _ => self.attack(),
        }
        self.accepted += self.attackers_received().saturating_sub(before);
        self.drain();
        self.reconnect_attackers();
        self.max_call
    }

    fn random_bytes(&mut self) {
        let len = (self.rng.next_u64() % 1300) as usize;
        let mut d: Vec<u8> = (0..len).map(|_| self.rng.next_u64() as u8).collect();
        // Often keep a live connection's short header, so the bytes reach
        // the connection rather than dying at the router.
        if len > 12 && self.rng.chance(0.5) {
            let a = &self.attackers[(self.rng.next_u64() as usize) % ATTACKERS];
            d[0] = 0x40 | (d[0] & 0x03);
            d[1..9].copy_from_slice(&a.cid.0);
        }
        let from = self.attackers[0].addr;
        // The receive path's look-ahead sees every datagram first.
        let other = self.corpus_sample();
        self.ep.prefetch([d.as_slice(), &other]);
        timed(&mut self.max_call, || {
            self.ep.handle(self.now, from, &d, &mut self.reply)
        });
    }

    /// A datagram of the corpus (or none), beside another in a batch.
    fn corpus_sample(&mut self) -> Vec<u8> {
        if self.corpus.is_empty() {
            return Vec::new();
        }
        let i = (self.rng.next_u64() as usize) % self.corpus.len();
        self.corpus[i].clone()
    }

    fn mutated_corpus(&mut self) {
        if self.corpus.is_empty() {
            return;
        }
        let mut d = self.corpus_sample();
        mutate(&mut self.rng, &mut d);
        let from = self.attackers[1].addr;
        self.ep.prefetch([d.as_slice()]);
        timed(&mut self.max_call, || {
            self.ep.handle(self.now, from, &d, &mut self.reply)
        });
    }

    /// A hello: fresh, replayed from the corpus, or mutated; from an
    /// attacker's address.
    fn hello(&mut self) {
        let mut d = vec![0u8; MIN_HELLO_SIZE + (self.rng.next_u64() % 100) as usize];
        let token;
        let tok: &[u8] = if self.mode == Mode::Tokens && self.rng.chance(0.5) {
            token = token_for(&mut self.rng).sealed;
            &token
        } else {
            &[]
        };
        let mut cookie = [0u8; 20];
        for b in &mut cookie {
            *b = self.rng.next_u64() as u8;
        }
        let n = {
            let mut w = Writer::new(&mut d);
            let _ = Header::Long {
                ty: LongType::Hello,
                cid: ConnectionId::default(),
            }
            .encode(&mut w);
            let _ = Frame::Hello {
                nonce: nonce16(&mut self.rng),
                config_digest: if self.rng.chance(0.8) {
                    config().digest()
                } else {
                    self.rng.next_u64()
                },
                max_ack_delay_us: self.rng.next_u64() % 2_000_000,
                cookie: if self.rng.chance(0.5) { &cookie } else { &[] },
                token: tok,
            }
            .encode(&mut w);
            w.len()
        };
        let _ = n;
        if self.rng.chance(0.3) {
            mutate(&mut self.rng, &mut d);
        }
        let from = self.attackers[2].addr;
        match timed(&mut self.max_call, || {
            self.ep.handle(self.now, from, &d, &mut self.reply)
        }) {
            // Answer a RETRY, so the cookie path is fuzzed too.
            Handled::Reply(m) if self.rng.chance(0.5) => {
                let mut r = Reader::new(&self.reply[..m]);
                if let (Ok(Header::Long { .. }), Ok(Frame::Retry { nonce, cookie })) =
                    (Header::decode(&mut r), Frame::decode(&mut r))
                {
                    let mut d2 = vec![0u8; MIN_HELLO_SIZE];
                    let mut w = Writer::new(&mut d2);
                    let _ = Header::Long {
                        ty: LongType::Hello,
                        cid: ConnectionId::default(),
                    }
                    .encode(&mut w);
                    let _ = Frame::Hello {
                        nonce,
                        config_digest: config().digest(),
                        max_ack_delay_us: self.rng.next_u64() % 1_000_001,
                        cookie,
                        token: tok,
                    }
                    .encode(&mut w);
                    timed(&mut self.max_call, || {
                        self.ep.handle(self.now, from, &d2, &mut self.reply)
                    });
                }
            }
            _ => {}
        }
    }

    fn advance(&mut self) {
        let ms = match self.rng.next_u64() % 10 {
            0 => 1_000 + self.rng.next_u64() % 5_000,
            _ => self.rng.next_u64() % 50,
        };
        self.now += Duration::from_millis(ms);
        timed(&mut self.max_call, || self.ep.handle_timeout(self.now));
        for p in &mut self.players {
            p.conn.handle_timeout(self.now);
        }
    }

    fn players_send(&mut self) {
        let i = (self.rng.next_u64() as usize) % self.players.len();
        let len = match self.rng.next_u64() % 4 {
            0 => (self.rng.next_u64() % 20_000) as usize,
            _ => 1 + (self.rng.next_u64() % 300) as usize,
        };
        let ch = (self.rng.next_u64() % 5) as u8;
        let _ = self.players[i].conn.send(ch, &vec![ch; len]);
    }

    /// A packet from an attacker: valid frames with hostile values,
    /// sometimes mutated after encoding, sealed under its keys.
    fn attack(&mut self) {
        let ai = (self.rng.next_u64() as usize) % ATTACKERS;
        let sent = self
            .ep
            .connection(self.attackers[ai].handle)
            .map_or(0, |c| c.stats().packets_sent);
        let mut body = vec![0u8; 1500];
        let mut blen = 0;
        {
            let mut w = Writer::new(&mut body[..1200 - 13 - TAG_LEN]);
            let frames = 1 + self.rng.next_u64() % 8;
            for _ in 0..frames {
                if !gen_frame(&mut self.rng, &mut w, sent) {
                    break;
                }
            }
            blen = blen.max(w.len());
        }
        body.truncate(blen.max(1));
        if self.rng.chance(0.1) {
            mutate(&mut self.rng, &mut body);
        }
        let a = &mut self.attackers[ai];
        let pn = match self.rng.next_u64() % 20 {
            0 => self.rng.next_u64() % (a.next_pn + 1),
            1 => a.next_pn + self.rng.next_u64() % 100_000,
            _ => a.next_pn,
        };
        a.next_pn = a.next_pn.max(pn + 1);
        let pn_len = 4;
        let mut d = vec![0u8; 1 + 8 + pn_len + body.len() + TAG_LEN];
        let header = {
            let mut w = Writer::new(&mut d);
            let _ = Header::Short {
                cid: a.cid,
                pn,
                pn_len,
            }
            .encode(&mut w);
            let _ = w.bytes(&body);
            1 + 8 + pn_len
        };
        let len = header + body.len();
        let n = match &a.crypto {
            Some(c) => c.seal(pn, &mut d, header, len).unwrap_or(len),
            None => len,
        };
        d.truncate(n);
        let from = a.addr;
        self.ep.prefetch([d.as_slice()]);
        timed(&mut self.max_call, || {
            self.ep.handle(self.now, from, &d, &mut self.reply)
        });
    }

    /// Sends what the endpoint and the players have to send, a bounded
    /// number of datagrams each, the players' to the endpoint and the
    /// endpoint's to the players (or nowhere, for attackers: they never
    /// acknowledge).
    fn drain(&mut self) {
        for _ in 0..64 {
            let Some((_, to, n)) = timed(&mut self.max_call, || {
                self.ep.poll_transmit(self.now, &mut self.buf)
            }) else {
                break;
            };
            if let Some(p) = self.players.iter_mut().find(|p| p.addr == to) {
                p.conn.handle_datagram(self.now, &self.buf[..n]);
                let d = self.buf[..n].to_vec();
                self.keep(d);
            }
        }
        for i in 0..self.players.len() {
            for _ in 0..16 {
                let Some(n) = self.players[i].conn.poll_transmit(self.now, &mut self.buf) else {
                    break;
                };
                let d = self.buf[..n].to_vec();
                self.keep(d);
                let from = self.players[i].addr;
                timed(&mut self.max_call, || {
                    self.ep
                        .handle(self.now, from, &self.buf[..n], &mut self.reply)
                });
            }
            while let Some(e) = self.players[i].conn.poll_event() {
                if let crate::Event::Message { data, .. } = e {
                    self.players[i].conn.recycle(data);
                }
            }
        }
        for _ in 0..10_000 {
            if self.ep.poll_event().is_none() {
                break;
            }
        }
        let _ = self.ep.poll_timeout();
    }

    fn report(&self, r: &mut Report) {
        r.packets_accepted = self.accepted;
        r.budget_refused = self.ep.recv_budget().refused();
        for h in self.ep.handles() {
            if let Some(c) = self.ep.connection(h) {
                r.messages_delivered += c.stats().messages_delivered;
            }
        }
    }
}

/// Bit flips, byte sets, truncation, duplication of a slice.
fn mutate(rng: &mut Rng, d: &mut Vec<u8>) {
    if d.is_empty() {
        d.push(rng.next_u64() as u8);
    }
    for _ in 0..1 + rng.next_u64() % 4 {
        let len = d.len();
        match rng.next_u64() % 5 {
            0 => d[(rng.next_u64() as usize) % len] ^= 1 << (rng.next_u64() % 8),
            1 => d[(rng.next_u64() as usize) % len] = rng.next_u64() as u8,
            2 => d.truncate(1 + (rng.next_u64() as usize) % len),
            3 => {
                let at = (rng.next_u64() as usize) % len;
                let v = [0x00, 0xff, 0x7f, 0x80, 0x3f, 0x40, 0xc0][(rng.next_u64() % 7) as usize];
                d[at] = v;
            }
            _ => {
                let from = (rng.next_u64() as usize) % len;
                let n = ((rng.next_u64() as usize) % 64).min(len - from);
                let chunk = d[from..from + n].to_vec();
                if d.len() + n <= 1400 {
                    let at = (rng.next_u64() as usize) % len;
                    d.splice(at..at, chunk);
                }
            }
        }
    }
}

/// A value drawn toward the edges an attacker picks: 0, small, near
/// powers of two, near `max`, random.
fn edgy(rng: &mut Rng, max: u64) -> u64 {
    let v = match rng.next_u64() % 8 {
        0 => 0,
        1 => rng.next_u64() % 4,
        2 => max,
        3 => max.saturating_sub(rng.next_u64() % 4),
        4 => 1u64 << (rng.next_u64() % 62),
        5 => rng.next_u64() % 64,
        6 => rng.next_u64() % 4096,
        _ => rng.next_u64(),
    };
    v.min(max)
}

/// Writes one valid frame with hostile field values (`sent`: packets the
/// peer sent, which ACKs mostly stay under); false when it did not fit.
fn gen_frame(rng: &mut Rng, w: &mut Writer<'_>, sent: u64) -> bool {
    let room = w.remaining();
    if room < 4 {
        return false;
    }
    let payload = [0xabu8; 1200];
    let plen = |rng: &mut Rng, room: usize| -> usize {
        let max = room.saturating_sub(40).clamp(1, 1200);
        // Slivers (the reassembly's worst case, mostly refused) and pieces
        // big enough to be taken (what fills the budget).
        match rng.next_u64() % 4 {
            0 => 1,
            1 => 1 + (rng.next_u64() as usize) % 16,
            2 => 1 + (rng.next_u64() as usize) % max,
            _ => max,
        }
        .min(max)
    };
    // Mostly a configured channel: one bad frame voids its whole packet.
    let channel = if rng.chance(0.97) {
        (rng.next_u64() % 5) as u8
    } else {
        edgy(rng, 255) as u8
    };
    let seq_base = match rng.next_u64() % 4 {
        0 => rng.next_u64() % 64,
        1 => rng.next_u64() % 70_000,
        2 => edgy(rng, (1 << 62) - 1),
        _ => rng.next_u64() % 1024,
    };
    match rng.next_u64() % 200 {
        0..=9 => Frame::Ping.encode(w).is_ok(),
        10..=39 => {
            // Up to 256 ranges, gaps of any size, below a largest near
            // what was sent or far beyond it.
            let largest = match rng.next_u64() % 8 {
                0 => edgy(rng, (1 << 62) - 1),
                1 => sent,
                _ => rng.next_u64() % sent.max(1),
            };
            let mut ranges = Vec::new();
            let mut hi = largest;
            for _ in 0..1 + rng.next_u64() % 257 {
                let len = edgy(rng, hi.min(8));
                let lo = hi - len;
                ranges.push((lo, hi));
                let gap = 2 + edgy(rng, 16);
                if lo < gap {
                    break;
                }
                hi = lo - gap;
            }
            Frame::encode_ack(w, edgy(rng, 1 << 40), &ranges).is_ok()
        }
        40..=99 => {
            let n = plen(rng, room);
            Frame::Message {
                channel,
                seq: seq_base,
                payload: &payload[..n],
            }
            .encode(w)
            .is_ok()
        }
        100..=198 => {
            let max = config().max_message_size as u64;
            let total = match rng.next_u64() % 8 {
                0 => max,
                1 => edgy(rng, u32::MAX as u64),
                2 | 3 => 1 + rng.next_u64() % 5000,
                _ => 1 + rng.next_u64() % max,
            } as u32;
            let n = plen(rng, room).min(total.max(1) as usize);
            let total = total.max(1);
            let offset = match rng.next_u64() % 4 {
                0 => 0,
                // 1-byte pieces at alternating offsets.
                1 => (rng.next_u64() % 2 * 2) as u32 + (rng.next_u64() % 64 * 4) as u32,
                2 => total - n as u32,
                _ => (rng.next_u64() % u64::from(total)) as u32,
            }
            .min(total - n as u32);
            Frame::Fragment {
                channel,
                seq: seq_base,
                total,
                offset,
                payload: &payload[..n],
            }
            .encode(w)
            .is_ok()
        }
        _ => Frame::Close {
            code: edgy(rng, (1 << 62) - 1),
            reason: &payload[..(rng.next_u64() % 129) as usize],
        }
        .encode(w)
        .is_ok(),
    }
}

/// Random bytes and generated frames through the frame decoder alone:
/// every generated frame decodes to itself; no input panics.
pub(crate) fn decoder(seed: u64, inputs: u64) {
    let mut rng = Rng::new(seed);
    let mut buf = vec![0u8; 1400];
    for _ in 0..inputs {
        let n = {
            let mut w = Writer::new(&mut buf);
            gen_frame(&mut rng, &mut w, 1000);
            w.len()
        };
        let mut r = Reader::new(&buf[..n]);
        let f = Frame::decode(&mut r).expect("a generated frame decodes");
        assert!(r.is_empty(), "a generated frame decodes whole: {f:?}");
        let mut again = vec![0u8; 1400];
        let m = {
            let mut w = Writer::new(&mut again);
            f.encode(&mut w).expect("fits");
            w.len()
        };
        assert_eq!(&again[..m], &buf[..n], "re-encoding {f:?}");
        let mut d = buf[..n].to_vec();
        mutate(&mut rng, &mut d);
        let mut r = Reader::new(&d);
        while !r.is_empty() {
            if Frame::decode(&mut r).is_err() {
                break;
            }
        }
        let len = (rng.next_u64() % 64) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        let mut r = Reader::new(&junk);
        let _ = Header::decode(&mut r);
        while !r.is_empty() {
            if Frame::decode(&mut r).is_err() {
                break;
            }
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// The slowest steps under the limit that are also re-timed.
const TOP_STEPS: usize = 16;
/// Steps over the limit kept for re-timing at most; more is a slow path,
/// not preemption on a busy machine.
const MAX_SLOW_STEPS: usize = 10_000;

/// Replays `mode`/`seed` up to the last of `steps` (sorted) and times each
/// of `steps` again.
fn retime(mode: Mode, seed: u64, steps: &[u64]) -> Vec<Duration> {
    let mut t = Target::new(mode, seed);
    let mut times = Vec::with_capacity(steps.len());
    let mut next = steps.iter().peekable();
    let last = steps.last().copied().unwrap_or(0);
    for i in 0..=last {
        if next.peek() == Some(&&i) {
            next.next();
            times.push(t.step());
        } else {
            t.step();
        }
    }
    times
}

/// Resident memory of this process, from /proc/self/statm (0 elsewhere).
fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// One seeded run of `inputs` steps. A step over `step_limit` is timed
/// twice more at the end, by replaying the run from its seed (a run is
/// deterministic), and fails the run only if it is over every time.
pub(crate) fn run(
    mode: Mode,
    seed: u64,
    inputs: u64,
    max_time: Duration,
    step_limit: Duration,
) -> Result<Report, Failure> {
    let started = Instant::now();
    let mut report = Report::default();
    let mut t = Target::new(mode, seed);
    let mut slow: Vec<(u64, Duration)> = Vec::new();
    // The slowest steps under the limit, also timed again at the end, so
    // the worst figure is not one preemption.
    let mut top: Vec<(u64, Duration)> = Vec::with_capacity(TOP_STEPS + 1);
    report.rss_start = rss_bytes();
    for i in 0..inputs {
        // Bounded in time as well as in count: a slow machine runs fewer
        // inputs rather than longer.
        if i > 0 && i % 256 == 0 && started.elapsed() > max_time {
            break;
        }
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.step()));
        let took = match res {
            Ok(d) => d,
            Err(p) => {
                return Err(Failure::Panic {
                    step: i,
                    message: panic_message(p),
                })
            }
        };
        report.inputs += 1;
        if took > report.worst_step {
            report.worst_step = took;
            report.worst_step_index = i;
        }
        if took > step_limit {
            if slow.len() == MAX_SLOW_STEPS {
                return Err(Failure::Slow {
                    step: i,
                    times: vec![took],
                });
            }
            slow.push((i, took));
        } else if top.len() < TOP_STEPS || took > top[TOP_STEPS - 1].1 {
            let at = top.partition_point(|c| c.1 >= took);
            top.insert(at, (i, took));
            top.truncate(TOP_STEPS);
        }
        let (held, budget) = t.held();
        report.peak_held = report.peak_held.max(t.ep.recv_budget().used());
        if held > budget {
            return Err(Failure::OverBudget {
                step: i,
                held,
                budget,
            });
        }
        if i % 65_536 == 0 {
            report.rss_peak = report.rss_peak.max(rss_bytes());
        }
    }
    report.rss_peak = report.rss_peak.max(rss_bytes());
    t.report(&mut report);
    drop(t);
    // Re-time the slow steps and the slowest others: each keeps its least
    // time of three.
    report.slow_steps = slow.len() as u64;
    // Every step not re-timed was at most this fast when first timed.
    let rest = if top.len() == TOP_STEPS {
        top[TOP_STEPS - 1].1
    } else {
        Duration::ZERO
    };
    let mut timed: Vec<(u64, Duration)> = slow.iter().chain(&top).copied().collect();
    timed.sort_by_key(|c| c.0);
    for _ in 0..2 {
        let steps: Vec<u64> = timed.iter().map(|c| c.0).collect();
        if steps.is_empty() {
            break;
        }
        let again = retime(mode, seed, &steps);
        for (c, d) in timed.iter_mut().zip(again) {
            c.1 = c.1.min(d);
        }
    }
    if let Some(&(step, least)) = timed.iter().find(|c| c.1 > step_limit) {
        return Err(Failure::Slow {
            step,
            times: vec![least],
        });
    }
    let worst = timed.iter().max_by_key(|c| c.1).copied();
    report.worst_step_retimed = worst.map_or(rest, |w| w.1.max(rest));
    report.worst_slow_retimed = worst.map(|w| (w.1, w.0));
    Ok(report)
}

/// The step limit: 1 ms in an optimized build; a debug build (the suite's)
/// runs the same code 10x to 50x slower, so it gets 50 ms, which still
/// catches a quadratic path (they cost seconds there).
pub(crate) fn default_step_limit() -> Duration {
    if cfg!(debug_assertions) {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(1)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(mode: Mode) {
        let seed = env_u64("KEEL_FUZZ_SEED", 1);
        let inputs = env_u64("KEEL_FUZZ_INPUTS", 4_000);
        let secs = env_u64("KEEL_FUZZ_SECONDS", 20);
        match run(
            mode,
            seed,
            inputs,
            Duration::from_secs(secs),
            default_step_limit(),
        ) {
            Ok(r) => {
                eprintln!("fuzz {mode:?} seed {seed}: {r:?}");
                // The run must have got past the header and the tag, or it
                // fuzzed nothing but the router.
                assert!(r.inputs >= 256, "{r:?}");
                assert!(r.packets_accepted > r.inputs / 4, "{r:?}");
                assert!(r.messages_delivered > 0, "{r:?}");
            }
            Err(f) => panic!("fuzz {mode:?} seed {seed}: {f:?} (replay: KEEL_FUZZ_SEED={seed})"),
        }
    }

    #[test]
    fn endpoint_insecure() {
        check(Mode::Insecure);
    }

    #[test]
    fn endpoint_tokens() {
        check(Mode::Tokens);
    }

    #[test]
    fn frame_decoder() {
        decoder(
            env_u64("KEEL_FUZZ_SEED", 1),
            env_u64("KEEL_FUZZ_INPUTS", 20_000),
        );
    }

    /// The long run, for scripts/fuzz.sh: `KEEL_FUZZ_INPUTS` steps per
    /// mode (default 1 million) from `KEEL_FUZZ_SEED`, in release.
    #[test]
    #[ignore = "long: scripts/fuzz.sh runs it"]
    fn long_run() {
        let seed = env_u64("KEEL_FUZZ_SEED", 1);
        let inputs = env_u64("KEEL_FUZZ_INPUTS", 1_000_000);
        let mode = match std::env::var("KEEL_FUZZ_MODE").as_deref() {
            Ok("tokens") => Mode::Tokens,
            Ok("decoder") => {
                let start = Instant::now();
                decoder(seed, inputs);
                println!(
                    "fuzz decoder seed {seed}: {inputs} inputs in {:?}",
                    start.elapsed()
                );
                return;
            }
            _ => Mode::Insecure,
        };
        let start = Instant::now();
        let secs = env_u64("KEEL_FUZZ_SECONDS", u64::MAX / 4);
        match run(
            mode,
            seed,
            inputs,
            Duration::from_secs(secs),
            default_step_limit(),
        ) {
            Ok(r) => {
                // Receive state is counted against the budget; this catches
                // what is not counted: RSS may not grow past the start by
                // more than a fixed allowance, however long the run.
                let grown = r.rss_peak.saturating_sub(r.rss_start);
                assert!(
                    grown <= FUZZ_RSS_GROWTH,
                    "fuzz {mode:?} seed {seed}: RSS grew {grown} B (from {} B), over {FUZZ_RSS_GROWTH} B",
                    r.rss_start
                );
                println!(
                "fuzz {mode:?} seed {seed}: {} inputs in {:?}, worst step {:?} as first timed, {} over 1 ms; re-timed (those and the 16 slowest others, least of three), the slowest is {:?} (time, input); every step at most {:?}; RSS {} MiB at most ({} MiB at the start), peak held {} B (budget {} B, {} frames refused at it), {} packets accepted, {} messages delivered",
                r.inputs,
                start.elapsed(),
                r.worst_step,
                r.slow_steps,
                r.worst_slow_retimed,
                r.worst_step_retimed,
                r.rss_peak >> 20,
                r.rss_start >> 20,
                r.peak_held,
                FUZZ_RECV_BUDGET,
                r.budget_refused,
                r.packets_accepted,
                r.messages_delivered
            )
            }
            Err(f) => panic!("fuzz {mode:?} seed {seed}: {f:?}"),
        }
    }
}
