//! The one thing this crate asks of the CPU directly: a prefetch hint, so
//! that the state of a batch's connections loads in parallel instead of
//! one cold line after another ([`crate::Endpoint::prefetch`]).
#![allow(unsafe_code)]

/// Starts loading the cache line holding `p` (any address: a hint).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 only hints the cache: it never faults and reads
    // nothing architecturally, whatever the address; SSE, which provides
    // it, is part of every x86_64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] of every cache line of `*v`.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(v: *const T) {
    prefetch_span(v.cast::<u8>(), std::mem::size_of::<T>());
}

/// [`prefetch`] of every cache line of the `len` bytes at `p`.
#[inline(always)]
pub(crate) fn prefetch_span(p: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        prefetch(p.wrapping_add(off));
        off += 64;
    }
    // The last byte's line, when `p` is not line-aligned.
    if len > 0 {
        prefetch(p.wrapping_add(len - 1));
    }
}
