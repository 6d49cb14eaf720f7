//! A private PostgreSQL cluster for one test: `tests/pg/cluster.sh` in a fresh temp dir
//! (initdb, the server on 127.0.0.1 on a free port, trust authentication for the
//! superuser `postgres`, a database `skade`), stopped and deleted on drop.
//!
//! PostgreSQL comes from `tests/pg/install-postgres.sh` (tests/run.sh runs it). As root,
//! cluster.sh runs the server as the OS user `postgres`; the temp dir is made directly in
//! the system temp dir so that user can reach it. Every call blocks (start: about 2 s);
//! call them before starting servers or from `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `tests/pg/cluster.sh` in this checkout.
fn cluster_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pg/cluster.sh")
}

/// One running cluster; [`Drop`] stops it (immediate) and deletes its directory.
pub struct PgCluster {
    dir: tempfile::TempDir,
    url: String,
}

impl PgCluster {
    /// Starts a cluster in a fresh temp dir and creates its database `skade`.
    ///
    /// While this test process lives the cluster is its own: cluster.sh's watcher
    /// (`PG_CLUSTER_OWNER`) stops the server once the process is gone, even when it was
    /// killed.
    ///
    /// # Panics
    /// When cluster.sh fails, with its stderr and a pointer to
    /// `tests/pg/install-postgres.sh` (the usual cause: PostgreSQL is not installed).
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("skade-pg-")
            .tempdir_in(std::env::temp_dir())
            .expect("temp dir for the PostgreSQL cluster");
        let out = run(dir.path(), "start", &[]);
        let url = stdout_line(&out);
        Self { dir, url }
    }

    /// `postgres://postgres@127.0.0.1:<port>/skade`: the form `skade serve --catalog`
    /// takes.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `CREATE DATABASE <name>` (`name`: a-z, 0-9 and `_`, so it needs no quoting);
    /// returns its URL, `postgres://postgres@127.0.0.1:<port>/<name>`.
    ///
    /// # Panics
    /// On a name outside that alphabet, or when psql fails (e.g. the database exists).
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "database name must be a-z, 0-9 and _: {name:?}"
        );
        run(
            self.dir.path(),
            "psql",
            &["-d", "postgres", "-c", &format!("CREATE DATABASE {name}")],
        );
        let (base, _) = self
            .url
            .rsplit_once('/')
            .expect("cluster URL has a database");
        format!("{base}/{name}")
    }

    /// `pg_ctl stop -m immediate`: the server dies as in a crash (no checkpoint; the
    /// next start runs crash recovery). Clients see their connections drop.
    pub fn stop_immediate(&self) {
        run(self.dir.path(), "stop", &["immediate"]);
    }

    /// Stops the server (fast) when it runs, and starts it again on the same port with
    /// the same data: [`PgCluster::url`] stays valid.
    ///
    /// # Panics
    /// When the server does not come back (e.g. another process took the port meanwhile).
    pub fn restart(&self) {
        let out = run(self.dir.path(), "restart", &[]);
        assert_eq!(stdout_line(&out), self.url, "restart moved the cluster");
    }
}

impl PgCluster {
    /// Makes the server speak TLS with the PEM certificate `cert` and key `key` and
    /// refuse connections over 127.0.0.1 without it (`cluster.sh tls`).
    ///
    /// # Panics
    /// When cluster.sh fails.
    pub fn require_tls(&self, cert: &Path, key: &Path) {
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        run(self.dir.path(), "tls", &[&cert, &key]);
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Immediate: the data is deleted with the directory right after.
        let _ = command(self.dir.path(), "stop", &["immediate"]).output();
    }
}

/// Runs `psql <url> -c <sql>` (no psqlrc, stop on error, unaligned tuples only) and
/// returns its stdout without the final newline.
///
/// # Panics
/// When psql cannot be run or exits non-zero, with its stderr.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA", url, "-c", sql])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run psql ({e}): run tests/pg/install-postgres.sh"));
    assert!(
        out.status.success(),
        "psql {url} -c {sql:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_string()
}

/// Whether `psql <url> -c 'SELECT 1'` succeeds (the server answers at `url`).
pub fn answers(url: &str) -> bool {
    Command::new("psql")
        .args(["-X", "-q", "-tA", url, "-c", "SELECT 1"])
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn command(dir: &Path, subcommand: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(cluster_sh());
    cmd.arg(subcommand)
        .arg(dir)
        .args(args)
        .env("PG_CLUSTER_OWNER", std::process::id().to_string())
        .stdin(Stdio::null());
    cmd
}

fn run(dir: &Path, subcommand: &str, args: &[&str]) -> Output {
    let out = command(dir, subcommand, args)
        .output()
        .unwrap_or_else(|e| panic!("run {} ({e})", cluster_sh().display()));
    assert!(
        out.status.success(),
        "tests/pg/cluster.sh {subcommand} {} failed ({}): {}\n\
         (is PostgreSQL installed? run tests/pg/install-postgres.sh)",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim_end()
    );
    out
}

fn stdout_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
