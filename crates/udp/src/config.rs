//! Configuration of servers, clients and datagram sockets.

use std::io;
use std::time::Duration;

use crate::conditioner::Impairment;
use crate::socket::SocketOptions;

/// Default bound of a send queue in bytes (16 MiB).
pub const DEFAULT_SEND_QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// Default bound of a send queue in datagrams.
pub const DEFAULT_SEND_QUEUE_DATAGRAMS: usize = 1024;
/// Default bound of a lane's inbox: sends and closures other threads hand
/// one lane (server lane, client, datagram socket) that it has not run yet.
pub const DEFAULT_INBOX_CAPACITY: usize = 16_384;
/// Default datagrams per `recvmmsg`/`sendmmsg`.
pub const DEFAULT_BATCH: usize = 64;
/// Default receive slot: large enough for any UDP payload, so nothing is
/// truncated. Only the bytes a datagram fills are touched, so untouched
/// pages of the slots cost no resident memory.
pub const DEFAULT_MAX_DATAGRAM: usize = 65_536;

/// Settings every endpoint (server lane, client, datagram socket) shares.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointConfig {
    /// The most datagrams per receive and send system call
    /// (`recvmmsg`/`sendmmsg`); 1 selects the portable
    /// one-datagram-per-call path. 1..=1024. The per-datagram state of a
    /// call (headers, addresses, control space) is not allocated for all
    /// of them up front: it starts with 8 slots (or `batch` if smaller)
    /// and doubles, up to `batch`, when a call fills every slot (or a send
    /// has more queued), never shrinking; so a socket that seldom gets
    /// more than a few datagrams per call (a client) stays small, and
    /// steady state allocates nothing.
    pub batch: usize,
    /// Receive slot size in bytes; a larger datagram is truncated by the
    /// kernel, then dropped and counted (`truncated`). 1..=65,536.
    pub max_datagram: usize,
    /// Bound of the send queue in bytes (datagrams wait there when the
    /// socket would block); past it sends fail with `QueueFull`.
    pub send_queue_bytes: usize,
    /// Bound of the send queue in datagrams.
    pub send_queue_datagrams: usize,
    /// Bound of the lane's inbox: sends from other threads
    /// (`Server::send_to`, `SessionHandle::send`, `Client::send`,
    /// `DatagramSocket::send_to`) and posted closures waiting for the lane. Past it
    /// those sends fail at once with `SendError::InboxFull` (counted in
    /// `send_inbox_full`) instead of growing memory without bound.
    /// At least 1; default [`DEFAULT_INBOX_CAPACITY`].
    pub inbox_capacity: usize,
    /// Socket options (buffer sizes, reuse, `IPV6_V6ONLY`).
    pub socket: SocketOptions,
    /// Link conditioner on the send path (loss, delay, jitter, duplicates,
    /// reordering; see [`crate::conditioner`]). `None` (the default) or an
    /// impairment that [is off](Impairment::is_off) costs nothing.
    pub send_impairment: Option<Impairment>,
    /// Link conditioner on the receive path: datagrams are impaired after
    /// the kernel hands them over and before the handler sees them.
    pub recv_impairment: Option<Impairment>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            batch: DEFAULT_BATCH,
            max_datagram: DEFAULT_MAX_DATAGRAM,
            send_queue_bytes: DEFAULT_SEND_QUEUE_BYTES,
            send_queue_datagrams: DEFAULT_SEND_QUEUE_DATAGRAMS,
            inbox_capacity: DEFAULT_INBOX_CAPACITY,
            socket: SocketOptions::default(),
            send_impairment: None,
            recv_impairment: None,
        }
    }
}

fn invalid(what: &str, accepted: &str, got: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what}: expected {accepted}, got {got}"),
    )
}

impl EndpointConfig {
    pub(crate) fn validate(&self) -> io::Result<()> {
        if !(1..=1024).contains(&self.batch) {
            return Err(invalid("batch", "1..=1024", self.batch));
        }
        if !(1..=65_536).contains(&self.max_datagram) {
            return Err(invalid("max_datagram", "1..=65536", self.max_datagram));
        }
        if self.send_queue_datagrams == 0 {
            return Err(invalid("send_queue_datagrams", "at least 1", 0));
        }
        if self.inbox_capacity == 0 {
            return Err(invalid("inbox_capacity", "at least 1", 0));
        }
        if self.send_queue_bytes == 0 {
            return Err(invalid("send_queue_bytes", "at least 1", 0));
        }
        for (field, imp) in [
            ("send_impairment", &self.send_impairment),
            ("recv_impairment", &self.recv_impairment),
        ] {
            if let Some(Err(e)) = imp.as_ref().map(Impairment::validate) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{field}.{e}"),
                ));
            }
        }
        Ok(())
    }
}

/// What a server lane does with a datagram from a new peer when its session
/// table holds `max_sessions` sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FullPolicy {
    /// Refuse the new peer: its datagram is dropped and counted in
    /// `sessions_refused`; established sessions are never disturbed. The
    /// default, because a source address costs an attacker nothing: a flood
    /// of new addresses cannot push out the players already connected.
    #[default]
    Refuse,
    /// Evict an idle session (disconnect reason `Evicted`, counted in
    /// `sessions_evicted`) and admit the new peer. Useful when stale
    /// sessions must not lock out new players, at the price that a flood
    /// can evict quiet ones.
    ///
    /// The session evicted is the least recently active one (exact LRU,
    /// O(1) per datagram and per eviction: the lane keeps its sessions in
    /// a list by activity and moves a session to the end with each of its
    /// datagrams). A newcomer is the most recently active, so a flood of
    /// new addresses evicts its own sessions, oldest first, and a peer that
    /// sends at least once per `max_sessions` admissions under such a
    /// flood keeps its session. Only a newcomer that
    /// [`ServerHandler::accept`](crate::ServerHandler::accept) admitted
    /// evicts anyone: refuse bad first datagrams there.
    EvictIdlest,
}

/// How datagrams are spread over a server's receive lanes (sockets sharing
/// a port with `SO_REUSEPORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LaneSteering {
    /// The kernel hashes each peer's address and port to a lane: one peer
    /// always reaches the same lane, peers spread at random.
    #[default]
    KernelHash,
    /// Lane = peer's UDP source port modulo the number of lanes (a classic
    /// BPF program on the reuseport group; Linux only). Covers IPv4 (IP
    /// options included, also on a dual-stack `[::]` server) and IPv6
    /// without extension headers; a datagram with an IPv6 extension header
    /// before UDP is spread by the kernel's hash instead (still one lane
    /// per peer, not necessarily `port % lanes`). For deployments that choose
    /// their peers' ports, so a peer's datagrams land on the lane (and, in
    /// the sharded model, the core) that also runs that peer: benchmarks,
    /// tests, internal services behind no NAT.
    PeerPort,
    /// Lane = one byte of the UDP payload, at `offset` (a classic BPF
    /// program on the reuseport group; Linux only): for protocols that name
    /// their connections with IDs carrying the lane (keel-rudp puts the
    /// lane in byte 0 of its connection IDs, at payload offset 1 of a
    /// short header), so a peer stays on its lane when its address changes.
    /// A hash picks the lane instead (the datagram is *unsteered*) when the
    /// payload is not longer than `offset`, when its first byte has any
    /// bit of `hash_if_first_byte_has` set (packets without a connection
    /// ID yet, such as handshakes: keel-rudp's long headers set bit 7), or
    /// when the byte is not below the number of lanes. Which hash is
    /// `hash_source_ip`'s choice.
    ///
    /// Only for [`DatagramSocket::bind_lanes`](crate::DatagramSocket::bind_lanes):
    /// a [`Server`](crate::Server) keys sessions by address and refuses it.
    PayloadByte {
        /// Offset of the lane byte in the UDP payload.
        offset: u16,
        /// A first payload byte with any of these bits set is unsteered
        /// (0: never).
        hash_if_first_byte_has: u8,
        /// How an unsteered datagram finds its lane. `None`: the kernel's
        /// hash of source and destination address and port (so one peer's
        /// sockets, one per port, spread over the lanes). `Some(bits)`: a
        /// hash of the source IP alone, the port left out and an IPv6
        /// address cut to its first `bits` bits, 0 to 64 (64: one /64,
        /// usually one subscriber, is one source; 48 groups whole sites).
        /// Every unsteered datagram of one host then reaches one lane, so
        /// per-address state a protocol keeps for its handshakes (limits
        /// on connections and handshake rate per address, which keel-rudp's
        /// `Server` applies) is whole on that lane, and a host with many
        /// sockets gets one lane's share, not one per lane. The price:
        /// many players behind one NAT address do their handshakes on one
        /// lane. Read from the fixed IPv4 or IPv6 header (IP options and
        /// IPv6 extension headers do not matter); a datagram with neither
        /// header falls back to the kernel's hash.
        hash_source_ip: Option<u8>,
    },
}

/// Server settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// Receive lanes: sockets bound to the same address and port with
    /// `SO_REUSEPORT`, each its own serialized lane. 1..=1024; default 1.
    pub lanes: usize,
    /// How datagrams are spread over the lanes (with more than one).
    pub steering: LaneSteering,
    /// Sessions per lane at most. Default 65,536.
    pub max_sessions: usize,
    /// What happens when the table is full.
    pub full_policy: FullPolicy,
    /// A session without a datagram for this long is closed (reason
    /// `IdleTimeout`). `None` turns it off. Default 60 s.
    pub idle_timeout: Option<Duration>,
    /// Settings of each lane's socket and queues.
    pub endpoint: EndpointConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            lanes: 1,
            steering: LaneSteering::KernelHash,
            max_sessions: 65_536,
            full_policy: FullPolicy::Refuse,
            idle_timeout: Some(Duration::from_secs(60)),
            endpoint: EndpointConfig::default(),
        }
    }
}

impl ServerConfig {
    pub(crate) fn validate(&self) -> io::Result<()> {
        if !(1..=1024).contains(&self.lanes) {
            return Err(invalid("lanes", "1..=1024", self.lanes));
        }
        if self.max_sessions == 0 {
            return Err(invalid("max_sessions", "at least 1", 0));
        }
        if let LaneSteering::PayloadByte { .. } = self.steering {
            return Err(invalid(
                "steering",
                "KernelHash or PeerPort (a server keys sessions by address; \
                 PayloadByte is for DatagramSocket::bind_lanes)",
                "PayloadByte",
            ));
        }
        if self.idle_timeout == Some(Duration::ZERO) {
            return Err(invalid(
                "idle_timeout",
                "a positive duration or None (off)",
                "0",
            ));
        }
        self.endpoint.validate()
    }
}

/// Settings of a group of datagram sockets on lanes
/// ([`DatagramSocket::bind_lanes`](crate::DatagramSocket::bind_lanes)).
#[derive(Clone, Debug, PartialEq)]
pub struct LanesConfig {
    /// Sockets bound to the same address and port with `SO_REUSEPORT`,
    /// each its own serialized lane. 1..=256 (a lane index fits the byte
    /// [`LaneSteering::PayloadByte`] reads); default 1.
    pub lanes: usize,
    /// How datagrams are spread over the lanes (with more than one).
    pub steering: LaneSteering,
    /// Settings of each lane's socket and queues.
    pub endpoint: EndpointConfig,
}

impl Default for LanesConfig {
    fn default() -> Self {
        LanesConfig {
            lanes: 1,
            steering: LaneSteering::KernelHash,
            endpoint: EndpointConfig::default(),
        }
    }
}

impl LanesConfig {
    pub(crate) fn validate(&self) -> io::Result<()> {
        if !(1..=256).contains(&self.lanes) {
            return Err(invalid("lanes", "1..=256", self.lanes));
        }
        if let LaneSteering::PayloadByte {
            hash_source_ip: Some(bits),
            ..
        } = self.steering
        {
            if bits > 64 {
                return Err(invalid(
                    "steering: hash_source_ip",
                    "None or Some(0..=64), the IPv6 prefix bits hashed",
                    format!("Some({bits})"),
                ));
            }
        }
        self.endpoint.validate()
    }
}
