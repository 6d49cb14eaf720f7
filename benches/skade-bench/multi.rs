//! `multi`: TPC-H's 8 tables as ONE Flight SQL transaction vs 8 autocommit ingests,
//! against a real server on 127.0.0.1, measured from the server's own `/metrics`.

use std::net::SocketAddr;

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandStatementIngest, EndTransaction, TableDefinitionOptions, TableExistsOption,
    TableNotExistOption,
};
use bytes::Bytes;
use skade::metrics::{
    CATALOG_COMMITS_TOTAL, COMMIT_DURATION_SECONDS, FILE_SYNCS_TOTAL, LANE_MULTI, LANE_STREAM,
};
use tonic::transport::Channel;

use crate::common::*;
use crate::tpch::{self, TpchTable};

/// Scale factor when `SKADE_MULTI_SF` is unset: about 867,000 rows (≈ 172 MB of Arrow) in
/// all, so the arm stays near a minute at 3 runs on 2 cores.
const DEFAULT_SF: f64 = 0.1;

/// One sample of a `/metrics` scrape.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// One scrape of the server's `/metrics` (Prometheus text format).
pub(crate) struct Scrape(Vec<Sample>);

impl Scrape {
    /// GETs `/metrics` from `addr` (HTTP/1.0, one request per connection).
    pub(crate) async fn take(addr: SocketAddr) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to the metrics address");
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send the scrape request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .expect("read the scrape response");
        let (head, body) = response
            .split_once("\r\n\r\n")
            .expect("an HTTP response has a header and a body");
        assert!(head.contains(" 200 "), "/metrics answered {head:?}");
        Self::parse(body)
    }

    fn parse(body: &str) -> Self {
        let samples = body
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let value = match value {
                    "+Inf" => f64::INFINITY,
                    v => v.parse().ok()?,
                };
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split(',')
                    .filter_map(|pair| {
                        let (k, v) = pair.split_once('=')?;
                        Some((k.to_string(), v.trim_matches('"').to_string()))
                    })
                    .collect();
                Some(Sample {
                    name: name.to_string(),
                    labels,
                    value,
                })
            })
            .collect();
        Self(samples)
    }

    /// The samples named `name` that carry every label of `labels`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.0.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
    }

    /// Sum of the samples named `name` with `labels`; 0 when there is none (a metric
    /// with labels appears only after its first observation).
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The commit-duration histogram of `lane`.
    fn commit_histogram(&self, lane: &str) -> Histogram {
        let labels = [("lane", lane)];
        let mut buckets: Vec<(f64, f64)> = self
            .matching(&format!("{COMMIT_DURATION_SECONDS}_bucket"), &labels)
            .filter_map(|s| {
                let le = s.labels.iter().find(|(k, _)| k == "le")?.1.as_str();
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, s.value))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram {
            sum_seconds: self.value(&format!("{COMMIT_DURATION_SECONDS}_sum"), &labels),
            count: self.value(&format!("{COMMIT_DURATION_SECONDS}_count"), &labels),
            buckets,
        }
    }
}

/// A commit-duration histogram, or the difference of two scrapes of it.
struct Histogram {
    /// Sum of the observations, seconds.
    sum_seconds: f64,
    /// Number of observations (commits).
    count: f64,
    /// Cumulative observation counts by upper bound in seconds, ascending, `+Inf` last.
    buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// The observations made after `before` (an earlier scrape of the same series).
    fn since(&self, before: &Histogram) -> Histogram {
        let earlier = |le: f64| {
            before
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, n)| *n)
        };
        Histogram {
            sum_seconds: self.sum_seconds - before.sum_seconds,
            count: self.count - before.count,
            buckets: self
                .buckets
                .iter()
                .map(|&(le, n)| (le, n - earlier(le)))
                .collect(),
        }
    }

    /// Mean observation, seconds (exact: sum / count); NaN without observations.
    fn mean_seconds(&self) -> f64 {
        self.sum_seconds / self.count
    }

    /// The `q` quantile (0 ≤ q ≤ 1) in seconds, interpolated linearly inside its bucket as
    /// Prometheus' `histogram_quantile` does: only as fine as the buckets.
    fn quantile_seconds(&self, q: f64) -> f64 {
        let rank = q * self.count;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, n) in &self.buckets {
            if n >= rank && n > below {
                if le.is_infinite() {
                    return lower;
                }
                return lower + (le - lower) * (rank - below) / (n - below);
            }
            (lower, below) = (le, n);
        }
        f64::NAN
    }
}

/// What one run of one lane measured.
struct LaneRun {
    /// `skade_catalog_commits_total` delta: durable redb write transactions (fsyncs).
    commits: f64,
    /// `skade_file_syncs_total` delta: warehouse `syncfs` calls.
    file_syncs: f64,
    /// Seconds from the lane's first RPC until its last answer.
    wall_seconds: f64,
    /// Seconds of the `EndTransaction(COMMIT)` call as the client saw it (transaction
    /// lane only).
    end_txn_seconds: Option<f64>,
    /// The server's commit-duration histogram delta on the lane's label.
    commit: Histogram,
}

impl LaneRun {
    fn between(
        before: &Scrape,
        after: &Scrape,
        lane: &str,
        wall_seconds: f64,
        end_txn_seconds: Option<f64>,
    ) -> Self {
        let delta = |name: &str| after.value(name, &[]) - before.value(name, &[]);
        Self {
            commits: delta(CATALOG_COMMITS_TOTAL),
            file_syncs: delta(FILE_SYNCS_TOTAL),
            wall_seconds,
            end_txn_seconds,
            commit: after
                .commit_histogram(lane)
                .since(&before.commit_histogram(lane)),
        }
    }
}

/// `create_append` into `ns`.`table`, in transaction `txn` when given.
fn ingest_cmd(ns: &str, table: &str, txn: Option<Bytes>) -> CommandStatementIngest {
    CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create as i32,
            if_exists: TableExistsOption::Append as i32,
        }),
        table: table.to_string(),
        schema: Some(ns.to_string()),
        catalog: None,
        temporary: false,
        transaction_id: txn,
        options: Default::default(),
    }
}

/// Sends every batch of `table` as one `CommandStatementIngest` DoPut; panics unless the
/// server read every row.
async fn ingest(
    client: &mut FlightSqlServiceClient<Channel>,
    ns: &str,
    table: &TpchTable,
    txn: Option<Bytes>,
) {
    let batches = futures::stream::iter(table.batches.clone().into_iter().map(Ok));
    let rows = client
        .execute_ingest(ingest_cmd(ns, table.name, txn), batches)
        .await
        .expect("CommandStatementIngest");
    assert_eq!(
        rows,
        table.rows() as i64,
        "rows read of {ns}.{}",
        table.name
    );
}

/// (a) BeginTransaction, one ingest per table with the transaction id, EndTransaction
/// COMMIT: one catalog commit for all tables.
async fn transaction(
    client: &mut FlightSqlServiceClient<Channel>,
    metrics: SocketAddr,
    ns: &str,
    tables: &[TpchTable],
) -> LaneRun {
    let before = Scrape::take(metrics).await;
    let started = Instant::now();
    let txn = client.begin_transaction().await.expect("BeginTransaction");
    for table in tables {
        ingest(client, ns, table, Some(txn.clone())).await;
    }
    let commit_started = Instant::now();
    client
        .end_transaction(txn, EndTransaction::Commit)
        .await
        .expect("EndTransaction(COMMIT)");
    let end_txn_seconds = commit_started.elapsed().as_secs_f64();
    let wall_seconds = started.elapsed().as_secs_f64();
    let after = Scrape::take(metrics).await;
    LaneRun::between(
        &before,
        &after,
        LANE_MULTI,
        wall_seconds,
        Some(end_txn_seconds),
    )
}

/// (b) One autocommit ingest per table, one after another: one catalog commit each.
async fn autocommit(
    client: &mut FlightSqlServiceClient<Channel>,
    metrics: SocketAddr,
    ns: &str,
    tables: &[TpchTable],
) -> LaneRun {
    let before = Scrape::take(metrics).await;
    let started = Instant::now();
    for table in tables {
        ingest(client, ns, table, None).await;
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    let after = Scrape::take(metrics).await;
    LaneRun::between(&before, &after, LANE_STREAM, wall_seconds, None)
}

async fn sql_client(addr: SocketAddr) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect()
        .await
        .expect("connect to the Flight address");
    FlightSqlServiceClient::new(channel)
}

/// `median (min–max)` of `xs` scaled by `scale`, with `decimals` decimals.
fn spread(xs: &[f64], scale: f64, decimals: usize) -> String {
    let (m, lo, hi) = summary(xs);
    format!(
        "{:.d$} ({:.d$}–{:.d$})",
        m * scale,
        lo * scale,
        hi * scale,
        d = decimals
    )
}

/// TPC-H's 8 tables (`SKADE_MULTI_SF`, default 0.1) into a real server, per run: (a) as
/// ONE Flight SQL transaction, (b) as 8 autocommit ingests — each run into fresh
/// namespaces, the lanes' order alternating between runs. Prints catalog commits, wall
/// time and commit latency per lane, medians (min–max) over `runs`.
pub(crate) async fn multi(runs: usize) {
    let sf: f64 = std::env::var("SKADE_MULTI_SF")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SF);
    let tables = tokio::task::spawn_blocking(move || tpch::tables(sf, tpch::BATCH_ROWS))
        .await
        .expect("generate TPC-H");
    let rows: usize = tables.iter().map(TpchTable::rows).sum();
    let arrow_bytes: usize = tables
        .iter()
        .flat_map(|t| &t.batches)
        .map(RecordBatch::get_array_memory_size)
        .sum();

    let dir = tempfile::tempdir().expect("temp dir");
    let running = skade::start(skade::Config::for_tests(dir.path()))
        .await
        .expect("start the server");
    let mut txn_client = sql_client(running.flight_addr).await;
    let mut auto_client = sql_client(running.flight_addr).await;
    let (mut txn_runs, mut auto_runs) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let txn_ns = format!("tpch_txn_{run}");
        let auto_ns = format!("tpch_auto_{run}");
        if run % 2 == 0 {
            txn_runs
                .push(transaction(&mut txn_client, running.metrics_addr, &txn_ns, &tables).await);
            auto_runs
                .push(autocommit(&mut auto_client, running.metrics_addr, &auto_ns, &tables).await);
        } else {
            auto_runs
                .push(autocommit(&mut auto_client, running.metrics_addr, &auto_ns, &tables).await);
            txn_runs
                .push(transaction(&mut txn_client, running.metrics_addr, &txn_ns, &tables).await);
        }
    }
    running.shutdown_and_wait().await.expect("server shutdown");

    let of = |lane: &[LaneRun], f: fn(&LaneRun) -> f64| lane.iter().map(f).collect::<Vec<f64>>();
    let txn_commits = of(&txn_runs, |r| r.commits);
    let auto_commits = of(&auto_runs, |r| r.commits);
    let txn_syncs = of(&txn_runs, |r| r.file_syncs);
    let auto_syncs = of(&auto_runs, |r| r.file_syncs);
    let txn_wall = of(&txn_runs, |r| r.wall_seconds);
    let auto_wall = of(&auto_runs, |r| r.wall_seconds);
    let end_txn = of(&txn_runs, |r| r.end_txn_seconds.unwrap_or(f64::NAN));
    // One observation per transaction, so its mean is that commit's duration.
    let multi_commit = of(&txn_runs, |r| r.commit.mean_seconds());
    let multi_observed = of(&txn_runs, |r| r.commit.count);
    let single_mean = of(&auto_runs, |r| r.commit.mean_seconds());
    let single_p50 = of(&auto_runs, |r| r.commit.quantile_seconds(0.5));
    let single_observed = of(&auto_runs, |r| r.commit.count);
    let ratio: Vec<f64> = txn_runs
        .iter()
        .zip(&auto_runs)
        .map(|(t, a)| t.commit.mean_seconds() / a.commit.mean_seconds())
        .collect();
    let end_ratio: Vec<f64> = txn_runs
        .iter()
        .zip(&auto_runs)
        .map(|(t, a)| t.end_txn_seconds.unwrap_or(f64::NAN) / a.commit.mean_seconds())
        .collect();
    let wall_ratio: Vec<f64> = txn_wall
        .iter()
        .zip(&auto_wall)
        .map(|(t, a)| t / a)
        .collect();

    println!(
        "multi: TPC-H SF {sf}, 8 tables, {rows} rows, {:.0} MB of Arrow; real server, Flight SQL \
         loopback, one ingest at a time; {runs} runs, medians (min–max)",
        arrow_bytes as f64 / 1e6
    );
    for t in &tables {
        print!("{} {}  ", t.name, t.rows());
    }
    println!();
    println!(
        "| lane | catalog commits (redb fsyncs) | warehouse syncfs | wall s | rows/s | server commit ms (observations) | EndTransaction call ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| (a) one transaction, 8 ingests + COMMIT | {} | {} | {} | {:.0} | {} ({}) | {} |",
        spread(&txn_commits, 1.0, 0),
        spread(&txn_syncs, 1.0, 0),
        spread(&txn_wall, 1.0, 2),
        rows as f64 / summary(&txn_wall).0,
        spread(&multi_commit, 1e3, 1),
        spread(&multi_observed, 1.0, 0),
        spread(&end_txn, 1e3, 1),
    );
    println!(
        "| (b) 8 autocommit ingests | {} | {} | {} | {:.0} | mean {} · p50 ≈ {} ({}) | |",
        spread(&auto_commits, 1.0, 0),
        spread(&auto_syncs, 1.0, 0),
        spread(&auto_wall, 1.0, 2),
        rows as f64 / summary(&auto_wall).0,
        spread(&single_mean, 1e3, 1),
        spread(&single_p50, 1e3, 1),
        spread(&single_observed, 1.0, 0),
    );
    println!(
        "(server commit ms: skade_commit_duration_seconds delta, sum/count, lane=\"multi\" for (a), \
         lane=\"stream\" for (b); p50 ≈ interpolated inside the histogram's buckets)"
    );
    let (tc, ac) = (summary(&txn_commits).0, summary(&auto_commits).0);
    let (ts, as_) = (summary(&txn_syncs).0, summary(&auto_syncs).0);
    let exact = txn_commits.iter().all(|&c| c == 1.0) && auto_commits.iter().all(|&c| c == 8.0);
    println!(
        "multi: catalog commits {tc:.0} vs {ac:.0} (fsyncs {tc:.0} vs {ac:.0}; warehouse syncfs \
         {ts:.0} vs {as_:.0}){}",
        if exact {
            ""
        } else {
            "  NOT 1 vs 8 in every run"
        }
    );
    println!(
        "multi: 8-table commit latency / single-table commit latency = {:.2} (target ≤ 2; \
         server: 8-table commit {:.1} ms, single-table mean {:.1} ms; EndTransaction call \
         {:.1} ms = {:.2}x)",
        summary(&ratio).0,
        summary(&multi_commit).0 * 1e3,
        summary(&single_mean).0 * 1e3,
        summary(&end_txn).0 * 1e3,
        summary(&end_ratio).0,
    );
    println!(
        "multi: wall txn/autocommit = {:.2} (txn {:.2} s, autocommit {:.2} s)",
        summary(&wall_ratio).0,
        summary(&txn_wall).0,
        summary(&auto_wall).0,
    );
}
