//! A reactor driven by its owner's thread.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::error::Error;
use crate::handle::Handle;
use crate::reactor_lane::new_core;

/// One event loop: a `mio::Poll`, one reused `Events`, the sources and lanes
/// registered on it, a timer queue, a queue of posted closures, a waker.
///
/// Drive it yourself with [`Reactor::turn`] (a game loop that owns its
/// thread) or [`Reactor::run`]; or let a [`Runtime`](crate::Runtime) drive
/// reactors on threads of its own.
///
/// Dropping the reactor drops every lane's state, closing its sockets.
pub struct Reactor {
    core: Arc<Core>,
}

impl Reactor {
    /// Creates a reactor (an epoll instance and an eventfd waker on Linux).
    pub fn new() -> io::Result<Reactor> {
        Ok(Reactor { core: new_core()? })
    }

    /// A handle for other threads and for adding lanes.
    pub fn handle(&self) -> Handle {
        Handle::from_core(self.core.clone())
    }

    /// Runs one iteration: polls for readiness (waiting at most `timeout`,
    /// less if a timer is due sooner, not at all if lanes are queued), fires
    /// due timers, then runs the lanes that were ready, including the one
    /// that runs posted closures. Returns the number of lane runs.
    ///
    /// `None` waits until readiness, a timer or a post. The wait for a
    /// timer is its remaining time rounded up to a whole millisecond.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if polling failed; [`Error::HandlerPanic`] if a handler
    /// panicked (the lane is closed and the reactor stopped).
    pub fn turn(&mut self, timeout: Option<Duration>) -> Result<usize, Error> {
        self.core.turn(timeout)
    }

    /// Turns until [`Handle::stop`] is called.
    ///
    /// # Errors
    ///
    /// As [`Reactor::turn`].
    pub fn run(&mut self) -> Result<(), Error> {
        while !self.core.is_stopped() {
            self.core.turn(None)?;
        }
        match self.core.take_panic() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Reactor {
    fn drop(&mut self) {
        self.core.shutdown();
    }
}
