//! The server-wide memory budget for rows in flight on the write path.
//!
//! Every streaming put reserves the Arrow bytes of each batch it accepts before it reads
//! the next one, and releases them when the batch's data file has been written. When the
//! budget is spent, a put waits for the reservation — it stops reading from its client,
//! so gRPC flow control pushes back on the sender instead of the server buffering.
//! All streams share one budget.

use std::sync::Arc;

use arrow_array::RecordBatch;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// A shared budget of bytes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    total_bytes: usize,
}

/// Bytes held against a [`MemoryBudget`]; released on drop.
#[derive(Debug)]
pub struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
}

impl Reservation {
    /// An empty reservation (holds nothing).
    pub fn empty() -> Self {
        Self {
            _permit: None,
            bytes: 0,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Joins `other` into this reservation.
    pub fn merge(&mut self, other: Reservation) {
        self.bytes += other.bytes;
        match (&mut self._permit, other._permit) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }

    /// Moves up to `bytes` of this reservation into a new one (a batch's bytes shared out
    /// among the partition files its rows go to); what is left stays here.
    pub fn split_off(&mut self, bytes: usize) -> Reservation {
        let bytes = bytes.min(self.bytes);
        if bytes == 0 {
            return Reservation::empty();
        }
        if bytes == self.bytes {
            return std::mem::replace(self, Reservation::empty());
        }
        let permit = self._permit.as_mut().and_then(|p| p.split(bytes));
        self.bytes -= bytes;
        Reservation {
            _permit: permit,
            bytes,
        }
    }
}

impl MemoryBudget {
    /// A budget of `total_bytes` (at least 1).
    pub fn new(total_bytes: u64) -> Self {
        let total_bytes = usize::try_from(total_bytes)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(total_bytes)),
            total_bytes,
        }
    }

    /// The budget's size in bytes.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// Bytes not reserved right now.
    pub fn available_bytes(&self) -> usize {
        self.permits.available_permits()
    }

    /// Reserves `bytes` (capped at the whole budget, so one huge batch cannot wait
    /// forever), waiting while the budget is spent.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait reserves nothing.
    pub async fn reserve(&self, bytes: usize) -> Reservation {
        let want = self.cap(bytes);
        match self.permits.clone().acquire_many_owned(want as u32).await {
            Ok(permit) => Reservation {
                _permit: Some(permit),
                bytes: want,
            },
            // The semaphore is never closed.
            Err(_) => Reservation::empty(),
        }
    }

    /// Reserves `bytes` if that does not wait; `None` when the budget is spent.
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        let want = self.cap(bytes);
        match self.permits.clone().try_acquire_many_owned(want as u32) {
            Ok(permit) => Some(Reservation {
                _permit: Some(permit),
                bytes: want,
            }),
            Err(TryAcquireError::NoPermits) => None,
            Err(TryAcquireError::Closed) => Some(Reservation::empty()),
        }
    }

    fn cap(&self, bytes: usize) -> usize {
        bytes.clamp(1, self.total_bytes.min(u32::MAX as usize))
    }
}

/// The bytes `batch`'s rows occupy. Unlike `get_array_memory_size`, this does not count a
/// shared IPC message buffer once per column that slices it.
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_return_their_bytes_on_drop() {
        let budget = MemoryBudget::new(100);
        let a = budget.reserve(60).await;
        assert_eq!(budget.available_bytes(), 40);
        assert!(budget.try_reserve(50).is_none(), "over budget must wait");
        let mut b = budget.try_reserve(40).expect("fits");
        b.merge(a);
        assert_eq!(b.bytes(), 100);
        drop(b);
        assert_eq!(budget.available_bytes(), 100);
        // One batch larger than the whole budget is capped instead of waiting forever.
        assert_eq!(budget.reserve(1_000).await.bytes(), 100);
    }
}
