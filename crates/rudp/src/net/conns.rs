//! What a lane drives: a server's endpoint (many connections) or a
//! client's one connection, behind one interface.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;

use keel_udp::LocalAddr;

use keel_rudp_proto::{Connection, Event};
use keel_rudp_proto::{ConnectionHandle, ConnectionId, Endpoint, Handled, State};

/// The handle of a client's connection.
pub(crate) const CLIENT_CONN: ConnectionHandle = ConnectionHandle::from_bits(0);

/// A lane's connections (both boxed: each is hundreds of bytes, held for
/// the lane's life).
pub(crate) enum Conns {
    /// A server lane: its endpoint, and for each connection slot the local
    /// address its peer sends to (wildcard binds), so replies leave from it.
    Server {
        endpoint: Box<Endpoint>,
        locals: Vec<Option<LocalAddr>>,
    },
    /// A client: its connection and the server's address (datagrams from
    /// anywhere else are ignored and counted).
    Client {
        conn: Box<Connection>,
        server: SocketAddr,
        strangers: u64,
    },
}

impl Conns {
    pub(crate) fn get(&self, h: ConnectionHandle) -> Option<&Connection> {
        match self {
            Conns::Server { endpoint, .. } => endpoint.connection(h),
            Conns::Client { conn, .. } => (h == CLIENT_CONN).then_some(&**conn),
        }
    }

    pub(crate) fn get_mut(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        match self {
            Conns::Server { endpoint, .. } => endpoint.connection_mut(h),
            Conns::Client { conn, .. } => (h == CLIENT_CONN).then_some(&mut **conn),
        }
    }

    pub(crate) fn peer_addr(&self, h: ConnectionHandle) -> Option<SocketAddr> {
        match self {
            Conns::Server { endpoint, .. } => endpoint.peer_addr(h),
            Conns::Client { server, .. } => (h == CLIENT_CONN).then_some(*server),
        }
    }

    pub(crate) fn handles(&self, out: &mut Vec<ConnectionHandle>) {
        out.clear();
        match self {
            Conns::Server { endpoint, .. } => out.extend(endpoint.handles()),
            Conns::Client { .. } => out.push(CLIENT_CONN),
        }
    }

    /// As [`Conns::handles`], only the connections in [`State::Connected`].
    pub(crate) fn connected(&self, out: &mut Vec<ConnectionHandle>) {
        out.clear();
        match self {
            Conns::Server { endpoint, .. } => out.extend(endpoint.handles().filter(|&h| {
                endpoint
                    .connection(h)
                    .is_some_and(|c| c.state() == State::Connected)
            })),
            Conns::Client { conn, .. } => {
                if conn.state() == State::Connected {
                    out.push(CLIENT_CONN);
                }
            }
        }
    }

    /// A datagram from `from` that arrived at `local`: a stateless reply
    /// (the handshake) is written to `reply` and its length returned.
    pub(crate) fn datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        local: Option<LocalAddr>,
        data: &[u8],
        reply: &mut [u8],
    ) -> Option<usize> {
        match self {
            Conns::Server { endpoint, locals } => {
                let (h, n) = match endpoint.handle(now, from, data, reply) {
                    Handled::Reply(n) => return Some(n),
                    Handled::Dropped => return None,
                    Handled::Accepted(h, n) => (h, Some(n)),
                    Handled::Routed(h) => (h, None),
                    // An outcome this driver does not know: nothing to send.
                    _ => return None,
                };
                if locals.len() <= h.index() {
                    locals.resize(h.index() + 1, None);
                }
                locals[h.index()] = local;
                n
            }
            Conns::Client {
                conn,
                server,
                strangers,
            } => {
                if from == *server {
                    conn.handle_datagram(now, data);
                } else {
                    *strangers += 1;
                }
                None
            }
        }
    }

    pub(crate) fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        match self {
            Conns::Server { endpoint, .. } => endpoint.poll_event(),
            Conns::Client { conn, .. } => conn.poll_event().map(|e| (CLIENT_CONN, e)),
        }
    }

    /// A batch's look-ahead ([`Endpoint::prefetch`]; a client has one
    /// connection, whose state its own datagrams keep warm).
    pub(crate) fn prefetch(&self, datagrams: &mut dyn Iterator<Item = &[u8]>) {
        if let Conns::Server { endpoint, .. } = self {
            endpoint.prefetch(datagrams);
        }
    }

    /// The next datagram to send: where to, from which local address, and
    /// its length in `buf`.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(SocketAddr, Option<LocalAddr>, usize)> {
        match self {
            Conns::Server { endpoint, locals } => {
                let (h, to, n) = endpoint.poll_transmit(now, buf)?;
                Some((to, locals.get(h.index()).copied().flatten(), n))
            }
            Conns::Client { conn, server, .. } => {
                conn.poll_transmit(now, buf).map(|n| (*server, None, n))
            }
        }
    }

    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        match self {
            Conns::Server { endpoint, .. } => endpoint.poll_timeout(),
            Conns::Client { conn, .. } => conn.poll_timeout(),
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        match self {
            Conns::Server { endpoint, .. } => endpoint.handle_timeout(now),
            Conns::Client { conn, .. } => {
                if conn.poll_timeout().is_some_and(|t| t <= now) {
                    conn.handle_timeout(now);
                }
            }
        }
    }
}

/// Where a server's connection of one client id is: its lane, its handle
/// and its connection ID (which a [`Sender`](crate::Sender) carries, so a
/// stale entry never reaches a later connection in the slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientEntry {
    pub(crate) lane: usize,
    pub(crate) conn: ConnectionHandle,
    pub(crate) cid: ConnectionId,
}

/// The live connection of each connect token's client id, over all the
/// lanes of a server: set by a lane when a connection with a token
/// reaches its handler's `connected`, removed at its `disconnected` (only
/// if it is still the one recorded: a newer connection of the same id,
/// a replacement, keeps its entry) and when the lane goes. One entry per
/// live connection at most, so at most `lanes × max_connections`.
#[derive(Debug, Default)]
pub(crate) struct ClientIds {
    map: Mutex<HashMap<u64, ClientEntry>>,
}

impl ClientIds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ClientEntry>> {
        // The map is whole at every unlock: a panic elsewhere cannot have
        // left it half-changed.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `entry` is now the connection of `client_id` (the newest wins).
    pub(crate) fn connected(&self, client_id: u64, entry: ClientEntry) {
        self.lock().insert(client_id, entry);
    }

    /// `entry` ended: forget it, unless a newer connection took the id.
    pub(crate) fn disconnected(&self, client_id: u64, entry: ClientEntry) {
        let mut map = self.lock();
        if map.get(&client_id) == Some(&entry) {
            map.remove(&client_id);
        }
    }

    /// Lane `lane` is gone: forget its connections.
    pub(crate) fn lane_gone(&self, lane: usize) {
        self.lock().retain(|_, e| e.lane != lane);
    }

    /// The live connection of `client_id`, if any.
    pub(crate) fn get(&self, client_id: u64) -> Option<ClientEntry> {
        self.lock().get(&client_id).copied()
    }

    /// Entries held (for tests of the bound).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}
