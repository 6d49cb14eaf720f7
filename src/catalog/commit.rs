//! The one commit driver: every commit of this process — both ingest lanes, the library's
//! `ingest_*` entry points, table maintenance, the REST catalog's metadata commits and
//! table creation, and the `iceberg::Catalog` face — runs [`RedbCatalog::commit`] (or
//! [`RedbCatalog::commit_in_turn`] when the caller already holds the turns).
//!
//! Modelled on iceberg-rust's `Transaction::commit` / `do_commit` (a retry policy around
//! one attempt: refresh → re-apply → `update_table`), with the table's *commit turn* in
//! front of it:
//! 1. take this process's commit turn on every table ([`RedbCatalog::commit_turns`], in
//!    uuid order so two multi-table commits never deadlock);
//! 2. load every table as it stands (a pointer read first: the caller's handle is used
//!    when it is still current);
//! 3. check each is the table the caller built for (same uuid: a table dropped and
//!    created again under its name is another table) and, for data commits, still has the
//!    partition spec the data files were split by;
//! 4. run the caller's stage ([`super::Stage`], a producer of `crate::snapshot`) on the tables as they stand —
//!    the only part that differs between callers;
//! 5. release everything in ONE [`RedbCatalog::atomic_release_raw`] (one redb write
//!    transaction, group-committed), built on the tables as loaded in 2
//!    ([`Release::AdvanceLoaded`]: the release reads no pointer again; its
//!    compare-and-swap catches one moved since);
//! 6. on a retryable conflict of the release, go back to 2 under the table's retry policy
//!    ([`CommitPolicy::of`]: Iceberg's `commit.retry.*` table properties, defaulting to
//!    [`COMMIT_POLICY`], or [`SHARED_COMMIT_POLICY`] on a shared catalog), its waits
//!    drawn by `backon`'s exponential backoff.
//!
//! # The policy, the same for every caller
//! - A conflict *of the release* that iceberg marks retryable (a requirement failed or a
//!   pointer moved between the load and the flip: a commit from outside this process, as
//!   every commit inside it waits for its turn) is staged again on the tables as they
//!   now stand, at most [`COMMIT_RETRIES`] times, waiting [`RETRY_BASE_WAIT`] before the
//!   first re-stage and twice as long before each further one (20, 40, 80, 160 ms) — the
//!   count of iceberg's `commit.retry.num-retries` default, Java's exponential backoff.
//!   A table's `commit.retry.num-retries`, `commit.retry.min-wait-ms`,
//!   `commit.retry.max-wait-ms` and `commit.retry.total-timeout-ms` (Iceberg's table
//!   properties) replace the defaults for commits of that table.
//!   On a shared (PostgreSQL) catalog, where writers that take no turn conflict (another
//!   JDBC-catalog engine; every instance with `--catalog-commit-turn instance`; a commit
//!   whose database turn could not be had), [`SHARED_COMMIT_POLICY`] applies instead: up
//!   to 12 re-stages, each wait capped at 320 ms and jittered (half to all of it) so
//!   that writers that conflicted together do not stage again in lockstep.
//! - An error of `stage` is never retried: the stage saw the table as it stands and
//!   refused to build on it. This is how callers that commit *someone else's*
//!   requirements (a REST `updateTable`, the `iceberg::Catalog` face) refuse a failed
//!   requirement at once, as Java's `CatalogHandlers.commit` does (validation failures
//!   are not retried; only the commit's compare-and-swap is).
//! - A stage that returns `None` commits nothing: the caller *gives way*. Table
//!   maintenance re-plans on every attempt and gives way when the plan on the table as it
//!   stands is empty (e.g. compaction's inputs were replaced meanwhile) — an append is
//!   never overwritten, and a maintenance change whose plan still holds lands instead of
//!   waiting for the next pass ([`Outcome::Unchanged`] says whether a conflict preceded).
//! - Anything else (storage, a table to create that exists, a dropped table) fails the
//!   commit with nothing committed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::future::try_join_all;
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, Result};
use tokio::sync::OwnedMutexGuard;

use super::stage::{Stage, Staged};
use super::{RedbCatalog, Release};

/// Times a commit is staged again after a retryable conflict of its release before it
/// fails with the conflict: iceberg's `commit.retry.num-retries` default.
pub const COMMIT_RETRIES: u32 = 4;

/// The wait before the first re-stage; it doubles before each further one.
pub const RETRY_BASE_WAIT: Duration = Duration::from_millis(20);

/// The driver's retry policy (module docs): count, first wait, longest wait, and whether
/// each wait is jittered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPolicy {
    /// Re-stages after a retryable conflict before failing.
    pub retries: u32,
    /// Wait before the first re-stage; doubled before each further one.
    pub base_wait: Duration,
    /// The longest wait before one re-stage.
    pub max_wait: Duration,
    /// Each wait is drawn between half of it and all of it, so that commits which
    /// conflicted together do not stage again in lockstep.
    pub jitter: bool,
    /// The most time all waits of one commit may add up to (`None`: no bound beyond the
    /// retries).
    pub total_wait: Option<Duration>,
}

/// The policy of every commit on the embedded redb catalog: this process's commit turns
/// already serialize its commits of one table, so a conflict is rare (a commit made
/// without the turn); iceberg's `commit.retry.num-retries` default.
pub const COMMIT_POLICY: CommitPolicy = CommitPolicy {
    retries: COMMIT_RETRIES,
    base_wait: RETRY_BASE_WAIT,
    max_wait: Duration::from_millis(160),
    jitter: false,
    total_wait: None,
};

/// The policy of every commit on a shared (PostgreSQL) catalog: writers that take no
/// commit turn (another JDBC-catalog engine, instances with `--catalog-commit-turn
/// instance`, a commit whose database turn could not be had) conflict whenever their
/// commits overlap; more re-stages, each wait jittered and capped at 320 ms, let them
/// take turns (measured in `skade-bench -- shared`, counted in
/// `skade_commit_conflicts_total`).
pub const SHARED_COMMIT_POLICY: CommitPolicy = CommitPolicy {
    retries: 12,
    base_wait: RETRY_BASE_WAIT,
    max_wait: Duration::from_millis(320),
    jitter: true,
    total_wait: None,
};

/// Iceberg's table property: re-stages after a retryable conflict.
pub const RETRY_NUM_RETRIES: &str = "commit.retry.num-retries";
/// Iceberg's table property: the first wait, in milliseconds.
pub const RETRY_MIN_WAIT_MS: &str = "commit.retry.min-wait-ms";
/// Iceberg's table property: the longest wait, in milliseconds.
pub const RETRY_MAX_WAIT_MS: &str = "commit.retry.max-wait-ms";
/// Iceberg's table property: the most time all waits of one commit add up to, in
/// milliseconds.
pub const RETRY_TOTAL_TIMEOUT_MS: &str = "commit.retry.total-timeout-ms";

impl CommitPolicy {
    /// The policy of a commit of `tables` on a store whose default is `default`: each
    /// `commit.retry.*` property a table sets replaces the default's value, as Iceberg's
    /// table properties do (Java's `BaseTransaction`/`SnapshotProducer` read them per
    /// table); when several tables set one, the most cautious value wins (fewest retries,
    /// shortest waits and total). A value that is not a whole number is ignored, as if
    /// unset.
    pub fn of<'t>(default: CommitPolicy, tables: impl IntoIterator<Item = &'t Table>) -> Self {
        let mut set: [Option<u64>; 4] = [None; 4];
        let keys = [
            RETRY_NUM_RETRIES,
            RETRY_MIN_WAIT_MS,
            RETRY_MAX_WAIT_MS,
            RETRY_TOTAL_TIMEOUT_MS,
        ];
        for table in tables {
            let properties = table.metadata().properties();
            for (slot, key) in set.iter_mut().zip(keys) {
                if let Some(value) = properties
                    .get(key)
                    .and_then(|v| v.trim().parse::<u64>().ok())
                {
                    *slot = Some(slot.map_or(value, |kept| kept.min(value)));
                }
            }
        }
        let [retries, min_wait, max_wait, total] = set;
        let mut policy = default;
        if let Some(retries) = retries {
            policy.retries = u32::try_from(retries).unwrap_or(u32::MAX);
        }
        if let Some(ms) = min_wait {
            policy.base_wait = Duration::from_millis(ms);
        }
        if let Some(ms) = max_wait {
            policy.max_wait = Duration::from_millis(ms);
        }
        if let Some(ms) = total {
            policy.total_wait = Some(Duration::from_millis(ms));
        }
        policy
    }

    /// The waits before each re-stage, in order (`backon`'s exponential backoff: the
    /// first `base_wait`, doubling up to `max_wait`; jittered, each drawn between half of
    /// its value and all of it; at most `retries` of them, adding up to at most
    /// `total_wait`).
    fn waits(&self) -> backon::ExponentialBackoff {
        let builder = ExponentialBuilder::new()
            .with_factor(2.0)
            .with_max_times(self.retries as usize);
        let builder = match self.total_wait {
            Some(total) => builder.with_total_delay(Some(total)),
            None => builder,
        };
        // backon's jitter adds up to the whole delay: halved first, the waits span
        // [delay/2, delay), as the policy says.
        if self.jitter {
            builder
                .with_min_delay(self.base_wait / 2)
                .with_max_delay(self.max_wait / 2)
                .with_jitter()
                .build()
        } else {
            builder
                .with_min_delay(self.base_wait)
                .with_max_delay(self.max_wait)
                .build()
        }
    }
}

/// One table a commit is built for.
#[derive(Debug, Clone)]
pub enum CommitTarget {
    /// A table in the catalog, as the caller's handle saw it. The commit lands only in the
    /// same table (same uuid); with `same_spec`, only while its default partition spec is
    /// still the handle's (data files carry the spec they were split by).
    Existing {
        /// The caller's handle.
        table: Table,
        /// Whether the default partition spec must be unchanged (data commits).
        same_spec: bool,
    },
    /// A table the commit creates, planned by [`RedbCatalog::plan_table`].
    Create(Table),
}

impl CommitTarget {
    /// A commit of data files written for `table` (uuid and partition spec checked).
    pub fn data(table: &Table) -> Self {
        Self::Existing {
            table: table.clone(),
            same_spec: true,
        }
    }

    /// A metadata commit on `table` (uuid checked; the partition spec may change).
    pub fn metadata(table: &Table) -> Self {
        Self::Existing {
            table: table.clone(),
            same_spec: false,
        }
    }

    /// The caller's handle (or the planned table).
    pub fn table(&self) -> &Table {
        match self {
            Self::Existing { table, .. } | Self::Create(table) => table,
        }
    }
}

/// How a driven commit ended (errors aside).
#[derive(Debug)]
pub enum Outcome<T> {
    /// Committed: the tables after the commit (in target order) and the stage's value.
    Committed(Vec<Table>, T),
    /// The stage gave way; nothing was committed. `after_conflict`: a conflict of an
    /// earlier attempt preceded (the caller's change was overtaken), else the first
    /// stage found nothing to commit.
    Unchanged {
        /// Whether an earlier attempt's release conflicted.
        after_conflict: bool,
    },
}

impl<T> Outcome<T> {
    /// The committed tables, or `None` when the stage gave way.
    pub fn committed(self) -> Option<(Vec<Table>, T)> {
        match self {
            Self::Committed(tables, value) => Some((tables, value)),
            Self::Unchanged { .. } => None,
        }
    }
}

/// This process's commit turns on some tables, held until dropped ([`RedbCatalog::commit_turns`]);
/// on a shared catalog also the same turns across instances, when they could be had.
#[derive(Debug)]
#[must_use = "dropping the turns lets other commits of the tables run"]
pub struct CommitTurns {
    uuids: Vec<uuid::Uuid>,
    /// Dropped first: the store's turns across instances are handed back while this
    /// process's are held.
    database: Option<Box<dyn super::store::HeldTurns>>,
    _held: Vec<OwnedMutexGuard<()>>,
}

impl CommitTurns {
    fn covers(&self, uuid: uuid::Uuid) -> bool {
        self.uuids.binary_search(&uuid).is_ok()
    }

    /// The pointer of `ident` read when the database turn was taken, for the first
    /// commit under these turns only.
    fn fresh_pointer(&self, ident: &iceberg::TableIdent) -> Option<String> {
        self.database.as_ref()?.take_pointer(ident)
    }
}

/// The per-table locks behind the commit turns, by table uuid.
///
/// Snapshot history is linear, so commits to one table cannot run in parallel anyway;
/// taking turns in-process means concurrent commits to one table never race on the
/// catalog's compare-and-swap (and never write manifests that a lost race throws away).
#[derive(Debug, Default)]
pub(super) struct Turns {
    locks: Mutex<HashMap<uuid::Uuid, Weak<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    fn lock_of(&self, uuid: uuid::Uuid) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lock) = locks.get(&uuid).and_then(Weak::upgrade) {
            return lock;
        }
        if locks.len() >= 1024 {
            locks.retain(|_, lock| lock.strong_count() > 0);
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(uuid, Arc::downgrade(&lock));
        lock
    }
}

impl RedbCatalog {
    /// Takes this process's commit turn on every table in `tables` (by uuid, in uuid
    /// order, so two callers taking several turns cannot deadlock), waiting for commits
    /// of those tables already under way. While held, no other commit of this process
    /// moves those tables; commits from elsewhere are still caught by the release's
    /// compare-and-swap. Also what a drop or rename waits on (REST DDL).
    ///
    /// On a shared catalog with `--catalog-commit-turn database` it then takes the same
    /// turns in the catalog database, waiting while another instance commits one of the
    /// tables ([`super::store::postgres::turns`]). When they cannot be had (no turn connection
    /// free, the database failing) the turns are this process's only, the commit goes
    /// ahead under the compare-and-swap, and `skade_commit_turn_skipped_total` counts it.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes takes no turn.
    pub async fn commit_turns<'t>(
        &self,
        tables: impl IntoIterator<Item = &'t Table>,
    ) -> CommitTurns {
        let mut tables: Vec<(uuid::Uuid, &iceberg::TableIdent)> = tables
            .into_iter()
            .map(|t| (t.metadata().uuid(), t.identifier()))
            .collect();
        tables.sort_unstable_by_key(|(uuid, _)| *uuid);
        tables.dedup_by_key(|(uuid, _)| *uuid);
        let uuids: Vec<uuid::Uuid> = tables.iter().map(|(uuid, _)| *uuid).collect();
        let mut held = Vec::with_capacity(uuids.len());
        for &uuid in &uuids {
            held.push(self.turns.lock_of(uuid).lock_owned().await);
        }
        let database = match self.store.take_turns(&tables).await {
            Ok(turns) => turns,
            Err(e) => {
                self.committer.counters.record_turn_skipped();
                tracing::debug!(error = %e, "commit without its turn across instances");
                None
            }
        };
        CommitTurns {
            uuids,
            database,
            _held: held,
        }
    }

    /// Runs one commit of `targets` through the driver (module docs): takes their turns,
    /// then [`Self::commit_in_turn`]. `stage` is run on the tables as they stand (in
    /// target order; a planned table for a [`CommitTarget::Create`]) on every attempt and
    /// builds each target's change, or gives way.
    ///
    /// # Errors
    /// As [`Self::commit_in_turn`].
    ///
    /// # Cancel safety
    /// Dropping the future before the release's transaction commits commits nothing;
    /// once queued in the group commit it commits with its batch.
    pub async fn commit<S: Stage>(
        &self,
        targets: &[CommitTarget],
        stage: &mut S,
    ) -> std::result::Result<Outcome<S::Out>, S::Error> {
        let turns = self
            .commit_turns(targets.iter().map(CommitTarget::table))
            .await;
        self.commit_in_turn(&turns, targets, stage).await
    }

    /// [`Self::commit`] by a caller that already holds the targets' turns (table
    /// maintenance, which plans under its turn).
    ///
    /// # Errors
    /// - `TableNotFound` naming the table when a target is no longer in the catalog, or
    ///   another table (another uuid) now has its name;
    /// - `CatalogCommitConflicts`, not retryable, when a data commit's table changed its
    ///   default partition spec;
    /// - the stage's error, unretried;
    /// - the release's error ([`Self::atomic_release_raw`]): a retryable conflict that
    ///   outlasted the policy ([`CommitPolicy::of`]), `TableAlreadyExists`,
    ///   `PreconditionFailed` (a producer's mark), or a storage failure;
    /// - `Unexpected` when `turns` does not cover every target (a caller's bug).
    ///
    /// Every error but the stage's own is the driver's `iceberg::Error`, converted into
    /// the stage's error type. Nothing is committed on any error.
    ///
    /// # Cancel safety
    /// As [`Self::commit`].
    pub async fn commit_in_turn<S: Stage>(
        &self,
        turns: &CommitTurns,
        targets: &[CommitTarget],
        stage: &mut S,
    ) -> std::result::Result<Outcome<S::Out>, S::Error> {
        if let Some(target) = targets
            .iter()
            .find(|t| !turns.covers(t.table().metadata().uuid()))
        {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "commit of table {} without its commit turn",
                    target.table().identifier()
                ),
            )
            .into());
        }
        let mut waits = CommitPolicy::of(
            self.store.commit_policy(),
            targets.iter().map(CommitTarget::table),
        )
        .waits();
        let mut attempt = 0;
        loop {
            // The first attempt builds on the caller's handles where they are still
            // current; after a conflict every table is loaded again.
            let current = self
                .load_current(targets, (attempt == 0).then_some(turns))
                .await?;
            for (target, current) in targets.iter().zip(&current) {
                if let CommitTarget::Existing { table, same_spec } = target {
                    same_table(table, current)?;
                    if *same_spec {
                        check_spec(table, current)?;
                    }
                }
            }
            let Some(Staged { changes, out }) = stage.stage(&current).await? else {
                return Ok(Outcome::Unchanged {
                    after_conflict: attempt > 0,
                });
            };
            let batch = release_of(targets, current, changes)?;
            let error = match self.atomic_release_raw(batch).await {
                Ok(tables) => return Ok(Outcome::Committed(tables, out)),
                Err(e) => e,
            };
            let wait = (error.kind() == ErrorKind::CatalogCommitConflicts && error.retryable())
                .then(|| waits.next())
                .flatten();
            let Some(wait) = wait else {
                return Err(error.into());
            };
            attempt += 1;
            self.committer.counters.record_conflict();
            tracing::debug!(attempt, error = %error, "commit conflict, staging again");
            tokio::time::sleep(wait).await;
        }
    }

    /// [`Self::commit`] of one table that must commit (a stage that gives way is a
    /// caller's bug here): the table after the commit.
    ///
    /// # Errors
    /// As [`Self::commit`]; `Unexpected` when the stage gave way.
    pub async fn commit_one<S: Stage>(
        &self,
        target: &CommitTarget,
        stage: &mut S,
    ) -> std::result::Result<Table, S::Error> {
        let outcome = self.commit(std::slice::from_ref(target), stage).await?;
        outcome
            .committed()
            .and_then(|(mut tables, _)| tables.pop())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "the commit gave way: nothing committed",
                )
                .into()
            })
    }

    /// Every target's table as it stands, all at once: a planned table as given; an
    /// existing one as the caller's handle when `reuse` is given and its pointer has not
    /// moved (the pointer read when the database turn was taken, else read now), else
    /// loaded.
    async fn load_current(
        &self,
        targets: &[CommitTarget],
        reuse: Option<&CommitTurns>,
    ) -> Result<Vec<Table>> {
        try_join_all(targets.iter().map(|target| async move {
            let table = match target {
                CommitTarget::Create(planned) => return Ok(planned.clone()),
                CommitTarget::Existing { table, .. } => table,
            };
            let ident = table.identifier();
            if let Some(turns) = reuse {
                let at = match turns.fresh_pointer(ident) {
                    Some(at) => at,
                    None => self.metadata_location(ident).await?,
                };
                if table.metadata_location() == Some(at.as_str()) {
                    return Ok(table.clone());
                }
            }
            self.load_table(ident).await
        }))
        .await
    }
}

/// The release of `changes` (one per target, in target order) built on `current`.
///
/// # Errors
/// `Unexpected` when the stage built another number of changes than there are targets.
fn release_of(
    targets: &[CommitTarget],
    current: Vec<Table>,
    changes: Vec<super::stage::TableChange>,
) -> Result<Vec<Release>> {
    if changes.len() != targets.len() {
        return Err(Error::new(
            ErrorKind::Unexpected,
            format!(
                "a commit of {} tables staged {} of them",
                targets.len(),
                changes.len()
            ),
        ));
    }
    Ok(targets
        .iter()
        .zip(current)
        .zip(changes)
        .map(|((target, table), change)| match target {
            CommitTarget::Existing { .. } => Release::AdvanceLoaded {
                table,
                requirements: change.requirements,
                updates: change.updates,
                mark: change.mark,
            },
            CommitTarget::Create(_) => Release::Create {
                table,
                requirements: change.requirements,
                updates: change.updates,
                mark: change.mark,
            },
        })
        .collect())
}

/// Checks that `current` (the table as it stands under this name) is the table `written`
/// was loaded as: a table dropped and created again under the same name while a write
/// was open is another table (another uuid), and the commit must not land in it.
///
/// # Errors
/// `TableNotFound` naming the table.
fn same_table(written: &Table, current: &Table) -> Result<()> {
    if written.metadata().uuid() == current.metadata().uuid() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::TableNotFound,
        format!(
            "table {} was dropped (and another table created under its name) while \
             these rows were being written; nothing of them is committed",
            written.identifier()
        ),
    ))
}

/// Checks that `current` still has the default partition spec of `written` (the handle
/// the data files were written for): a data file carries the spec it was split by, and
/// an append takes files of the default spec only.
///
/// # Errors
/// `CatalogCommitConflicts` (not retryable) naming both spec ids.
fn check_spec(written: &Table, current: &Table) -> Result<()> {
    let (was, now) = (
        written.metadata().default_partition_spec_id(),
        current.metadata().default_partition_spec_id(),
    );
    if was == now {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!(
            "the table's partition spec changed (id {was} → {now}) after these rows were \
             split by the old one; nothing of them is committed: retry the write"
        ),
    ))
}
