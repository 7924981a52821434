//! Process and host counters, read from `/proc` and, for CPU time, from
//! the kernel's CPU clocks (the `sys` module, keel-bench's only `unsafe`).
//!
//! * CPU time of the whole process ([`process_cpu_time`]):
//!   `CLOCK_PROCESS_CPUTIME_ID`, in nanoseconds, so `cpu_seconds` and
//!   `cpu_percent` are not rounded to 10 ms over a run. Where the clock
//!   cannot be read, `utime + stime` of `/proc/self/stat` (all threads),
//!   in clock ticks of `USER_HZ`, which Linux fixes at 100 for everything
//!   it exports to user space through `/proc` (whatever the kernel's
//!   internal `HZ`), so [`USER_HZ`] is a constant here rather than
//!   `sysconf(_SC_CLK_TCK)`: a resolution of 10 ms.
//! * Thread CPU time, for a [`ThreadSet`] (the threads a server runs on):
//!   each thread's CPU-time clock (Linux, by thread id), in nanoseconds, so
//!   a server's CPU per message is not rounded to 10 ms over the run
//!   (which made it move in steps of 10 µs over a thousand messages, and
//!   read 0 for a light load). Where that clock cannot be read, the first
//!   field of `/proc/self/task/<tid>/schedstat` (the scheduler's run time
//!   in nanoseconds, user and system time together), then `utime + stime`
//!   of the thread's `stat`, in clock ticks as above.
//! * Peak RSS: `VmHWM` of `/proc/self/status`, in bytes; current RSS:
//!   `VmRSS`.
//! * Host UDP counters: the `Udp:` lines of `/proc/net/snmp` (IPv4) and the
//!   `Udp6*` lines of `/proc/net/snmp6` (IPv6). Both are per network
//!   namespace and host-wide within it, so concurrent traffic from other
//!   processes shows up in the deltas; the JSON fields say "host" for that
//!   reason.
//!
//! Every reader returns `None` when the file is missing or unparsable (not
//! Linux, `/proc` not mounted, an unknown kernel format), and the report then
//! carries `null`. The parsers are separate pure functions so they are tested
//! on fixed sample text.

use std::fs;
use std::time::Duration;

/// Clock ticks per second of the CPU times in `/proc/<pid>/stat` (Linux
/// `USER_HZ`, 100 on every architecture Linux supports for user space).
pub const USER_HZ: u64 = 100;

/// Parses `utime + stime` from the text of `/proc/<pid>/stat`.
///
/// The command name (field 2) is in parentheses and may itself contain
/// spaces or parentheses, so fields are counted after the last `)`.
pub fn parse_stat_cpu(text: &str) -> Option<Duration> {
    let rest = &text[text.rfind(')')? + 1..];
    // After ")" come field 3 (state) onwards; utime is field 14, stime 15.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime.checked_add(stime)?;
    let secs = ticks / USER_HZ;
    let rem = ticks % USER_HZ;
    Some(Duration::from_secs(secs) + Duration::from_nanos(rem * (1_000_000_000 / USER_HZ)))
}

/// Parses the run time from the text of `/proc/<pid>/schedstat` (or of a
/// task's): its first field, the nanoseconds the task has spent running
/// on a CPU.
pub fn parse_schedstat_cpu(text: &str) -> Option<Duration> {
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// CPU time of thread `tid` of this process: its CPU-time clock (ns),
/// else its `schedstat` run time (ns), else its `stat` clock ticks.
fn thread_cpu_time(tid: u32) -> Option<Duration> {
    if let Some(t) = crate::sys::thread_cpu_time(tid) {
        return Some(t);
    }
    let task = format!("/proc/self/task/{tid}");
    if let Some(t) = fs::read_to_string(format!("{task}/schedstat"))
        .ok()
        .and_then(|t| parse_schedstat_cpu(&t))
    {
        return Some(t);
    }
    parse_stat_cpu(&fs::read_to_string(format!("{task}/stat")).ok()?)
}

/// User + system CPU time consumed so far by this whole process, to the
/// nanosecond (`CLOCK_PROCESS_CPUTIME_ID`), else in clock ticks of
/// `/proc/self/stat` (see the module docs).
pub fn process_cpu_time() -> Option<Duration> {
    crate::sys::process_cpu_time()
        .or_else(|| parse_stat_cpu(&fs::read_to_string("/proc/self/stat").ok()?))
}

/// The threads of this process whose name starts with a prefix, as they
/// are when [`ThreadSet::named`] runs: a runtime started just before has
/// its threads in the set, one started after does not. Used to measure a
/// server's CPU time apart from its clients' in the same process.
#[derive(Clone, Debug, Default)]
pub struct ThreadSet {
    tids: Vec<u32>,
}

impl ThreadSet {
    /// This process's threads whose name starts with one of `prefixes`
    /// now (empty where `/proc` is unreadable). A new thread carries its
    /// parent's name until it has set its own.
    pub fn named(prefixes: &[&str]) -> ThreadSet {
        let mut tids = Vec::new();
        if let Ok(dir) = fs::read_dir("/proc/self/task") {
            for entry in dir.flatten() {
                let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                if prefixes.iter().any(|p| comm.starts_with(p)) {
                    tids.push(tid);
                }
            }
        }
        tids.sort_unstable();
        ThreadSet { tids }
    }

    /// How many threads the set holds.
    pub fn len(&self) -> usize {
        self.tids.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }

    /// CPU time of the set's threads so far, to the nanosecond where their
    /// CPU clocks or `schedstat` can be read (see the module docs; `None` if one cannot be
    /// read, e.g. it has exited, or the set is empty).
    pub fn cpu_time(&self) -> Option<Duration> {
        if self.tids.is_empty() {
            return None;
        }
        let mut sum = Duration::ZERO;
        for &tid in &self.tids {
            sum += thread_cpu_time(tid)?;
        }
        Some(sum)
    }
}

/// Parses the `VmHWM` line of `/proc/<pid>/status` into bytes.
pub fn parse_vm_hwm(text: &str) -> Option<u64> {
    parse_status_kb(text, "VmHWM:")
}

/// Parses the `VmRSS` line of `/proc/<pid>/status` into bytes.
pub fn parse_vm_rss(text: &str) -> Option<u64> {
    parse_status_kb(text, "VmRSS:")
}

/// Resident set size of this process now, in bytes.
pub fn rss_bytes() -> Option<u64> {
    parse_vm_rss(&fs::read_to_string("/proc/self/status").ok()?)
}

fn parse_status_kb(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let mut parts = line[key.len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next()? {
        "kB" => value.checked_mul(1024),
        _ => None,
    }
}

/// Peak resident set size of this process so far, in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    parse_vm_hwm(&fs::read_to_string("/proc/self/status").ok()?)
}

/// CPU use over wall time, in percent of one core (100 = one core busy).
/// Returns 0 for a zero or negative wall time.
pub fn cpu_percent(cpu: Duration, wall: Duration) -> f64 {
    let wall = wall.as_secs_f64();
    if wall > 0.0 {
        cpu.as_secs_f64() / wall * 100.0
    } else {
        0.0
    }
}

/// UDP counters of one address family, from `/proc/net/snmp` (`Udp:`) or
/// `/proc/net/snmp6` (`Udp6…`). Counters the kernel does not export are
/// `None` (older kernels lack `InCsumErrors`, `IgnoredMulti`, `MemErrors`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// `InDatagrams`: datagrams delivered to sockets.
    pub in_datagrams: Option<u64>,
    /// `NoPorts`: datagrams to a port with no socket.
    pub no_ports: Option<u64>,
    /// `InErrors`: datagrams dropped on receive for any reason except no port
    /// (includes `RcvbufErrors` and `InCsumErrors`).
    pub in_errors: Option<u64>,
    /// `OutDatagrams`: datagrams sent.
    pub out_datagrams: Option<u64>,
    /// `RcvbufErrors`: dropped because a socket's receive buffer was full.
    pub rcvbuf_errors: Option<u64>,
    /// `SndbufErrors`: send failed for lack of send buffer (ENOBUFS/EAGAIN
    /// at the IP layer).
    pub sndbuf_errors: Option<u64>,
    /// `InCsumErrors`: bad checksum.
    pub in_csum_errors: Option<u64>,
    /// `IgnoredMulti`: multicast/broadcast not delivered.
    pub ignored_multi: Option<u64>,
    /// `MemErrors`: dropped for lack of socket memory accounting.
    pub mem_errors: Option<u64>,
}

impl UdpCounters {
    fn set(&mut self, name: &str, value: u64) {
        let slot = match name {
            "InDatagrams" => &mut self.in_datagrams,
            "NoPorts" => &mut self.no_ports,
            "InErrors" => &mut self.in_errors,
            "OutDatagrams" => &mut self.out_datagrams,
            "RcvbufErrors" => &mut self.rcvbuf_errors,
            "SndbufErrors" => &mut self.sndbuf_errors,
            "InCsumErrors" => &mut self.in_csum_errors,
            "IgnoredMulti" => &mut self.ignored_multi,
            "MemErrors" => &mut self.mem_errors,
            _ => return,
        };
        *slot = Some(value);
    }

    /// Parses the two `Udp:` lines (names, then values) of `/proc/net/snmp`.
    /// `UdpLite:` lines are ignored. Returns `None` without a well-formed
    /// `Udp:` pair.
    pub fn parse_snmp(text: &str) -> Option<UdpCounters> {
        let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
        let names = lines.next()?;
        let values = lines.next()?;
        let names: Vec<&str> = names.split_whitespace().skip(1).collect();
        let values: Vec<&str> = values.split_whitespace().skip(1).collect();
        if names.is_empty() || names.len() != values.len() {
            return None;
        }
        let mut c = UdpCounters::default();
        for (name, value) in names.iter().zip(values) {
            c.set(name, value.parse().ok()?);
        }
        Some(c)
    }

    /// Parses the `Udp6…` lines (`Udp6InErrors  5`, one per line) of
    /// `/proc/net/snmp6`. `UdpLite6…` lines are ignored. Returns `None` if no
    /// `Udp6` counter is present.
    pub fn parse_snmp6(text: &str) -> Option<UdpCounters> {
        let mut c = UdpCounters::default();
        let mut any = false;
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            if let Some(name) = name.strip_prefix("Udp6") {
                c.set(name, value.parse().ok()?);
                any = true;
            }
        }
        any.then_some(c)
    }

    /// Current IPv4 UDP counters of this network namespace.
    pub fn read_ipv4() -> Option<UdpCounters> {
        Self::parse_snmp(&fs::read_to_string("/proc/net/snmp").ok()?)
    }

    /// Current IPv6 UDP counters of this network namespace.
    pub fn read_ipv6() -> Option<UdpCounters> {
        Self::parse_snmp6(&fs::read_to_string("/proc/net/snmp6").ok()?)
    }

    /// Per-counter increase from `before` to `self` (`after`). A counter
    /// missing on either side is `None`; a counter that went backwards (a
    /// reset) gives 0 rather than a wrapped huge number.
    pub fn delta_since(&self, before: &UdpCounters) -> UdpCounters {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        UdpCounters {
            in_datagrams: d(self.in_datagrams, before.in_datagrams),
            no_ports: d(self.no_ports, before.no_ports),
            in_errors: d(self.in_errors, before.in_errors),
            out_datagrams: d(self.out_datagrams, before.out_datagrams),
            rcvbuf_errors: d(self.rcvbuf_errors, before.rcvbuf_errors),
            sndbuf_errors: d(self.sndbuf_errors, before.sndbuf_errors),
            in_csum_errors: d(self.in_csum_errors, before.in_csum_errors),
            ignored_multi: d(self.ignored_multi, before.ignored_multi),
            mem_errors: d(self.mem_errors, before.mem_errors),
        }
    }
}

/// Delta of optional snapshots: `None` unless both were readable.
pub fn udp_delta(before: Option<&UdpCounters>, after: Option<&UdpCounters>) -> Option<UdpCounters> {
    Some(after?.delta_since(before?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "12345 (keel bench) (x) R 1 12345 12345 0 -1 4194304 \
        500 0 0 0 250 75 0 0 20 0 9 0 1000 123456789 2048 18446744073709551615 \
        1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";

    const STATUS: &str = "Name:\tkeel-bench\nUmask:\t0022\nState:\tR (running)\n\
        VmPeak:\t  20000 kB\nVmSize:\t  19000 kB\nVmHWM:\t    6144 kB\nVmRSS:\t    6000 kB\n";

    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 1000
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1000 2 30 990 25 4 1 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 9 9 9 9 9 9 9 9 9
";

    const SNMP6: &str = "\
Ip6InReceives                   \t500
Udp6InDatagrams                 \t40
Udp6NoPorts                     \t0
Udp6InErrors                    \t7
Udp6OutDatagrams                \t41
Udp6RcvbufErrors                \t6
Udp6SndbufErrors                \t0
Udp6InCsumErrors                \t1
Udp6IgnoredMulti                \t0
UdpLite6InErrors                \t99
";

    #[test]
    fn stat_cpu_counts_after_the_last_parenthesis() {
        // utime 250 + stime 75 ticks = 3.25 s.
        assert_eq!(parse_stat_cpu(STAT), Some(Duration::from_millis(3250)));
        assert_eq!(parse_stat_cpu("1 (x) R 1 2"), None);
        assert_eq!(parse_stat_cpu("no parenthesis"), None);
    }

    #[test]
    fn schedstat_run_time_in_nanoseconds() {
        assert_eq!(
            parse_schedstat_cpu("152310395 315862512 56\n"),
            Some(Duration::from_nanos(152_310_395))
        );
        assert_eq!(parse_schedstat_cpu(""), None);
        assert_eq!(parse_schedstat_cpu("x 1 2"), None);
    }

    #[test]
    fn vm_hwm_in_bytes() {
        assert_eq!(parse_vm_hwm(STATUS), Some(6144 * 1024));
        assert_eq!(parse_vm_hwm("VmRSS:\t 1 kB\n"), None);
        assert_eq!(parse_vm_hwm("VmHWM:\t 1 MB\n"), None);
    }

    #[test]
    fn vm_rss_in_bytes() {
        assert_eq!(parse_vm_rss(STATUS), Some(6000 * 1024));
        assert_eq!(parse_vm_rss("VmHWM:\t 1 kB\n"), None);
    }

    #[test]
    fn a_thread_set_holds_the_threads_named_so_and_reads_their_cpu() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let t = std::thread::Builder::new()
            .name("procstats-spin".into())
            .spawn(move || {
                // Burn 50 ms of this thread's own CPU (not wall time: a
                // loaded machine may not run it), say so, then wait to be
                // told to end.
                let own = || {
                    std::fs::read_to_string("/proc/thread-self/stat")
                        .ok()
                        .and_then(|s| parse_stat_cpu(&s))
                        .unwrap_or_default()
                };
                let give_up = std::time::Instant::now() + Duration::from_secs(20);
                let mut x = 0u64;
                while own() < Duration::from_millis(50) && std::time::Instant::now() < give_up {
                    for _ in 0..10_000 {
                        x = x.wrapping_mul(31).wrapping_add(1);
                    }
                }
                ready_tx.send(x).unwrap();
                let _ = rx.recv();
            })
            .unwrap();
        ready_rx.recv().unwrap();
        let set = ThreadSet::named(&["procstats-spin"]);
        assert_eq!(set.len(), 1);
        assert!(ThreadSet::named(&["no-such-thread-name"])
            .cpu_time()
            .is_none());
        let cpu = set.cpu_time().expect("its stat is readable");
        assert!(cpu >= Duration::from_millis(50), "{cpu:?}");
        // Finer than clock ticks (10 ms) on Linux (the thread's CPU clock):
        // a run time on a whole tick is a 1 in 10^7 chance.
        if cfg!(target_os = "linux") {
            assert_ne!(cpu.as_nanos() % 10_000_000, 0, "{cpu:?} is in clock ticks");
        }
        drop(tx);
        t.join().unwrap();
    }

    /// Spins this thread for `wall` of wall time.
    fn spin(wall: Duration) -> u64 {
        let end = std::time::Instant::now() + wall;
        let mut x = 0u64;
        while std::time::Instant::now() < end {
            for _ in 0..1_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
        }
        x
    }

    #[test]
    fn process_cpu_time_is_finer_than_clock_ticks() {
        if !cfg!(target_os = "linux") {
            return;
        }
        // Two readings around 2 ms of spinning: in clock ticks (what
        // /proc/self/stat gives, and cpu_seconds used to be) they differ
        // by 0 or a whole number of 10 ms ticks. The other tests of this
        // binary may run meanwhile and add CPU time, so no upper bound;
        // a nanosecond count on a whole tick is a 1 in 10^7 chance.
        let before = process_cpu_time().unwrap();
        std::hint::black_box(spin(Duration::from_millis(2)));
        let after = process_cpu_time().unwrap();
        let d = after.checked_sub(before).expect("the clock went backwards");
        assert!(d > Duration::ZERO, "no CPU time over 2 ms of spinning");
        assert_ne!(d.as_nanos() % 10_000_000, 0, "{d:?} is in clock ticks");
    }

    #[test]
    fn a_thread_cpu_clock_reads_this_process_threads_only() {
        if !cfg!(target_os = "linux") {
            return;
        }
        // This thread's id: /proc/thread-self links to <pid>/task/<tid>.
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        let tid: u32 = link.file_name().unwrap().to_str().unwrap().parse().unwrap();
        let before = crate::sys::thread_cpu_time(tid).expect("own thread clock");
        std::hint::black_box(spin(Duration::from_millis(2)));
        let after = crate::sys::thread_cpu_time(tid).unwrap();
        // Only this thread's time: 2 ms of wall time holds at most 2 ms of
        // its CPU (plus the reads), and some of it.
        let d = after - before;
        assert!(d > Duration::ZERO && d < Duration::from_millis(10), "{d:?}");
        assert_ne!(d.as_nanos() % 10_000_000, 0, "{d:?}");
        // Pid 1's thread is not one of ours: the kernel refuses its clock.
        if std::process::id() != 1 {
            assert_eq!(crate::sys::thread_cpu_time(1), None);
        }
        assert_eq!(crate::sys::thread_cpu_time(u32::MAX), None);
    }

    #[test]
    fn snmp_udp_line_pair() {
        let c = UdpCounters::parse_snmp(SNMP).unwrap();
        assert_eq!(c.in_datagrams, Some(1000));
        assert_eq!(c.no_ports, Some(2));
        assert_eq!(c.in_errors, Some(30));
        assert_eq!(c.out_datagrams, Some(990));
        assert_eq!(c.rcvbuf_errors, Some(25));
        assert_eq!(c.sndbuf_errors, Some(4));
        assert_eq!(c.in_csum_errors, Some(1));
        assert_eq!(c.mem_errors, Some(0));
        // An old kernel without the later columns.
        let old = "Udp: InDatagrams NoPorts InErrors OutDatagrams\nUdp: 1 2 3 4\n";
        let c = UdpCounters::parse_snmp(old).unwrap();
        assert_eq!(c.in_errors, Some(3));
        assert_eq!(c.rcvbuf_errors, None);
        assert_eq!(UdpCounters::parse_snmp("Ip: a\nIp: 1\n"), None);
        assert_eq!(UdpCounters::parse_snmp("Udp: A B\nUdp: 1\n"), None);
        assert_eq!(UdpCounters::parse_snmp("Udp: A\nUdp: x\n"), None);
    }

    #[test]
    fn snmp6_udp_lines() {
        let c = UdpCounters::parse_snmp6(SNMP6).unwrap();
        assert_eq!(c.in_datagrams, Some(40));
        assert_eq!(c.in_errors, Some(7));
        assert_eq!(c.rcvbuf_errors, Some(6));
        assert_eq!(c.sndbuf_errors, Some(0));
        assert_eq!(c.mem_errors, None);
        assert_eq!(UdpCounters::parse_snmp6("Ip6InReceives 5\n"), None);
    }

    #[test]
    fn deltas_saturate_and_propagate_missing() {
        let before = UdpCounters::parse_snmp(SNMP).unwrap();
        let mut after = before;
        after.rcvbuf_errors = Some(40);
        after.in_errors = Some(45);
        after.sndbuf_errors = Some(0); // went backwards
        after.mem_errors = None;
        let d = after.delta_since(&before);
        assert_eq!(d.rcvbuf_errors, Some(15));
        assert_eq!(d.in_errors, Some(15));
        assert_eq!(d.sndbuf_errors, Some(0));
        assert_eq!(d.in_datagrams, Some(0));
        assert_eq!(d.mem_errors, None);
        assert_eq!(udp_delta(None, Some(&after)), None);
        assert_eq!(udp_delta(Some(&before), Some(&after)), Some(d));
    }

    #[test]
    fn cpu_percent_of_one_core() {
        let p = cpu_percent(Duration::from_millis(1500), Duration::from_secs(1));
        assert!((p - 150.0).abs() < 1e-9);
        assert_eq!(cpu_percent(Duration::from_secs(1), Duration::ZERO), 0.0);
    }

    #[test]
    fn live_proc_reads_work_on_linux() {
        if cfg!(target_os = "linux") && std::path::Path::new("/proc/self/stat").exists() {
            assert!(process_cpu_time().is_some());
            assert!(peak_rss_bytes().unwrap() > 0);
        }
    }
}
