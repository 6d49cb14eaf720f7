//! Making warehouse files durable before the catalog pointer moves.
//!
//! iceberg's local `FileIO` does not fsync manifests, manifest lists or metadata JSON, and
//! never fsyncs directories. Before a commit's redb transaction flips a table pointer,
//! skade calls [`sync_warehouse`]: one `syncfs(2)` on the warehouse's filesystem, which
//! writes back every dirty file and directory entry of that filesystem — the data files,
//! manifests, manifest list and metadata JSON of the commit among them. One syscall per
//! commit instead of one fsync per file plus one per directory (SERVICE.md, Durability).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static WAREHOUSE_SYNCS: AtomicU64 = AtomicU64::new(0);

/// Process-global count of [`sync_warehouse`] calls that succeeded (one `syncfs(2)` each).
pub fn warehouse_sync_count() -> u64 {
    WAREHOUSE_SYNCS.load(Ordering::Relaxed)
}

/// Writes back every dirty file and directory entry on the filesystem holding `root`
/// (`syncfs(2)`). Blocking: call it from `spawn_blocking` or a blocking section.
///
/// # Errors
/// The `io::Error` of opening `root` or of `syncfs` (e.g. `EIO` after a failed writeback).
pub fn sync_warehouse(root: &Path) -> std::io::Result<()> {
    let dir = File::open(root)?;
    // SAFETY: `dir` is an open file descriptor for the duration of the call.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    WAREHOUSE_SYNCS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
