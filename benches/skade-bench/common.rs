//! Shared pieces of the bench arms: the synthetic table, summaries, env knobs.

#![allow(unused_imports)]

pub(crate) use std::sync::Arc;
pub(crate) use std::time::Instant;

pub(crate) use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
pub(crate) use arrow_flight::encode::FlightDataEncoderBuilder;
pub(crate) use arrow_flight::{FlightClient, FlightDescriptor};
pub(crate) use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
pub(crate) use futures::{StreamExt, TryStreamExt};
pub(crate) use iceberg::table::Table;
pub(crate) use iceberg::{NamespaceIdent, TableIdent};
pub(crate) use skade::catalog::RedbCatalog;
pub(crate) use skade::write::{self, IngestStats, WriteProps};

/// The whole number in environment variable `name`, or `default` when it is unset.
///
/// # Panics
/// When it is set but not a whole number (`1e6`, `0.5`): a typo must not silently run the
/// default size.
pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

pub(crate) fn schema() -> SchemaRef {
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

/// The synthetic table: id int64, ts timestamp[us, UTC], score float64, name utf8 of ~16
/// chars from 1,000 values, flag bool with 5% nulls.
pub(crate) fn batch(first_id: i64, rows: usize) -> RecordBatch {
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
            ids.iter()
                .map(|i| ((i.wrapping_mul(2_654_435_761)) % 1_000_000) as f64 / 7.0)
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            ids.iter()
                .map(|i| format!("customer-{:07}", (i.wrapping_mul(7919)) % 1000))
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            ids.iter()
                .map(|i| (i % 20 != 0).then_some(i % 3 == 0))
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(schema(), columns).expect("batch")
}

/// Median, min and max of `xs` (non-empty).
pub(crate) fn summary(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub(crate) async fn new_table(catalog: &RedbCatalog, name: &str) -> Table {
    let ident = TableIdent::new(NamespaceIdent::new("bench".into()), name.into());
    write::ensure_table(catalog, &ident, &schema())
        .await
        .expect("table")
}

/// p-th percentile of `xs` in the same unit (0 ≤ p ≤ 1).
pub(crate) fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A real skade server (`Config::for_tests`: 127.0.0.1, port 0) on a temp data dir, with a
/// Flight client connected to it over loopback.
pub(crate) struct Server {
    /// The running service; stop it with [`Server::stop`].
    pub(crate) running: skade::Running,
    /// A client on one connection to `running.flight_addr`.
    pub(crate) client: FlightClient,
    /// The data dir, removed when the server is dropped.
    pub(crate) dir: tempfile::TempDir,
}

impl Server {
    /// Starts a server on a new temp data dir and connects a client.
    pub(crate) async fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let running = skade::start(skade::Config::for_tests(dir.path()))
            .await
            .expect("server");
        let client = connect(running.flight_addr).await;
        Server {
            running,
            client,
            dir,
        }
    }

    /// Shuts the server down and waits for it; then removes the data dir.
    pub(crate) async fn stop(self) {
        self.running.shutdown_and_wait().await.expect("shutdown");
        drop(self.dir);
    }
}

/// A Flight client on one new loopback connection to `addr`.
pub(crate) async fn connect(addr: std::net::SocketAddr) -> FlightClient {
    FlightClient::new(
        tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect"),
    )
}

/// Puts `batches` (all of `schema`) to table `bench.<table>` in one DoPut and returns the
/// server's acks once the put is committed.
pub(crate) async fn put(
    client: &mut FlightClient,
    table: &str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Vec<arrow_flight::PutResult> {
    put_stream(
        client,
        table,
        schema,
        futures::stream::iter(batches.into_iter().map(Ok)),
    )
    .await
}

/// [`put`] of the batches `batches` yields as the server takes them: one DoPut to
/// `bench.<table>`, returning the acks once the put is committed.
pub(crate) async fn put_stream(
    client: &mut FlightClient,
    table: &str,
    schema: SchemaRef,
    batches: impl futures::Stream<Item = Result<RecordBatch, arrow_flight::error::FlightError>>
    + Send
    + 'static,
) -> Vec<arrow_flight::PutResult> {
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            "bench".into(),
            table.into(),
        ])))
        .build(batches);
    client
        .do_put(data)
        .await
        .expect("put")
        .try_collect()
        .await
        .expect("acks")
}

/// [`put`] as an exactly-once producer: `client` carries the `x-skade-writer-id`
/// header (set it with `add_header`), and each record batch message carries its
/// sequence, counting from `first_sequence`. Returns the acks and the next sequence.
pub(crate) async fn put_keyed(
    client: &mut FlightClient,
    table: &str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    first_sequence: u64,
) -> (Vec<arrow_flight::PutResult>, u64) {
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = sent.clone();
    // Encoded lazily, as `put` does, so both lanes overlap the client's encode with the
    // server's work. The first message is the schema; every other one is a record batch.
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            "bench".into(),
            table.into(),
        ])))
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .enumerate()
        .map(move |(i, message)| {
            message.map(|mut message| {
                if i > 0 {
                    let sequence = first_sequence + i as u64 - 1;
                    message.app_metadata = sequence.to_string().into_bytes().into();
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                message
            })
        });
    let acks = client
        .do_put(data)
        .await
        .expect("put")
        .try_collect()
        .await
        .expect("acks");
    let next = first_sequence + sent.load(std::sync::atomic::Ordering::Relaxed);
    (acks, next)
}

/// CPU time this process has used so far (user + system, all threads), in seconds.
pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Cores this process may run on.
pub(crate) fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// Writes back every dirty page of every filesystem (`sync(2)`), off the runtime. Arms
/// call it before a measured lane so skade's `syncfs` is not charged for pages another
/// lane or arm left dirty.
pub(crate) async fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    tokio::task::spawn_blocking(|| unsafe { libc::sync() })
        .await
        .expect("sync task");
}

/// Arrow bytes of `batches`: the slices their columns hold (as the streaming put counts
/// them against `--target-file-size`).
pub(crate) fn arrow_bytes(batches: &[RecordBatch]) -> usize {
    batches
        .iter()
        .flat_map(|b| b.columns())
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum()
}

/// Cuts batches into groups of about `target` Arrow bytes (the last may be smaller), as
/// the streaming put cuts data files.
pub(crate) fn cut(batches: &[RecordBatch], target: usize) -> Vec<Vec<RecordBatch>> {
    let mut groups = vec![Vec::new()];
    let mut bytes = 0;
    for b in batches {
        groups.last_mut().expect("group").push(b.clone());
        bytes += arrow_bytes(std::slice::from_ref(b));
        if bytes >= target {
            groups.push(Vec::new());
            bytes = 0;
        }
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// `files` groups of one synthetic batch of `rows` rows each (ids consecutive),
/// conformed to `table`: one data file per group in the pipelined lanes.
pub(crate) fn file_groups(
    table: &iceberg::table::Table,
    files: usize,
    rows: usize,
) -> Vec<Vec<arrow_array::RecordBatch>> {
    let arrow = skade::write::table_arrow_schema(table).expect("schema");
    (0..files)
        .map(|f| {
            let b = batch((f * rows) as i64, rows);
            vec![skade::write::conform_batch("bench", &b, &arrow).expect("conform")]
        })
        .collect()
}
