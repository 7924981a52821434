//! A lane's context ([`ServerCtx`]), the parts of a lane that contexts and
//! sessions borrow, and the directory of which lane holds which session.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_reactor::{MissedTicks, TimerId};

use super::session::{Session, SessionLane, SessionTimer};
use crate::endpoint::{Timers, Tx};
use crate::error::SendError;
use crate::sessions::{SessionKey, Sessions};

/// A lane's context outside a single session: its sessions, its send path,
/// its timers.
pub struct ServerCtx<'a, S> {
    pub(super) parts: &'a mut Parts<S>,
    pub(super) timers: &'a mut dyn Timers,
}

impl<S> ServerCtx<'_, S> {
    /// Sends a datagram to `peer` from this lane's socket.
    ///
    /// # Errors
    ///
    /// As [`Session::send`].
    pub fn send_to(&mut self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        self.parts.send_to(peer, data)
    }

    /// Sends `data` to every session of this lane; returns how many sends
    /// were accepted (refusals are counted in the lane's counters).
    pub fn broadcast(&mut self, data: &[u8]) -> usize {
        let Parts { sessions, tx, .. } = &mut *self.parts;
        let mut ok = 0;
        for (_, slot) in sessions.slots_mut() {
            if tx.send_from(Some(slot.peer), slot.local, data).is_ok() {
                ok += 1;
            }
        }
        ok
    }

    /// Calls `f` with every session of this lane, each a full [`Session`]:
    /// read and change its state and send to it in the same pass (a
    /// per-player snapshot each tick). Sessions closed in `f` end when the
    /// current handler returns.
    pub fn for_each_session(&mut self, mut f: impl FnMut(&mut Session<'_, S>)) {
        for index in 0..self.parts.sessions.slot_count() {
            if let Some(mut session) = self.parts.session(index, &mut *self.timers) {
                f(&mut session);
            }
        }
    }

    /// The session of `peer` on this lane, if it has one.
    pub fn session_mut(&mut self, peer: SocketAddr) -> Option<Session<'_, S>> {
        let index = self.parts.sessions.find(&peer)?;
        self.parts.session(index, &mut *self.timers)
    }

    /// Every session of this lane, with mutable state (to send while
    /// visiting, use [`ServerCtx::for_each_session`]).
    pub fn sessions(&mut self) -> impl Iterator<Item = (SocketAddr, &mut S)> {
        self.parts.sessions.iter_mut()
    }

    /// Sessions open on this lane.
    pub fn session_count(&self) -> usize {
        self.parts.sessions.len()
    }

    /// Closes a session once the current handler returns.
    pub fn close(&mut self, peer: SocketAddr) {
        if !self.parts.to_close.contains(&peer) {
            self.parts.to_close.push(peer);
        }
    }

    /// Schedules a lane timer (fires [`ServerHandler::timer`](crate::ServerHandler::timer)); for a timer
    /// that belongs to one session use [`Session::timer`].
    pub fn timer(&mut self, deadline: Instant, period: Option<Duration>) -> TimerId {
        self.timers.add(deadline, period)
    }

    /// As [`ServerCtx::timer`], with a policy for ticks the lane missed
    /// (late by a period or more): burst them (the default, at most
    /// [`MAX_CATCH_UP`](keel_reactor::MAX_CATCH_UP) per turn), skip them,
    /// or delay the schedule.
    pub fn timer_with(
        &mut self,
        deadline: Instant,
        period: Option<Duration>,
        missed: MissedTicks,
    ) -> TimerId {
        self.timers.add_with(deadline, period, missed)
    }

    /// Cancels a timer of this lane (or of one of its sessions); it will not
    /// fire again.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        if let Some(t) = self.parts.session_timers.remove(&id) {
            if let Some(slot) = self.parts.sessions.by_key(t.key) {
                slot.timers.retain(|x| *x != id);
            }
        }
        self.timers.cancel(id)
    }

    /// The index of this lane.
    pub fn lane(&self) -> usize {
        self.parts.lane
    }
}

/// Which sessions each lane of a server holds, for other threads
/// ([`Server::lane_of`], [`Server::session`]): one map per lane, written
/// only by its lane when a session opens or ends, never per datagram.
pub(super) struct Directory {
    pub(super) lanes: Vec<Mutex<HashMap<SocketAddr, SessionKey>>>,
}

impl Directory {
    pub(super) fn find(&self, peer: &SocketAddr) -> Option<(usize, SessionKey)> {
        self.lanes
            .iter()
            .enumerate()
            .find_map(|(i, m)| lock(m).get(peer).map(|k| (i, *k)))
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it leaves a consistent map (inserts and removes
    // are single calls), so poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a lane's contexts and sessions borrow, apart from the handler.
pub(super) struct Parts<S> {
    pub(super) sessions: Sessions<S>,
    pub(super) tx: Tx,
    pub(super) session_timers: HashMap<TimerId, SessionTimer>,
    pub(super) to_close: Vec<SocketAddr>,
    pub(super) lane: usize,
    pub(super) link: Arc<dyn SessionLane<S>>,
    pub(super) directory: Arc<Directory>,
}

impl<S> Parts<S> {
    /// Sends to `peer`, from the local address its session's datagrams
    /// come to if it has a session (wildcard binds), else as the kernel
    /// routes it.
    pub(super) fn send_to(&mut self, peer: SocketAddr, data: &[u8]) -> Result<(), SendError> {
        let local = self
            .sessions
            .find(&peer)
            .and_then(|i| self.sessions.get_mut(i))
            .and_then(|slot| slot.local);
        self.tx.send_from(Some(peer), local, data)
    }

    pub(super) fn ctx<'a>(&'a mut self, timers: &'a mut dyn Timers) -> ServerCtx<'a, S> {
        ServerCtx {
            parts: self,
            timers,
        }
    }

    pub(super) fn session<'a>(
        &'a mut self,
        index: usize,
        timers: &'a mut dyn Timers,
    ) -> Option<Session<'a, S>> {
        let Parts {
            sessions,
            tx,
            session_timers,
            to_close,
            lane,
            link,
            ..
        } = self;
        let slot = sessions.get_mut(index)?;
        let key = SessionKey {
            index: index as u32,
            gen: slot.gen,
        };
        Some(Session {
            slot,
            key,
            tx,
            timers,
            session_timers,
            to_close,
            lane: *lane,
            link,
        })
    }
}
