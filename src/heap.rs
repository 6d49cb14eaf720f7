//! The live heap: bytes the process's allocator has handed out and not had back.
//!
//! Set beside the resident set it tells the two causes of a growing RSS apart: the live
//! heap growing (something holds more), or the allocator keeping pages it cannot return
//! (freed memory spread over pages that still hold a few live blocks, or pages freed by
//! one thread into another's heap and not yet collected). The server binary wraps its
//! allocator in [`CountingAllocator`] (`src/main.rs`); [`allocated_bytes`] reads the
//! count, the metrics show it as `skade_heap_allocated_bytes`.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Bytes a thread counts by itself before it adds them to the process's count: the
/// count is off by at most this much per thread, and a thread that ends takes its
/// unadded bytes with it.
pub const THREAD_SLACK_BYTES: i64 = 64 << 10;

/// Bytes handed out less bytes had back, over every thread's added share.
static ALLOCATED: AtomicI64 = AtomicI64::new(0);

/// Whether a [`CountingAllocator`] has handed out anything (it is the global allocator).
static COUNTING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's bytes not yet added to [`ALLOCATED`] (negative when it freed more
    /// than it allocated). Constant-initialised and without a destructor, so reading it
    /// from inside the allocator allocates nothing.
    static UNADDED: Cell<i64> = const { Cell::new(0) };
}

/// A global allocator that hands every call to `A` and keeps the count
/// [`allocated_bytes`] reads: a thread-local add per call, and one atomic add each time
/// a thread's share passes [`THREAD_SLACK_BYTES`].
#[derive(Debug)]
pub struct CountingAllocator<A> {
    inner: A,
}

impl<A> CountingAllocator<A> {
    /// Wraps `inner`, for `#[global_allocator]`.
    pub const fn new(inner: A) -> Self {
        Self { inner }
    }
}

/// Counts `bytes` (negative for bytes had back) on the calling thread.
fn count(bytes: i64) {
    if !COUNTING.load(Ordering::Relaxed) {
        COUNTING.store(true, Ordering::Relaxed);
    }
    let added = UNADDED.try_with(|unadded| {
        let sum = unadded.get() + bytes;
        if sum.abs() >= THREAD_SLACK_BYTES {
            ALLOCATED.fetch_add(sum, Ordering::Relaxed);
            unadded.set(0);
        } else {
            unadded.set(sum);
        }
    });
    // A thread's locals are gone only while it ends: count straight into the total.
    if added.is_err() {
        ALLOCATED.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A size in bytes as a signed count; no allocation is larger than `isize::MAX`.
fn signed(size: usize) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

// SAFETY: every method hands the caller's arguments to `A` unchanged and returns what it
// returns; the count only reads the layouts.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let ptr = unsafe { self.inner.alloc(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        let ptr = unsafe { self.inner.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { self.inner.dealloc(ptr, layout) };
        count(-signed(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let new = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            count(signed(new_size) - signed(layout.size()));
        }
        new
    }
}

/// The live heap in bytes — allocated and not yet freed — when the global allocator is
/// a [`CountingAllocator`], else `None`. Off by at most [`THREAD_SLACK_BYTES`] for every
/// thread that has allocated (ended threads included), and lower than the resident set
/// by the allocator's own overhead and free pages it keeps.
pub fn allocated_bytes() -> Option<u64> {
    COUNTING
        .load(Ordering::Relaxed)
        .then(|| u64::try_from(ALLOCATED.load(Ordering::Relaxed)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    /// A counting allocator outside `#[global_allocator]`: the count moves by what it
    /// hands out and had back, to within the calling thread's slack.
    #[test]
    fn the_count_follows_what_is_handed_out_and_had_back() {
        let alloc = CountingAllocator::new(System);
        let layout = Layout::from_size_align(4 << 20, 8).expect("layout");
        // Each thread's share is added once it passes the slack: a fresh thread starts at
        // 0, so 4 MiB is added at once, whole.
        let (before, during, after) = std::thread::spawn(move || {
            let before = ALLOCATED.load(Ordering::Relaxed);
            // SAFETY: a non-zero layout; the block is freed below with the same layout.
            let ptr = unsafe { alloc.alloc(layout) };
            assert!(!ptr.is_null());
            let during = ALLOCATED.load(Ordering::Relaxed);
            // SAFETY: `ptr` came from `alloc.alloc(layout)` above.
            let grown = unsafe { alloc.realloc(ptr, layout, 6 << 20) };
            assert!(!grown.is_null());
            let grown_layout = Layout::from_size_align(6 << 20, 8).expect("layout");
            // SAFETY: `grown` came from `realloc` to 6 MiB above.
            unsafe { alloc.dealloc(grown, grown_layout) };
            (before, during, ALLOCATED.load(Ordering::Relaxed))
        })
        .join()
        .expect("thread");
        // Other tests' threads may add their shares meanwhile only through their own
        // counting allocators; none exists in this crate's tests.
        assert_eq!(during - before, 4 << 20);
        assert_eq!(after - before, 0);
        assert!(allocated_bytes().is_some());
    }
}
