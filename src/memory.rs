//! The server's memory: the bound its resident set keeps, and giving freed memory back
//! to the operating system.
//!
//! `--memory-budget` counts the Arrow bytes of the rows every stream holds, from the
//! moment a batch is taken until its data file is written (`write::budget`). Once a row
//! group is encoded its Arrow is freed and its Parquet column chunks (no larger than
//! the Arrow they encode, except for a few bytes of page headers) live on under the
//! same reservation; a full file is written to storage in segments straight from those
//! chunks (`write::file_out`), never assembled whole in memory. What the budget does
//! not count is bounded by [`rss_bound`]: the process itself, and per open stream the
//! batch being received and decoded before it is taken. `docs/performance.md`
//! ("Memory") has the measurements behind each term; the README states the formula.
//!
//! An allocator keeps the pages it freed for reuse: after a stream ends, [`spawn`]'s
//! task asks it (through the hook [`set_release_hook`] installs; the `skade` binary
//! installs mimalloc's `mi_collect`) to return them once no rows have been held for
//! [`RELEASE_AFTER`].

use std::sync::{OnceLock, Weak};
use std::time::Duration;

use crate::flight::Service;

/// The part of the server's resident set that does not grow with the budget or the
/// streams, in bytes: code, the tokio and rayon threads' stacks and allocator caches,
/// the catalog and its caches, the encoders' working buffers (one Parquet page per
/// column being encoded, the dictionaries), compaction's Parquet reader, and the
/// allocator's slack. Measured at 163 MiB or less over the budget for one stream at
/// budgets of 128 MiB to 2 GiB (debug and release builds, `docs/performance.md`,
/// "Memory"), of which 53–98 MiB is RSS over the live heap.
pub const FIXED_OVERHEAD_BYTES: u64 = 256 << 20;

/// Per open stream, beyond its largest message: the HTTP/2 receive window of one
/// stream (`lib.rs`'s 16 MiB), which the client may fill before the server reads.
pub const STREAM_WINDOW_BYTES: u64 = 16 << 20;

/// The bound on the server's resident set (peak RSS, Linux's `VmHWM`), in bytes, for
/// `--memory-budget` `budget_bytes` and `streams` open streams whose largest Flight
/// message (one record batch) is `message_bytes`:
///
/// `budget + FIXED_OVERHEAD_BYTES + streams × (STREAM_WINDOW_BYTES + 3 × message)`
///
/// Each stream may hold, outside the budget, the message being received, the batch
/// decoded from the one before while it waits for room in the budget, and that batch's
/// parts once split by partition (a partitioned table's rows are copied per partition).
/// `message_bytes` is at most `--max-message-size`.
pub fn rss_bound(budget_bytes: u64, streams: u64, message_bytes: u64) -> u64 {
    budget_bytes + FIXED_OVERHEAD_BYTES + streams * (STREAM_WINDOW_BYTES + 3 * message_bytes)
}

/// How long no rows must have been held against the budget before freed memory is
/// returned to the operating system. The resident set falls within about twice this
/// after the last stream's last file is written.
pub const RELEASE_AFTER: Duration = Duration::from_secs(1);

/// How often the release task looks at the budget.
const RELEASE_TICK: Duration = Duration::from_millis(250);

static RELEASE_HOOK: OnceLock<fn()> = OnceLock::new();

/// Installs the function that makes the process's allocator return the memory it freed
/// (for mimalloc, `mi_collect(true)`); it runs on every rayon worker and one blocking
/// thread, since allocators keep freed pages per thread. The first call wins; without
/// one, nothing is released beyond what the allocator does by itself.
pub fn set_release_hook(hook: fn()) {
    let _ = RELEASE_HOOK.set(hook);
}

/// Runs the release hook (if any) on every rayon worker thread and this thread.
/// Blocking.
pub fn release_free_memory() {
    if let Some(hook) = RELEASE_HOOK.get().copied() {
        rayon::broadcast(|_| hook());
        hook();
    }
}

/// Spawns the task that releases freed memory once the budget has held nothing for
/// [`RELEASE_AFTER`] after having held something; it ends with the service.
pub(crate) fn spawn(service: Weak<Service>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Whether rows were held since the last release, and since when none are.
        let (mut used, mut idle_since) = (false, None);
        loop {
            let Some(svc) = service.upgrade() else { return };
            if svc.shutdown.is_cancelled() {
                return;
            }
            let idle = svc.budget.available_bytes() == svc.budget.total_bytes();
            drop(svc);
            let now = tokio::time::Instant::now();
            match (idle, idle_since) {
                (false, _) => (used, idle_since) = (true, None),
                (true, None) => idle_since = Some(now),
                (true, Some(since)) if used && now - since >= RELEASE_AFTER => {
                    used = false;
                    let _ = tokio::task::spawn_blocking(release_free_memory).await;
                }
                (true, Some(_)) => {}
            }
            tokio::time::sleep(RELEASE_TICK).await;
        }
    })
}
