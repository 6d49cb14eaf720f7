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
//! [`RELEASE_AFTER`], and every `--memory-purge-interval` ([`PURGE_EVERY`] by default),
//! busy or not, it runs the hook on one thread, which returns what the allocator's own
//! delayed purge should have returned (see [`PURGE_EVERY`] for why it does not always).

use std::sync::{OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::flight::Service;

/// The part of the server's resident set that does not grow with the budget or the
/// streams, in bytes: code, the tokio and rayon threads' stacks and allocator caches,
/// the catalog and its caches, the encoders' working buffers (one Parquet page per
/// column being encoded, the dictionaries), compaction's Parquet reader, and the
/// allocator's slack. Chosen with room above the overhead measured at one stream
/// (current figures: `docs/performance.md`, "Memory").
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

/// How often (1 s) the release hook runs on one thread whatever the load, by default
/// (`--memory-purge-interval`; `0s` turns it off): with mimalloc,
/// a forced purge of its arenas (`mi_collect(true)`; `arena.c`, `mi_arenas_try_purge`),
/// which bounds the memory freed but still resident to about a second of frees.
///
/// mimalloc 3.3's delayed purge (`libmimalloc-sys` 0.1.49, `c_src/mimalloc/v3/src/arena.c`)
/// can stop for good under load: a thread that frees pages sets the arena's purge
/// deadline and then the process-wide one only if that was unset, while a thread whose
/// purge found nothing due resets the process-wide deadline; when the reset lands after
/// the other thread's deadline was set, the arena holds a deadline that the process-wide
/// one no longer announces, later frees leave both as they are, and every unforced purge
/// returns early from then on: the resident set grows far past the live heap. Only
/// a forced purge clears the arena's deadline and starts it again. What the stop looks
/// like and what the forced purge costs: `docs/performance.md`, "mimalloc's purge stops"
/// and "The forced purge (`memory_purge` arm)".
pub const PURGE_EVERY: Duration = Duration::from_secs(1);

/// How often the release task looks at the budget.
const RELEASE_TICK: Duration = Duration::from_millis(250);

static RELEASE_HOOK: OnceLock<fn()> = OnceLock::new();

/// Installs the function that makes the process's allocator return the memory it freed
/// (for mimalloc, `mi_collect(true)`); it runs on every rayon worker and one blocking
/// thread once the budget is idle ([`release_free_memory`]), and on one blocking thread
/// every `--memory-purge-interval` ([`purge_free_memory`]). The first call wins;
/// without one, nothing is released beyond what the allocator does by itself.
pub fn set_release_hook(hook: fn()) {
    let _ = RELEASE_HOOK.set(hook);
}

/// Runs the release hook (if any) on every rayon worker thread and this thread.
/// Blocking.
pub fn release_free_memory() {
    if let Some(hook) = RELEASE_HOOK.get().copied() {
        rayon::broadcast(|_| hook());
    }
    purge_free_memory();
}

/// Runs the release hook (if any) on this thread only: for mimalloc, this thread's own
/// free pages and a forced purge of every arena, which holds the pages the other threads
/// gave back. Blocking; no other thread waits for it.
pub fn purge_free_memory() {
    if let Some(hook) = RELEASE_HOOK.get().copied() {
        hook();
    }
}

/// What the release task does at one look at the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing this time.
    Wait,
    /// [`purge_free_memory`]: the purge interval has passed since the last purge or
    /// release.
    Purge,
    /// [`release_free_memory`]: rows were held, and none have been for [`RELEASE_AFTER`].
    Release,
}

/// The release task's state between two looks at the budget.
#[derive(Debug)]
struct ReleaseSchedule {
    /// Whether rows were held since the last release.
    used: bool,
    /// Since when no rows are held (`None` while some are).
    idle_since: Option<Instant>,
    /// When the hook last ran, on any number of threads.
    last_run: Instant,
    /// How often to purge whatever the load; `None`: never.
    purge_every: Option<Duration>,
}

impl ReleaseSchedule {
    /// A schedule starting at `now` that purges every `purge_every` (zero: never).
    fn new(now: Instant, purge_every: Duration) -> Self {
        Self {
            used: false,
            idle_since: None,
            last_run: now,
            purge_every: (!purge_every.is_zero()).then_some(purge_every),
        }
    }

    /// What to do at `now`, with `idle` telling whether the budget holds no rows.
    fn next(&mut self, now: Instant, idle: bool) -> Step {
        let release = match (idle, self.idle_since) {
            (false, _) => {
                (self.used, self.idle_since) = (true, None);
                false
            }
            (true, None) => {
                self.idle_since = Some(now);
                false
            }
            (true, Some(since)) => self.used && now - since >= RELEASE_AFTER,
        };
        if release {
            self.used = false;
            self.last_run = now;
            Step::Release
        } else if self
            .purge_every
            .is_some_and(|every| now - self.last_run >= every)
        {
            self.last_run = now;
            Step::Purge
        } else {
            Step::Wait
        }
    }
}

/// Spawns the task that releases freed memory once the budget has held nothing for
/// [`RELEASE_AFTER`] after having held something, and purges it from one thread every
/// `purge_every` (`--memory-purge-interval`; zero: never; it looks every 250 ms, so a
/// shorter interval acts as 250 ms); it ends with the service.
pub(crate) fn spawn(service: Weak<Service>, purge_every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut schedule = ReleaseSchedule::new(Instant::now(), purge_every);
        loop {
            let Some(svc) = service.upgrade() else { return };
            if svc.shutdown.is_cancelled() {
                return;
            }
            let idle = svc.budget.available_bytes() == svc.budget.total_bytes();
            drop(svc);
            match schedule.next(Instant::now(), idle) {
                Step::Wait => {}
                Step::Purge => {
                    let _ = crate::storage::blocking::run_blocking(purge_free_memory).await;
                }
                Step::Release => {
                    let _ = crate::storage::blocking::run_blocking(release_free_memory).await;
                }
            }
            tokio::time::sleep(RELEASE_TICK).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The looks of a task that ticks every [`RELEASE_TICK`] for `seconds`, with `idle`
    /// telling at each offset from the start whether the budget holds no rows.
    fn run(seconds: u64, idle: impl Fn(Duration) -> bool) -> Vec<(Duration, Step)> {
        run_with(PURGE_EVERY, seconds, idle)
    }

    /// [`run`] with the purge every `purge_every` (zero: never).
    fn run_with(
        purge_every: Duration,
        seconds: u64,
        idle: impl Fn(Duration) -> bool,
    ) -> Vec<(Duration, Step)> {
        let start = Instant::now();
        let mut schedule = ReleaseSchedule::new(start, purge_every);
        let ticks = Duration::from_secs(seconds).as_millis() / RELEASE_TICK.as_millis();
        (1..=ticks as u32)
            .map(|i| {
                let at = RELEASE_TICK * i;
                (at, schedule.next(start + at, idle(at)))
            })
            .filter(|(_, release)| *release != Step::Wait)
            .collect()
    }

    /// Catches a busy server never returning freed memory: under rows held without a
    /// pause, the allocator's purge still runs every [`PURGE_EVERY`] (before, only an
    /// idle budget released anything, and mimalloc's own purge can stop for good).
    #[test]
    fn a_budget_never_idle_is_purged_every_second() {
        let runs = run(10, |_| false);
        assert_eq!(runs.len(), 10, "{runs:?}");
        assert!(runs.iter().all(|(_, r)| *r == Step::Purge), "{runs:?}");
        for pair in runs.windows(2) {
            assert_eq!(pair[1].0 - pair[0].0, PURGE_EVERY, "{runs:?}");
        }
    }

    /// Catches the full release (every thread) going missing or repeating once a stream
    /// ends: it runs once, [`RELEASE_AFTER`] after the budget went idle, and the purge
    /// goes on alone after it.
    #[test]
    fn an_idle_budget_is_released_once_then_purged() {
        let busy_until = Duration::from_millis(2_500);
        let runs = run(8, |at| at >= busy_until);
        let releases: Vec<_> = runs.iter().filter(|(_, r)| *r == Step::Release).collect();
        assert_eq!(releases.len(), 1, "{runs:?}");
        assert_eq!(releases[0].0, busy_until + RELEASE_AFTER, "{runs:?}");
        let after: Vec<_> = runs.iter().filter(|(at, _)| *at > releases[0].0).collect();
        assert!(
            !after.is_empty() && after.iter().all(|(_, r)| *r == Step::Purge),
            "{runs:?}"
        );
    }

    /// Catches a release on a server that never held rows (nothing to give back from the
    /// workers): an idle-from-the-start budget is only purged.
    #[test]
    fn a_budget_that_never_held_rows_is_only_purged() {
        let runs = run(5, |_| true);
        assert!(!runs.is_empty());
        assert!(runs.iter().all(|(_, r)| *r == Step::Purge), "{runs:?}");
    }

    /// Catches `--memory-purge-interval 0s` still purging (the bench's baseline would
    /// then measure the purge too) or losing the release after a stream: a busy budget
    /// is never purged, and an idle one is released once, [`RELEASE_AFTER`] after.
    #[test]
    fn a_zero_interval_turns_the_purge_off_but_not_the_release() {
        let busy_until = Duration::from_millis(2_500);
        let runs = run_with(Duration::ZERO, 8, |at| at >= busy_until);
        assert_eq!(runs, vec![(busy_until + RELEASE_AFTER, Step::Release)]);
    }

    /// Catches another interval being ignored: a busy budget with `3s` is purged every
    /// 3 s.
    #[test]
    fn the_purge_follows_the_configured_interval() {
        let every = Duration::from_secs(3);
        let runs = run_with(every, 10, |_| false);
        let at: Vec<Duration> = runs.iter().map(|(at, _)| *at).collect();
        assert_eq!(at, vec![every, every * 2, every * 3], "{runs:?}");
        assert!(runs.iter().all(|(_, r)| *r == Step::Purge), "{runs:?}");
    }

    /// Catches the flag's default drifting from the documented [`PURGE_EVERY`].
    #[test]
    fn the_flag_defaults_to_purge_every() {
        let config = crate::Config::for_tests("unused");
        assert_eq!(config.ingest.memory_purge_interval, PURGE_EVERY);
    }
}
