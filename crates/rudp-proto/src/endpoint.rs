//! The server side of the handshake and the connections of one lane,
//! routed by connection ID.
//!
//! Why one file of about 1,000 lines: the stateless-cookie handshake, the
//! connect-token check behind it and the connection-ID routing they feed
//! share the endpoint's keys, counters and tables, and about a third of
//! the lines are the doc comments that state what is (and is not)
//! allocated for an unvalidated source; split apart, the anti-spoofing
//! argument would no longer read in one place. The admission limits'
//! settings and bookkeeping are in `admission.rs`; where they apply in the
//! handshake is here, in `on_hello`.

use crate::close_code::CloseCode;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::admission::{source_key, Admission, RateTable, ReplayCache, SourceKey};
use crate::budget::{RecvBudget, SendBudget, DEFAULT_RECV_BUDGET, DEFAULT_SEND_BUDGET};
use crate::config::{Config, ConfigError};
use crate::connection::{Connection, Event, Side, State};
use crate::deadlines::Deadlines;
use crate::security::{open_token, token_key_id, ServerSecurity, TokenClaims, TokenError};
use crate::wire::{ConnectionId, Frame, Header, LongType, Reader, Writer, MIN_HELLO_SIZE, VERSION};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a cookie: a 4-byte timestamp and 16 bytes of MAC.
pub const COOKIE_LEN: usize = 4 + 16;

/// CLOSE code of a REFUSE: the client's channels differ from the server's.
pub const REFUSE_CONFIG_MISMATCH: u64 = CloseCode::ConfigMismatch.code();
/// CLOSE code of a REFUSE: the endpoint holds `max_connections`.
pub const REFUSE_FULL: u64 = CloseCode::Full.code();
/// CLOSE code of a REFUSE: one side requires connect tokens and the other
/// is in insecure mode (the reason says which).
pub const REFUSE_SECURITY_MISMATCH: u64 = CloseCode::SecurityMismatch.code();
/// CLOSE code of a REFUSE: the connect token was refused (the reason says
/// why: forged, expired, another key, another server, replayed).
pub const REFUSE_TOKEN: u64 = CloseCode::Token.code();
/// CLOSE code of a connection whose peer stopped its
/// `keel_rudp::Server` or `keel_rudp::Client` (`stop`): the
/// reason is "server stopping" or "client stopping". Codes 1 to 31 are
/// keel-rudp's own (REFUSEs, `CLOSE_STOPPED` and `CLOSE_REPLACED` below
/// 16, the other closes from 16); a game's `close` codes are its own
/// business, but staying clear of these keeps them unambiguous.
pub const CLOSE_STOPPED: u64 = CloseCode::Stopped.code();
/// CLOSE code of a REFUSE: the hello's source address (its IP, an IPv6
/// address by its prefix, see [`Admission::ipv6_prefix_len`]) holds
/// [`Admission::max_connections_per_ip`] connections on this lane.
pub const REFUSE_ADDRESS_LIMIT: u64 = CloseCode::AddressLimit.code();
/// CLOSE code of a REFUSE: the hello's source address started handshakes
/// faster than [`Admission::handshakes_per_sec`] (after a burst of
/// [`Admission::handshake_burst`]); the client may try again a little later.
pub const REFUSE_RATE_LIMIT: u64 = CloseCode::RateLimit.code();
/// CLOSE code of a connection replaced by a newer one made with the same
/// connect token (a client that crashed and came back): reason
/// "replaced by a new connection with the same connect token". The old
/// connection's CLOSE goes to its address, and the server's handler sees
/// its `disconnected` (as `DisconnectReason::Local` with this code).
pub const CLOSE_REPLACED: u64 = CloseCode::Replaced.code();
/// CLOSE code of the connections of a server lane (or of a client) whose
/// `keel_rudp::Handler` panicked: the reason is "handler panicked"
/// (the panic's message stays on the server, in
/// `keel_rudp::Server::failed_lanes`). Codes 16 and
/// up are keel-rudp's closes.
pub const CLOSE_HANDLER_PANIC: u64 = CloseCode::HandlerPanic.code();
// CLOSE_ACK_TIMEOUT (17), sent by the connection itself, is defined in
// connection/close.rs (so the connection does not depend on the endpoint).

/// Settings of an [`Endpoint`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EndpointConfig {
    /// This lane's index: byte 0 of every connection ID it assigns.
    pub lane: u8,
    /// The secret keying cookies and connection IDs: 32 random bytes from
    /// the OS, the same on every lane of a server (a cookie minted on one
    /// lane is checked on another).
    pub key: [u8; 32],
    /// How long a cookie stays valid (default 10 s).
    pub cookie_lifetime: Duration,
    /// Connections this endpoint holds at most (default 4,096); past it a
    /// valid hello gets a REFUSE with [`REFUSE_FULL`].
    pub max_connections: usize,
    /// Limits per source address and the handshake rate (checked in
    /// [`Endpoint::new`]).
    pub admission: Admission,
    /// Settings of every connection.
    pub connection: Config,
    /// Connect tokens and sealed packets, or insecure by name.
    pub security: ServerSecurity,
    /// The connect tokens in use and the IP each is bound to: its own by
    /// default ([`EndpointConfig::new`]); endpoints given clones of one
    /// cache (the lanes of one `keel_rudp::Server`) refuse a token
    /// any of them took for another IP. Sharing it is only half of the
    /// one-live-connection rule: a token's earlier connection is replaced
    /// only by the endpoint that holds it, so whoever shares a cache must
    /// also send every hello of one IP to one endpoint, as the server's
    /// steering does.
    pub replay_cache: ReplayCache,
    /// Unix time (seconds) at the `now` given to [`Endpoint::new`]; token
    /// expiry is checked against it plus the time since. Defaults to the
    /// system clock.
    pub unix_time_at_start: u64,
    /// Receive memory all its connections hold at most, in all, beside each
    /// one's `max_recv_buffer` (default [`DEFAULT_RECV_BUDGET`], 256 MiB).
    /// At it, frames needing more memory are refused unacknowledged (the
    /// peers resend) and counted. Clones share it: a `keel_rudp::Server`
    /// gives one to all its lanes.
    pub recv_budget: RecvBudget,
    /// Bytes of messages all its connections hold to send (queued, or
    /// awaiting acknowledgement), in all, beside each one's
    /// `max_send_buffer` (default [`DEFAULT_SEND_BUDGET`], 256 MiB; at
    /// least `max_message_size`, checked in [`Endpoint::new`]). At it,
    /// `send` fails with [`SendError::BudgetSpent`](crate::SendError::BudgetSpent),
    /// counted. Clones share it: a `keel_rudp::Server` gives one to
    /// all its lanes.
    pub send_budget: SendBudget,
}

impl EndpointConfig {
    /// Defaults for lane `lane` with secret `key` (cookies and connection
    /// IDs) and `security` (connect tokens, or insecure by name).
    pub fn new(lane: u8, key: [u8; 32], connection: Config, security: ServerSecurity) -> Self {
        EndpointConfig {
            lane,
            key,
            cookie_lifetime: Duration::from_secs(10),
            max_connections: 4096,
            admission: Admission::default(),
            connection,
            security,
            replay_cache: ReplayCache::new(),
            unix_time_at_start: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            recv_budget: RecvBudget::new(DEFAULT_RECV_BUDGET),
            send_budget: SendBudget::new(DEFAULT_SEND_BUDGET),
        }
    }
}

/// Names one connection of an endpoint: its slot and the slot's
/// generation. Valid until the connection is closed and its
/// `Disconnected` event was read: the next [`Endpoint::poll_timeout`] or
/// [`Endpoint::handle_timeout`] then removes it. A later connection may
/// take the same slot, but with the next generation, so a stale handle
/// finds nothing ([`Endpoint::connection`] returns `None`) instead of
/// reaching the new connection.
///
/// # Examples
///
/// ```
/// use keel_rudp_proto::ConnectionHandle;
///
/// let h = ConnectionHandle::from_bits((7 << 32) | 3);
/// assert_eq!((h.index(), h.generation()), (3, 7));
/// assert_eq!(ConnectionHandle::from_bits(h.to_bits()), h);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle {
    index: u32,
    generation: u32,
}

impl ConnectionHandle {
    /// The slot: a small number, unique among the live connections of one
    /// endpoint (a table indexed by connection can use it), reused after a
    /// connection is removed.
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// How many connections took this slot before, plus one (never 0 for
    /// an endpoint's connection).
    pub fn generation(self) -> u32 {
        self.generation
    }

    /// The handle as one number (generation in the high 32 bits, slot in
    /// the low), never 0 for an endpoint's connection: what the C API
    /// hands out.
    pub fn to_bits(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The handle [`ConnectionHandle::to_bits`] gave; any other number
    /// names no connection (lookups with it find nothing).
    pub const fn from_bits(bits: u64) -> Self {
        ConnectionHandle {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

/// What [`Endpoint::handle`] did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handled {
    /// A stateless answer (RETRY, a repeated ACCEPT, a REFUSE) of this many
    /// bytes is in `reply`: send it to the datagram's source.
    Reply(usize),
    /// A new connection; its ACCEPT (this many bytes) is in `reply`.
    Accepted(ConnectionHandle, usize),
    /// Given to this connection (call [`Endpoint::poll_transmit`]).
    Routed(ConnectionHandle),
    /// Dropped and counted.
    Dropped,
}

/// Counters of an [`Endpoint`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// HELLO packets received.
    pub hellos: u64,
    /// RETRY packets sent (each costs one MAC and no state).
    pub retries_sent: u64,
    /// Hellos whose cookie was forged, altered or for another address.
    pub bad_cookies: u64,
    /// Hellos whose cookie had expired.
    pub stale_cookies: u64,
    /// Hellos under 1,200 bytes (dropped: a small hello could be amplified).
    pub short_hellos: u64,
    /// Connections created (the only state the endpoint allocates per peer).
    pub connections_created: u64,
    /// Connections removed after closing.
    pub connections_removed: u64,
    /// ACCEPTs sent again for a repeated hello.
    pub accepts_resent: u64,
    /// Valid hellos refused, whatever the cause (configuration mismatch,
    /// full, a token refused, a security mismatch, an admission limit).
    pub refused: u64,
    /// Datagrams rejected by a decoder.
    pub malformed: u64,
    /// Short packets for no known connection ID.
    pub unknown_connection: u64,
    /// Connections whose peer address changed (NAT rebinding).
    pub address_changes: u64,
    /// Tokens refused: not authentic under this server's key.
    pub tokens_forged: u64,
    /// Tokens refused: expired.
    pub tokens_expired: u64,
    /// Tokens refused: for other servers.
    pub tokens_wrong_server: u64,
    /// Tokens refused: sealed under another key.
    pub tokens_wrong_key: u64,
    /// Tokens refused: in use from another client IP.
    pub tokens_replayed: u64,
    /// Hellos refused: a token to an insecure server, or none to a secure one.
    pub security_mismatches: u64,
    /// Hellos refused ([`REFUSE_ADDRESS_LIMIT`]): their source address held
    /// [`Admission::max_connections_per_ip`] connections.
    pub refused_address_limit: u64,
    /// Hellos refused ([`REFUSE_RATE_LIMIT`]): their source address had no
    /// handshake left in its bucket.
    pub refused_rate_limit: u64,
    /// Connections closed ([`CLOSE_REPLACED`]) because a new connection
    /// was made with their connect token.
    pub connections_replaced: u64,
    /// Source addresses forgotten by the handshake-rate table
    /// ([`Admission::rate_table_size`]) to make room for another.
    pub rate_table_evictions: u64,
    /// Message frames of its connections refused because the receive
    /// budget ([`EndpointConfig::recv_budget`]) was spent.
    pub budget_refused: u64,
    /// Message frames of its connections refused as too far ahead of their
    /// channel's window.
    pub window_refused: u64,
    /// Sends on its connections refused because the send budget
    /// ([`EndpointConfig::send_budget`]) was spent
    /// ([`SendError::BudgetSpent`](crate::SendError::BudgetSpent)).
    pub send_budget_refused: u64,
    /// Connections ended because the peer acknowledged nothing for
    /// `ack_timeout` (`DisconnectReason::AckTimeout`).
    pub ack_timeouts: u64,
    /// Connections removed with messages the peer never acknowledged
    /// (see [`Connection::undelivered`]).
    pub undelivered_connections: u64,
    /// Those messages, over all removed connections.
    pub undelivered_messages: u64,
    /// Connections removed whose CLOSE (this side's) was never
    /// acknowledged.
    pub closes_unacknowledged: u64,
}

impl std::ops::Add for EndpointStats {
    type Output = EndpointStats;
    fn add(self, o: EndpointStats) -> EndpointStats {
        EndpointStats {
            hellos: self.hellos + o.hellos,
            retries_sent: self.retries_sent + o.retries_sent,
            bad_cookies: self.bad_cookies + o.bad_cookies,
            stale_cookies: self.stale_cookies + o.stale_cookies,
            short_hellos: self.short_hellos + o.short_hellos,
            connections_created: self.connections_created + o.connections_created,
            connections_removed: self.connections_removed + o.connections_removed,
            accepts_resent: self.accepts_resent + o.accepts_resent,
            refused: self.refused + o.refused,
            malformed: self.malformed + o.malformed,
            unknown_connection: self.unknown_connection + o.unknown_connection,
            address_changes: self.address_changes + o.address_changes,
            tokens_forged: self.tokens_forged + o.tokens_forged,
            tokens_expired: self.tokens_expired + o.tokens_expired,
            tokens_wrong_server: self.tokens_wrong_server + o.tokens_wrong_server,
            tokens_wrong_key: self.tokens_wrong_key + o.tokens_wrong_key,
            tokens_replayed: self.tokens_replayed + o.tokens_replayed,
            security_mismatches: self.security_mismatches + o.security_mismatches,
            refused_address_limit: self.refused_address_limit + o.refused_address_limit,
            refused_rate_limit: self.refused_rate_limit + o.refused_rate_limit,
            connections_replaced: self.connections_replaced + o.connections_replaced,
            rate_table_evictions: self.rate_table_evictions + o.rate_table_evictions,
            budget_refused: self.budget_refused + o.budget_refused,
            window_refused: self.window_refused + o.window_refused,
            send_budget_refused: self.send_budget_refused + o.send_budget_refused,
            ack_timeouts: self.ack_timeouts + o.ack_timeouts,
            undelivered_connections: self.undelivered_connections + o.undelivered_connections,
            undelivered_messages: self.undelivered_messages + o.undelivered_messages,
            closes_unacknowledged: self.closes_unacknowledged + o.closes_unacknowledged,
        }
    }
}

struct Slot {
    conn: Connection,
    addr: SocketAddr,
    nonce: [u8; 16],
    /// Its source address as the admission limits count it.
    source: SourceKey,
    /// The AEAD tag of its connect token while it is the token's one live
    /// connection (in `by_token`).
    token: Option<[u8; 16]>,
    /// In `dirty`: its deadline is to be recomputed (or it is removable).
    dirty: bool,
    /// In `ready`: it may have datagrams to send.
    ready: bool,
    /// In `evented`: it may have events.
    evented: bool,
    /// Its sends refused for the send budget, as far as the endpoint's
    /// stats count them (the rest are counted when it is settled).
    send_refused_seen: u64,
}

/// The datagrams of a batch [`Endpoint::prefetch`] looks at, at most.
pub const PREFETCH_BATCH: usize = 64;

/// Hashes the connection-ID table's keys, once per datagram. The IDs are
/// the server's own MAC output (`new_cid`), which a peer can neither
/// predict nor choose, so folding their bytes spreads them as well as
/// SipHash does (no flooding of one bucket), for a tenth of the work.
#[derive(Default)]
struct CidHasher(u64);

impl Hasher for CidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(23) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn finish(&self) -> u64 {
        // The product's high half is the mixed one; byte 0 (the lane) is
        // the same for every key of an endpoint.
        self.0 ^ self.0 >> 32
    }
}

/// The connections of one server lane, sans-IO, with the server's half of
/// the handshake.
///
/// A HELLO without a valid cookie gets a RETRY and leaves no state; only
/// a HELLO carrying a fresh cookie minted for its source address creates
/// a [`Connection`]. Short packets are routed by connection ID, never by
/// address, so a client whose address changes keeps its connection.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
/// use keel_rudp_proto::{ChannelConfig, ChannelKind, ClientSecurity, Config, Connection, Endpoint};
/// use keel_rudp_proto::{EndpointConfig, Event, Handled, ServerSecurity};
///
/// let config = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
/// let now = Instant::now();
/// let mut server = Endpoint::new(
///     EndpointConfig::new(3, [7; 32], config.clone(), ServerSecurity::Insecure),
///     now,
/// )
/// .unwrap();
/// let mut client = Connection::connect(config, ClientSecurity::Insecure, [1; 16], now).unwrap();
/// let addr = "192.0.2.1:5000".parse().unwrap();
/// let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
/// // Hello, retry with a cookie, hello with the cookie, accept.
/// for _ in 0..2 {
///     let n = client.poll_transmit(now, &mut buf).unwrap();
///     match server.handle(now, addr, &buf[..n], &mut reply) {
///         Handled::Reply(m) | Handled::Accepted(_, m) => client.handle_datagram(now, &reply[..m]),
///         other => panic!("{other:?}"),
///     }
/// }
/// assert_eq!(client.poll_event(), Some(Event::Connected));
/// assert_eq!(client.connection_id().lane(), 3);
/// assert_eq!(server.connection_count(), 1);
/// ```
pub struct Endpoint {
    cfg: EndpointConfig,
    /// `cfg.connection`, shared by every connection of the endpoint.
    conn_cfg: Arc<Config>,
    epoch: Instant,
    digest: u64,
    /// Boxed: the table's growth moves pointers, not whole connections
    /// (nor leaves freed copies of them in the heap).
    slots: Vec<Option<Box<Slot>>>,
    /// Each slot's generation: bumped when a connection takes the slot, so
    /// handles of its earlier connections no longer match.
    generations: Vec<u32>,
    free: Vec<usize>,
    by_cid: HashMap<ConnectionId, usize, BuildHasherDefault<CidHasher>>,
    by_nonce: HashMap<[u8; 16], usize>,
    cid_counter: u64,
    /// The timing structure: one deadline per connection.
    deadlines: Deadlines,
    /// Connections touched since the last `poll_timeout`/`handle_timeout`.
    dirty: Vec<usize>,
    /// Connections that may have datagrams to send, in turn.
    ready: VecDeque<usize>,
    /// Connections that may have events, in turn.
    evented: VecDeque<usize>,
    stats: EndpointStats,
    /// The key id of the token key.
    kid: [u8; 4],
    /// The one live connection of each connect token (by its tag).
    by_token: HashMap<[u8; 16], usize>,
    /// Connections held (closing ones included) per source address; an
    /// entry exists only while it is at least 1, so at most
    /// `max_connections` entries.
    per_source: HashMap<SourceKey, usize>,
    /// Handshake-rate buckets of the validated sources.
    rates: RateTable,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        crate::budget::remove_slots(
            &self.cfg.recv_budget,
            &self.cfg.send_budget,
            self.cfg.max_connections,
        );
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("lane", &self.cfg.lane)
            .field("connections", &self.by_cid.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint with no connections; `now` starts its cookie clock.
    pub fn new(cfg: EndpointConfig, now: Instant) -> Result<Self, ConfigError> {
        cfg.connection.validate()?;
        cfg.admission.validate()?;
        if cfg.send_budget.limit() < cfg.connection.max_message_size {
            return Err(ConfigError::SendBudget {
                budget: cfg.send_budget.limit(),
                message: cfg.connection.max_message_size,
            });
        }
        let cfg_kid = cfg.security.clone();
        // The budgets' reserves are split over the connections their
        // endpoints may hold (given back in Drop).
        crate::budget::add_slots(&cfg.recv_budget, &cfg.send_budget, cfg.max_connections);
        Ok(Endpoint {
            digest: cfg.connection.digest(),
            conn_cfg: Arc::new(cfg.connection.clone()),
            cfg,
            epoch: now,
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            by_cid: HashMap::default(),
            by_nonce: HashMap::new(),
            cid_counter: 0,
            deadlines: Deadlines::default(),
            dirty: Vec::new(),
            ready: VecDeque::new(),
            evented: VecDeque::new(),
            stats: EndpointStats::default(),
            kid: match &cfg_kid {
                ServerSecurity::Tokens { key, .. } => token_key_id(key),
                ServerSecurity::Insecure => [0; 4],
            },
            by_token: HashMap::new(),
            per_source: HashMap::new(),
            rates: RateTable::new(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> EndpointStats {
        let mut s = self.stats;
        // Sends since the last settle: only connections handed out by
        // `connection_mut` (and so dirty) can have refused one.
        for &i in &self.dirty {
            if let Some(slot) = &self.slots[i] {
                s.send_budget_refused += slot.conn.send_budget_refusals() - slot.send_refused_seen;
            }
        }
        s
    }

    /// The send budget its connections share (with the other lanes of a
    /// server): its limit, what is used now, the sends it refused.
    pub fn send_budget(&self) -> &SendBudget {
        &self.cfg.send_budget
    }

    /// The receive budget its connections share (with the other lanes of
    /// a server): its limit and what is used now.
    pub fn recv_budget(&self) -> &RecvBudget {
        &self.cfg.recv_budget
    }

    /// The configuration of its connections.
    pub fn config(&self) -> &Config {
        &self.cfg.connection
    }

    /// Connections held.
    pub fn connection_count(&self) -> usize {
        self.by_cid.len()
    }

    /// A connection.
    pub fn connection(&self, h: ConnectionHandle) -> Option<&Connection> {
        let i = self.live(h)?;
        self.slots[i].as_ref().map(|s| &s.conn)
    }

    /// The slot of `h` if `h` names a connection held now (its generation
    /// matches).
    fn live(&self, h: ConnectionHandle) -> Option<usize> {
        let i = h.index();
        (self.generations.get(i) == Some(&h.generation) && self.slots.get(i)?.is_some())
            .then_some(i)
    }

    /// The handle of the connection in slot `i`.
    fn handle_of(&self, i: usize) -> ConnectionHandle {
        ConnectionHandle {
            index: i as u32,
            generation: self.generations[i],
        }
    }

    /// A connection, to send on or close. The endpoint takes it that the
    /// connection changed: it will be polled for datagrams, events and its
    /// deadline.
    pub fn connection_mut(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        let i = self.live(h)?;
        self.touch(i);
        self.slots[i].as_mut().map(|s| &mut s.conn)
    }

    /// The handles of the connections held, in slot order.
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| self.handle_of(i))
    }

    /// Marks connection `i` as changed: to be polled for datagrams and
    /// events, its deadline to be recomputed.
    fn touch(&mut self, i: usize) {
        let Some(Some(slot)) = self.slots.get_mut(i) else {
            return;
        };
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(i);
        }
        if !slot.ready {
            slot.ready = true;
            self.ready.push_back(i);
        }
        if !slot.evented {
            slot.evented = true;
            self.evented.push_back(i);
        }
    }

    /// The address a connection's packets go to (its latest source).
    pub fn peer_addr(&self, h: ConnectionHandle) -> Option<SocketAddr> {
        let i = self.live(h)?;
        self.slots[i].as_ref().map(|s| s.addr)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length.
        <HmacSha256 as Mac>::new_from_slice(&self.cfg.key).expect("HMAC accepts any key length")
    }

    fn cookie_mac(&self, addr: SocketAddr, ts: u32, nonce: &[u8; 16]) -> HmacSha256 {
        let mut m = self.mac();
        m.update(b"keel-rudp cookie");
        m.update(&VERSION.to_be_bytes());
        let ip = match addr.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        m.update(&ip);
        m.update(&addr.port().to_be_bytes());
        m.update(&ts.to_be_bytes());
        m.update(nonce);
        m
    }

    fn now_ts(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.epoch).as_secs() as u32
    }

    fn mint_cookie(&self, now: Instant, addr: SocketAddr, nonce: &[u8; 16]) -> [u8; COOKIE_LEN] {
        let ts = self.now_ts(now);
        let tag = self.cookie_mac(addr, ts, nonce).finalize().into_bytes();
        let mut c = [0u8; COOKIE_LEN];
        c[..4].copy_from_slice(&ts.to_be_bytes());
        c[4..].copy_from_slice(&tag[..16]);
        c
    }

    fn check_cookie(
        &mut self,
        now: Instant,
        addr: SocketAddr,
        nonce: &[u8; 16],
        cookie: &[u8],
    ) -> bool {
        if cookie.is_empty() {
            return false;
        }
        if cookie.len() != COOKIE_LEN {
            self.stats.bad_cookies += 1;
            return false;
        }
        let ts = u32::from_be_bytes([cookie[0], cookie[1], cookie[2], cookie[3]]);
        if self
            .cookie_mac(addr, ts, nonce)
            .verify_truncated_left(&cookie[4..])
            .is_err()
        {
            self.stats.bad_cookies += 1;
            return false;
        }
        let age = self.now_ts(now).checked_sub(ts);
        if age.is_none_or(|a| u64::from(a) > self.cfg.cookie_lifetime.as_secs()) {
            self.stats.stale_cookies += 1;
            return false;
        }
        true
    }

    fn new_cid(&mut self) -> ConnectionId {
        loop {
            self.cid_counter += 1;
            let mut m = self.mac();
            m.update(b"keel-rudp connection id");
            m.update(&self.cid_counter.to_be_bytes());
            let tag = m.finalize().into_bytes();
            let mut id = [0u8; 8];
            id[0] = self.cfg.lane;
            id[1..].copy_from_slice(&tag[..7]);
            let cid = ConnectionId(id);
            if !self.by_cid.contains_key(&cid) {
                return cid;
            }
        }
    }

    /// A hint before [`handle`](Self::handle)s of a batch of received
    /// datagrams: starts loading, for all of them at once, the connection
    /// state their handling reads. A server reaches each connection only
    /// every tick or so, by when its state has left the CPU's caches; loaded
    /// one datagram at a time, each of its allocations is a wait of its
    /// own, but started together the loads of the whole batch overlap.
    /// Changes nothing; a datagram that is not a known connection's is
    /// skipped (only the first [`PREFETCH_BATCH`] are looked at).
    ///
    /// # Examples
    ///
    /// A driver that receives datagrams in batches (`recvmmsg`):
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use std::time::Instant;
    /// use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Endpoint, EndpointConfig};
    /// use keel_rudp_proto::ServerSecurity;
    ///
    /// let config = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
    /// let now = Instant::now();
    /// let mut server = Endpoint::new(
    ///     EndpointConfig::new(0, [7; 32], config, ServerSecurity::Insecure),
    ///     now,
    /// )
    /// .unwrap();
    /// let batch: Vec<(SocketAddr, Vec<u8>)> = Vec::new(); // from the socket
    /// let mut reply = [0u8; 1500];
    /// server.prefetch(batch.iter().map(|(_, d)| d.as_slice()));
    /// for (from, d) in &batch {
    ///     server.handle(now, *from, d, &mut reply);
    /// }
    /// ```
    pub fn prefetch<'d>(&self, datagrams: impl IntoIterator<Item = &'d [u8]>) {
        let mut idx = [0usize; PREFETCH_BATCH];
        let mut n = 0;
        for data in datagrams.into_iter().take(PREFETCH_BATCH) {
            let Ok(Header::Short { cid, .. }) = Header::decode(&mut Reader::new(data)) else {
                continue;
            };
            let Some(&i) = self.by_cid.get(&cid) else {
                continue;
            };
            if let Some(slot) = self.slots[i].as_deref() {
                crate::sys::prefetch_lines(slot);
                crate::sys::prefetch(&self.generations[i]);
                idx[n] = i;
                n += 1;
            }
        }
        // Each pass reads what the previous one asked for (one wait for the
        // whole batch) and asks for what those lines point to.
        for &i in &idx[..n] {
            if let Some(slot) = self.slots[i].as_deref() {
                slot.conn.prefetch_children();
            }
        }
        for &i in &idx[..n] {
            if let Some(slot) = self.slots[i].as_deref() {
                slot.conn.prefetch_grandchildren();
            }
        }
    }

    /// Processes a datagram from `from`. A stateless answer is written to
    /// `reply` (at least 1,200 bytes); it is never larger than `data`.
    pub fn handle(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
        reply: &mut [u8],
    ) -> Handled {
        let mut r = Reader::new(data);
        let header = match Header::decode(&mut r) {
            Ok(h) => h,
            Err(_) => {
                self.stats.malformed += 1;
                return Handled::Dropped;
            }
        };
        match header {
            Header::Short { cid, .. } => {
                let Some(&idx) = self.by_cid.get(&cid) else {
                    self.stats.unknown_connection += 1;
                    return Handled::Dropped;
                };
                let Some(slot) = self.slots[idx].as_mut() else {
                    return Handled::Dropped;
                };
                let before = slot.conn.packets_received();
                let refusals = slot.conn.recv_refusals();
                slot.conn.handle_datagram(now, data);
                let (budget, window) = slot.conn.recv_refusals();
                self.stats.budget_refused += budget - refusals.0;
                self.stats.window_refused += window - refusals.1;
                // A valid packet from a new address moves the connection
                // there (NAT rebinding); an invalid one moves nothing.
                if slot.addr != from && slot.conn.packets_received() > before {
                    slot.addr = from;
                    self.stats.address_changes += 1;
                }
                self.touch(idx);
                Handled::Routed(self.handle_of(idx))
            }
            Header::Long {
                ty: LongType::Hello,
                ..
            } => self.on_hello(now, from, data.len(), r, reply),
            Header::Long { .. } => {
                self.stats.malformed += 1;
                Handled::Dropped
            }
        }
    }

    fn on_hello(
        &mut self,
        now: Instant,
        from: SocketAddr,
        len: usize,
        mut r: Reader<'_>,
        reply: &mut [u8],
    ) -> Handled {
        self.stats.hellos += 1;
        if len < MIN_HELLO_SIZE {
            self.stats.short_hellos += 1;
            return Handled::Dropped;
        }
        let Ok(Frame::Hello {
            nonce,
            config_digest,
            max_ack_delay_us,
            cookie,
            token,
        }) = Frame::decode(&mut r)
        else {
            self.stats.malformed += 1;
            return Handled::Dropped;
        };
        let cap = reply.len().min(len);
        let reply = &mut reply[..cap];
        if !self.check_cookie(now, from, &nonce, cookie) {
            let cookie = self.mint_cookie(now, from, &nonce);
            let mut w = Writer::new(reply);
            let ok = Header::Long {
                ty: LongType::Retry,
                cid: ConnectionId::default(),
            }
            .encode(&mut w)
            .is_ok()
                && Frame::Retry {
                    nonce,
                    cookie: &cookie,
                }
                .encode(&mut w)
                .is_ok();
            if !ok {
                return Handled::Dropped;
            }
            self.stats.retries_sent += 1;
            return Handled::Reply(w.len());
        }
        // The source is validated from here on.
        if let Some(&idx) = self.by_nonce.get(&nonce) {
            if let Some(slot) = &self.slots[idx] {
                let cid = slot.conn.connection_id();
                self.stats.accepts_resent += 1;
                return match write_accept(reply, cid, nonce, self.ack_delay_us()) {
                    Some(n) => Handled::Reply(n),
                    None => Handled::Dropped,
                };
            }
        }
        // A new connection is asked for: the admission limits apply, to
        // validated sources only (a spoofer never gets this far, so it
        // cannot spend another address's share).
        let source = source_key(from, self.cfg.admission.ipv6_prefix_len);
        let mut evicted = false;
        let now_us = now.saturating_duration_since(self.epoch).as_micros() as u64;
        let in_rate = self
            .rates
            .take(source, now_us, &self.cfg.admission, &mut evicted);
        if evicted {
            self.stats.rate_table_evictions += 1;
        }
        let held = self.per_source.get(&source).copied().unwrap_or(0);
        let mut claims = None;
        let refuse = if !in_rate {
            self.stats.refused_rate_limit += 1;
            Some((
                REFUSE_RATE_LIMIT,
                "too many handshakes from this address; try again later",
            ))
        } else if config_digest != self.digest {
            Some((REFUSE_CONFIG_MISMATCH, "channel configuration differs"))
        } else if self.by_cid.len() >= self.cfg.max_connections {
            Some((REFUSE_FULL, "server full"))
        } else if held >= self.cfg.admission.max_connections_per_ip {
            self.stats.refused_address_limit += 1;
            Some((
                REFUSE_ADDRESS_LIMIT,
                "too many connections from this address",
            ))
        } else {
            match self.check_token(now, from, token) {
                Ok(c) => {
                    claims = c;
                    None
                }
                Err(refusal) => Some(refusal),
            }
        };
        if let Some((code, reason)) = refuse {
            self.stats.refused += 1;
            let mut w = Writer::new(reply);
            let ok = Header::Long {
                ty: LongType::Refuse,
                cid: ConnectionId::default(),
            }
            .encode(&mut w)
            .is_ok()
                && Frame::Accept {
                    nonce,
                    max_ack_delay_us: self.ack_delay_us(),
                }
                .encode(&mut w)
                .is_ok()
                && Frame::Close {
                    code,
                    reason: reason.as_bytes(),
                }
                .encode(&mut w)
                .is_ok();
            return if ok {
                Handled::Reply(w.len())
            } else {
                Handled::Dropped
            };
        }
        let cid = self.new_cid();
        let Some(n) = write_accept(reply, cid, nonce, self.ack_delay_us()) else {
            return Handled::Dropped;
        };
        let mut conn = match Connection::established_shared(
            Arc::clone(&self.conn_cfg),
            Side::Server,
            cid,
            now,
        ) {
            Ok(c) => c,
            Err(_) => return Handled::Dropped,
        };
        conn.set_peer_max_ack_delay(Duration::from_micros(max_ack_delay_us));
        let mut token = None;
        conn.set_recv_budget(self.cfg.recv_budget.clone());
        conn.set_send_budget(self.cfg.send_budget.clone());
        if let Some(c) = claims {
            // One live connection per token: the newest replaces the older.
            if let Some(old) = self.by_token.remove(&c.tag) {
                self.replace(now, old);
            }
            token = Some(c.tag);
            conn.secure(c, nonce);
        }
        let slot = Box::new(Slot {
            conn,
            addr: from,
            nonce,
            source,
            token,
            dirty: false,
            ready: false,
            evented: false,
            send_refused_seen: 0,
        });
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                // 0 is never a generation: a handle's bits are never 0.
                self.generations[i] = self.generations[i].checked_add(1).unwrap_or(1);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.generations.push(1);
                self.slots.len() - 1
            }
        };
        self.by_cid.insert(cid, idx);
        self.by_nonce.insert(nonce, idx);
        if let Some(tag) = token {
            self.by_token.insert(tag, idx);
        }
        *self.per_source.entry(source).or_insert(0) += 1;
        self.stats.connections_created += 1;
        self.touch(idx);
        Handled::Accepted(self.handle_of(idx), n)
    }

    /// Closes connection `i`, whose connect token a new connection took:
    /// its peer gets a CLOSE with [`CLOSE_REPLACED`], its handler a
    /// `Disconnected` event. It keeps its slot (and its share of its
    /// source's limit) until it is removed, like any closing connection.
    fn replace(&mut self, now: Instant, i: usize) {
        let Some(slot) = self.slots.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        slot.token = None;
        if slot.conn.state() == State::Connected {
            slot.conn.close(
                now,
                CLOSE_REPLACED,
                "replaced by a new connection with the same connect token",
            );
            self.stats.connections_replaced += 1;
        }
        self.touch(i);
    }

    /// The security check of a validated hello: `Ok(Some(claims))` for a
    /// valid token, `Ok(None)` in insecure mode, else the REFUSE to send.
    fn check_token(
        &mut self,
        now: Instant,
        from: SocketAddr,
        token: &[u8],
    ) -> Result<Option<TokenClaims>, (u64, &'static str)> {
        let (key, addrs) = match (&self.cfg.security, token.is_empty()) {
            (ServerSecurity::Insecure, true) => return Ok(None),
            (ServerSecurity::Insecure, false) => {
                self.stats.security_mismatches += 1;
                return Err((
                    REFUSE_SECURITY_MISMATCH,
                    "server is in insecure mode; client sent a connect token",
                ));
            }
            (ServerSecurity::Tokens { .. }, true) => {
                self.stats.security_mismatches += 1;
                return Err((
                    REFUSE_SECURITY_MISMATCH,
                    "server requires a connect token; client is in insecure mode",
                ));
            }
            (ServerSecurity::Tokens { key, public_addrs }, false) => (key, public_addrs),
        };
        let unix_now = self.unix_now(now);
        // A valid token is bound to this IP (the replay cache's one lock),
        // unless another IP holds it: another port of the same IP may use
        // it again (a client that crashed and reconnects replaces its old
        // connection). Bound even if the hello then fails to be answered:
        // its source proved it receives at this IP.
        let ip = from.ip().to_canonical();
        let cache = &self.cfg.replay_cache;
        let res = open_token(key, &self.kid, addrs, unix_now, token).and_then(|c| {
            if cache.claim(c.tag, ip, c.expires_at, unix_now) {
                Ok(c)
            } else {
                Err(TokenError::Replayed)
            }
        });
        match res {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                let counter = match e {
                    TokenError::Forged => &mut self.stats.tokens_forged,
                    TokenError::WrongKey => &mut self.stats.tokens_wrong_key,
                    TokenError::Expired => &mut self.stats.tokens_expired,
                    TokenError::WrongServer => &mut self.stats.tokens_wrong_server,
                    TokenError::Replayed => &mut self.stats.tokens_replayed,
                };
                *counter += 1;
                Err((REFUSE_TOKEN, e.as_str()))
            }
        }
    }

    fn unix_now(&self, now: Instant) -> u64 {
        self.cfg.unix_time_at_start + now.saturating_duration_since(self.epoch).as_secs()
    }

    /// The next datagram any connection has to send: its handle, where to
    /// send it, and its length in `buf`. Only connections that changed
    /// (a datagram, a timer, [`Endpoint::connection_mut`]) are asked, in
    /// turn, so a busy connection does not starve the others.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(ConnectionHandle, SocketAddr, usize)> {
        while let Some(i) = self.ready.pop_front() {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            if !slot.ready {
                continue;
            }
            if let Some(len) = slot.conn.poll_transmit(now, buf) {
                let addr = slot.addr;
                // Sending moves its timers; then its turn passes.
                if !slot.dirty {
                    slot.dirty = true;
                    self.dirty.push(i);
                }
                self.ready.push_back(i);
                let h = ConnectionHandle {
                    index: i as u32,
                    generation: self.generations[i],
                };
                return Some((h, addr, len));
            }
            slot.ready = false;
        }
        None
    }

    /// The next event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        while let Some(&i) = self.evented.front() {
            let Some(slot) = self.slots[i].as_mut() else {
                self.evented.pop_front();
                continue;
            };
            if slot.evented {
                if let Some(e) = slot.conn.poll_event() {
                    if matches!(e, Event::Disconnected(_)) && !slot.dirty {
                        // Removable once its events are read.
                        slot.dirty = true;
                        self.dirty.push(i);
                    }
                    let h = ConnectionHandle {
                        index: i as u32,
                        generation: self.generations[i],
                    };
                    return Some((h, e));
                }
                slot.evented = false;
            }
            self.evented.pop_front();
        }
        None
    }

    /// Recomputes the deadlines of the connections that changed and
    /// removes those closed with no events left.
    fn settle(&mut self) {
        while let Some(i) = self.dirty.pop() {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            slot.dirty = false;
            let refused = slot.conn.send_budget_refusals();
            self.stats.send_budget_refused += refused - slot.send_refused_seen;
            slot.send_refused_seen = refused;
            if slot.conn.state() == State::Closed && !slot.conn.has_events() {
                let left = slot.conn.undelivered();
                if left.messages > 0 {
                    self.stats.undelivered_connections += 1;
                    self.stats.undelivered_messages += left.messages;
                }
                if left.close_unacknowledged {
                    self.stats.closes_unacknowledged += 1;
                }
                if slot.conn.ended_by_ack_timeout() {
                    self.stats.ack_timeouts += 1;
                }
                let cid = slot.conn.connection_id();
                let nonce = slot.nonce;
                self.by_cid.remove(&cid);
                self.by_nonce.remove(&nonce);
                if let Some(tag) = slot.token {
                    self.by_token.remove(&tag);
                }
                if let Some(n) = self.per_source.get_mut(&slot.source) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_source.remove(&slot.source);
                    }
                }
                self.slots[i] = None;
                self.free.push(i);
                self.deadlines.set(i, None);
                self.stats.connections_removed += 1;
            } else {
                self.deadlines.set(i, slot.conn.poll_timeout());
            }
        }
    }

    /// The earliest timer of any connection: the top of the endpoint's
    /// deadline heap, after the deadlines of the connections that changed
    /// are brought up to date (so this takes `&mut self`). Also removes
    /// connections that are closed and whose events were read.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.settle();
        self.deadlines.next()
    }

    /// Runs the timers due at `now` (only of the connections whose deadline
    /// passed) and removes connections that are closed and have no events
    /// left.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.settle();
        // Each connection is due at most once here: its deadline is
        // cleared when popped and set again only by `settle` below.
        while let Some(i) = self.deadlines.pop_due(now) {
            if let Some(slot) = self.slots[i].as_mut() {
                slot.conn.handle_timeout(now);
                self.touch(i);
            }
        }
        self.settle();
    }
}

impl Endpoint {
    /// This end's max ack delay as ACCEPT announces it.
    fn ack_delay_us(&self) -> u64 {
        self.cfg.connection.announced_ack_delay().as_micros() as u64
    }
}

fn write_accept(
    reply: &mut [u8],
    cid: ConnectionId,
    nonce: [u8; 16],
    max_ack_delay_us: u64,
) -> Option<usize> {
    let mut w = Writer::new(reply);
    Header::Long {
        ty: LongType::Accept,
        cid,
    }
    .encode(&mut w)
    .ok()?;
    Frame::Accept {
        nonce,
        max_ack_delay_us,
    }
    .encode(&mut w)
    .ok()?;
    Some(w.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn prefetch_looks_at_a_bounded_part_of_a_batch_of_any_size() {
        let config = Config::new(vec![crate::ChannelConfig::new(
            crate::ChannelKind::ReliableOrdered,
        )]);
        let now = Instant::now();
        let mut server = Endpoint::new(
            EndpointConfig::new(0, [7; 32], config.clone(), ServerSecurity::Insecure),
            now,
        )
        .unwrap();
        let mut client =
            Connection::connect(config, crate::ClientSecurity::Insecure, [1; 16], now).unwrap();
        let addr = "192.0.2.1:5000".parse().unwrap();
        let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
        for _ in 0..2 {
            let n = client.poll_transmit(now, &mut buf).unwrap();
            match server.handle(now, addr, &buf[..n], &mut reply) {
                Handled::Reply(m) | Handled::Accepted(_, m) => {
                    client.handle_datagram(now, &reply[..m])
                }
                other => panic!("{other:?}"),
            }
        }
        client.send(0, b"hi").unwrap();
        let n = client.poll_transmit(now, &mut buf).unwrap();
        // A receive batch may hold up to 1,024 datagrams, all of one
        // known connection; the look-ahead keeps to its fixed room.
        let batch = vec![&buf[..n]; 4 * PREFETCH_BATCH];
        server.prefetch(batch.iter().copied());
        assert!(matches!(
            server.handle(now, addr, &buf[..n], &mut reply),
            Handled::Routed(_)
        ));
    }

    #[test]
    fn cid_hashes_spread_keys_of_one_lane_over_the_tables_buckets() {
        // IDs as `new_cid` makes them: one lane byte, seven MAC bytes.
        let build = BuildHasherDefault::<CidHasher>::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut buckets = HashSet::new();
        let mut tags = HashSet::new();
        for _ in 0..1024 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut id = x.to_be_bytes();
            id[0] = 3;
            let h = build.hash_one(ConnectionId(id));
            // hashbrown: the low bits pick the bucket, the top 7 the tag.
            buckets.insert(h & 1023);
            tags.insert(h >> 57);
        }
        // 1,024 random keys fill about 63 % of 1,024 buckets, and every tag.
        assert!(buckets.len() > 560, "{} buckets used", buckets.len());
        assert_eq!(tags.len(), 128);
    }
}
