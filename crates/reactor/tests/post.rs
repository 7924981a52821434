//! Posting from many threads: every closure runs exactly once, on the
//! reactor it was posted to, serialized with that reactor's (or lane's)
//! other closures.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::Progress;
use keel_reactor::{Handle, IoModel, Lane, LaneHandle, Runtime};

const LIMIT: Duration = Duration::from_secs(30);
const THREADS: u64 = 8;
/// Closures each thread posts to reactors, and as many again to lanes.
const PER_THREAD: u64 = 5_000;
const TOTAL: u64 = THREADS * PER_THREAD;

/// One bit per closure id; setting a bit twice is a duplicate run.
struct Bitmap(Vec<AtomicU64>);

impl Bitmap {
    fn new(bits: u64) -> Bitmap {
        Bitmap((0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Sets bit `id`; returns whether it was already set.
    fn set(&self, id: u64) -> bool {
        let mask = 1 << (id % 64);
        self.0[(id / 64) as usize].fetch_or(mask, Ordering::SeqCst) & mask != 0
    }

    fn count(&self) -> u64 {
        self.0
            .iter()
            .map(|w| u64::from(w.load(Ordering::SeqCst).count_ones()))
            .sum()
    }
}

/// Which thread a closure posted to context `ctx` must run on.
#[derive(Clone, Copy)]
enum Expect {
    /// `keel-shard-{ctx}`.
    Shard,
    /// Any `keel-shared-*` thread.
    Shared,
}

impl Expect {
    fn holds(self, ctx: usize) -> bool {
        let current = std::thread::current();
        let name = current.name().unwrap_or("");
        match self {
            Expect::Shard => name == format!("keel-shard-{ctx}"),
            Expect::Shared => name.starts_with("keel-shared-"),
        }
    }
}

/// A lane recording the ids of the closures posted to it.
struct Recorder {
    ids: Vec<u64>,
}

impl Lane for Recorder {}

/// What the closures report, checked at the end.
#[derive(Default)]
struct Tally {
    wrong_thread: AtomicU64,
    duplicates: AtomicU64,
    overlaps: AtomicU64,
    progress: Progress,
}

fn post_from_8_threads(model: IoModel, expect: Expect) {
    let rt = Runtime::new(model).unwrap();
    let n = rt.reactors();
    let reactors: Vec<Handle> = (0..n).map(|i| rt.reactor(i).unwrap().clone()).collect();
    // Four lanes, spread over the reactors (one per reactor when sharded).
    let lanes: Vec<(usize, LaneHandle<Recorder>)> = (0..4)
        .map(|i| {
            let ctx = i % n;
            let lane = rt
                .reactor(ctx)
                .unwrap()
                .add_lane(Recorder { ids: Vec::new() });
            (ctx, lane)
        })
        .collect();
    let tally = Arc::new(Tally::default());
    let bitmap = Arc::new(Bitmap::new(TOTAL));
    // One "inside" flag per reactor: its posted closures are serialized.
    let inside: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| false.into()).collect());

    let posters: Vec<_> = (0..THREADS)
        .map(|t| {
            let reactors = reactors.clone();
            let lanes = lanes.clone();
            let (tally, bitmap, inside) = (tally.clone(), bitmap.clone(), inside.clone());
            std::thread::spawn(move || {
                for k in 0..PER_THREAD {
                    let id = t * PER_THREAD + k;
                    // To a reactor.
                    let ctx = (id as usize) % reactors.len();
                    let (tl, bm, ins) = (tally.clone(), bitmap.clone(), inside.clone());
                    assert!(reactors[ctx]
                        .post(move || {
                            if ins[ctx].swap(true, Ordering::SeqCst) {
                                tl.overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            if !expect.holds(ctx) {
                                tl.wrong_thread.fetch_add(1, Ordering::SeqCst);
                            }
                            if bm.set(id) {
                                tl.duplicates.fetch_add(1, Ordering::SeqCst);
                            }
                            ins[ctx].store(false, Ordering::SeqCst);
                            tl.progress.add(1);
                        })
                        .is_ok());
                    // To a lane.
                    let (ctx, lane) = &lanes[(id as usize + t as usize) % lanes.len()];
                    let ctx = *ctx;
                    let tl = tally.clone();
                    assert!(lane
                        .post(move |st, _| {
                            if !expect.holds(ctx) {
                                tl.wrong_thread.fetch_add(1, Ordering::SeqCst);
                            }
                            st.ids.push(id);
                            tl.progress.add(1);
                        })
                        .is_ok());
                }
            })
        })
        .collect();
    for p in posters {
        p.join().unwrap();
    }
    tally
        .progress
        .wait_for(LIMIT, "every posted closure", |n| n >= 2 * TOTAL);

    let mut lane_ids = Vec::new();
    for (_, lane) in &lanes {
        let (tx, rx) = mpsc::channel();
        let _ = lane.post(move |st, _| tx.send(std::mem::take(&mut st.ids)).unwrap());
        lane_ids.extend(rx.recv_timeout(LIMIT).expect("lane runs posts"));
    }
    rt.stop().unwrap();

    assert_eq!(
        tally.wrong_thread.load(Ordering::SeqCst),
        0,
        "closures ran on a thread that does not drive their reactor"
    );
    assert_eq!(
        tally.overlaps.load(Ordering::SeqCst),
        0,
        "two closures posted to one reactor ran at once"
    );
    assert_eq!(
        tally.duplicates.load(Ordering::SeqCst),
        0,
        "a reactor closure ran twice"
    );
    assert_eq!(bitmap.count(), TOTAL, "every reactor closure ran");
    assert_eq!(lane_ids.len() as u64, TOTAL, "lane closures run, in all");
    lane_ids.sort_unstable();
    lane_ids.dedup();
    assert_eq!(lane_ids.len() as u64, TOTAL, "each lane closure ran once");
    assert_eq!(
        tally.progress.get(),
        2 * TOTAL,
        "no closure ran after the count"
    );
}

#[test]
fn post_from_8_threads_sharded_4() {
    post_from_8_threads(IoModel::Sharded { reactors: 4 }, Expect::Shard);
}

#[test]
fn post_from_8_threads_shared_4() {
    post_from_8_threads(IoModel::Shared { threads: 4 }, Expect::Shared);
}
