//! Bounded waits: a progress counter, a channel's next value, and polling
//! for what nothing signals.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The default bound of every wait. Loopback events arrive in
/// microseconds; this only bounds how long a broken build hangs.
pub const LIMIT: Duration = Duration::from_secs(10);

/// A counter that handlers bump ([`add`](Progress::add)) and test threads
/// wait on ([`wait_for`](Progress::wait_for)) without sleeping: every
/// `add` wakes the waiters, which check their condition again.
#[derive(Debug, Default)]
pub struct Progress {
    count: Mutex<u64>,
    cv: Condvar,
}

impl Progress {
    /// Adds `n` and wakes every waiter.
    pub fn add(&self, n: u64) {
        *self.count.lock().unwrap() += n;
        self.cv.notify_all();
    }

    /// The count now.
    pub fn get(&self) -> u64 {
        *self.count.lock().unwrap()
    }

    /// Waits until `pred(count)` holds and returns the count; panics after
    /// `limit`, naming `what` and the count.
    pub fn wait_for(&self, limit: Duration, what: &str, pred: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + limit;
        let mut c = self.count.lock().unwrap();
        while !pred(*c) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out after {limit:?} waiting for {what}: count is {}",
                *c
            );
            c = self.cv.wait_timeout(c, left).unwrap().0;
        }
        *c
    }

    /// Waits up to `limit` for `pred(count)`; returns whether it holds
    /// (for a test that goes on either way).
    pub fn wait_quietly(&self, limit: Duration, pred: impl Fn(u64) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut c = self.count.lock().unwrap();
        while !pred(*c) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            c = self.cv.wait_timeout(c, left).unwrap().0;
        }
        true
    }

    /// Waits until the count is at least `n`, within [`LIMIT`].
    pub fn wait_at_least(&self, n: u64, what: &str) -> u64 {
        self.wait_for(LIMIT, what, |c| c >= n)
    }
}

/// The next value on `rx` within [`LIMIT`], or a panic naming `what`.
pub fn recv_within<T>(rx: &Receiver<T>, what: &str) -> T {
    recv_in(rx, LIMIT, what)
}

/// The next value on `rx` within `within`, or a panic naming `what` and
/// saying whether time ran out or every sender is gone.
pub fn recv_in<T>(rx: &Receiver<T>, within: Duration, what: &str) -> T {
    match rx.recv_timeout(within) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => {
            panic!("nothing within {within:?} while waiting for {what}")
        }
        Err(RecvTimeoutError::Disconnected) => {
            panic!("every sender gone while waiting for {what}")
        }
    }
}

/// Checks `done` every millisecond until it holds; panics after `limit`
/// naming `what`. Only for a state nothing signals (a counter read, a
/// thread that exits): where an event can be awaited, await it.
pub fn poll_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};

    use super::*;

    #[test]
    fn a_wait_returns_once_another_thread_adds_enough() {
        let p = Arc::new(Progress::default());
        let q = p.clone();
        let t = std::thread::spawn(move || (0..5).for_each(|_| q.add(1)));
        assert_eq!(p.wait_for(LIMIT, "five adds", |c| c >= 5), 5);
        t.join().unwrap();
        assert_eq!(p.get(), 5);
    }

    #[test]
    #[should_panic(expected = "waiting for an add nobody makes: count is 0")]
    fn a_wait_that_never_holds_panics_naming_what() {
        Progress::default().wait_for(Duration::from_millis(10), "an add nobody makes", |c| c > 0);
    }

    #[test]
    fn a_quiet_wait_says_whether_it_held() {
        let p = Progress::default();
        assert!(!p.wait_quietly(Duration::from_millis(10), |c| c > 0));
        p.add(2);
        assert!(p.wait_quietly(Duration::from_millis(10), |c| c == 2));
    }

    #[test]
    #[should_panic(expected = "every sender gone while waiting for a value")]
    fn a_receive_from_a_closed_channel_says_so() {
        let (tx, rx) = mpsc::channel::<()>();
        drop(tx);
        recv_in(&rx, LIMIT, "a value");
    }

    #[test]
    #[should_panic(expected = "timed out after 5ms waiting for never")]
    fn a_poll_that_never_holds_panics_naming_what() {
        poll_until(Duration::from_millis(5), "never", || false);
    }
}
