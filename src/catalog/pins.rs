//! Write pins: files a writer created that no snapshot references *yet* (a streaming
//! put's data files before their commit, a Flight SQL transaction's staged files before
//! `COMMIT`) must survive online cleanup however long the writer takes.
//!
//! A pin records the wall-clock time it was taken; cleanup keeps every file whose
//! modification time is at or after the oldest live pin (minus [`SLACK`], for coarse file
//! system timestamps). Pins are in memory: after a restart no writer of the old process
//! is alive, so nothing needs them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// Taken off the oldest pin's time before comparing it with modification times: file
/// system timestamps may be coarser than the clock, and a file created right after the
/// pin must not look older than it.
const SLACK: Duration = Duration::from_secs(2);

/// The live pins of one catalog, by id.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    live: Mutex<(u64, BTreeMap<u64, SystemTime>)>,
}

impl Pins {
    fn lock(&self) -> MutexGuard<'_, (u64, BTreeMap<u64, SystemTime>)> {
        self.live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a pin at the current time.
    pub(super) fn pin(pins: &Arc<Self>) -> WritePin {
        let mut live = pins.lock();
        live.0 += 1;
        let id = live.0;
        live.1.insert(id, SystemTime::now());
        WritePin {
            pins: Arc::clone(pins),
            id,
        }
    }

    /// When the oldest live pin was taken (no slack).
    pub(super) fn oldest_taken(&self) -> Option<SystemTime> {
        self.lock().1.values().min().copied()
    }

    /// The time of the oldest live pin, less [`SLACK`].
    pub(super) fn oldest(&self) -> Option<SystemTime> {
        let live = self.lock();
        live.1
            .values()
            .min()
            .map(|t| t.checked_sub(SLACK).unwrap_or(SystemTime::UNIX_EPOCH))
    }
}

/// A live write pin ([`super::RedbCatalog::pin_writes`]); dropping it releases the pin.
#[derive(Debug)]
#[must_use = "dropping the pin releases it at once"]
pub struct WritePin {
    pins: Arc<Pins>,
    id: u64,
}

impl Drop for WritePin {
    fn drop(&mut self) {
        self.pins.lock().1.remove(&self.id);
    }
}
