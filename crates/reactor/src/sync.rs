//! Locking helpers shared by every layer (a leaf: it depends on nothing in
//! the crate).

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: every critical section in this crate
/// leaves its data consistent, and handler panics are caught before they
/// can unwind through a lock.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
