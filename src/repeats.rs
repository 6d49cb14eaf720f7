//! Repeated events, logged once per interval: the first of each kind at once, then at
//! most one per [`REPEAT_LOG_INTERVAL`] with the count of those left out. For failures
//! that recur on a schedule (maintenance passes and jobs during an outage, the catalog
//! pool's connections ending), which metrics count one by one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one failure that keeps repeating is logged (with the count of the repeats
/// in between): during an outage a loop that fails every second logs once a minute.
pub const REPEAT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Decides which of a stream of repeated events to log: the first of each kind (its
/// `key`, e.g. the error's text) at once, then at most one per interval, counting the
/// ones left out. Kinds not seen for an interval are forgotten.
#[derive(Debug)]
pub struct Repeats {
    interval: Duration,
    seen: Mutex<HashMap<String, Seen>>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// When the kind was last logged.
    logged: Instant,
    /// Events of the kind since then, not logged.
    left_out: u64,
    /// When the kind last happened.
    last: Instant,
}

impl Repeats {
    /// Logs each kind at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Records one event of kind `key` at `now`; `Some(left_out)` when it is to be
    /// logged, with the events of its kind left out since it was last logged (0 for the
    /// first), `None` when it is to be left out.
    pub fn admit_at(&self, key: &str, now: Instant) -> Option<u64> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let interval = self.interval;
        seen.retain(|_, s| now.saturating_duration_since(s.last) < interval);
        match seen.get_mut(key) {
            Some(s) if now.saturating_duration_since(s.logged) < interval => {
                s.left_out += 1;
                s.last = now;
                None
            }
            Some(s) => {
                let left_out = s.left_out;
                *s = Seen {
                    logged: now,
                    left_out: 0,
                    last: now,
                };
                Some(left_out)
            }
            None => {
                seen.insert(
                    key.to_string(),
                    Seen {
                        logged: now,
                        left_out: 0,
                        last: now,
                    },
                );
                Some(0)
            }
        }
    }

    /// [`Self::admit_at`] now.
    pub fn admit(&self, key: &str) -> Option<u64> {
        self.admit_at(key, Instant::now())
    }
}

/// The process's [`Repeats`] at [`REPEAT_LOG_INTERVAL`], for failures that recur on a
/// schedule (maintenance passes and jobs): `Some(left_out)` when the failure `error` of
/// `site` is to be logged now. Log it with the count as `repeats`.
pub fn repeats(site: &str, error: &str) -> Option<u64> {
    static REPEATED: std::sync::LazyLock<Repeats> =
        std::sync::LazyLock::new(|| Repeats::new(REPEAT_LOG_INTERVAL));
    REPEATED.admit(&format!("{site}\u{0}{error}"))
}

#[cfg(test)]
mod tests {
    use super::Repeats;
    use std::time::{Duration, Instant};

    // Catches a repeated failure logged every time (the maintenance loop logged the same
    // outage twice a second), a count that loses the repeats, and a new failure held
    // back behind an old one.
    #[test]
    fn a_repeated_event_is_logged_once_per_interval_with_its_count() {
        let repeats = Repeats::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_millis(s * 500);
        assert_eq!(repeats.admit_at("db down", at(0)), Some(0));
        for tick in 1..120 {
            assert_eq!(repeats.admit_at("db down", at(tick)), None, "tick {tick}");
        }
        assert_eq!(repeats.admit_at("other", at(60)), Some(0));
        assert_eq!(repeats.admit_at("db down", at(120)), Some(119));
        assert_eq!(repeats.admit_at("db down", at(121)), None);
        // Quiet for an interval: the kind is forgotten and logged at once again.
        assert_eq!(repeats.admit_at("db down", at(400)), Some(0));
    }
}
