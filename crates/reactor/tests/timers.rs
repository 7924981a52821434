//! Timers: deadline order, cancellation, lane timers, no spinning on
//! sub-millisecond deadlines, drift-free periodic fires, and posts that
//! wake a reactor sleeping in poll.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{wait_until_in_poll, Progress, Watchdog};
use keel_reactor::{
    Handle, IoModel, Lane, LaneCtx, LaneHandle, MissedTicks, Reactor, Runtime, TimerError, TimerId,
    MAX_CATCH_UP,
};

const LIMIT: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A watchdog that stops `handle`'s reactor if the test is still turning
/// after `LIMIT`: `turn(None)` then returns, and the loop asserts.
fn watchdog(handle: &Handle) -> Watchdog {
    let h = handle.clone();
    Watchdog::new(LIMIT, move || h.stop())
}

/// Turns `reactor` with no timeout until `done()`; returns the number of
/// `turn` calls. Panics if the watchdog had to stop the reactor.
fn turn_until(reactor: &mut Reactor, what: &str, done: impl Fn() -> bool) -> u64 {
    let handle = reactor.handle();
    let _dog = watchdog(&handle);
    let mut turns = 0;
    while !done() {
        assert!(
            !handle.is_stopped(),
            "timed out after {LIMIT:?} and {turns} turns waiting for {what}"
        );
        reactor.turn(None).unwrap();
        turns += 1;
    }
    turns
}

#[test]
fn closure_timers_fire_in_deadline_order_and_cancelled_never_fires() {
    let mut reactor = Reactor::new().unwrap();
    let h = reactor.handle();
    let log = Arc::new(Mutex::new(Vec::new()));
    let record = |name: &'static str| {
        let log = log.clone();
        move || log.lock().unwrap().push(name)
    };
    let t0 = Instant::now();
    // Scheduled out of order; each is a different turn's deadline.
    h.timer(t0 + ms(40), None, record("40"));
    h.timer(t0 + ms(10), None, record("10"));
    let cancelled = h.timer(t0 + ms(15), None, record("15-cancelled"));
    h.timer(t0 + ms(30), None, record("30"));
    let cancelled_periodic = h.timer(t0 + ms(5), Some(ms(5)), record("5-periodic-cancelled"));
    h.timer(t0 + ms(20), None, record("20"));
    // Fires last, well past both cancelled deadlines.
    h.timer(t0 + ms(60), None, record("60"));
    assert!(h.cancel_timer(cancelled), "was scheduled");
    assert!(h.cancel_timer(cancelled_periodic), "was scheduled");
    turn_until(&mut reactor, "the 60 ms timer", || {
        log.lock().unwrap().contains(&"60")
    });
    assert!(t0.elapsed() >= ms(60), "a timer fired before its deadline");
    assert_eq!(
        *log.lock().unwrap(),
        ["10", "20", "30", "40", "60"],
        "out of deadline order, or a cancelled timer fired"
    );
    assert!(!h.cancel_timer(cancelled), "second cancel is a no-op");

    // Already due at distinct instants: all fire in one turn, oldest first.
    log.lock().unwrap().clear();
    let now = Instant::now();
    h.timer(now - ms(2), None, record("b"));
    h.timer(now - ms(3), None, record("a"));
    h.timer(now, None, record("d"));
    h.timer(now - ms(1), None, record("c"));
    reactor.turn(Some(LIMIT)).unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["a", "b", "c", "d"],
        "timers due in one turn fired out of deadline order"
    );
}

/// A lane logging its timer calls where the test thread can read them;
/// `cancel_on` maps a timer to the timer its `on_timer` cancels through
/// `LaneCtx::cancel_timer`.
#[derive(Default)]
struct Timed {
    log: Arc<Mutex<Vec<TimerId>>>,
    cancel_on: Option<(TimerId, TimerId)>,
    cancelled: Arc<Mutex<Vec<(TimerId, bool)>>>,
}

impl Lane for Timed {
    fn on_timer(&mut self, cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
        self.log.lock().unwrap().push(timer);
        if let Some((when, victim)) = self.cancel_on {
            if when == timer {
                let was = cx.cancel_timer(victim);
                self.cancelled.lock().unwrap().push((victim, was));
            }
        }
    }
}

/// A reactor with one `Timed` lane; returns its log and cancellations.
#[allow(clippy::type_complexity)]
fn timed_lane() -> (
    Reactor,
    LaneHandle<Timed>,
    Arc<Mutex<Vec<TimerId>>>,
    Arc<Mutex<Vec<(TimerId, bool)>>>,
) {
    let reactor = Reactor::new().unwrap();
    let st = Timed::default();
    let (log, cancelled) = (st.log.clone(), st.cancelled.clone());
    let lane = reactor.handle().add_lane(st);
    (reactor, lane, log, cancelled)
}

#[test]
fn lane_timer_from_handle_and_from_cx_fire_on_timer() {
    let (mut reactor, lane, log, _) = timed_lane();
    let t0 = Instant::now();
    let outside = lane.timer(t0 + ms(2), None).unwrap();
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| tx.send(cx.timer(t0 + ms(1), None)).unwrap());
    turn_until(&mut reactor, "both lane timers", || {
        log.lock().unwrap().len() >= 2
    });
    let inside = rx.try_recv().expect("the post ran");
    assert!(t0.elapsed() >= ms(2), "a lane timer fired early");
    assert_eq!(*log.lock().unwrap(), [inside, outside]);
}

#[test]
fn cancel_from_on_timer_is_final() {
    // `first` and the periodic `victim` are due at the same instant and
    // fire in the same turn, first before victim (FIFO). first's on_timer
    // cancels victim: victim's fire, already delivered to the lane in that
    // turn, must not be handled, nor any later one.
    let (mut reactor, lane, log, cancelled) = timed_lane();
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |st, cx| {
        let due = Instant::now();
        let first = cx.timer(due, None);
        let victim = cx.timer(due, Some(ms(1)));
        st.cancel_on = Some((first, victim));
        tx.send((first, victim)).unwrap();
    });
    reactor.turn(Some(LIMIT)).unwrap();
    let (first, victim) = rx.try_recv().expect("the post ran");
    // Turn past many of victim's periods: until a sentinel 20 ms out fires.
    let sentinel = lane.timer(Instant::now() + ms(20), None).unwrap();
    turn_until(&mut reactor, "the sentinel timer", || {
        log.lock().unwrap().contains(&sentinel)
    });
    assert_eq!(*cancelled.lock().unwrap(), [(victim, true)]);
    assert_eq!(
        *log.lock().unwrap(),
        [first, sentinel],
        "a timer cancelled with LaneCtx::cancel_timer was handled after all"
    );
}

#[test]
fn cancel_from_post_drops_a_fire_delivered_in_the_same_turn() {
    // The periodic timer is already due, and the cancelling post is queued:
    // one turn delivers the fire and runs the lane, posts first. The fire
    // must be dropped, and no later one comes.
    let (mut reactor, lane, log, cancelled) = timed_lane();
    let due = lane.timer(Instant::now() - ms(1), Some(ms(1))).unwrap();
    let c = cancelled.clone();
    let _ = lane.post(move |_, cx| c.lock().unwrap().push((due, cx.cancel_timer(due))));
    reactor.turn(Some(LIMIT)).unwrap();
    let sentinel = lane.timer(Instant::now() + ms(10), None).unwrap();
    turn_until(&mut reactor, "the sentinel timer", || {
        log.lock().unwrap().contains(&sentinel)
    });
    assert_eq!(*cancelled.lock().unwrap(), [(due, true)]);
    assert_eq!(
        *log.lock().unwrap(),
        [sentinel],
        "a fire delivered with the cancelling post was handled"
    );
}

#[test]
fn sub_millisecond_one_shot_does_not_spin() {
    let mut reactor = Reactor::new().unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let f = fired.clone();
    let t0 = Instant::now();
    reactor
        .handle()
        .timer(t0 + Duration::from_micros(500), None, move || {
            f.store(true, Ordering::SeqCst)
        });
    let turns = turn_until(&mut reactor, "the 0.5 ms timer", || {
        fired.load(Ordering::SeqCst)
    });
    assert!(t0.elapsed() >= Duration::from_micros(500), "fired early");
    // One turn installs the closure, one waits 1 ms (0.5 ms rounded up)
    // and fires. A timeout rounded down to 0 would take hundreds of turns.
    assert!(
        turns <= 3,
        "{turns} turns for one 0.5 ms timer: the loop spun"
    );
}

#[test]
fn sub_millisecond_periodic_is_bounded_and_drift_free() {
    const PERIOD: Duration = Duration::from_micros(500);
    let mut reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let _dog = watchdog(&handle);
    let fires = Arc::new(AtomicU64::new(0));
    let f = fires.clone();
    let t0 = Instant::now();
    handle.timer(t0 + PERIOD, Some(PERIOD), move || {
        f.fetch_add(1, Ordering::SeqCst);
    });
    let mut turns = 0u64;
    let mut last_turn_start = t0;
    loop {
        let start = Instant::now();
        if start - t0 >= ms(50) {
            break;
        }
        assert!(!handle.is_stopped(), "watchdog fired after {turns} turns");
        last_turn_start = start;
        reactor.turn(None).unwrap();
        turns += 1;
    }
    let fires = fires.load(Ordering::SeqCst);
    let periods = |d: Duration| (d.as_nanos() / PERIOD.as_nanos()) as u64;
    // Every wait is at least 1 ms (0.5 ms rounded up), so ~50 turns in
    // 50 ms; a loop polling with a zero timeout would make thousands.
    assert!(turns <= 80, "{turns} turns in ~50 ms: the idle loop spun");
    // The last turn fired every deadline up to its start, each missed
    // period once (drift-free catch-up: ~2 fires per 1 ms wait). A
    // schedule that drifted (next = now + period) makes ~1 per wait.
    let due = periods(last_turn_start - t0);
    assert!(
        fires + 2 >= due,
        "{fires} fires for {due} periods elapsed: missed periods were dropped or the schedule drifted"
    );
    assert!(
        fires <= periods(t0.elapsed()),
        "{fires} fires: more than periods elapsed"
    );
}

/// A lane recording when its timer fires.
struct Stamps {
    at: Vec<Instant>,
    progress: Arc<Progress>,
}

impl Lane for Stamps {
    fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, _timer: TimerId) {
        self.at.push(Instant::now());
        self.progress.add(1);
    }
}

/// Fires `at` (instants taken by the reactor thread in the timer callback)
/// of a timer due at `t0 + k * period`, k = 1, 2, ...: none early, and as
/// many as periods elapsed up to the last one, within one.
fn check_periodic(what: &str, t0: Instant, period: Duration, at: &[Instant]) {
    let n = at.len() as u64;
    for (k, t) in at.iter().enumerate() {
        assert!(
            *t >= t0 + period * (k as u32 + 1),
            "{what}: fire {} came before its deadline",
            k + 1
        );
    }
    let elapsed = *at.last().expect("fired") - t0;
    let expected = (elapsed.as_nanos() / period.as_nanos()) as u64;
    assert!(
        n.abs_diff(expected) <= 1,
        "{what}: {n} fires in {elapsed:?} of {period:?} periods (expected {expected} +- 1)"
    );
}

#[test]
fn periodic_100hz_on_runtime_keeps_its_rate() {
    const PERIOD: Duration = Duration::from_millis(10);
    const FIRES: u64 = 30; // ~300 ms

    // A lane timer on a shared runtime, scheduled by LaneHandle::timer from
    // this thread while the runtime sleeps in poll with no timers: only the
    // timer's own wake can make it fire.
    let shared = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let lane_progress = Arc::new(Progress::default());
    let lane = shared.add_lane(Stamps {
        at: Vec::new(),
        progress: lane_progress.clone(),
    });
    wait_until_in_poll("keel-shared-", LIMIT);
    let lane_t0 = Instant::now();
    let lane_timer = lane.timer(lane_t0 + PERIOD, Some(PERIOD)).unwrap();

    // A closure timer (Handle::timer) on a sharded runtime's second reactor.
    let sharded = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let reactor = sharded.reactor(1).unwrap().clone();
    let at = Arc::new(Mutex::new(Vec::new()));
    let closure_progress = Arc::new(Progress::default());
    let (a, p) = (at.clone(), closure_progress.clone());
    let closure_t0 = Instant::now();
    let closure_timer = reactor.timer(closure_t0 + PERIOD, Some(PERIOD), move || {
        a.lock().unwrap().push(Instant::now());
        p.add(1);
    });

    lane_progress.wait_for(LIMIT, "30 lane timer fires", |n| n >= FIRES);
    closure_progress.wait_for(LIMIT, "30 closure timer fires", |n| n >= FIRES);

    // Stop both, then read what the reactors recorded, serialized after
    // any fire already under way.
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |st, cx| {
        cx.cancel_timer(lane_timer);
        tx.send(st.at.clone()).unwrap();
    });
    let lane_at = rx.recv_timeout(LIMIT).expect("lane runs posts");
    reactor.cancel_timer(closure_timer);
    let (tx, rx) = mpsc::channel();
    let _ = reactor.post(move || tx.send(()).unwrap());
    rx.recv_timeout(LIMIT).expect("reactor runs posts");
    let closure_at = at.lock().unwrap().clone();
    shared.stop().unwrap();
    sharded.stop().unwrap();

    check_periodic("lane timer", lane_t0, PERIOD, &lane_at);
    check_periodic("closure timer", closure_t0, PERIOD, &closure_at);
}

#[test]
fn post_wakes_a_reactor_sleeping_in_run() {
    const NAME: &str = "keel-t-runpost";
    let (htx, hrx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(NAME.into())
        .spawn(move || {
            let mut reactor = Reactor::new().unwrap();
            htx.send(reactor.handle()).unwrap();
            done_tx.send(reactor.run()).unwrap();
        })
        .unwrap();
    let handle = hrx.recv_timeout(LIMIT).unwrap();
    for round in 0..3 {
        // No timers: the reactor sleeps in poll with no timeout.
        wait_until_in_poll(NAME, LIMIT);
        let (tx, rx) = mpsc::channel();
        assert!(handle.post(move || tx.send(round).unwrap()).is_ok());
        assert_eq!(
            rx.recv_timeout(LIMIT)
                .expect("the post did not wake the reactor"),
            round
        );
    }
    handle.stop();
    done_rx
        .recv_timeout(LIMIT)
        .expect("run() did not return after stop")
        .unwrap();
    thread.join().unwrap();
}

#[test]
fn idle_turn_waits_its_timeout() {
    let mut reactor = Reactor::new().unwrap();
    let t = Instant::now();
    assert_eq!(reactor.turn(Some(ms(50))).unwrap(), 0);
    assert!(
        t.elapsed() >= ms(45),
        "an idle turn returned after {:?}",
        t.elapsed()
    );

    // After a post has run (the waker fired), the next idle turn waits too.
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let _ = reactor
        .handle()
        .post(move || r.store(true, Ordering::SeqCst));
    assert!(reactor.turn(Some(LIMIT)).unwrap() >= 1);
    assert!(ran.load(Ordering::SeqCst));
    let t = Instant::now();
    assert_eq!(reactor.turn(Some(ms(50))).unwrap(), 0);
    assert!(
        t.elapsed() >= ms(45),
        "an idle turn after a post returned after {:?}",
        t.elapsed()
    );
}

/// A closure timer that cancels another closure timer due in the same turn
/// (both already due): the cancelled one never runs, although its fire was
/// delivered to the reactor lane together with the first.
#[test]
fn closure_timer_cancelled_by_a_timer_of_the_same_turn_never_runs() {
    let mut reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let log = Arc::new(Mutex::new(Vec::new()));
    let now = Instant::now();
    let victim_id = Arc::new(Mutex::new(None::<TimerId>));
    let (h, l, v) = (handle.clone(), log.clone(), victim_id.clone());
    handle.timer(now, None, move || {
        let id = v.lock().unwrap().expect("victim scheduled");
        // The victim already left the timer queue (its fire is delivered),
        // so this may return false; what matters is that it never runs.
        h.cancel_timer(id);
        l.lock().unwrap().push("first".to_string());
    });
    let l = log.clone();
    let id = handle.timer(now + Duration::from_micros(1), None, move || {
        l.lock().unwrap().push("victim".to_string());
    });
    *victim_id.lock().unwrap() = Some(id);
    // Both are due once this sleep is over, so one poll delivers both.
    std::thread::sleep(ms(2));
    let l = log.clone();
    turn_until(&mut reactor, "the first timer", move || {
        !l.lock().unwrap().is_empty()
    });
    // More turns: nothing else may run.
    for _ in 0..3 {
        reactor.turn(Some(ms(5))).unwrap();
    }
    assert_eq!(*log.lock().unwrap(), vec!["first".to_string()]);
}

/// Counts its timer fires, per timer.
#[derive(Default)]
struct Tally {
    fires: Vec<TimerId>,
}

impl Lane for Tally {
    fn on_timer(&mut self, _cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
        self.fires.push(timer);
    }
}

/// Each policy, through each way of making a timer, on timers already
/// many periods late: one turn fires Burst's capped catch-up and one tick
/// of Skip and Delay, and counts the rest as skipped.
#[test]
fn missed_tick_policies_through_the_handles() {
    const PERIOD: Duration = Duration::from_millis(1);
    let mut reactor = Reactor::new().unwrap();
    let handle = reactor.handle();
    let t0 = Instant::now();
    let ago = |n: u32| t0.checked_sub(PERIOD * n).expect("uptime of a second");
    let burst = Arc::new(AtomicU64::new(0));
    let b = burst.clone();
    handle.timer(ago(1000), Some(PERIOD), move || {
        b.fetch_add(1, Ordering::SeqCst);
    });
    let skip = Arc::new(AtomicU64::new(0));
    let s = skip.clone();
    handle.timer_with(ago(100), Some(PERIOD), MissedTicks::Skip, move || {
        s.fetch_add(1, Ordering::SeqCst);
    });
    let (lane, delay) = reactor.handle().add_lane_with(Tally::default(), |_, cx| {
        cx.timer_with(ago(100), Some(PERIOD), MissedTicks::Delay)
    });
    let lane_skip = lane
        .timer_with(ago(100), Some(PERIOD), MissedTicks::Skip)
        .unwrap();
    reactor.turn(Some(LIMIT)).unwrap();
    assert_eq!(burst.load(Ordering::SeqCst), u64::from(MAX_CATCH_UP));
    assert_eq!(skip.load(Ordering::SeqCst), 1);
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |st, _| tx.send(std::mem::take(&mut st.fires)).unwrap());
    reactor.turn(Some(LIMIT)).unwrap();
    let late = t0.elapsed();
    let mut fires = rx.try_recv().expect("the post ran");
    fires.sort_by_key(|id| *id == lane_skip);
    assert_eq!(fires, [delay, lane_skip], "Skip and Delay fire once");
    // At most: the ticks due by the end of the second turn, minus those
    // fired.
    let due = |n: u64| n + 1 + (late.as_nanos() / PERIOD.as_nanos()) as u64;
    let skipped = handle.skipped_ticks();
    let least = (1000 + 1 - u64::from(MAX_CATCH_UP)) + 3 * 100;
    let most = due(1000) - u64::from(MAX_CATCH_UP) + 3 * (due(100) - 1);
    assert!(
        (least..=most).contains(&skipped),
        "{skipped} skipped ticks, expected {least}..={most}"
    );
}

/// Turns until `done()`, recording the instant each new fire was logged.
fn stamp_fires(
    reactor: &mut Reactor,
    log: &Arc<Mutex<Vec<TimerId>>>,
    what: &str,
    done: impl Fn(&[TimerId]) -> bool,
) -> Vec<(TimerId, Instant)> {
    let handle = reactor.handle();
    let _dog = watchdog(&handle);
    let mut stamps = Vec::new();
    loop {
        let seen = log.lock().unwrap().clone();
        let now = Instant::now();
        stamps.extend(seen[stamps.len()..].iter().map(|&id| (id, now)));
        if done(&seen) {
            return stamps;
        }
        assert!(!handle.is_stopped(), "timed out waiting for {what}");
        reactor.turn(None).unwrap();
    }
}

#[test]
fn a_moved_lane_timer_fires_once_at_its_new_deadline_not_its_old_one() {
    let (mut reactor, lane, log, _) = timed_lane();
    let t0 = Instant::now();
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| {
        // `later` moves from 10 ms to 60 ms; `earlier` from 5 s to 30 ms,
        // and its move goes through an unarmed reusable timer too.
        let later = cx.timer(t0 + ms(10), None);
        cx.set_timer(later, t0 + ms(60)).unwrap();
        let earlier = cx.reusable_timer();
        cx.set_timer(earlier, t0 + Duration::from_secs(5)).unwrap();
        cx.set_timer(earlier, t0 + ms(30)).unwrap();
        // One timer due just after `later`'s old deadline (to see it
        // pass) and a sentinel after both new deadlines.
        let past_old = cx.timer(t0 + ms(20), None);
        let sentinel = cx.timer(t0 + ms(90), None);
        tx.send((later, earlier, past_old, sentinel)).unwrap();
    });
    reactor.turn(Some(LIMIT)).unwrap();
    let (later, earlier, past_old, sentinel) = rx.try_recv().expect("the post ran");
    let stamps = stamp_fires(&mut reactor, &log, "the sentinel", |seen| {
        seen.contains(&sentinel)
    });
    let order: Vec<_> = stamps.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        order,
        [past_old, earlier, later, sentinel],
        "a moved timer fired at its old deadline, twice, or out of order"
    );
    for (id, at) in [(earlier, ms(30)), (later, ms(60))] {
        let (_, seen) = stamps.iter().find(|(i, _)| *i == id).unwrap();
        assert!(*seen >= t0 + at, "{id:?} fired before its new deadline");
    }
    // The reusable timer is still registered (unarmed); the rest are done.
    assert_eq!(reactor.handle().timer_count(), 1);
}

#[test]
fn a_lane_timer_moved_100_000_times_is_one_timer_and_fires_once() {
    let (mut reactor, lane, log, _) = timed_lane();
    let handle = reactor.handle();
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| {
        let t0 = Instant::now();
        let id = cx.reusable_timer();
        let mut most = 0;
        for i in 0..100_000u64 {
            // Back and forth between far away and soon.
            let at = if i % 2 == 0 {
                ms(60_000 + i)
            } else {
                ms(i % 7)
            };
            cx.set_timer(id, t0 + at).unwrap();
            most = most.max(handle.timer_count());
        }
        tx.send((id, most)).unwrap();
    });
    reactor.turn(Some(LIMIT)).unwrap();
    let (id, most) = rx.try_recv().expect("the post ran");
    assert_eq!(most, 1, "moving one timer added timers");
    // The last move (i = 99,999) was to 99,999 % 7 = 3 ms.
    let sentinel = lane.timer(Instant::now() + ms(20), None).unwrap();
    stamp_fires(&mut reactor, &log, "the sentinel", |seen| {
        seen.contains(&sentinel)
    });
    assert_eq!(*log.lock().unwrap(), [id, sentinel]);
    assert_eq!(
        reactor.handle().timer_count(),
        1,
        "the reusable timer stays"
    );
}

#[test]
fn a_move_drops_a_fire_delivered_in_the_same_turn_and_unset_disarms() {
    // As `cancel_from_post_drops_a_fire_delivered_in_the_same_turn`: the
    // timer is due and the moving post is queued; the lane runs posts
    // first, so the fire already delivered is for the old deadline.
    let (mut reactor, lane, log, _) = timed_lane();
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| {
        let id = cx.reusable_timer();
        cx.set_timer(id, Instant::now()).unwrap();
        tx.send(id).unwrap();
    });
    reactor.turn(Some(LIMIT)).unwrap();
    let id = rx.try_recv().expect("the post ran");
    // The timer was due at once: one more turn would deliver its fire.
    let moved = Arc::new(Mutex::new(None));
    let m = moved.clone();
    let _ = lane.post(move |_, cx| {
        let at = Instant::now() + ms(30);
        *m.lock().unwrap() = Some((cx.set_timer(id, at), at));
    });
    reactor.turn(Some(LIMIT)).unwrap();
    let (result, at) = moved.lock().unwrap().take().expect("the move ran");
    result.unwrap();
    let stamps = stamp_fires(&mut reactor, &log, "the moved timer", |seen| {
        !seen.is_empty()
    });
    assert_eq!(stamps.len(), 1);
    assert!(
        stamps[0].1 >= at,
        "the fire of the old deadline was handled"
    );
    // Armed again, then disarmed: it does not fire.
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| {
        cx.set_timer(id, Instant::now() + ms(5)).unwrap();
        tx.send((cx.unset_timer(id), cx.unset_timer(id))).unwrap();
    });
    let sentinel = lane.timer(Instant::now() + ms(20), None).unwrap();
    stamp_fires(&mut reactor, &log, "the sentinel", |seen| {
        seen.contains(&sentinel)
    });
    assert_eq!(rx.try_recv().unwrap(), (Ok(true), Ok(false)));
    assert_eq!(
        *log.lock().unwrap(),
        [id, sentinel],
        "a disarmed timer fired"
    );
}

#[test]
fn a_lane_cannot_move_a_timer_it_does_not_own_or_that_is_gone() {
    let (mut reactor, lane, _, _) = timed_lane();
    let other = reactor.handle().add_lane(Timed::default());
    let theirs = other.timer(Instant::now() + ms(50), None).unwrap();
    let closure = reactor.handle().timer(Instant::now() + ms(50), None, || {});
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| {
        let mine = cx.timer(Instant::now() + ms(50), None);
        assert!(cx.cancel_timer(mine));
        let errors = [
            cx.set_timer(theirs, Instant::now()),
            cx.set_timer(closure, Instant::now()),
            cx.set_timer(mine, Instant::now()),
            cx.unset_timer(theirs).map(|_| ()),
        ];
        tx.send((mine, errors)).unwrap();
    });
    reactor.turn(Some(LIMIT)).unwrap();
    let (mine, errors) = rx.try_recv().expect("the post ran");
    assert_eq!(
        errors,
        [
            Err(TimerError::OtherLane(theirs)),
            Err(TimerError::OtherLane(closure)),
            Err(TimerError::Gone(mine)),
            Err(TimerError::OtherLane(theirs)),
        ]
    );
    assert!(errors[0].unwrap_err().to_string().contains("another lane"));
}

#[test]
fn closing_a_lane_frees_its_reusable_timers_armed_or_not() {
    let (mut reactor, lane, _, _) = timed_lane();
    let handle = reactor.handle();
    let (tx, rx) = mpsc::channel();
    let _ = lane.post(move |_, cx| {
        let kept = cx.reusable_timer();
        let armed = cx.reusable_timer();
        cx.set_timer(armed, Instant::now() + Duration::from_secs(60))
            .unwrap();
        let cancelled = cx.reusable_timer();
        cx.cancel_timer(cancelled);
        tx.send(kept).unwrap();
    });
    reactor.turn(Some(LIMIT)).unwrap();
    rx.try_recv().expect("the post ran");
    assert_eq!(handle.timer_count(), 2);
    assert!(lane.close());
    turn_until(&mut reactor, "the lane to close", || lane.is_closed());
    assert_eq!(handle.timer_count(), 0, "a closed lane's timers stay");
}

/// A lane that keeps its reusable timer moving: each fire re-arms it a
/// little ahead, and posts from another thread move it too. Every fire it
/// handles must be for the deadline it holds now (a fire of a deadline it
/// moved away from is never handled), so none comes before that deadline.
/// (With fires delivered after the poller let go of the timer lock, a move
/// could slip in between and a stale fire came through: this test caught
/// it in most runs.)
struct Chaser {
    timer: Option<TimerId>,
    deadline: Instant,
    step: u64,
    early: u64,
    progress: Arc<Progress>,
}

impl Chaser {
    /// Moves the timer to 0-1,999 µs from now (pseudo-random).
    fn rearm(&mut self, cx: &mut LaneCtx<'_, Self>) {
        self.step = self.step.wrapping_mul(6364136223846793005).wrapping_add(1);
        let ahead = Duration::from_micros((self.step >> 33) % 2_000);
        self.deadline = Instant::now() + ahead;
        let id = *self.timer.get_or_insert_with(|| cx.reusable_timer());
        cx.set_timer(id, self.deadline).unwrap();
    }
}

impl Lane for Chaser {
    fn on_timer(&mut self, cx: &mut LaneCtx<'_, Self>, timer: TimerId) {
        assert_eq!(Some(timer), self.timer);
        if Instant::now() < self.deadline {
            self.early += 1;
        }
        self.progress.add(1);
        self.rearm(cx);
    }
}

#[test]
fn moving_timers_on_a_shared_runtime_never_get_a_stale_fire() {
    const LANES: usize = 4;
    const FIRES: u64 = 300;
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let progress = Arc::new(Progress::default());
    let lanes: Vec<_> = (0..LANES as u64)
        .map(|i| {
            rt.add_lane_with(
                Chaser {
                    timer: None,
                    deadline: Instant::now(),
                    step: i,
                    early: 0,
                    progress: progress.clone(),
                },
                |c, cx| c.rearm(cx),
            )
            .0
        })
        .collect();
    // Moves from outside race with the fires the poller delivers.
    let start = Instant::now();
    while progress.get() < FIRES * LANES as u64 {
        assert!(
            start.elapsed() < LIMIT,
            "{} fires in {LIMIT:?}",
            progress.get()
        );
        for lane in &lanes {
            let _ = lane.post(|c, cx| c.rearm(cx));
        }
        std::thread::yield_now();
    }
    let (tx, rx) = mpsc::channel();
    for lane in &lanes {
        let tx = tx.clone();
        let _ = lane.post(move |c, _| tx.send(c.early).unwrap());
    }
    let early: Vec<u64> = (0..LANES)
        .map(|_| rx.recv_timeout(LIMIT).unwrap())
        .collect();
    rt.stop().unwrap();
    assert_eq!(
        early, [0; LANES],
        "fires handled before the lane's deadline"
    );
}
