//! What instances sharing one catalog database must know of each other: which are alive,
//! the oldest write pin each holds (so no instance's cleanup removes a file another
//! instance's open put or transaction will still commit), and who maintains a table.
//!
//! **Registration.** Each instance has a row in `skade_instances` (a random id), whose
//! `heartbeat_at` it renews every [`HEARTBEAT_EVERY`] and in every commit transaction,
//! publishing its oldest live write pin (`oldest_pin_ms`, wall clock) with it. An
//! instance not heard from for [`INSTANCE_TIMEOUT`] (the database's clock) is dead to
//! the others: its pins stop protecting its files. A renewal only succeeds while the row
//! has not expired, so once the others may have removed its files, an instance learns it
//! at its next renewal, registers again under a new id, and from then on refuses every
//! commit while a write pin taken before the new registration is live (those writers'
//! files may be gone; they fail `Unavailable` and their clients retry). New writers
//! commit as before.
//!
//! **Cleanup's pin.** [`Instance::cluster_oldest_pin`]: the oldest pin of every live
//! instance, and never later than now less [`PIN_PUBLISH_BOUND`], which covers a pin
//! taken and not yet published.
//!
//! **Maintenance.** A table is maintained by the instance holding the session-level
//! advisory lock of its name ([`PgStore::hold_lease`]), kept on a connection of its own
//! from pass to pass; an instance that dies drops its connection, and with it the locks,
//! so another instance takes its tables over at its next pass. One instance sweeps the
//! warehouse the same way.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::Object;
use iceberg::{Error, Result};

use super::PgStore;
use crate::catalog::pins::Pins;

/// How often an instance renews its registration and publishes its oldest write pin.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// How long an instance may go without a renewal before the others take it for dead.
pub const INSTANCE_TIMEOUT: Duration = Duration::from_secs(60);
/// Cleanup treats every file modified this recently as pinned: a pin is published within
/// [`HEARTBEAT_EVERY`] of being taken (or sooner, by a commit), so this bound covers a
/// few missed renewals and clocks a little apart.
pub const PIN_PUBLISH_BOUND: Duration = Duration::from_secs(10);
/// Rows of instances not heard from for this long are removed by the live instances'
/// heartbeats (a killed instance's row; one that stops cleanly removes its own): ten
/// instance timeouts, so a row is never removed while its instance may still renew it.
pub const FORGET_INSTANCES_AFTER: Duration = Duration::from_secs(10 * 60);
/// How long an instance that stops (or a `skade gc` that ends) waits for the database to
/// remove its row before leaving it to the others' heartbeats.
const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(2);

/// This instance's registration.
#[derive(Debug)]
pub(crate) struct Instance {
    catalog: String,
    pins: Arc<Pins>,
    state: Mutex<Registration>,
}

#[derive(Debug, Clone)]
struct Registration {
    id: String,
    /// Wall-clock time of the registration: pins older than it may have lost files.
    since: SystemTime,
    /// The last renewal found the row expired; a new one is due.
    lost: bool,
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn interval(d: Duration) -> String {
    format!("{} milliseconds", d.as_millis())
}

impl Instance {
    /// Registers a new instance row.
    pub(super) async fn register(
        client: &Object,
        catalog: &str,
        pins: Arc<Pins>,
    ) -> std::result::Result<Self, tokio_postgres::Error> {
        let registration = insert(client, catalog).await?;
        Ok(Self {
            catalog: catalog.to_string(),
            pins,
            state: Mutex::new(registration),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Registration> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// This instance's id (changes when it registers again).
    pub(crate) fn id(&self) -> String {
        self.lock().id.clone()
    }

    /// Inside a commit transaction: renews the registration and publishes the oldest
    /// pin; refuses the commit when the registration expired, or while a pin taken
    /// before the current registration lives (module docs).
    ///
    /// # Errors
    /// `Unexpected` with an I/O cause (`Unavailable`) for either refusal, or the
    /// database's error.
    pub(super) async fn confirm(
        &self,
        txn: &deadpool_postgres::Transaction<'_>,
        store: &PgStore,
    ) -> Result<()> {
        let registration = self.lock().clone();
        if registration.lost {
            return Err(lost());
        }
        if self
            .pins
            .oldest_taken()
            .is_some_and(|taken| taken < registration.since)
        {
            return Err(super::unavailable(
                "this instance's registration in the catalog database expired while writers \
                 were open (no renewal for the instance timeout): their files may have been \
                 removed by another instance's cleanup, so their commits are refused; retry \
                 the put or transaction"
                    .to_string(),
            ));
        }
        // Prepared once per connection: a commit costs one round trip for it, not two.
        let statement = txn
            .prepare_cached(RENEW)
            .await
            .map_err(|e| store.error(e))?;
        let renewed = self
            .renew(&**txn, &statement, &registration.id)
            .await
            .map_err(|e| store.error(e))?;
        if renewed == 0 {
            self.lock().lost = true;
            return Err(lost());
        }
        Ok(())
    }

    /// Renews registration `id` through `client` (a connection or a commit's transaction)
    /// while it has not expired, publishing the oldest pin; the rows renewed (0: expired).
    /// `statement` is [`RENEW`], as text or prepared.
    async fn renew<S: tokio_postgres::ToStatement + ?Sized + Sync + Send>(
        &self,
        client: &impl tokio_postgres::GenericClient,
        statement: &S,
        id: &str,
    ) -> std::result::Result<u64, tokio_postgres::Error> {
        client
            .execute(
                statement,
                &[
                    &self.catalog,
                    &id,
                    &self.pins.oldest().map(millis),
                    &interval(INSTANCE_TIMEOUT),
                ],
            )
            .await
    }

    /// One renewal outside a commit (the heartbeat): publishes the oldest pin; registers
    /// again when the row expired. Also forgets long-dead instances.
    ///
    /// # Errors
    /// The database's error.
    pub(super) async fn heartbeat(&self, store: &PgStore) -> Result<()> {
        let client = store.client().await?;
        let registration = self.lock().clone();
        let renewed = if registration.lost {
            0
        } else {
            self.renew(&**client, RENEW, &registration.id)
                .await
                .map_err(|e| store.error(e))?
        };
        if renewed == 0 {
            let fresh = insert(&client, &self.catalog)
                .await
                .map_err(|e| store.error(e))?;
            tracing::warn!(
                old = %registration.id,
                new = %fresh.id,
                "this instance's registration in the catalog database had expired; registered again"
            );
            *self.lock() = fresh;
        }
        client
            .execute(
                "DELETE FROM skade_instances WHERE catalog_name = $1
                   AND heartbeat_at < now() - $2::text::interval",
                &[&self.catalog, &interval(FORGET_INSTANCES_AFTER)],
            )
            .await
            .map_err(|e| store.error(e))?;
        Ok(())
    }

    /// The oldest write pin of any live instance (this one's read locally), and never
    /// later than now less [`PIN_PUBLISH_BOUND`].
    ///
    /// # Errors
    /// The database's error: cleanup then removes nothing.
    pub(super) async fn cluster_oldest_pin(&self, store: &PgStore) -> Result<SystemTime> {
        let client = store.client().await?;
        let row = client
            .query_one(
                "SELECT MIN(oldest_pin_ms) FROM skade_instances
                 WHERE catalog_name = $1 AND heartbeat_at > now() - $2::text::interval",
                &[&self.catalog, &interval(INSTANCE_TIMEOUT)],
            )
            .await
            .map_err(|e| store.error(e))?;
        let published: Option<i64> = row.get(0);
        let bound = SystemTime::now()
            .checked_sub(PIN_PUBLISH_BOUND)
            .unwrap_or(UNIX_EPOCH);
        let published =
            published.map(|ms| UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        Ok([Some(bound), published, self.pins.oldest()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(bound))
    }
}

async fn insert(
    client: &Object,
    catalog: &str,
) -> std::result::Result<Registration, tokio_postgres::Error> {
    let id = uuid::Uuid::new_v4().to_string();
    let host = host_name();
    client
        .execute(
            "INSERT INTO skade_instances (catalog_name, instance_id, host) VALUES ($1, $2, $3)",
            &[&catalog, &id, &host],
        )
        .await?;
    Ok(Registration {
        id,
        since: SystemTime::now(),
        lost: false,
    })
}

/// This machine's name (`gethostname(2)`, as `hostname` prints it), for the
/// `skade_instances` row; `HOSTNAME`, then `unknown`, when it cannot be read.
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it
    // (or truncates, which the search for NUL below handles).
    let named = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name = if named {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    if !name.is_empty() {
        return name;
    }
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

impl Instance {
    /// Removes this instance's row, waiting at most [`DEREGISTER_TIMEOUT`]: called when
    /// the store is dropped (the server stopped, or `skade gc` ended), so the row does
    /// not linger. Runs on a thread of its own with its own connection, so it works
    /// from any context, a runtime's worker included; a database that does not answer
    /// leaves the row to [`FORGET_INSTANCES_AFTER`].
    pub(super) fn deregister(
        &self,
        config: &tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
    ) {
        let (catalog, id) = (self.catalog.clone(), self.id());
        let config = config.clone();
        let done = std::thread::Builder::new()
            .name("skade-deregister".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async move {
                    let remove = async {
                        let (client, connection) = config.connect(tls).await.ok()?;
                        tokio::spawn(async move {
                            let _ = connection.await;
                        });
                        client
                            .execute(
                                "DELETE FROM skade_instances WHERE catalog_name = $1 AND instance_id = $2",
                                &[&catalog, &id],
                            )
                            .await
                            .ok()
                    };
                    let _ = tokio::time::timeout(DEREGISTER_TIMEOUT, remove).await;
                });
            });
        if let Ok(thread) = done {
            let _ = thread.join();
        }
    }
}

fn lost() -> Error {
    super::unavailable(
        "this instance's registration in the catalog database expired (no renewal for the \
         instance timeout); it registers again at its next heartbeat"
            .to_string(),
    )
}

/// The maintenance leases this instance holds: session-level advisory locks on one
/// connection of their own (outside the pool), kept from pass to pass, so a table stays
/// with the instance that first took it until that instance dies (its connection closes
/// and PostgreSQL releases every lock of it) or the connection breaks (then this instance
/// holds nothing until it takes the leases again on a new connection).
#[derive(Debug, Default)]
pub(crate) struct Leases {
    conn: tokio::sync::Mutex<Option<LeaseConnection>>,
}

#[derive(Debug)]
struct LeaseConnection {
    client: tokio_postgres::Client,
    /// The leases held, by key, with the name parts each was taken by.
    held: std::collections::HashMap<i64, Vec<String>>,
    /// When the connection last answered.
    checked: std::time::Instant,
}

/// How long a lease connection that answered is trusted without asking again.
const LEASE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Renews `store`'s registration every [`HEARTBEAT_EVERY`] until the store is dropped.
/// A failed renewal is logged once per outage (the database may be down; commits fail
/// `Unavailable` meanwhile and the next renewal that reaches it catches up).
pub(crate) fn spawn_heartbeat(store: std::sync::Weak<PgStore>) {
    tokio::spawn(async move {
        let mut failing = false;
        loop {
            tokio::time::sleep(HEARTBEAT_EVERY).await;
            let Some(store) = store.upgrade() else {
                return;
            };
            match store.heartbeat().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(database = %store.target(), "catalog database reachable again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e.message(), "catalog database heartbeat failed");
                }
                Err(_) => {}
            }
        }
    });
}

impl PgStore {
    /// Whether this instance holds the lease named by `parts`: taken now when no other
    /// instance holds it, kept once taken ([`Leases`]). A lease connection that no longer
    /// answers is dropped first (its locks are gone), and a new one opened.
    ///
    /// # Errors
    /// The database's error (`Unavailable` when unreachable): this instance then holds
    /// no lease.
    pub(crate) async fn hold_lease(&self, parts: &[&str]) -> Result<bool> {
        let mut conn = self.leases.conn.lock().await;
        // The connection is asked whether it still answers at most once a second, so a
        // pass over many tables costs one round trip for it, not one per table.
        if let Some(open) = conn.as_mut()
            && (open.client.is_closed() || open.checked.elapsed() >= LEASE_CHECK_EVERY)
        {
            if open.client.is_closed() || open.client.simple_query("SELECT 1").await.is_err() {
                tracing::warn!("the maintenance lease connection broke: its leases are released");
                *conn = None;
            } else {
                open.checked = std::time::Instant::now();
            }
        }
        if conn.is_none() {
            let (client, connection) = self
                .config
                .connect(self.tls.make())
                .await
                .map_err(|e| self.error(e))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            *conn = Some(LeaseConnection {
                client,
                held: std::collections::HashMap::new(),
                checked: std::time::Instant::now(),
            });
        }
        let Some(open) = conn.as_mut() else {
            return Ok(false);
        };
        let key = lock_key(parts);
        if open.held.contains_key(&key) {
            return Ok(true);
        }
        let row = open
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .map_err(|e| self.error(e))?;
        let held: bool = row.get(0);
        if held {
            open.held
                .insert(key, parts.iter().map(|p| (*p).to_string()).collect());
        }
        Ok(held)
    }

    /// The name parts of every lease this instance holds now.
    pub(crate) async fn held_leases(&self) -> Vec<Vec<String>> {
        let conn = self.leases.conn.lock().await;
        conn.as_ref()
            .map(|open| open.held.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Hands back the lease named by `parts` when this instance holds it, so another
    /// instance can take it at once.
    ///
    /// # Errors
    /// The database's error; the lease is then still held (or gone with a broken
    /// connection).
    pub(crate) async fn release_lease(&self, parts: &[&str]) -> Result<()> {
        let mut conn = self.leases.conn.lock().await;
        let Some(open) = conn.as_mut() else {
            return Ok(());
        };
        let key = lock_key(parts);
        if !open.held.contains_key(&key) {
            return Ok(());
        }
        open.client
            .query_one("SELECT pg_advisory_unlock($1)", &[&key])
            .await
            .map_err(|e| self.error(e))?;
        open.held.remove(&key);
        Ok(())
    }

    /// Renews this instance's registration; see [`Instance::heartbeat`].
    pub(crate) async fn heartbeat(&self) -> Result<()> {
        self.instance.heartbeat(self).await
    }

    /// See [`Instance::cluster_oldest_pin`].
    pub(crate) async fn cluster_oldest_pin(&self) -> Result<SystemTime> {
        self.instance.cluster_oldest_pin(self).await
    }
}

/// Renews a registration that has not expired ($1 catalog, $2 instance id, $3 oldest pin
/// in ms or NULL, $4 the instance timeout as an interval).
const RENEW: &str = "UPDATE skade_instances SET heartbeat_at = now(), oldest_pin_ms = $3
                 WHERE catalog_name = $1 AND instance_id = $2
                   AND heartbeat_at > now() - $4::text::interval";

/// A 64-bit advisory lock key for a name made of `parts` (FNV-1a over the parts, each
/// ended by a NUL byte): stable across builds and platforms. Two names that collide only
/// share a lock (they take turns).
pub(crate) fn lock_key(parts: &[&str]) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}
