//! Errors reported to the owner of a reactor or runtime.

use std::fmt;
use std::io;

/// What went wrong while driving a reactor.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Polling or registering failed.
    Io(io::Error),
    /// A lane handler (or a posted closure, or a timer callback) panicked.
    /// The lane was closed; the reactor stopped. (A lane made with
    /// [`LaneOptions::contain_panics`](crate::LaneOptions::contain_panics)
    /// is only closed; see
    /// [`LaneHandle::panic_message`](crate::LaneHandle::panic_message).)
    HandlerPanic {
        /// The panic message, if it was a string.
        message: String,
    },
    /// A runtime thread died outside any handler.
    ThreadPanic {
        /// The panic message, if it was a string.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "reactor I/O error: {e}"),
            Error::HandlerPanic { message } => write!(f, "a lane handler panicked: {message}"),
            Error::ThreadPanic { message } => write!(f, "a runtime thread panicked: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Why a `post` refused a closure ([`LaneHandle::post`](crate::LaneHandle::post),
/// [`Handle::post`](crate::Handle::post), and the `post` of keel-udp's and
/// keel-rudp's sockets, clients and servers). The closure was dropped
/// before `post` returned, on the calling thread.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The lane's inbox already holds `capacity` closures waiting to run
    /// (its [`LaneOptions::max_posts`](crate::LaneOptions::max_posts)).
    /// Retry once the lane has caught up, or give the lane a larger bound.
    Full {
        /// The lane's bound on waiting closures.
        capacity: usize,
    },
    /// The lane is closed (by its handler, by a contained panic, or because
    /// its reactor stopped or is gone): nothing posted to it will run.
    Closed,
    /// A server has no lane with this index (keel-udp's and keel-rudp's
    /// `Server::post(lane, ...)`).
    NoSuchLane {
        /// The lane asked for.
        lane: usize,
        /// How many the server has (0 to `lanes - 1`).
        lanes: usize,
    },
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::Full { capacity } => write!(
                f,
                "lane inbox full: {capacity} posted closures already waiting \
                 (the lane's max_posts bound); the closure was dropped"
            ),
            PostError::Closed => write!(
                f,
                "lane closed or its reactor stopped; the closure was dropped"
            ),
            PostError::NoSuchLane { lane, lanes } => write!(
                f,
                "no lane {lane}: the server has lanes 0 to {}; the closure was dropped",
                lanes.saturating_sub(1)
            ),
        }
    }
}

impl std::error::Error for PostError {}
