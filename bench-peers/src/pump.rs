//! The client pump shared by the libraries that have one socket per
//! client and no waitable handle of their own (ENet, renet): poll(2) on
//! every client's socket for up to 1 ms, then service the clients that
//! were sent to, the readable ones, and every client every sweep period
//! (for the library's timers: resends, pings, acks).
//!
//! The library says what a service is; [`Why`] tells it why a client is
//! serviced, so a library that must not transmit on every call (renet:
//! every `send_packets` sends an ack packet) can service a readable client
//! without flushing it.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use crate::sys::Poller;

/// Why a client is being serviced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The harness sent on it since the last step.
    Sent,
    /// Its socket is readable.
    Readable,
    /// The periodic sweep of every client.
    Sweep,
}

/// The clients' sockets, which were sent to, and the sweep's clock.
pub struct SocketPump {
    name: &'static str,
    poller: Poller,
    ready: Vec<usize>,
    sent: Vec<usize>,
    swept: Instant,
    sweep: Duration,
    len: usize,
}

impl SocketPump {
    /// An empty set for library `name` (for errors), sweeping every client
    /// every `sweep`.
    pub fn new(name: &'static str, sweep: Duration) -> Self {
        SocketPump {
            name,
            poller: Poller::default(),
            ready: Vec::new(),
            sent: Vec::new(),
            swept: Instant::now(),
            sweep,
            len: 0,
        }
    }

    /// Adds client `len()`'s socket.
    pub fn add(&mut self, fd: c_int) {
        self.poller.add(fd);
        self.len += 1;
    }

    /// Notes that the harness sent on client `i`.
    pub fn sent(&mut self, i: usize) {
        self.sent.push(i);
    }

    /// One step: `service(i, Sent)` for the clients sent to since the last
    /// step; poll(2) for up to 1 ms (not past `until`); then `service(i,
    /// Sweep)` for every client if a sweep is due, else `service(i,
    /// Readable)` for the readable ones.
    ///
    /// # Errors
    ///
    /// poll(2)'s, or the first of `service`.
    pub fn step(
        &mut self,
        until: Instant,
        mut service: impl FnMut(usize, Why) -> Result<(), String>,
    ) -> Result<(), String> {
        let sent = std::mem::take(&mut self.sent);
        for &i in &sent {
            service(i, Why::Sent)?;
        }
        self.sent = sent;
        self.sent.clear();
        let wait = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(1));
        let mut ready = std::mem::take(&mut self.ready);
        self.poller
            .wait(wait, &mut ready)
            .map_err(|e| format!("{}: poll: {e}", self.name))?;
        let result = if self.swept.elapsed() >= self.sweep {
            self.swept = Instant::now();
            (0..self.len).try_for_each(|i| service(i, Why::Sweep))
        } else {
            ready.iter().try_for_each(|&i| service(i, Why::Readable))
        };
        self.ready = ready;
        result
    }

    /// Waits up to `timeout` for any socket (connect and close loops).
    ///
    /// # Errors
    ///
    /// poll(2)'s.
    pub fn wait(&mut self, timeout: Duration) -> Result<(), String> {
        let mut ready = std::mem::take(&mut self.ready);
        let r = self
            .poller
            .wait(timeout, &mut ready)
            .map_err(|e| format!("{}: poll: {e}", self.name));
        self.ready = ready;
        r
    }
}
