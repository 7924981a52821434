//! What the tests read of this process from /proc.

/// Resident memory of this process in bytes (`VmRSS` of
/// `/proc/self/status`), for the tests that hold what a peer can make a
/// server keep. A binary that reads it runs alone (its own test binary):
/// other tests' memory would count.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a VmRSS value in KiB");
    kib * 1024
}

#[cfg(test)]
mod tests {
    #[test]
    fn resident_memory_grows_with_a_touched_buffer() {
        let before = super::rss_bytes();
        let buf = vec![1u8; 64 << 20];
        let after = super::rss_bytes();
        assert!(after >= before + (32 << 20), "{before} -> {after}");
        drop(buf);
    }
}
