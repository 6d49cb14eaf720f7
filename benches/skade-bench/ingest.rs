//! `ingest`: end-to-end Flight DoPut vs the in-process encode ceiling and the Flight
//! loopback transfer alone.

use crate::common::*;
use crate::{sink, tpch};

/// Encodes `groups` on all cores with parquet-rs's default writer properties and zstd(1):
/// the "what a user gets by default" baseline. Returns Parquet bytes written.
fn encode_parquet_defaults(groups: &[Vec<RecordBatch>]) -> usize {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    use rayon::prelude::*;
    groups
        .par_iter()
        .map(|group| {
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .build();
            let mut out = Vec::new();
            let mut writer =
                ArrowWriter::try_new(&mut out, group[0].schema(), Some(props)).expect("writer");
            for b in group {
                writer.write(b).expect("write");
            }
            writer.close().expect("close");
            out.len()
        })
        .sum()
}

async fn ingest_workload(name: &str, batches: Vec<RecordBatch>, runs: usize) {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let bytes = arrow_bytes(&batches) as f64;
    let target = 128 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &dir.path().join("wh"))
        .expect("catalog");
    let ident = TableIdent::new(
        NamespaceIdent::new("bench".into()),
        format!("{name}_encode"),
    );
    let table = write::ensure_table(&catalog, &ident, &batches[0].schema())
        .await
        .expect("table");
    let arrow = write::table_arrow_schema(&table).expect("schema");
    let conformed: Vec<RecordBatch> = batches
        .iter()
        .map(|b| write::conform_batch("bench", b, &arrow).expect("conform"))
        .collect();
    let groups = cut(&conformed, target);
    let raw_groups = cut(&batches, target);

    let (mut defaults, mut ceiling, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    let mut keyed = Vec::new();
    let mut transfer = Vec::new();
    // CPU seconds per row of the encode (a) and of the transfer (c).
    let (mut encode_cpu, mut transfer_cpu) = (Vec::new(), Vec::new());
    let (mut default_size, mut skade_size) = (0, 0);
    for run in 0..runs {
        let g = raw_groups.clone();
        let started = Instant::now();
        default_size = tokio::task::spawn_blocking(move || encode_parquet_defaults(&g))
            .await
            .expect("encode");
        defaults.push(rows as f64 / started.elapsed().as_secs_f64());

        let (started, cpu) = (Instant::now(), cpu_seconds());
        let encoded = write::encode(&table, groups.clone()).await.expect("encode");
        ceiling.push(rows as f64 / started.elapsed().as_secs_f64());
        encode_cpu.push((cpu_seconds() - cpu) / rows as f64);
        skade_size = encoded.iter().map(|f| f.bytes.len()).sum();

        // (c) the transfer alone: the same put into a server that only decodes.
        let sink = sink::start().await;
        let mut client = connect(sink.addr).await;
        let (started, cpu) = (Instant::now(), cpu_seconds());
        let acks = put(&mut client, "sink", batches[0].schema(), batches.clone()).await;
        transfer.push(rows as f64 / started.elapsed().as_secs_f64());
        transfer_cpu.push((cpu_seconds() - cpu) / rows as f64);
        assert_eq!(
            acks.first().map(|a| a.app_metadata.to_vec()),
            Some((rows as u64).to_le_bytes().to_vec()),
            "the sink received every row"
        );
        drop(sink);

        // (b) end to end, and again as an exactly-once producer (writer id + a sequence
        // per batch): each on a fresh server, in alternating order, so neither pays for
        // the other's background work.
        for keyed_lane in [run % 2 == 1, run % 2 == 0] {
            let mut server = Server::start().await;
            let table = format!("{name}_{run}");
            let started = Instant::now();
            let acks = if keyed_lane {
                server
                    .client
                    .add_header("x-skade-writer-id", "bench-writer")
                    .expect("header");
                put_keyed(
                    &mut server.client,
                    &table,
                    batches[0].schema(),
                    batches.clone(),
                    1,
                )
                .await
                .0
            } else {
                put(
                    &mut server.client,
                    &table,
                    batches[0].schema(),
                    batches.clone(),
                )
                .await
            };
            let rate = rows as f64 / started.elapsed().as_secs_f64();
            if keyed_lane {
                keyed.push(rate);
            } else {
                e2e.push(rate);
            }
            assert!(!acks.is_empty());
            server.stop().await;
        }
    }
    let (d, d_min, d_max) = summary(&defaults);
    let (c, c_min, c_max) = summary(&ceiling);
    let (e, e_min, e_max) = summary(&e2e);
    let (k, k_min, k_max) = summary(&keyed);
    let (t, t_min, t_max) = summary(&transfer);
    // Encode and transfer each need CPU; with every core busy the best a put can do is to
    // spend exactly both: cores / (CPU s per row of (a) + CPU s per row of (c)) rows/s.
    let (ea, _, _) = summary(&encode_cpu);
    let (tc, _, _) = summary(&transfer_cpu);
    let bound = (cores() / (ea + tc)).min(c).min(t);
    let mb = |r: f64| r * bytes / rows as f64 / 1e6;
    println!(
        "ingest {name}: {rows} rows, {:.0} MB of Arrow, {runs} runs, medians (min–max)",
        bytes / 1e6
    );
    println!("| lane | rows/s | MB/s | min–max rows/s | Parquet bytes |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| parquet-rs defaults, zstd(1), all cores | {d:.0} | {:.0} | {d_min:.0}–{d_max:.0} | {default_size} |",
        mb(d)
    );
    println!(
        "| (a) skade encode ceiling, all cores | {c:.0} | {:.0} | {c_min:.0}–{c_max:.0} | {skade_size} |",
        mb(c)
    );
    println!(
        "| (b) skade end to end, Flight loopback | {e:.0} | {:.0} | {e_min:.0}–{e_max:.0} | |",
        mb(e)
    );
    println!(
        "| (b′) (b) as an exactly-once producer (writer id + sequences) | {k:.0} | {:.0} | {k_min:.0}–{k_max:.0} | |",
        mb(k)
    );
    println!(
        "| (c) Flight loopback transfer only (server decodes and drops) | {t:.0} | {:.0} | {t_min:.0}–{t_max:.0} | |",
        mb(t)
    );
    println!(
        "| (d) CPU bound of (a) and (c) together on {:.0} cores | {bound:.0} | {:.0} | | |",
        cores(),
        mb(bound)
    );
    println!(
        "ingest {name}: CPU per million rows: encode {:.2} s, transfer {:.2} s",
        ea * 1e6,
        tc * 1e6
    );
    println!(
        "ingest {name}: skade/encode_ceiling = {:.2} (skade {:.2} M rows/s, ceiling {:.2} M rows/s)",
        e / c,
        e / 1e6,
        c / 1e6
    );
    println!(
        "ingest {name}: skade/combined_bound = {:.2} (skade {:.2} M rows/s, bound {:.2} M rows/s; transfer alone {:.2} M rows/s)",
        e / bound,
        e / 1e6,
        bound / 1e6,
        t / 1e6
    );
    println!(
        "ingest {name}: keyed/unkeyed = {:.2} (exactly-once {:.2} M rows/s vs {:.2} M rows/s); target ≥ 0.95: {}",
        k / e,
        k / 1e6,
        e / 1e6,
        if k / e >= 0.95 { "met" } else { "not met" }
    );
    println!(
        "ingest {name}: skade_writer/parquet_defaults = {:.2} (skade encode {:.2} M rows/s, defaults {:.2} M rows/s; files {:.2}x the size)",
        c / d,
        c / 1e6,
        d / 1e6,
        skade_size as f64 / default_size as f64
    );
}

/// The synthetic batches with `ts` moved to spread evenly, in order, over `days` days
/// (an event stream: each batch covers about one or two days).
fn spread_over_days(batches: &[RecordBatch], days: i64) -> Vec<RecordBatch> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let step = (days * 86_400_000_000 / rows.max(1) as i64).max(1);
    let start = 1_700_006_400_000_000; // 2023-11-15T00:00:00Z
    let mut first = 0i64;
    batches
        .iter()
        .map(|b| {
            let n = b.num_rows() as i64;
            let ts = TimestampMicrosecondArray::from(
                (first..first + n)
                    .map(|i| start + i * step)
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC");
            first += n;
            let mut columns = b.columns().to_vec();
            columns[1] = Arc::new(ts);
            RecordBatch::try_new(b.schema(), columns).expect("batch")
        })
        .collect()
}

/// The partitioned lane: the same synthetic stream (`ts` over 30 days) put into a table
/// partitioned by `day(ts)` and into an unpartitioned one, on one server, alternating
/// which goes first; target: partitioned/unpartitioned rows/s ≥ 0.8.
pub(crate) async fn ingest_partitioned(runs: usize) {
    let rows = env_usize("SKADE_INGEST_ROWS", 10_000_000);
    let batches: Vec<RecordBatch> = (0..rows.div_ceil(65_536))
        .map(|i| batch((i * 65_536) as i64, 65_536.min(rows - i * 65_536)))
        .collect();
    use iceberg::Catalog;
    use iceberg::spec::{Transform, UnboundPartitionSpec};
    let batches = spread_over_days(&batches, 30);
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let schema = write::iceberg_schema_for("bench", &batches[0].schema()).expect("schema");
    let ts_id = schema.field_by_name("ts").expect("ts").id;
    let (mut flat, mut parted) = (Vec::new(), Vec::new());
    let mut files = 0;
    for run in 0..runs {
        let mut server = Server::start().await;
        let catalog = server.running.service.catalog.clone();
        let ns = NamespaceIdent::new("bench".into());
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .expect("namespace");
        for (name, spec) in [
            ("flat", UnboundPartitionSpec::builder().build()),
            (
                "by_day",
                UnboundPartitionSpec::builder()
                    .add_partition_field(ts_id, "ts_day", Transform::Day)
                    .expect("spec")
                    .build(),
            ),
        ] {
            let creation = iceberg::TableCreation::builder()
                .name(format!("{name}_{run}"))
                .schema(schema.clone())
                .partition_spec(spec)
                .build();
            catalog.create_table(&ns, creation).await.expect("table");
        }
        let order: [(&str, bool); 2] = if run % 2 == 0 {
            [("flat", false), ("by_day", true)]
        } else {
            [("by_day", true), ("flat", false)]
        };
        for (name, partitioned) in order {
            settle().await;
            let started = Instant::now();
            let acks = put(
                &mut server.client,
                &format!("{name}_{run}"),
                batches[0].schema(),
                batches.clone(),
            )
            .await;
            let rate = rows as f64 / started.elapsed().as_secs_f64();
            assert!(!acks.is_empty());
            if partitioned {
                parted.push(rate);
                let table = catalog
                    .load_table(&TableIdent::new(ns.clone(), format!("{name}_{run}")))
                    .await
                    .expect("load");
                files = table
                    .metadata()
                    .current_snapshot()
                    .and_then(|s| {
                        s.summary()
                            .additional_properties
                            .get("total-data-files")
                            .cloned()
                    })
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
            } else {
                flat.push(rate);
            }
        }
        server.stop().await;
    }
    let (f, f_min, f_max) = summary(&flat);
    let (p, p_min, p_max) = summary(&parted);
    println!("ingest partitioned: {rows} rows, ts over 30 days, {runs} runs, medians (min–max)");
    println!("| lane | rows/s | min–max rows/s | data files |");
    println!("| --- | --- | --- | --- |");
    println!("| unpartitioned | {f:.0} | {f_min:.0}–{f_max:.0} | |");
    println!("| day(ts) | {p:.0} | {p_min:.0}–{p_max:.0} | {files} |");
    println!(
        "ingest partitioned: partitioned/unpartitioned = {:.2} (day(ts) {:.2} M rows/s vs {:.2} M rows/s); target ≥ 0.8: {}",
        p / f,
        p / 1e6,
        f / 1e6,
        if p / f >= 0.8 { "met" } else { "not met" }
    );
}

pub(crate) async fn ingest(runs: usize) {
    let rows = env_usize("SKADE_INGEST_ROWS", 10_000_000);
    let synthetic: Vec<RecordBatch> = (0..rows.div_ceil(65_536))
        .map(|i| batch((i * 65_536) as i64, 65_536.min(rows - i * 65_536)))
        .collect();
    ingest_workload("synthetic", synthetic, runs).await;
    let sf: f64 = std::env::var("SKADE_TPCH_SF")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let lineitem = tokio::task::spawn_blocking(move || tpch::lineitem(sf, tpch::BATCH_ROWS))
        .await
        .expect("lineitem");
    ingest_workload(
        &format!("lineitem_sf{sf}").replace('.', "_"),
        lineitem,
        runs,
    )
    .await;
}
