//! Ctrl-C during a run: the first SIGINT ends the measured phase early, as
//! iperf3 does; the run drains what is in flight and reports what it
//! measured so far (its record's `error` says it was interrupted, so it is
//! not ok), with its summary. A second SIGINT ends the process at once
//! (exit status 130).
//!
//! [`handle`] installs the handler (the binary does, for a run); the phase
//! loops wait with `wait_until`, which returns as soon as the signal
//! comes (a condition variable, not a poll), or ask `interrupted`.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use signal_hook::consts::SIGINT;
use signal_hook::iterator::Signals;

/// When the first SIGINT came, and the waiters to wake.
struct State {
    at: Mutex<Option<Instant>>,
    woken: Condvar,
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| State {
        at: Mutex::new(None),
        woken: Condvar::new(),
    })
}

/// Handles SIGINT for the rest of the process: the first ends the phase
/// (`interrupted` says when), the second exits with status 130. `Err`
/// if the handler cannot be installed (the run then goes on without it).
pub fn handle() -> Result<(), String> {
    let mut signals = Signals::new([SIGINT]).map_err(|e| format!("handling SIGINT: {e}"))?;
    std::thread::Builder::new()
        .name("keel-bench-sigint".into())
        .spawn(move || {
            for _ in signals.forever() {
                let s = state();
                let mut at = s.at.lock().unwrap_or_else(|p| p.into_inner());
                if at.is_some() {
                    eprintln!("\nkeel-bench: interrupted twice, exiting");
                    std::process::exit(130);
                }
                *at = Some(Instant::now());
                s.woken.notify_all();
            }
        })
        .map_err(|e| format!("starting the SIGINT thread: {e}"))?;
    Ok(())
}

/// When the run was interrupted, if it was.
pub(crate) fn interrupted() -> Option<Instant> {
    *state().at.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits until `deadline` or an interrupt, whichever comes first; `Some`
/// with the interrupt's time if it came (before or during the wait).
pub(crate) fn wait_until(deadline: Instant) -> Option<Instant> {
    let s = state();
    let mut at = s.at.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if let Some(t) = *at {
            return Some(t);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        at = s
            .woken
            .wait_timeout(at, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// The record's error for an interrupted run: when, in its measured phase.
pub(crate) fn error(at: Instant, measure_start: Instant, requested: f64) -> String {
    let into = at.saturating_duration_since(measure_start).as_secs_f64();
    format!(
        "interrupted (SIGINT) after {into:.2} s of the {requested} s measured phase: the figures \
         are of that part only"
    )
}
