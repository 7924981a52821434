//! A connection, sans-IO: bytes in, bytes out, time passed in. The state
//! and its life (this file), the receive path (`input`), the send path
//! (`output`) and the public types (`types`).

mod close;
pub use close::CLOSE_ACK_TIMEOUT;
mod fec;
mod input;
mod output;
#[cfg(test)]
mod packets;
#[cfg(test)]
mod size;
mod types;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::budget::{send_cost, RecvBudget, RecvMem, SendBudget, SendMem};
use crate::cc::{NewReno, Pacer};
use crate::channel::{RecvChannel, SendChannel};
use crate::config::{Config, ConfigError};
use crate::pool::BufPool;
use crate::ranges::RangeSet;
use crate::recovery::{ChunkRef, Recovery};
use crate::rtt::RttEstimator;
use crate::scratch;
use crate::security::{ClientSecurity, PacketCrypto, SessionKeys, TokenClaims, TAG_LEN};
use crate::wire::{ConnectionId, SHORT_HEADER_MAX_LEN};

pub use types::{
    ChannelUndelivered, DisconnectReason, Event, MessageId, SendError, Side, State, Stats,
    Undelivered,
};

/// Room kept for the ACK frame in every packet.
const ACK_ROOM: usize = 48;
/// The most ACK ranges sent in a frame beside data (an ACK-only packet
/// carries every range it has room for).
const MAX_ACK_RANGES_SENT: usize = 16;
/// The most bytes a FRAGMENT frame takes besides its payload.
const MAX_FRAGMENT_OVERHEAD: usize = 1 + 1 + 8 + 8 + 8 + 8;
/// Received packet numbers remembered as ranges (for duplicates).
const RECEIVED_RANGES: usize = 1024;
/// Messages scanned per channel for redundancy.
const REDUNDANCY_SCAN: usize = 64;
/// Ack-eliciting packets that are acknowledged at once, on a clean link,
/// while the acknowledgement can ride on this end's next tick: a peer's
/// packets at the same tick, delayed with jitter, arrive two between two
/// ticks now and then, and the RFC's every-second-packet rule then sent an
/// acknowledgement alone (one datagram in six at 60 Hz with 3 ms of
/// jitter each way). Under loss it stays 2: the acknowledgement of a pair
/// tells the peer's loss detection sooner (p99 7 % lower at 20 % loss in
/// the simulator).
const TICK_ACK_PACKETS: u32 = 3;
/// Packets the loss average spans (its weight is 1/64 a packet).
const LOSS_AVERAGE: u32 = 64;
/// The loss average a connection starts at: 1/16 (6.25 %), above
/// [`REDUNDANCY_MIN_LOSS`](crate::REDUNDANCY_MIN_LOSS), so channel
/// redundancy protects the first packets; on a clean link it falls below
/// 1 % after about 120 packets.
const LOSS_START: u32 = 1 << 12;
pub(crate) use crate::scratch::PROBE_CHUNKS;
/// One connection's protocol state, without I/O.
///
/// Drive it with [`Connection::handle_datagram`] for every datagram from
/// the peer, [`Connection::handle_timeout`] when [`Connection::poll_timeout`]
/// passes, and after each of those (and after [`Connection::send`]) call
/// [`Connection::poll_transmit`] until it returns `None`, sending each
/// datagram it fills. Events come from [`Connection::poll_event`].
///
/// # Examples
///
/// Two connected ends, with the datagrams carried by hand:
///
/// ```
/// use std::time::Instant;
/// use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Connection, ConnectionId, Event, Side};
///
/// let config = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
/// let now = Instant::now();
/// let cid = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);
/// let mut a = Connection::established(config.clone(), Side::Client, cid, now).unwrap();
/// let mut b = Connection::established(config, Side::Server, cid, now).unwrap();
/// a.send(0, b"hello").unwrap();
/// let mut buf = [0u8; 1500];
/// while let Some(n) = a.poll_transmit(now, &mut buf) {
///     b.handle_datagram(now, &buf[..n]);
/// }
/// assert_eq!(b.poll_event(), Some(Event::Connected));
/// assert_eq!(b.poll_event(), Some(Event::Message { channel: 0, data: b"hello".to_vec() }));
/// ```
pub struct Connection {
    /// Shared by the connections of an endpoint (one copy per server lane,
    /// not one per connection).
    cfg: Arc<Config>,
    side: Side,
    state: State,
    cid: ConnectionId,
    digest: u64,
    // Client handshake.
    nonce: [u8; 16],
    /// What only a client's handshake needs (dropped when it ends; a
    /// server's connections never have it).
    hs: Option<Box<Handshake>>,
    // Reliability.
    recovery: Recovery,
    rtt: RttEstimator,
    cc: NewReno,
    pacer: Pacer,
    received: RangeSet,
    ack_floor: u64,
    ack_eliciting_unacked: u32,
    first_unacked_at: Option<Instant>,
    ack_immediate: bool,
    /// The interval between this end's ack-eliciting packets, a moving
    /// average in µs (0: not sending at a steady interval within
    /// `tick_ack_delay`): an acknowledgement may wait for the next one
    /// (`ack_due_at`).
    tick_us: u32,
    largest_recv_time: Option<Instant>,
    probes_pending: u8,
    /// Packet loss measured, a moving average over about the last
    /// [`LOSS_AVERAGE`] ack-eliciting packets judged (acknowledged or
    /// lost), in units of 2^-16; starts at [`LOSS_START`] (channel
    /// redundancy is on until a clean link shows otherwise).
    loss_avg: u32,
    /// Whether that loss is high, by a slower average: channel
    /// redundancy's plans for high loss apply.
    loss_watch: crate::fec::LossWatch,
    /// A copy asked for by a channel's redundancy did not fit in the last
    /// packet: the next `poll_transmit` sends a packet for it.
    copies_waiting: bool,
    /// Forward error correction's receive side, once a PARITY came.
    fec: Option<Box<crate::fec::FecRecv>>,
    // Channels.
    send: Vec<SendChannel>,
    recv: Vec<RecvChannel>,
    /// What `recv` holds, against `max_recv_buffer` and the endpoint's budget.
    recv_mem: RecvMem,
    order: Vec<u8>,
    chunk_size: usize,
    /// Bytes of messages queued or unacknowledged (`max_send_buffer`).
    send_buffered: usize,
    /// Those with their overhead, against the endpoint's send budget.
    send_mem: SendMem,
    // Reuse.
    pool: BufPool,
    chunk_pool: Vec<Vec<ChunkRef>>,
    events: VecDeque<Event>,
    // Timers.
    last_recv: Instant,
    last_eliciting_sent: Instant,
    now_hint: Instant,
    /// Since when packets that need an acknowledgement have waited for
    /// one (the first sent since the last acknowledgement of one).
    unacked_since: Option<Instant>,
    /// The state of a close or of draining (see `close`), allocated when
    /// one begins: a connection that is up holds a pointer.
    end: Option<Box<types::Closing>>,
    stats: types::Counters,
    // Security: the packet AEAD once connected (boxed: an insecure
    // connection holds a pointer instead of 400 bytes).
    crypto: Option<Box<PacketCrypto>>,
    claims: Option<Box<TokenClaims>>,
}

/// A client's handshake: the HELLO's cookie and token, its timers, and
/// the keys the token carries until the ACCEPT names the connection.
struct Handshake {
    /// The RETRY's cookie (empty until one comes; at most
    /// `MAX_COOKIE_LEN` bytes).
    cookie: Vec<u8>,
    /// The sealed connect token to present (empty in insecure mode).
    token: Vec<u8>,
    keys: Option<SessionKeys>,
    hello_next: Instant,
    hello_interval: Duration,
    deadline: Instant,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("side", &self.side)
            .field("state", &self.state)
            .field("cid", &self.cid)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(
        cfg: Arc<Config>,
        side: Side,
        state: State,
        cid: ConnectionId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut order: Vec<u8> = (0..cfg.channels.len()).map(|i| i as u8).collect();
        order.sort_by_key(|&i| cfg.channels[i as usize].priority);
        let chunk_size = cfg.max_datagram_size
            - SHORT_HEADER_MAX_LEN
            - ACK_ROOM
            - 1
            - MAX_FRAGMENT_OVERHEAD
            - TAG_LEN;
        Ok(Connection {
            side,
            state,
            cid,
            digest: cfg.digest(),
            nonce: [0; 16],
            hs: (state == State::Handshaking).then(|| {
                Box::new(Handshake {
                    cookie: Vec::new(),
                    token: Vec::new(),
                    keys: None,
                    hello_next: now,
                    hello_interval: cfg.initial_rtt,
                    deadline: now + cfg.handshake_timeout,
                })
            }),
            recovery: Recovery::new(cfg.announced_ack_delay()),
            rtt: RttEstimator::new(cfg.initial_rtt),
            cc: NewReno::new(cfg.max_datagram_size),
            pacer: Pacer::new(cfg.max_datagram_size),
            received: RangeSet::new(RECEIVED_RANGES),
            ack_floor: 0,
            ack_eliciting_unacked: 0,
            first_unacked_at: None,
            ack_immediate: false,
            tick_us: 0,
            largest_recv_time: None,
            probes_pending: 0,
            send: cfg.channels.iter().map(|c| SendChannel::new(*c)).collect(),
            recv: cfg
                .channels
                .iter()
                .map(|c| RecvChannel::new(c.kind))
                .collect(),
            recv_mem: RecvMem::new(cfg.max_recv_buffer, cfg.max_message_size),
            order,
            chunk_size,
            send_buffered: 0,
            send_mem: SendMem::default(),
            pool: BufPool,
            chunk_pool: Vec::new(),
            // One event at a time is the common case (a driver polls after
            // each datagram): the queue grows past it only when needed.
            events: VecDeque::with_capacity(1),
            last_recv: now,
            last_eliciting_sent: now,
            now_hint: now,
            unacked_since: None,
            end: None,
            stats: types::Counters::default(),
            loss_avg: LOSS_START,
            loss_watch: crate::fec::LossWatch::default(),
            copies_waiting: false,
            fec: None,
            crypto: None,
            claims: None,
            cfg,
        })
    }

    /// A client connection: its hello goes out on the first
    /// [`Connection::poll_transmit`]. `nonce` must be unpredictable (16
    /// random bytes from the OS); it ties the server's answers to this
    /// attempt. `security` is the connect token from the game's backend,
    /// or [`ClientSecurity::Insecure`] by name.
    pub fn connect(
        cfg: Config,
        security: ClientSecurity,
        nonce: [u8; 16],
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let mut c = Connection::new(
            Arc::new(cfg),
            Side::Client,
            State::Handshaking,
            ConnectionId::default(),
            now,
        )?;
        c.nonce = nonce;
        if let (ClientSecurity::Token(t), Some(hs)) = (security, c.hs.as_mut()) {
            hs.token = t.sealed;
            hs.keys = Some(SessionKeys {
                c2s: t.client_to_server_key,
                s2c: t.server_to_client_key,
            });
        }
        Ok(c)
    }

    /// A connection already past its handshake, with connection ID `cid`:
    /// what the server's endpoint creates on a valid hello, and what tests
    /// and custom handshakes (connect tokens) start from. Emits
    /// [`Event::Connected`].
    pub fn established(
        cfg: Config,
        side: Side,
        cid: ConnectionId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Connection::established_shared(Arc::new(cfg), side, cid, now)
    }

    /// As [`Connection::established`], with a configuration shared with
    /// other connections (an endpoint's).
    pub(crate) fn established_shared(
        cfg: Arc<Config>,
        side: Side,
        cid: ConnectionId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let mut c = Connection::new(cfg, side, State::Connected, cid, now)?;
        c.events.push_back(Event::Connected);
        Ok(c)
    }

    /// The peer's max ack delay, from the handshake: loss detection and
    /// RTT samples allow for it. Until the handshake tells, the peer is
    /// taken to hold acknowledgements as long as this end does.
    pub(crate) fn set_peer_max_ack_delay(&mut self, d: Duration) {
        self.recovery.max_ack_delay = d;
    }

    /// When a connection draining from `now` (the peer's latest CLOSE)
    /// ends: three probe timeouts, allowing for the peer's ack delay, and
    /// at least a quarter of `close_timeout`, two of the longest gaps
    /// between the peer's repeats of its CLOSE (if it has this end's
    /// settings): a repeat whose acknowledgement was lost is still
    /// answered.
    pub(super) fn closing_deadline(&self, now: Instant) -> Instant {
        now + (self.rtt.pto(self.recovery.max_ack_delay) * 3).max(self.cfg.close_timeout / 4)
    }

    /// The longest the peer holds an acknowledgement back, as it announced
    /// in the handshake (this end's own `max_ack_delay` until then).
    pub fn peer_max_ack_delay(&self) -> Duration {
        self.recovery.max_ack_delay
    }

    /// Client or server.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The connection ID (zero on a client before the ACCEPT).
    pub fn connection_id(&self) -> ConnectionId {
        self.cid
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The client's hello nonce.
    pub fn nonce(&self) -> [u8; 16] {
        self.nonce
    }

    /// Queues a message on `channel`. Reliable channels keep it until the
    /// peer acknowledges it; the others send it once.
    ///
    /// # Errors
    ///
    /// Nothing is queued on an error. [`SendError::Backpressure`]: this
    /// connection holds `max_send_buffer` (its peer is slow or does not
    /// acknowledge); [`SendError::BudgetSpent`]: the endpoint's shared
    /// [`SendBudget`] is spent (the server as a whole holds too much,
    /// whatever this connection does); the others name the setting.
    pub fn send(&mut self, channel: u8, data: &[u8]) -> Result<MessageId, SendError> {
        if !matches!(self.state, State::Connected | State::Handshaking) {
            return Err(SendError::Closed);
        }
        let channels = self.send.len();
        if channel as usize >= channels {
            return Err(SendError::UnknownChannel { channel, channels });
        }
        if data.len() > self.cfg.max_message_size {
            return Err(SendError::MessageTooLarge {
                len: data.len(),
                max: self.cfg.max_message_size,
            });
        }
        if self.send_buffered + data.len() > self.cfg.max_send_buffer {
            return Err(SendError::Backpressure {
                queued: self.send_buffered,
                len: data.len(),
                cap: self.cfg.max_send_buffer,
            });
        }
        if let Err((used, limit)) = self.send_mem.try_take(send_cost(data.len())) {
            self.stats.send_budget_refused += 1;
            return Err(SendError::BudgetSpent {
                used,
                len: data.len(),
                limit,
            });
        }
        let mut free = crate::scratch::take_msgs();
        let seq = self.send[channel as usize].push(data, self.chunk_size, &mut free);
        crate::scratch::give_msgs(free);
        self.recount_send_buffered();
        Ok(MessageId { channel, seq })
    }

    /// Recounts what the send queues hold after a change (a send, an
    /// acknowledgement, unreliable messages sent): the shared budget sees
    /// the difference in one atomic operation, none if there is none.
    fn recount_send_buffered(&mut self) {
        let (mut bytes, mut cost) = (0, 0);
        for c in &self.send {
            bytes += c.queued_bytes;
            cost += c.queued_cost;
        }
        self.send_buffered = bytes;
        self.send_mem.set_held(cost);
    }

    /// Draws this connection's send queues from `budget` too, beside its
    /// own `max_send_buffer`: what an [`Endpoint`](crate::Endpoint) does
    /// for each connection it creates, so all connections of a server
    /// share one [`SendBudget`]. What it holds already moves onto it.
    pub fn set_send_budget(&mut self, budget: SendBudget) {
        self.send_mem.set_budget(budget);
    }

    /// Bytes of messages queued or awaiting acknowledgement over all
    /// channels (what `max_send_buffer` bounds; cheap, unlike
    /// [`Connection::stats`]): the connections holding the most are the
    /// ones to look at when sends fail with [`SendError::BudgetSpent`].
    pub fn send_buffered(&self) -> usize {
        self.send_buffered
    }

    /// Sends refused for the shared send budget (cheap:
    /// [`Stats::send_budget_refused`]).
    pub(crate) fn send_budget_refusals(&self) -> u64 {
        self.stats.send_budget_refused
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether its packets are sealed (a connect token was used).
    pub fn is_secure(&self) -> bool {
        self.crypto.is_some()
    }

    /// What the client's connect token said (server side, secure mode).
    pub fn token_claims(&self) -> Option<&TokenClaims> {
        self.claims.as_deref()
    }

    /// Seals this server-side connection with the keys of `claims`, bound
    /// to the client's hello `nonce` and the connection ID.
    pub(crate) fn secure(&mut self, claims: TokenClaims, nonce: [u8; 16]) {
        let keys = SessionKeys {
            c2s: claims.c2s,
            s2c: claims.s2c,
        };
        self.crypto = Some(Box::new(PacketCrypto::new(&keys, false, &nonce, self.cid)));
        self.claims = Some(Box::new(claims));
    }

    /// True when [`Connection::poll_event`] has something.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Draws this connection's receive memory from `budget` too, beside its
    /// own `max_recv_buffer`: what an [`Endpoint`](crate::Endpoint) does
    /// for each connection it creates, so all connections of a server
    /// share one [`RecvBudget`]. What it holds already moves onto it.
    pub fn set_recv_budget(&mut self, budget: RecvBudget) {
        self.recv_mem.set_budget(budget);
    }

    /// Bytes of receive state held now (cheap: what
    /// [`Stats::recv_buffered`] reports).
    pub fn recv_buffered(&self) -> usize {
        self.recv_mem.held()
    }

    /// Message frames refused for the shared budget, and for the window
    /// (cheap: [`Stats::budget_refused`], [`Stats::window_refused`]).
    pub(crate) fn recv_refusals(&self) -> (u64, u64) {
        (self.stats.budget_refused, self.stats.window_refused)
    }

    /// Gives a delivered message's buffer back for reuse.
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.pool.give(data);
    }

    /// Packets received and accepted (cheap: [`Connection::stats`] copies
    /// the per-channel queue sizes into a new vector).
    pub fn packets_received(&self) -> u64 {
        self.stats.packets_received
    }

    /// Counters and estimates.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.to_stats();
        s.smoothed_rtt = self.rtt.smoothed();
        s.rttvar = self.rtt.var();
        s.min_rtt = self.rtt.min();
        s.latest_rtt = self.rtt.latest();
        let judged = s.packets_acked + s.packets_lost;
        s.loss_rate = if judged == 0 {
            0.0
        } else {
            s.packets_lost as f64 / judged as f64
        };
        s.spurious_losses = self.recovery.spurious_losses;
        s.bytes_in_flight = self.recovery.bytes_in_flight;
        s.congestion_window = self.cc.window();
        s.queued_bytes = self.send.iter().map(|c| c.queued_bytes).collect();
        s.recv_buffered = self.recv_mem.held();
        s.partials_evicted = self.recv.iter().map(|c| c.evicted).sum();
        s
    }

    /// Bytes queued or unacknowledged on `channel` (0 for no such channel).
    pub fn queued_bytes(&self, channel: u8) -> usize {
        self.send
            .get(channel as usize)
            .map_or(0, |c| c.queued_bytes)
    }

    // ---- timers ------------------------------------------------------

    /// [`Endpoint::prefetch`](crate::Endpoint::prefetch)'s second pass:
    /// the allocations this connection's own lines point to that handling a
    /// packet and sending the answer read (channels, the oldest and newest
    /// packets in flight, the event queue, the chunk-list pool).
    pub(crate) fn prefetch_children(&self) {
        use crate::sys::{prefetch, prefetch_span};
        prefetch_span(
            self.send.as_ptr().cast(),
            std::mem::size_of_val(self.send.as_slice()),
        );
        prefetch_span(
            self.recv.as_ptr().cast(),
            std::mem::size_of_val(self.recv.as_slice()),
        );
        prefetch(self.order.as_ptr());
        prefetch(self.events.as_slices().0.as_ptr());
        prefetch(self.chunk_pool.as_ptr_range().end.wrapping_sub(1));
        self.recovery.prefetch_ends();
    }

    /// [`Endpoint::prefetch`](crate::Endpoint::prefetch)'s third pass: what
    /// the second pass's lines point to (the oldest message of each channel,
    /// the chunk lists of the packets in flight).
    pub(crate) fn prefetch_grandchildren(&self) {
        for c in &self.send {
            c.prefetch_oldest();
        }
        self.recovery.prefetch_chunks();
    }

    /// The next instant [`Connection::handle_timeout`] must run, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let soon = self.now_hint;
        match self.state {
            State::Closed => None,
            State::Handshaking => self.hs.as_ref().map(|h| h.hello_next.min(h.deadline)),
            State::Closing => self.closing_timeout(soon),
            State::Draining => match self.end.as_deref() {
                Some(e) if e.drain_ack => Some(soon),
                e => e.and_then(|e| e.deadline),
            },
            State::Connected => {
                let mut t = self.last_recv + self.cfg.idle_timeout;
                t = t.min(self.last_eliciting_sent + self.cfg.keepalive_interval);
                for x in [self.flow_timeout(soon), self.ack_timeout_at()]
                    .into_iter()
                    .flatten()
                {
                    t = t.min(x);
                }
                Some(t)
            }
        }
    }

    /// The timers of the flow of data: loss detection, delayed
    /// acknowledgements, probes, the pacer.
    fn flow_timeout(&self, soon: Instant) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        at(self.recovery.timeout(&self.rtt));
        at(self.ack_due_at(soon));
        if self.probes_pending > 0 {
            at(Some(soon));
        }
        if self.cfg.congestion_control
            && self.recovery.bytes_in_flight + self.cfg.max_datagram_size <= self.cc.window()
            && self.send.iter().any(|c| c.cfg.bulk && c.has_sendable())
        {
            let mut p = self.pacer.clone();
            at(p.delay(
                soon,
                self.cfg.max_datagram_size,
                self.cc.window(),
                self.rtt.smoothed(),
            ));
        }
        t
    }

    /// Loss detection's timer: losses by time, or a probe.
    fn run_recovery_timer(&mut self, now: Instant) {
        let mut lost = scratch::take_packets();
        if self.recovery.on_timeout(now, &self.rtt, &mut lost) {
            self.probes_pending = 1;
        }
        self.on_lost(now, &mut lost);
        scratch::give_packets(lost);
    }

    /// Runs the timers due at `now`: loss detection, probes, the idle and
    /// ack timeouts, the handshake timeout, the steps and end of closing.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now_hint = now;
        match self.state {
            State::Closed => {}
            State::Handshaking => {
                if self.hs.as_ref().is_none_or(|h| now >= h.deadline) {
                    self.state = State::Closed;
                    self.hs = None;
                    self.events
                        .push_back(Event::Disconnected(DisconnectReason::HandshakeTimeout));
                }
            }
            State::Closing => self.closing_handle_timeout(now),
            State::Draining => {
                if self
                    .end
                    .as_ref()
                    .is_none_or(|e| e.deadline.is_some_and(|d| now >= d))
                {
                    self.state = State::Closed;
                }
            }
            State::Connected => {
                if now >= self.last_recv + self.cfg.idle_timeout {
                    self.state = State::Closed;
                    self.events
                        .push_back(Event::Disconnected(DisconnectReason::IdleTimeout));
                    return;
                }
                if self.ack_timeout_at().is_some_and(|t| now >= t) {
                    self.ack_timed_out();
                    return;
                }
                self.run_recovery_timer(now);
            }
        }
    }
}
