//! Helpers of the reactor's integration tests only (a mio socket, /proc
//! views of this process's descriptors and threads, a watchdog); what
//! other crates' tests share too is in keel-testkit.
#![allow(dead_code, unused_imports)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A loopback mio UDP socket on an ephemeral port.
pub fn udp() -> (mio::net::UdpSocket, SocketAddr) {
    let s = mio::net::UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = s.local_addr().unwrap();
    (s, a)
}

/// The counter the tests await (shared with the other crates' tests).
pub use keel_testkit::Progress;

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Threads of this process whose name (`/proc/self/task/*/comm`, at most
/// 15 bytes) starts with `prefix`, as their task ids.
pub fn threads_named(prefix: &str) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            comm.trim_end()
                .starts_with(prefix)
                .then(|| t.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// Whether task `tid` of this process is blocked in `epoll_wait`, judged
/// by its wait channel or, failing that, its current system call.
fn in_epoll_wait(tid: &str) -> bool {
    let dir = format!("/proc/self/task/{tid}");
    if let Ok(wchan) = std::fs::read_to_string(format!("{dir}/wchan")) {
        if wchan.contains("ep_poll") || wchan.contains("epoll") {
            return true;
        }
    }
    // epoll_wait / epoll_pwait / epoll_pwait2.
    let numbers: &[&str] = if cfg!(target_arch = "x86_64") {
        &["232", "281", "441"]
    } else if cfg!(target_arch = "aarch64") {
        &["22", "441"]
    } else {
        &[]
    };
    std::fs::read_to_string(format!("{dir}/syscall"))
        .map(|s| numbers.contains(&s.split(' ').next().unwrap_or("")))
        .unwrap_or(false)
}

/// Waits until a thread whose name starts with `prefix` sleeps in
/// `epoll_wait`, so the test can act on a reactor that is certainly asleep
/// in poll (a post, timer or stop that fails to wake it then hangs, instead
/// of passing by luck because the reactor had not reached poll yet).
/// Nothing signals "now in poll", so this polls /proc, bounded by `limit`.
pub fn wait_until_in_poll(prefix: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let tids = threads_named(prefix);
        if tids.iter().any(|t| in_epoll_wait(t)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no thread named {prefix:?}* blocked in epoll_wait within {limit:?} (found: {tids:?})"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Calls `on_timeout` (e.g. `Handle::stop`) if not dropped within
/// `limit`: bounds a test that blocks in `turn(None)` or `run()`.
pub struct Watchdog {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn new(limit: Duration, on_timeout: impl FnOnce() + Send + 'static) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                on_timeout();
            }
        });
        Watchdog {
            done: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
