//! Latency recording (hdrhistogram, exact min and max) and the process's
//! resident set size.

use hdrhistogram::Histogram;

/// Delivery latencies in nanoseconds: a histogram of 3 significant digits
/// plus the exact smallest and largest sample. A percentile is the
/// histogram's value clamped to `[min, max]`: the histogram answers with
/// its bucket's highest equivalent value, which may lie above every
/// sample, and no percentile is ever reported above the recorded max.
pub struct Latency {
    hist: Histogram<u64>,
    min_ns: u64,
    max_ns: u64,
    count: u64,
}

/// Largest latency the histogram holds (60 s); larger samples are
/// recorded as this (and the exact max still says how large).
const HIST_MAX_NS: u64 = 60_000_000_000;

impl Default for Latency {
    fn default() -> Self {
        Latency {
            hist: Histogram::new_with_bounds(1, HIST_MAX_NS, 3)
                .expect("constant histogram bounds are valid"),
            min_ns: u64::MAX,
            max_ns: 0,
            count: 0,
        }
    }
}

impl Latency {
    /// Records one sample.
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, HIST_MAX_NS));
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.count += 1;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0..=1) in microseconds, within `[min, max]`;
    /// `None` without samples.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        (self.count > 0).then(|| {
            self.hist
                .value_at_quantile(q)
                .clamp(self.min_ns, self.max_ns) as f64
                / 1_000.0
        })
    }

    /// The smallest sample in microseconds.
    pub fn min_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.min_ns as f64 / 1_000.0)
    }

    /// The largest sample in microseconds.
    pub fn max_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.max_ns as f64 / 1_000.0)
    }
}

/// Resident set size of this process now, in bytes: the resident pages of
/// /proc/self/statm (what /proc/self/status calls `VmRSS`), read with one
/// `pread` of a file kept open. The server samples it every
/// [`SNAPSHOT_EVERY`](crate::server::SNAPSHOT_EVERY) while messages flow:
/// opening and parsing /proc/self/status instead cost about 9,000
/// instructions and three system calls a sample, which every library's
/// CPU per message carried (about 770 instructions a message at 1,200
/// messages a second).
pub fn rss_bytes() -> Option<u64> {
    use std::os::unix::fs::FileExt;
    static STATM: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let file = STATM
        .get_or_init(|| std::fs::File::open("/proc/self/statm").ok())
        .as_ref()?;
    let mut buf = [0u8; 128];
    let n = file.read_at(&mut buf, 0).ok()?;
    Some(statm_resident_pages(&buf[..n])? * crate::sys::page_size()?)
}

/// The second field of a statm line (`size resident shared text lib data
/// dt`, in pages).
fn statm_resident_pages(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_never_exceed_the_recorded_max() {
        let mut l = Latency::default();
        // 1001 ns falls in a bucket whose highest equivalent value is
        // above it: unclamped, every percentile would read above the max.
        for _ in 0..1000 {
            l.record(1_001_003);
        }
        assert_eq!(l.max_us(), Some(1_001.003));
        for q in [0.5, 0.99, 0.999, 1.0] {
            let v = l.quantile_us(q).unwrap();
            assert!(v <= 1_001.003, "q {q}: {v}");
            assert!(v >= 1_001.003, "q {q}: {v} below min");
        }
        assert!(
            l.hist.value_at_quantile(0.5) > 1_001_003,
            "the case must be one the clamp decides"
        );
    }

    #[test]
    fn percentiles_of_a_spread() {
        let mut l = Latency::default();
        for us in 1..=10_000u64 {
            l.record(us * 1_000);
        }
        assert_eq!(l.count(), 10_000);
        let p50 = l.quantile_us(0.5).unwrap();
        assert!((4_990.0..=5_010.0).contains(&p50), "{p50}");
        let p99 = l.quantile_us(0.99).unwrap();
        assert!((9_890.0..=9_910.0).contains(&p99), "{p99}");
        assert_eq!(l.max_us(), Some(10_000.0));
        assert_eq!(l.min_us(), Some(1.0));
        assert_eq!(Latency::default().quantile_us(0.5), None);
    }

    #[test]
    fn statm_resident_is_its_second_field() {
        assert_eq!(statm_resident_pages(b"1234 567 89 1 0 400 0\n"), Some(567));
        assert_eq!(statm_resident_pages(b"1234"), None);
        assert_eq!(statm_resident_pages(b"1234 x 1"), None);
    }

    /// The same figure as /proc/self/status's VmRSS, and it follows the
    /// process's memory: pages touched show up, read after read of the
    /// file kept open.
    #[test]
    fn rss_follows_touched_pages_and_agrees_with_status() {
        let status = || -> u64 {
            let text = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = text.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
            let kb: u64 = line["VmRSS:".len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap();
            kb * 1024
        };
        let before = rss_bytes().expect("statm readable");
        let s = status();
        assert!(
            before.abs_diff(s) < 4 << 20,
            "statm {before} against status {s}"
        );
        let mut block = vec![0u8; 64 << 20];
        for i in (0..block.len()).step_by(4096) {
            block[i] = 1;
        }
        std::hint::black_box(&block);
        let after = rss_bytes().unwrap();
        assert!(
            after >= before + (60 << 20),
            "{before} -> {after} after touching 64 MiB"
        );
        drop(block);
    }
}
