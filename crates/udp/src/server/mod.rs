//! The server: one socket per receive lane, sessions keyed by peer address.
//!
//! A datagram's path: the lane's socket is drained in batches
//! (`endpoint::receive`), each datagram goes to its peer's session
//! ([`ServerLane::deliver`], opening one through `accept` admission
//! first), the handler replies through [`Session::send`], and the replies
//! leave with one batched send at the end of the batch.

mod ctx;
mod handler;
mod lane;
mod session;

use keel_reactor::PostError;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::{Handle, Lane, LaneHandle, LaneOptions};

pub use ctx::ServerCtx;
pub use handler::ServerHandler;
pub use session::{Session, SessionHandle};

use crate::config::{LaneSteering, ServerConfig};
use crate::counters::{CounterSnapshot, Counters};
use crate::endpoint::{self, Endpoint};
use crate::error::SendError;
use crate::socket::SocketBuffers;
use ctx::Directory;
use lane::LaneLink;
use lane::ServerLane;
use session::SessionLane;

/// What [`Server::status`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerStatus {
    /// Every lane is serving.
    Running,
    /// The server was stopped ([`Server::stop`]), or the runtime driving it
    /// stopped: no lane serves any more.
    Stopped,
    /// A handler panicked on `lane`: that lane closed (its sessions and
    /// socket are gone, without `disconnected`), its accepted sends were
    /// counted as discarded; the server's other lanes, and other servers on
    /// the runtime, keep serving.
    Failed {
        /// The lane whose handler panicked (the first one, if several did).
        lane: usize,
        /// The panic's message.
        message: String,
    },
}

struct Shared<H: ServerHandler> {
    lanes: Vec<LaneHandle<ServerLane<H>>>,
    links: Vec<Arc<dyn SessionLane<H::SessionState>>>,
    counters: Vec<Arc<Counters>>,
    directory: Arc<Directory>,
    steering: LaneSteering,
    local_addr: SocketAddr,
    buffers: SocketBuffers,
}

/// A running server: `Send + Sync + Clone`, usable from any thread to send
/// to a peer, reach a session, read counters, run code on a lane, and stop.
///
/// # Examples
///
/// An echo server on one lane of a shared runtime:
///
/// ```
/// use keel_reactor::{IoModel, Runtime};
/// use keel_udp::{Server, ServerConfig, ServerCtx, ServerHandler, Session};
/// use std::net::SocketAddr;
///
/// struct Echo;
/// impl ServerHandler for Echo {
///     type SessionState = ();
///     fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
///         Some(()) // admit everyone
///     }
///     fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
///         let _ = s.send(data);
///     }
/// }
///
/// let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
/// let server = Server::bind(rt.handles(), "127.0.0.1:0".parse()?, ServerConfig::default(), |_| Echo)?;
/// let client = std::net::UdpSocket::bind("127.0.0.1:0")?;
/// client.send_to(b"hi", server.local_addr())?;
/// let mut buf = [0u8; 8];
/// let n = client.recv(&mut buf)?;
/// assert_eq!(&buf[..n], b"hi");
/// server.stop();
/// rt.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Portability
///
/// Several lanes need `SO_REUSEPORT` (Linux, BSDs). Batched calls are
/// Linux-only; elsewhere `batch` is treated as 1.
pub struct Server<H: ServerHandler> {
    shared: Arc<Shared<H>>,
}

impl<H: ServerHandler> Clone for Server<H> {
    fn clone(&self) -> Self {
        Server {
            shared: self.shared.clone(),
        }
    }
}

impl<H: ServerHandler> std::fmt::Debug for Server<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.shared.local_addr)
            .field("lanes", &self.shared.lanes.len())
            .finish()
    }
}

impl<H: ServerHandler> Server<H> {
    /// Binds `config.lanes` sockets to `addr` (several with `SO_REUSEPORT`,
    /// on one port: port 0 picks one for all) and starts one lane per socket,
    /// placed round-robin over `reactors` (one reactor: all lanes on it).
    /// `handler(i)` makes lane `i`'s handler.
    ///
    /// A panic in a lane's handler closes that lane only (see
    /// [`Server::status`]); it does not stop the runtime.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad config (the message names the field and what
    /// is accepted) or an empty `reactors`; the OS error of socket setup,
    /// naming the address and the step that failed.
    pub fn bind(
        reactors: &[Handle],
        addr: SocketAddr,
        config: ServerConfig,
        mut handler: impl FnMut(usize) -> H,
    ) -> io::Result<Server<H>> {
        config.validate()?;
        endpoint::check_reactors(reactors)?;
        let (sockets, buffers) =
            endpoint::bind_lanes(addr, &config.endpoint.socket, config.lanes, config.steering)?;
        let local_addr = sockets[0].local_addr()?;
        let directory = Arc::new(Directory {
            lanes: (0..config.lanes)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        });
        let options = LaneOptions {
            max_posts: config.endpoint.inbox_capacity,
            contain_panics: true,
        };
        let mut lanes = Vec::with_capacity(config.lanes);
        let mut links: Vec<Arc<dyn SessionLane<H::SessionState>>> =
            Vec::with_capacity(config.lanes);
        let mut counters = Vec::with_capacity(config.lanes);
        for (i, sock) in sockets.into_iter().enumerate() {
            let c = Arc::new(Counters::default());
            let state = ServerLane::new(handler(i), i, sock, &config, &c, &directory)?;
            let started =
                endpoint::start(&reactors[i % reactors.len()], state, options, |st, cx| {
                    st.core.started(cx)
                });
            let lane = match started {
                Ok(lane) => lane,
                Err(e) => {
                    for l in &lanes {
                        let l: &LaneHandle<ServerLane<H>> = l;
                        let _ = l.post_control(|_, cx| cx.close());
                    }
                    return Err(e);
                }
            };
            links.push(Arc::new(LaneLink {
                lane: lane.clone(),
                counters: c.clone(),
            }));
            lanes.push(lane);
            counters.push(c);
        }
        Ok(Server {
            shared: Arc::new(Shared {
                lanes,
                links,
                counters,
                directory,
                steering: config.steering,
                local_addr,
                buffers,
            }),
        })
    }

    /// The address the server is bound to (with the real port).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The socket buffer sizes the kernel granted (first lane's socket).
    pub fn buffers(&self) -> SocketBuffers {
        self.shared.buffers
    }

    /// Number of receive lanes.
    pub fn lanes(&self) -> usize {
        self.shared.lanes.len()
    }

    /// The counters of every lane, summed.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared
            .counters
            .iter()
            .fold(CounterSnapshot::default(), |acc, c| acc + c.snapshot())
    }

    /// The counters of lane `lane`.
    pub fn lane_counters(&self, lane: usize) -> Option<CounterSnapshot> {
        self.shared.counters.get(lane).map(|c| c.snapshot())
    }

    /// The lane that holds `peer`'s session now, if it has one.
    pub fn lane_of(&self, peer: SocketAddr) -> Option<usize> {
        self.shared.directory.find(&peer).map(|(lane, _)| lane)
    }

    /// A handle to `peer`'s session, if it has one now (see
    /// [`SessionHandle`]).
    pub fn session(&self, peer: SocketAddr) -> Option<SessionHandle<H::SessionState>> {
        let (lane, key) = self.shared.directory.find(&peer)?;
        Some(SessionHandle {
            peer,
            key,
            lane,
            link: self.shared.links[lane].clone(),
            counters: self.shared.counters[lane].clone(),
        })
    }

    /// Sends `data` to `peer` from any thread. The size is checked now; the
    /// send itself happens on the lane that holds `peer`'s session (so it
    /// keeps its order with that session's sends, and its counters land
    /// there), or, for an address without a session, on the lane its
    /// datagrams are steered to when the lane can be known (peer-port
    /// steering), else on a lane chosen by hashing the address.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`], [`SendError::InboxFull`] when that lane has
    /// [`inbox_capacity`](crate::EndpointConfig) jobs waiting,
    /// [`SendError::Closed`] after stop. All counted on that lane.
    pub fn send_to(&self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        let lane = match self.shared.directory.find(&peer) {
            Some((lane, _)) => lane,
            None => self.lane_for_new(&peer),
        };
        let (l, counters) = (&self.shared.lanes[lane], &self.shared.counters[lane]);
        endpoint::offer_send(l, counters, Some(peer), peer, data)
    }

    /// The lane a peer without a session is served from.
    fn lane_for_new(&self, peer: &SocketAddr) -> usize {
        use std::hash::{Hash, Hasher};
        let lanes = self.shared.lanes.len();
        if lanes == 1 {
            return 0;
        }
        if self.shared.steering == LaneSteering::PeerPort {
            return usize::from(peer.port()) % lanes;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        peer.hash(&mut h);
        (h.finish() % lanes as u64) as usize
    }

    /// Runs `f` on lane `lane` with its handler and context (e.g. to
    /// broadcast, or to read handler state from another thread); `f` is
    /// dropped without running if the lane closes before it gets to it.
    ///
    /// # Errors
    ///
    /// [`PostError::NoSuchLane`](crate::PostError::NoSuchLane),
    /// [`PostError::Full`](crate::PostError::Full) if the lane's inbox is
    /// at its bound ([`inbox_capacity`](crate::EndpointConfig)),
    /// [`PostError::Closed`](crate::PostError::Closed) if it is closed; `f`
    /// is dropped before this returns.
    pub fn post<F>(&self, lane: usize, f: F) -> Result<(), PostError>
    where
        F: FnOnce(&mut H, &mut ServerCtx<'_, H::SessionState>) + Send + 'static,
    {
        let Some(l) = self.shared.lanes.get(lane) else {
            return Err(PostError::NoSuchLane {
                lane,
                lanes: self.shared.lanes.len(),
            });
        };
        l.post(move |st, cx| {
            if st.core.closing {
                return;
            }
            let core = &mut st.core;
            let mut ctx = core.parts.ctx(cx);
            f(&mut core.handler, &mut ctx);
            st.settle(cx);
        })
    }

    /// Stops the server: each lane handles the datagrams already queued on
    /// its socket (up to one readiness budget), flushes, counts the kernel
    /// drops no datagram reported, ends every session with
    /// [`DisconnectReason::Shutdown`](crate::DisconnectReason::Shutdown) and closes its socket. Asynchronous:
    /// it happens on the lanes ([`Server::stop_and_wait`] waits for it);
    /// counters stay readable. A full inbox never delays or loses the stop;
    /// sends still waiting in it are counted in `send_discarded`.
    pub fn stop(&self) {
        for l in &self.shared.lanes {
            // Refused only by a closed lane: nothing left to stop there.
            let _ = l.post_control(|st, cx| st.shutdown(cx));
        }
    }

    /// Stops the server as [`Server::stop`] does and waits until every lane
    /// has ended its sessions and closed its socket, at most `timeout`.
    /// Returns whether all lanes finished in time (false if the runtime is
    /// no longer running them). Counters read after it returned true are
    /// final.
    pub fn stop_and_wait(&self, timeout: Duration) -> bool {
        use std::sync::mpsc::{channel, RecvTimeoutError};
        let mut waits = Vec::with_capacity(self.shared.lanes.len());
        for l in &self.shared.lanes {
            let (done, finished) = channel();
            let posted = l.post_control(move |st, cx| {
                // Signalled when the lane drops its state, which is after it
                // is marked closed and its socket is gone.
                st.core.on_dropped.push(done);
                st.shutdown(cx);
            });
            if posted.is_ok() {
                waits.push((l, finished));
            } else if !l.is_closed() {
                // Refused though not closed: its reactor stopped, so nobody
                // will run the shutdown.
                return false;
            }
        }
        let deadline = Instant::now() + timeout;
        for (l, finished) in waits {
            let left = deadline.saturating_duration_since(Instant::now());
            match finished.recv_timeout(left) {
                Ok(()) => {}
                // The shutdown was dropped unrun: the lane was already
                // closing (it is done when its state is gone), or the
                // runtime stopped (then nobody finishes it).
                Err(RecvTimeoutError::Disconnected) if l.is_closed() => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Whether the server has stopped serving: every lane closed (stopped,
    /// or failed), or the runtime driving its lanes stopped.
    pub fn is_stopped(&self) -> bool {
        self.shared.lanes.iter().all(lane_stopped)
    }

    /// What the server is doing: running, stopped, or failed because a
    /// handler panicked on one lane (with the panic's message).
    pub fn status(&self) -> ServerStatus {
        for (lane, l) in self.shared.lanes.iter().enumerate() {
            if let Some(message) = l.panic_message() {
                return ServerStatus::Failed { lane, message };
            }
        }
        if self.is_stopped() {
            ServerStatus::Stopped
        } else {
            ServerStatus::Running
        }
    }
}

/// A lane no longer runs: closed, or its reactor stopped or gone.
fn lane_stopped<L: Lane>(l: &LaneHandle<L>) -> bool {
    l.is_closed() || l.reactor().is_none_or(|r| r.is_stopped())
}
