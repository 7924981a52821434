//! Round-trip-time recording with bounded memory.
//!
//! keel-bench keeps every RTT sample (not arknet's 8,192-sample reservoir) in
//! an HDR histogram of nanoseconds covering 1 ns ..= 60 s with 3 significant
//! digits, so percentiles are within 0.1 % of the exact nearest-rank value
//! whatever the run length. Values above 60 s are clamped to 60 s. The exact
//! maximum and mean are tracked alongside the histogram. The histogram's
//! counts are allocated once in [`Rtt::new`]; [`Rtt::record`] never
//! allocates, so it can sit on the client's hot path.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Lowest discernible RTT, in nanoseconds.
pub const LOWEST_NS: u64 = 1;
/// Highest trackable RTT, in nanoseconds (60 s); larger values are clamped.
pub const HIGHEST_NS: u64 = 60_000_000_000;
/// Significant decimal digits kept by the histogram.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// RTT recorder: one per client (or per lane), merged at the end.
#[derive(Clone, Debug)]
pub struct Rtt {
    hist: Histogram<u64>,
    /// Exact sum of recorded (clamped) values, for the mean.
    sum_ns: u128,
    /// Exact sum of the squares of recorded (clamped) values, for the
    /// standard deviation (60 s² in ns² is 3.6e21, so 2^128 holds about
    /// 10^17 of the largest samples).
    sum_sq_ns: u128,
    /// Exact largest recorded (clamped) value.
    max_ns: u64,
    /// Exact smallest recorded (clamped) value; `u64::MAX` when empty.
    min_ns: u64,
}

/// Percentiles and moments of recorded RTTs, in microseconds.
///
/// With no samples every value is `None` (serialized as JSON `null`), so an
/// empty run cannot be mistaken for a fast one. Percentiles are nearest-rank
/// (the smallest recorded value such that at least the given fraction of
/// samples are less than or equal to it), reported as the highest value
/// equivalent at the histogram's precision, clamped to the exact
/// `min_us ..= max_us`: a bucket's upper edge is not a sample, so no
/// percentile is ever above the largest RTT recorded (or below the
/// smallest); `min_us`, `max_us`, `mean_us` and `stddev_us` are exact.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttSummary {
    /// Number of samples recorded.
    pub samples: u64,
    /// 50th percentile.
    pub p50_us: Option<f64>,
    /// 90th percentile.
    pub p90_us: Option<f64>,
    /// 95th percentile.
    pub p95_us: Option<f64>,
    /// 99th percentile.
    pub p99_us: Option<f64>,
    /// 99.9th percentile.
    pub p999_us: Option<f64>,
    /// Largest sample.
    pub max_us: Option<f64>,
    /// Arithmetic mean.
    pub mean_us: Option<f64>,
    /// Smallest sample.
    pub min_us: Option<f64>,
    /// Population standard deviation of the samples.
    pub stddev_us: Option<f64>,
}

impl Default for Rtt {
    fn default() -> Self {
        Self::new()
    }
}

impl Rtt {
    /// An empty recorder; allocates the histogram's counts (about 200 KiB).
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Rtt {
            hist,
            sum_ns: 0,
            sum_sq_ns: 0,
            max_ns: 0,
            min_ns: u64::MAX,
        }
    }

    /// Records one RTT; clamps to 60 s. Never allocates.
    #[inline]
    pub fn record(&mut self, rtt: Duration) {
        let ns = u64::try_from(rtt.as_nanos())
            .unwrap_or(u64::MAX)
            .min(HIGHEST_NS);
        self.hist.saturating_record(ns);
        self.sum_ns += u128::from(ns);
        self.sum_sq_ns = self
            .sum_sq_ns
            .saturating_add(u128::from(ns) * u128::from(ns));
        self.max_ns = self.max_ns.max(ns);
        self.min_ns = self.min_ns.min(ns);
    }

    /// Number of samples recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Adds every sample of `other` to `self`.
    pub fn merge(&mut self, other: &Rtt) {
        // Both histograms have the same bounds and hold only clamped values,
        // so the addition cannot run out of range.
        self.hist
            .add(&other.hist)
            .expect("RTT histograms share their bounds");
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns = self.sum_sq_ns.saturating_add(other.sum_sq_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.min_ns = self.min_ns.min(other.min_ns);
    }

    /// Forgets every sample (e.g. between warm-up and measured phase),
    /// keeping the allocation.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.sum_ns = 0;
        self.sum_sq_ns = 0;
        self.max_ns = 0;
        self.min_ns = u64::MAX;
    }

    /// Everything recorded so far in HdrHistogram's percentile-distribution
    /// format (Java's `outputPercentileDistribution`, which HdrHistogram's
    /// plotter reads), values in microseconds, 5 ticks per half distance:
    /// a header, then `Value Percentile TotalCount 1/(1-Percentile)` lines,
    /// then the mean, standard deviation, maximum and count. Values are
    /// bucket edges clamped to the exact maximum, as the percentiles of
    /// [`Rtt::summary`] are.
    pub fn percentile_distribution(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "{:>12} {:>14} {:>10} {:>14}\n\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        );
        let us = |ns: u64| ns.clamp(self.min_ns.min(self.max_ns), self.max_ns) as f64 / 1_000.0;
        let mut total = 0u64;
        if !self.is_empty() {
            for v in self.hist.iter_quantiles(5) {
                total += v.count_since_last_iteration();
                let q = v.quantile_iterated_to();
                if q < 1.0 {
                    let _ = writeln!(
                        out,
                        "{:12.3} {:2.12} {:10} {:14.2}",
                        us(v.value_iterated_to()),
                        q,
                        total,
                        1.0 / (1.0 - q)
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "{:12.3} {:2.12} {:10}",
                        us(v.value_iterated_to()),
                        q,
                        total
                    );
                }
            }
        }
        let s = self.summary();
        // HdrHistogram's sub-bucket count: the power of two at or above
        // 2 x 10^digits.
        let sub_buckets = (2 * 10u64.pow(u32::from(SIGNIFICANT_DIGITS))).next_power_of_two();
        let _ = writeln!(
            out,
            "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
            s.mean_us.unwrap_or(0.0),
            s.stddev_us.unwrap_or(0.0)
        );
        let _ = writeln!(
            out,
            "#[Max     = {:12.3}, Total count    = {:12}]",
            s.max_us.unwrap_or(0.0),
            self.len()
        );
        let _ = writeln!(
            out,
            "#[Buckets = {:12}, SubBuckets     = {:12}]",
            self.hist.buckets(),
            sub_buckets
        );
        out
    }

    /// The summary of everything recorded so far.
    pub fn summary(&self) -> RttSummary {
        let samples = self.len();
        if samples == 0 {
            return RttSummary::default();
        }
        let us = |ns: u64| Some(ns as f64 / 1_000.0);
        // The histogram answers with its bucket's highest equivalent value,
        // which can lie above the largest sample: clamp to what was seen.
        let q = |quantile: f64| {
            us(self
                .hist
                .value_at_quantile(quantile)
                .clamp(self.min_ns, self.max_ns))
        };
        let mean_ns = self.sum_ns as f64 / samples as f64;
        let variance_ns2 = (self.sum_sq_ns as f64 / samples as f64 - mean_ns * mean_ns).max(0.0);
        RttSummary {
            samples,
            p50_us: q(0.50),
            p90_us: q(0.90),
            p95_us: q(0.95),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: us(self.max_ns),
            mean_us: Some(mean_ns / 1_000.0),
            min_us: us(self.min_ns),
            stddev_us: Some(variance_ns2.sqrt() / 1_000.0),
        }
    }
}

/// RTT recorders shared by many clients: one histogram per slot, and each
/// thread records into the slot it drew on first use. The clients of a run
/// then cost as many histograms (about 200 KiB each) as there are runtime
/// threads, not one per client, which keeps a 16-client run's peak RSS
/// small. Uncontended: each runtime thread has its own slot while there are
/// at least as many slots as threads.
#[derive(Debug)]
pub struct RttShards {
    shards: Box<[Padded]>,
}

/// One shard on its own cache lines, so two threads' locks never share one.
#[derive(Debug)]
#[repr(align(128))]
struct Padded(std::sync::Mutex<Rtt>);

static NEXT_SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    static SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl RttShards {
    /// `n` shards (at least 1); use the number of threads that record.
    pub fn new(n: usize) -> Self {
        RttShards {
            shards: (0..n.max(1))
                .map(|_| Padded(std::sync::Mutex::new(Rtt::new())))
                .collect(),
        }
    }

    /// Records one RTT into this thread's shard. Never allocates.
    #[inline]
    pub fn record(&self, rtt: Duration) {
        self.record_all(std::slice::from_ref(&rtt));
    }

    /// Records `rtts` into this thread's shard, taking its lock once.
    /// Never allocates.
    pub fn record_all(&self, rtts: &[Duration]) {
        let slot = SLOT.with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SLOT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            }
            s.get()
        });
        let shard = &self.shards[slot % self.shards.len()].0;
        let mut rtt = shard.lock().unwrap_or_else(|p| p.into_inner());
        for r in rtts {
            rtt.record(*r);
        }
    }

    /// Every shard's samples in one histogram.
    pub fn merged(&self) -> Rtt {
        let mut all = Rtt::new();
        for shard in self.shards.iter() {
            all.merge(&shard.0.lock().unwrap_or_else(|p| p.into_inner()));
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_merge_to_the_same_summary_as_one_histogram() {
        let shards = std::sync::Arc::new(RttShards::new(3));
        let mut one = Rtt::new();
        for us in 1..=3000u64 {
            one.record(Duration::from_micros(us));
        }
        let mut threads = Vec::new();
        for t in 0..3u64 {
            let shards = shards.clone();
            threads.push(std::thread::spawn(move || {
                for us in (1..=3000u64).filter(|us| us % 3 == t) {
                    shards.record(Duration::from_micros(us));
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(shards.merged().summary(), one.summary());
    }

    fn close(got: Option<f64>, want: f64) -> bool {
        let got = got.unwrap();
        (got - want).abs() <= want * 0.001 + 1e-9
    }

    #[test]
    fn empty_summary_is_all_none() {
        let s = Rtt::new().summary();
        assert_eq!(s, RttSummary::default());
        assert_eq!(s.samples, 0);
        assert!(s.p50_us.is_none() && s.max_us.is_none() && s.mean_us.is_none());
    }

    #[test]
    fn percentiles_of_one_to_ten_thousand_microseconds() {
        let mut r = Rtt::new();
        for us in 1..=10_000u64 {
            r.record(Duration::from_micros(us));
        }
        let s = r.summary();
        assert_eq!(s.samples, 10_000);
        assert!(close(s.p50_us, 5_000.0), "{s:?}");
        assert!(close(s.p90_us, 9_000.0), "{s:?}");
        assert!(close(s.p95_us, 9_500.0), "{s:?}");
        assert!(close(s.p99_us, 9_900.0), "{s:?}");
        assert!(close(s.p999_us, 9_990.0), "{s:?}");
        assert_eq!(s.max_us, Some(10_000.0));
        assert!(close(s.mean_us, 5_000.5), "{s:?}");
    }

    #[test]
    fn nearest_rank_on_a_small_set() {
        let mut r = Rtt::new();
        for ns in [100u64, 200, 300, 400] {
            r.record(Duration::from_nanos(ns));
        }
        let s = r.summary();
        // ceil(0.5 * 4) = 2nd value; ceil(0.9 * 4) = 4th value.
        assert_eq!(s.p50_us, Some(0.2));
        assert_eq!(s.p90_us, Some(0.4));
        assert_eq!(s.max_us, Some(0.4));
        assert_eq!(s.mean_us, Some(0.25));
    }

    /// A bucket's upper edge is not a sample: at 3 significant digits,
    /// 349.32 ms lies in a bucket whose highest equivalent value is above
    /// it, and the percentiles used to report that edge (issue 24:
    /// `p99.9 349.44 ms (max 349.32 ms)`).
    #[test]
    fn no_percentile_above_the_maximum_or_below_the_minimum() {
        let mut r = Rtt::new();
        let top = Duration::from_nanos(349_320_001);
        for _ in 0..990 {
            r.record(Duration::from_micros(1_000));
        }
        for _ in 0..10 {
            r.record(top);
        }
        // The histogram's own answer is the bucket edge, above the max.
        assert!(r.hist.value_at_quantile(0.999) > 349_320_001);
        let s = r.summary();
        assert_eq!(s.max_us, Some(349_320.001));
        assert_eq!(s.min_us, Some(1_000.0));
        for p in [s.p50_us, s.p90_us, s.p95_us, s.p99_us, s.p999_us] {
            let p = p.unwrap();
            assert!(p <= s.max_us.unwrap() && p >= s.min_us.unwrap(), "{s:?}");
        }
        assert_eq!(s.p999_us, s.max_us);
        // One sample: every percentile is that sample, exactly.
        let mut one = Rtt::new();
        one.record(top);
        let s = one.summary();
        assert_eq!(s.p50_us, Some(349_320.001));
        assert_eq!(s.p999_us, Some(349_320.001));
        assert_eq!(s.stddev_us, Some(0.0));
    }

    #[test]
    fn the_percentile_distribution_is_hdrhistograms_format() {
        let mut r = Rtt::new();
        for us in 1..=1000u64 {
            r.record(Duration::from_micros(us));
        }
        let text = r.percentile_distribution();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("       Value     Percentile TotalCount 1/(1-Percentile)")
        );
        assert_eq!(lines.next(), Some(""));
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(rows.len() > 20, "{text}");
        assert_eq!(rows[0], ["1.000", "0.000000000000", "1", "1.00"]);
        let last = rows.last().unwrap();
        assert_eq!(last, &["1000.000", "1.000000000000", "1000"], "{text}");
        // Percentiles and counts only grow; no value above the maximum.
        for w in rows.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(a[1].parse::<f64>().unwrap() <= b[1].parse::<f64>().unwrap());
            assert!(a[2].parse::<u64>().unwrap() <= b[2].parse::<u64>().unwrap());
            assert!(b[0].parse::<f64>().unwrap() <= 1000.0);
        }
        assert!(
            text.contains("#[Mean    =      500.500, StdDeviation   =      288.675]"),
            "{text}"
        );
        assert!(
            text.contains("#[Max     =     1000.000, Total count    =         1000]"),
            "{text}"
        );
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
        // Empty: the header and the footer, no rows.
        let empty = Rtt::new().percentile_distribution();
        assert_eq!(
            empty.lines().filter(|l| !l.is_empty()).count(),
            4,
            "{empty}"
        );
    }

    #[test]
    fn min_and_standard_deviation_are_exact() {
        let mut r = Rtt::new();
        for us in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            r.record(Duration::from_micros(us));
        }
        let s = r.summary();
        assert_eq!(s.min_us, Some(2.0));
        assert_eq!(s.mean_us, Some(5.0));
        assert!((s.stddev_us.unwrap() - 2.0).abs() < 1e-9, "{s:?}");
        let mut b = Rtt::new();
        b.record(Duration::from_micros(1));
        r.merge(&b);
        assert_eq!(r.summary().min_us, Some(1.0));
        r.reset();
        assert_eq!(r.summary().min_us, None);
    }

    #[test]
    fn single_sample_and_clamping() {
        let mut r = Rtt::new();
        r.record(Duration::from_secs(3600));
        let s = r.summary();
        assert_eq!(s.samples, 1);
        assert_eq!(s.max_us, Some(60_000_000.0));
        assert!(close(s.p50_us, 60_000_000.0));
        let mut z = Rtt::new();
        z.record(Duration::ZERO);
        assert_eq!(z.summary().p99_us, Some(0.0));
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut a = Rtt::new();
        let mut b = Rtt::new();
        let mut all = Rtt::new();
        for i in 0..5_000u64 {
            let d = Duration::from_nanos(1_000 + i * 37);
            if i % 3 == 0 {
                a.record(d)
            } else {
                b.record(d)
            }
            all.record(d);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
        a.merge(&Rtt::new());
        assert_eq!(a.summary(), all.summary());
        a.reset();
        assert!(a.is_empty());
    }
}
