//! The harness's libc calls: the process's CPU time (getrusage(2)), the
//! page size, and poll(2) for C libraries' sockets.
#![allow(unsafe_code)]

use std::time::Duration;

/// User plus system CPU time of the whole process (every thread,
/// `RUSAGE_SELF`), microsecond resolution; `None` if the call fails.
pub fn process_cpu() -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the size of `rusage`, as
    // getrusage requires; RUSAGE_SELF is a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it filled the struct (and it was
    // zeroed before: every bit pattern of it is valid anyway).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// The system's page size in bytes (`sysconf(_SC_PAGESIZE)`).
pub fn page_size() -> Option<u64> {
    // SAFETY: sysconf takes any name and has no memory effects; it returns
    // -1 for a name it does not know.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0)
}

/// Waits with poll(2) until one of a set of file descriptors is readable
/// (for C libraries that hand out their sockets, as ENet does).
#[derive(Default)]
pub struct Poller {
    fds: Vec<libc::pollfd>,
}

impl Poller {
    /// Watches `fd` for reading; its index is the order of `add` calls.
    pub fn add(&mut self, fd: std::ffi::c_int) {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }

    /// Waits up to `timeout` (millisecond resolution, rounded up) and puts
    /// the indices of the readable descriptors into `ready`.
    pub fn wait(&mut self, timeout: Duration, ready: &mut Vec<usize>) -> std::io::Result<()> {
        ready.clear();
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as std::ffi::c_int;
        // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfd
        // structs for the call.
        let rc = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for (i, p) in self.fds.iter().enumerate() {
            if p.revents != 0 {
                ready.push(i);
            }
        }
        Ok(())
    }
}
