//! The process's CPU time from getrusage(2): the one libc call of the
//! harness.
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
