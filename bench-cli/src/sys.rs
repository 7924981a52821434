//! The CPU clocks, the only `unsafe` code of keel-bench: `clock_gettime`
//! through libc, which std does not wrap for CPU-time clocks.
//!
//! * [`process_cpu_time`]: `CLOCK_PROCESS_CPUTIME_ID`, the user and system
//!   CPU time of every thread of the process, those that have exited
//!   included, in nanoseconds (the kernel's scheduler run time), where
//!   `/proc/self/stat` counts clock ticks of 10 ms.
//! * [`thread_cpu_time`] (Linux): the CPU-time clock of one thread of this
//!   process by its kernel thread id, the clock `pthread_getcpuclockid`
//!   returns for a pthread, made from the id as the kernel defines it
//!   (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` in
//!   `include/linux/posix-timers.h`, what glibc's `pthread_getcpuclockid`
//!   computes), since the server's threads are known by their ids in
//!   `/proc/self/task`, not by a `pthread_t`.
//!
//! Both return `None` when the call fails (a thread that has exited, a
//! platform without the clock).
#![allow(unsafe_code)]

use std::time::Duration;

/// Reads `clock`, `None` if `clock_gettime` fails.
#[cfg(unix)]
fn read_clock(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, the only memory clock_gettime touches; an invalid clock id is
    // reported as -1 (EINVAL), not undefined behaviour.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// CPU time (user + system) of this whole process so far, to the
/// nanosecond: `CLOCK_PROCESS_CPUTIME_ID`.
#[cfg(unix)]
pub(crate) fn process_cpu_time() -> Option<Duration> {
    read_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Not on this platform.
#[cfg(not(unix))]
pub(crate) fn process_cpu_time() -> Option<Duration> {
    None
}

/// CPU time (user + system) of thread `tid` of this process so far, to the
/// nanosecond; `None` if it has exited or `tid` is not a thread of this
/// process.
#[cfg(target_os = "linux")]
pub(crate) fn thread_cpu_time(tid: u32) -> Option<Duration> {
    // The kernel's per-thread CPU clock ids: the bitwise complement of the
    // thread id shifted left by 3, then CPUCLOCK_PERTHREAD_MASK (4) |
    // CPUCLOCK_SCHED (2).
    let tid = libc::clockid_t::try_from(tid).ok()?;
    read_clock((!tid << 3) | 4 | 2)
}

/// Not on this platform.
#[cfg(not(target_os = "linux"))]
pub(crate) fn thread_cpu_time(_tid: u32) -> Option<Duration> {
    None
}
