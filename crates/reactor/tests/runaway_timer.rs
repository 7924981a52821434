//! A periodic timer with a 1 ns period (a typo away from a real tick) must
//! not eat the process: catch-up is bounded per turn, the period has a
//! floor, and stop still returns. Alone in its binary, because it reads the
//! process's resident memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Lane, LaneCtx, Runtime, TimerId};

const LIMIT: Duration = Duration::from_secs(10);
/// Fires each timer must make before the test stops the runtime.
const FIRES: u64 = 200_000;

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    keel_testkit::rss_bytes() / 1024
}

/// Counts fires; sends once on `done` when `FIRES` is reached.
struct Counter {
    fires: Arc<AtomicU64>,
    done: mpsc::Sender<&'static str>,
    name: &'static str,
}

impl Counter {
    fn fire(&self) {
        if self.fires.fetch_add(1, Ordering::Relaxed) + 1 == FIRES {
            let _ = self.done.send(self.name);
        }
    }
}

impl Lane for Counter {
    fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, _timer: TimerId) {
        self.fire();
    }
}

#[test]
fn one_nanosecond_periodic_timers_stay_bounded_and_stop_returns() {
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let handle = rt.handle().clone();
    let before = rss_kib();
    let (done_tx, done_rx) = mpsc::channel();
    let period = Some(Duration::from_nanos(1));

    // A lane timer and a closure timer, both due every nanosecond.
    let lane_fires = Arc::new(AtomicU64::new(0));
    let lane = rt.add_lane(Counter {
        fires: lane_fires.clone(),
        done: done_tx.clone(),
        name: "lane timer",
    });
    lane.timer(Instant::now(), period).unwrap();
    let closure_fires = Arc::new(AtomicU64::new(0));
    let counter = Counter {
        fires: closure_fires.clone(),
        done: done_tx,
        name: "closure timer",
    };
    handle.timer(Instant::now(), period, move || counter.fire());

    for _ in 0..2 {
        done_rx
            .recv_timeout(LIMIT)
            .expect("both timers reach FIRES fires");
    }
    let (stop_tx, stop_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = stop_tx.send(rt.stop());
    });
    stop_rx
        .recv_timeout(LIMIT)
        .expect("Runtime::stop returned while 1 ns timers ran")
        .unwrap();
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    eprintln!(
        "lane fires {}, closure fires {}, skipped ticks {}, RSS +{grown_mib} MiB",
        lane_fires.load(Ordering::Relaxed),
        closure_fires.load(Ordering::Relaxed),
        handle.skipped_ticks()
    );
    assert!(grown_mib < 64, "RSS grew by {grown_mib} MiB");
}
