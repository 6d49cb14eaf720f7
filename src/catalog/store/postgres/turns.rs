//! The commit turn across instances: a table's commits from every instance sharing the
//! catalog database take turns on a PostgreSQL advisory lock instead of staging at once
//! and losing the compare-and-swap to each other (`--catalog-commit-turn database`, the
//! default; `docs/scale-out.md` has the measurement that chose it).
//!
//! A turn is `pg_advisory_xact_lock` on each table's key, in table-uuid order (the order
//! [`crate::catalog::RedbCatalog::commit_turns`] takes this process's own turns in, so
//! two multi-table commits never deadlock), taken in an open transaction on a connection
//! of the turn pool and held until the turn is dropped, when the transaction is rolled
//! back. PostgreSQL queues the waiters, so the instances commit one table in the order
//! they asked. The lock only orders commits: the release's compare-and-swap on
//! `metadata_location` still guards every pointer, so a turn that could not be had (the
//! pool busy, the database slow or gone) lets the commit go ahead without it, counted in
//! `skade_commit_turn_skipped_total`, and at worst it conflicts and re-stages as before.
//!
//! What frees a turn when its holder is gone: the holder's death closes its connection
//! (PostgreSQL then ends the transaction and releases the lock), and a holder that stops
//! answering without closing it (a lost node) is ended by the connection's
//! `idle_in_transaction_session_timeout` of [`TURN_IDLE_TIMEOUT`]. A stage that runs
//! longer than that loses its turn the same way, which again costs at most a conflict.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::{Object, Pool, Timeouts};
use iceberg::{Result, TableIdent};

use super::{
    CONNECT_TIMEOUT, IS_TABLE, PgStore, cluster::lock_key, namespace_levels, namespace_string,
};

/// How long a turn may sit unused (its holder staging, or gone without closing its
/// connection) before PostgreSQL ends it and lets the next instance commit the table
/// (`idle_in_transaction_session_timeout` of the turn connections).
pub const TURN_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How commits of one table from several instances sharing a PostgreSQL catalog take
/// turns (`--catalog-commit-turn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CommitTurn {
    /// One turn across all instances: an advisory lock per table in the catalog
    /// database, held from the table's load to its release (module docs).
    #[default]
    Database,
    /// Turns within each instance only: instances stage at once and the loser of the
    /// compare-and-swap stages again (`SHARED_COMMIT_POLICY`).
    Instance,
}

/// The connections turns are held on: a pool of their own beside the commit pool, so a
/// turn held while its commit waits for a commit connection can never starve it.
#[derive(Debug)]
pub(super) struct TurnPool {
    pool: Pool,
}

impl TurnPool {
    /// A pool of at most `size` connections to `config` (with TLS `tls`), each with
    /// [`TURN_IDLE_TIMEOUT`] as its `idle_in_transaction_session_timeout`.
    ///
    /// # Errors
    /// The pool's build error, as text (a bad configuration).
    pub(super) fn new(
        config: &tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
        size: usize,
    ) -> std::result::Result<Self, String> {
        let mut config = config.clone();
        config.options(format!(
            "{} -c idle_in_transaction_session_timeout={}",
            super::session_options(),
            TURN_IDLE_TIMEOUT.as_millis()
        ));
        // A commit never waits for a turn connection ([`PgStore::take_turns`]).
        let pool = super::build_pool(config, tls, size.max(1), None)?;
        Ok(Self { pool })
    }
}

/// The turns on some tables in the catalog database, held until dropped (module docs).
#[derive(Debug)]
pub(crate) struct DatabaseTurns {
    /// The connection whose open transaction holds the locks; `None` once handed back.
    client: Option<Object>,
    /// Whether the locks were taken (else the connection's state is unknown: a query may
    /// still be running on it, so it is closed, not pooled).
    held: bool,
    /// Each table's pointer as read right after its lock was taken, until the first
    /// commit under the turns uses it ([`Self::take_pointer`]).
    pointers: std::sync::Mutex<HashMap<TableIdent, String>>,
}

impl DatabaseTurns {
    /// The pointer of `ident` as read right after its turn was taken, once: the first
    /// commit under these turns needs no read of its own (no commit of the table by a
    /// writer that takes turns can have landed since). `None` once taken, or when the
    /// table was not found.
    pub(crate) fn take_pointer(&self, ident: &TableIdent) -> Option<String> {
        self.pointers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(ident)
    }
}

impl Drop for DatabaseTurns {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let handle = tokio::runtime::Handle::try_current();
        match handle {
            Ok(handle) if self.held => {
                handle.spawn(async move {
                    // A connection that cannot roll back (the database ended it, e.g. at
                    // TURN_IDLE_TIMEOUT) is closed instead of pooled.
                    if client.batch_execute("ROLLBACK").await.is_err() {
                        drop(Object::take(client));
                    }
                });
            }
            // Closing the connection ends its transaction and its locks.
            _ => drop(Object::take(client)),
        }
    }
}

impl PgStore {
    /// Takes the commit turns of `tables` (by uuid, sorted and deduplicated by it) in the
    /// catalog database, waiting while another instance holds one, and reads their
    /// pointers right after, in the same round trip (pipelined on the turn connection):
    /// `Ok(None)` when this instance runs with [`CommitTurn::Instance`].
    ///
    /// Does not wait for a turn connection: when every one is in use the commit goes
    /// ahead without the turn (the caller counts it).
    ///
    /// # Errors
    /// The pool's or the database's error (no connection free, the database down, the
    /// wait past `statement_timeout`); the caller goes ahead without the turns.
    ///
    /// # Cancel safety
    /// Dropping the future takes no turn (the connection, which may still be waiting for
    /// a lock, is closed).
    pub(crate) async fn take_turns(
        &self,
        tables: &[(uuid::Uuid, &TableIdent)],
    ) -> Result<Option<DatabaseTurns>> {
        let Some(turns) = &self.turns else {
            return Ok(None);
        };
        let client = turns
            .pool
            .timeout_get(&Timeouts {
                wait: Some(Duration::ZERO),
                create: Some(CONNECT_TIMEOUT),
                recycle: Some(CONNECT_TIMEOUT),
            })
            .await
            .map_err(|e| super::unavailable(super::pool_reason(&e)))?;
        let mut taken = DatabaseTurns {
            client: Some(client),
            held: false,
            pointers: std::sync::Mutex::default(),
        };
        let mut sql = String::from("BEGIN;");
        let (mut namespaces, mut names) = (Vec::new(), Vec::new());
        for (uuid, ident) in tables {
            let key = lock_key(&["turn", &self.catalog, &uuid.to_string()]);
            sql.push_str(&format!(" SELECT pg_advisory_xact_lock({key});"));
            // A level the JDBC catalog cannot hold: no such row; the commit reads (and
            // fails) as it would without the turn.
            if let Ok(ns) = namespace_string(ident.namespace().as_ref()) {
                namespaces.push(ns);
                names.push(ident.name().to_string());
            }
        }
        let Some(client) = &taken.client else {
            return Ok(None);
        };
        let read = client
            .prepare_cached(&format!(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables t
                 JOIN unnest($2::text[], $3::text[]) AS k(ns, name)
                   ON t.table_namespace = k.ns AND t.table_name = k.name
                 WHERE t.catalog_name = $1 AND {IS_TABLE}"
            ))
            .await
            .map_err(|e| self.error(e))?;
        // Sent back to back: the read runs once the locks are taken, in their transaction.
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&self.catalog, &namespaces, &names];
        let (locked, rows) =
            futures::join!(client.batch_execute(&sql), client.query(&read, &params));
        locked.map_err(|e| self.error(e))?;
        let rows = rows.map_err(|e| self.error(e))?;
        taken.held = true;
        let mut pointers = HashMap::new();
        for row in rows {
            let (ns, name, location): (String, String, Option<String>) =
                (row.get(0), row.get(1), row.get(2));
            let Some(location) = location else { continue };
            if let Ok(namespace) = iceberg::NamespaceIdent::from_vec(namespace_levels(&ns)) {
                pointers.insert(TableIdent::new(namespace, name), location);
            }
        }
        taken.pointers = std::sync::Mutex::new(pointers);
        Ok(Some(taken))
    }
}
