//! Shared test fixture: a real skade server on 127.0.0.1:0 with a temp data dir, a real
//! Flight client, and helpers to build and read batches. [`postgres`]: a private
//! PostgreSQL cluster for the shared-catalog tests.
#![allow(dead_code, unreachable_pub)]

pub mod foreign;
pub mod postgres;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor, PutResult};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use skade::config::Config;
use skade::proto::CommitAck;
use skade::{Running, start};
use tonic::transport::Channel;

/// A running server and the temp dir it owns. Stop it with [`TestServer::stop`].
pub struct TestServer {
    pub running: Running,
    pub dir: Arc<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a server with the default config on a fresh temp dir.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Starts a server on a fresh temp dir after `tune` adjusts the config.
    pub async fn start_with(tune: impl FnOnce(&mut Config)) -> Self {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        Self::start_in(dir, tune).await
    }

    /// Starts a server on an existing dir (a restart).
    pub async fn start_in(dir: Arc<tempfile::TempDir>, tune: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config::for_tests(dir.path());
        tune(&mut config);
        let running = start(config).await.expect("server starts");
        Self { running, dir }
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn warehouse(&self) -> PathBuf {
        self.dir.path().join("warehouse")
    }

    /// The table `path` (namespace levels, then the table name) as the server's catalog
    /// has it now. Panics when it does not exist.
    pub async fn table(&self, path: &[&str]) -> iceberg::table::Table {
        use iceberg::Catalog;
        let ident = iceberg::TableIdent::from_strs(path).expect("table identifier");
        self.running
            .service
            .catalog
            .load_table(&ident)
            .await
            .expect("table loads")
    }

    /// A Flight client connected to this server.
    pub async fn client(&self) -> FlightClient {
        let channel = Channel::from_shared(format!("http://{}", self.running.flight_addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        FlightClient::new(channel)
    }

    /// GETs `path` on the metrics address and returns the body.
    pub async fn http_get(&self, path: &str) -> (u16, String) {
        http_get(self.running.metrics_addr, path).await
    }

    /// Sends a body-less `method` request for `path` to the metrics address; returns the
    /// status and the body.
    pub async fn http_request(&self, method: &str, path: &str) -> (u16, String) {
        http_request(self.running.metrics_addr, method, path).await
    }

    /// Shuts the server down and returns the temp dir for a restart.
    pub async fn stop(self) -> Arc<tempfile::TempDir> {
        self.running
            .shutdown_and_wait()
            .await
            .expect("clean shutdown");
        self.dir
    }
}

/// A minimal HTTP/1.0 GET over a TCP stream.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http_request(addr, "GET", path).await
}

/// A minimal body-less HTTP/1.0 request over a TCP stream.
pub async fn http_request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    http_request_with(addr, method, path, &[]).await
}

/// As [`http_request`], with extra request headers.
pub async fn http_request_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    http_send(addr, method, path, headers, "").await
}

/// A minimal HTTP/1.0 request with a JSON `body` (none when empty) and extra headers.
pub async fn http_send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect http");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let content = if body.is_empty() {
        String::new()
    } else {
        format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        )
    };
    let request = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}{content}\r\n{body}");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of an unlabelled metric line `name value` in a Prometheus text body.
pub fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|line| {
            let (n, v) = line.split_once(' ')?;
            (n == name).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// The synthetic schema: id int64, ts timestamp[us, UTC], score float64, name utf8,
/// flag bool (nullable).
pub fn synthetic_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("score", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
    ]))
}

/// `rows` synthetic rows with ids starting at `first_id`; every 20th flag is null.
pub fn synthetic_batch(first_id: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (first_id..first_id + rows as i64).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(
            TimestampMicrosecondArray::from(
                ids.iter()
                    .map(|i| 1_700_000_000_000_000 + i * 1_000)
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(Float64Array::from(
            ids.iter().map(|i| (*i as f64) * 0.5).collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            ids.iter()
                .map(|i| format!("name-{:04}", i % 1000))
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            ids.iter()
                .map(|i| (i % 20 != 0).then_some(i % 2 == 0))
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(synthetic_schema(), columns).expect("batch")
}

/// Pushes `batches` to `path` with DoPut; returns the decoded acks in order.
pub async fn put(
    client: &mut FlightClient,
    path: &[&str],
    batches: Vec<RecordBatch>,
) -> Result<Vec<CommitAck>, arrow_flight::error::FlightError> {
    let schema = batches
        .first()
        .map(|b| b.schema())
        .unwrap_or_else(synthetic_schema);
    put_with_schema(client, path, schema, batches).await
}

/// Pushes `batches` (possibly none) with an explicit schema.
pub async fn put_with_schema(
    client: &mut FlightClient,
    path: &[&str],
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<Vec<CommitAck>, arrow_flight::error::FlightError> {
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(descriptor))
        .build(futures::stream::iter(batches.into_iter().map(Ok)));
    let results: Vec<PutResult> = client.do_put(stream).await?.try_collect().await?;
    Ok(results
        .iter()
        .map(|r| CommitAck::decode(r.app_metadata.clone()).expect("CommitAck"))
        .collect())
}

/// The `skade.v1.WriterMarks` action's JSON reply for `writer`.
pub async fn writer_marks_reply(client: &mut FlightClient, writer: &str) -> serde_json::Value {
    let reply: Vec<bytes::Bytes> = client
        .do_action(arrow_flight::Action::new(
            "skade.v1.WriterMarks",
            writer.to_string(),
        ))
        .await
        .expect("WriterMarks")
        .try_collect()
        .await
        .expect("WriterMarks reply");
    serde_json::from_slice(&reply[0]).expect("WriterMarks JSON")
}

/// Reads a table back through GetFlightInfo + DoGet.
pub async fn get(client: &mut FlightClient, path: &[&str]) -> Vec<RecordBatch> {
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    let info = client
        .get_flight_info(descriptor)
        .await
        .expect("flight info");
    let ticket = info.endpoint[0].ticket.clone().expect("ticket");
    let stream: FlightRecordBatchStream = client.do_get(ticket).await.expect("do_get");
    stream.try_collect().await.expect("batches")
}

/// Concatenates batches and drops schema metadata, for row-by-row comparison.
pub fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| {
                    // "UTC" and "+00:00" name the same zone; format both as the offset.
                    let c = match c.data_type() {
                        DataType::Timestamp(unit, Some(_)) => {
                            arrow_cast::cast(c, &DataType::Timestamp(*unit, Some("+00:00".into())))
                                .expect("cast")
                        }
                        _ => c.clone(),
                    };
                    arrow_cast::display::ArrayFormatter::try_new(c.as_ref(), &Default::default())
                        .expect("formatter")
                        .value(row)
                        .to_string()
                })
                .collect();
            out.push(cells.join("|"));
        }
    }
    out
}

/// Row count over batches.
pub fn count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// Every file under `dir` (recursively) whose name `matches` accepts.
pub fn files_where(dir: &Path, matches: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if matches(&e.file_name().to_string_lossy()) {
                out.push(p);
            }
        }
    }
    out
}

/// How many files under `dir` (recursively) have a name `matches` accepts.
pub fn files_named(dir: &Path, matches: impl Fn(&str) -> bool) -> usize {
    files_where(dir, matches).len()
}

/// Every `*.parquet` file under `dir`.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    files_where(dir, |name| name.ends_with(".parquet"))
}

/// Awaits `f` with a timeout so a hang fails the test instead of blocking CI.
pub async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(secs), f)
        .await
        .expect("timed out")
}

/// A TCP relay to `target` on 127.0.0.1:0. Aborting the returned task closes every relayed
/// connection at once — to the server it looks like a client process that was killed.
pub async fn relay(
    target: std::net::SocketAddr,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind relay");
    let addr = listener.local_addr().expect("relay addr");
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            connections.spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, task)
}

/// A Flight client connected to `addr`.
pub async fn client_at(addr: std::net::SocketAddr) -> FlightClient {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    FlightClient::new(channel)
}

/// A real redb catalog in a fresh temp dir, its warehouse under the same dir.
pub struct CatalogDir {
    pub dir: tempfile::TempDir,
    pub catalog: Arc<skade::catalog::RedbCatalog>,
}

impl CatalogDir {
    pub fn warehouse(&self) -> PathBuf {
        self.dir.path().join("warehouse")
    }
}

/// Opens a catalog on a fresh temp dir.
pub fn open_catalog() -> CatalogDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = skade::catalog::RedbCatalog::open(
        &dir.path().join("catalog.redb"),
        &dir.path().join("warehouse"),
    )
    .expect("catalog");
    CatalogDir {
        dir,
        catalog: Arc::new(catalog),
    }
}

/// Loads or creates `ns.name` with the synthetic schema.
pub async fn synthetic_table(
    catalog: &skade::catalog::RedbCatalog,
    ns: &str,
    name: &str,
) -> iceberg::table::Table {
    let ident = iceberg::TableIdent::from_strs([ns, name]).expect("ident");
    skade::write::ensure_table(catalog, &ident, &synthetic_schema())
        .await
        .expect("table")
}

/// `rows` synthetic rows from `first_id`, conformed to `table`'s schema.
pub fn conformed(table: &iceberg::table::Table, first_id: i64, rows: usize) -> RecordBatch {
    let arrow = skade::write::table_arrow_schema(table).expect("schema");
    skade::write::conform_batch("test", &synthetic_batch(first_id, rows), &arrow).expect("conform")
}

/// Every row of `table` at `snapshot` (the current snapshot when `None`), via iceberg's
/// own scan.
pub async fn scan(table: &iceberg::table::Table, snapshot: Option<i64>) -> Vec<RecordBatch> {
    let mut builder = table.scan();
    if let Some(id) = snapshot {
        builder = builder.snapshot_id(id);
    }
    builder
        .build()
        .expect("scan")
        .to_arrow()
        .await
        .expect("arrow stream")
        .try_collect()
        .await
        .expect("batches")
}

/// A Flight SQL client connected to `server`.
pub async fn sql_client(
    server: &TestServer,
) -> arrow_flight::sql::client::FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    arrow_flight::sql::client::FlightSqlServiceClient::new(channel)
}

/// A bulk ingest of `ns.table` (created when missing, appended otherwise), inside the
/// transaction `txn` when given.
pub fn ingest_cmd(
    ns: &str,
    table: &str,
    txn: Option<&bytes::Bytes>,
) -> arrow_flight::sql::CommandStatementIngest {
    use arrow_flight::sql::{TableDefinitionOptions, TableExistsOption, TableNotExistOption};
    arrow_flight::sql::CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create as i32,
            if_exists: TableExistsOption::Append as i32,
        }),
        table: table.to_string(),
        schema: Some(ns.to_string()),
        catalog: None,
        temporary: false,
        transaction_id: txn.cloned(),
        options: Default::default(),
    }
}

/// The code and message of a Flight error that must be a gRPC status.
pub fn status_of(err: arrow_flight::error::FlightError) -> (tonic::Code, String) {
    match err {
        arrow_flight::error::FlightError::Tonic(status) => {
            (status.code(), status.message().to_string())
        }
        other => panic!("not a gRPC status: {other}"),
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound, read, released): only for
/// what must know a port before a process binds it (a second server on the same ports,
/// an endpoint nothing listens on). A server the fixture starts binds port 0 instead and
/// says what it bound ([`Binary::serve`]).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The real `skade` binary, started by [`Binary::serve`] with JSON logs on loopback
/// port 0 (the addresses it bound read back from its "serving" event); its stderr lines
/// are collected until it exits.
pub struct Binary {
    pub child: std::process::Child,
    pub flight: std::net::SocketAddr,
    pub metrics: std::net::SocketAddr,
    lines: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Binary {
    /// `skade serve --log-format json` on `data_dir` with `RUST_LOG=rust_log` (which must
    /// let `skade`'s info events through) and `extra` flags; waits until `/healthz`
    /// answers.
    pub async fn serve(data_dir: &Path, rust_log: &str, extra: &[&str]) -> Self {
        Self::serve_with_env(data_dir, rust_log, extra, &[]).await
    }

    /// As [`Self::serve`], with `env` added to the process's environment.
    pub async fn serve_with_env(
        data_dir: &Path,
        rust_log: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_skade"))
            .args(["serve", "--log-format", "json", "--data-dir"])
            .arg(data_dir)
            .args([
                "--flight-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .args(extra)
            .env("RUST_LOG", rust_log)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn skade");
        let stderr = child.stderr.take().expect("stderr");
        let (serving, bound) = std::sync::mpsc::channel();
        let lines = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line)
                    && message_of(&event) == "serving"
                {
                    let addr = |key: &str| event[key].as_str().map(str::to_string);
                    let _ = serving.send((addr("flight_addr"), addr("metrics_addr")));
                }
                lines.push(line);
            }
            lines
        });
        let (flight, metrics) = bound
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the server's serving event");
        let parse = |addr: Option<String>| -> std::net::SocketAddr {
            addr.expect("a bound address")
                .parse()
                .expect("a socket address")
        };
        let binary = Self {
            child,
            flight: parse(flight),
            metrics: parse(metrics),
            lines: Some(lines),
        };
        binary.wait_healthy().await;
        binary
    }

    async fn wait_healthy(&self) {
        let started = std::time::Instant::now();
        loop {
            if tokio::net::TcpStream::connect(self.metrics).await.is_ok()
                && http_get(self.metrics, "/healthz").await.0 == 200
            {
                return;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "skade never became healthy"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// SIGTERM, waits for a clean exit 0, and returns every stderr line parsed as JSON.
    pub fn stop(mut self) -> Vec<serde_json::Value> {
        self.signal(libc::SIGTERM);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "exit status after SIGTERM: {status}");
        self.lines
            .take()
            .expect("lines")
            .join()
            .expect("stderr reader")
            .iter()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
            })
            .collect()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `message` of a JSON log event.
pub fn message_of(event: &serde_json::Value) -> &str {
    event["message"].as_str().unwrap_or_default()
}

/// Opens a DoPut stream of the synthetic schema to `path` that stays open: send batches on
/// the returned sender (dropping it ends the stream normally); the server's results
/// (acks, then the end or a status) arrive on the returned stream.
pub async fn open_stream(
    client: &mut FlightClient,
    path: &[&str],
) -> (
    tokio::sync::mpsc::Sender<RecordBatch>,
    futures::stream::BoxStream<'static, Result<PutResult, arrow_flight::error::FlightError>>,
) {
    let (batch_tx, batch_rx) = tokio::sync::mpsc::channel(4);
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(
            path.iter().map(|s| s.to_string()).collect(),
        )))
        .build(tokio_stream::wrappers::ReceiverStream::new(batch_rx).map(Ok));
    let results = client.do_put(data).await.expect("open the put");
    (batch_tx, results.boxed())
}
