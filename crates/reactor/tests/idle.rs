//! An idle runtime sleeps: its threads park or wait in poll instead of
//! spinning (a thread spins only briefly after work, never while idle).

use std::time::Duration;

use keel_reactor::{IoModel, Runtime};

/// CPU time (user + system) of this process, from /proc/self/stat, in
/// clock ticks of 10 ms.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (1-based),
    // i.e. 11 and 12 after the command name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn idle_shared_runtime_does_not_spin() {
    let rt = Runtime::new(IoModel::Shared { threads: 4 }).unwrap();
    // Some work first, so every thread has been through the spin path.
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..1000 {
        let tx = tx.clone();
        let _ = rt.handle().post(move || tx.send(i).unwrap());
    }
    for _ in 0..1000 {
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let before = cpu_ticks();
    // Measuring idle CPU over a wall-clock window (not synchronization).
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu_ticks() - before;
    rt.stop().unwrap();
    // Four threads spinning would burn ~100 ticks (one full core on this
    // 2-core machine is 50 ticks per 500 ms); parked threads burn ~0.
    assert!(
        used <= 10,
        "an idle runtime used {used} ticks (10 ms each) in 500 ms"
    );
}
