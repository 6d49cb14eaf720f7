//! The server process's allocator settings (mimalloc, the binary's global allocator),
//! shared by `src/main.rs` and the bench (`benches/skade-bench`, which runs the server
//! in its own process and must measure what the binary does).

unsafe extern "C" {
    /// mimalloc's own: frees the calling thread's empty pages and, with `force`, returns
    /// every free page of its arenas to the operating system now (`mimalloc.h`).
    fn mi_collect(force: bool);
    /// mimalloc's own: sets an option (`mi_option_t`, `mimalloc.h`) unless the
    /// environment (`MIMALLOC_<OPTION>`) already set it.
    fn mi_option_set_default(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (`mimalloc.h` of the bundled
/// `libmimalloc-sys` 0.1.49): milliseconds freed memory waits before it is returned to
/// the operating system.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Freed memory goes back to the operating system after this many milliseconds (mimalloc
/// 3's default is 1000); `MIMALLOC_PURGE_DELAY` in the environment overrides it.
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Keeps the resident set near the live heap under a fast stream, which frees its
/// batches at the rate it reads them; under mimalloc 3's defaults it grows well past
/// the live heap (peak RSS with and without each setting, and what they cost in ingest
/// speed: `docs/performance.md`, "The allocator and ingest speed").
///
/// - Transparent huge pages off for this process: mimalloc advises its arenas
///   `MADV_HUGEPAGE`, so a 64 KiB page first touched in a fresh 2 MiB range makes all
///   2 MiB resident, its purges inside a huge page return nothing, and every fault on a
///   purged range zeroes 2 MiB.
/// - Purge after [`PURGE_DELAY_MS`]: at mimalloc 3's 1 s a stream's freed batches of
///   the last second stay resident — a term that grows with the stream's speed.
pub(crate) fn tune() {
    // SAFETY: `PR_SET_THP_DISABLE` takes no pointers and affects only this process's
    // later page faults; `mi_option_set_default` stores one integer option.
    unsafe {
        let _ = libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}

/// What [`skade::memory`] runs once a stream's memory is free (on every rayon worker and
/// one blocking thread) and every `skade::memory::PURGE_EVERY` (on one blocking thread):
/// mimalloc keeps freed pages for reuse (its purge waits for more allocator activity on
/// the same thread), and its delayed arena purge can stop under load until a forced one
/// runs (`skade::memory::PURGE_EVERY` says how).
pub(crate) fn release_free_memory() {
    // SAFETY: `mi_collect` only walks the calling thread's heap and the shared arenas;
    // it is safe to call from any thread at any time.
    unsafe { mi_collect(true) }
}
