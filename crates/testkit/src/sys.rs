//! The counting allocator: a global allocator can only be written with
//! `unsafe impl GlobalAlloc`; it forwards to `System` and is the only
//! unsafe code of keel's tests.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

use super::{note, note_bytes};

/// Forwards to the system allocator and counts allocations (see the crate
/// docs). Install it in a test binary with
/// `#[global_allocator] static GLOBAL: CountingAllocator = CountingAllocator;`.
pub struct CountingAllocator;

// SAFETY: forwards every call to the system allocator unchanged; counting
// touches only atomics and a const-initialized thread local.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        note_bytes(layout.size() as isize);
        // SAFETY: the caller's contract is passed on to System unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        note_bytes(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        note_bytes(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_bytes(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}
