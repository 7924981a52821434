//! Helpers shared by the reactor's integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// A loopback mio UDP socket on an ephemeral port.
pub fn udp() -> (mio::net::UdpSocket, SocketAddr) {
    let s = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = s.local_addr().unwrap();
    (s, a)
}

/// A counter that handlers bump and test threads wait on (no sleeping).
#[derive(Default)]
pub struct Progress {
    count: Mutex<u64>,
    cv: Condvar,
}

impl Progress {
    pub fn add(&self, n: u64) {
        *self.count.lock().unwrap() += n;
        self.cv.notify_all();
    }

    pub fn get(&self) -> u64 {
        *self.count.lock().unwrap()
    }

    /// Waits until `pred(count)` holds; panics after `limit` with `what`.
    pub fn wait_for(&self, limit: Duration, what: &str, pred: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + limit;
        let mut c = self.count.lock().unwrap();
        while !pred(*c) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}: count is {}",
                *c
            );
            c = self.cv.wait_timeout(c, left).unwrap().0;
        }
        *c
    }
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}
