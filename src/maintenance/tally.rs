//! Counts for a log line that every pass could write, written at most once a minute.
//!
//! At a high commit rate a pass runs about once a second (`Maintainer::spawn` wakes it
//! every quarter of `--max-snapshots` commits), and every sweep removes files: a line per
//! sweep would be ≈ 86,000 lines a day saying the same thing. The counts go to the
//! metrics at once; the log gets one line a minute with what happened since the last.

use std::time::{Duration, Instant};

/// How often a tallied line is written at most.
pub(super) const LOG_EVERY: Duration = Duration::from_secs(60);

/// Files (and bytes) not yet written to the log, and when the line was last written.
#[derive(Debug, Default)]
pub(super) struct Tally {
    files: u64,
    bytes: u64,
    written: Option<Instant>,
}

impl Tally {
    /// Adds `files` and `bytes` (which may be 0) at `now`; returns the totals to write
    /// when something is pending and no line was written in the last [`LOG_EVERY`] (the
    /// first one at once), and starts counting again.
    pub(super) fn add(&mut self, files: u64, bytes: u64, now: Instant) -> Option<(u64, u64)> {
        self.files += files;
        self.bytes += bytes;
        if self.files == 0 {
            return None;
        }
        if self
            .written
            .is_some_and(|at| now.saturating_duration_since(at) < LOG_EVERY)
        {
            return None;
        }
        self.written = Some(now);
        Some((
            std::mem::take(&mut self.files),
            std::mem::take(&mut self.bytes),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches a line per sweep (the count written every time), counts lost between two
    /// lines, and a count that waits for the next removal to be written.
    #[test]
    fn one_line_a_minute_with_everything_since_the_last() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut tally = Tally::default();
        assert_eq!(tally.add(0, 0, at(0)), None, "nothing to say");
        assert_eq!(tally.add(3, 30, at(1)), Some((3, 30)), "the first at once");
        assert_eq!(tally.add(5, 50, at(2)), None);
        assert_eq!(tally.add(7, 70, at(60)), None, "within the minute");
        assert_eq!(
            tally.add(0, 0, at(61)),
            Some((12, 120)),
            "written without a new one"
        );
        assert_eq!(tally.add(0, 0, at(200)), None, "nothing pending");
        assert_eq!(tally.add(1, 10, at(201)), Some((1, 10)));
    }
}
