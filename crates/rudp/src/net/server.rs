//! A keel-rudp server on keel-udp lanes.

use keel_reactor::PostError;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use keel_reactor::Handle;
use keel_udp::{
    CounterSnapshot, DatagramSocket, DatagramSocketCtx, DatagramSockets,
    EndpointConfig as UdpConfig, LaneSteering, LanesConfig,
};

use crate::net::conns::Conns;
use crate::net::handler::{Ctx, Handler};
use crate::net::lane::{LaneState, ServerLane};
use crate::net::sender::{Job, Post, Sender};
pub use crate::net::shared::BroadcastStats;
use crate::net::shared::ServerShared;
use crate::net::stop::{LaneFailure, StopReport, Stopping};
use keel_rudp_proto::wire::LONG_HEADER_BIT;
use keel_rudp_proto::Config;
use keel_rudp_proto::SendError;
use keel_rudp_proto::ServerSecurity;
use keel_rudp_proto::REPLAY_CACHE;
use keel_rudp_proto::{Admission, ReplayCache};
use keel_rudp_proto::{Endpoint, EndpointConfig, EndpointStats};

/// The `max_ack_delay` [`ServerConfig::new`] gives a server's connections
/// when the [`Config`] it is given has the default (5 ms): 25 ms, as
/// RFC 9002's default.
///
/// A game server receives each client's input every tick (60 Hz: every
/// 16.7 ms) and sends its snapshots at its own tick (20 to 60 Hz). With
/// 5 ms, most inputs are acknowledged in a packet of their own before
/// the next snapshot leaves; with 25 ms most acknowledgements ride on a
/// snapshot at 60 Hz, and at 20 Hz one packet of its own covers two or
/// three inputs (every second packet is acknowledged at once, every third
/// while the acknowledgement waits for the snapshot tick on a clean
/// link): 39 % and 30 % fewer datagrams from a server of 200 clients,
/// `docs/performance/rudp.md` ("Server acknowledgements at a game
/// tick"). The cost: the client's probe of a lost last packet
/// waits up to 20 ms longer; losses amid traffic are still reported at
/// once (a packet out of order is acknowledged without delay).
pub const SERVER_MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// Settings of a [`Server`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Lanes: sockets sharing the port (`SO_REUSEPORT`), each with its own
    /// endpoint and connections. 1..=256; default 1. With more than one,
    /// packets are steered by the lane byte of their connection ID
    /// (Linux), so a client stays on its lane when its address changes,
    /// and handshakes by their source IP (an IPv6 one by its first
    /// `min(admission.ipv6_prefix_len, 64)` bits), so one address does
    /// all its handshakes on one lane and the admission limits hold for
    /// the whole server. The lanes share one replay cache of connect
    /// tokens ([`REPLAY_CACHE`](crate::REPLAY_CACHE) per lane).
    pub lanes: usize,
    /// Settings of every connection (the channels must match the clients').
    pub connection: Config,
    /// Connections one lane holds at most (default 4,096); past it a
    /// hello gets a REFUSE with [`REFUSE_FULL`](crate::REFUSE_FULL).
    pub max_connections: usize,
    /// Connections and handshakes per second one source address gets on
    /// the server (whatever the number of lanes: all of one address's
    /// handshakes reach one lane), and one live connection per connect
    /// token (see [`Admission`]; defaults: 16 connections, 4 handshakes
    /// per second after a burst of 16). In insecure mode too.
    pub admission: Admission,
    /// How long a handshake cookie stays valid (default 10 s).
    pub cookie_lifetime: Duration,
    /// The secret keying cookies and connection IDs; `None` (the default)
    /// draws 32 bytes from the OS. Give the same key to every process
    /// that must accept the others' cookies.
    pub key: Option<[u8; 32]>,
    /// keel-udp settings of each lane's socket (batch sizes, queues, the
    /// link conditioner for tests). The default sets Don't Fragment on
    /// Linux (`udp.socket.dont_fragment`): keel-rudp splits messages into
    /// datagrams of at most `connection.max_datagram_size` itself, and IP
    /// fragments would only lose more (one lost fragment loses the whole
    /// datagram); a `max_datagram_size` above the interface MTU then fails
    /// to send (counted in the socket's send errors) instead of fragmenting.
    /// `config.udp.socket.dont_fragment = false` leaves it to the kernel.
    pub udp: UdpConfig,
    /// Connect tokens and sealed packets, or insecure by name.
    pub security: ServerSecurity,
    /// Bytes of receive state (partly received and held-back messages,
    /// de-duplication windows) all connections of all lanes hold at most,
    /// beside each one's `max_recv_buffer` (default
    /// [`DEFAULT_RECV_BUDGET`](crate::DEFAULT_RECV_BUDGET), 256 MiB). At
    /// it, frames needing more memory are refused unacknowledged (the
    /// peers resend) and counted in
    /// [`EndpointStats::budget_refused`](crate::EndpointStats::budget_refused).
    pub recv_budget: usize,
    /// Bytes of messages all connections of all lanes hold to send
    /// (queued, or awaiting acknowledgement; each message counted with its
    /// bookkeeping, see [`SendBudget`](crate::SendBudget)), beside
    /// each one's `max_send_buffer` (default
    /// [`DEFAULT_SEND_BUDGET`](crate::DEFAULT_SEND_BUDGET), 256 MiB; at
    /// least `connection.max_message_size`). At it, sends fail with
    /// [`SendError::BudgetSpent`](crate::SendError::BudgetSpent), counted
    /// in [`EndpointStats::send_budget_refused`](crate::EndpointStats::send_budget_refused).
    pub send_budget: usize,
}

impl ServerConfig {
    /// Defaults with these connection settings and this security
    /// (connect tokens, or [`ServerSecurity::Insecure`] by name).
    ///
    /// A `connection.max_ack_delay` left at [`Config`]'s default (5 ms)
    /// becomes [`SERVER_MAX_ACK_DELAY`] (25 ms), which fits a server that
    /// sends at a game tick; any other value is kept. For another one,
    /// set `config.connection.max_ack_delay` after `new`.
    pub fn new(mut connection: Config, security: ServerSecurity) -> Self {
        if connection.max_ack_delay == Config::new(Vec::new()).max_ack_delay {
            connection.max_ack_delay = SERVER_MAX_ACK_DELAY;
        }
        ServerConfig {
            security,
            lanes: 1,
            connection,
            max_connections: 4096,
            admission: Admission::default(),
            cookie_lifetime: Duration::from_secs(10),
            key: None,
            udp: udp_defaults(),
            recv_budget: keel_rudp_proto::DEFAULT_RECV_BUDGET,
            send_budget: keel_rudp_proto::DEFAULT_SEND_BUDGET,
        }
    }
}

pub(crate) use keel_rudp_proto::os_random;

/// keel-udp's defaults with Don't Fragment where keel-udp can set it
/// (Linux): see [`ServerConfig::udp`].
pub(crate) fn udp_defaults() -> UdpConfig {
    let mut udp = UdpConfig::default();
    udp.socket.dont_fragment = cfg!(target_os = "linux");
    udp
}

pub(crate) fn invalid(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {e}"))
}

struct LanePost<H: Handler>(DatagramSocket<LaneState<H>>);

impl<H: Handler> Post for LanePost<H> {
    fn post(&self, job: Job) -> Result<(), PostError> {
        self.0.post(move |st, udp| st.run_job(udp, job))
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    fn close(&self) {
        self.0.close();
    }
}

/// A running server: `Send + Sync + Clone`.
///
/// # Examples
///
/// ```
/// use keel_reactor::{IoModel, Runtime};
/// use keel_rudp::{ChannelConfig, ChannelKind, Config, ConnectionHandle, Ctx, Handler};
/// use keel_rudp::{Server, ServerConfig, ServerSecurity};
///
/// /// Echoes every message on the channel it came on.
/// struct Echo;
/// impl Handler for Echo {
///     fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
///         let _ = ctx.send(conn, channel, data);
///     }
/// }
///
/// let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
/// let channels = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
/// // Only clients with a connect token minted under this key for this
/// // address get in (see docs/security.md).
/// let security = ServerSecurity::Tokens {
///     key: [42; 32],
///     public_addrs: vec!["203.0.113.7:4000".parse()?],
/// };
/// let config = ServerConfig::new(channels, security);
/// let server = Server::bind(rt.handles(), "127.0.0.1:0".parse()?, config, |_| Echo)?;
/// assert_eq!(server.stats().connections_created, 0);
/// server.stop();
/// rt.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Server<H: Handler> {
    group: DatagramSockets<LaneState<H>>,
    stats: Arc<[Arc<Mutex<EndpointStats>>]>,
    /// Each lane's handler panic, once it panicked.
    failures: Arc<[Arc<Mutex<Option<String>>>]>,
    /// Each lane, to close it when it does not report a stop in time.
    posts: Arc<[Arc<dyn Post>]>,
    close_timeout: Duration,
    shared: Arc<ServerShared>,
    /// Channels configured and `max_message_size`, to check a broadcast
    /// before it is posted.
    channels: usize,
    max_message_size: usize,
}

impl<H: Handler> Clone for Server<H> {
    fn clone(&self) -> Self {
        Server {
            group: self.group.clone(),
            stats: self.stats.clone(),
            failures: self.failures.clone(),
            posts: self.posts.clone(),
            close_timeout: self.close_timeout,
            shared: self.shared.clone(),
            channels: self.channels,
            max_message_size: self.max_message_size,
        }
    }
}

/// What [`Server::status`] reports (as keel-udp's `ServerStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerStatus {
    /// Every lane is serving.
    Running,
    /// Every lane has closed ([`Server::stop`], or its runtime stopped).
    Stopped,
    /// The handler of `lane` panicked: that lane's connections were
    /// closed with [`CLOSE_HANDLER_PANIC`](crate::CLOSE_HANDLER_PANIC)
    /// and it refuses new ones; the other lanes keep serving
    /// ([`Server::failed_lanes`] lists every failed lane).
    Failed {
        /// The first lane (by index) whose handler panicked.
        lane: usize,
        /// The panic's message.
        message: String,
    },
}

impl<H: Handler> std::fmt::Debug for Server<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr())
            .field("lanes", &self.lanes())
            .finish()
    }
}

impl<H: Handler> Server<H> {
    /// Binds `config.lanes` sockets to `addr` and starts one lane per
    /// socket, placed round-robin over `reactors`; `handler(i)` makes lane
    /// `i`'s handler. A panic in a lane's handler closes that lane's
    /// connections only, with
    /// [`CLOSE_HANDLER_PANIC`](crate::CLOSE_HANDLER_PANIC)
    /// ([`Server::failed_lanes`]); it does not stop the runtime.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the field for a bad config; keel-udp's errors
    /// of socket setup (`Unsupported` for several lanes off Linux).
    pub fn bind(
        reactors: &[Handle],
        addr: SocketAddr,
        config: ServerConfig,
        mut handler: impl FnMut(usize) -> H,
    ) -> io::Result<Server<H>> {
        config
            .connection
            .validate()
            .map_err(|e| invalid("connection", e))?;
        if !(1..=256).contains(&config.lanes) {
            return Err(invalid(
                "lanes",
                format!("expected 1..=256, got {}", config.lanes),
            ));
        }
        if config.max_connections == 0 {
            return Err(invalid("max_connections", "expected at least 1, got 0"));
        }
        config
            .admission
            .validate()
            .map_err(|e| invalid("admission", e))?;
        if config.send_budget < config.connection.max_message_size {
            return Err(invalid(
                "send_budget",
                format!(
                    "expected at least connection.max_message_size ({} bytes), got {}",
                    config.connection.max_message_size, config.send_budget
                ),
            ));
        }
        let key = match config.key {
            Some(k) => k,
            None => os_random()?,
        };
        let now = Instant::now();
        let max_datagram = config.connection.max_datagram_size;
        let mut selves = Vec::with_capacity(config.lanes);
        let mut stats = Vec::with_capacity(config.lanes);
        let mut endpoints = Vec::with_capacity(config.lanes);
        let budget = keel_rudp_proto::RecvBudget::new(config.recv_budget);
        let send_budget = keel_rudp_proto::SendBudget::new(config.send_budget);
        // One cache for all lanes: a token taken on one is refused on
        // every other for another IP.
        let replay_cache = ReplayCache::with_capacity(REPLAY_CACHE * config.lanes);
        let failures: Vec<Arc<Mutex<Option<String>>>> =
            (0..config.lanes).map(|_| Arc::default()).collect();
        let shared = Arc::new(ServerShared::default());
        for lane in 0..config.lanes {
            let mut ec = EndpointConfig::new(
                lane as u8,
                key,
                config.connection.clone(),
                config.security.clone(),
            );
            ec.cookie_lifetime = config.cookie_lifetime;
            ec.max_connections = config.max_connections;
            ec.admission = config.admission;
            ec.recv_budget = budget.clone();
            ec.send_budget = send_budget.clone();
            ec.replay_cache = replay_cache.clone();
            endpoints.push(Some(Box::new(
                Endpoint::new(ec, now).map_err(|e| invalid("connection", e))?,
            )));
            selves.push(Arc::new(OnceLock::<Arc<dyn Post>>::new()));
            stats.push(Arc::new(Mutex::new(EndpointStats::default())));
        }
        let lanes = LanesConfig {
            lanes: config.lanes,
            // Byte 0 of a connection ID (offset 1 of a short header) is
            // its lane; long headers (handshakes) have no ID yet and go to
            // the lane of their source IP, so each source address does all
            // its handshakes on one lane, which then sees all of its
            // connections: the admission limits per address and the one
            // live connection per token (from one IP) hold server-wide.
            steering: LaneSteering::PayloadByte {
                offset: 1,
                hash_if_first_byte_has: LONG_HEADER_BIT,
                hash_source_ip: Some(config.admission.ipv6_prefix_len.min(64)),
            },
            endpoint: config.udp.clone(),
        };
        let group = DatagramSocket::bind_lanes(reactors, addr, lanes, |i| {
            let conns = Conns::Server {
                endpoint: endpoints[i].take().expect("one endpoint per lane"),
                locals: Vec::new(),
            };
            LaneState::new(
                handler(i),
                conns,
                i,
                max_datagram,
                selves[i].clone(),
                failures[i].clone(),
                Some(ServerLane {
                    published: stats[i].clone(),
                    shared: shared.clone(),
                }),
            )
        })?;
        let mut posts: Vec<Arc<dyn Post>> = Vec::with_capacity(config.lanes);
        for (i, me) in selves.iter().enumerate() {
            let socket = group.lane(i).expect("a socket per lane").clone();
            let post: Arc<dyn Post> = Arc::new(LanePost(socket));
            let _ = me.set(post.clone());
            posts.push(post);
        }
        Ok(Server {
            group,
            stats: stats.into(),
            failures: failures.into(),
            posts: posts.into(),
            close_timeout: config.connection.close_timeout,
            shared,
            channels: config.connection.channels.len(),
            max_message_size: config.connection.max_message_size,
        })
    }

    /// The address the lanes are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.group.local_addr()
    }

    /// Lanes.
    pub fn lanes(&self) -> usize {
        self.group.lanes()
    }

    /// The handshake and routing counters of all lanes, added up (as of
    /// each lane's last round of work).
    pub fn stats(&self) -> EndpointStats {
        self.stats
            .iter()
            .filter_map(|s| s.lock().ok().map(|s| *s))
            .fold(EndpointStats::default(), |a, b| a + b)
    }

    /// Lane `lane`'s handshake and routing counters.
    pub fn lane_stats(&self, lane: usize) -> Option<EndpointStats> {
        self.stats.get(lane)?.lock().ok().map(|s| *s)
    }

    /// keel-udp's datagram counters of all lanes, added up.
    pub fn udp_counters(&self) -> CounterSnapshot {
        self.group.counters()
    }

    /// Runs `f` on lane `lane` with its handler and a context (a game
    /// tick: send snapshots to the lane's connections); what it sends
    /// leaves at once.
    ///
    /// # Errors
    ///
    /// [`PostError::NoSuchLane`](crate::PostError::NoSuchLane),
    /// [`PostError::Full`](crate::PostError::Full) if the lane's inbox is
    /// full, [`PostError::Closed`](crate::PostError::Closed) if it is
    /// closed; `f` is dropped before this returns.
    pub fn post<F>(&self, lane: usize, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut H, &mut Ctx<'_>) + Send + 'static,
    {
        let Some(socket) = self.group.lane(lane) else {
            return Err(PostError::NoSuchLane {
                lane,
                lanes: self.lanes(),
            });
        };
        socket.post(move |st, udp: &mut DatagramSocketCtx<'_>| {
            st.with_ctx(Instant::now(), f);
            st.pump(udp);
        })
    }

    /// Sends `data` on `channel` to every connection of every lane in
    /// [`State::Connected`](crate::State::Connected) (a chat line to everyone, a server message):
    /// one job per lane, the bytes copied once for all of them, each
    /// lane queueing them on its connections, which send them with the
    /// lane's next round. Returns how many lanes took it: fewer than
    /// [`Server::lanes`] when some had a full inbox (keel-udp's
    /// `inbox_capacity`) or were closed; their connections did not get
    /// it. What a connection refuses (backpressure, the send budget) goes
    /// to that lane's [`Handler::send_failed`]; everything is counted in
    /// [`Server::broadcast_stats`].
    ///
    /// A game that ticks each lane itself sends its snapshots from
    /// [`Handler::tick`] with [`Ctx::connected`] instead: a broadcast is
    /// for messages that come from outside the lanes.
    ///
    /// # Errors
    ///
    /// [`SendError::UnknownChannel`] and [`SendError::MessageTooLarge`],
    /// checked before anything is posted.
    pub fn broadcast(&self, channel: u8, data: &[u8]) -> Result<usize, SendError> {
        if usize::from(channel) >= self.channels {
            return Err(SendError::UnknownChannel {
                channel,
                channels: self.channels,
            });
        }
        if data.len() > self.max_message_size {
            return Err(SendError::MessageTooLarge {
                len: data.len(),
                max: self.max_message_size,
            });
        }
        let data: Arc<[u8]> = data.into();
        let mut taken = 0;
        for lane in 0..self.lanes() {
            let Some(socket) = self.group.lane(lane) else {
                continue;
            };
            let data = data.clone();
            if socket
                .post(move |st: &mut LaneState<H>, udp| st.broadcast(udp, channel, &data))
                .is_ok()
            {
                taken += 1;
            }
        }
        let counters = &self.shared.broadcasts;
        counters
            .lanes_taken
            .fetch_add(taken as u64, Ordering::Relaxed);
        counters
            .lanes_refused
            .fetch_add((self.lanes() - taken) as u64, Ordering::Relaxed);
        Ok(taken)
    }

    /// What [`Server::broadcast`] did so far, over every lane.
    pub fn broadcast_stats(&self) -> BroadcastStats {
        self.shared.broadcasts.snapshot()
    }

    /// A [`Sender`] for the live connection whose connect token carried
    /// `client_id` ([`TokenClaims::client_id`](crate::TokenClaims)), on
    /// whichever lane holds it, from any thread (an admin console that
    /// kicks or messages a player by its id). `None` when no connection
    /// of that id has reached its handler's `connected` or its
    /// `disconnected` has run.
    ///
    /// The lanes record each connection with a token when its
    /// `connected` runs and forget it at its `disconnected`; a client
    /// that reconnects (its token's new connection replaces the old one,
    /// [`CLOSE_REPLACED`](crate::CLOSE_REPLACED)) maps to the new
    /// connection from its `connected` on. If the backend minted several
    /// tokens with one id and they are live at once, the newest
    /// connection wins. The record holds one entry per live connection
    /// at most (`lanes × max_connections`). A server in insecure mode has
    /// no client ids: this is always `None` there.
    ///
    /// The `Sender` addresses that one connection: if it ends, its sends
    /// fail ([`Handler::send_failed`] with [`SendError::Closed`]) and
    /// never reach a later connection.
    pub fn sender_for_client(&self, client_id: u64) -> Option<Sender> {
        let e = self.shared.client_ids.get(client_id)?;
        Some(Sender {
            lane: self.posts.get(e.lane)?.clone(),
            lane_index: e.lane,
            conn: e.conn,
            cid: Some(e.cid),
        })
    }

    /// Client ids recorded for [`Server::sender_for_client`] (as many as
    /// live connections with a token that reached `connected`).
    pub fn client_ids(&self) -> usize {
        self.shared.client_ids.len()
    }

    /// Stops the server without losing anything silently: every
    /// connection flushes its queued reliable messages, then sends a
    /// CLOSE ([`CLOSE_STOPPED`], "server stopping") and repeats it until
    /// the client acknowledges it, all by the connections'
    /// `close_timeout` (default 2 s) from now; then every lane closes.
    /// The handler's `disconnected` runs for each connection as it ends.
    ///
    /// Blocks until every lane is done: at once when nothing is pending,
    /// at most `close_timeout` plus 100 ms. Returns what was not
    /// delivered, per connection, and which lanes had failed. Do not call
    /// it on the thread that turns the reactor the lanes run on (a game
    /// loop's `Reactor::turn`): use [`Server::begin_stop`] there.
    ///
    /// [`CLOSE_STOPPED`]: crate::CLOSE_STOPPED
    pub fn stop(&self) -> StopReport {
        self.stop_with(crate::CLOSE_STOPPED, "server stopping")
    }

    /// [`stop`](Self::stop) with the game's own code and reason (at most
    /// 128 bytes are sent), e.g. "map change, reconnect in 5 s".
    pub fn stop_with(&self, code: u64, reason: &str) -> StopReport {
        self.begin_stop(code, reason).wait()
    }

    /// Starts the stop of [`stop_with`](Self::stop_with) and returns at
    /// once; the [`Stopping`] gives the report ([`Stopping::wait`], or
    /// [`Stopping::poll`] from a game loop that turns the reactor).
    pub fn begin_stop(&self, code: u64, reason: &str) -> Stopping {
        let deadline = Instant::now() + self.close_timeout;
        let (tx, rx) = std::sync::mpsc::channel();
        let reason: Arc<str> = reason.into();
        let mut waiting = Vec::with_capacity(self.lanes());
        for (i, post) in self.posts.iter().enumerate() {
            let Some(socket) = self.group.lane(i) else {
                continue;
            };
            let (tx, reason) = (tx.clone(), reason.clone());
            let posted = socket.post_control(move |st: &mut LaneState<H>, udp| {
                st.begin_stop(udp, code, &reason, deadline, tx)
            });
            if posted.is_ok() {
                waiting.push((i, post.clone()));
            }
        }
        Stopping {
            rx,
            waiting,
            deadline,
            report: StopReport {
                failed_lanes: self.failed_lanes(),
                ..StopReport::default()
            },
        }
    }

    /// The lanes whose handler panicked, with the panic's message, by
    /// lane. Their connections were closed with
    /// [`CLOSE_HANDLER_PANIC`](crate::CLOSE_HANDLER_PANIC); the other
    /// lanes keep serving.
    pub fn failed_lanes(&self) -> Vec<LaneFailure> {
        self.failures
            .iter()
            .enumerate()
            .filter_map(|(lane, f)| {
                let message = f.lock().ok()?.clone()?;
                Some(LaneFailure { lane, message })
            })
            .collect()
    }

    /// Running, stopped, or failed because a handler panicked on a lane.
    pub fn status(&self) -> ServerStatus {
        if let Some(f) = self.failed_lanes().into_iter().next() {
            return ServerStatus::Failed {
                lane: f.lane,
                message: f.message,
            };
        }
        if self.is_stopped() {
            ServerStatus::Stopped
        } else {
            ServerStatus::Running
        }
    }

    /// Whether every lane has closed.
    pub fn is_stopped(&self) -> bool {
        self.group.is_closed()
    }
}
