//! Sending from other threads: a [`Sender`] hands a job to the lane that
//! owns the connection, through the lane's bounded inbox.

use std::fmt;
use std::sync::Arc;

use keel_reactor::PostError;
use keel_rudp_proto::wire::ConnectionId;
use keel_rudp_proto::ConnectionHandle;

/// What a [`Sender`] asks its lane to do.
pub(crate) enum Op {
    Send { channel: u8, data: Vec<u8> },
    Close { code: u64, reason: String },
}

/// A job for a lane: an operation on one connection. `cid` guards against
/// a handle reused by a later connection (`None`: the client's one).
pub(crate) struct Job {
    pub(crate) conn: ConnectionHandle,
    pub(crate) cid: Option<ConnectionId>,
    pub(crate) op: Op,
}

/// A lane that takes jobs from other threads.
pub(crate) trait Post: Send + Sync {
    /// Queues `job`, or says why not (inbox full, lane closed).
    fn post(&self, job: Job) -> Result<(), PostError>;
    /// The lane has closed.
    fn is_closed(&self) -> bool;
    /// Closes the lane's socket (after what already arrived is handled).
    fn close(&self);
}

/// Sends on one connection from any thread: `Send + Sync + Clone`.
///
/// Each call copies the message and hands it to the connection's lane
/// through the lane's bounded inbox (keel-udp's `inbox_capacity`); the lane
/// queues it on the connection and flushes with its next batch. Past the
/// bound a call fails at once with [`PostError::Full`] instead of
/// growing memory. What the connection itself refuses on the lane
/// (backpressure, the send budget spent, a closed connection) reaches
/// [`Handler::send_failed`](crate::Handler::send_failed).
///
/// Get one from [`Ctx::sender`](crate::Ctx::sender),
/// [`Server::sender_for_client`](crate::Server::sender_for_client) (by
/// the client id of the connection's token, from any thread) or
/// [`Client::sender`](crate::Client::sender).
#[derive(Clone)]
pub struct Sender {
    pub(crate) lane: Arc<dyn Post>,
    pub(crate) lane_index: usize,
    pub(crate) conn: ConnectionHandle,
    pub(crate) cid: Option<ConnectionId>,
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("lane", &self.lane_index)
            .field("conn", &self.conn)
            .finish()
    }
}

impl Sender {
    fn offer(&self, op: Op) -> Result<(), PostError> {
        let job = Job {
            conn: self.conn,
            cid: self.cid,
            op,
        };
        self.lane.post(job)
    }

    /// Queues `data` on `channel` of the connection.
    ///
    /// # Errors
    ///
    /// [`PostError::Full`] when the lane has `inbox_capacity` jobs
    /// waiting, [`PostError::Closed`] when the lane is closed. What the
    /// connection refuses on the lane reaches
    /// [`Handler::send_failed`](crate::Handler::send_failed).
    pub fn send(&self, channel: u8, data: &[u8]) -> Result<(), PostError> {
        self.offer(Op::Send {
            channel,
            data: data.to_vec(),
        })
    }

    /// Closes the connection with `code` and `reason` (both reach the
    /// peer's `disconnected`).
    ///
    /// # Errors
    ///
    /// As [`Sender::send`].
    pub fn close(&self, code: u64, reason: &str) -> Result<(), PostError> {
        self.offer(Op::Close {
            code,
            reason: reason.to_owned(),
        })
    }

    /// The connection this sends on.
    pub fn connection(&self) -> ConnectionHandle {
        self.conn
    }

    /// The lane that owns the connection.
    pub fn lane(&self) -> usize {
        self.lane_index
    }
}
