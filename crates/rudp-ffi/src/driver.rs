//! The safe layer under the C API: a client and a server that own a
//! non-blocking UDP socket and drive keel-rudp-proto on the caller's thread
//! when polled (no threads of their own).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use keel_udp::batch::{enable_rxq_ovfl, kernel_drops_now, recv_batch, RecvBatch};

use keel_rudp_proto::{
    os_random, ClientSecurity, Config, Connection, ConnectionHandle, Endpoint, EndpointConfig,
    EndpointStats, SendError, ServerSecurity, State, Stats,
};

pub use keel_rudp_proto::Event;

/// Datagrams read per poll before timers and sends get their turn: a flood
/// cannot keep one poll call reading forever.
const MAX_READS_PER_DRIVE: usize = 1024;
/// Receive and transmit buffer size: the largest UDP payload.
const BUF_LEN: usize = 65536;
/// Datagrams one `recvmmsg` reads.
const RECV_BATCH: usize = 32;
/// The least receive slot: the protocol's default datagram
/// (`DEFAULT_MAX_DATAGRAM`, 1,200 bytes) with room to spare. A slot is
/// `max_datagram_size` if larger; a datagram larger than the slot is cut
/// and fails the protocol's checks (counted there).
const RECV_SLOT: usize = 2048;

/// A socket's receive side: batched reads (`recvmmsg`, allocated once) and
/// the kernel's count of datagrams it dropped for a full receive buffer.
struct Rx {
    batch: RecvBatch,
    /// Kernel drops reported with received datagrams (`SO_RXQ_OVFL`).
    kernel_drops: u64,
}

impl Rx {
    fn new(sock: &UdpSocket, max_datagram: usize) -> Rx {
        // Unsupported (not Linux): kernel_drops stays 0.
        let _ = enable_rxq_ovfl(sock);
        Rx {
            batch: RecvBatch::new(RECV_BATCH, max_datagram.max(RECV_SLOT)),
            kernel_drops: 0,
        }
    }

    /// Reads one batch: `Some(n)` for `n` datagrams in `self.batch` (0:
    /// nothing is queued), `None` after a transient error (try again).
    fn recv(&mut self, sock: &UdpSocket) -> Result<Option<usize>, Error> {
        let r = recv_batch(sock, &mut self.batch);
        self.kernel_drops += self.batch.take_kernel_drops_delta();
        match r {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Some(0)),
            Err(e) if transient(&e) => Ok(None),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Every datagram the kernel dropped on `sock` for a full receive
    /// buffer: those reported with datagrams read, plus those after the
    /// last datagram read (the socket's counter, read now; it is the same
    /// cumulative 32-bit counter `SO_RXQ_OVFL` reports).
    fn kernel_drops(&self, sock: &UdpSocket) -> u64 {
        match kernel_drops_now(sock) {
            // `kernel_drops` is that counter, unwrapped, as of the last
            // datagram read; it only grows.
            Ok(now) => {
                let delta = now.wrapping_sub(self.kernel_drops as u32);
                // Behind (it cannot be: the counter only grows) reads as
                // nothing new, as keel-udp's tracker does.
                self.kernel_drops + u64::from(if delta < 1 << 31 { delta } else { 0 })
            }
            Err(_) => self.kernel_drops,
        }
    }
}

/// What a call of the C API can fail with; each maps to one `KEEL_ERR_*`
/// code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The configuration was refused (see keel-rudp-proto's `ConfigError`).
    Config,
    /// A socket operation failed.
    Io,
    /// No such channel.
    UnknownChannel,
    /// Over `max_message_size`.
    MessageTooLarge,
    /// The connection holds `max_send_buffer`: poll and send again.
    Backpressure,
    /// The server's shared send budget is spent: poll and send again.
    BudgetSpent,
    /// The connection is closing or closed.
    Closed,
    /// No connection has this handle.
    UnknownConnection,
}

impl From<SendError> for Error {
    fn from(e: SendError) -> Self {
        match e {
            SendError::UnknownChannel { .. } => Error::UnknownChannel,
            SendError::MessageTooLarge { .. } => Error::MessageTooLarge,
            SendError::Backpressure { .. } => Error::Backpressure,
            SendError::BudgetSpent { .. } => Error::BudgetSpent,
            // Closed, and any refusal a newer protocol crate adds: nothing
            // was queued.
            _ => Error::Closed,
        }
    }
}

fn io_err(_: io::Error) -> Error {
    Error::Io
}

/// Errors a UDP `recv_from` reports that are not the socket failing: an
/// ICMP error of an earlier send, an interrupted call.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// The events the C API passes on (the protocol's `Event` may grow).
fn known(e: &Event) -> bool {
    matches!(
        e,
        Event::Connected | Event::Message { .. } | Event::Disconnected(_)
    )
}

/// Blocks on `sock` for at most `d` (at least 1 ms) for one datagram, then
/// puts the socket back in non-blocking mode.
fn wait(
    sock: &UdpSocket,
    buf: &mut [u8],
    d: Duration,
) -> Result<Option<(usize, SocketAddr)>, Error> {
    sock.set_nonblocking(false).map_err(io_err)?;
    sock.set_read_timeout(Some(d.max(Duration::from_millis(1))))
        .map_err(io_err)?;
    let r = sock.recv_from(buf);
    sock.set_nonblocking(true).map_err(io_err)?;
    match r {
        Ok(x) => Ok(Some(x)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) || transient(&e) =>
        {
            Ok(None)
        }
        Err(e) => Err(io_err(e)),
    }
}

/// Sends one datagram; a full socket buffer drops it (the protocol resends
/// what is reliable) and counts it.
fn send_to(sock: &UdpSocket, data: &[u8], to: SocketAddr, dropped: &mut u64) -> Result<(), Error> {
    match sock.send_to(data, to) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || transient(&e) => {
            *dropped += 1;
            Ok(())
        }
        Err(e) => Err(io_err(e)),
    }
}

/// A client: one connection to one server.
pub struct Client {
    sock: UdpSocket,
    server: SocketAddr,
    conn: Connection,
    /// For the blocking wait for one datagram.
    rx: Vec<u8>,
    batch: Rx,
    tx: Vec<u8>,
    /// Datagrams from addresses other than the server's, ignored.
    pub foreign_datagrams: u64,
    /// Datagrams not sent because the socket buffer was full.
    pub send_dropped: u64,
}

impl Client {
    /// Binds an ephemeral port of the server's address family and starts
    /// the handshake (the hello goes out on the first poll).
    pub fn connect(
        cfg: Config,
        server: SocketAddr,
        security: ClientSecurity,
    ) -> Result<Client, Error> {
        let bind: SocketAddr = if server.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal address")
        } else {
            "[::]:0".parse().expect("literal address")
        };
        let sock = UdpSocket::bind(bind).map_err(io_err)?;
        sock.set_nonblocking(true).map_err(io_err)?;
        let nonce = os_random::<16>().map_err(io_err)?;
        let max_datagram = cfg.max_datagram_size;
        let conn =
            Connection::connect(cfg, security, nonce, Instant::now()).map_err(|_| Error::Config)?;
        Ok(Client {
            batch: Rx::new(&sock, max_datagram),
            sock,
            server,
            conn,
            rx: vec![0; BUF_LEN],
            tx: vec![0; BUF_LEN],
            foreign_datagrams: 0,
            send_dropped: 0,
        })
    }

    /// The connection's state.
    pub fn state(&self) -> State {
        self.conn.state()
    }

    /// The connection's counters and estimates (RTT, loss, bytes).
    pub fn stats(&self) -> Stats {
        self.conn.stats()
    }

    /// Datagrams the kernel dropped on the client's socket because its
    /// receive buffer was full (`SO_RXQ_OVFL`; 0 where Linux's counter does
    /// not exist).
    pub fn kernel_drops(&self) -> u64 {
        self.batch.kernel_drops(&self.sock)
    }

    /// Queues `data` on `channel`; it goes out on the next poll.
    pub fn send(&mut self, channel: u8, data: &[u8]) -> Result<(), Error> {
        self.conn.send(channel, data)?;
        Ok(())
    }

    /// Starts closing with `code` and `reason` (at most 255 bytes are
    /// sent); poll until the `Disconnected` event.
    pub fn close(&mut self, code: u64, reason: &str) {
        self.conn.close(Instant::now(), code, reason);
    }

    /// Gives a message's buffer back for later messages.
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.conn.recycle(data);
    }

    fn input(
        conn: &mut Connection,
        foreign: &mut u64,
        server: SocketAddr,
        data: &[u8],
        from: SocketAddr,
    ) {
        if from == server {
            conn.handle_datagram(Instant::now(), data);
        } else {
            *foreign += 1;
        }
    }

    fn drive(&mut self) -> Result<(), Error> {
        let mut read = 0;
        while read < MAX_READS_PER_DRIVE {
            let Some(n) = self.batch.recv(&self.sock)? else {
                // A transient error (an ICMP error of an earlier send).
                read += 1;
                continue;
            };
            let b = &self.batch.batch;
            for i in 0..n {
                Self::input(
                    &mut self.conn,
                    &mut self.foreign_datagrams,
                    self.server,
                    b.data(i),
                    b.addr(i),
                );
            }
            read += n;
            if n < b.per_call() {
                break;
            }
        }
        let now = Instant::now();
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        while let Some(n) = self.conn.poll_transmit(now, &mut self.tx) {
            send_to(
                &self.sock,
                &self.tx[..n],
                self.server,
                &mut self.send_dropped,
            )?;
        }
        Ok(())
    }

    /// Reads what arrived, runs due timers, sends what is queued, and
    /// returns the next event; waits up to `timeout` for one (zero: only
    /// what is there now).
    pub fn poll(&mut self, timeout: Duration) -> Result<Option<Event>, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            self.drive()?;
            while let Some(e) = self.conn.poll_event() {
                if known(&e) {
                    return Ok(Some(e));
                }
            }
            let now = Instant::now();
            if now >= deadline || self.conn.state() == State::Closed {
                return Ok(None);
            }
            let wake = self
                .conn
                .poll_timeout()
                .map_or(deadline, |t| t.min(deadline));
            let d = wake.saturating_duration_since(now);
            if d.is_zero() {
                continue;
            }
            if let Some((n, from)) = wait(&self.sock, &mut self.rx, d)? {
                Self::input(
                    &mut self.conn,
                    &mut self.foreign_datagrams,
                    self.server,
                    &self.rx[..n],
                    from,
                );
            }
        }
    }
}

/// A server: one endpoint (all its connections) on one socket.
pub struct Server {
    sock: UdpSocket,
    endpoint: Endpoint,
    /// For the blocking wait for one datagram.
    rx: Vec<u8>,
    batch: Rx,
    tx: Vec<u8>,
    /// The handles of a broadcast, reused.
    handles: Vec<ConnectionHandle>,
    /// Set by [`Server::stop`].
    stop: Option<Stop>,
    /// Datagrams not sent because the socket buffer was full.
    pub send_dropped: u64,
    /// Broadcast copies not queued: the connection's send buffer or the
    /// send budget was full.
    pub broadcast_refused: u64,
}

/// A server's stop in progress: every connection is closed with `code`
/// and `reason` (also those accepted meanwhile), until none is left or
/// `deadline`.
struct Stop {
    code: u64,
    reason: String,
    deadline: Instant,
    /// The Stopped event was returned: the server does nothing more.
    reported: bool,
}

/// What a server's poll returns.
#[derive(Debug, PartialEq)]
pub enum Polled {
    /// An event of the connection with this (C) handle.
    Connection(u64, Event),
    /// After [`Server::stop`]: every connection ended (or the stop's
    /// deadline passed); returned once.
    Stopped,
}

/// The C handle of a connection: its endpoint slot and the slot's
/// generation ([`ConnectionHandle::to_bits`], never 0), so a stale handle
/// never reaches a later connection in the same slot.
fn to_handle(h: ConnectionHandle) -> u64 {
    h.to_bits()
}

fn from_handle(h: u64) -> Option<ConnectionHandle> {
    Some(ConnectionHandle::from_bits(h))
}

impl Server {
    /// Binds `addr` and starts accepting. With tokens, the bound address is
    /// the address clients reach it at (`public_addrs`) unless `security`
    /// names others.
    pub fn bind(cfg: Config, addr: SocketAddr, security: ServerSecurity) -> Result<Server, Error> {
        let sock = UdpSocket::bind(addr).map_err(io_err)?;
        sock.set_nonblocking(true).map_err(io_err)?;
        let local = sock.local_addr().map_err(io_err)?;
        let security = match security {
            ServerSecurity::Tokens { key, public_addrs } if public_addrs.is_empty() => {
                ServerSecurity::Tokens {
                    key,
                    public_addrs: vec![local],
                }
            }
            s => s,
        };
        let key = os_random::<32>().map_err(io_err)?;
        let max_datagram = cfg.max_datagram_size;
        let ecfg = EndpointConfig::new(0, key, cfg, security);
        let endpoint = Endpoint::new(ecfg, Instant::now()).map_err(|_| Error::Config)?;
        Ok(Server {
            batch: Rx::new(&sock, max_datagram),
            sock,
            endpoint,
            rx: vec![0; BUF_LEN],
            tx: vec![0; BUF_LEN],
            handles: Vec::new(),
            stop: None,
            send_dropped: 0,
            broadcast_refused: 0,
        })
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.sock.local_addr().map_err(io_err)
    }

    /// Connections held now (including those closing).
    pub fn connection_count(&self) -> usize {
        self.endpoint.connection_count()
    }

    /// The endpoint's counters (handshakes, refusals, drops).
    pub fn stats(&self) -> EndpointStats {
        self.endpoint.stats()
    }

    /// Datagrams the kernel dropped on the server's socket because its
    /// receive buffer was full (`SO_RXQ_OVFL`; 0 where Linux's counter does
    /// not exist), counted until the server is destroyed (also after a
    /// stop, when nothing is read any more).
    pub fn kernel_drops(&self) -> u64 {
        self.batch.kernel_drops(&self.sock)
    }

    /// Connection `conn`'s counters and estimates (RTT, loss, bytes).
    pub fn connection_stats(&self, conn: u64) -> Result<Stats, Error> {
        from_handle(conn)
            .and_then(|h| self.endpoint.connection(h))
            .map(Connection::stats)
            .ok_or(Error::UnknownConnection)
    }

    /// Connection `conn`'s state.
    pub fn connection_state(&self, conn: u64) -> Result<State, Error> {
        from_handle(conn)
            .and_then(|h| self.endpoint.connection(h))
            .map(Connection::state)
            .ok_or(Error::UnknownConnection)
    }

    /// Queues `data` on `channel` of connection `conn`; it goes out on the
    /// next poll.
    pub fn send(&mut self, conn: u64, channel: u8, data: &[u8]) -> Result<(), Error> {
        let c = from_handle(conn)
            .and_then(|h| self.endpoint.connection_mut(h))
            .ok_or(Error::UnknownConnection)?;
        c.send(channel, data)?;
        Ok(())
    }

    /// Queues `data` on `channel` of every connected connection; returns
    /// how many queued it. A connection whose send buffer (or the send
    /// budget) is full is skipped and counted in `broadcast_refused`; an
    /// unknown channel or a message over `max_message_size` is an error
    /// and nothing is queued.
    pub fn broadcast(&mut self, channel: u8, data: &[u8]) -> Result<usize, Error> {
        let cfg = self.endpoint.config();
        if usize::from(channel) >= cfg.channels.len() {
            return Err(Error::UnknownChannel);
        }
        if data.len() > cfg.max_message_size {
            return Err(Error::MessageTooLarge);
        }
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        handles.extend(self.endpoint.handles());
        let mut queued = 0;
        for &h in &handles {
            let Some(c) = self.endpoint.connection_mut(h) else {
                continue;
            };
            if c.state() != State::Connected {
                continue;
            }
            match c.send(channel, data) {
                Ok(_) => queued += 1,
                Err(_) => self.broadcast_refused += 1,
            }
        }
        self.handles = handles;
        Ok(queued)
    }

    /// Starts closing connection `conn` with `code` and `reason`.
    pub fn close(&mut self, conn: u64, code: u64, reason: &str) -> Result<(), Error> {
        let c = from_handle(conn)
            .and_then(|h| self.endpoint.connection_mut(h))
            .ok_or(Error::UnknownConnection)?;
        c.close(Instant::now(), code, reason);
        Ok(())
    }

    /// Stops the server: closes every connection with `code` and `reason`
    /// (flushing what is queued first), and any accepted from now on, then
    /// polls return `Polled::Stopped` once every connection ended or
    /// `close_timeout` (plus a second) passed; after that the server does
    /// nothing. A second call changes nothing.
    pub fn stop(&mut self, code: u64, reason: &str) {
        if self.stop.is_some() {
            return;
        }
        let now = Instant::now();
        let deadline = now + self.endpoint.config().close_timeout;
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        handles.extend(self.endpoint.handles());
        for &h in &handles {
            if let Some(c) = self.endpoint.connection_mut(h) {
                if matches!(c.state(), State::Handshaking | State::Connected) {
                    c.close_until(now, code, reason, deadline);
                }
            }
        }
        self.handles = handles;
        self.stop = Some(Stop {
            code,
            reason: reason.into(),
            deadline: deadline + Duration::from_secs(1),
            reported: false,
        });
    }

    /// Gives a message's buffer back to connection `conn`, if it is still
    /// there.
    pub fn recycle(&mut self, conn: u64, data: Vec<u8>) {
        if let Some(c) = from_handle(conn).and_then(|h| self.endpoint.connection_mut(h)) {
            c.recycle(data);
        }
    }

    /// Handles datagram `i` of the batch (`None`: the one in `rx`, `n`
    /// bytes, from the blocking wait).
    fn input(&mut self, i: Option<usize>, n: usize, from: SocketAddr) -> Result<(), Error> {
        use keel_rudp_proto::Handled;
        let now = Instant::now();
        let data = match i {
            Some(i) => self.batch.batch.data(i),
            None => &self.rx[..n],
        };
        match self.endpoint.handle(now, from, data, &mut self.tx) {
            Handled::Accepted(h, len) => {
                send_to(&self.sock, &self.tx[..len], from, &mut self.send_dropped)?;
                if let (Some(st), Some(c)) = (&self.stop, self.endpoint.connection_mut(h)) {
                    // Stopping: it learns why at once.
                    c.close(now, st.code, &st.reason);
                }
                Ok(())
            }
            Handled::Reply(len) => {
                send_to(&self.sock, &self.tx[..len], from, &mut self.send_dropped)
            }
            // Routed, dropped, or an outcome this driver does not know:
            // nothing to send.
            _ => Ok(()),
        }
    }

    fn drive(&mut self) -> Result<(), Error> {
        let mut read = 0;
        while read < MAX_READS_PER_DRIVE {
            let Some(n) = self.batch.recv(&self.sock)? else {
                // A transient error (an ICMP error of an earlier send).
                read += 1;
                continue;
            };
            for i in 0..n {
                let from = self.batch.batch.addr(i);
                self.input(Some(i), 0, from)?;
            }
            read += n;
            if n < self.batch.batch.per_call() {
                break;
            }
        }
        let now = Instant::now();
        if self.endpoint.poll_timeout().is_some_and(|t| t <= now) {
            self.endpoint.handle_timeout(now);
        }
        while let Some((_, to, n)) = self.endpoint.poll_transmit(now, &mut self.tx) {
            send_to(&self.sock, &self.tx[..n], to, &mut self.send_dropped)?;
        }
        Ok(())
    }

    /// Whether a stop is done: no connection left (their events read) or
    /// past its deadline.
    fn stop_done(&mut self, now: Instant) -> bool {
        let Some(st) = &self.stop else { return false };
        let deadline = st.deadline;
        // poll_timeout removes the connections closed and read.
        self.endpoint.poll_timeout();
        self.endpoint.connection_count() == 0 || now >= deadline
    }

    /// Reads what arrived, runs due timers, sends what is queued, and
    /// returns the next event with its connection's handle (or, after
    /// [`Server::stop`], `Polled::Stopped` once); waits up to `timeout`
    /// for one (zero: only what is there now).
    pub fn poll(&mut self, timeout: Duration) -> Result<Option<Polled>, Error> {
        if self.stop.as_ref().is_some_and(|s| s.reported) {
            return Ok(None);
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.drive()?;
            while let Some((h, e)) = self.endpoint.poll_event() {
                if known(&e) {
                    return Ok(Some(Polled::Connection(to_handle(h), e)));
                }
            }
            let now = Instant::now();
            if self.stop_done(now) {
                if let Some(st) = &mut self.stop {
                    st.reported = true;
                }
                return Ok(Some(Polled::Stopped));
            }
            if now >= deadline {
                return Ok(None);
            }
            let mut wake = self
                .endpoint
                .poll_timeout()
                .map_or(deadline, |t| t.min(deadline));
            if let Some(st) = &self.stop {
                wake = wake.min(st.deadline);
            }
            let d = wake.saturating_duration_since(now);
            if d.is_zero() {
                continue;
            }
            if let Some((n, from)) = wait(&self.sock, &mut self.rx, d)? {
                self.input(None, n, from)?;
            }
        }
    }
}
