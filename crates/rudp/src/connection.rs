//! A connection, sans-IO: bytes in, bytes out, time passed in.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use crate::cc::{NewReno, Pacer};
use crate::channel::{ChunkState, OutMsg, RecvChannel, RecvCtx, RecvOutcome, SendChannel};
use crate::config::{Config, ConfigError};
use crate::pool::BufPool;
use crate::ranges::RangeSet;
use crate::recovery::{ChunkRef, Recovery, SentPacket};
use crate::rtt::RttEstimator;
use crate::wire::{
    decode_packet_number, encode_packet_number_len, ConnectionId, DecodeError, Frame, FrameType,
    Header, LongType, Reader, Writer, MAX_COOKIE_LEN, MAX_REASON_LEN, MIN_HELLO_SIZE,
    SHORT_HEADER_MAX_LEN,
};

/// Room kept for the ACK frame in every packet.
const ACK_ROOM: usize = 48;
/// The most ACK ranges sent in one frame.
const MAX_ACK_RANGES_SENT: usize = 16;
/// The most bytes a FRAGMENT frame takes besides its payload.
const MAX_FRAGMENT_OVERHEAD: usize = 1 + 1 + 8 + 8 + 8 + 8;
/// Received packet numbers remembered as ranges (for duplicates).
const RECEIVED_RANGES: usize = 128;
/// Messages scanned per channel for redundancy.
const REDUNDANCY_SCAN: usize = 64;

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Sent the hello.
    Client,
    /// Accepted it.
    Server,
}

/// Where a connection is in its life (see the state machine in docs/rudp.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The client's hello is out; no ACCEPT yet.
    Handshaking,
    /// Messages flow.
    Connected,
    /// Closed locally; CLOSE is repeated to the peer for a while.
    Closing,
    /// Closed by the peer; waiting out stray packets.
    Draining,
    /// Done: nothing is sent or received.
    Closed,
}

/// Why a connection ended; both sides see the code and reason of a close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisconnectReason {
    /// This side called `close`.
    Local {
        /// The code given.
        code: u64,
        /// The reason given.
        reason: String,
    },
    /// The peer closed (or the server refused the hello).
    Remote {
        /// The peer's code.
        code: u64,
        /// The peer's reason.
        reason: String,
    },
    /// Nothing arrived for `idle_timeout`.
    IdleTimeout,
    /// No ACCEPT within `handshake_timeout`.
    HandshakeTimeout,
}

/// Something that happened on a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake finished.
    Connected,
    /// A message arrived. Give `data` back with [`Connection::recycle`]
    /// to let its buffer serve a later message.
    Message {
        /// The channel it came on.
        channel: u8,
        /// The message.
        data: Vec<u8>,
    },
    /// The connection ended.
    Disconnected(DisconnectReason),
}

/// A queued message: its channel and sequence number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId {
    /// The channel.
    pub channel: u8,
    /// Its sequence number on the channel (from 0).
    pub seq: u64,
}

/// Why `send` refused a message. Nothing was queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// No such channel.
    UnknownChannel {
        /// The channel asked for.
        channel: u8,
        /// How many are configured.
        channels: usize,
    },
    /// Over `max_message_size`.
    MessageTooLarge {
        /// The message's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Queueing it would pass `max_send_buffer`: wait for acknowledgements
    /// (the queue drains as the peer acknowledges) and send again.
    Backpressure {
        /// Bytes queued or unacknowledged now.
        queued: usize,
        /// The message's length.
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// The connection is closing or closed (or, for a [`Sender`](crate::Sender),
    /// its lane is).
    Closed,
    /// A [`Sender`](crate::Sender)'s lane has `inbox_capacity` jobs
    /// waiting (keel-udp's `EndpointConfig::inbox_capacity`): nothing was
    /// queued; the lane is behind, send again later.
    InboxFull,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::UnknownChannel { channel, channels } => {
                write!(f, "channel {channel} does not exist (channels 0 to {} are configured)", channels - 1)
            }
            SendError::MessageTooLarge { len, max } => {
                write!(f, "message of {len} bytes is over max_message_size ({max} bytes)")
            }
            SendError::Backpressure { queued, len, cap } => write!(
                f,
                "send buffer full: {queued} bytes queued + {len} would pass max_send_buffer ({cap} bytes); retry after acknowledgements"
            ),
            SendError::Closed => f.write_str("connection is closing or closed"),
            SendError::InboxFull => f.write_str(
                "the connection's lane has inbox_capacity jobs waiting; nothing was queued, send again later",
            ),
        }
    }
}

impl std::error::Error for SendError {}

/// Counters and estimates of one connection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Smoothed RTT.
    pub smoothed_rtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// Minimum RTT.
    pub min_rtt: Duration,
    /// Latest RTT sample.
    pub latest_rtt: Duration,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets received and accepted (not counting duplicates or malformed).
    pub packets_received: u64,
    /// Ack-eliciting packets acknowledged.
    pub packets_acked: u64,
    /// Ack-eliciting packets declared lost.
    pub packets_lost: u64,
    /// `packets_lost / (packets_acked + packets_lost)`.
    pub loss_rate: f64,
    /// Chunks resent after their packet was declared lost.
    pub retransmissions: u64,
    /// Extra copies of small reliable messages sent as redundancy.
    pub redundant_copies: u64,
    /// Probe packets sent on probe timeout.
    pub probes: u64,
    /// Bytes in ack-eliciting packets not yet acknowledged or lost.
    pub bytes_in_flight: usize,
    /// The congestion window (bytes).
    pub congestion_window: usize,
    /// Bytes queued or unacknowledged, per channel.
    pub queued_bytes: Vec<usize>,
    /// Bytes sent and received in datagrams.
    pub bytes_sent: u64,
    /// Bytes received in datagrams.
    pub bytes_received: u64,
    /// Messages delivered to the application.
    pub messages_delivered: u64,
    /// Datagrams rejected by a decoder (or contradicting earlier data).
    pub malformed_packets: u64,
    /// Packets received twice (or too old to tell).
    pub duplicate_packets: u64,
    /// Packets for another connection ID or unexpected in this state.
    pub dropped_packets: u64,
    /// Packets not acknowledged for lack of receive memory (the peer resends).
    pub refused_packets: u64,
    /// Messages dropped as older than one delivered (sequenced channels).
    pub stale_messages: u64,
    /// Message copies received again (redundancy and resends).
    pub duplicate_messages: u64,
}

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
/// use keel_rudp::{ChannelConfig, ChannelKind, Config, Connection, ConnectionId, Event, Side};
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
    cfg: Config,
    side: Side,
    state: State,
    cid: ConnectionId,
    digest: u64,
    // Client handshake.
    nonce: [u8; 16],
    cookie: [u8; MAX_COOKIE_LEN],
    cookie_len: usize,
    hello_next: Instant,
    hello_interval: Duration,
    handshake_deadline: Instant,
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
    largest_recv_time: Option<Instant>,
    probes_pending: u8,
    // Channels.
    send: Vec<SendChannel>,
    recv: Vec<RecvChannel>,
    order: Vec<u8>,
    chunk_size: usize,
    send_buffered: usize,
    // Reuse.
    pool: BufPool,
    msg_free: Vec<OutMsg>,
    chunk_pool: Vec<Vec<ChunkRef>>,
    scratch_acked: Vec<SentPacket>,
    scratch_lost: Vec<SentPacket>,
    scratch_refs: Vec<ChunkRef>,
    events: VecDeque<Event>,
    // Timers.
    last_recv: Instant,
    last_eliciting_sent: Instant,
    now_hint: Instant,
    close_deadline: Option<Instant>,
    close_pending: bool,
    close_code: u64,
    close_reason: [u8; MAX_REASON_LEN],
    close_reason_len: usize,
    stats: Stats,
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
        cfg: Config,
        side: Side,
        state: State,
        cid: ConnectionId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut order: Vec<u8> = (0..cfg.channels.len()).map(|i| i as u8).collect();
        order.sort_by_key(|&i| cfg.channels[i as usize].priority);
        let chunk_size =
            cfg.max_datagram_size - SHORT_HEADER_MAX_LEN - ACK_ROOM - 1 - MAX_FRAGMENT_OVERHEAD;
        Ok(Connection {
            side,
            state,
            cid,
            digest: cfg.digest(),
            nonce: [0; 16],
            cookie: [0; MAX_COOKIE_LEN],
            cookie_len: 0,
            hello_next: now,
            hello_interval: cfg.initial_rtt,
            handshake_deadline: now + cfg.handshake_timeout,
            recovery: Recovery::new(cfg.max_ack_delay),
            rtt: RttEstimator::new(cfg.initial_rtt),
            cc: NewReno::new(cfg.max_datagram_size),
            pacer: Pacer::new(cfg.max_datagram_size),
            received: RangeSet::new(RECEIVED_RANGES),
            ack_floor: 0,
            ack_eliciting_unacked: 0,
            first_unacked_at: None,
            ack_immediate: false,
            largest_recv_time: None,
            probes_pending: 0,
            send: cfg.channels.iter().map(|c| SendChannel::new(*c)).collect(),
            recv: cfg
                .channels
                .iter()
                .map(|c| RecvChannel::new(c.kind))
                .collect(),
            order,
            chunk_size,
            send_buffered: 0,
            pool: BufPool::default(),
            msg_free: Vec::new(),
            chunk_pool: Vec::new(),
            scratch_acked: Vec::new(),
            scratch_lost: Vec::new(),
            scratch_refs: Vec::new(),
            events: VecDeque::new(),
            last_recv: now,
            last_eliciting_sent: now,
            now_hint: now,
            close_deadline: None,
            close_pending: false,
            close_code: 0,
            close_reason: [0; MAX_REASON_LEN],
            close_reason_len: 0,
            stats: Stats::default(),
            cfg,
        })
    }

    /// A client connection: its hello goes out on the first
    /// [`Connection::poll_transmit`]. `nonce` must be unpredictable (16
    /// random bytes from the OS); it ties the server's answers to this
    /// attempt.
    pub fn connect(cfg: Config, nonce: [u8; 16], now: Instant) -> Result<Self, ConfigError> {
        let mut c = Connection::new(
            cfg,
            Side::Client,
            State::Handshaking,
            ConnectionId::default(),
            now,
        )?;
        c.nonce = nonce;
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
        let mut c = Connection::new(cfg, side, State::Connected, cid, now)?;
        c.events.push_back(Event::Connected);
        Ok(c)
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
        let seq = self.send[channel as usize].push(data, self.chunk_size, &mut self.msg_free);
        self.recount_send_buffered();
        Ok(MessageId { channel, seq })
    }

    fn recount_send_buffered(&mut self) {
        self.send_buffered = self.send.iter().map(|c| c.queued_bytes).sum();
    }

    /// Closes the connection: the peer's [`Event::Disconnected`] carries
    /// `code` and `reason` (cut to 128 bytes). This side's comes at once.
    pub fn close(&mut self, now: Instant, code: u64, reason: &str) {
        self.now_hint = now;
        let ev = Event::Disconnected(DisconnectReason::Local {
            code,
            reason: reason.to_owned(),
        });
        match self.state {
            State::Connected => {
                let r = &reason.as_bytes()[..reason.len().min(MAX_REASON_LEN)];
                self.close_reason[..r.len()].copy_from_slice(r);
                self.close_reason_len = r.len();
                self.close_code = code;
                self.close_pending = true;
                self.state = State::Closing;
                self.close_deadline = Some(now + self.rtt.pto(self.cfg.max_ack_delay) * 3);
                self.events.push_back(ev);
            }
            State::Handshaking => {
                self.state = State::Closed;
                self.events.push_back(ev);
            }
            _ => {}
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// True when [`Connection::poll_event`] has something.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Gives a delivered message's buffer back for reuse.
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.pool.give(data);
    }

    /// Counters and estimates.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
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
        s.bytes_in_flight = self.recovery.bytes_in_flight;
        s.congestion_window = self.cc.window();
        s.queued_bytes = self.send.iter().map(|c| c.queued_bytes).collect();
        s
    }

    /// Bytes queued or unacknowledged on `channel` (0 for no such channel).
    pub fn queued_bytes(&self, channel: u8) -> usize {
        self.send
            .get(channel as usize)
            .map_or(0, |c| c.queued_bytes)
    }

    // ---- input -------------------------------------------------------

    /// Processes one datagram from the peer. Malformed input is counted in
    /// [`Stats::malformed_packets`] and otherwise ignored.
    pub fn handle_datagram(&mut self, now: Instant, data: &[u8]) {
        self.now_hint = now;
        self.stats.bytes_received += data.len() as u64;
        if self.state == State::Closed {
            self.stats.dropped_packets += 1;
            return;
        }
        if let Err(e) = self.process(now, data) {
            match e {
                Drop::Malformed(_) => self.stats.malformed_packets += 1,
                Drop::Unexpected => self.stats.dropped_packets += 1,
            }
        }
    }

    fn process(&mut self, now: Instant, data: &[u8]) -> Result<(), Drop> {
        let mut r = Reader::new(data);
        match Header::decode(&mut r)? {
            Header::Long { ty, cid } => self.on_long(now, ty, cid, r),
            Header::Short { cid, pn, pn_len } => {
                if matches!(self.state, State::Handshaking | State::Draining) || cid != self.cid {
                    return Err(Drop::Unexpected);
                }
                // Validate every frame before acting on any.
                let mut check = r.clone();
                while !check.is_empty() {
                    match Frame::decode(&mut check)? {
                        Frame::Hello { .. } | Frame::Retry { .. } | Frame::Accept { .. } => {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "handshake frame in a short packet",
                            )));
                        }
                        Frame::Ack(a) if a.largest >= self.recovery.next_pn() => {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "ack of a packet never sent",
                            )));
                        }
                        Frame::Message {
                            channel, payload, ..
                        } if channel as usize >= self.recv.len()
                            || payload.len() > self.cfg.max_message_size =>
                        {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "message channel or length",
                            )));
                        }
                        Frame::Fragment { channel, total, .. }
                            if channel as usize >= self.recv.len()
                                || total as usize > self.cfg.max_message_size =>
                        {
                            return Err(Drop::Malformed(DecodeError::Invalid(
                                "fragment channel or total length",
                            )));
                        }
                        _ => {}
                    }
                }
                let pn = decode_packet_number(self.received.largest(), pn, pn_len);
                if self.received.contains(pn) {
                    self.stats.duplicate_packets += 1;
                    return Ok(());
                }
                self.last_recv = now;
                if self.state == State::Closing {
                    // Answer with CLOSE again.
                    self.close_pending = true;
                    return Ok(());
                }
                self.on_short(now, pn, r);
                Ok(())
            }
        }
    }

    fn on_short(&mut self, now: Instant, pn: u64, mut r: Reader<'_>) {
        let mut eliciting = false;
        let mut refuse = false;
        while !r.is_empty() {
            let Ok(frame) = Frame::decode(&mut r) else {
                break;
            };
            match frame {
                Frame::Padding { .. } => {}
                Frame::Ping => eliciting = true,
                Frame::Ack(a) => self.on_ack_frame(now, &a),
                Frame::Message {
                    channel,
                    seq,
                    payload,
                } => {
                    eliciting = true;
                    refuse |= self.on_message(channel, seq, payload.len() as u32, 0, payload);
                }
                Frame::Fragment {
                    channel,
                    seq,
                    total,
                    offset,
                    payload,
                } => {
                    eliciting = true;
                    refuse |= self.on_message(channel, seq, total, offset, payload);
                }
                Frame::Close { code, reason } => {
                    if self.state == State::Connected {
                        self.state = State::Draining;
                        self.close_deadline = Some(now + self.rtt.pto(self.cfg.max_ack_delay) * 3);
                        let reason = String::from_utf8_lossy(reason).into_owned();
                        self.events
                            .push_back(Event::Disconnected(DisconnectReason::Remote {
                                code,
                                reason,
                            }));
                    }
                }
                Frame::Hello { .. } | Frame::Retry { .. } | Frame::Accept { .. } => {}
            }
        }
        self.stats.packets_received += 1;
        if refuse {
            self.stats.refused_packets += 1;
            return;
        }
        let prev = self.received.largest();
        self.received.insert(pn);
        if prev.is_none_or(|l| pn > l) {
            self.largest_recv_time = Some(now);
        }
        if eliciting {
            if self.ack_eliciting_unacked == 0 {
                self.first_unacked_at = Some(now);
            }
            self.ack_eliciting_unacked += 1;
            if prev.map_or(pn != 0, |l| pn != l + 1) {
                self.ack_immediate = true;
            }
        }
    }

    /// Returns true when the packet must not be acknowledged.
    fn on_message(
        &mut self,
        channel: u8,
        seq: u64,
        total: u32,
        offset: u32,
        payload: &[u8],
    ) -> bool {
        let conn_buffered: usize = self.recv.iter().map(|c| c.buffered).sum();
        let events = &mut self.events;
        let delivered = &mut self.stats.messages_delivered;
        let mut deliver = |data: Vec<u8>| {
            *delivered += 1;
            events.push_back(Event::Message { channel, data });
        };
        let mut cx = RecvCtx {
            pool: &mut self.pool,
            conn_buffered,
            cap: self.cfg.max_recv_buffer,
            deliver: &mut deliver,
        };
        match self.recv[channel as usize].on_frame(seq, total, offset, payload, &mut cx) {
            RecvOutcome::Accepted => false,
            RecvOutcome::Duplicate => {
                self.stats.duplicate_messages += 1;
                false
            }
            RecvOutcome::Stale => {
                self.stats.stale_messages += 1;
                false
            }
            RecvOutcome::Refused => true,
            RecvOutcome::Invalid => {
                self.stats.malformed_packets += 1;
                true
            }
        }
    }

    fn on_ack_frame(&mut self, now: Instant, a: &crate::wire::AckFrame<'_>) {
        let mut acked = std::mem::take(&mut self.scratch_acked);
        let mut lost = std::mem::take(&mut self.scratch_lost);
        if self
            .recovery
            .on_ack(a, now, &mut self.rtt, &mut acked, &mut lost)
            .is_ok()
        {
            for mut p in acked.drain(..) {
                if p.ack_eliciting {
                    self.stats.packets_acked += 1;
                    self.cc.on_ack(p.time_sent, p.size);
                }
                if let Some(l) = p.largest_ack_sent {
                    self.ack_floor = self.ack_floor.max(l + 1);
                }
                for c in &p.chunks {
                    self.send[c.channel as usize].on_acked(c.seq, c.chunk, &mut self.msg_free);
                }
                p.chunks.clear();
                self.chunk_pool.push(std::mem::take(&mut p.chunks));
            }
            self.recount_send_buffered();
        }
        self.on_lost(now, &mut lost);
        self.scratch_acked = acked;
        self.scratch_lost = lost;
    }

    fn on_lost(&mut self, now: Instant, lost: &mut Vec<SentPacket>) {
        for mut p in lost.drain(..) {
            if p.ack_eliciting {
                self.stats.packets_lost += 1;
                self.cc.on_loss(p.time_sent, now);
            }
            for c in &p.chunks {
                self.send[c.channel as usize].on_lost(c.seq, c.chunk, p.pn);
            }
            p.chunks.clear();
            self.chunk_pool.push(std::mem::take(&mut p.chunks));
        }
    }

    fn on_long(
        &mut self,
        now: Instant,
        ty: LongType,
        cid: ConnectionId,
        mut r: Reader<'_>,
    ) -> Result<(), Drop> {
        if self.side != Side::Client || self.state != State::Handshaking {
            return Err(Drop::Unexpected);
        }
        let first = Frame::decode(&mut r)?;
        match (ty, first) {
            (LongType::Retry, Frame::Retry { nonce, cookie }) if nonce == self.nonce => {
                self.cookie[..cookie.len()].copy_from_slice(cookie);
                self.cookie_len = cookie.len();
                // Answer at once; the RETRY shows the path works, so the
                // backoff starts over.
                self.hello_next = now;
                self.hello_interval = self.cfg.initial_rtt;
                Ok(())
            }
            (LongType::Accept, Frame::Accept { nonce }) if nonce == self.nonce => {
                self.cid = cid;
                self.state = State::Connected;
                self.last_recv = now;
                self.last_eliciting_sent = now;
                self.events.push_back(Event::Connected);
                Ok(())
            }
            (LongType::Refuse, Frame::Accept { nonce }) if nonce == self.nonce => {
                let Frame::Close { code, reason } = Frame::decode(&mut r)? else {
                    return Err(Drop::Malformed(DecodeError::Invalid(
                        "refuse without close",
                    )));
                };
                self.state = State::Closed;
                let reason = String::from_utf8_lossy(reason).into_owned();
                self.events
                    .push_back(Event::Disconnected(DisconnectReason::Remote {
                        code,
                        reason,
                    }));
                Ok(())
            }
            _ => Err(Drop::Unexpected),
        }
    }

    // ---- timers ------------------------------------------------------

    /// The next instant [`Connection::handle_timeout`] must run, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let soon = self.now_hint;
        match self.state {
            State::Closed => None,
            State::Handshaking => Some(self.hello_next.min(self.handshake_deadline)),
            State::Closing if self.close_pending => Some(soon),
            State::Closing | State::Draining => self.close_deadline,
            State::Connected => {
                let mut t = self.last_recv + self.cfg.idle_timeout;
                let mut at = |x: Option<Instant>| {
                    if let Some(x) = x {
                        t = t.min(x);
                    }
                };
                at(self.recovery.timeout(&self.rtt));
                at(Some(self.last_eliciting_sent + self.cfg.keepalive_interval));
                if self.ack_eliciting_unacked > 0 {
                    if self.ack_immediate || self.ack_eliciting_unacked >= 2 {
                        at(Some(soon));
                    } else {
                        at(self.first_unacked_at.map(|f| f + self.cfg.max_ack_delay));
                    }
                }
                if self.probes_pending > 0 {
                    at(Some(soon));
                }
                if self.cfg.congestion_control
                    && self.recovery.bytes_in_flight + self.cfg.max_datagram_size
                        <= self.cc.window()
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
                Some(t)
            }
        }
    }

    /// Runs the timers due at `now`: loss detection, probes, the idle
    /// timeout, the handshake timeout, the end of closing.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now_hint = now;
        match self.state {
            State::Closed => {}
            State::Handshaking => {
                if now >= self.handshake_deadline {
                    self.state = State::Closed;
                    self.events
                        .push_back(Event::Disconnected(DisconnectReason::HandshakeTimeout));
                }
            }
            State::Closing | State::Draining => {
                if self.close_deadline.is_some_and(|d| now >= d) {
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
                let mut lost = std::mem::take(&mut self.scratch_lost);
                if self.recovery.on_timeout(now, &self.rtt, &mut lost) {
                    self.probes_pending = 1;
                }
                self.on_lost(now, &mut lost);
                self.scratch_lost = lost;
            }
        }
    }

    // ---- output ------------------------------------------------------

    /// Fills `buf` with the next datagram to send and returns its length,
    /// or `None` when nothing is due. `buf` must hold at least 1,200
    /// bytes; at most `max_datagram_size` are used.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.now_hint = now;
        let budget = buf.len().min(self.cfg.max_datagram_size);
        if budget < MIN_HELLO_SIZE {
            return None;
        }
        let buf = &mut buf[..budget];
        match self.state {
            State::Closed | State::Draining => None,
            State::Handshaking => self.write_hello(now, buf),
            State::Closing => self.write_close(now, buf),
            State::Connected => self.write_packet(now, buf),
        }
    }

    fn write_hello(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.side != Side::Client || now < self.hello_next {
            return None;
        }
        let mut w = Writer::new(buf);
        Header::Long {
            ty: LongType::Hello,
            cid: ConnectionId::default(),
        }
        .encode(&mut w)
        .ok()?;
        Frame::Hello {
            nonce: self.nonce,
            config_digest: self.digest,
            cookie: &self.cookie[..self.cookie_len],
        }
        .encode(&mut w)
        .ok()?;
        let pad = MIN_HELLO_SIZE.saturating_sub(w.len());
        w.zeros(pad).ok()?;
        self.hello_next = now + self.hello_interval;
        self.hello_interval = (self.hello_interval * 2).min(Duration::from_secs(2));
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += w.len() as u64;
        Some(w.len())
    }

    fn begin_short(&self, w: &mut Writer<'_>) -> Option<u64> {
        let pn = self.recovery.next_pn();
        let pn_len = encode_packet_number_len(pn, self.recovery.largest_acked());
        Header::Short {
            cid: self.cid,
            pn,
            pn_len,
        }
        .encode(w)
        .ok()?;
        Some(pn)
    }

    fn write_close(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if !self.close_pending {
            return None;
        }
        self.close_pending = false;
        let mut w = Writer::new(buf);
        let pn = self.begin_short(&mut w)?;
        Frame::Close {
            code: self.close_code,
            reason: &self.close_reason[..self.close_reason_len],
        }
        .encode(&mut w)
        .ok()?;
        self.finish(now, pn, w.len(), false, None, Vec::new());
        Some(w.len())
    }

    fn finish(
        &mut self,
        now: Instant,
        pn: u64,
        size: usize,
        eliciting: bool,
        ack: Option<u64>,
        chunks: Vec<ChunkRef>,
    ) {
        if eliciting {
            self.last_eliciting_sent = now;
        }
        self.recovery.on_sent(SentPacket {
            pn,
            time_sent: now,
            size,
            ack_eliciting: eliciting,
            largest_ack_sent: ack,
            chunks,
        });
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size as u64;
    }

    fn ack_due(&self, now: Instant) -> bool {
        self.ack_eliciting_unacked > 0
            && (self.ack_immediate
                || self.ack_eliciting_unacked >= 2
                || self
                    .first_unacked_at
                    .is_some_and(|f| now >= f + self.cfg.max_ack_delay))
    }

    fn bulk_allowed(&mut self, now: Instant, size: usize) -> bool {
        if !self.cfg.congestion_control {
            return true;
        }
        if self.recovery.bytes_in_flight + size > self.cc.window() {
            return false;
        }
        self.pacer
            .delay(now, size, self.cc.window(), self.rtt.smoothed())
            .is_none()
    }

    fn write_packet(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let budget = buf.len();
        let ack_due = self.ack_due(now);
        let probe = self.probes_pending > 0;
        let keepalive = now >= self.last_eliciting_sent + self.cfg.keepalive_interval;
        let bulk_waiting = self.send.iter().any(|c| c.cfg.bulk && c.has_sendable());
        let bulk_ok = probe || (bulk_waiting && self.bulk_allowed(now, budget));
        let data = self
            .send
            .iter()
            .any(|c| c.has_sendable() && (!c.cfg.bulk || bulk_ok));
        if !(ack_due || probe || keepalive || data) {
            return None;
        }
        let mut w = Writer::new(buf);
        let pn = self.begin_short(&mut w)?;
        let mut largest_ack_sent = None;
        let mut ranges = [(0u64, 0u64); MAX_ACK_RANGES_SENT];
        let n = self.received.fill_desc(self.ack_floor, &mut ranges);
        if n > 0 {
            let delay = self
                .largest_recv_time
                .map_or(0, |t| now.saturating_duration_since(t).as_micros() as u64);
            let mut tmp = [0u8; ACK_ROOM];
            let mut aw = Writer::new(&mut tmp);
            if Frame::encode_ack(&mut aw, delay, &ranges[..n]).is_ok() {
                let len = aw.len();
                w.bytes(&tmp[..len]).ok()?;
                largest_ack_sent = Some(ranges[0].1);
            }
            self.ack_eliciting_unacked = 0;
            self.first_unacked_at = None;
            self.ack_immediate = false;
        }
        let mut chunks = self.chunk_pool.pop().unwrap_or_default();
        let mut eliciting = false;
        let mut had_data = false;
        let mut bulk_sent = false;
        if probe {
            self.probes_pending -= 1;
            self.stats.probes += 1;
            w.u8(FrameType::Ping as u8).ok()?;
            eliciting = true;
            // Repeat the oldest unacknowledged reliable chunks.
            let mut refs = std::mem::take(&mut self.scratch_refs);
            refs.clear();
            for p in self.recovery.outstanding() {
                refs.extend_from_slice(&p.chunks);
                if refs.len() >= 64 {
                    break;
                }
            }
            for c in &refs {
                let ch = &mut self.send[c.channel as usize];
                let Some(m) = ch.msg_mut(c.seq) else { continue };
                if !matches!(m.chunks[c.chunk as usize].state, ChunkState::Sent { .. }) {
                    continue;
                }
                if write_chunk(&mut w, c.channel, m, c.chunk) {
                    m.chunks[c.chunk as usize].state = ChunkState::Sent { last_pn: pn };
                    chunks.push(*c);
                    bulk_sent |= ch.cfg.bulk;
                }
            }
            self.scratch_refs = refs;
        }
        // Retransmissions first, then new messages, by channel priority.
        for k in 0..self.order.len() {
            let ci = self.order[k];
            let ch = &mut self.send[ci as usize];
            if ch.cfg.bulk && !bulk_ok {
                continue;
            }
            while let Some(&(seq, chunk)) = ch.retransmit.front() {
                let Some(m) = ch.msg_mut(seq) else {
                    ch.retransmit.pop_front();
                    continue;
                };
                if m.chunks[chunk as usize].state != ChunkState::Lost {
                    ch.retransmit.pop_front();
                    continue;
                }
                if !write_chunk(&mut w, ci, m, chunk) {
                    break;
                }
                m.chunks[chunk as usize].state = ChunkState::Sent { last_pn: pn };
                ch.retransmit.pop_front();
                chunks.push(ChunkRef {
                    channel: ci,
                    chunk,
                    seq,
                });
                self.stats.retransmissions += 1;
                had_data = true;
                bulk_sent |= ch.cfg.bulk;
            }
        }
        for k in 0..self.order.len() {
            let ci = self.order[k];
            let ch = &mut self.send[ci as usize];
            if ch.cfg.bulk && !bulk_ok {
                continue;
            }
            let reliable = ch.cfg.kind.is_reliable();
            while let Some((seq, chunk)) = ch.peek_unsent() {
                let Some(m) = ch.msg_mut(seq) else { break };
                if !write_chunk(&mut w, ci, m, chunk) {
                    break;
                }
                if reliable {
                    chunks.push(ChunkRef {
                        channel: ci,
                        chunk,
                        seq,
                    });
                }
                ch.advance_unsent(pn, &mut self.msg_free);
                had_data = true;
                bulk_sent |= ch.cfg.bulk;
            }
        }
        let red = self.cfg.redundancy;
        if had_data && red.enabled() {
            let mut left = red.max_bytes_per_packet;
            for k in 0..self.order.len() {
                let ci = self.order[k];
                let ch = &mut self.send[ci as usize];
                if ch.cfg.bulk || !ch.cfg.kind.is_reliable() {
                    continue;
                }
                for m in ch.msgs.iter_mut().take(REDUNDANCY_SCAN).flatten() {
                    if m.chunks.len() != 1
                        || m.data.len() > red.max_message
                        || m.copies >= red.max_copies
                    {
                        continue;
                    }
                    match m.chunks[0].state {
                        ChunkState::Sent { last_pn } if last_pn != pn => {}
                        _ => continue,
                    }
                    let cost = crate::wire::message_frame_len(m.seq, m.data.len());
                    if cost > left || cost > w.remaining() {
                        continue;
                    }
                    if write_chunk(&mut w, ci, m, 0) {
                        m.chunks[0].state = ChunkState::Sent { last_pn: pn };
                        m.copies += 1;
                        left -= cost;
                        chunks.push(ChunkRef {
                            channel: ci,
                            chunk: 0,
                            seq: m.seq,
                        });
                        self.stats.redundant_copies += 1;
                    }
                }
            }
        }
        self.recount_send_buffered();
        eliciting |= had_data;
        if !eliciting && keepalive {
            w.u8(FrameType::Ping as u8).ok()?;
            eliciting = true;
        }
        if !eliciting && largest_ack_sent.is_none() {
            self.chunk_pool.push(chunks);
            return None;
        }
        let size = w.len();
        if bulk_sent {
            self.pacer.on_sent(size);
        }
        self.finish(now, pn, size, eliciting, largest_ack_sent, chunks);
        Some(size)
    }
}

/// Writes one chunk as a MESSAGE (whole message) or FRAGMENT frame; false
/// when it does not fit.
fn write_chunk(w: &mut Writer<'_>, channel: u8, m: &OutMsg, chunk: u32) -> bool {
    let c = m.chunks[chunk as usize];
    let payload = &m.data[c.offset as usize..(c.offset + c.len) as usize];
    let frame = if m.chunks.len() == 1 {
        Frame::Message {
            channel,
            seq: m.seq,
            payload,
        }
    } else {
        Frame::Fragment {
            channel,
            seq: m.seq,
            total: m.data.len() as u32,
            offset: c.offset,
            payload,
        }
    };
    frame.encoded_len() <= w.remaining() && frame.encode(w).is_ok()
}

/// Why a datagram was dropped.
enum Drop {
    Malformed(#[allow(dead_code)] DecodeError),
    Unexpected,
}

impl From<DecodeError> for Drop {
    fn from(e: DecodeError) -> Self {
        Drop::Malformed(e)
    }
}
