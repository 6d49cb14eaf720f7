//! Fault injection for the crash test (`tests/crash/`): with
//! `SKADE_FAULT_KILL_AFTER_COMMITS=n` in its environment, the process SIGKILLs itself
//! right after its `n`-th durable data commit — after the redb transaction committed and
//! before any caller learns of it, so before the ack. That is the moment a retrying
//! producer cannot tell from a failed commit (`docs/exactly-once.md`); a kill from
//! outside hits it only by chance. Compiled into debug builds (what the tests run) and
//! into release builds with the `fault-injection` feature only: a production build has
//! no such hook and ignores the variable.

#[cfg(any(debug_assertions, feature = "fault-injection"))]
use std::sync::OnceLock;

/// The environment variable that arms the fault.
pub const KILL_AFTER_COMMITS: &str = "SKADE_FAULT_KILL_AFTER_COMMITS";

/// Called after the `commits`-th durable data commit of this process's catalog: a no-op
/// in a release build.
#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
pub(super) fn after_commit(_commits: u64) {}

/// Called after the `commits`-th durable data commit of this process's catalog.
#[cfg(any(debug_assertions, feature = "fault-injection"))]
pub(super) fn after_commit(commits: u64) {
    static ARMED: OnceLock<Option<u64>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        std::env::var(KILL_AFTER_COMMITS)
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if *armed == Some(commits) {
        tracing::error!(
            commits,
            "{KILL_AFTER_COMMITS}: killing the process after this commit"
        );
        // SAFETY: signalling our own process; SIGKILL cannot be caught, so this is the
        // same end as a kill from outside: no destructor, no flush.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
