//! A keel-rudp client on a keel-udp datagram socket.

use keel_reactor::PostError;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use keel_reactor::Handle;
use keel_udp::{CounterSnapshot, DatagramSocket, DatagramSocketCtx, EndpointConfig as UdpConfig};

use crate::net::conns::{Conns, CLIENT_CONN};
use crate::net::handler::{Ctx, Handler};
use crate::net::lane::LaneState;
use crate::net::sender::{Job, Post, Sender};
use crate::net::server::{invalid, os_random, udp_defaults};
use crate::net::stop::{StopReport, Stopping};
use keel_rudp_proto::ClientSecurity;
use keel_rudp_proto::Config;
use keel_rudp_proto::Connection;

/// Settings of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Settings of the connection (the channels must match the server's).
    pub connection: Config,
    /// The local address to bind; `None` (the default): the unspecified
    /// address of the server's family, port 0.
    pub local: Option<SocketAddr>,
    /// keel-udp settings of the socket (the link conditioner for tests);
    /// Don't Fragment on by default on Linux, as for
    /// [`ServerConfig::udp`](crate::ServerConfig::udp).
    pub udp: UdpConfig,
    /// The connect token from the game's backend, or insecure by name.
    pub security: ClientSecurity,
}

impl ClientConfig {
    /// Defaults with these connection settings and this security (a
    /// connect token, or [`ClientSecurity::Insecure`] by name).
    pub fn new(connection: Config, security: ClientSecurity) -> Self {
        ClientConfig {
            connection,
            local: None,
            udp: udp_defaults(),
            security,
        }
    }
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

/// A connection to a keel-rudp server on its own lane: `Send + Sync +
/// Clone`. The handshake starts at once; the handler's `connected` runs
/// when the server accepts (its connection handle is always the same).
pub struct Client<H: Handler> {
    socket: DatagramSocket<LaneState<H>>,
    post: Arc<dyn Post>,
    server: SocketAddr,
    failure: Arc<Mutex<Option<String>>>,
    close_timeout: Duration,
}

impl<H: Handler> Clone for Client<H> {
    fn clone(&self) -> Self {
        Client {
            socket: self.socket.clone(),
            post: self.post.clone(),
            server: self.server,
            failure: self.failure.clone(),
            close_timeout: self.close_timeout,
        }
    }
}

impl<H: Handler> std::fmt::Debug for Client<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("local_addr", &self.socket.local_addr())
            .field("server", &self.server)
            .finish()
    }
}

impl<H: Handler> Client<H> {
    /// Binds a socket, starts it on `reactor` and sends the hello to
    /// `server`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the field for a bad config; keel-udp's errors
    /// of socket setup.
    pub fn connect(
        reactor: &Handle,
        server: SocketAddr,
        config: ClientConfig,
        handler: H,
    ) -> io::Result<Client<H>> {
        let conn = Connection::connect(
            config.connection.clone(),
            config.security.clone(),
            os_random()?,
            Instant::now(),
        )
        .map_err(|e| invalid("connection", e))?;
        let local = config.local.unwrap_or(match server {
            SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        });
        let me = Arc::new(OnceLock::<Arc<dyn Post>>::new());
        let failure = Arc::new(Mutex::new(None));
        let conns = Conns::Client {
            conn: Box::new(conn),
            server,
            strangers: 0,
        };
        let state = LaneState::new(
            handler,
            conns,
            0,
            config.connection.max_datagram_size,
            me.clone(),
            failure.clone(),
            None,
        );
        let socket = DatagramSocket::bind(reactor, local, config.udp, state)?;
        let post: Arc<dyn Post> = Arc::new(LanePost(socket.clone()));
        let _ = me.set(post.clone());
        Ok(Client {
            socket,
            post,
            server,
            failure,
            close_timeout: config.connection.close_timeout,
        })
    }

    /// A [`Sender`] for the connection (messages sent before the handshake
    /// ends wait for it).
    pub fn sender(&self) -> Sender {
        Sender {
            lane: self.post.clone(),
            lane_index: 0,
            conn: CLIENT_CONN,
            cid: None,
        }
    }

    /// Runs `f` on the client's lane with its handler and a context; what
    /// it sends leaves at once.
    ///
    /// # Errors
    ///
    /// [`PostError::Full`](crate::PostError::Full) if the lane's inbox is
    /// full, [`PostError::Closed`](crate::PostError::Closed) if it is
    /// closed; `f` is dropped before this returns.
    pub fn post<F>(&self, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut H, &mut Ctx<'_>) + Send + 'static,
    {
        self.socket
            .post(move |st, udp: &mut DatagramSocketCtx<'_>| {
                st.with_ctx(Instant::now(), f);
                st.pump(udp);
            })
    }

    /// Closes the connection with `code` and `reason` (the server's
    /// `disconnected` sees them): queued reliable messages are flushed
    /// first, the CLOSE is repeated until acknowledged (by the
    /// connection's `close_timeout`), then this side's `disconnected`
    /// runs, where [`Ctx::undelivered`] tells what was not
    /// acknowledged. The socket stays open until [`Client::stop`].
    ///
    /// # Errors
    ///
    /// As [`Client::post`].
    pub fn close(&self, code: u64, reason: &str) -> Result<(), PostError> {
        let reason = reason.to_owned();
        self.post(move |_, ctx| ctx.close(CLIENT_CONN, code, &reason))
    }

    /// Closes the connection as [`close`](Self::close) does with
    /// [`CLOSE_STOPPED`] ("client stopping": the server frees its slot at
    /// once rather than at its idle timeout), then the socket. Blocks
    /// until done: at once when nothing is pending, at most the
    /// connection's `close_timeout` (default 2 s) plus 100 ms. The
    /// handler's `disconnected` runs before it returns; the report says
    /// what the server did not acknowledge. From a game loop that turns
    /// the reactor itself, use [`Client::begin_stop`].
    ///
    /// [`CLOSE_STOPPED`]: crate::CLOSE_STOPPED
    pub fn stop(&self) -> StopReport {
        self.begin_stop().wait()
    }

    /// Starts the stop of [`stop`](Self::stop) and returns at once.
    pub fn begin_stop(&self) -> Stopping {
        let deadline = Instant::now() + self.close_timeout;
        let (tx, rx) = std::sync::mpsc::channel();
        let posted = self.socket.post_control(move |st: &mut LaneState<H>, udp| {
            st.begin_stop(udp, crate::CLOSE_STOPPED, "client stopping", deadline, tx)
        });
        let waiting = if posted.is_ok() {
            vec![(0, self.post.clone())]
        } else {
            Vec::new()
        };
        Stopping {
            rx,
            waiting,
            deadline,
            report: StopReport::default(),
        }
    }

    /// The message of the handler's panic, once it panicked: the
    /// connection was then closed with
    /// [`CLOSE_HANDLER_PANIC`](crate::CLOSE_HANDLER_PANIC) and the
    /// handler is not called again.
    pub fn panic_message(&self) -> Option<String> {
        self.failure.lock().ok()?.clone()
    }

    /// Whether the connection has ended (asks the lane, and waits for
    /// it: not from the thread that turns its reactor; false while its
    /// inbox is full). True once the client is stopped.
    pub fn is_closed(&self) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        let posted = self.socket.post(move |st, _| {
            let _ = tx.send(st.client_closed());
        });
        if posted.is_err() {
            return self.socket.is_closed();
        }
        rx.recv().unwrap_or(true)
    }

    /// The socket's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr()
    }

    /// The server's address.
    pub fn server_addr(&self) -> SocketAddr {
        self.server
    }

    /// keel-udp's datagram counters of the socket.
    pub fn udp_counters(&self) -> CounterSnapshot {
        self.socket.counters()
    }
}
