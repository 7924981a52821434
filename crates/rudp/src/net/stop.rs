//! Stopping a server or a client without losing anything silently: each
//! lane closes its connections (flush, then a CLOSE repeated until
//! acknowledged, all by one deadline), reports what was not delivered,
//! and only then closes its socket.

use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::sender::Post;
use keel_rudp_proto::ConnectionHandle;
use keel_rudp_proto::Undelivered;

/// How long past the stop deadline a stop waits for a lane's report (the
/// lane's last round, on a busy runtime) before it closes the lane
/// without one.
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(100);

/// A connection that ended during a stop without delivering everything.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionReport {
    /// Its lane (0 on a client).
    pub lane: usize,
    /// Its handle on the lane (no longer valid).
    pub conn: ConnectionHandle,
    /// Where its packets went.
    pub peer: Option<SocketAddr>,
    /// What the peer did not acknowledge.
    pub undelivered: Undelivered,
}

/// A lane whose [`Handler`](crate::Handler) panicked: its connections
/// were closed with [`CLOSE_HANDLER_PANIC`](crate::CLOSE_HANDLER_PANIC),
/// and it refuses new ones (it accepts, then closes them with that code)
/// until the server stops; the other lanes keep serving.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneFailure {
    /// The lane.
    pub lane: usize,
    /// The panic's message (the first panic; the handler is not called
    /// again).
    pub message: String,
}

/// What a stop did ([`Server::stop`](crate::Server::stop),
/// [`Client::stop`](crate::Client::stop)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StopReport {
    /// Connections that ended during the stop.
    pub connections: usize,
    /// Those of them that left something undelivered (messages not
    /// acknowledged, or a CLOSE not acknowledged), with what.
    pub undelivered: Vec<ConnectionReport>,
    /// Lanes whose handler had panicked.
    pub failed_lanes: Vec<LaneFailure>,
    /// Lanes that did not report by the deadline (their runtime stopped
    /// or is overloaded): closed without a report, so what their
    /// connections held is unknown.
    pub unfinished_lanes: Vec<usize>,
}

impl StopReport {
    /// Everything was acknowledged: every message, every CLOSE, on every
    /// lane, and no handler panicked.
    pub fn is_clean(&self) -> bool {
        self.undelivered.is_empty()
            && self.failed_lanes.is_empty()
            && self.unfinished_lanes.is_empty()
    }

    /// Messages not acknowledged, over all connections.
    pub fn messages_undelivered(&self) -> u64 {
        self.undelivered
            .iter()
            .map(|c| c.undelivered.messages)
            .sum()
    }
}

/// One lane's part of a [`StopReport`].
pub(crate) struct LaneStop {
    pub(crate) lane: usize,
    pub(crate) connections: usize,
    pub(crate) undelivered: Vec<ConnectionReport>,
    pub(crate) failure: Option<String>,
}

/// A stop under way ([`Server::begin_stop`](crate::Server::begin_stop),
/// [`Client::begin_stop`](crate::Client::begin_stop)): the lanes close
/// their connections by its deadline and report. For a game loop that
/// turns the reactor itself, which cannot block in
/// [`Stopping::wait`]: turn it until [`Stopping::poll`] gives the report.
pub struct Stopping {
    pub(crate) rx: Receiver<LaneStop>,
    /// The lanes that took the stop and have not reported.
    pub(crate) waiting: Vec<(usize, Arc<dyn Post>)>,
    pub(crate) deadline: Instant,
    pub(crate) report: StopReport,
}

impl std::fmt::Debug for Stopping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stopping")
            .field("lanes_waiting", &self.waiting.len())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Stopping {
    /// When the lanes' connections must be done: the stop's start plus
    /// the connections' `close_timeout`.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    fn take(&mut self, s: LaneStop) {
        self.waiting.retain(|(l, _)| *l != s.lane);
        self.report.connections += s.connections;
        self.report.undelivered.extend(s.undelivered);
        let known = self.report.failed_lanes.iter().any(|f| f.lane == s.lane);
        if let (Some(message), false) = (s.failure, known) {
            self.report.failed_lanes.push(LaneFailure {
                lane: s.lane,
                message,
            });
        }
    }

    fn finish(&mut self) -> StopReport {
        // Lanes that did not report in time are closed without it (a
        // lane already closed had nothing left to report: a second stop).
        for (lane, post) in self.waiting.drain(..) {
            if !post.is_closed() {
                post.close();
                self.report.unfinished_lanes.push(lane);
            }
        }
        self.report.failed_lanes.sort_by_key(|f| f.lane);
        self.report.unfinished_lanes.sort_unstable();
        std::mem::take(&mut self.report)
    }

    /// The report, once every lane has given its part (or the deadline and
    /// a grace of 100 ms passed); `None` while lanes are still closing.
    /// Never blocks. A lane gives its part once its socket is closed.
    pub fn poll(&mut self) -> Option<StopReport> {
        while !self.waiting.is_empty() {
            match self.rx.try_recv() {
                Ok(s) => self.take(s),
                Err(TryRecvError::Empty) if Instant::now() < self.deadline + STOP_GRACE => {
                    return None
                }
                Err(_) => break,
            }
        }
        Some(self.finish())
    }

    /// Waits for the report: at most until the deadline plus a grace of
    /// 100 ms, at once when nothing was pending. Do not call it on the
    /// thread that runs the lanes (a game loop's `Reactor::turn`): they
    /// could not run; use [`Stopping::poll`] there.
    pub fn wait(mut self) -> StopReport {
        while !self.waiting.is_empty() {
            let left = (self.deadline + STOP_GRACE).saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(s) => self.take(s),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        self.finish()
    }
}
