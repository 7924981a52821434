//! One session: [`Session`] while its lane handles it, [`SessionHandle`]
//! from any thread.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::TimerId;

use crate::counters::Counters;
use crate::endpoint::{self, Timers, Tx};
use crate::error::SendError;
use crate::inbox::Accepted;
use crate::sessions::{SessionKey, Slot};

/// Whether a session timer repeats, and whose it is.
#[derive(Clone, Copy)]
pub(super) struct SessionTimer {
    pub(super) key: SessionKey,
    pub(super) periodic: bool,
}

/// Runs a job for one session on its lane: `Some` while the session is
/// open, `None` once it ended.
pub(super) type SessionJob<S> = Box<dyn FnOnce(Option<&mut Session<'_, S>>) + Send>;

/// A lane that runs session jobs, with the session type named and the
/// handler type erased (so a [`SessionHandle`] names only the state).
pub(super) trait SessionLane<S>: Send + Sync {
    fn post(&self, key: SessionKey, job: SessionJob<S>, guard: Accepted) -> Result<(), SendError>;
}

/// The link of a lane not set up yet (only seen before `started`).
pub(super) struct Unlinked;

impl<S> SessionLane<S> for Unlinked {
    fn post(&self, _: SessionKey, _: SessionJob<S>, _: Accepted) -> Result<(), SendError> {
        Err(SendError::Closed)
    }
}

/// One session while the lane handles it (a datagram, a session timer, a
/// [`ServerCtx::for_each_session`](crate::ServerCtx::for_each_session) visit, a [`SessionHandle`] job): its
/// peer, its state, and the lane's send path and timers.
pub struct Session<'a, S> {
    pub(super) slot: &'a mut Slot<S>,
    pub(super) key: SessionKey,
    pub(super) tx: &'a mut Tx,
    pub(super) timers: &'a mut dyn Timers,
    pub(super) session_timers: &'a mut HashMap<TimerId, SessionTimer>,
    pub(super) to_close: &'a mut Vec<SocketAddr>,
    pub(super) lane: usize,
    pub(super) link: &'a Arc<dyn SessionLane<S>>,
}

impl<S> Session<'_, S> {
    /// The peer's address (the session's key).
    pub fn peer(&self) -> SocketAddr {
        self.slot.peer
    }

    /// The session's state.
    pub fn state(&mut self) -> &mut S {
        &mut self.slot.state
    }

    /// Sends a datagram to the peer (at the end of the current batch, or
    /// when the handler returns).
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`] over the family's payload limit (nothing is
    /// sent), [`SendError::QueueFull`] when the socket blocks and the queue
    /// is at its bound. Both are counted.
    pub fn send(&mut self, data: &[u8]) -> Result<(), SendError> {
        // From the address the peer's datagrams come to (wildcard binds).
        self.tx
            .send_from(Some(self.slot.peer), self.slot.local, data)
    }

    /// Sends a datagram to another address from this lane's socket.
    ///
    /// # Errors
    ///
    /// As [`Session::send`].
    pub fn send_to(&mut self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        self.tx.send(Some(peer), data)
    }

    /// Closes the session once the current handler returns (`disconnected`
    /// with [`DisconnectReason::Closed`](crate::DisconnectReason::Closed)).
    pub fn close(&mut self) {
        if !self.to_close.contains(&self.slot.peer) {
            self.to_close.push(self.slot.peer);
        }
    }

    /// Schedules a timer for this session at `deadline`, repeating every
    /// `period` if given: it calls [`ServerHandler::session_timer`](crate::ServerHandler::session_timer) with
    /// this session, and is cancelled when the session ends (it never fires
    /// for an ended session, nor for a later one at the same address).
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        let id = self.timers.add(deadline, period);
        self.session_timers.insert(
            id,
            SessionTimer {
                key: self.key,
                periodic: period.is_some(),
            },
        );
        self.slot.timers.push(id);
        id
    }

    /// Cancels a timer of this session; no later `session_timer` call is
    /// made for it. Returns false if it is not a live timer of this session.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        match self.session_timers.get(&id) {
            Some(t) if t.key == self.key => {}
            _ => return false,
        }
        self.session_timers.remove(&id);
        self.slot.timers.retain(|t| *t != id);
        self.timers.cancel(id);
        true
    }

    /// The index of the lane handling this session.
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// A `Send + Clone` handle to this session, for other threads: its
    /// sends and jobs run on this lane, in order with the lane's own.
    pub fn handle(&self) -> SessionHandle<S> {
        SessionHandle {
            peer: self.slot.peer,
            key: self.key,
            lane: self.lane,
            link: self.link.clone(),
            counters: self.tx.counters.clone(),
        }
    }
}

/// A handle to one session, usable from any thread (`Send + Sync + Clone`).
///
/// Get one with [`Session::handle`] (in `datagram`, say) or
/// [`Server::session`](crate::Server::session). Its sends and jobs are handed to the lane that owns
/// the session and run there, in order with that lane's own sends, with the
/// session's counters. Once the session has ended (or the address came back
/// as a new session), a send through the handle is not delivered: it is
/// counted in `send_discarded`.
///
/// # Examples
///
/// ```
/// # use keel_udp::{SessionHandle, SendError};
/// fn push_score(player: &SessionHandle<u32>, score: u32) -> Result<(), SendError> {
///     // From a matchmaking or persistence thread: runs on the player's lane.
///     player.send(&score.to_le_bytes())
/// }
/// ```
pub struct SessionHandle<S> {
    pub(super) peer: SocketAddr,
    pub(super) key: SessionKey,
    pub(super) lane: usize,
    pub(super) link: Arc<dyn SessionLane<S>>,
    pub(super) counters: Arc<Counters>,
}

impl<S> Clone for SessionHandle<S> {
    fn clone(&self) -> Self {
        SessionHandle {
            peer: self.peer,
            key: self.key,
            lane: self.lane,
            link: self.link.clone(),
            counters: self.counters.clone(),
        }
    }
}

impl<S> std::fmt::Debug for SessionHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("peer", &self.peer)
            .field("lane", &self.lane)
            .finish_non_exhaustive()
    }
}

impl<S: 'static> SessionHandle<S> {
    /// The session's peer address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The lane that owns the session.
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// Sends `data` to the session's peer, from the session's lane. The
    /// size is checked now; the send happens on the lane (where a full send
    /// queue is counted, as for [`Session::send`]).
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`] (nothing queued), [`SendError::InboxFull`]
    /// when the lane has [`inbox_capacity`](crate::EndpointConfig) jobs
    /// waiting, [`SendError::Closed`] after the server stopped. All counted.
    pub fn send(&self, data: &[u8]) -> Result<(), SendError> {
        endpoint::check_size(&self.counters, &self.peer, data)?;
        let data = data.to_vec();
        let guard = Accepted::new(&self.counters);
        self.link.post(
            self.key,
            Box::new(move |session| {
                if let Some(s) = session {
                    let _ = s.send(&data);
                }
            }),
            guard,
        )
    }

    /// Runs `f` with the session on its lane (to change its state, send,
    /// set a timer). If the session has ended by then, `f` is dropped
    /// without running.
    ///
    /// # Errors
    ///
    /// [`SendError::InboxFull`], [`SendError::Closed`], as for
    /// [`SessionHandle::send`].
    pub fn post<F>(&self, f: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut Session<'_, S>) + Send + 'static,
    {
        self.post_job(Box::new(move |session| {
            if let Some(s) = session {
                f(s);
            }
        }))
    }

    /// Closes the session (`disconnected` with [`DisconnectReason::Closed`](crate::DisconnectReason::Closed)),
    /// if it is still open when the lane gets to it.
    ///
    /// # Errors
    ///
    /// As [`SessionHandle::post`].
    pub fn close(&self) -> Result<(), SendError> {
        self.post(|s| s.close())
    }

    fn post_job(&self, job: SessionJob<S>) -> Result<(), SendError> {
        self.link.post(self.key, job, Accepted::not_a_send())
    }
}
