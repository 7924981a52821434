//! keel-testkit: what more than one of keel's crates needs in its
//! integration tests (a dev-dependency only, never published). What only
//! one crate's tests use stays in that crate's `tests/common`.
//!
//! * Waiting without sleeping, bounded: [`Progress`] (a counter handlers
//!   bump and test threads await), [`recv_within`] and [`recv_in`] (a
//!   channel's next value or a panic naming what was awaited), and
//!   [`poll_until`] for the few states nothing signals. Every wait is
//!   bounded ([`LIMIT`] unless the caller says), so a broken build fails
//!   instead of hanging.
//! * [`rss_bytes`]: this process's resident memory, for the tests that hold
//!   what a peer can make us keep.
//! * [`CountingAllocator`]: a global allocator that counts allocations
//!   made on threads marked with [`mark_runtime_thread`] while
//!   [`set_measuring`] is on, for the tests that prove a steady state
//!   allocates nothing (one test binary each: the allocator is the
//!   process's); it also keeps the bytes allocated and not yet freed, on
//!   every thread ([`live_bytes`]), for the tests that pin a footprint.
//! * [`check_rust_fences`]: a guide whose Rust blocks run as doctests has
//!   none switched off.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod proc;
mod sys;
mod wait;

pub use proc::rss_bytes;
pub use wait::{poll_until, recv_in, recv_within, Progress, LIMIT};

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};

pub use sys::CountingAllocator;

static MEASURING: AtomicBool = AtomicBool::new(false);
static RUNTIME_ALLOCS: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Set on the runtime's threads (a const initializer: reading it never
    /// allocates, so the allocator may use it).
    static ON_RUNTIME: Cell<bool> = const { Cell::new(false) };
}

/// Counts an allocation if measuring is on and this is a runtime thread.
fn note() {
    if MEASURING.load(Ordering::Relaxed) && ON_RUNTIME.try_with(Cell::get).unwrap_or(false) {
        RUNTIME_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Adds `delta` to the bytes live (allocated, not yet freed).
fn note_bytes(delta: isize) {
    LIVE_BYTES.fetch_add(delta, Ordering::Relaxed);
}

/// Heap bytes allocated through [`CountingAllocator`] and not yet freed, on
/// every thread (the sizes asked for, without the allocator's own
/// overhead): the difference across creating something is what it holds.
/// Only meaningful in a binary that installs the allocator.
pub fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::SeqCst)
}

/// Marks the calling thread as one whose allocations are counted (call it
/// on the runtime's thread, e.g. from a posted closure).
pub fn mark_runtime_thread() {
    ON_RUNTIME.with(|f| f.set(true));
}

/// Turns counting on or off.
pub fn set_measuring(on: bool) {
    MEASURING.store(on, Ordering::SeqCst);
}

/// Allocations counted so far.
pub fn runtime_allocs() -> u64 {
    RUNTIME_ALLOCS.load(Ordering::SeqCst)
}

/// Allocations counted so far; the count starts again from 0.
pub fn take_runtime_allocs() -> u64 {
    RUNTIME_ALLOCS.swap(0, Ordering::SeqCst)
}

/// Checks that every Rust block of the guide `name` (its text `guide`) is a
/// plain ```` ```rust ```` fence, which rustdoc compiles and runs (not
/// `ignore`, `no_run`, an unlabelled fence...), that no fence is left open,
/// and that there are at least `min` of them. Panics naming the line
/// otherwise.
pub fn check_rust_fences(name: &str, guide: &str, min: usize) {
    let mut rust_blocks = 0;
    let mut in_block = false;
    for (n, line) in guide.lines().enumerate() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if in_block {
            in_block = false;
            continue;
        }
        in_block = true;
        let lang = info.trim();
        if lang.starts_with("rust") || lang.is_empty() {
            assert_eq!(
                lang,
                "rust",
                "{name} line {}: a Rust block must be a plain ```rust fence \
                 (compiled and run by the doctests), not {lang:?}",
                n + 1
            );
            rust_blocks += 1;
        }
    }
    assert!(!in_block, "{name}: an unclosed code fence");
    assert!(
        rust_blocks >= min,
        "only {rust_blocks} Rust blocks in {name}"
    );
}
